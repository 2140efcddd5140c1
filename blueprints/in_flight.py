"""The requests in flight, as vLLM's engine-operation routes act on them: abort them
(``/abort_requests``, ``/pause``, ``/sleep``, ``/checkpoint/prepare`` with mode ``abort``; how the
answers end: :mod:`blueprints.engine_ops`) and pause the scheduler over them
(:func:`pause_scheduler`).  Imports no blueprint, so that :mod:`blueprints.health` (``/sleep``),
:mod:`blueprints.engine_ops` and :mod:`blueprints.rl` share it."""
from __future__ import annotations

from time import monotonic

import gevent

from generation.engine.request import SeqState

WAIT_POLL = 0.005              # seconds between looks at the requests running (a ``wait`` pause)


# ---- requests in flight ----------------------------------------------------------------------------

def _in_flight(sim) -> list:
    """The sequences running or waiting (the step engine's, those in its frontend delay too,
    else the simulator's)."""
    engine = sim.engine
    if engine is not None:
        return [r.seq for r in engine.in_flight() if r.seq is not None]
    return [*sim.running_seqs, *sim.waiting]


def external_id(seq) -> str:
    """vLLM's external request id of ``seq``'s engine request, what ``/abort_requests`` and
    ``/inference/v1/abort_requests`` match (``OutputProcessor.abort_requests`` with
    ``internal=False``): ``chatcmpl-<id>`` for a chat, ``cmpl-<id>-<i>`` for a completion's
    prompt ``i``, ... (:attr:`~generation.engine.request.GenerationRequest.external_ids`); the
    request's own id where the API names none (gRPC's, a realtime session's).  ``n`` choices of
    one prompt share it, as vLLM's children their parent's."""
    req = seq.request
    ids = req.external_ids
    return ids[seq.prompt_index] if seq.prompt_index < len(ids) else req.request_id


def abort_count(seqs) -> int:
    """vLLM's count of an abort-all (the RL ``/abort_requests`` without ids): its request
    states (one per choice) and its parallel-sampling parents (one per prompt of ``n`` > 1)."""
    parents = {(id(s.request), s.prompt_index) for s in seqs if s.request.n > 1}
    return len(seqs) + len(parents)


def _at_engine(sim) -> list:
    """:func:`_in_flight` less the step engine's requests still in the modelled API server's
    delay: what a sleep's abort reaches.  vLLM 0.34's ``EngineCore.sleep`` aborts what its
    scheduler holds (``pause_scheduler``: ``scheduler.finish_requests(None, FINISHED_ABORTED)``);
    a request the API server has not handed over yet reaches the engine core after the sleep
    (its input queue is in order) and is queued like any request sent while asleep (a sleep
    leaves ``reject_new_requests`` alone), to run after the wake-up."""
    engine = sim.engine
    if engine is None:
        return _in_flight(sim)
    delayed = engine.delayed
    return [r.seq for r in engine.in_flight() if r.seq is not None and r not in delayed]


def _running(sim) -> bool:
    """Whether a request is scheduled (running): what a ``wait`` pause drains.  vLLM's PAUSED_NEW
    counts the running requests only (``Scheduler.get_num_unfinished_requests``): the ones still
    queued stay queued, for after the resume."""
    engine = sim.engine
    if engine is not None:
        return bool(engine.scheduler.running)
    return bool(sim.running_seqs)


def pause_scheduler(sim, mode: str, reject_new: bool) -> None:
    """vLLM 0.34's ``EngineCoreProc.pause_scheduler`` as ``/pause`` (``pause_generation``:
    ``reject_new``) and ``/sleep`` (not: new requests are queued) use it: the scheduler's pause
    state is set (:meth:`~generation.engine.engine_state.EngineState.pause_scheduler`), then
    ``abort`` aborts every request in flight (their answers end as :func:`_abort`'s; a sleep's,
    only those the engine holds, :func:`_at_engine`), ``wait``
    returns once the running ones have finished, ``keep`` at once.  Clearing caches is the
    caller's, after this returns (vLLM's ``_finish_pause``)."""
    sim.pause_scheduler(mode)
    if reject_new and mode != "keep":
        sim.reject_new_requests = True               # PAUSED_NEW plus refusal: a 503 per new request
    if mode == "abort":
        _abort(sim, _in_flight(sim) if reject_new else _at_engine(sim))
    elif mode == "wait":
        while _running(sim):
            gevent.sleep(WAIT_POLL)


def _abort(sim, seqs) -> int:
    """Abort ``seqs`` now, as vLLM's engine aborts requests: each one's request is marked
    ``aborted_by_server``, so that its answer still finishes (``finish_reason`` ``abort``, see the
    module docstring) where a client that left gets nothing more; returns how many.

    A sequence that has made its last token is left to finish as it is: vLLM's engine finished
    that request in the step that made the token (its final output, ``length`` or ``stop``, is
    what the client reads), so an abort finds nothing.  In clock mode the hub sends a stream's
    last chunk, then ends the stream up to ``FINISH_WITHIN`` later (server/sse_emitter.py): an
    abort in between counted the request ``abort`` in the metrics while its client had read
    ``finish_reason: "length"``."""
    now, itl = monotonic(), sim.config.inter_token_latency
    seqs = [s for s in seqs if not (s.state == SeqState.RUNNING and s.ids and s.made_tokens(itl, now) >= len(s.ids))]
    for s in seqs:
        s.request.aborted_by_server = True
    sim.cancel(seqs)
    return len(seqs)
