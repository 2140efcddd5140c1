"""The gunicorn gevent worker with the simulator's lifecycle (see :mod:`server`).
"""
from __future__ import annotations

import logging
import signal
import time
from functools import lru_cache, partial

import gevent
from gevent import getcurrent
from gevent.event import Event
from gunicorn.sock import ssl_context
from gunicorn.workers.ggevent import GeventWorker

from .lifecycle import ServerShuttingDown, connection_socket, has_bytes, shutdown_grace
from .listening import ACCEPT_BATCH, KEEPALIVE_SECONDS, accept_server, sock_name
from .request_head import DRAIN_MAX, body_left_to_drain, body_not_invited  # noqa: F401 - imported from here too

log = logging.getLogger("vllm_sim")


def freeze_startup_heap() -> None:
    """Move everything start-up built (modules, the app, the engine) out of the garbage
    collector's view, as vLLM's API server does after loading (``gc.freeze``): a full
    collection otherwise walks that whole heap, a pause of several ms that every open stream
    feels (ITL p99 +5 ms at 300 streams, issue 13).  Turns the collector on: ``python app.py``
    starts with it off (start-up makes long-lived objects, not garbage).

    A full collection then comes after :data:`FULL_COLLECTION_AFTER` collections of the middle
    generation, not Python's 10: with the start-up heap frozen, Python's other condition for one
    (a quarter more long-lived objects than at the last) holds as soon as requests are in
    flight, so a burst of streams paid a full pass over every live stream's objects every 7,000
    allocations: at 1,000 streams opened at once, 13-64 ms in one pause (py-spy and gc.callbacks,
    issue 32), which every open stream and every stream still being set up waited for.  Serving
    makes no cyclic garbage in steady state (no collection at all in 28,000 keep-alive streams),
    so the rarer full pass holds no memory back (peak RSS 49 MB either way)."""
    import gc
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)
    gc.enable()


FULL_COLLECTION_AFTER = 100     # collections of the middle generation per full one (Python: 10)


def no_thread_names_in_logs() -> None:
    """Log records leave out the thread (``logging.logThreads``): no format here prints it
    (:data:`server.logs.LOG_FORMAT`), and under gevent ``threading.current_thread()`` in a
    connection's greenlet builds a ``_DummyThread`` (a name, a lock, a link to the greenlet's
    end) for its first log line: the access line of every connection, 6-9 us of its CPU
    (issue 32)."""
    import logging
    logging.logThreads = False


def idle_of(sim):
    """``() -> bool``: no request running or waiting on ``sim``'s engine (step mode) or on
    ``sim`` itself (None: never idle)."""
    if sim is None:
        return lambda: False
    engine = getattr(sim, "engine", None)
    if engine is not None:
        return lambda: not engine.scheduler.running and not engine.waiting_count()
    return lambda: not sim.running and not sim.waiting


def counted(arrived, handle):
    """``handle(sock, addr)`` that first tells ``arrived()`` of the new connection
    (:mod:`server.gc_pause`)."""
    def on_connection(sock, addr):
        arrived()
        return handle(sock, addr)
    return on_connection


class NamedListener:
    """A listening socket whose ``getsockname()`` is read once: gunicorn's ``handle`` asks
    for it on every new connection (a system call through gevent's socket, issue 32).
    Everything else goes to the socket."""
    __slots__ = ("sock", "name")

    def __init__(self, sock):
        self.sock = sock
        self.name = sock.getsockname()

    def getsockname(self):
        return self.name

    def __getattr__(self, attr):
        return getattr(self.sock, attr)



def grpc_host(host: str) -> str:
    """``--host`` as a gRPC address host (IPv6 in brackets; all interfaces stay as given)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class SimWorker(GeventWorker):
    """gunicorn's gevent worker with the simulator's lifecycle (see the module docstring)."""
    standalone = False          # True when run by :func:`serve` without gunicorn's arbiter
    children: list = []         # data-parallel ranks started by this process: (rank, Popen)
    early_signals: list = []    # SIGTERM / SIGINT received before init_signals

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._busy: set = set()
        self._stop_event = Event()
        self._idle_event = Event()
        self._stop_signal = None
        self._fast = False
        self.exit_code = 0
        self.unfinished = None          # server.unfinished.Unfinished, once serving

    # -- signals ------------------------------------------------------------------------
    def init_signals(self):
        super().init_signals()
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGQUIT, self._on_quit)
        signal.signal(signal.SIGHUP, self._on_hup)
        for sig in self.early_signals:        # received while the app was loading
            self._on_stop(sig, None)

    def _on_stop(self, sig, frame):
        if self._stop_signal is not None:
            if sig == signal.SIGINT:      # a second Ctrl-C: no more grace
                self._on_quit(sig, frame)
            return
        self._stop_signal = sig
        self.alive = False
        self._stop_event.set()

    def _on_quit(self, sig, frame):
        self._fast = True
        if self._stop_signal is None:
            self._stop_signal = sig
        self.alive = False
        self._stop_event.set()
        self._idle_event.set()

    def _on_hup(self, sig, frame):
        gevent.spawn(log.warning, "SIGHUP ignored: reload is not supported (one engine per "
                                       "process); restart the process to change its flags")

    def notify(self):
        if not self.standalone:
            super().notify()

    def patch(self):
        # gevent's monkey.patch_all asks importlib.metadata for plugin entry points about 25
        # times, each a scan of every installed distribution (~0.35 s of start-up here); one
        # scan, selected per group, gives the same plugins.
        from importlib import metadata
        original = metadata.entry_points
        everything = []

        def entry_points(**params):
            if set(params) != {"group"}:
                return original(**params)
            if not everything:
                everything.append(original())
            return everything[0].select(**params)
        metadata.entry_points = entry_points
        try:
            super().patch()
        finally:
            metadata.entry_points = original

    # -- serving --------------------------------------------------------------------------
    def load_wsgi(self):
        from . import arrivals, gunicorn_tuning
        gunicorn_tuning.install()       # headers leave with the first body bytes (issue 13)
        import blueprints.streaming as streaming
        streaming.WRITE_STALL_S = float(self.cfg.keepalive or KEEPALIVE_SECONDS)   # a reader that stops is gone
        arrivals.install(ACCEPT_BATCH)  # keep-alive requests take turns with due tokens
        super().load_wsgi()
        flask_app = self.wsgi
        from .emitter_factory import with_hub_emitter
        self.wsgi = with_hub_emitter(flask_app)      # streams may be driven from the event loop
        ext = getattr(flask_app, "extensions", {})
        self._data_parallel = ext.get("data_parallel")
        sim = self._simulator = ext.get("simulator")
        self.lifecycle = ext.get("lifecycle")
        self.grace = shutdown_grace(sim.config) if sim is not None else 30.0
        self.grpc_server = None
        port = getattr(sim.config, "grpc_port", 0) if sim is not None else 0
        if port:                        # --grpc-port: gRPC beside HTTP, on the same engine
            from .grpc_engine import start_grpc_server
            if sim.config.data_parallel_size > 1:         # rank r: --grpc-port + r, as HTTP's --port + r
                port += max(sim.config.data_parallel_rank, 0)
            try:
                self.grpc_server = start_grpc_server(sim, f"{grpc_host(sim.config.host)}:{port}", self.lifecycle,
                                                     dp=self._data_parallel)
            except RuntimeError as e:       # its port taken: one line, as HTTP's (not a traceback)
                log.error("%s", e)
                raise SystemExit(1) from None

    def pause_collector_in_bursts(self, idle) -> None:
        """No automatic collections while a burst of connections arrives (:mod:`server.gc_pause`);
        ``idle()``: nothing in flight, when the frozen objects may be reclaimed.  Before
        :meth:`accept_on`, which counts the arrivals."""
        from gevent import get_hub

        from .gc_pause import install as install_gc_pause
        self.arrived = install_gc_pause(get_hub().loop, idle).on_arrival

    _tls_context = None

    def tls_context(self):
        """gunicorn's TLS context for the listeners, made once (a fleet's later pods share
        it); the self-signed pair's files are removed as soon as it is loaded."""
        if self._tls_context is None:
            from .tls import remove_self_signed_files
            self._tls_context = ssl_context(self.cfg)
            remove_self_signed_files()
        return self._tls_context

    def accept_on(self, sock):
        """A started accept server on the listening ``sock``: each connection counted for the
        collector's pause and handled with the listener's name read once (:class:`NamedListener`)."""
        ssl_args = {"ssl_context": self.tls_context()} if self.cfg.is_ssl else {}
        sock.setblocking(1)
        server = accept_server(sock, counted(self.arrived, partial(self.handle, NamedListener(sock))),
                               self.worker_connections, self.cfg.keepalive or KEEPALIVE_SECONDS, **ssl_args)
        server.start()
        return server

    def run(self):
        dp = getattr(self, "_data_parallel", None)          # several engines: idle when all are
        self.pause_collector_in_bursts(dp.idle if dp is not None else idle_of(getattr(self, "_simulator", None)))
        servers = [self.accept_on(s) for s in self.sockets]
        from .unfinished import current
        self.unfinished = current()
        from .gunicorn_tuning import freeze_config
        freeze_config(self.cfg)         # fixed from here on: one lookup per setting
        no_thread_names_in_logs()
        freeze_startup_heap()
        scheme = "https" if self.cfg.is_ssl else "http"
        log.info("ready: listening on %s", ", ".join(f"{scheme}://{sock_name(s)}" for s in self.sockets))
        while self._stop_signal is None:
            self.notify()
            self._stop_event.wait(0.25)
            self._check_children()
        self._drain(servers)

    def _check_children(self):
        for rank, proc in self.children:
            code = proc.poll()
            if code is not None and self._stop_signal is None:
                log.error("data-parallel rank %d exited with code %s: stopping every rank", rank, code)
                self.exit_code = 1
                self._stop_signal = "group"
                self._fast = True
                return

    def _drain(self, servers):
        name = self._stop_signal if isinstance(self._stop_signal, str) else signal.Signals(self._stop_signal).name
        grace = 0.0 if self._fast else self.grace
        if self.lifecycle is not None:
            self.lifecycle.draining = True
        self.alive = False
        for server in servers:
            server.close()                    # stop accepting
        grpc_flight = 0
        grpc_stopped = None
        if self.grpc_server is not None:
            from .grpc_engine import stop_grpc
            servicer = getattr(self.grpc_server, "servicer", None)
            grpc_flight = servicer.in_flight() if servicer is not None else 0
            grpc_stopped = stop_grpc(self.grpc_server, grace)
        for _, proc in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGQUIT if self._fast else signal.SIGTERM)
        log.info("shutting down (%s): %d request(s) in flight%s, grace %gs", name, len(self._busy),
                 f" and {grpc_flight} gRPC stream(s)" if grpc_flight else "", grace)
        arrived = self._close_idle(servers)
        from .websocket import close_all
        close_all()                     # WebSocket sessions: closed now with 1012, as uvicorn's shutdown
        deadline = time.monotonic() + grace
        from .arrivals import drop_waiting, waiting_greenlets
        while (self._busy or waiting_greenlets() or any(not g.dead for g in arrived)) and not self._fast:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._idle_event.clear()
            if self._busy:
                self._idle_event.wait(min(left, 1.0))
            else:
                gevent.sleep(min(left, 0.005))     # only queued requests: let their turns come
            self.notify()
        for g in drop_waiting() + [g for g in arrived if not g.dead and g not in self._busy]:
            g.kill(block=False)         # grace over, not started: closed like idle connections
        if self._busy:
            log.warning("shutdown grace over: ending %d request(s) with an error", len(self._busy))
            busy = list(self._busy)
            for g in busy:
                g.kill(ServerShuttingDown, block=False)
            gevent.joinall(busy, timeout=2.0)
        for server in servers:
            server.stop(timeout=0.5)
        if grpc_stopped is not None:
            grpc_stopped.wait(grace + 2.0)
        for rank, proc in self.children:
            try:
                code = proc.wait(timeout=grace + 3.0)
            except Exception:
                proc.kill()
                code = proc.wait()
            if code not in (0, None) and self.exit_code == 0 and not self._fast:
                log.warning("data-parallel rank %d exited with code %s", rank, code)
        log.info("shutdown complete")

    def _close_idle(self, servers) -> set:
        """Close keep-alive connections that wait for their next request.  Those whose
        request has arrived (in the socket, not yet read, or waiting its turn:
        :mod:`server.arrivals`) are served, as uvicorn serves a request it has received
        when it shuts down; returns their greenlets."""
        from .arrivals import waiting_greenlets
        arrived = waiting_greenlets()
        for server in servers:
            for g in list(server.pool.greenlets):
                if g in self._busy or g in arrived:
                    continue
                if has_bytes(connection_socket(g)):
                    arrived.add(g)
                else:
                    g.kill(block=False)
        return arrived

    def handle_request(self, listener_name, req, sock, addr):
        g = getcurrent()
        self._busy.add(g)
        try:
            keep = super().handle_request(listener_name, req, sock, addr)
        finally:
            self._busy.discard(g)
            if self.unfinished is not None:
                self.unfinished.begin(g)      # waits for its next request (or drains this body)
            if not self.alive and not self._busy:
                self._idle_event.set()        # draining: the last request is done
        if not self.alive or body_left_to_drain(req) or body_not_invited(req):
            raise StopIteration()             # draining, or a body left unread: close the connection
        return keep

    def handle_error(self, req, client, addr, exc):
        if isinstance(exc, (gevent.GreenletExit, ServerShuttingDown)):
            return                            # our own shutdown (or server.unfinished): no traceback
        if unparsable_request(exc):
            # gunicorn answers an HTML page (400, 414, 431, or 501 for a transfer coding it does
            # not know); vLLM's uvicorn answers any request it cannot parse with this 400, and a
            # client's input is never a 5xx here
            try:
                client.sendall(BAD_REQUEST)
            except OSError:
                pass
            return
        super().handle_error(req, client, addr, exc)


@lru_cache(maxsize=None)
def _parse_error_classes() -> tuple:
    """``(client's, application's)``: gunicorn's exceptions for a request head (or chunked
    framing) it cannot parse, and those of its header checks that blame the application."""
    from gunicorn.http import errors
    client = ("InvalidRequestLine", "InvalidRequestMethod", "InvalidHTTPVersion", "InvalidHeader",
              "InvalidHeaderName", "LimitRequestLine", "LimitRequestHeaders", "ObsoleteFolding",
              "UnsupportedTransferCoding", "InvalidChunkSize", "ChunkMissingTerminator",
              "InvalidChunkExtension", "InvalidH2CPreface", "InvalidProxyLine", "InvalidSchemeHeaders")
    app = ("InvalidResponseHeader", "InvalidResponseHeaderName")     # subclasses of the header ones
    return (tuple(getattr(errors, n) for n in client if hasattr(errors, n)),
            tuple(getattr(errors, n) for n in app if hasattr(errors, n)))


def unparsable_request(exc: BaseException) -> bool:
    """Whether gunicorn raised ``exc`` for client bytes it cannot parse as HTTP/1 (answered with
    uvicorn's :data:`BAD_REQUEST`).  Not a response header the application got wrong (gunicorn's
    500), an ``Expect`` it cannot meet (417), a forbidden proxy or a TLS error (403), or its own
    configuration (500)."""
    client, app = _parse_error_classes()
    return isinstance(exc, client) and not isinstance(exc, app)


BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 30\r\n"
               b"Connection: close\r\n\r\nInvalid HTTP request received.")
