"""What the runtime offers every request's streams (:mod:`blueprints.streaming`): the hub-emitter
factory (:func:`hub_emitter`), installed in the environ with the burst and body-end checks by
:func:`with_hub_emitter`, and the emitter a stream gets with ``--sse-keep-alive-interval``
(:class:`KeptAliveEmitter`).
"""
from __future__ import annotations

from time import monotonic

from blueprints.streaming import END_WITH_KEY, HEADERS_LATER_KEY, HUB_EMITTER_KEY, SSE_KEEP_ALIVE_COMMENT

from .sse_emitter import HubEmitter, end_with_last_bytes, in_burst, usable_response


def hub_emitter(environ: dict, seq, body_iter, keep_alive=None):
    """The factory the runtime puts in the environ (:data:`blueprints.streaming.HUB_EMITTER_KEY`):
    a :class:`~server.sse_emitter.HubEmitter` for ``seq``'s stream when
    :func:`~server.sse_emitter.usable_response` allows, else None; given a
    :class:`~blueprints.streaming.KeepAlive`, a :class:`KeptAliveEmitter`."""
    target = usable_response(environ)
    if target is None:
        return None
    if keep_alive is None:
        return HubEmitter(seq, body_iter, *target)
    return KeptAliveEmitter(seq, body_iter, *target, keep_alive)


def with_hub_emitter(wsgi_app):
    """``wsgi_app`` with :func:`hub_emitter`, :func:`~server.sse_emitter.in_burst` and
    :func:`~server.sse_emitter.end_with_last_bytes` offered in every request's environ."""
    def app(environ, start_response):
        environ[HUB_EMITTER_KEY] = hub_emitter
        environ[HEADERS_LATER_KEY] = in_burst
        environ[END_WITH_KEY] = end_with_last_bytes
        return wsgi_app(environ, start_response)
    return app


class KeptAliveEmitter(HubEmitter):
    """A :class:`~server.sse_emitter.HubEmitter` that also writes vLLM's keep-alive comment
    (:mod:`blueprints.sse_keep_alive`) whenever ``keep_alive.due()`` passes with nothing written:
    one libev timer, re-armed to the new due time when a write moved it.  Every write
    (:meth:`_send`; in step mode, a chunk :class:`~server.sse_emitter.StepSends` sent whole) sets
    ``keep_alive.last``.  A stream without the flag gets a plain HubEmitter and pays none of it."""

    def __init__(self, seq, body_iter, resp, raw, keep_alive):
        super().__init__(seq, body_iter, resp, raw)
        self.keep_alive = keep_alive
        self.ka_timer = None

    def run(self, item) -> tuple:
        self._arm_keep_alive()
        try:
            return super().run(item)
        finally:
            timer, self.ka_timer = self.ka_timer, None
            if timer is not None:
                timer.close()

    def _arm_keep_alive(self) -> None:
        loop = self.loop
        loop.update_now()           # libev counts ``after`` from its cached clock
        after = self.keep_alive.due() - monotonic()
        timer = self.ka_timer = loop.timer(after if after > 0.0 else 0.0)
        timer.start(self._keep_alive)

    def _keep_alive(self) -> None:
        self.ka_timer.close()
        self.ka_timer = None
        if not self.active:
            return
        self.loop.update_now()
        if monotonic() >= self.keep_alive.due():        # never early, nor after a write meanwhile
            # a full socket hands the stream back with what it waits for: its schedule or deadline
            then = self.schedule if self.schedule is not None else self.deadline
            if not self._send(SSE_KEEP_ALIVE_COMMENT, then=then):
                return
        self._arm_keep_alive()

    def _send(self, item: bytes, last: bool = False, then=None) -> bool:
        if HubEmitter._send(self, item, last, then):
            self.keep_alive.last = monotonic()
            return True
        return False

    def _step_tick(self, req=None) -> None:
        presented = self.presented
        if presented is not None and presented[0] == len(presented[2]):     # StepSends sent it whole
            self.keep_alive.last = presented[1]
        HubEmitter._step_tick(self, req)
