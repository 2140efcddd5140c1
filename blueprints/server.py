"""The HTTP server around the app: gunicorn's gevent worker run in-process, TLS, logs, lifecycle.

``python app.py`` runs one :class:`SimWorker` in its own process, without gunicorn's arbiter:
one process is one vLLM engine (its queue, KV cache and counters), as vLLM's own server is one
process.  There is therefore no fork, no control socket (several servers on one host never
share one), and no reload: SIGHUP is logged and ignored instead of starting a second engine
beside the draining one (issue 12).  ``gunicorn -k blueprints.server.SimWorker -w 1 wsgi:app``
uses the same worker under gunicorn's arbiter.

Lifecycle (issue 10), as vLLM / uvicorn's graceful shutdown:
    SIGTERM or Ctrl-C -> ``/health/ready`` answers 503, the listening socket is closed, idle
    keep-alive connections are closed, in-flight requests (and requests that have arrived on
    open connections, unread yet) run on for ``--shutdown-timeout`` seconds; what still runs
    then ends with an in-band error event and ``[DONE]`` (streams) or a 503 (others); exit
    code 0, no traceback.  A second Ctrl-C (or SIGQUIT) skips the grace.
A port already in use is one line and exit code 1.  With ``--data-parallel-size N`` rank 0
starts ranks 1..N-1 (:func:`start_data_parallel_ranks`), forwards SIGTERM to them, and stops
the whole group (exit 1) when one of them exits on its own, e.g. because its port is taken.
"""
from __future__ import annotations

import atexit
import errno
import logging
import os
import signal
import socket
import sys
import time
from functools import partial

from generation.errors import APIError

log = logging.getLogger("vllm_sim")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
ACCESS_FORMAT = '%(h)s "%(r)s" %(s)s %(B)s %(M)sms'
KEEPALIVE_SECONDS = 5          # --timeout-keep-alive's default, vLLM's uvicorn (issue 12: 75 s held sockets)
ACCEPT_BATCH = 5               # new connections accepted per event-loop turn (see accept_server)


class ServerShuttingDown(APIError):
    """Raised into requests still running when the shutdown grace period is over: a stream
    renders it as an in-band error event followed by ``[DONE]``, other requests as a 503."""

    def __init__(self, message: str = "The server is shutting down; the request was not completed."):
        super().__init__(message, 503)


# ---------------------------------------------------------------------------------------------
# logs
def log_level_name(config) -> str:
    return str(getattr(config, "log_level", "info") or "info").lower()


def configure_logging(config) -> None:
    """One format for the simulator's lines and gunicorn's (``LOG_FORMAT``), on stderr, at
    ``--log-level``."""
    level = getattr(logging, log_level_name(config).upper(), logging.INFO)
    root = logging.getLogger()
    if not any(getattr(h, "_vllm_sim", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._vllm_sim = True
        root.addHandler(handler)
    root.setLevel(level)
    log.setLevel(level)


def _restyle_gunicorn_logger(glog, config) -> None:
    """Give a gunicorn ``glogging.Logger`` our format and stream (stderr), and turn its access
    log on (default) or off (``--disable-log-requests``)."""
    fmt = logging.Formatter(LOG_FORMAT)
    for lg in (glog.error_log, glog.access_log):
        for h in lg.handlers:
            h.setFormatter(fmt)
            if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout:
                h.setStream(sys.stderr)
    level = getattr(logging, log_level_name(config).upper(), logging.INFO)
    glog.error_log.setLevel(level)
    glog.access_log.setLevel(max(logging.INFO, level))     # access lines are INFO, as uvicorn's
    glog.access_log.disabled = bool(getattr(config, "disable_log_requests", False))


def _gunicorn_logger_class(config):
    from gunicorn import glogging

    class SimLogger(glogging.Logger):
        error_fmt = LOG_FORMAT
        datefmt = None

        def setup(self, cfg):
            super().setup(cfg)
            _restyle_gunicorn_logger(self, config)
            self._own_format = cfg.access_log_format == ACCESS_FORMAT

        def access(self, resp, req, environ, request_time):
            # The line of ACCESS_FORMAT built directly: gunicorn's atoms (every header, a
            # strftime, a case-insensitive wrapper) cost more than the rest of the line.
            if not self.access_log_enabled:
                return
            if not getattr(self, "_own_format", False):
                return super().access(resp, req, environ, request_time)
            log = self.access_log
            if not log.isEnabledFor(logging.INFO):
                return
            status = resp.status
            if isinstance(status, str):
                status = status.split(None, 1)[0]
            sent = getattr(resp, "sent", None)
            try:
                log.info('%s "%s %s %s" %s %s %dms', environ.get("REMOTE_ADDR", "-"), environ["REQUEST_METHOD"],
                         environ["RAW_URI"], environ["SERVER_PROTOCOL"], status, "-" if sent is None else sent,
                         request_time.seconds * 1000 + request_time.microseconds // 1000)
            except Exception:
                import traceback
                self.error(traceback.format_exc())
    return SimLogger


class LogHTTP:
    """``--log-http`` (the reference's flag): log each request's method, URI, remote address,
    headers (keys redacted) and body (up to :attr:`LIMIT` bytes), and the response status and
    body when it is not a stream.  The body read for the log is handed on to the app."""
    LIMIT = 512 * 1024
    SECRET = {"HTTP_AUTHORIZATION", "HTTP_X_API_KEY"}

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app
        self.log = logging.getLogger("vllm_sim.http")

    def __call__(self, environ, start_response):
        import io
        headers = {k[5:].replace("_", "-").lower(): ("<redacted>" if k in self.SECRET else v)
                   for k, v in environ.items() if k.startswith("HTTP_")}
        for key, name in (("CONTENT_TYPE", "content-type"), ("CONTENT_LENGTH", "content-length")):
            if environ.get(key):                 # WSGI keeps these two apart from HTTP_*
                headers[name] = environ[key]
        body = b""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if 0 < length <= self.LIMIT:
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
        self.log.info("request %s %s from %s headers=%s body=%s", environ.get("REQUEST_METHOD"),
                      environ.get("RAW_URI") or environ.get("PATH_INFO"), environ.get("REMOTE_ADDR"),
                      headers, body.decode("utf-8", "replace") if body else "-")
        seen = {}

        def sr(status, response_headers, exc_info=None):
            seen["status"] = status
            seen["stream"] = any(k.lower() == "content-type" and v.startswith("text/event-stream")
                                 for k, v in response_headers)
            return start_response(status, response_headers, exc_info)
        result = self.wsgi_app(environ, sr)
        if seen.get("stream"):
            self.log.info("response %s (body streamed, not logged)", seen.get("status"))
            return result
        try:                   # any other body is finite: read it whole, log it, hand it on
            out = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        self.log.info("response %s body=%s", seen.get("status"),
                      out[:self.LIMIT].decode("utf-8", "replace"))
        return [out]


class ChunkedBodyLimit:
    """413 for a chunked request body (no Content-Length) over ``limit`` bytes, as a body with
    a Content-Length gets from Flask's ``MAX_CONTENT_LENGTH`` (issue 12: werkzeug cut such a
    body at the limit, and the truncated JSON became a 400 or was accepted).  The body is read
    here, at most ``limit + 1`` bytes, and handed on with its length (memory stays bounded;
    after a 413 the server discards the rest of the body)."""
    MESSAGE = "The data value transmitted exceeds the capacity limit."

    def __init__(self, wsgi_app, limit: int):
        self.wsgi_app = wsgi_app
        self.limit = limit

    def __call__(self, environ, start_response):
        te = environ.get("HTTP_TRANSFER_ENCODING")
        if te is None or environ.get("CONTENT_LENGTH") or "chunked" not in te.lower():
            return self.wsgi_app(environ, start_response)
        import io
        stream, parts, size = environ["wsgi.input"], [], 0
        while size <= self.limit:
            part = stream.read(min(65536, self.limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > self.limit:
            import orjson
            path = environ.get("PATH_INFO", "")
            if path == "/v1/messages" or path.startswith("/v1/messages/"):
                body = orjson.dumps({"type": "error", "error": {"type": "request_too_large", "message": self.MESSAGE}})
            else:
                body = orjson.dumps({"error": {"message": self.MESSAGE, "type": "RequestEntityTooLarge",
                                               "param": None, "code": 413}})
            start_response("413 Request Entity Too Large", [("Content-Type", "application/json"),
                                                            ("Content-Length", str(len(body)))])
            return [body]
        data = b"".join(parts)
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        return self.wsgi_app(environ, start_response)


# ---------------------------------------------------------------------------------------------
# TLS
def make_self_signed_cert(directory: str, host: str = "") -> tuple[str, str]:
    """Write a self-signed certificate and its key (PEM) into ``directory``; returns
    ``(certfile, keyfile)``.

    As the reference's ``--self-signed-certs`` (O="llm-d Inference Simulator", serverAuth, ten
    years) but with an ECDSA P-256 key instead of RSA-4096 (made in milliseconds, not seconds)
    and with subject alternative names ``localhost``, ``127.0.0.1``, ``::1`` and ``host``, so a
    client can pin the file and still check the host name."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llm-d Inference Simulator"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    sans: list = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                  x509.IPAddress(ipaddress.ip_address("::1"))]
    if host and host not in ("0.0.0.0", "::", "localhost", "127.0.0.1", "::1"):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    certfile = os.path.join(directory, "cert.pem")
    keyfile = os.path.join(directory, "key.pem")
    fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    with open(certfile, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    return certfile, keyfile


def tls_files(config) -> dict | None:
    """The TLS settings for gunicorn (``certfile``, ``keyfile``, ``ca_certs``), or None for
    plain HTTP.  ``--self-signed-certs`` makes a pair in a private temporary directory
    (mode 0700, removed at exit).  The pair is loaded once here so that a bad file is one line
    at start-up (raises ValueError naming the flag), not a failure per connection."""
    import ssl
    certfile = getattr(config, "ssl_certfile", "") or ""
    keyfile = getattr(config, "ssl_keyfile", "") or ""
    ca = getattr(config, "ssl_ca_certs", "") or ""
    if getattr(config, "self_signed_certs", False):
        if certfile or keyfile:
            raise ValueError("cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile")
        import shutil
        import tempfile
        directory = tempfile.mkdtemp(prefix="vllm-sim-tls-")
        atexit.register(shutil.rmtree, directory, True)
        certfile, keyfile = make_self_signed_cert(directory, config.host)
    elif bool(certfile) != bool(keyfile):
        raise ValueError("both ssl-certfile and ssl-keyfile must be provided together")
    if not certfile:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"--ssl-certfile/--ssl-keyfile: cannot load {certfile} / {keyfile}: {e}") from None
    if ca:
        try:
            ctx.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"--ssl-ca-certs: cannot load {ca}: {e}") from None
    return {"certfile": certfile, "keyfile": keyfile, "ca_certs": ca or None}


# ---------------------------------------------------------------------------------------------
# start-up summary
def urls(config, tls: bool) -> list[str]:
    scheme = "https" if tls else "http"
    host = config.host if config.host not in ("0.0.0.0", "::", "") else "localhost"
    if ":" in host:
        host = f"[{host}]"
    return [f"{scheme}://{host}:{config.port}"]


def startup_summary(config, tls: bool, api_key: bool, listen: list[str] | None = None) -> list[str]:
    """The lines logged at start: model, mode, tokenizer, latencies, capacity, KV, URLs
    (``listen``: the URLs when gunicorn's ``-b`` decides them)."""
    from generation.config import format_duration as d
    c = config
    tok = "simulated"
    if getattr(c, "force_dummy_tokenizer", False):
        tok = "simulated (forced)"
    elif getattr(c, "render_url", ""):
        tok = f"render service {c.render_url}"
    elif c.tokenizer:
        tok = c.tokenizer
    rank = getattr(c, "data_parallel_rank", -1)
    lines = [
        f"vLLM simulator: model={c.model} served={','.join(c.served_names)} mode={c.mode} tokenizer={tok}"
        + (f" data-parallel rank {rank}/{c.data_parallel_size}" if c.data_parallel_size > 1 else ""),
        f"latency: ttft={d(c.time_to_first_token)}±{d(c.time_to_first_token_std_dev)} "
        f"itl={d(c.inter_token_latency)}±{d(c.inter_token_latency_std_dev)} "
        f"calculator={c.latency_calculator or 'legacy'} load-factor={c.time_factor_under_load:g}",
        f"capacity: max-num-seqs={c.max_num_seqs} waiting-queue={c.max_waiting_queue_length} "
        f"max-model-len={c.max_model_len} loras={len(c.lora_modules)}/{c.max_loras}",
        (f"kv cache: {c.kv_cache_size} blocks x {c.block_size} tokens, events to {c.zmq_endpoint}"
         if c.enable_kvcache else "kv cache: off"),
        f"serving {' '.join(listen or urls(c, tls))} (api key {'required' if api_key else 'off'}, "
        f"access log {'off' if getattr(c, 'disable_log_requests', False) else 'on'}, "
        f"shutdown grace {shutdown_grace(c):g}s)",
    ]
    return lines


def shutdown_grace(config) -> float:
    try:
        return max(0.0, float(getattr(config, "shutdown_timeout", 30.0)))
    except (TypeError, ValueError):
        return 30.0


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
    (2) slowed a burst's parsing enough to raise TTFT."""
    import ssl

    from gevent import Timeout
    from gevent.pool import Pool
    from gevent.server import StreamServer

    class Server(StreamServer):
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

    server = Server(listener, handle=handle, spawn=Pool(pool_size), **ssl_args)
    server.max_accept = ACCEPT_BATCH
    return server


def _peer(address) -> str:
    try:
        return "%s:%s" % tuple(address[:2])
    except (TypeError, ValueError):
        return str(address)


def _worker_base():
    from gunicorn.workers.ggevent import GeventWorker
    return GeventWorker


def _make_worker_class():
    import gevent
    from gevent import getcurrent
    from gevent.event import Event
    from gunicorn.sock import ssl_context

    GeventWorker = _worker_base()

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
            arrivals.install(ACCEPT_BATCH)  # keep-alive requests take turns with due tokens
            super().load_wsgi()
            flask_app = self.wsgi
            ext = getattr(flask_app, "extensions", {})
            sim = ext.get("simulator")
            self.lifecycle = ext.get("lifecycle")
            self.grace = shutdown_grace(sim.config) if sim is not None else 30.0

        def run(self):
            ssl_args = {"ssl_context": ssl_context(self.cfg)} if self.cfg.is_ssl else {}
            servers = []
            for s in self.sockets:
                s.setblocking(1)
                server = accept_server(s, partial(self.handle, s), self.worker_connections,
                                       self.cfg.keepalive or KEEPALIVE_SECONDS, **ssl_args)
                server.start()
                servers.append(server)
            freeze_startup_heap()
            scheme = "https" if self.cfg.is_ssl else "http"
            log.info("ready: listening on %s", ", ".join(f"{scheme}://{_addr(s)}" for s in self.sockets))
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
            for _, proc in self.children:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGQUIT if self._fast else signal.SIGTERM)
            log.info("shutting down (%s): %d request(s) in flight, grace %gs", name, len(self._busy), grace)
            arrived = self._close_idle(servers)
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
            :mod:`blueprints.arrivals`) are served, as uvicorn serves a request it has received
            when it shuts down; returns their greenlets."""
            from .arrivals import waiting_greenlets
            arrived = waiting_greenlets()
            for server in servers:
                for g in list(server.pool.greenlets):
                    if g in self._busy or g in arrived:
                        continue
                    if _has_bytes(_connection_socket(g)):
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
                if not self.alive and not self._busy:
                    self._idle_event.set()        # draining: the last request is done
            if not self.alive:
                raise StopIteration()             # draining: close the connection
            return keep

        def handle_error(self, req, client, addr, exc):
            if isinstance(exc, (gevent.GreenletExit, ServerShuttingDown)):
                return                            # our own shutdown: no traceback
            super().handle_error(req, client, addr, exc)

    return SimWorker


def _connection_socket(greenlet):
    """The client socket a StreamServer greenlet serves (gevent spawns
    ``_handle_and_close_when_done(handle, close, (socket, address))``), or None."""
    for arg in getattr(greenlet, "args", ()):
        if hasattr(arg, "recv"):
            return arg
        if isinstance(arg, tuple) and arg and hasattr(arg[0], "recv"):
            return arg[0]
    return None


def _has_bytes(sock) -> bool:
    """Whether a connection's socket holds unread bytes (a request that has arrived) or its
    peer's close; False when it cannot tell."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True
    except (OSError, AttributeError, TypeError, ValueError):      # nothing there (EAGAIN), or not a socket
        return False


def _addr(sock) -> str:
    try:
        host, port = sock.getsockname()[:2]
    except (OSError, ValueError):
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_worker_class = None


def __getattr__(name):
    # ``blueprints.server.SimWorker`` (for ``gunicorn -k``) is built on first access.
    global _worker_class
    if name == "SimWorker":
        if _worker_class is None:
            _worker_class = _make_worker_class()
        return _worker_class
    raise AttributeError(name)


# ---------------------------------------------------------------------------------------------
# data-parallel ranks
def start_data_parallel_ranks(config, argv: list[str], script: str) -> list:
    """``--data-parallel-size N``: ranks 1..N-1 are separate simulator processes (own queue, KV
    cache, metrics) on ports ``port+1 .. port+N-1``, as vLLM's data-parallel engines; this
    process is rank 0.  Children die with this process (PR_SET_PDEATHSIG).  Returns
    ``[(rank, Popen)]``."""
    import subprocess

    def die_with_parent():
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
        except OSError:
            pass

    procs = []
    for rank in range(1, config.data_parallel_size):
        args = [sys.executable, script, *argv, "--port", str(config.port + rank),
                "--data-parallel-rank", str(rank)]
        procs.append((rank, subprocess.Popen(args, preexec_fn=die_with_parent)))

    def stop():
        for _, p in procs:
            if p.poll() is None:
                p.terminate()
    atexit.register(stop)
    return procs


# ---------------------------------------------------------------------------------------------
def bind(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now (no retry, unlike gunicorn's five tries a second
    apart); raises OSError (``EADDRINUSE``: the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(4096)
    except OSError:
        s.close()
        raise
    return s


def _gunicorn_listener(sock: socket.socket, host: str, port: int):
    """Wrap a bound socket in gunicorn's listener class (what its workers expect)."""
    from gunicorn import sock as gsock

    class _Cfg:      # the few settings gunicorn's socket classes read
        reuse_port = False
        backlog = 4096
    cls = gsock.TCP6Socket if sock.family == socket.AF_INET6 else gsock.TCPSocket
    return cls((host, port), _Cfg(), logging.getLogger("gunicorn.error"), fd=sock.detach())


def listen(config):
    """Bind ``config.host:config.port``; on failure log one line (``cannot listen on HOST:PORT:
    already in use``) and return None."""
    try:
        return bind(config.host, config.port)
    except OSError as e:
        reason = "already in use" if e.errno == errno.EADDRINUSE else e.strerror
        log.error("cannot listen on %s:%d: %s", config.host, config.port, reason)
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


def freeze_startup_heap() -> None:
    """Move everything start-up built (modules, the app, the engine) out of the garbage
    collector's view, as vLLM's API server does after loading (``gc.freeze``): a full
    collection otherwise walks that whole heap, a pause of several ms that every open stream
    feels (ITL p99 +5 ms at 300 streams, issue 13)."""
    import gc
    gc.collect()
    gc.freeze()


def serve(config, app_factory, argv: list[str] | None = None, script: str | None = None,
          listener=None) -> int:
    """Serve ``app_factory()`` on ``listener`` (bound here from ``config.host:config.port``
    when None) until SIGTERM / Ctrl-C.

    Returns the exit code: 0 after a clean shutdown, 1 when the port is taken, the TLS files
    cannot be loaded, or a data-parallel rank stopped."""
    configure_logging(config)
    raise_open_files_limit()
    try:
        tls = tls_files(config)
    except ValueError as e:
        log.error("%s", e)
        if listener is not None:
            listener.close()
        return 1
    if listener is None:
        listener = listen(config)
        if listener is None:
            return 1
    from .auth import api_keys
    for line in startup_summary(config, tls is not None, bool(api_keys(config))):
        log.info("%s", line)
    from gunicorn.app.base import BaseApplication     # after the bind: a busy port fails fast

    class SimulatorApplication(BaseApplication):
        def load_config(self):
            s = self.cfg.set
            s("bind", [f"{config.host}:{config.port}"])
            s("workers", 1)
            s("worker_connections", config.worker_connections)
            s("keepalive", getattr(config, "timeout_keep_alive", KEEPALIVE_SECONDS))
            s("timeout", 0)
            s("graceful_timeout", int(shutdown_grace(config)) + 1)     # unused in-process; an int
            s("control_socket_disable", True)
            s("loglevel", log_level_name(config))
            s("logger_class", _gunicorn_logger_class(config))
            s("accesslog", None if getattr(config, "disable_log_requests", False) else "-")
            s("access_log_format", ACCESS_FORMAT)
            if tls:
                for k, v in tls.items():
                    if v:
                        s(k, v)

        def load(self):
            return app_factory()

    application = SimulatorApplication()
    children = []
    if config.data_parallel_size > 1 and config.data_parallel_rank == 0 and argv is not None:
        children = start_data_parallel_ranks(config, argv, script or sys.argv[0])
    worker_cls = __getattr__("SimWorker")
    glog = application.cfg.logger_class(application.cfg)
    listener = _gunicorn_listener(listener, config.host, config.port)
    worker = worker_cls(0, os.getppid(), [listener], application, 0, application.cfg, glog)
    worker.standalone = True
    worker.early_signals = early = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: early.append(s))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    worker.children = children
    worker.pid = os.getpid()
    worker.init_process()          # patches gevent, loads the app, serves until stopped
    return worker.exit_code


def attach_to_gunicorn(app, config) -> None:
    """Under plain gunicorn (``wsgi.py``): refuse more than one worker, give gunicorn's logger
    the simulator's format, and make SIGTERM turn ``/health/ready`` to 503 at once.

    One process is one vLLM engine: ``-w 2`` would duplicate request ids, split metrics and
    LoRAs between workers and double the capacity (issue 13), so the worker exits with
    gunicorn's boot-error code 3, which stops gunicorn with the message."""
    handler = signal.getsignal(signal.SIGTERM)
    worker = getattr(handler, "__self__", None)
    try:
        from gunicorn.workers.base import Worker
    except ImportError:
        return
    if not isinstance(worker, Worker):
        return
    configure_logging(config)
    if worker.cfg.workers > 1:
        log.error("gunicorn -w %d: the simulator is one vLLM engine per process; run one worker "
                  "(-w 1) and use --data-parallel-size N for N engines (ports --port .. --port+N-1)",
                  worker.cfg.workers)
        sys.exit(3)
    # The access log is on unless --disable-log-requests (gunicorn's own default is off).
    quiet = bool(getattr(config, "disable_log_requests", False))
    if quiet != (worker.cfg.accesslog is None):
        worker.cfg.set("accesslog", None if quiet else "-")
        if worker.cfg.access_log_format == worker.cfg.settings["access_log_format"].default:
            worker.cfg.set("access_log_format", ACCESS_FORMAT)
        worker.log.setup(worker.cfg)
    _restyle_gunicorn_logger(worker.log, config)
    keep_alive = getattr(config, "timeout_keep_alive", KEEPALIVE_SECONDS)
    if worker.cfg.keepalive > keep_alive:
        log.warning("gunicorn --keep-alive %ss: vLLM uses %ds (--timeout-keep-alive; idle sockets hold worker "
                    "connections)", worker.cfg.keepalive, keep_alive)
    lifecycle = app.extensions.get("lifecycle")
    if lifecycle is not None and not isinstance(worker, __getattr__("SimWorker")):
        def on_term(sig, frame, _orig=handler):
            lifecycle.draining = True
            _orig(sig, frame)
        signal.signal(signal.SIGTERM, on_term)
    from .auth import api_keys
    scheme = "https" if worker.cfg.is_ssl else "http"
    listen = [f"{scheme}://{_addr(s)}" for s in worker.sockets]
    for line in startup_summary(config, worker.cfg.is_ssl, bool(api_keys(config)), listen):
        log.info("%s", line)


def fast_exit(code: int) -> None:
    """End the process now with ``code``: run the atexit handlers (temporary TLS files,
    data-parallel ranks), flush the logs, and skip the interpreter's teardown of every module
    (about half a second with the app loaded) so that a stop is quick."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
