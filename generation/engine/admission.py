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
    :class:`~generation.engine.simulator.Simulator` (its step engine's scheduler in step mode);
    behind one data-parallel endpoint (``sim.dp_peers``), every engine's requests count."""
    cfg = sim.config
    sims = sim.dp_peers or (sim,)        # one API server over DP engines counts them all, as vLLM's
    if cfg.max_num_queued_reqs is not None:
        live = sum(_requests(s) for s in sims)
        if live + n > cfg.max_num_queued_reqs:
            raise sim.metrics.refused(QueueOverflow(), "max_num_queued_reqs")
    if cfg.max_num_queued_tokens is not None:
        if sum(_prefill_tokens(s) for s in sims) >= cfg.max_num_queued_tokens:
            raise sim.metrics.refused(MaxQueuedTokens(), "max_num_queued_tokens")


def queue_counts(sim) -> tuple[int, int]:
    """``(waiting, running)`` requests of one engine, as ``/metrics`` reports them: the step
    engine's queue (its frontend delay included) and batch, else the simulator's queue and slots.
    What the admission limits, the ORCA header, gRPC's ``GetLoads`` and the DP balancer read."""
    engine = sim.engine
    if engine is not None:
        return engine.waiting_count(), len(engine.scheduler.running)
    return len(sim.waiting), sim.running


def _requests(sim) -> int:
    """Requests waiting or running on one engine."""
    return sum(queue_counts(sim))


def _prefill_tokens(sim) -> int:
    """Prompt tokens of one engine's requests still in prefill: running totals, kept where requests
    join and leave the queue and emit their first token (Scheduler.prefill_tokens,
    Simulator.prefill_tokens): O(1), not O(queue), per arrival."""
    engine = sim.engine
    return engine.pending_tokens + engine.scheduler.prefill_tokens if engine is not None else sim.prefill_tokens


def admit_spread(sim, seqs: list, now: float, spread) -> None:
    """A request's sequences behind a data-parallel endpoint, each an engine request of its own
    (a choice of ``n`` > 1, a prompt of a list, a conversation of a batch) placed as vLLM's DP
    client places each (``AsyncLLM.add_request`` fans ``n`` out into child requests and the
    serving classes call ``generate`` per prompt; ``DPLBAsyncMPClient`` picks an engine for
    every one): the first stays on ``sim`` (the engine the endpoint picked for the request),
    each further one goes to ``spread()``'s simulator (``Sequence.owner`` when not ``sim``:
    its runs, aborts and metrics are that engine's).  All or nothing: a refusal
    (QueueFullError) takes back what other engines admitted."""
    groups = {sim: [seqs[0]]}
    for seq in seqs[1:]:
        groups.setdefault(spread(), []).append(seq)
    admitted = []
    try:
        for engine, group in groups.items():
            if engine is not sim:
                for seq in group:
                    seq.owner = engine
            engine.admit_here(group, now)
            admitted.append((engine, group))
    except BaseException:
        for engine, group in admitted:
            for seq in group:
                engine.abort(seq, record=False)
        raise
