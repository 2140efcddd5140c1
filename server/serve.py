"""Serving the app: ``python app.py`` in-process (:func:`serve`), or under gunicorn's arbiter
(:func:`attach_to_gunicorn`), and the start-up summary both log.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys

from generation.config.values import global_dp_rank

from .listening import KEEPALIVE_SECONDS, _gunicorn_listener, listen, raise_open_files_limit
from .logs import ACCESS_FORMAT, _gunicorn_logger_class, _restyle_gunicorn_logger, configure_logging, log_level_name
from .ranks import start_data_parallel_ranks
from .tls import tls_files
from .lifecycle import shutdown_grace
from .listening import sock_name

log = logging.getLogger("vllm_sim")

# ---------------------------------------------------------------------------------------------
# start-up summary
def urls(config, tls: bool) -> list[str]:
    scheme = "https" if tls else "http"
    host = config.host if config.host not in ("0.0.0.0", "::", "") else "localhost"
    if ":" in host:
        host = f"[{host}]"
    return [f"{scheme}://{host}:{config.port}"]


def _kv_line(c) -> str:
    """The KV-cache line: the simulated cache and where its events go (``--enable-kvcache``),
    step mode's own prefix cache (on, as vLLM's prefix caching, unless
    ``--no-enable-prefix-caching``; publishing nothing), or off."""
    if c.enable_kvcache:
        from generation.kvcache.events import rank_endpoint
        # the rank's own endpoint, as its publisher uses it (vLLM's offset_endpoint_port)
        events = (f"events to {rank_endpoint(c.zmq_endpoint, max(c.data_parallel_rank, 0))}" if c.zmq_endpoint
                  else "events not published")
        if getattr(c, "pod_ip_guessed", False):
            events += f" (topic {c.kv_topic()}: POD_IP is not set, this host's address stands in)"
        return f"kv cache: {c.kv_cache_size} blocks x {getattr(c, 'kv_block_span', c.block_size)} tokens, prefix caching on, {events}"
    if getattr(c, "latency_calculator", "") == "step":
        caching = "on" if getattr(c, "enable_prefix_caching", True) else "off (--no-enable-prefix-caching)"
        return (f"kv cache: {c.kv_cache_size} blocks x {getattr(c, 'kv_block_span', c.block_size)} tokens, prefix caching "
                f"{caching} (step engine), "
                f"no KV events (--enable-kvcache or --kv-events-config publishes them)")
    return "kv cache: off (no prefix caching; --enable-kvcache turns it on)"


def startup_summary(config, tls: bool, api_key: bool, listen: list[str] | None = None) -> list[str]:
    """The lines logged at start: model, mode, tokenizer, latencies, capacity, KV, URLs
    (``listen``: the URLs when gunicorn's ``-b`` decides them)."""
    from generation.config.values import format_duration as d
    c = config
    tok = "simulated"
    if getattr(c, "force_dummy_tokenizer", False):
        tok = "simulated (forced)"
    elif getattr(c, "render_url", ""):
        tok = f"render service {c.render_url}"
    elif c.tokenizer:
        tok = c.tokenizer
    elif getattr(c, "tokenizer_loaded", ""):
        tok = c.tokenizer_loaded
    rank = getattr(c, "data_parallel_rank", -1)
    kind = getattr(c, "pooling_kind", None)
    runner = f"pooling convert={kind}" if kind else "generate"
    task = getattr(c, "pooling_task", None)
    if kind and task and task != kind and not (kind == "score" and task == "classify"):
        runner += f" task={task}"          # --pooler-config's per-token task
    lines = [
        f"vLLM simulator: model={c.model} served={','.join(c.served_names)} runner={runner} mode={c.mode} "
        f"tokenizer={tok}"
        + (f" data-parallel rank {global_dp_rank(c)}/{getattr(c, 'data_parallel_size_total', None) or c.data_parallel_size}"
           if getattr(c, "data_parallel_external_lb", False) or getattr(c, "data_parallel_size_total", None)
           else f" data-parallel-size {c.data_parallel_size}" if c.data_parallel_size > 1 else ""),
        ("latency: calculator=step (the engine's steps decide TTFT and ITL; step engine line below)"
         if c.latency_calculator == "step" else
         f"latency: ttft={d(c.time_to_first_token)}±{d(c.time_to_first_token_std_dev)} "
         f"itl={d(c.inter_token_latency)}±{d(c.inter_token_latency_std_dev)} "
         f"calculator={c.latency_calculator or 'legacy'} load-factor={c.time_factor_under_load:g}"),
        f"capacity: max-num-seqs={c.max_num_seqs} waiting-queue={c.max_waiting_queue_length} "
        f"max-model-len={c.max_model_len} loras={len(c.lora_modules)}/{c.max_loras}",
        _kv_line(c),
        f"serving {' '.join(listen or urls(c, tls))} (api key {'required' if api_key else 'off'}, "
        f"access log {'off' if getattr(c, 'disable_log_requests', False) else 'on'}, "
        f"shutdown grace {shutdown_grace(c):g}s)",
    ]
    if c.data_parallel_size > 1 and rank <= 0 and getattr(c, "data_parallel_multi_port_external_lb", False):
        lines.append(f"data parallel: ranks on ports {c.port}..{c.port + c.data_parallel_size - 1}, each its own "
                     f"endpoint; the supervisor's /health, /ready, /readyz on port {c.data_parallel_supervisor_port} "
                     f"(--data-parallel-multi-port-external-lb)")
    elif c.data_parallel_size > 1 and rank <= 0 and getattr(c, "data_parallel_external_lb", False):
        lines.append(f"data parallel: ranks on ports {c.port}..{c.port + c.data_parallel_size - 1}, each its own "
                     f"endpoint (--data-parallel-external-lb)")
    elif c.data_parallel_size > 1 and rank <= 0:
        lines.append(f"data parallel: {c.data_parallel_size} engines in this process behind --port, each request "
                     f"to the least loaded (vLLM's API server; X-data-parallel-rank picks one; one port per rank: "
                     f"--data-parallel-external-lb)")
    step = getattr(c, "step", None)
    if step is not None:                  # step mode: what vLLM logs about its KV cache
        lines[2:2] = step.summary(c.max_model_len)
    return lines



def apply_server_settings(s, config, tls) -> None:
    """gunicorn's settings for one in-process worker serving ``config`` (``s``: ``cfg.set``),
    with ``tls`` (the ``certfile`` / ``keyfile`` / ... settings, or None); the bind is the
    caller's (one address, or a fleet's many)."""
    s("workers", 1)
    s("worker_connections", config.worker_connections)
    s("keepalive", getattr(config, "timeout_keep_alive", KEEPALIVE_SECONDS))
    s("timeout", 0)
    s("graceful_timeout", int(shutdown_grace(config)) + 1)     # unused in-process; an int
    s("control_socket_disable", True)
    s("forwarder_headers", "")       # no SCRIPT_NAME / PATH_INFO from request headers
    s("loglevel", "debug" if log_level_name(config) == "trace" else log_level_name(config))   # gunicorn has no trace
    s("logger_class", _gunicorn_logger_class(config))
    s("accesslog", None if getattr(config, "disable_log_requests", False) else "-")
    s("access_log_format", ACCESS_FORMAT)
    if log_level_name(config) not in ("debug", "trace"):
        from .gunicorn_tuning import no_pre_request
        s("pre_request", no_pre_request)          # the default logs "METHOD path" at debug level
    if tls:
        for k, v in tls.items():
            if v:
                s(k, v)


def serve(config, app_factory, argv: list[str] | None = None, script: str | None = None,
          listener=None) -> int:
    """Serve ``app_factory()`` on ``listener`` (bound here from ``config.host:config.port``
    when None) until SIGTERM / Ctrl-C.

    Returns the exit code: 0 after a clean shutdown, 1 when the port is taken, the TLS files
    cannot be loaded, or a data-parallel rank stopped."""
    configure_logging(config)
    raise_open_files_limit()
    if getattr(config, "grpc", False):
        if listener is not None:
            listener.close()
        return serve_grpc(config, app_factory)
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
    supervised = (getattr(config, "data_parallel_multi_port_external_lb", False) and argv is not None
                  and config.data_parallel_size > 1 and config.data_parallel_rank == 0)
    probes = None
    if supervised:                  # vLLM's multi-port supervisor: its probes on a port of their own
        probes = listen(config, config.data_parallel_supervisor_port)
        if probes is None:
            listener.close()
            return 1
        app_factory = _supervised(app_factory, config, lambda: children)
    from .auth import api_keys
    for line in startup_summary(config, tls is not None, bool(api_keys(config))):
        log.info("%s", line)
    from gunicorn.app.base import BaseApplication     # after the bind: a busy port fails fast

    class SimulatorApplication(BaseApplication):
        def load_config(self):
            s = self.cfg.set
            s("bind", [f"{config.host}:{config.port}"])
            apply_server_settings(s, config, tls)

        def load(self):
            app = app_factory()
            from generation.kvcache.cache import event_socket_problem
            for sim in getattr(app, "sims", None) or [app.extensions.get("simulator")]:    # a DP API: each rank's
                problem = event_socket_problem(getattr(sim, "kv_cache", None))
                if problem:                 # vLLM's engine does not start without its event sockets
                    log.error("%s", problem)
                    raise SystemExit(1)
            return app

    application = SimulatorApplication()
    children = []
    if config.data_parallel_size > 1 and config.data_parallel_rank == 0 and argv is not None:
        children = start_data_parallel_ranks(config, argv, script or sys.argv[0])
    from .worker import SimWorker  # imports gevent's worker: only once serving
    worker_cls = SimWorker
    glog = application.cfg.logger_class(application.cfg)
    listener = _gunicorn_listener(listener, config.host, config.port)
    sockets = [listener]
    if probes is not None:
        sockets.append(_gunicorn_listener(probes, config.host, config.data_parallel_supervisor_port))
    worker = worker_cls(0, os.getppid(), sockets, application, 0, application.cfg, glog)
    worker.standalone = True
    worker.early_signals = early = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: early.append(s))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    worker.children = children
    worker.pid = os.getpid()
    worker.init_process()          # patches gevent, loads the app, serves until stopped
    return worker.exit_code


def _supervised(app_factory, config, children):
    """``app_factory`` whose app also answers the multi-port supervisor's probes
    (:mod:`server.dp_supervisor`); ``children()``: the other local ranks' ``[(rank, Popen)]``."""
    from .dp_supervisor import Supervised

    def factory():
        app = app_factory()
        ranks = lambda: [(config.port, None)] + [(config.port + r, p) for r, p in children()]    # noqa: E731
        return Supervised(app, config.data_parallel_supervisor_port, config.host, ranks,
                          app.extensions.get("lifecycle"))
    return factory


def serve_grpc(config, app_factory) -> int:
    """``--grpc``: serve only vLLM's gRPC API on ``--host:--port`` (no HTTP, as ``vllm serve
    --grpc``), on gevent, until SIGTERM / Ctrl-C; in-flight RPCs get the shutdown grace.
    Returns the exit code (1 when the port cannot be bound)."""
    from gevent import monkey
    monkey.patch_all()
    import gevent
    from gevent.event import Event
    from .grpc_engine import start_grpc_server
    from .worker import freeze_startup_heap, grpc_host

    app = app_factory()
    sim = app.extensions["simulator"]
    from generation.kvcache.cache import event_socket_problem
    problem = event_socket_problem(sim.kv_cache)
    if problem:                          # as serve(): vLLM's engine does not start without them
        log.error("%s", problem)
        return 1
    lifecycle = app.extensions.get("lifecycle")
    address = f"{grpc_host(config.host)}:{config.port}"
    for line in startup_summary(config, False, False, [f"grpc://{address}"]):
        log.info("%s", line)
    try:
        server = start_grpc_server(sim, address, lifecycle)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    stop = Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop.set)
    freeze_startup_heap()
    log.info("ready: gRPC on %s", address)
    stop.wait()
    grace = shutdown_grace(config)
    if lifecycle is not None:
        lifecycle.draining = True
    from .grpc_engine import stop_grpc
    log.info("shutting down: %d gRPC stream(s) in flight, grace %gs", server.servicer.in_flight(), grace)
    stop_grpc(server, grace).wait(grace + 2.0)
    log.info("shutdown complete")
    return 0


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
                  "(-w 1) and use --data-parallel-size N for N engines",
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
    if worker.cfg.forwarder_headers == worker.cfg.settings["forwarder_headers"].default.split(","):
        # gunicorn's default lets a loopback peer (a sidecar proxy) set SCRIPT_NAME / PATH_INFO
        # with headers, and a SCRIPT_NAME the path does not start with was a 500 on every route
        worker.cfg.set("forwarder_headers", "")
    keep_alive = getattr(config, "timeout_keep_alive", KEEPALIVE_SECONDS)
    if worker.cfg.keepalive > keep_alive:
        log.warning("gunicorn --keep-alive %ss: vLLM uses %ds (--timeout-keep-alive; idle sockets hold worker "
                    "connections)", worker.cfg.keepalive, keep_alive)
    lifecycle = app.extensions.get("lifecycle")
    from .worker import SimWorker
    if lifecycle is not None and not isinstance(worker, SimWorker):
        def on_term(sig, frame, _orig=handler):
            lifecycle.draining = True
            _orig(sig, frame)
        signal.signal(signal.SIGTERM, on_term)
    from .auth import api_keys
    scheme = "https" if worker.cfg.is_ssl else "http"
    listen = [f"{scheme}://{sock_name(s)}" for s in worker.sockets]
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
