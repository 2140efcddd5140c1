"""Cohere's Chat v2 API as vLLM 0.34 serves it (``vllm/entrypoints/cohere/api_router.py``):
``POST /cohere/v2/chat`` (:mod:`generation.adapters.cohere`) and ``POST /cohere/v2/chat/render``
(the chat render of the translated request: vLLM's ``GenerateRequest``), with env
``VLLM_ENABLE_COHERE_API=1`` on a generation model, as vLLM's ``attach_router``.

vLLM also needs the ``cohere`` SDK installed (its request types are the SDK's) and, for the
render route, ``--enable-scale-out`` or ``--tokens-only``.  The simulator reads the SDK's
types without it (:mod:`schemas.cohere`) and serves the render routes always, as its other
render routes: setting the variable is asking for the API, and an operator who set it against
a vLLM without the SDK got a warning and no route.

Errors: vLLM's ``CohereErrorEnvelopeMiddleware`` rewrites every JSON error body in vLLM's
envelope (``{"error": {"message", "type", "param", "code"}}``) on a ``/cohere/`` path into
Cohere's ``{"message", "id"}``, ``id`` the request's (``chatcmpl-<id>``) when vLLM had named it
before the error (its sampling checks), else the ``X-Request-Id`` header when there is one, the
status the envelope's ``code``.  :class:`CohereErrors` does the same around the whole app (the
API-key check's ``{"error": "Unauthorized"}`` and the router's ``{"detail": ...}`` pass unchanged,
as they do there).
"""
from __future__ import annotations

import orjson
from flask import Blueprint

from generation.adapters.cohere import CohereChatAdapter, to_chat_body
from schemas.common import load
from schemas.cohere import cohere_chat_request_schema

from .common import json_response, parse_json_body, response_headers, simulator
from .errors import REQUEST_METADATA_ID_KEY
from .render import chat_render
from .serving import _status_line, generation_view

bp = Blueprint("cohere", __name__)
bp.add_url_rule("/cohere/v2/chat", "cohere_chat", generation_view(cohere_chat_request_schema, CohereChatAdapter),
                methods=["POST"])
PREFIX = "/cohere/"


@bp.post("/cohere/v2/chat/render")
def render_cohere_chat():
    """vLLM's ``chat_v2_render``: the request's chat completion (``to_chat_completion_request``)
    rendered as ``/v1/chat/completions/render`` renders it."""
    sim = simulator()
    out, rid = chat_render(sim, to_chat_body(load(cohere_chat_request_schema, parse_json_body())))
    return json_response(out, headers=response_headers(rid))


def cohere_error(body: bytes, environ: dict) -> tuple[int, bytes] | None:
    """``(status, Cohere's body)`` of a body in vLLM's error envelope (``_translate_vllm_error_body``,
    ``_error_response``), or None for any other body (passed on unchanged)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    if not (isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str)
            and isinstance(err.get("code"), int)):
        return None
    out = {"message": err["message"]}
    rid = environ.get(REQUEST_METADATA_ID_KEY)        # named: the request's id (``_request_id``)
    if rid is None:
        rid = environ.get("HTTP_X_REQUEST_ID")
    if rid is not None:
        out["id"] = rid
    return err["code"] or 400, orjson.dumps(out)


class CohereErrors:
    """WSGI layer: an error answer (4xx/5xx, ``application/json``) on a ``/cohere/`` path is
    read whole and rewritten by :func:`cohere_error`; everything else passes untouched (a
    stream's body is never held)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        if not environ.get("PATH_INFO", "").startswith(PREFIX):
            return self.wsgi_app(environ, start_response)
        held = []

        def hold(status, headers, exc_info=None):
            ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
            if int(status[:3]) >= 400 and ctype.startswith("application/json"):
                held.append((status, headers))
                return lambda data: None        # an error body is returned, never written
            return start_response(status, headers, exc_info)

        body = self.wsgi_app(environ, hold)
        if not held:
            return body
        try:
            data = b"".join(body)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
        status, headers = held[0]
        new = cohere_error(data, environ)
        if new is not None:
            code, data = new
            if code != int(status[:3]):
                status = _status_line(code)
        start_response(status, [*((k, v) for k, v in headers if k.lower() != "content-length"),
                                ("Content-Length", str(len(data)))])
        return [data]
