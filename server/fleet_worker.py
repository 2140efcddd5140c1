"""Serving a fleet (:mod:`server.fleet`): one gunicorn gevent worker (:class:`FleetWorker`,
the simulator's :class:`server.worker.SimWorker`) accepting on every pod's listener and the
control API's, the start-up summary, and on SIGTERM / Ctrl-C every pod drained together.
"""
from __future__ import annotations

import logging
import os
import signal

from .fleet import Fleet, FleetError, Pod
from .fleet_control import control_app

log = logging.getLogger("vllm_sim")


def build_fleet(config, app_factory, bind: bool = True) -> Fleet:
    """The fleet of ``config.fleet_size`` pods (ready at once; ``--startup-duration`` still
    holds each one's ``/health/ready``) and its control API (:mod:`server.fleet_control`) when
    ``--fleet-control-port``.  Raises FleetError when an address cannot be bound (the pods
    bound so far are closed)."""
    fleet = Fleet(config, app_factory, bind)
    try:
        for _ in range(config.fleet_size):
            fleet.add(0.0)
        if config.fleet_control_port:
            fleet.control = control_app(fleet)
            from .auth import APIKeyMiddleware, api_keys
            if api_keys(config):             # --api-key guards the control API too (probes open)
                fleet.control = APIKeyMiddleware(fleet.control, api_keys(config))
            host, port = config.host, config.fleet_control_port
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
            pod.close()                      # its KV-event sockets too
        raise
    return fleet


def serve_fleet(config, app_factory) -> int:
    """Serve ``config.fleet_size`` pods (``app_factory(pod_config)`` builds each one's app) and
    the control API from this process with one gunicorn gevent worker until SIGTERM / Ctrl-C,
    then drain every pod.  Returns the exit code (1 when an address cannot be bound)."""
    from .listening import raise_open_files_limit
    from .lifecycle import shutdown_grace
    from .logs import configure_logging
    from .tls import tls_files
    configure_logging(config)
    raise_open_files_limit()
    try:
        tls = tls_files(config)
    except ValueError as e:
        log.error("%s", e)
        return 1
    try:
        fleet = build_fleet(config, app_factory)
    except FleetError as e:
        log.error("%s", e.message)
        return 1
    from .serve import apply_server_settings, startup_summary
    from .auth import api_keys
    pods = list(fleet.pods.values())
    listen = [f"{'https' if tls else 'http'}://{pods[0].host}:{pods[0].port}"
              + (f" .. {pods[-1].host}:{pods[-1].port}" if len(pods) > 1 else "")] if pods else []
    for line in startup_summary(pods[0].sim.config if pods else config, tls is not None,
                                bool(api_keys(config)), listen):
        log.info("%s", line)
    log.info("fleet: %d pods (%s), pod names %s..%s, control API %s", len(pods),
             "one port each" if config.fleet_addresses == "ports" else "one loopback address each",
             pods[0].name if pods else "-", pods[-1].name if pods else "-",
             f"on {config.host}:{config.fleet_control_port}" if config.fleet_control_port else "off")
    from gunicorn.app.base import BaseApplication

    class FleetApplication(BaseApplication):
        def load_config(self):
            s = self.cfg.set
            s("bind", [f"{p.host}:{p.port}" for p in pods])
            apply_server_settings(s, config, tls)

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

        def start_pod(self, pod: Pod) -> None:
            pod.server = self.accept_on(pod.listener)

        def run(self):
            from .unfinished import current
            from .worker import freeze_startup_heap, idle_of, no_thread_names_in_logs
            # the pods share this process's heap: the frozen objects' reclaim waits for every pod,
            # added ones too, to be idle
            self.pause_collector_in_bursts(lambda: all(idle_of(s)() for p in list(fleet.pods.values()) for s in p.sims))
            # gevent's patch() rebuilt the listeners as gevent sockets (self.sockets, in order)
            pods_now = list(fleet.pods.values())
            for pod, sock in zip(pods_now, self.sockets):
                pod.listener = sock
                self.start_pod(pod)
            self.control_server = None
            if fleet.control is not None:
                fleet.control_listener = self.sockets[len(pods_now)]
                self.control_server = self.accept_on(fleet.control_listener)
            fleet.worker = self
            self.unfinished = current()
            no_thread_names_in_logs()
            freeze_startup_heap()
            log.info("ready: %d pods listening%s", len(fleet.pods),
                     f", control API on http://{fleet.control_key[0]}:{fleet.control_key[1]}"
                     if fleet.control_key else "")
            while self._stop_signal is None:
                self._stop_event.wait(0.25)
            servers = [p.server for p in fleet.pods.values() if p.server is not None and not p.draining]
            for pod in list(fleet.pods.values()):
                pod.draining = True
                pod.lifecycle.draining = True
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

    listeners = [p.listener for p in pods] + ([fleet.control_listener] if fleet.control is not None else [])
    glog = application.cfg.logger_class(application.cfg)
    worker = FleetWorker(0, os.getppid(), listeners, application, 0, application.cfg, glog)
    worker.standalone = True
    worker.early_signals = early = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: early.append(s))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    worker.children = []
    worker.pid = os.getpid()
    worker.init_process()
    return worker.exit_code
