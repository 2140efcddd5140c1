"""The one place where a simulator error becomes an HTTP error: status, ``type``, ``param`` and
the envelope (vLLM's ``{"error": {...}}``, or Anthropic's on ``/v1/messages``).

The core raises domain errors (:mod:`generation.errors`); :data:`STATUS` maps each class to its
status, as vLLM's ``create_error_response`` maps ``VLLMValidationError`` -> 400 and
``VLLMNotFoundError`` -> 404.  Errors that carry their own status (``InjectedError``,
``APIError``) keep it.
"""
from __future__ import annotations

import logging
from http import HTTPStatus

import orjson
from flask import Response

from generation.errors import (APIError, ContextLengthError, InjectedError, InvalidParam, ModelNotFound,
                               QueueFullError, SimulatorError, UnsupportedMediaType, error_type)

from .streaming import REPLICA_KEY

JSON_MIME = "application/json"
log = logging.getLogger("vllm_sim")

# Domain error -> HTTP status.  Subclasses inherit their base's row (first match in the MRO).
# UnsupportedMediaType is a 400 as in current vLLM (its ``validate_json_request`` raises a
# RequestValidationError, which vLLM answers with 400 BadRequestError).
STATUS: dict[type, int] = {
    InvalidParam: 400,
    ContextLengthError: 400,
    UnsupportedMediaType: 400,
    ModelNotFound: 404,
    QueueFullError: 429,
    SimulatorError: 400,
}

# HTTP status -> Anthropic error type (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                    403: "permission_error", 404: "not_found_error", 408: "timeout_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 504: "timeout_error",
                    529: "overloaded_error"}


def status_of(err: Exception) -> int:
    """The HTTP status of ``err`` (500 for anything that is not a simulator error)."""
    status = getattr(err, "status", None)
    if isinstance(err, (InjectedError, APIError)) and status is not None:
        return status
    for cls in type(err).__mro__:
        s = STATUS.get(cls)
        if s is not None:
            return s
    return 500


def openai_body(err: SimulatorError, status: int | None = None) -> dict:
    """vLLM's ``{"error": {"message", "type", "param", "code"}}``."""
    status = status_of(err) if status is None else status
    type_ = getattr(err, "type", None) or error_type(status)
    return {"error": {"message": err.message, "type": type_, "param": err.param, "code": status}}


def http_error_type(status: int) -> str:
    """The error ``type`` of an HTTP error other than routing's (a body too large):
    the status phrase, as vLLM's ``http_exception_handler`` reports ``HTTPStatus(code).phrase``
    (``405`` -> ``"Method Not Allowed"``).  413 keeps ``RequestEntityTooLarge``: the body limit
    is the simulator's own (vLLM has none) and its chunked-body check answers that type."""
    if status == 413:
        return error_type(status)
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return error_type(status)


def http_error_message(err, limit: int) -> str:
    """The message of an HTTP error other than routing's: its description (werkzeug's words),
    except a 413's, which names the body limit ``limit`` (bytes) and its flag
    (:func:`generation.errors.body_too_large_message`: vLLM has no limit to name)."""
    if err.code == 413:
        from generation.errors import body_too_large_message
        return body_too_large_message(limit)
    return err.description or err.name


def anthropic_error_type(status: int) -> str:
    """Anthropic error ``type`` for an HTTP status (unknown 4xx -> invalid_request_error,
    unknown 5xx -> api_error)."""
    t = _ANTHROPIC_TYPES.get(status)
    if t is None:
        t = "api_error" if status >= 500 else "invalid_request_error"
    return t


def anthropic_body(message: str, status: int) -> dict:
    """``{"type": "error", "error": {"type": <anthropic type>, "message": message}}``."""
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


# environ key: the id vLLM had named the request with (``raw_request.state.request_metadata``,
# set once its chat handler rendered the prompt) when the error came; Cohere's envelope reports it
REQUEST_METADATA_ID_KEY = "vllm_sim.request_metadata_id"


def internal_error(err: Exception) -> APIError:
    """An unexpected exception as a 500 the client can read."""
    return APIError(f"Internal server error: {type(err).__name__}: {err}", 500)


def log_error_stack(config, err: BaseException, environ: dict | None = None) -> None:
    """``--log-error-stack`` (not given: ``VLLM_SERVER_DEV_MODE=1``, vLLM's default): log an
    error answered to a client with its stack, as vLLM's exception handlers do
    (``vllm/entrypoints/serve/exception_handling/handlers/``: ``"<kind> caught. Request id:
    <id>"`` with the traceback); unexpected errors are logged with theirs regardless."""
    on = getattr(config, "log_error_stack", None)
    if on is None:
        on = getattr(config, "vllm_dev_mode", False)
    if on and not (environ or {}).get(REPLICA_KEY):         # logged once, by rank 0
        rid = (environ or {}).get("HTTP_X_REQUEST_ID")
        log.error("%s caught. Request id: %s", type(err).__name__, rid, exc_info=err)


def error_response(err: SimulatorError) -> Response:
    """The vLLM-envelope error response for ``err``."""
    status = status_of(err)
    return Response(orjson.dumps(openai_body(err, status)), status=status, mimetype=JSON_MIME)


def anthropic_error_response(message: str, status: int) -> Response:
    return Response(orjson.dumps(anthropic_body(message, status)), status=status, mimetype=JSON_MIME)


# vLLM's GET routes, by the simulator's endpoint names.  Each is a FastAPI ``APIRoute``
# (``@router.get``: ``serve/instrumentator/health.py`` ``/health``, ``basic.py`` ``/load``,
# ``/version``, ``/kv_event_sources``, ``serve/sagemaker/api_router.py`` ``/ping``,
# ``openai/models/api_router.py``, ``openai/responses/api_router.py``, ``serve/dev/*``,
# ``serve/tokenize/api_router.py``, ``serve/checkpoint/api_router.py``,
# ``serve/fault_tolerance/api_router.py``), whose methods are the ones it names: no HEAD
# (Starlette's plain ``Route`` adds HEAD to GET, FastAPI's ``APIRoute`` does not), so ``HEAD
# /health`` is Starlette's 405.  Flask adds HEAD to every GET rule: :func:`refuse_head` takes it
# off these.  ``/metrics`` is not one (vLLM mounts prometheus' ASGI app, which answers any
# method), nor are the simulator's own routes (``/health/ready``, ``/admin/*``, ``/query``).
VLLM_GET_ROUTES = frozenset({
    "health.health", "health.ping", "health.version", "health.load", "health.is_sleeping",
    "models.list_models", "models.retrieve_model", "dev_mode.server_info", "dev.kv_event_sources",
    "rl.is_paused", "rl.get_world_size", "rl.weight_info",
    "render.tokenizer_info", "responses.retrieve_response", "engine_ops.checkpoint_status",
    "fault_tolerance.fault_tolerance_status"})


def refuse_head(app) -> None:
    """Take HEAD off the rules of :data:`VLLM_GET_ROUTES` (once, when the app is built: no cost
    per request); Werkzeug then answers HEAD there with its 405, which
    :func:`routing_error` words as vLLM does."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint in VLLM_GET_ROUTES:
            rule.methods.discard("HEAD")


def routing_error(status: int, valid_methods) -> Response:
    """A routing error (404: no route has the path; 405: the path's routes take other methods)
    as vLLM's server answers it: Starlette's router raises its own ``HTTPException``, which
    vLLM's ``http_exception_handler`` (registered for FastAPI's subclass,
    ``serve/exception_handling/register.py``) does not catch, so FastAPI's default handler
    answers ``{"detail": "<status phrase>"}`` (vLLM's ``pooling/classify/test_online.py::
    test_score`` reads it; a HEAD response leaves the body out, its length stays in
    ``Content-Length``) with ``allow`` naming the methods of the first route the path matched: a
    route's single method, ``GET`` for ``/ping``, whose GET route is registered before its POST
    one."""
    resp = Response(orjson.dumps({"detail": HTTPStatus(status).phrase}), status=status, mimetype=JSON_MIME)
    if status == 405 and valid_methods:
        methods = [m for m in valid_methods if m not in ("HEAD", "OPTIONS")] or list(valid_methods)
        resp.headers["Allow"] = "GET" if "GET" in methods else ", ".join(methods)
    return resp
