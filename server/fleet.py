"""Many simulated vLLM pods in one process (``--fleet-size N``), in real time over HTTP.

Each pod is what ``python app.py`` serves, built by :func:`app.create_app` from its own copy of
the configuration: its own Flask app, engine, queue, KV pool, Prometheus registry
(``/metrics``), KV-event publisher and topic, sleep and checkpoint state, and its own identity
(``x-inference-pod`` / ``x-inference-port``, the KV topic's ``kv@<ip>:<port>@<model>``).  Only
the tokenizer, step mode's resolved settings (:class:`generation.engine.step_config.StepSettings`,
read-only) and the gevent hub are shared.  The pods listen on consecutive ports
(``--fleet-addresses ports``: pod i at ``--port + i``) or on one loopback address each
(``loopback``: pod i at ``127.1.0.1 + i``, all at ``--port``, which is also its ``POD_IP``).

One gunicorn gevent worker (:class:`server.fleet_worker.FleetWorker`) accepts on every pod's
listener; a request is handed to its pod's app by the address it arrived on (gunicorn's
``SERVER_NAME`` / ``SERVER_PORT`` are the listener's address), in :meth:`Fleet.__call__`, a
dict look-up.

Pods are added and removed at run time through a control API (``--fleet-control-port``,
:mod:`server.fleet_control`).  A pod added with a start-up delay answers 503 on every route (``/health``
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
import time

from generation.config.sim_config import MAX_FLEET_PODS

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
    and the greenlets serving its requests now (``busy``, kept by
    :class:`server.fleet_worker.FleetWorker`)."""

    def __init__(self, index: int, name: str, host: str, port: int, app, startup_delay: float = 0.0):
        self.index, self.name, self.host, self.port = index, name, host, port
        self.app = app
        self.sim = app.extensions["simulator"]
        dp = app.extensions.get("data_parallel")     # a pod of --data-parallel-size N: its engines
        self.sims = list(dp.sims) if dp is not None else [self.sim]
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
        from .dp_api import engine_counts
        counts = [engine_counts(s) for s in self.sims]     # [waiting, running, KV usage] of each engine
        return {"name": self.name, "index": self.index, "url": self.url(), "host": self.host, "port": self.port,
                "state": self.state, "ready_in_s": round(max(self.ready_at - time.monotonic(), 0.0), 3),
                "in_flight": len(self.busy), "running": sum(c[1] for c in counts), "waiting": sum(c[0] for c in counts),
                "kv_cache_usage_perc": float(sum(c[2] for c in counts) / len(counts)),
                "kv_events_topic": self.sim.config.kv_topic()}

    def socket_problem(self) -> str | None:
        """Why the pod's KV-event publisher or replay socket is not bound (an endpoint in use:
        the fleet offsets both by the pod's index, as vLLM offsets them by data-parallel rank, so
        adjacent port numbers collide), else None."""
        from generation.kvcache.cache import event_socket_problem
        for sim in self.sims:
            problem = event_socket_problem(sim.kv_cache)
            if problem:
                return problem
        return None

    def close(self) -> None:
        """Flush and close the pod's KV-event publishers (one per engine) and replay sockets."""
        for sim in self.sims:
            kv = sim.kv_cache
            publisher = getattr(kv, "publisher", None) if kv is not None else None
            if publisher is None:
                continue
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
    resolved); each pod gets a copy (:meth:`pod_config`).  ``app_factory(pod_config)``: one
    pod's WSGI app with ``extensions["simulator"]`` and ``["lifecycle"]`` (``app.create_app``
    with the tokenizer every pod shares).  ``bind``: bind each pod's listener (False for
    in-process use: requests are routed by the ``SERVER_NAME`` / ``SERVER_PORT`` a test client
    sets from its URL)."""

    def __init__(self, config, app_factory, bind: bool = True):
        self.config = config
        self.app_factory = app_factory
        self.bind = bind
        self.pods: dict[str, Pod] = {}       # name -> pod (serving or draining), in index order
        self.by_key: dict = {}               # (SERVER_NAME, SERVER_PORT) -> Pod or the control app
        self.next_index = 0
        self.worker = None                   # the FleetWorker once serving (starts accept servers)
        self.started = time.monotonic()
        self.extensions: dict = {}           # what SimWorker.load_wsgi looks for on an app
        self.removed = 0
        self._cpu_mark = (time.monotonic(), _cpu_seconds())
        self.control = None                  # the control API's WSGI app (--fleet-control-port)
        self.control_key = None
        self.control_listener = None

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
        c = base.copy(share_step=True)             # step settings: shared, read-only
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
        span = max(base.data_parallel_size, 1)     # a DP pod's ranks offset them further: pods step over them
        if c.zmq_endpoint and is_bind_endpoint(c.zmq_endpoint):
            c.zmq_endpoint = rank_endpoint(c.zmq_endpoint, index * span)
        if c.kv_events_replay_endpoint:
            c.kv_events_replay_endpoint = rank_endpoint(c.kv_events_replay_endpoint, index * span)
        c.fleet_size = 0
        if span > 1:
            c.data_parallel_rank = 0                # the pod's DP endpoint makes its ranks
        return c

    def add(self, startup_delay: float = 0.0) -> Pod:
        """Start the next pod (index = one more than any before, so a removed pod's port is not
        reused while its old connections may linger).  It answers 503 for ``startup_delay``
        seconds.  Raises FleetError (409) when its address cannot be bound; that index is then
        passed over, so that the next pod tries the next port instead of the taken one for good."""
        if len(self.pods) >= MAX_FLEET_PODS:
            raise FleetError(f"the fleet holds at most {MAX_FLEET_PODS} pods (--fleet-size's bound); "
                             f"remove some first", 409)
        index = self.next_index
        host, port = self.address(index)
        listener = None
        if self.bind:
            from .listening import _gunicorn_listener, bind
            try:
                sock = bind(host, port)
            except OSError as e:
                self.next_index += 1
                raise FleetError(f"cannot listen on {host}:{port}: {e.strerror}", 409) from None
            except OverflowError:          # --port + index past 65535
                raise FleetError(f"cannot listen on {host}:{port}: no such port", 409) from None
            listener = _gunicorn_listener(sock, host, port)
            name = listener.getsockname()
            host, port = str(name[0]), int(name[1])
        self.next_index += 1
        config = self.pod_config(index)
        if config.data_parallel_size > 1:           # the pod is vLLM's one endpoint over its DP engines
            from .dp_api import build_data_parallel_api
            app = build_data_parallel_api(config, self.app_factory)
        else:
            app = self.app_factory(config)
        pod = Pod(index, config.pod_name, host, port, app, startup_delay)
        pod.listener = listener
        problem = pod.socket_problem()
        if problem:                     # vLLM's engine does not start without its event sockets
            pod.close()
            if listener is not None:
                listener.close()
            raise FleetError(f"pod {pod.name}: {problem}", 409)
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
