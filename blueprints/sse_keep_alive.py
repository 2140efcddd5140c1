"""vLLM's SSE keep-alive comments, ``--sse-keep-alive-interval SECONDS`` (vLLM 0.29 on; 0: off).

vLLM 0.34 wraps the chat completions and completions streams (``openai/chat_completion/
api_router.py`` ``create_chat_completion``, ``openai/completion/api_router.py``
``create_completion``; SageMaker's ``/invocations`` calls those two) in ``with_sse_keep_alive``
(``vllm/entrypoints/serve/utils/sse_keep_alive.py``): whenever the stream has written nothing for
``interval`` seconds (queued, in prefill, between tokens) it writes the comment ``: keep-alive``
(:data:`~blueprints.streaming.SSE_KEEP_ALIVE_COMMENT`), which SSE clients skip.  Its clock starts
when the response does (Starlette sends the headers, then iterates the wrapper) and restarts
after every write, a comment's included.  No other route has it (the Anthropic, Responses,
generate and audio streams, the batch route).

As there, the SSE body (:func:`blueprints.common.sse_body`) runs ahead in a greenlet of its own
(vLLM: the generator's ``anext`` task) and hands each write to the request's greenlet, which
waits for it at most until the next comment is due.  A stream the runtime's hub emitter takes
over (:mod:`blueprints.streaming`) is written from the event loop: the emitter is given the
stream's :class:`~blueprints.streaming.KeepAlive` and sends the comments itself, and the
request's greenlet writes nothing until the emitter hands the stream back.  Without the flag
none of this runs (:func:`blueprints.serving.handle` returns the SSE body as it is).
"""
from __future__ import annotations

from time import monotonic

import gevent
from gevent import GreenletExit
from gevent.hub import get_hub
from gevent.queue import Channel, Empty

from .streaming import HUB_EMITTER_KEY, SSE_KEEP_ALIVE_COMMENT, KeepAlive, send_all_or_stall

_END = object()         # the SSE body is over
_HUB = object()         # the hub emitter writes from here until the next message
_RESUME = object()      # the hub emitter handed the stream back, its unsent bytes written


def with_sse_keep_alive(stream, interval: float, environ: dict):
    """``stream`` (an SSE body: a generator of ``bytes``, one write each) with a keep-alive
    comment after every ``interval`` seconds (> 0) in which nothing was written.  A generator of
    ``bytes``; closing it (the client left) closes ``stream``."""
    ka = KeepAlive(interval, monotonic())       # the response starts now: its headers go next
    chan = Channel()                            # the body's writes, one at a time
    factory = environ.get(HUB_EMITTER_KEY)
    if factory is not None:
        environ[HUB_EMITTER_KEY] = lambda env, seq, body_iter: _hub_turn(factory, chan, ka, env, seq, body_iter)
    ahead = gevent.spawn(_run_ahead, stream, chan)
    loop = get_hub().loop
    try:
        while True:
            loop.update_now()                   # libev times a wait from its cached clock
            wait = ka.due() - monotonic()
            try:
                msg = chan.get(timeout=wait) if wait > 0 else chan.get(block=False)
            except Empty:
                if monotonic() >= ka.due():     # never early
                    yield SSE_KEEP_ALIVE_COMMENT
                    ka.last = monotonic()
                continue
            if msg is _HUB:                     # the emitter writes, and keeps alive, meanwhile
                msg = chan.get()
            if msg.__class__ is bytes:
                yield msg
                if msg:                         # b"": the headers' flush, nothing written after them
                    ka.last = monotonic()
            elif msg is _END:
                return
            elif msg is not _RESUME:
                raise msg
    finally:
        ahead.kill()            # (a no-op once it ended) the body's own ``finally`` releases the request
        stream.close()


def _run_ahead(stream, chan: Channel) -> None:
    """The greenlet that runs the SSE body: its writes, then ``_END`` (or what it raised)."""
    try:
        for data in stream:
            chan.put(data)
    except GreenletExit:                        # the response was closed: nobody reads any more
        raise
    except BaseException as e:                  # noqa: BLE001 - raised in the request's greenlet
        chan.put(e)
        return
    chan.put(_END)


def _hub_turn(factory, chan: Channel, ka: KeepAlive, environ: dict, seq, body_iter):
    """The runtime's hub-emitter factory, called by the SSE body (in its own greenlet) at its
    first wait: once the request's greenlet is between writes (``_HUB`` taken), the runtime's
    emitter with ``ka``, wrapped in :class:`_HubTurn`; None (and the greenlet writes on) when the
    runtime cannot take the stream."""
    chan.put(_HUB)
    emitter = factory(environ, seq, body_iter, ka)
    if emitter is None:
        chan.put(_RESUME)
        return None
    return _HubTurn(emitter, chan, ka, environ)


class _HubTurn:
    """A hub emitter whose hand-back (a slow reader) writes the unsent bytes at once, before the
    request's greenlet may write again: the SSE body then finds nothing left to send."""
    __slots__ = ("emitter", "chan", "ka", "environ")

    def __init__(self, emitter, chan: Channel, ka: KeepAlive, environ: dict):
        self.emitter, self.chan, self.ka, self.environ = emitter, chan, ka, environ

    def run(self, item) -> tuple:
        outcome = self.emitter.run(item)
        if outcome[0] != "pending":
            return outcome
        unsent, then = outcome[1]
        try:
            send_all_or_stall(self.environ["gunicorn.socket"], unsent)
        except OSError:
            return outcome          # the SSE body's own send fails the same way, and it ends
        self.ka.last = monotonic()
        self.chan.put(_RESUME)
        return "pending", (b"", then)
