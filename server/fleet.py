"""Many simulated vLLM pods in one process (``--fleet-size N``), in real time over HTTP.

Each pod is what ``python app.py`` serves, built by :func:`app.create_app` from its own copy of
the configuration: its own Flask app, engine, queue, KV pool, Prometheus registry
(``/metrics``), KV-event publisher and topic, sleep and checkpoint state, and its own identity
(``x-inference-pod`` / ``x-inference-port``, the KV topic's ``kv@<ip>:<port>@<model>``).  Only
the tokenizer, step mode's resolved settings (:class:`generation.engine.step_config.StepSettings`,
read-only) and the gevent hub are shared.  The pods listen on consecutive ports
(``--fleet-addresses ports``: pod i at ``--port + i``) or on one loopback address each
(``loopback``: pod i at ``127.1.0.1 + i``, all at ``--port``, which is also its ``POD_IP``).

One gunicorn gevent worker (:class:`FleetWorker`) accepts on every pod's listener; a request is
handed to its pod's app by the address it arrived on (gunicorn's ``SERVER_NAME`` /
``SERVER_PORT`` are the listener's address), in :meth:`Fleet.__call__`, a dict look-up.

Pods are added and removed at run time through a control API (``--fleet-control-port``,
:func:`control_app`).  A pod added with a start-up delay answers 503 on every route (``/health``
included) until the delay is over, as an autoscaler sees a pod that is starting.  A removed pod
drains as a server that is stopped does: its listener closes at once (new connections are
refused), idle keep-alive connections are closed, requests that arrived are served to the end
(streams included) within the grace (``?timeout=``, default ``--shutdown-timeout``), and then
its KV-event publisher closes and it is forgotten: its port refuses connections and its metrics
are gone.

Process-wide parts stay process-wide, as they belong to the one event loop: the arrival turns
(:mod:`server.arrivals`), the unfinished-body reaper (:mod:`server.unfinished`) and the hub
emitter (:mod:`server.sse_emitter`).
"""
from __future__ import annotations

import ipaddress
import logging
import os
import resource
import signal
import time
from functools import partial

log = logging.getLogger("vllm_sim")

LOOPBACK_BASE = ipaddress.IPv4Address("127.1.0.1")     # --fleet-addresses loopback: pod 0's address
DEFAULT_POD_NAME = "vllm-sim"                           # pod names are <POD_NAME or this>-<index>


class FleetError(Exception):
    """A control-API request that cannot be done (``status``: the HTTP status to answer)."""

    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


class Pod:
    """One simulated pod: its app (``app.extensions["simulator"]`` the engine), where it
    listens, its state (``starting`` until ``ready_at``, ``ready``, ``draining``, ``removed``)
    and the greenlets serving its requests now (``busy``, kept by :class:`FleetWorker`)."""

    def __init__(self, index: int, name: str, host: str, port: int, app, startup_delay: float = 0.0):
        self.index, self.name, self.host, self.port = index, name, host, port
        self.app = app
        self.sim = app.extensions["simulator"]
        self.lifecycle = app.extensions["lifecycle"]
        self.created = time.monotonic()
        self.ready_at = self.created + max(startup_delay, 0.0)
        self.draining = False
        self.removed = False
        self.listener = None          # gunicorn listener once bound
        self.server = None            # its accept server once serving
        self.key = (host, str(port))  # (SERVER_NAME, SERVER_PORT) of requests to it
        self.busy: set = set()

    @property
    def state(self) -> str:
        if self.removed:
            return "removed"
        if self.draining:
            return "draining"
        return "starting" if time.monotonic() < self.ready_at else "ready"

    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def describe(self) -> dict:
        """The control API's view of the pod (``GET /fleet/pods``)."""
        sim = self.sim
        kv = sim.kv_cache
        return {"name": self.name, "index": self.index, "url": self.url(), "host": self.host, "port": self.port,
                "state": self.state, "ready_in_s": round(max(self.ready_at - time.monotonic(), 0.0), 3),
                "in_flight": len(self.busy), "running": sim.running, "waiting": len(sim.waiting),
                "kv_cache_usage_perc": float(kv.usage()) if kv is not None else 0.0,
                "kv_events_topic": sim.config.kv_topic()}

    def close(self) -> None:
        """Flush and close the pod's KV-event publisher and replay socket."""
        kv = self.sim.kv_cache
        publisher = getattr(kv, "publisher", None) if kv is not None else None
        if publisher is None:
            return
        try:
            if hasattr(publisher, "flush"):
                publisher.flush()
        except Exception:            # a broken publisher must not stop the removal
            log.exception("pod %s: flushing its KV events failed", self.name)
        replay = getattr(getattr(publisher, "on_sent", None), "__self__", None)
        if hasattr(publisher, "close"):
            publisher.close()
        if replay is not None and hasattr(replay, "close"):
            replay.close()


_STARTING = b'{"error": {"message": "pod is starting", "type": "ServiceUnavailableError", "param": null, "code": 503}}'
_GONE = b'{"error": {"message": "no pod listens here", "type": "NotFoundError", "param": null, "code": 404}}'


class Fleet:
    """The pods of one process and the WSGI app that hands each request to its pod.

    ``config``: the command line's :class:`generation.config.sim_config.SimConfig` (step mode
    resolved); each pod gets a copy (:meth:`pod_config`).  ``tokenizer``: shared by every pod.
    ``bind``: bind each pod's listener (False for in-process use: requests are routed by the
    ``SERVER_NAME`` / ``SERVER_PORT`` a test client sets from its URL)."""

    def __init__(self, config, tokenizer=None, bind: bool = True):
        self.config = config
        self.tokenizer = tokenizer
        self.bind = bind
        self.pods: dict[str, Pod] = {}       # name -> pod (serving or draining), in index order
        self.by_key: dict = {}               # (SERVER_NAME, SERVER_PORT) -> Pod or the control app
        self.next_index = 0
        self.worker = None                   # the FleetWorker once serving (starts accept servers)
        self.started = time.monotonic()
        self.extensions: dict = {}           # what SimWorker.load_wsgi looks for on an app
        self.removed = 0
        self._cpu_mark = (time.monotonic(), _cpu_seconds())
        self.control = None
        self.control_key = None

    # ---- pods ---------------------------------------------------------------------------------
    def address(self, index: int) -> tuple[str, int]:
        """(host, port) of pod ``index``."""
        c = self.config
        if c.fleet_addresses == "loopback":
            return str(LOOPBACK_BASE + index), c.port
        return c.host, c.port + index

    def pod_config(self, index: int):
        """Pod ``index``'s configuration: the command line's with its own port / address,
        ``POD_NAME``-``index``, ``POD_IP`` (its loopback address, else as given), seed
        (``--seed + index``), KV topic (``--kv-events-config``'s ``topic`` with ``{pod}``,
        ``{ip}``, ``{port}`` filled in) and, for endpoints the publisher binds (``tcp://*:P``,
        and the replay socket), the port offset by ``index`` as data-parallel ranks do."""
        from generation.kvcache.events import is_bind_endpoint, rank_endpoint
        base = self.config
        step, base.step = base.step, None          # shared, read-only: not deep-copied per pod
        try:
            c = base.copy()
        finally:
            base.step = step
        c.step = step
        host, port = self.address(index)
        c.host, c.port = host, port
        c.pod_name = f"{base.pod_name or DEFAULT_POD_NAME}-{index}"
        if base.fleet_addresses == "loopback":
            c.pod_ip = host
        elif not c.pod_ip:           # the KV topic names the pod by address: the one it answers on
            c.pod_ip = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if base.seed is not None:
            c.seed = base.seed + index
        if c.kv_events_topic:
            c.kv_events_topic = (c.kv_events_topic.replace("{pod}", c.pod_name).replace("{ip}", c.pod_ip)
                                 .replace("{port}", str(port)))
        if c.zmq_endpoint and is_bind_endpoint(c.zmq_endpoint):
            c.zmq_endpoint = rank_endpoint(c.zmq_endpoint, index)
        if c.kv_events_replay_endpoint:
            c.kv_events_replay_endpoint = rank_endpoint(c.kv_events_replay_endpoint, index)
        c.fleet_size = 0
        return c

    def add(self, startup_delay: float = 0.0) -> Pod:
        """Start the next pod (index = one more than any before, so a removed pod's port is not
        reused while its old connections may linger).  It answers 503 for ``startup_delay``
        seconds.  Raises FleetError (409) when its address cannot be bound."""
        from app import create_app
        index = self.next_index
        host, port = self.address(index)
        listener = None
        if self.bind:
            from .listening import _gunicorn_listener, bind
            try:
                sock = bind(host, port)
            except OSError as e:
                raise FleetError(f"cannot listen on {host}:{port}: {e.strerror}", 409) from None
            listener = _gunicorn_listener(sock, host, port)
            name = listener.getsockname()
            host, port = str(name[0]), int(name[1])
        self.next_index += 1
        config = self.pod_config(index)
        app = create_app(config, self.tokenizer)
        pod = Pod(index, config.pod_name, host, port, app, startup_delay)
        pod.listener = listener
        self.pods[pod.name] = pod
        self.by_key[pod.key] = pod
        if self.worker is not None:
            self.worker.start_pod(pod)
        return pod

    def ready_pods(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.state == "ready"]

    def begin_remove(self, name: str) -> Pod:
        """Stop pod ``name`` taking connections now (its listener closes; ``/health/ready``
        turns 503 for connections already open); :meth:`finish_remove` drains it.  Raises
        FleetError (404) for an unknown name, (409) for one already draining."""
        pod = self.pods.get(name)
        if pod is None:
            raise FleetError(f"no pod named {name!r}", 404, "name")
        if pod.draining:
            raise FleetError(f"pod {name!r} is already draining", 409, "name")
        pod.draining = True
        pod.lifecycle.draining = True
        if pod.server is not None:
            pod.server.close()               # closes the listening socket: new connections refused
        elif pod.listener is not None:
            pod.listener.close()
        return pod

    def finish_remove(self, pod: Pod, timeout: float) -> dict:
        """Drain ``pod`` (see the module docstring) for at most ``timeout`` seconds, close it and
        forget it.  Returns ``{"name", "served_while_draining", "ended": requests cut at the
        deadline}``."""
        import gevent
        from .arrivals import waiting_greenlets
        from .lifecycle import ServerShuttingDown, connection_socket, has_bytes
        arrived = set()
        if pod.server is not None:
            waiting = waiting_greenlets()
            for g in list(pod.server.pool.greenlets):
                if g in pod.busy:
                    continue
                if g in waiting or has_bytes(connection_socket(g)):
                    arrived.add(g)            # its request is here: served, then the connection closes
                else:
                    g.kill(block=False)       # idle keep-alive connection
        busy_at_start = len(pod.busy) + len(arrived)
        deadline = time.monotonic() + timeout
        while (pod.busy or any(not g.dead for g in arrived)) and time.monotonic() < deadline:
            gevent.sleep(0.01)
        ended = list(pod.busy) + [g for g in arrived if not g.dead]
        for g in ended:
            g.kill(ServerShuttingDown, block=False)
        if ended:
            log.warning("pod %s: drain grace over, ending %d request(s) with an error", pod.name, len(ended))
            gevent.joinall(ended, timeout=2.0)
        if pod.server is not None:
            pod.server.stop(timeout=0.5)
        pod.close()
        pod.removed = True
        self.pods.pop(pod.name, None)
        self.by_key.pop(pod.key, None)
        self.removed += 1
        log.info("pod %s removed (%d request(s) finished while draining, %d ended)", pod.name,
                 busy_at_start, len(ended))
        return {"name": pod.name, "state": "removed", "drained": busy_at_start, "ended": len(ended)}

    def remove(self, name: str, timeout: float | None = None) -> dict:
        """:meth:`begin_remove` then :meth:`finish_remove` (blocks this greenlet)."""
        pod = self.begin_remove(name)
        return self.finish_remove(pod, self.grace() if timeout is None else timeout)

    def grace(self) -> float:
        from .lifecycle import shutdown_grace
        return shutdown_grace(self.config)

    # ---- WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        """Hand the request to the pod (or the control API) it was sent to."""
        target = self.by_key.get((environ.get("SERVER_NAME"), environ.get("SERVER_PORT")))
        if target is None:
            start_response("404 Not Found", [("Content-Type", "application/json"),
                                             ("Content-Length", str(len(_GONE)))])
            return [_GONE]
        if target.__class__ is Pod:
            if target.ready_at > target.created and time.monotonic() < target.ready_at:
                start_response("503 Service Unavailable", [("Content-Type", "application/json"),
                                                           ("Content-Length", str(len(_STARTING)))])
                return [_STARTING]
            return target.app(environ, start_response)
        return target(environ, start_response)

    # ---- figures ------------------------------------------------------------------------------
    def stats(self) -> dict:
        """``GET /fleet/stats``: pods by state, the process's CPU (seconds since start, and the
        share of one core since the previous call), resident memory and the machine's load."""
        now, cpu = time.monotonic(), _cpu_seconds()
        t0, c0 = self._cpu_mark
        self._cpu_mark = (now, cpu)
        states: dict = {}
        for p in self.pods.values():
            states[p.state] = states.get(p.state, 0) + 1
        return {"pods": len(self.pods), "states": states, "removed": self.removed,
                "cpu_seconds": round(cpu, 3), "cpu_percent": round(100.0 * (cpu - c0) / max(now - t0, 1e-9), 1),
                "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "uptime_s": round(now - self.started, 3), "load": list(os.getloadavg())}


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---- control API ---------------------------------------------------------------------------------
def control_app(fleet: Fleet):
    """The fleet's control API (``--fleet-control-port``), JSON in and out:

    * ``GET /fleet/pods``: ``{"pods": [{name, index, url, host, port, state, ready_in_s,
      in_flight, running, waiting, kv_cache_usage_perc, kv_events_topic}]}``, serving and
      draining pods in index order;
    * ``POST /fleet/pods`` ``{"count": 1, "startup_delay": S}``: start ``count`` (1-256) pods,
      each answering 503 for ``startup_delay`` seconds (default ``--fleet-startup-delay``);
      201 with ``{"pods": [...]}``;
    * ``DELETE /fleet/pods/NAME?timeout=S&wait=true``: drain and remove the pod (``timeout``:
      the drain grace, default ``--shutdown-timeout``); 202 ``{"name", "state": "draining"}``
      at once, or with ``wait=true`` 200 ``{"name", "state": "removed", "drained", "ended"}``
      once it is gone;
    * ``GET /fleet/stats``: :meth:`Fleet.stats`;
    * ``GET /metrics``: the process's CPU and memory (``process_*``) and
      ``vllm_sim:fleet_pods{state}``;
    * ``GET /health``: 200.

    Errors: 400 naming the field (``count``, ``startup_delay``, ``timeout``), 404 for an
    unknown pod, 409 for a pod already draining or a port in use."""
    import math

    import gevent
    import orjson
    from flask import Flask, Response, request
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    app = Flask("vllm_sim_fleet")
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)

    class PodsCollector:
        def collect(self):
            fam = GaugeMetricFamily("vllm_sim:fleet_pods", "Simulated pods in this process, by state.",
                                    labels=["state"])
            states = {"starting": 0, "ready": 0, "draining": 0}
            for p in list(fleet.pods.values()):
                states[p.state] = states.get(p.state, 0) + 1
            for state, n in states.items():
                fam.add_metric([state], n)
            yield fam
    registry.register(PodsCollector())

    def reply(body, status=200):
        return Response(orjson.dumps(body), status=status, mimetype="application/json")

    def error(e: FleetError):
        return reply({"error": {"message": e.message, "type": "BadRequestError" if e.status == 400 else
                                "NotFoundError" if e.status == 404 else "ConflictError",
                                "param": e.param, "code": e.status}}, e.status)

    def number(raw, name: str, default: float, low: float = 0.0) -> float:
        if raw is None:
            return default
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        except (TypeError, ValueError):
            raise FleetError(f"{name}: must be a number of seconds, got {raw!r}", 400, name) from None
        if not math.isfinite(value) or value < low or value > 3600:
            raise FleetError(f"{name}: must be between {low:g} and 3600 seconds, got {raw!r}", 400, name)
        return value

    @app.get("/fleet/pods")
    def list_pods():
        return reply({"pods": [p.describe() for p in list(fleet.pods.values())]})

    @app.post("/fleet/pods")
    def add_pods():
        try:
            body = request.get_json(silent=True) if request.data else {}
            if not isinstance(body, dict):
                raise FleetError("body: must be a JSON object", 400, "body")
            count = body.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 256:
                raise FleetError(f"count: must be an integer from 1 to 256, got {count!r}", 400, "count")
            delay = number(body.get("startup_delay"), "startup_delay", fleet.config.fleet_startup_delay)
            pods = [fleet.add(delay) for _ in range(count)]
        except FleetError as e:
            return error(e)
        log.info("added %s (start-up delay %gs)", ", ".join(p.name for p in pods), delay)
        return reply({"pods": [p.describe() for p in pods]}, 201)

    @app.delete("/fleet/pods/<name>")
    def remove_pod(name: str):
        try:
            timeout = number(request.args.get("timeout"), "timeout", fleet.grace())
            pod = fleet.begin_remove(name)
        except FleetError as e:
            return error(e)
        job = gevent.spawn(fleet.finish_remove, pod, timeout)
        if request.args.get("wait", "").lower() in ("1", "true", "yes", "on"):
            return reply(job.get())
        return reply({"name": pod.name, "state": "draining"}, 202)

    @app.get("/fleet/stats")
    def stats():
        return reply(fleet.stats())

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(registry), 200, content_type=CONTENT_TYPE_PLAIN_0_0_4)

    @app.get("/health")
    def health():
        return Response(b"", 200, mimetype="application/json")

    return app


def build_fleet(config, tokenizer=None, bind: bool = True) -> Fleet:
    """The fleet of ``config.fleet_size`` pods (ready at once; ``--startup-duration`` still
    holds each one's ``/health/ready``) and its control API when ``--fleet-control-port``.
    Raises FleetError when an address cannot be bound (the pods bound so far are closed)."""
    fleet = Fleet(config, tokenizer, bind)
    try:
        for _ in range(config.fleet_size):
            fleet.add(0.0)
        if config.fleet_control_port:
            fleet.control = control_app(fleet)
            host, port = config.host, config.fleet_control_port
            fleet.control_listener = None
            if bind:
                from .listening import _gunicorn_listener, bind as bind_socket
                try:
                    sock = bind_socket(host, port)
                except OSError as e:
                    raise FleetError(f"cannot listen on {host}:{port}: {e.strerror}", 409) from None
                fleet.control_listener = _gunicorn_listener(sock, host, port)
                name = fleet.control_listener.getsockname()
                host, port = str(name[0]), int(name[1])
            fleet.control_key = (host, str(port))
            fleet.by_key[fleet.control_key] = fleet.control
    except FleetError:
        for pod in fleet.pods.values():
            if pod.listener is not None:
                pod.listener.close()
        raise
    return fleet


# ---- serving -------------------------------------------------------------------------------------
def serve_fleet(config, tokenizer=None) -> int:
    """Serve ``config.fleet_size`` pods (and the control API) from this process with one
    gunicorn gevent worker until SIGTERM / Ctrl-C, then drain every pod.  Returns the exit code
    (1 when an address cannot be bound)."""
    from .listening import raise_open_files_limit
    from .logs import ACCESS_FORMAT, _gunicorn_logger_class, configure_logging, log_level_name
    from .listening import KEEPALIVE_SECONDS
    from .lifecycle import shutdown_grace
    from .tls import tls_files
    configure_logging(config)
    raise_open_files_limit()
    try:
        tls = tls_files(config)
    except ValueError as e:
        log.error("%s", e)
        return 1
    try:
        fleet = build_fleet(config, tokenizer)
    except FleetError as e:
        log.error("%s", e.message)
        return 1
    from .serve import startup_summary
    from .auth import api_keys
    pods = list(fleet.pods.values())
    listen = [f"{'https' if tls else 'http'}://{pods[0].host}:{pods[0].port}"
              + (f" .. {pods[-1].host}:{pods[-1].port}" if len(pods) > 1 else "")] if pods else []
    for line in startup_summary(pods[0].sim.config if pods else config, tls is not None,
                                bool(api_keys(config)), listen):
        log.info("%s", line)
    log.info("fleet: %d pods (%s addresses), pod names %s..%s, control API %s", len(pods), config.fleet_addresses,
             pods[0].name if pods else "-", pods[-1].name if pods else "-",
             f"on {config.host}:{config.fleet_control_port}" if config.fleet_control_port else "off")
    from gunicorn.app.base import BaseApplication

    class FleetApplication(BaseApplication):
        def load_config(self):
            s = self.cfg.set
            s("bind", [f"{p.host}:{p.port}" for p in pods])
            s("workers", 1)
            s("worker_connections", config.worker_connections)
            s("keepalive", getattr(config, "timeout_keep_alive", KEEPALIVE_SECONDS))
            s("timeout", 0)
            s("graceful_timeout", int(shutdown_grace(config)) + 1)
            s("control_socket_disable", True)
            s("forwarder_headers", "")
            s("loglevel", log_level_name(config))
            s("logger_class", _gunicorn_logger_class(config))
            s("accesslog", None if getattr(config, "disable_log_requests", False) else "-")
            s("access_log_format", ACCESS_FORMAT)
            if tls:
                for k, v in tls.items():
                    if v:
                        s(k, v)

        def load(self):
            return fleet

    application = FleetApplication()
    from .worker import SimWorker

    class FleetWorker(SimWorker):
        """The simulator's gevent worker over the fleet's listeners: an accept server per pod
        (started and stopped with the pod), each pod's requests in flight kept in its
        ``busy`` (a removed pod drains them), and on SIGTERM every pod drains together."""

        def load_wsgi(self):
            super().load_wsgi()
            self.grace = shutdown_grace(config)
            self.fleet = fleet

        def _accept(self, listener):
            from gunicorn.sock import ssl_context
            from .listening import accept_server
            ssl_args = {"ssl_context": ssl_context(self.cfg)} if self.cfg.is_ssl else {}
            listener.setblocking(1)
            server = accept_server(listener, partial(self.handle, listener), self.worker_connections,
                                   self.cfg.keepalive or KEEPALIVE_SECONDS, **ssl_args)
            server.start()
            return server

        def start_pod(self, pod: Pod) -> None:
            pod.server = self._accept(pod.listener)

        def run(self):
            from .unfinished import current
            from .worker import freeze_startup_heap
            # gevent's patch() rebuilt the listeners as gevent sockets (self.sockets, in order)
            pods_now = list(fleet.pods.values())
            for pod, sock in zip(pods_now, self.sockets):
                pod.listener = sock
                self.start_pod(pod)
            self.control_server = None
            if fleet.control is not None:
                fleet.control_listener = self.sockets[len(pods_now)]
                self.control_server = self._accept(fleet.control_listener)
            fleet.worker = self
            self.unfinished = current()
            freeze_startup_heap()
            log.info("ready: %d pods listening%s", len(fleet.pods),
                     f", control API on http://{fleet.control_key[0]}:{fleet.control_key[1]}"
                     if fleet.control_key else "")
            while self._stop_signal is None:
                self._stop_event.wait(0.25)
            for pod in list(fleet.pods.values()):
                pod.draining = True
                pod.lifecycle.draining = True
            servers = [p.server for p in fleet.pods.values() if p.server is not None]
            if self.control_server is not None:
                servers.append(self.control_server)
            self._drain(servers)
            for pod in list(fleet.pods.values()):
                pod.close()

        def handle_request(self, listener_name, req, sock, addr):
            pod = fleet.by_key.get((str(listener_name[0]), str(listener_name[1]))) \
                if isinstance(listener_name, tuple) else None
            if pod is None or pod.__class__ is not Pod:
                return super().handle_request(listener_name, req, sock, addr)
            from gevent import getcurrent
            g = getcurrent()
            pod.busy.add(g)
            try:
                keep = super().handle_request(listener_name, req, sock, addr)
            finally:
                pod.busy.discard(g)
            if pod.draining:
                raise StopIteration()        # a draining pod closes the connection after the response
            return keep

    import os as _os
    listeners = [p.listener for p in pods] + ([fleet.control_listener] if fleet.control is not None else [])
    glog = application.cfg.logger_class(application.cfg)
    worker = FleetWorker(0, _os.getppid(), listeners, application, 0, application.cfg, glog)
    worker.standalone = True
    worker.early_signals = early = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: early.append(s))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    worker.children = []
    worker.pid = _os.getpid()
    worker.init_process()
    return worker.exit_code
