"""What the route layer offers the runtime that serves it, for streams that wait between writes
(docs/DESIGN.md: the runtime imports the app, never the reverse).

A WSGI server may put a **hub emitter** factory in the environ under :data:`HUB_EMITTER_KEY`:
``factory(environ, seq, body_iter)`` returns an object with ``run(item) -> (outcome, value)``
when it can drive this response's body from its event loop (gevent's hub), else None.  The
route's SSE body (:func:`blueprints.common.sse_body`) calls it at the stream's first wait, with
the first ``float`` deadline or :class:`~generation.engine.token_schedule.TokenSchedule` it met;
``run`` returns ``("done", None)``, ``("error", exception)`` or ``("pending", (unsent bytes,
next))`` when the greenlet must take the stream back (a slow reader); ``next`` is what the
body's iterator gave after those bytes and the greenlet goes on with: a TokenSchedule to
finish, a ``float`` deadline to wait for, an exception to raise, or None.  The
simulator's runtime installs :func:`server.emitter_factory.hub_emitter`; any other WSGI server, and
the in-process test client, leave the key out, and the stream waits in its greenlet.

The route stores the ``write`` callable its ``start_response`` returned under
:data:`WRITE_KEY`, so that an emitter can find the server's response object.

The runtime may also put a callable under :data:`HEADERS_LATER_KEY`: when it returns True (a
burst of arrivals is waiting its turn), a stream that will wait does not flush its headers
before its first wait; they leave with its first chunk (one ``send`` per stream fewer while the
burst is being set up, issue 32).  And a callable under :data:`END_WITH_KEY`: ``end(environ) -> bool`` makes the response's next
non-empty write carry the body's end (a chunked body's ``0\\r\\n\\r\\n``) in the same ``send``;
an SSE body that never waits calls it before its last bytes, once its generator is done (one
``send`` per stream fewer).

With ``--sse-keep-alive-interval`` (chat and completions streams only, as vLLM 0.34's routes),
the route's SSE body runs behind :func:`blueprints.sse_keep_alive.with_sse_keep_alive`, which
calls the factory with a fourth argument, a :class:`KeepAlive`: the emitter then sends
:data:`SSE_KEEP_ALIVE_COMMENT` whenever ``keep_alive.due()`` passes with nothing written, and sets
``keep_alive.last`` at each write.  Without it the factory is called with three.  Flask-free.

A client that stops reading (its socket buffer full, no byte taken for :data:`WRITE_STALL_S`,
the runtime's ``--timeout-keep-alive``) is gone: :func:`send_all_or_stall` raises
:class:`StalledReader` (an ``EPIPE``), the stream ends as if the client had left and its slot is
freed.  Before, a stream's writes waited for good: five clients that never read held every seat
of ``--max-num-seqs 5`` for as long as they kept their sockets open, and every other request
waited behind them.
"""
import errno
import struct

try:
    import fcntl
    import termios
except ImportError:         # not POSIX: no send-queue reading, a timed-out wait is a stall
    fcntl = termios = None
WRITE_KEY = "vllm_sim.write"             # environ: the ``write`` callable start_response returned
REPLICA_KEY = "vllm_sim.replica"         # environ: another DP rank's run of an operation (server.dp_api)
DP_SPREAD_KEY = "vllm_sim.dp_spread"     # environ: () -> the simulator of the engine for a further engine request
HUB_EMITTER_KEY = "vllm_sim.hub_emitter"  # environ: the runtime's hub-emitter factory, if any
HEADERS_LATER_KEY = "vllm_sim.headers_later"  # environ: () -> bool, the runtime's "in a burst", if any
END_WITH_KEY = "vllm_sim.end_with"        # environ: (environ) -> bool, the runtime's "the next write ends the body"
KERNEL_ARRIVAL_KEY = "vllm_sim.kernel_arrival"  # environ: when the kernel received the request (time.time s), if known

SSE_KEEP_ALIVE_COMMENT = b": keep-alive\n\n"    # vLLM's (vllm/entrypoints/serve/utils/sse_keep_alive.py)


class KeepAlive:
    """One stream's keep-alive clock, shared by whoever writes it (the request's greenlet, or
    the runtime's hub emitter): ``interval`` seconds of silence send a comment; ``last`` is when
    the stream last wrote (``time.monotonic`` seconds; the response's start before anything)."""
    __slots__ = ("interval", "last")

    def __init__(self, interval: float, last: float):
        self.interval = interval
        self.last = last

    def due(self) -> float:
        """When a keep-alive comment is due if nothing is written before."""
        return self.last + self.interval

WRITE_STALL_S = 5.0     # s a write may wait without the client taking a byte (the runtime's keep-alive)


class WebSocketClosed(Exception):
    """A WebSocket connection ended (``code``: its close code, 1006 without a close frame):
    raised by the runtime's :class:`server.websocket.WebSocket` to a WebSocket route's session."""

    def __init__(self, code: int = 1006, reason: str = ""):
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class StalledReader(BrokenPipeError):
    """The client took no byte of its answer for :data:`WRITE_STALL_S`: treated as gone (an
    ``EPIPE``, which gunicorn closes quietly)."""


def send_all_or_stall(sock, data, stall_s: float | None = None) -> None:
    """``sock.sendall(data)``, but raise :class:`StalledReader` when the client takes no byte
    for ``stall_s`` (default :data:`WRITE_STALL_S`; 0 or None waits for good).  gevent's own
    ``sendall`` under a timeout bounds the whole call, which would cut a slow reader that keeps
    reading; and the socket turns writable only once a third of its send buffer is free (up to
    4 MiB on Linux: 1.3 MiB, 47 s for a client reading 28 KB/s), so a wait for writability that
    times out is not a stall when the kernel's send queue (``SIOCOUTQ``) shrank since the
    previous timeout: the client is reading, the wait goes on.  A stall is therefore one whole
    ``stall_s`` without the queue shrinking, found ``stall_s`` to ``2 * stall_s`` after the
    client stopped.  A TLS socket's ``send`` blocks too (gevent raises the same timeout), so
    every send, the first included, waits under the limit.  The socket's timeout is restored."""
    stall_s = WRITE_STALL_S if stall_s is None else stall_s
    if not stall_s:
        sock.sendall(data)
        return
    view = memoryview(data)
    before = sock.gettimeout()
    sock.settimeout(stall_s)
    queued = None
    try:
        while view:
            try:
                sent = sock.send(view)
            except TimeoutError:
                now = _send_queue(sock)
                if now is not None and (queued is None or now < queued):
                    queued = now            # the first timeout, or the client took bytes since
                    continue
                raise StalledReader(errno.EPIPE, f"the client took no bytes for {stall_s:g} s") from None
            view = view[sent:]
            queued = None
    finally:
        try:
            sock.settimeout(before)
        except OSError:
            pass


def _send_queue(sock) -> int | None:
    """Bytes the kernel still holds for the peer (Linux ``SIOCOUTQ``), or None where unknown."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, ValueError, AttributeError, NameError):
        return None
