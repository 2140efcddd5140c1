"""The listening socket and new connections: bind at once (a busy port is one line, exit 1),
accept at most :data:`ACCEPT_BATCH` connections per event-loop turn, bound each TLS handshake
in time, and raise the open-files limit as vLLM does.
"""
from __future__ import annotations

import errno
import logging
import socket


log = logging.getLogger("vllm_sim")

KEEPALIVE_SECONDS = 5          # --timeout-keep-alive's default, vLLM's uvicorn (issue 12: 75 s held sockets)
ACCEPT_BATCH = 5               # new connections accepted per event-loop turn (see accept_server)
ACCEPT_BURST = 25              # ... while requests wait their turn to be parsed (a burst)
BURST_WAITING = 5              # requests waiting their turn that mean a burst

# ---------------------------------------------------------------------------------------------
# the worker
def accept_server(listener, handle, pool_size: int, handshake_timeout: float = KEEPALIVE_SECONDS,
                  **ssl_args):
    """gevent's StreamServer on ``listener`` (``handle(sock, addr)`` per connection in a
    greenlet, at most ``pool_size`` at once) that accepts at most :data:`ACCEPT_BATCH` new
    connections per event-loop turn.  With TLS (``ssl_context`` in ``ssl_args``), a client
    gets ``handshake_timeout`` seconds to complete its handshake; one that does not, or drops
    out of it, is closed with a debug log line (gevent waited for ever, and printed a
    traceback for a dropped handshake).

    Each new connection's greenlet parses its request and sets the stream up (0.4-0.6 ms of
    CPU here) before the loop runs its timers again.  gevent accepts up to 100 per turn, so a
    burst of arrivals held the due tokens of running streams for up to ~50 ms (issue 13).  5
    bounds a turn's arrival work to 2-3 ms, under the 5 ms ITL target, while a loop with
    nothing due still accepts back to back (one readiness poll per batch).  Smaller batches
    (2) slowed a burst's parsing enough to raise TTFT.  While :data:`BURST_WAITING` requests
    or more wait their turn to be parsed (:mod:`server.arrivals`: a burst is arriving), a turn
    accepts :data:`ACCEPT_BURST` instead: parsing is rationed there anyway, so accepting costs
    only the accept, a greenlet and the first read (~40 us each), and a liveness probe behind
    the burst in the kernel's queue, which skips the turns, is reached sooner (10,000
    connections at once: ``/health`` waited 0.87-0.93 s, 0.30-0.52 s with this).

    When every one of the ``pool_size`` connections is taken and a new one waits, the oldest
    connections whose request has not fully arrived are closed to make room
    (:mod:`server.unfinished`): slow bodies and headers cannot lock new clients out."""
    import ssl

    from gevent import Timeout, getcurrent
    from gevent.pool import Pool
    from gevent.server import StreamServer

    from .unfinished import install as install_unfinished

    unfinished = install_unfinished()

    from .arrivals import waiting_count

    class Server(StreamServer):
        @property
        def max_accept(self) -> int:
            # in a burst parsing is rationed by the arrival turns anyway (see the docstring)
            return ACCEPT_BURST if waiting_count() >= BURST_WAITING else ACCEPT_BATCH

        @max_accept.setter
        def max_accept(self, value) -> None:
            """Fixed by :data:`ACCEPT_BATCH` / :data:`ACCEPT_BURST` (gevent sets its default)."""

        def init_socket(self):
            super().init_socket()
            connection = self._handle         # handle, or the TLS handshake before it

            def tracked(client_socket, address):
                g = getcurrent()
                unfinished.begin(g)
                try:
                    return connection(client_socket, address)
                finally:
                    unfinished.done(g)
            self._handle = tracked

        def wrap_socket_and_handle(self, client_socket, address):
            tls = self.wrap_socket(client_socket, **dict(self.ssl_args, do_handshake_on_connect=False))
            try:
                try:
                    with Timeout(handshake_timeout) as timeout:
                        tls.do_handshake()
                except Timeout as e:
                    if e is not timeout:
                        raise
                    log.debug("TLS handshake from %s: none within %gs, closed", _peer(address), handshake_timeout)
                    return None
                except (ssl.SSLError, OSError) as e:
                    log.debug("TLS handshake from %s failed: %s", _peer(address), e)
                    return None
                return self.handle(tls, address)
            finally:
                tls.close()
                trimmer.closed()

    trimmer = HeapTrimmer() if ssl_args else None        # TLS connections only (ctypes, libc)
    pool = Pool(pool_size)
    server = Server(listener, handle=handle, spawn=pool, **ssl_args)

    def full() -> bool:
        if not pool.full():
            return False
        unfinished.evict()                # room for the waiting connection within a loop turn or two
        return True
    server.full = full
    return server


class HeapTrimmer:
    """Gives the C heap back to the system after many TLS connections closed: each costs
    OpenSSL ~50 KB that glibc keeps in its arenas after the free (58 -> 688 MB after 4 rounds
    of 10,000 half-open handshakes, issue 23).  After :data:`TRIM_AFTER` closes, and at most
    once per :data:`TRIM_INTERVAL` seconds, ``malloc_trim(0)`` runs in a worker thread (ctypes
    releases the GIL; glibc locks its arenas).  No-op without glibc."""
    TRIM_AFTER = 256
    TRAILING = 16             # closes after a trim that still get one more
    TRIM_INTERVAL = 1.0

    def __init__(self):
        self.count = 0
        self.last = 0.0
        self.pending = False
        try:
            import ctypes
            self.trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            self.trim = None

    def closed(self) -> None:
        self.count += 1
        if self.trim is None or self.pending or self.count < self.TRIM_AFTER:
            return
        import time

        import gevent
        now = time.monotonic()
        wait = max(0.0, self.last + self.TRIM_INTERVAL - now)
        self.pending = True
        gevent.spawn_later(wait + 0.2, self._run)      # a little later: the rest of a wave closes too

    def _run(self) -> None:
        import time

        import gevent
        counted = self.count
        try:
            gevent.get_hub().threadpool.apply(self.trim, (0,))
        finally:
            self.count -= counted          # closes during the trim count towards the next one
            self.last = time.monotonic()
            if self.count >= self.TRAILING:      # the rest of a wave: one more trim a second later
                gevent.spawn_later(self.TRIM_INTERVAL, self._run)
            else:
                self.pending = False


def _peer(address) -> str:
    try:
        return "%s:%s" % tuple(address[:2])
    except (TypeError, ValueError):
        return str(address)



# ---------------------------------------------------------------------------------------------
def bind(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now (no retry, unlike gunicorn's five tries a second
    apart); raises OSError (``EADDRINUSE``: the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        receive_times(s)
        s.bind((host, port))
        s.listen(4096)
    except OSError:
        s.close()
        raise
    return s


def receive_times(sock: socket.socket) -> None:
    """Have the kernel note when it receives each segment on ``sock``'s connections
    (``SO_TIMESTAMPNS``; accepted sockets inherit it from the listener), read with a request's
    bytes (:func:`server.arrivals.first_read`): a request's simulated times count from there.
    Linux only; elsewhere, or if refused, ``TCP_INFO`` answers instead (in timer ticks)."""
    import sys
    if sys.platform.startswith("linux"):
        from .arrivals import SO_TIMESTAMPNS
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass


def _gunicorn_listener(sock: socket.socket, host: str, port: int):
    """Wrap a bound socket in gunicorn's listener class (what its workers expect)."""
    from gunicorn import sock as gsock

    class _Cfg:      # the few settings gunicorn's socket classes read
        reuse_port = False
        backlog = 4096
    cls = gsock.TCP6Socket if sock.family == socket.AF_INET6 else gsock.TCPSocket
    return cls((host, port), _Cfg(), logging.getLogger("gunicorn.error"), fd=sock.detach())


def listen(config, port: int | None = None):
    """Bind ``config.host:config.port`` (or ``port``); on failure log one line (``cannot listen
    on HOST:PORT: already in use``) and return None."""
    port = config.port if port is None else port
    try:
        return bind(config.host, port)
    except OSError as e:
        reason = "already in use" if e.errno == errno.EADDRINUSE else e.strerror
        log.error("cannot listen on %s:%d: %s", config.host, port, reason)
        return None


OPEN_FILES_TARGET = 65535     # descriptors: vLLM's set_ulimit(target_soft_limit=65535)


def raise_open_files_limit(target: int = OPEN_FILES_TARGET) -> int:
    """Raise this process's soft limit on open files (``RLIMIT_NOFILE``) to ``target``, or the
    hard limit if lower, as vLLM's API server does at start-up (``set_ulimit``): with the usual
    soft limit of 1024, a thousand concurrent streams would fail with ``Too many open files``.
    Logs a warning if the kernel refuses.  Returns the soft limit now in force (0 where there is
    no ``resource`` module)."""
    try:
        import resource
    except ImportError:          # not POSIX
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError) as e:
        log.warning("open files limit is %s and could not be raised to %s (%s): many concurrent "
                    "connections may fail with 'Too many open files'; raise it with ulimit -n",
                    soft, want, e)
        return soft
    return want


def sock_name(sock) -> str:
    try:
        host, port = sock.getsockname()[:2]
    except (OSError, ValueError):
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
