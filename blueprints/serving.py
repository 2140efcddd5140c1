"""The one serving pipeline every generation API runs through (chat, completions, Anthropic
messages, responses, generate), as the reference's ``handleHTTP`` with a builder per endpoint.

A route hands :func:`handle` its schema and its adapter class (:mod:`generation.adapters`)::

    parse body -> schema.load (typed request) -> request id -> header checks
    -> adapter.build (engine request) -> --omni image decision (X-Send-Image, emission rate)
    -> Simulator.prepare (outputs decided, context errors)
    -> response headers -> Simulator.admit (slot or queue, 429) -> stream or complete -> render

Every client error is decided before admission, so nothing is admitted for a request that
fails; anything that fails after admission and before the response is handed to the server
releases what was admitted (``Simulator.cancel``).  Once the server owns the SSE generator, its
``finally`` does the same.

Two entry points run the same :func:`handle`:

* :class:`GenerationFastPath`, a WSGI layer in front of Flask, takes a ``POST`` with a
  ``Content-Length`` within the body limit on a generation route and answers it without
  Flask's request context, routing and response objects (about a fifth of a request's CPU,
  issue 13);
* the Flask view (:func:`generation_view`, registered in the route's blueprint) takes the rest
  (a POST without a Content-Length, or over the limit: werkzeug's reading and its 413; chunked
  bodies arrive with a Content-Length, set by ``ChunkedBodyLimit``), and keeps the routes in
  Flask's URL map, where 404/405 and the fast path's route table come from.  Both render
  errors with :func:`reply_to_error`.
"""
from __future__ import annotations

import logging
from time import monotonic, perf_counter
from http import HTTPStatus

import orjson
from flask import Response, current_app, request
from werkzeug.exceptions import HTTPException

from generation.adapters.base import check_work
from generation.engine.simulator import ClientDisconnected
from generation.errors import EnginePaused, Rejected, SimulatorError
from generation.lanes import CLIENT as SCHEMA_CLIENT
from schemas.common import load

from .common import (check_data_parallel_rank, dumps_json, dumps_paced, hang_up, header_checks, parse_json_body,
                     received_at, request_id, response_headers, run_to_completion, send_image, sse_body)
from .errors import (REQUEST_METADATA_ID_KEY, anthropic_body, internal_error, log_error_stack, openai_body,
                     status_of)
from .sse_keep_alive import with_sse_keep_alive
from .streaming import DP_SPREAD_KEY, WRITE_KEY

log = logging.getLogger("vllm_sim")

JSON_CONTENT_TYPE = ("Content-Type", "application/json")
PACED_WORK = 16384       # output entries (Adapter.work) above which a body is serialised with pauses
# starlette's StreamingResponse(media_type="text/event-stream"), as vLLM answers a stream: no
# Cache-Control or X-Accel-Buffering (nor does the reference simulator send them)
HEADERLESS: dict = {}         # an environ without X-Request-Id (an API whose id ignores the header)
SSE_BASE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8")]


def handle(sim, environ: dict, limit: int, schema, adapter_cls, read=None) -> tuple[int, list, object]:
    """Run one request through ``adapter_cls`` (an :class:`generation.adapters.base.Adapter`
    subclass): ``(status, headers, body)`` with ``headers`` a WSGI header list and ``body`` a
    list of bytes (JSON) or the SSE generator.  ``limit``: the body size limit in bytes.
    Raises the domain errors of each step (the caller renders them in ``adapter_cls.envelope``)
    and ClientDisconnected when a non-streaming client left while it waited.  ``read``: a
    callable ``read(environ) -> bytes`` for a body whose Content-Type and length the caller
    checked (:class:`server.wsgi_layers.FrontDoor`), else the body is read and checked here."""
    entry = monotonic()
    SCHEMA_CLIENT.set(environ.get("REMOTE_ADDR"))     # schema checks take turns by client
    try:
        raw = read(environ) if read is not None else None
    except ConnectionError:           # reset mid-body: the client left (hung up on, no traceback)
        raise ClientDisconnected() from None
    body = load(schema, parse_json_body(environ, limit, raw))
    adapter = adapter_cls(sim, body)
    rid = request_id(sim, adapter.body_request_id(), environ if adapter.request_id_header else HEADERLESS)
    force_ct = header_checks(sim, environ)
    rendering = perf_counter()
    req = adapter.build(rid, force_ct and adapter.cache_threshold_header)
    rendering = perf_counter() - rendering
    req.external_ids = adapter.external_ids(req)
    if adapter.image_output and sim.config.omni:
        req.send_image = send_image(sim, environ)
    seqs = sim.prepare(req)         # vLLM's render ends with the context-length check: prepare's
    rank_error = None
    if "HTTP_X_DATA_PARALLEL_RANK" in environ:
        try:
            check_data_parallel_rank(sim.config, environ["HTTP_X_DATA_PARALLEL_RANK"])
        except Rejected as err:
            if not req.stream:
                raise
            rank_error = err      # vLLM checks it in AsyncLLM.add_request: inside the stream, after its 200
    if adapter.render_type is not None:
        observe_render(sim, adapter.render_type, req, rendering)
    work = adapter.work(seqs)
    check_work(sim, *work)
    extra = response_headers(rid if adapter.request_id_header else environ.get("HTTP_X_REQUEST_ID") or rid, sim, environ)
    arrived = received_at(environ)
    if sim.engine is not None and (arrived is None or entry < arrived):
        # step mode models vLLM's frontend (its parse, tokenizing, latency) from the arrival:
        # the simulator's own handling until now is inside that modelled time, not added to it
        arrived = entry
    envelope = adapter.envelope

    def error_frame(err) -> bytes:
        return adapter.stream_error(error_body(err, envelope))

    named = getattr(adapter, "named_error", None)    # vLLM has named the request by now (Cohere's id)
    if rank_error is not None:
        return 200, [*extra.items(), *SSE_BASE_HEADERS], [error_frame(rank_error)]
    try:
        sim.admit(seqs, arrived, spread=environ.get(DP_SPREAD_KEY))
    except EnginePaused as err:
        if not req.stream:
            if named is not None:
                named(err)
            raise
        # vLLM: the engine refuses it at its first output, after the stream answered 200
        err.type = adapter.generation_error_stream_type
        return 200, [*extra.items(), *SSE_BASE_HEADERS], [error_frame(err)]
    try:
        if adapter.background_stream:       # runs on if the client leaves
            body = adapter.stream_in_background(
                seqs, lambda e: error_frame(e if isinstance(e, SimulatorError) else internal_error(e)))
            return 200, [*extra.items(), *SSE_BASE_HEADERS], body
        if req.stream:
            stream = sse_body(adapter.stream(seqs), sim, seqs, error_frame=error_frame, environ=environ)
            if adapter.sse_keep_alive and sim.config.sse_keep_alive_interval and sim.expects_delay(seqs):
                stream = with_sse_keep_alive(stream, sim.config.sse_keep_alive_interval, environ)
            return 200, [*extra.items(), *SSE_BASE_HEADERS], stream
        if adapter.background:          # answered now, run on (Responses API, "background": true)
            body = [dumps_json(adapter.start_background(seqs))]
            return 200, [*extra.items(), JSON_CONTENT_TYPE, ("Content-Length", str(len(body[0])))], body
        run_to_completion(sim, seqs, environ, aborted_answers=True)    # an aborted one: what it made, "abort"
        if work[0] <= PACED_WORK:
            body = [dumps_json(adapter.render(seqs))]
        else:
            body = render_large(adapter, seqs)
    except BaseException as e:      # the client left (an abort), or the server failed it (an error)
        sim.cancel(seqs, "abort" if isinstance(e, (ClientDisconnected, GeneratorExit)) else "error")
        if named is not None:
            named(e)
        raise
    size = sum(len(p) for p in body)
    return 200, [*extra.items(), JSON_CONTENT_TYPE, ("Content-Length", str(size))], body


def observe_render(sim, render_type: str, req, measured: float) -> None:
    """``vllm:request_render_duration_seconds{request_type=render_type}`` for a request whose
    build (chat templating, tokenization) took ``measured`` seconds of the simulator's own
    time: that, unless the request's timeline is step mode's, which models vLLM's frontend
    (:class:`~generation.engine.perf.step_model.Frontend`): then its modelled CPU for the
    request, ``fe_request + fe_prompt_token x prompt tokens``, the part of its TTFT a real
    server spends preparing it (templating and tokenizing), as its e2e and TTFT count it."""
    engine = sim.engine
    fe = getattr(engine, "fe", None) if engine is not None else None
    if fe is not None:
        c = fe.c
        measured = c.fe_request + c.fe_prompt_token * sum(len(p.ids) for p in req.prompts)
    sim.metrics.rendered(render_type, measured)


_RENDER_POOL = None


def render_large(adapter, seqs) -> list:
    """A large non-streaming body (more than :data:`PACED_WORK` entries), rendered and
    serialised in a worker thread: pure Python for up to a few hundred ms, which on the hub
    would hold every other stream for as long (from a thread the hub keeps its turn every
    switch interval, 5 ms).  One thread: large bodies are built one at a time, so their
    memory is too.  Returns the body as a list of bytes (:func:`dumps_paced`)."""
    global _RENDER_POOL
    if _RENDER_POOL is None:
        from gevent.threadpool import ThreadPool
        _RENDER_POOL = ThreadPool(1)
    return _RENDER_POOL.apply(_render_in_thread, (adapter, seqs))


def _no_pause() -> None:
    """In a thread the interpreter's switch interval gives the hub its turns."""


def _render_in_thread(adapter, seqs) -> list:
    return dumps_paced(adapter.render(seqs), _no_pause)


def error_body(err, envelope: str) -> dict:
    """``err`` in the API's error envelope (``"openai"`` or ``"anthropic"``)."""
    if envelope == "anthropic":
        return anthropic_body(err.message, status_of(err))
    return openai_body(err)


def error_reply(err: BaseException, envelope: str) -> tuple[int, list, list]:
    """What :func:`handle` raised as ``(status, headers, body)``, as the app's error handlers
    render it: a domain error in the API's envelope, a client that left as nginx's 499, anything
    else logged and a 500 the client can read."""
    if isinstance(err, ClientDisconnected):
        return 499, [("Content-Length", "0")], [b""]
    if not isinstance(err, SimulatorError):
        log.exception("unexpected error", exc_info=err)
        err = internal_error(err)
    out = orjson.dumps(error_body(err, envelope))
    return status_of(err), [JSON_CONTENT_TYPE, ("Content-Length", str(len(out)))], [out]


def reply_to_error(err: BaseException, envelope: str, environ: dict, config=None) -> tuple[int, list, list]:
    """:func:`error_reply`, and a client that left is hung up on (no response, as vLLM); with
    ``config``'s ``--log-error-stack`` the error is logged with its stack first."""
    if isinstance(err, ClientDisconnected):
        hang_up(environ)
    elif config is not None and isinstance(err, SimulatorError):
        log_error_stack(config, err, environ)
    named = getattr(err, "vllm_request_id", None)
    if named is not None:           # vLLM had named the request (its request_metadata): Cohere's error id
        environ[REQUEST_METADATA_ID_KEY] = named
    return error_reply(err, envelope)


def generation_view(schema, adapter_cls):
    """The Flask view of a generation route; :class:`GenerationFastPath` finds the pair on it
    (``view.generation``)."""
    def view():
        app = current_app._get_current_object()
        try:
            status, headers, body = handle(app.extensions["simulator"], request.environ,
                                           app.config["MAX_CONTENT_LENGTH"], schema, adapter_cls)
        except HTTPException:
            raise                      # werkzeug's 413 and friends: the app's HTTP error handler
        except Exception as err:       # noqa: BLE001 - the same rendering as the fast path
            status, headers, body = reply_to_error(err, adapter_cls.envelope, request.environ,
                                                   app.extensions["simulator"].config)
        return Response(body, status=status, headers=headers, direct_passthrough=True)
    view.generation = (schema, adapter_cls)
    view.__doc__ = adapter_cls.__doc__
    return view


def _status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{status} {phrase}"     # uvicorn's spelling (server.gunicorn_tuning spells Flask's so too)


class GenerationFastPath:
    """WSGI layer for the generation routes, in front of ``app``'s Flask dispatch.

    The routes are the Flask URL map's rules whose view is a :func:`generation_view`; a ``POST``
    to one of them with a ``Content-Length`` within ``MAX_CONTENT_LENGTH`` is answered here with
    :func:`handle`; everything else goes to Flask unchanged.  The WSGI layers outside this one
    (API key, request-id header, body limit, logging) apply to both."""

    def __init__(self, app):
        self.flask_wsgi = app.wsgi_app
        self.sim = app.extensions["simulator"]
        self.limit = app.config["MAX_CONTENT_LENGTH"]
        self.routes = {}
        for rule in app.url_map.iter_rules():
            pair = getattr(app.view_functions[rule.endpoint], "generation", None)
            if pair is not None and "POST" in rule.methods and not rule.arguments:
                self.routes[rule.rule] = pair
        self.status_lines = {s: _status_line(s) for s in range(200, 600)}

    def __call__(self, environ, start_response):
        route = self.routes.get(environ.get("PATH_INFO"))
        length = environ.get("CONTENT_LENGTH")
        if (route is None or environ.get("REQUEST_METHOD") != "POST" or not length or not length.isdigit()
                or int(length) > self.limit):
            return self.flask_wsgi(environ, start_response)
        return self.serve(environ, start_response, route)

    def serve(self, environ, start_response, route, read=None):
        """Answer a request on ``route`` (a ``(schema, adapter class)`` of :attr:`routes`)
        with :func:`handle` (``read``: see there); returns the WSGI body."""
        return self.answer(environ, start_response, route, read)[2]

    def answer(self, environ, start_response, route, read=None) -> tuple[int, list, object]:
        """:meth:`serve`, returning ``(status, headers, body)``: what the response started with,
        for a caller that observes it (:class:`server.wsgi_layers.FrontDoor`)."""
        schema, adapter_cls = route
        try:
            status, headers, body = handle(self.sim, environ, self.limit, schema, adapter_cls, read)
        except Exception as err:       # noqa: BLE001 - every error becomes its API's error reply
            status, headers, body = reply_to_error(err, adapter_cls.envelope, environ, self.sim.config)
        line = self.status_lines.get(status) or _status_line(status)
        environ[WRITE_KEY] = start_response(line, headers)    # a stream may write from the hub
        return status, headers, body
