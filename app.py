"""vLLM simulator: the Flask app factory and the command line.

``python app.py --model NAME --port 8000 [flags]`` parses the reference simulator's flags and
serves the app with gunicorn's gevent worker in-process (:mod:`server`): one
process, one engine (the simulator's queue, KV cache and counters), many worker connections,
no response buffering.  ``gunicorn -k gevent -w 1 'wsgi:app'`` and ``flask --app wsgi run``
use :mod:`wsgi`.
"""
from __future__ import annotations

if __name__ == "__main__":
    # No cyclic GC while start-up imports and builds (~100 collections of objects that live as
    # long as the process, ~0.05-0.1 s); server.worker.freeze_startup_heap collects once, freezes
    # the heap and turns it back on before the first request.
    import gc
    gc.disable()

import logging
import sys
from functools import partial
from typing import TYPE_CHECKING

from generation.config.values import ConfigError
from generation.config.sim_config import (METRICS_ONLY_FLAGS, SimConfig, ignored_flags, latency_only_flags,
                                         step_only_flags)
from generation.config.cli import load_config
from generation.errors import APIError, SimulatorError, error_type

if TYPE_CHECKING:
    from flask import Flask

log = logging.getLogger("vllm_sim")


def create_app(config: SimConfig | None = None, tokenizer=None) -> Flask:
    """Build the Flask app with one :class:`generation.engine.simulator.Simulator` and every blueprint.

    ``tokenizer``: loaded by :func:`main` before the worker forks (see
    :mod:`generation.tokenization.tokenizer_loading`); None loads it here."""
    import orjson
    from flask import Flask, Response             # here: a busy port or a bad flag fails before
    from werkzeug.exceptions import HTTPException  # Flask is imported (main())
    from generation.engine.simulator import ClientDisconnected
    from blueprints import (admin, audio, chat, completions, dev, embeddings, generate, health, lora, messages,
                            messages_render, metrics, models, render, responses)
    from blueprints.errors import error_response, internal_error, log_error_stack

    config = config or load_config([])
    app = Flask("vllm_sim", static_folder=None)          # vLLM serves no /static/<file>
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False       # OPTIONS: a 405 / 404 as vLLM's router
    # Starlette's router (vLLM's) matches the path as sent: "//v1/models" and "/v1//models" are
    # 404s there; Werkzeug merged the slashes (served the first, 308-redirected the second), so a
    # client that joins its base URL with a doubled slash worked here and failed against vLLM
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = config.max_request_body_size_mb * 1024 * 1024
    sim = build_simulator(config, tokenizer)
    app.extensions["simulator"] = sim
    install_template_bounds(config)      # gunicorn wsgi:app: after gevent's patching (python app.py: done)
    allow_deep_client_values()
    quiet_client_regex_warnings()
    kind = config.pooling_kind
    # vLLM registers routers by the model's supported tasks: a pooling model (--runner pooling)
    # has no generation routes (404), a generation model no pooling ones (/v1/embeddings aside)
    generation_apis = () if kind else (chat, completions, generate, messages, messages_render, responses, audio)
    for mod in (models, health, lora, metrics, admin, render, dev, *generation_apis):
        app.register_blueprint(mod.bp)
    if not kind:                                          # vLLM's scale-out render / derender routes
        app.register_blueprint(render.scale_out)
    from blueprints import profile
    profile.register(app, config)                         # --profiler-config with a profiler
    dev.register(app, config)                             # VLLM_SERVER_DEV_MODE=1: dev and RL routes
    if not kind and config.enable_cohere_api:            # VLLM_ENABLE_COHERE_API=1
        from blueprints import cohere
        app.register_blueprint(cohere.bp)
    from blueprints import engine_ops
    if not kind:
        engine_ops.register(app, config)
    engine_ops.register_fault_tolerance(app, config)      # every model, as vLLM's
    if not kind:                                          # vLLM: with the generate task only
        from blueprints import generative_scoring
        app.register_blueprint(generative_scoring.bp)
    from blueprints import decisions
    app.register_blueprint(decisions.bp)                  # every model: a 501 where none serves it
    if kind in (None, "embed"):
        app.register_blueprint(embeddings.bp)
    if kind:
        from blueprints import pooling
        pooling.register(app, kind)
    from blueprints import docs
    docs.register(app, config)                            # FastAPI's /openapi.json, /docs, /redoc
    from blueprints.errors import refuse_head
    refuse_head(app)                                      # vLLM's GET routes answer HEAD with 405

    from blueprints.serving import GenerationFastPath
    app.wsgi_app = fast = GenerationFastPath(app)         # generation routes without Flask's context
    app.wsgi_app = _yield_after_each_response(app.wsgi_app)
    app.extensions["lifecycle"] = health.Lifecycle()      # readiness turns 503 on shutdown
    from server.wsgi_layers import ChunkedBodyLimit
    app.wsgi_app = ChunkedBodyLimit(app.wsgi_app, app.config["MAX_CONTENT_LENGTH"])
    if config.enable_server_load_tracking:
        from server.wsgi_layers import ServerLoad
        app.wsgi_app = ServerLoad(app.wsgi_app, sim)      # GET /load: requests in flight
    if getattr(config, "log_http", False):
        from server.wsgi_layers import LogHTTP
        app.wsgi_app = LogHTTP(app.wsgi_app)
    from server.listening import KEEPALIVE_SECONDS
    from server.wsgi_layers import BodyDeadline
    app.wsgi_app = BodyDeadline(app.wsgi_app, app.config["MAX_CONTENT_LENGTH"],
                                config.timeout_keep_alive or KEEPALIVE_SECONDS)
    from server.wsgi_layers import FrontDoor, RequestGuard
    app.wsgi_app = RequestGuard(app.wsgi_app, partial(_posts_to_a_route, app))   # CORS preflight, JSON-only POSTs
    from blueprints.metrics import handler_templates, rule_of
    from generation.metrics.http import excluded
    from server.http_metrics import HandlerTable, ObservedHTTP
    # the http_* metrics, where vLLM's instrumentator middleware sits: inside the API key and CORS
    app.wsgi_app = observed = ObservedHTTP(app.wsgi_app, sim.metrics.http,
                                           HandlerTable(handler_templates(app, excluded), partial(rule_of, app)))
    app.extensions["engine_wsgi"] = observed.wsgi_app      # a DP rank's share of an operation on all ranks
    if not config.enable_server_load_tracking and not getattr(config, "log_http", False):
        # a JSON POST on a generation route skips the layers above, whose checks it passes
        app.wsgi_app = FrontDoor(app.wsgi_app, fast, config.timeout_keep_alive or KEEPALIVE_SECONDS, observed)
    if not kind and config.enable_cohere_api:            # vLLM's error envelope middleware of /cohere/
        app.wsgi_app = cohere.CohereErrors(app.wsgi_app)
    if not kind:                                          # vLLM's realtime WebSocket, inside the API key
        from blueprints import realtime
        from server.websocket import WebSocketRoutes
        app.wsgi_app = WebSocketRoutes(app.wsgi_app, {"/v1/realtime": partial(realtime.serve, sim)},
                                       sim.metrics.websocket)
    from server import auth
    auth.install(app, config, partial(_a_route_has, app))  # --api-key: outermost, before routing

    @app.errorhandler(SimulatorError)
    def _api_error(err: SimulatorError):
        from flask import request
        log_error_stack(config, err, request.environ)
        return error_response(err)

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException):
        # Routing errors (unknown path, wrong method) are Starlette's own HTTPException in vLLM,
        # which FastAPI's default handler answers: {"detail": "Not Found"} (routing_error).
        # Other HTTP errors (a 413) take vLLM's envelope with the status phrase as type;
        # on /v1/messages Anthropic's envelope.
        from flask import request
        from blueprints.errors import anthropic_error_response, http_error_message, http_error_type, routing_error
        from generation.errors import anthropic_envelope
        status = err.code or 500
        # Werkzeug's stock text ("The requested URL was not found...") marks a routing error
        stock = status in (404, 405) and err.description == type(err).description
        if stock:                 # the router's answer: the http_* metrics' handler is "none"
            from server.http_metrics import UNROUTED_KEY
            request.environ[UNROUTED_KEY] = True
        message = err.name if stock else http_error_message(err, app.config["MAX_CONTENT_LENGTH"])
        if not stock:             # a routing error is Starlette's: vLLM's handlers, which log, never see it
            log_error_stack(config, err, request.environ)
        if stock and status == 404:
            moved = _slash_redirect(app, request)
            if moved is not None:
                return moved
        if anthropic_envelope(request.path):      # not vLLM's /v1/messages/render
            resp = anthropic_error_response(message, status)
        elif stock:
            return routing_error(status, getattr(err, "valid_methods", None))
        else:
            body = {"error": {"message": message, "type": http_error_type(status),
                              "param": None, "code": status}}
            resp = Response(orjson.dumps(body), status=status, mimetype="application/json")
        if status == 405 and hasattr(err, "valid_methods") and err.valid_methods:
            resp.headers["Allow"] = ", ".join(err.valid_methods)
        return resp

    if config.enable_request_id_headers:
        from blueprints.common import install_request_id_header
        install_request_id_header(app)               # X-Request-Id on every response, errors too

    @app.errorhandler(ClientDisconnected)
    def _gone(err):
        from flask import request
        from blueprints.common import hang_up
        hang_up(request.environ)              # no response, as vLLM; the log keeps nginx's 499
        return Response(b"", status=499)

    @app.errorhandler(Exception)
    def _unexpected(err: Exception):
        log.exception("unexpected error")
        return error_response(internal_error(err))

    return app


# Starlette's RedirectResponse quotes its location with these characters kept
_LOCATION_SAFE = ":/%#?=@[]!$&'()*+,;"


def _slash_redirect(app, request):
    """Starlette's ``redirect_slashes`` (vLLM's FastAPI router keeps the default): a path no
    route has, whose form without its trailing slashes (or, without one, with one) a route has
    for some method, is a ``307 Temporary Redirect`` there, ``location`` the absolute URL with
    the query kept and no body, so ``POST /v1/chat/completions/`` is re-sent to
    ``/v1/chat/completions`` by a client that follows redirects (a 404 here before).  None
    where there is no such route."""
    from urllib.parse import quote
    from flask import Response
    path = request.path
    if path == "/":
        return None
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    if not other or not _a_route_has(app, {**request.environ, "PATH_INFO": other}):
        return None
    query = request.query_string.decode("latin-1")
    # Starlette's URL(scope=...) takes the Host header as it came (the WSGI environ holds it
    # latin-1 decoded, as Starlette decodes it), not Werkzeug's request.host, which is "" for a
    # host its character check refuses; only without the header the server's address
    host = request.environ.get("HTTP_HOST")
    url = f"{request.scheme}://{request.host if host is None else host}{request.root_path}{other}" \
        + (f"?{query}" if query else "")
    resp = _verbatim_location(Response)(b"", status=307)
    resp.headers["location"] = quote(url, safe=_LOCATION_SAFE)
    del resp.headers["Content-Type"]             # Starlette sends none with an empty body
    return resp


def _verbatim_location(response_class):
    """A response class whose ``Location`` goes out as set (already quoted ASCII): Werkzeug
    re-parses it with ``iri_to_uri``, which raises on what a client's Host header may hold (a
    port past 65535: "Port out of range", a 500 with a traceback), where Starlette sends it as
    it is."""

    class VerbatimLocation(response_class):
        def get_wsgi_headers(self, environ):
            location = self.headers.get("location")
            del self.headers["location"]
            try:
                headers = super().get_wsgi_headers(environ)
            finally:
                self.headers["location"] = location
            headers["Location"] = location
            return headers
    return VerbatimLocation


def _posts_to_a_route(app, environ) -> bool:
    """Whether a POST to ``environ``'s path matches a route of ``app`` (Werkzeug's matcher)."""
    from werkzeug.exceptions import HTTPException
    try:
        app.url_map.bind_to_environ(environ).match(method="POST")
    except HTTPException:
        return False
    return True


def _a_route_has(app, environ) -> bool:
    """Whether any route of ``app`` has ``environ``'s path (with this method or another)."""
    from werkzeug.exceptions import NotFound
    try:
        app.url_map.bind_to_environ(environ).match(method=environ.get("REQUEST_METHOD") or "GET")
    except NotFound:
        return False
    except Exception:                   # noqa: BLE001 - another method's route, or a redirect: a route has it
        return True
    return True


def _yield_after_each_response(wsgi_app):
    """Give other connections a turn after every response.

    A gevent socket only yields when a read would block; a keep-alive client that sends its
    next request at once (load generators do) would otherwise be served again and again while
    other connections starve (seen with wrk: p50 0.4 ms, p90 200 ms).  ``gevent.sleep(0)`` when
    the server closes the response puts the greenlet at the back of the run queue.  The JSON body
    a route held for its wide integers (:mod:`generation.adapters.wide_ints`; a schema load lets
    it go itself) is let go here, not kept by a keep-alive connection's greenlet."""
    import types

    import gevent
    from werkzeug.wsgi import ClosingIterator

    from generation.adapters.wide_ints import release

    def app(environ, start_response):
        try:
            body = wsgi_app(environ, start_response)
        finally:
            release(None)
        if isinstance(body, types.GeneratorType):
            return body           # SSE bodies yield in their own ``finally`` (no layer per token)
        return ClosingIterator(body, gevent.sleep)
    return app


def log_flag_notes(config: SimConfig) -> None:
    """The start-up lines about the flags given that do less here than in vLLM: those with no
    meaning, those taken for their metrics (:data:`METRICS_ONLY_FLAGS`), and each latency
    model's flags under the other."""
    ignored = ignored_flags(config)
    if meaningless := [f for f in ignored if f[2:] not in METRICS_ONLY_FLAGS]:
        log.info("ignored vLLM flags (no meaning in the simulator): %s", " ".join(meaningless))
    if metrics_only := [f"{f} ({METRICS_ONLY_FLAGS[f[2:]]})" for f in ignored if f[2:] in METRICS_ONLY_FLAGS]:
        log.info("vLLM flags taken for their metrics (tool calls and LoRA adapters are served with or "
                 "without them): %s", " ".join(metrics_only))
    if step_only_flags(config):
        log.info("vLLM flags without effect unless --latency-calculator step: %s", " ".join(step_only_flags(config)))
    if latency_only_flags(config):
        log.info("flags without effect with --latency-calculator step (its step model times every request): %s",
                 " ".join(latency_only_flags(config)))


def resolve_engine(config: SimConfig) -> None:
    """``--latency-calculator step``: resolve the GPU, the model's architecture and the KV cache
    once (:func:`generation.engine.step_config.resolve_step_settings`) into ``config.step``.
    Raises ConfigError naming the flag at fault."""
    if config.latency_calculator == "step" and config.step is None:
        from generation.engine.step_config import resolve_step_settings
        config.step = resolve_step_settings(config)
    if config.step is not None:
        config.spec_decode = config.step.spec_decode
    elif (config.speculative_config is not None or config.spec_method or config.spec_model
          or config.spec_tokens is not None):    # checked as vLLM checks it; only its metrics without steps
        from generation.engine.step_config import spec_decode_of
        config.spec_decode = spec_decode_of(config)
    if config.per_request_spec_decode_metrics != "none" and config.spec_decode is None:   # vLLM's VllmConfig check
        raise ConfigError("--per-request-spec-decode-metrics requires speculative decoding to be enabled (via "
                          "--speculative-config).", "per-request-spec-decode-metrics")


# Python's recursion limit while serving: a body orjson parses nests up to 1,024 levels, and the
# code that walks a client's value recursively (str / repr in an error message, json.dumps, a
# schema check) needs one to a few frames a level on top of the ~100-250 of the server's stack
DEEP_VALUES_RECURSION_LIMIT = 5_000


def allow_deep_client_values() -> None:
    """Raise Python's recursion limit (1,000 by default) to :data:`DEEP_VALUES_RECURSION_LIMIT`:
    at 1,000 any value some 900 levels deep that a handler formats or walks recursively raised
    RecursionError, a 500 with a traceback (``top_logprobs``, ``tool_choice``, a tool's or a
    content part's ``type``, a ``kv_transfer_params`` key quoted in their 400s, ...), where a
    shallower value of the same kind is the 400.  1,024 levels of C-level recursion (repr, the
    json encoder) take well under 1 MB of the 8 MB stacks of the hub and the native threads."""
    if sys.getrecursionlimit() < DEEP_VALUES_RECURSION_LIMIT:
        sys.setrecursionlimit(DEEP_VALUES_RECURSION_LIMIT)


# Python's regex parser's hints on a pattern (``re._parser``: ``Possible nested set at position 1``
# for ``[[:alpha:]]``, set difference / intersection / symmetric difference): a FutureWarning each,
# printed to the log once per distinct text, so a client's patterns (structured outputs, a JSON
# schema's ``pattern``) chose what the log said
CLIENT_REGEX_HINTS = r"Possible (nested set|set \w+( \w+)?) at position \d+"


def quiet_client_regex_warnings() -> None:
    """Ignore :data:`CLIENT_REGEX_HINTS` (a filter set once at start-up, for every thread)."""
    import warnings
    warnings.filterwarnings("ignore", message=CLIENT_REGEX_HINTS, category=FutureWarning)


def install_template_bounds(config: SimConfig) -> None:
    """transformers' template renderer and its bounds, when templates may render (a request's, or
    ``--chat-template``'s): at start-up, not at a first render in a worker thread (there the
    import failed after gevent's patching, a 500).  ``python app.py`` calls it before the patching
    (jinja2's and transformers' locks native), ``create_app`` again (idempotent) for ``gunicorn
    wsgi:app``, which patches first."""
    if config.trust_request_chat_template or getattr(config, "chat_template", None):
        from generation.tokenization.chat_template import install_bounded_environment
        install_bounded_environment()


def engine_seed(config):
    """The step engine's seed for its pauses and DP peers: ``--seed``, and for DP rank r > 0
    (over the whole deployment) ``<seed>-rank<r>``, so that ranks draw apart."""
    from generation.config.values import global_dp_rank
    rank = global_dp_rank(config)
    return f"{config.seed or 0}-rank{rank}" if rank else (config.seed or 0)


def build_step_engine(config: SimConfig, metrics, kv_cache, rng):
    """The step engine of ``--latency-calculator step`` (:mod:`generation.engine.step_engine`):
    vLLM V1's scheduler on ``config.step``'s KV cache, timed by its step-time model."""
    from generation.engine.replay import scheduler_for
    from generation.engine.step_engine import StepEngine
    st = config.step
    scheduler = scheduler_for(st, config.max_model_len, config.max_loras, config.scheduling_policy,
                              seed=config.seed or 0)
    from generation.engine.perf.mfu import build_perf_counters
    metrics.steps = True
    if metrics.kv_residency is not None and scheduler.enable_prefix_caching:
        # --kv-cache-metrics: the pool tells the collector of each block handed out and touched
        # (without prefix caching vLLM's pool evicts nothing: no observation, as there)
        scheduler.pool.kv_metrics = metrics.kv_residency
    engine = StepEngine(scheduler, st.step_time, metrics, kv_cache=kv_cache, rng=rng,
                        jitter=config.step_time_jitter, kv_transfer_bandwidth=config.kv_transfer_bandwidth * 1e9,
                        pause_seed=engine_seed(config))
    engine.perf = build_perf_counters(config, metrics)      # --enable-mfu-metrics, else None
    if engine.lockstep is not None and config.data_parallel_size > 1:    # this node's ranks see each other
        from generation.engine.dp_board import attach_board
        board = attach_board(config.data_parallel_size)
        if board is not None:
            engine.lockstep.attach(board, max(config.data_parallel_rank, 0))
    if metrics.spec_decode is not None:          # vllm:spec_decode_*: the scheduler's draft counts
        metrics.spec_decode.source = scheduler
    if scheduler.spec is not None and config.per_request_spec_decode_metrics != "none":
        scheduler.spec_request_metrics = config.per_request_spec_decode_metrics     # each request's own record
    if metrics.kv_offload is not None and scheduler.pool.num_cpu_blocks:
        # vllm:kv_offload_*: the CPU tier's jobs, one worker's block bytes moved at the reload's PCIe speed
        from generation.engine.perf.step_model import PCIE_BANDWIDTH
        tp = config.tensor_parallel_size or 1
        metrics.kv_offload.attach(scheduler.pool, engine, st.block_size, st.block_size * st.kv_bytes_per_token, tp,
                                  config.max_model_len, PCIE_BANDWIDTH)
    return engine


def build_simulator(config: SimConfig, tokenizer=None):
    """Build the engine and every part it uses, each given only what it needs (as vLLM's
    ``init_app_state``): the seeded rng, the tokenizer (``tokenizer`` as loaded by :func:`main`
    before the worker starts, else loaded here), random-mode sentences, the SQLite dataset
    (``--dataset-path``, random mode) behind one response-source interface, the latency model, the metrics (fake ones with
    ``--fake-metrics``), the LoRA registry, the tool synthesizer and the KV cache
    (``--enable-kvcache``) and the reasoning layout (``--reasoning-parser``).  Returns a
    :class:`generation.engine.simulator.Simulator`."""
    import random

    from generation.engine.lora import LoraRegistry
    from generation.engine.simulator import Simulator
    from generation.metrics.fake_metrics import FakeMetricsCollector
    from generation.engine.latency import LatencyModel
    from generation.metrics.recorder import MetricsRecorder
    from generation.content.sources import (EchoResponses, EncoderOnlyResponses, RandomResponses, RecordedResponses,
                                            SentenceSource)
    from generation.structured.tool_calls import ToolSynthesizer
    from generation.tokenization.tokenizer_loading import load_tokenizer

    rng = random.Random(config.seed)
    if tokenizer is None:
        tokenizer = load_tokenizer(config)
    sentences = SentenceSource(tokenizer)
    if config.mm_encoder_only:                    # the reference: "!" tokens, whatever the mode
        responses = EncoderOnlyResponses(tokenizer)
    elif config.mode == "echo":
        responses = EchoResponses()
    else:
        responses = RandomResponses(sentences)
        if config.dataset_path:
            from data.dataset import SQLiteDataset     # recorded answers, below the engine
            responses = RecordedResponses(SQLiteDataset(config.dataset_path, config.dataset_table_name,
                                                        config.dataset_in_memory, sentences), responses)
    resolve_engine(config)                        # (the metrics read its speculative decoding)
    metrics = MetricsRecorder(config)             # reads running/waiting/LoRA state at scrape time
    if config.fake_metrics is not None:
        metrics.use_fake(FakeMetricsCollector(config, metrics.docs()))
    loras = LoraRegistry(config.lora_modules, config.max_loras, config.max_cpu_loras)
    kv_cache = engine = None
    if (config.enable_kvcache or config.step is not None) and not config.mm_encoder_only:
        # step mode: prefix caching, vLLM's default; the reference turns the cache off in encoder-only
        from generation.kvcache.cache import build_kv_cache
        kv_cache = build_kv_cache(config, metrics, loras, publish=config.enable_kvcache)
    if config.step is not None:
        engine = build_step_engine(config, metrics, kv_cache, random.Random(f"{config.seed}-steps"))
    reasoning = None
    if config.reasoning_parser:
        from generation.config.reasoning_parsers import PARSERS
        from generation.content.reasoning import ReasoningSpans
        reasoning = ReasoningSpans(config, tokenizer, config.reasoning_parser, sentences,
                                   row=PARSERS[config.reasoning_parser])
    sim = Simulator(config, rng=rng, tokenizer=tokenizer, sentences=sentences, responses=responses,
                    latency=LatencyModel(config, rng), metrics=metrics, loras=loras,
                    tool_synthesizer=ToolSynthesizer(config, rng, tokenizer),
                    kv_cache=engine.prefix_cache if engine is not None else kv_cache, engine=engine,
                    reasoning=reasoning)
    if config.enable_responses_api_store:            # VLLM_ENABLE_RESPONSES_API_STORE=1
        from generation.adapters.response_store import ResponseStore
        sim.response_store = ResponseStore(conversation_bytes=config.max_request_body_size_mb << 20)
    return sim


def serve(config: SimConfig, tokenizer=None, argv: list[str] | None = None, listener=None, factory=None) -> int:
    """Serve the app (``factory()``, default the one engine's) with gunicorn's gevent worker in
    this process until SIGTERM / Ctrl-C (:func:`server.serve.serve`: TLS, logs, lifecycle,
    data-parallel ranks from ``argv``).  Returns the exit code."""
    from server.serve import serve as run_server
    return run_server(config, factory or (lambda: create_app(config, tokenizer)), argv, __file__, listener)


def _config_error(e: ConfigError) -> int:
    """Print a start-up ConfigError as vLLM's CLI would, naming the flag at fault
    ("--mode: invalid mode 'bogus'"); the exit status 2."""
    from generation.config.values import error_line
    print(error_line(e), file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export-tokenizer"]:        # the simulated tokenizer as a Hugging Face folder
        from data.tokenizer_export import main as export_tokenizer
        return export_tokenizer(argv[1:])
    try:
        config = load_config(argv)
        resolve_engine(config)
    except ConfigError as e:
        return _config_error(e)
    from server.logs import configure_logging
    configure_logging(config)
    if config.deprecations:
        log.warning("deprecated flags: %s", "; ".join(config.deprecations))
    log_flag_notes(config)
    if config.data_parallel_rank >= 0:          # vLLM: an explicit rank implies external load balancing
        config.data_parallel_external_lb = True
    if config.data_parallel_size > 1 and config.data_parallel_rank < 0:
        config.data_parallel_rank = 0          # rank 0: serve() starts ranks 1..N-1 (-dpe), or in this process
    class NoDataset(Exception):
        pass
    # data.* import urllib and numpy: only when a dataset is configured (start-up time)
    DatasetError = DownloadError = NoDataset
    try:      # before the port is bound and the worker forks (generation.tokenization.tokenizer_loading)
        from generation.tokenization.tokenizer_loading import TokenizerLoadError, load_tokenizer
        if config.dataset_url:
            from data.download import DownloadError, ensure_dataset
            ensure_dataset(config)
        if config.dataset_path and config.mode != "echo":     # one line for a bad file, not a traceback
            from data.dataset import DatasetError, verify_dataset
            verify_dataset(config.dataset_path, config.dataset_table_name)
        tokenizer = load_tokenizer(config)
        install_template_bounds(config)         # before gevent's patching
        from generation.tokenization.model_config import apply_model_defaults
        max_model_len = config.max_model_len
        apply_model_defaults(config)            # vLLM: --max-model-len defaults to the model's own
        if config.step is not None and config.max_model_len != max_model_len:
            config.step = None                  # the KV cache's check and size at the model's length
            resolve_engine(config)
    except DatasetError as e:                   # the reference's words, the flag at fault first
        print(f"error: --dataset-path: {e}", file=sys.stderr)
        return 2
    except (TokenizerLoadError, DownloadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        return _config_error(e)
    if config.fleet_size:                       # --fleet-size N: N pods in this process
        from server.fleet_worker import serve_fleet
        return serve_fleet(config, lambda pod_config: create_app(pod_config, tokenizer))
    if config.data_parallel_size > 1 and not config.data_parallel_external_lb:
        from server.dp_api import build_data_parallel_api   # vLLM's one endpoint over the ranks
        return serve(config, tokenizer, None, factory=lambda: build_data_parallel_api(
            config, lambda rank_config: create_app(rank_config, tokenizer)))
    return serve(config, tokenizer, argv)


if __name__ == "__main__":
    from server.serve import fast_exit
    try:
        code = main()
    except KeyboardInterrupt:      # Ctrl-C before the server runs (e.g. while a tokenizer loads)
        code = 130
    fast_exit(code)
