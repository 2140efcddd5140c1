"""A stream's tokens at a constant inter-token latency, emitted without resuming generators.
"""
from __future__ import annotations

import time


from .request import Sequence
from .scheduler import EngineRequest
from .stream_interval import ready

monotonic = time.monotonic
DONE = EngineRequest.DONE

class TokenSchedule:
    """Tokens ``next..stop-1`` of ``seq`` at a constant inter-token latency: token ``k`` is due
    at :meth:`deadline` ``(k) = first + (k - start) * itl`` (:func:`time.monotonic` seconds).

    :meth:`Simulator.run` with ``deadlines`` yields one instead of a deadline per token when the
    inter-token latency is a constant, so that its driver emits the tokens without resuming the
    engine's and the renderer's generators per token (issue 13).  The renderer sets
    :attr:`render` (``k -> bytes``, the token's chunk); the driver calls :meth:`due` at each
    deadline, sends what it returns, and resumes the generator once :attr:`next` reaches
    :attr:`stop` (or after :meth:`Simulator.cancel`, which it then raises as ClientDisconnected).

    A schedule may start at token 0 (``Simulator.run``'s ``first_in_schedule``): its driver then
    emits the first token too, and :meth:`first_token` replaces that token's inter-token latency
    observation (it has none: its time is the TTFT).

    An ``/admin/config`` change of the latencies (docs/engine.md 3.7: in-flight requests draw
    from the current values) cuts the schedule short at the next token: :meth:`due` sets
    ``stop = next`` and returns None, and the generator goes on per token.
    """
    __slots__ = ("seq", "start", "next", "stop", "first", "itl", "render", "prev", "lag", "itl_obs",
                 "latency", "config_values", "engine", "lag_n", "interval", "render_span", "on_first", "group")

    def __init__(self, seq: Sequence, start: int, stop: int, first: float, itl: float, prev: float,
                 metrics, latency):
        self.seq = seq
        self.start = self.next = start
        self.stop = stop
        self.first = first
        self.itl = itl
        self.prev = prev              # when the previous token went out (the ITL metric's origin)
        self.lag = metrics.token_lag
        self.itl_obs = metrics.itl.observe
        self.render = None
        self.interval = 1             # step mode: the stream interval (emitted)
        self.render_span = None       # (start, stop) -> bytes: tokens start..stop-1 as one chunk (interval > 1)
        self.latency = latency                  # the LatencyModel, on the live config
        self.config_values = latency.config.__dict__    # replaced as a whole by SimConfig.swap
        self.engine = None
        self.on_first = None          # (seq, now): a schedule from token 0 (Simulator.first_token)
        self.group = False            # step mode with speculative decoding: a step's tokens are one chunk

    @classmethod
    def of_engine(cls, seq: Sequence, start: int, stop: int, engine, metrics, latency) -> "TokenSchedule":
        """Step mode (:mod:`generation.engine.step_engine`): tokens ``start..stop-1`` are due when
        the engine's steps emit them, not on a clock; the driver registers for the engine's
        notification (``seq.engine_req.notify``) and calls :meth:`due` on each.  ``start == stop``:
        only the wait for the first token (the driver then resumes the generator)."""
        self = cls(seq, start, stop, 0.0, 0.0, 0.0, metrics, latency)
        self.engine = engine
        self.lag_n = metrics.lag.observe_n       # (lag, tokens): the driver observes after its send
        self.group = getattr(engine, "spec", None) is not None
        return self

    def deadline(self, k: int) -> float:
        return self.first + (k - self.start) * self.itl

    def due(self, now: float, ahead: tuple | None = None):
        """The chunks of every token due at ``now`` (monotonic seconds) as one ``bytes``, with
        their emission lag and inter-token latency observed as the engine does per token; None
        when none is due yet, or when the schedule was cut short (``next == stop``).  In step
        mode, the tokens the engine has emitted (their inter-token latencies are the engine's).
        ``ahead``: ``(k, chunk)``, the last token's chunk already rendered (the hub renders it in
        an idle turn), used instead of rendering it again when ``k`` is this schedule's last."""
        if self.engine is not None:
            return self._emitted(now)
        if self.latency.config.__dict__ is not self.config_values and self._latencies_changed():
            self.stop = self.next
            return None
        first, start, itl, stop = self.first, self.start, self.itl, self.stop
        k0 = k = self.next
        if k >= stop or first + (k - start) * itl > now:
            return None
        render = self.render
        out = []
        while k < stop and first + (k - start) * itl <= now:
            out.append(ahead[1] if ahead is not None and k == ahead[0] == stop - 1 else render(k))
            k += 1
        self.next = k
        for j in range(k0, k):        # recorded once every chunk rendered: none for a failed render
            self.lag(now - (first + (j - start) * itl))
            if j:
                self.itl_obs(now - self.prev)
            else:
                self.first_token(now)
            self.prev = now
        return out[0] if len(out) == 1 else b"".join(out)

    def set_render(self, render, first) -> None:
        """Set :attr:`render` to ``render`` (``k -> bytes``); for a schedule from token 0, token
        0's chunk is ``first()`` instead (what the renderer writes with the first token: vLLM's
        role chunks come with it), rendered once, at its tick, after which the schedule calls
        ``render`` directly.  ``render``'s ``pure`` (the hub may render the last token ahead)
        carries over: it holds for every token after the first."""
        if self.start:
            self.render = render
            return

        def chunk(k: int) -> bytes:
            if k:
                return render(k)
            self.render = render
            return first()
        chunk.pure = getattr(render, "pure", False)
        self.render = chunk

    def first_token(self, now: float) -> None:
        """Token 0 went out at ``now`` (a schedule from token 0): the first token's bookkeeping
        (``Simulator.first_token``), in place of an inter-token latency; a schedule without it
        (built by hand) observes one as for any token."""
        if self.on_first is None:
            self.itl_obs(now - self.prev)
        else:
            self.on_first(self.seq, now)

    def _emitted(self, now: float):
        k0 = self.next
        data = self.emitted()
        if data is not None:
            self.lag_n(now - self.seq.engine_req.last_token, self.next - k0)
        return data

    def emitted(self):
        """Step mode: the chunks of the tokens the engine emitted since the last call (one
        ``bytes``; None when there are none), :attr:`next` moved past them; their emission lag is
        the caller's to observe (``lag_n(time handed to the kernel - req.last_token, tokens)``),
        so that it counts the send.  One pass per step and stream: no per-token call but the
        renderer's.  With :attr:`interval` > 1 (vLLM's stream interval, ``RequestState.
        make_request_output``): None until ``interval`` tokens are unsent or the request ended,
        then all of them as one chunk (:attr:`render_span`); the first token, which vLLM sends
        alone, never comes through a schedule (``StepEngine.stream`` sends it).  With
        :attr:`group` (speculative decoding) the tokens a step emitted go as one chunk too."""
        seq = self.seq
        req = seq.engine_req
        k0 = self.next
        avail = len(seq.pieces) if req.state == DONE else req.num_output
        if avail > self.stop:
            avail = self.stop
        if avail <= k0:
            return None
        if self.interval > 1:
            avail = ready(k0, avail, self.stop, self.interval)
            if avail == k0:
                return None
            data = self.render(k0) if avail == k0 + 1 else self.render_span(k0, avail)
        elif avail == k0 + 1:
            data = self.render(k0)
        elif self.group and self.render_span is not None:   # accepted drafts: one output, as vLLM's
            data = self.render_span(k0, avail)
        else:
            render = self.render
            data = b"".join([render(k) for k in range(k0, avail)])
        self.next = avail
        return data

    def _latencies_changed(self) -> bool:
        if self.latency.constant_itl() != self.itl:
            return True
        self.config_values = self.latency.config.__dict__
        return False


def scheduled_tokens(sim, schedule: TokenSchedule):
    """Emit ``schedule`` from the calling greenlet (no hub emitter: the route's own, or a background
    response's): each token's chunk (tokens due together in one write) once its deadline is
    reached; raises ClientDisconnected if the sequence is aborted meanwhile."""
    if schedule.engine is not None:             # step mode: due when the engine's steps emit them
        yield from sim.step_tokens(schedule)
        return
    seq = schedule.seq
    while schedule.next < schedule.stop:
        sim.sleep_until(seq, schedule.deadline(schedule.next))
        data = schedule.due(monotonic())
        if data is not None:
            yield data


def waited(sim, seq, item):
    """A body's wait driven from the calling greenlet: a ``float`` deadline slept until, or a
    TokenSchedule's chunks emitted (:func:`scheduled_tokens`); raises ClientDisconnected if
    ``seq`` is aborted meanwhile."""
    if item.__class__ is float:
        sim.sleep_until(seq, item)
    else:
        yield from scheduled_tokens(sim, item)
