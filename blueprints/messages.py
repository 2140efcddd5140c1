"""``POST /v1/messages``, ``POST /v1/messages/count_tokens`` and ``POST /v1/messages/render`` -
the Anthropic Messages API
(:mod:`generation.adapters.messages`).  Every error of this blueprint, including 404/405 and
unexpected ones, uses Anthropic's envelope
``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``.
"""
from __future__ import annotations

import logging
from time import perf_counter

from flask import Blueprint
from werkzeug.exceptions import HTTPException

from generation.adapters import messages as anthropic
from generation.adapters.response_bodies import generate_request
from generation.adapters.sampling import anthropic_kwargs
from generation.errors import InvalidParam, SimulatorError
from schemas.common import load
from schemas.messages import count_tokens_request_schema, messages_request_schema

from .common import json_response, parse_json_body, simulator
from .errors import anthropic_error_response, http_error_message, internal_error, status_of
from .render import generate_fields
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


@bp.post("/v1/messages/render")
def render_message():
    """vLLM's ``POST /v1/messages/render``: the Anthropic request's prompt as token ids, with
    the ``GenerateRequest`` fields a vLLM render client reads (``request_id``, ``model``,
    ``sampling_params`` from ``max_tokens``, ``stop_sequences``, ``temperature``, ``top_p``,
    ``top_k``; ``stream``).  Nothing is generated; only the model and messages are checked."""
    sim = simulator()
    raw = parse_json_body()
    body = load(count_tokens_request_schema, raw)
    model, lora = sim.resolve_model(body.model)
    if lora is not None:
        raise InvalidParam(f"The model `{model}` is a LoRA adapter and is not supported by the render endpoints.",
                           "model")
    started = perf_counter()
    ids, _ = sim.tokenize_messages(anthropic.to_chat_messages(body, anthropic.merge_inline_system(sim)),
                                   tools=anthropic.to_chat_tools(anthropic.resolved_tools(body)),
                                   chat_template_kwargs=anthropic_kwargs(sim, body))
    sim.metrics.rendered("chat", perf_counter() - started)      # vLLM renders its chat completion request
    sampling = {k: raw[k] for k in ("max_tokens", "temperature", "top_p", "top_k") if k in raw}
    if isinstance(raw.get("stop_sequences"), list):
        sampling["stop"] = raw["stop_sequences"]
    fields = generate_fields(sim, {**sampling, "stream": raw.get("stream") is True}, f"msg_{sim.new_request_id()}",
                             model, len(ids), False)
    return json_response(generate_request(token_ids=ids, **fields))       # vLLM: render_chat_request's GenerateRequest


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
