"""The default latency model's keep pause: the running requests stop where they are and go on
after the resume, their remaining tokens later by the time paused.

vLLM 0.34's scheduler in ``PAUSED_ALL`` (``/pause?mode=keep``, ``/sleep?mode=keep``, a keep
checkpoint prepare: ``EngineCore.pause_scheduler``) plans no step, so a running request emits
nothing until ``set_pause_state(UNPAUSED)`` (``/resume``, the full ``/wake_up``), then continues.
The step engine does so by planning no step (``StepEngine.set_pause_state``); here, where each
request's token times are laid out when it starts, :func:`freeze` stops every running sequence's
waits and :func:`thaw` moves what is left of its timeline by the pause:

* a :class:`~generation.engine.token_schedule.TokenSchedule` being emitted (``seq.schedule``):
  its ``first`` moves, and its driver (the hub's emitter, or the greenlet's
  :func:`~generation.engine.token_schedule.scheduled_tokens`) is stopped, then re-armed.  Nothing
  is added to a token's path: a schedule is moved once per pause;
* any other wait (the first token's, a token of a varying latency, a stream interval's group, a
  non-streamed answer's end): ``seq.shift`` holds the pause not yet added to the deadline
  :meth:`Simulator.run` waits for; :func:`sleep` and the emitter's float deadline wait that much
  longer, and ``Simulator._wait_until`` adds it to the generator's own ``target``;
* ``seq.lost`` (and ``seq.frozen`` while frozen): the time paused, out of the tokens a sequence
  had made when it is aborted (:meth:`~generation.engine.request.Sequence.made_tokens`).

The inter-token latency and time-to-first-token metrics count the pause, as vLLM's do (they are
wall times between outputs); the emission lag does not.
"""
from __future__ import annotations

from time import monotonic

from gevent.hub import Waiter, get_hub

from .request import ClientDisconnected, SeqState

RETIME = object()          # what a sleeping greenlet is woken with when its deadline moved


def freeze(sim) -> None:
    """Stop the running sequences of ``sim`` (the default model: ``sim.engine`` is None) now."""
    if sim.frozen_at is not None:
        return
    now = sim.frozen_at = monotonic()
    for seq in list(sim.running_seqs):
        if seq.state == SeqState.RUNNING and not seq.frozen:
            seq.frozen = now
            _wake(seq, None)


def thaw(sim) -> None:
    """Let the sequences :func:`freeze` stopped go on, their timelines later by the pause."""
    if sim.frozen_at is None:
        return
    sim.frozen_at = None
    now = monotonic()
    for seq in list(sim.running_seqs):
        if not seq.frozen:
            continue
        delta = now - seq.frozen
        seq.frozen = 0.0
        if seq.first_token_at:                  # (a pause before it is the first token's wait)
            seq.lost += delta
        schedule = seq.schedule
        if schedule is not None:
            schedule.first += delta
        else:
            seq.shift += delta
        _wake(seq, delta)


def _wake(seq, delta) -> None:
    ev = seq.event
    if ev is None:
        return
    retime = getattr(ev, "retime", None)        # server.sse_emitter.HubEmitter
    if retime is not None:
        retime(delta)
    elif isinstance(ev, Waiter):                # a greenlet in sleep()
        get_hub().loop.run_callback(ev.switch, RETIME)


def sleep(seq, until: float) -> None:
    """Sleep until ``monotonic() >= until`` plus the pause not yet added to it (``seq.shift``),
    never while ``seq`` is frozen; ``Simulator.cancel`` can cut it short (the request is then
    aborted and ClientDisconnected raised).

    libev starts a timer from the loop's cached time, which lags the real clock after CPU
    work: a plain ``gevent.sleep(d)`` can wake several ms early under load (issue 8).  So the
    loop's clock is refreshed first, and the deadline re-checked on waking."""
    hub = get_hub()
    loop = hub.loop
    while True:
        if seq.state == SeqState.ABORTED:     # also when the deadline has already passed
            raise ClientDisconnected()
        if seq.frozen:                        # until thaw() wakes it
            waiter = seq.event = Waiter(hub)
            try:
                waiter.get()
            finally:
                seq.event = None
            continue
        loop.update_now()
        delay = until + seq.shift - monotonic()
        if delay <= 0:
            return
        timer = loop.timer(delay)
        waiter = Waiter(hub)
        seq.event = waiter
        timer.start(waiter.switch, None)
        try:
            waiter.get()
        finally:
            timer.close()
            seq.event = None
