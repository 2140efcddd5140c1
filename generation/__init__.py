"""The simulator core: tokenizer, response sources, lengths, latency, scheduler, metrics.

Nothing here imports Flask; blueprints call into :class:`generation.engine.Simulator`.
"""
