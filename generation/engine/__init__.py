"""The simulated vLLM engine: one process, one queue, one set of counters.

    simulator       ``Simulator``: validation against the context, admission, the waiting
                    queue, running slots, the token stream of each sequence
    request         ``GenerationRequest`` / ``Sequence``: what the adapters hand the engine
    latency         ``LatencyModel``: TTFT, inter-token latency, jitter, load factor
    token_schedule  ``TokenSchedule``: a stream's tokens at a constant inter-token latency
    lora            ``LoraRegistry``: registered adapters and the ``--max-loras`` slots
"""
