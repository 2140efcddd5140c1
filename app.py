"""vLLM simulator: the Flask app factory and the command line.

``python app.py --model NAME --port 8000 [flags]`` parses the reference simulator's flags and
serves the app with gunicorn in-process: one gevent worker (the simulator's queue, KV cache
and counters live in one process), many worker connections, no response buffering.
``gunicorn -k gevent -w 1 'wsgi:app'`` and ``flask --app wsgi run`` use :mod:`wsgi`.
"""
from __future__ import annotations

import logging
import sys

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from generation.config import ConfigError, SimConfig, ignored_flags, load_config
from generation.errors import APIError, SimulatorError, error_type

log = logging.getLogger("vllm_sim")


def create_app(config: SimConfig | None = None) -> Flask:
    """Build the Flask app with one :class:`generation.engine.Simulator` and every blueprint."""
    import orjson
    from generation.engine import ClientDisconnected, Simulator
    from blueprints import admin, chat, completions, health, lora, metrics, models
    from blueprints.common import error_response

    config = config or load_config([])
    app = Flask("vllm_sim")
    app.config["MAX_CONTENT_LENGTH"] = config.max_request_body_size_mb * 1024 * 1024
    sim = Simulator(config)
    app.extensions["simulator"] = sim
    _install_optional_subsystems(sim)
    for bp in (chat.bp, completions.bp, models.bp, health.bp, lora.bp, metrics.bp, admin.bp):
        app.register_blueprint(bp)
    for name in ("embeddings", "render", "generate", "messages", "responses"):
        mod = _optional_module(f"blueprints.{name}")
        if mod is not None:
            app.register_blueprint(mod.bp)

    app.wsgi_app = _yield_after_each_response(app.wsgi_app)

    @app.errorhandler(SimulatorError)
    def _api_error(err: SimulatorError):
        return error_response(err)

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException):
        status = err.code or 500
        body = {"error": {"message": err.description or err.name, "type": error_type(status),
                          "param": None, "code": status}}
        resp = Response(orjson.dumps(body), status=status, mimetype="application/json")
        if status == 405 and hasattr(err, "valid_methods") and err.valid_methods:
            resp.headers["Allow"] = ", ".join(err.valid_methods)
        return resp

    @app.errorhandler(ClientDisconnected)
    def _gone(err):
        return Response(b"", status=499)   # nginx's "client closed request"; nobody reads it

    @app.errorhandler(Exception)
    def _unexpected(err: Exception):
        log.exception("unexpected error")
        return error_response(APIError(f"Internal server error: {type(err).__name__}: {err}", 500))

    return app


def _yield_after_each_response(wsgi_app):
    """Give other connections a turn after every response.

    A gevent socket only yields when a read would block; a keep-alive client that sends its
    next request at once (load generators do) would otherwise be served again and again while
    other connections starve (seen with wrk: p50 0.4 ms, p90 200 ms).  ``gevent.sleep(0)`` when
    the server closes the response puts the greenlet at the back of the run queue."""
    import types

    import gevent
    from werkzeug.wsgi import ClosingIterator

    def app(environ, start_response):
        body = wsgi_app(environ, start_response)
        if isinstance(body, types.GeneratorType):
            return body           # SSE bodies yield in their own ``finally`` (no layer per token)
        return ClosingIterator(body, gevent.sleep)
    return app


def _install_optional_subsystems(sim) -> None:
    """Attach subsystems that live in their own modules (tools, KV cache) when present."""
    tools = _optional_module("generation.tools")
    if tools is not None:
        sim.tool_synthesizer = tools.ToolSynthesizer(sim)
    if sim.config.enable_kvcache:
        kvcache = _optional_module("generation.kvcache")
        if kvcache is not None:
            sim.kv_cache = kvcache.KVCache(sim)


def _optional_module(name: str):
    import importlib
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        return None


def serve(config: SimConfig) -> None:
    """Run the app under gunicorn: one gevent worker, as the design requires."""
    from gunicorn.app.base import BaseApplication

    if config.tokenizer:
        # transformers / huggingface_hub fail to import once gevent has patched `select`:
        # import them in the master, before the worker forks and patches.
        import importlib
        try:
            importlib.import_module("transformers")
        except ImportError:
            pass

    class SimulatorApplication(BaseApplication):
        def load_config(self):
            self.cfg.set("bind", [f"{config.host}:{config.port}"])
            self.cfg.set("workers", 1)
            self.cfg.set("worker_class", "gevent")
            self.cfg.set("worker_connections", config.worker_connections)
            self.cfg.set("keepalive", 75)
            self.cfg.set("timeout", 0)
            self.cfg.set("graceful_timeout", 30)
            self.cfg.set("backlog", 4096)
            self.cfg.set("loglevel", "info")

        def load(self):
            return create_app(config)

    SimulatorApplication().run()


def start_data_parallel_ranks(config: SimConfig, argv: list[str]) -> list:
    """``--data-parallel-size N``: ranks 1..N-1 are separate simulator processes (own queue, KV
    cache, metrics) on ports ``port+1 .. port+N-1``, as vLLM's data-parallel engines; this
    process is rank 0.  Children die with this process."""
    import atexit
    import signal
    import subprocess

    def die_with_parent():
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
        except OSError:
            pass

    procs = []
    for rank in range(1, config.data_parallel_size):
        args = [sys.executable, __file__, *argv, "--port", str(config.port + rank),
                "--data-parallel-rank", str(rank)]
        procs.append(subprocess.Popen(args, preexec_fn=die_with_parent))

    def stop():
        for p in procs:
            if p.poll() is None:
                p.terminate()
    atexit.register(stop)
    return procs


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("vLLM simulator: model=%s served=%s port=%d mode=%s", config.model, config.served_names,
             config.port, config.mode)
    if ignored_flags(config):
        log.info("ignored vLLM flags (no meaning in the simulator): %s", " ".join(ignored_flags(config)))
    if config.dataset_path and config.mode != "echo":     # one line for a bad file, not a traceback
        from data.dataset import DatasetError, verify_dataset
        try:
            verify_dataset(config.dataset_path, config.dataset_table_name)
        except DatasetError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if config.data_parallel_size > 1 and config.data_parallel_rank < 0:
        config.data_parallel_rank = 0
        start_data_parallel_ranks(config, argv)
    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
