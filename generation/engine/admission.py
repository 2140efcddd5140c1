"""vLLM 0.34's admission limits, ``--max-num-queued-reqs`` and ``--max-num-queued-tokens``
(``vllm/v1/engine/async_llm.py`` ``AsyncLLM.check_admission``, called by the serving classes'
``_preflight(request.n)`` in vLLM's API server before the engine sees a request; its pooling
routes do not call it)."""
from __future__ import annotations

from generation.errors import MaxQueuedTokens, QueueOverflow


def check_admission(sim, n: int) -> None:
    """Refuse a request of ``n`` choices with 503 (``QueueOverflow``) when ``n`` more would put
    more than ``--max-num-queued-reqs`` sequences in flight (waiting or running; ``n`` whatever
    the request's number of prompts, as vLLM counts it), or (``MaxQueuedTokens``) while the
    prompt tokens of the sequences still in prefill (waiting, or running before their first
    token: the whole prompt, vLLM's conservative count) reach ``--max-num-queued-tokens``.  Each
    refusal counts in ``vllm:admission_rejections{reason}``.  ``sim``: the
    :class:`~generation.engine.simulator.Simulator` (its step engine's scheduler in step mode)."""
    cfg = sim.config
    engine = sim.engine
    if cfg.max_num_queued_reqs is not None:
        live = (engine.waiting_count() + len(engine.scheduler.running) if engine is not None
                else sim.running + len(sim.waiting))
        if live + n > cfg.max_num_queued_reqs:
            raise sim.metrics.refused(QueueOverflow(), "max_num_queued_reqs")
    if cfg.max_num_queued_tokens is not None:
        # running totals, kept where requests join and leave the queue and emit their first token
        # (Scheduler.prefill_tokens, Simulator.prefill_tokens): O(1), not O(queue), per arrival
        tokens = (engine.pending_tokens + engine.scheduler.prefill_tokens if engine is not None
                  else sim.prefill_tokens)
        if tokens >= cfg.max_num_queued_tokens:
            raise sim.metrics.refused(MaxQueuedTokens(), "max_num_queued_tokens")
