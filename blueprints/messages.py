"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` - the Anthropic Messages API
(:mod:`generation.adapters.messages`).  Every error of this blueprint, including 404/405 and
unexpected ones, uses Anthropic's envelope
``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``.
``POST /v1/messages/render`` is vLLM's render route, whose errors are vLLM's own
(:mod:`blueprints.messages_render`).
"""
from __future__ import annotations

import logging
from time import perf_counter

from flask import Blueprint
from werkzeug.exceptions import HTTPException

from generation.adapters import messages as anthropic
from generation.errors import SimulatorError
from schemas.common import load
from schemas.messages import count_tokens_request_schema, messages_request_schema

from .common import json_response, parse_json_body, simulator
from .errors import anthropic_error_response, http_error_message, internal_error, status_of
from .serving import generation_view

log = logging.getLogger("vllm_sim")

bp = Blueprint("messages", __name__)


@bp.errorhandler(SimulatorError)
def _simulator_error(err: SimulatorError):
    return anthropic_error_response(err.message, status_of(err))


@bp.errorhandler(HTTPException)
def _http_error(err: HTTPException):
    from flask import current_app
    return anthropic_error_response(http_error_message(err, current_app.config["MAX_CONTENT_LENGTH"]), err.code or 500)


@bp.errorhandler(Exception)
def _unexpected(err: Exception):
    log.exception("unexpected error in /v1/messages")
    return anthropic_error_response(internal_error(err).message, 500)

bp.add_url_rule("/v1/messages", "create_message", generation_view(messages_request_schema, anthropic.MessagesAdapter),
                 methods=["POST"])


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    """``{"input_tokens": N, "context_management": {"original_input_tokens": N}}``: the prompt
    tokens /v1/messages would report, with vLLM's context-management report (nothing is ever
    cleared from a conversation here, so both counts are the same)."""
    body = load(count_tokens_request_schema, parse_json_body())
    sim = simulator()
    started = perf_counter()
    n = anthropic.count_tokens(sim, body)
    sim.metrics.rendered("chat", perf_counter() - started)      # vLLM renders its chat completion request
    return json_response({"input_tokens": n, "context_management": {"original_input_tokens": n}})
