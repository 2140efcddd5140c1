"""Tokenization-only endpoints: ``POST /v1/completions/render``,
``POST /v1/chat/completions/render`` (api.md 5.8), and vLLM's ``POST /tokenize`` /
``POST /detokenize``.

Render: no queue, no latency, no failure injection, request headers ignored; only ``model``
and the prompt / messages are inspected.  Completions render always answers a JSON array (one
``{"token_ids"}`` per prompt; token-id prompts copied verbatim); chat render answers one
``{"token_ids", "features"?}`` object whose ``features`` (synthetic multimodal hashes,
placeholders and kwargs) appear only when a message has media blocks.  A LoRA model is a 400.

Tokenize answers vLLM's ``{"count", "max_model_len", "tokens", "token_strs"}``; detokenize
``{"prompt"}`` (simulated ids are hashes: unknown ids come back as decimals).
"""
from __future__ import annotations

from flask import Blueprint

from generation.errors import InvalidParam
from generation.tokenization.multimodal import media_items, mm_features
from generation.tokenization.tokenizer import chat_options
from schemas.common import load
from schemas.render import chat_render_schema, completion_render_schema, detokenize_schema, tokenize_schema

from .common import json_response, parse_json_body, request_id, response_headers, simulator

bp = Blueprint("render", __name__)

def _render_model(sim, model) -> None:
    """Raises ModelNotFound for a model not served, InvalidParam for a LoRA adapter (api.md 5.8)."""
    name, lora = sim.resolve_model(model)
    if lora is not None:
        raise InvalidParam(f"The model `{name}` is a LoRA adapter and is not supported by the render endpoints.",
                           "model")


@bp.post("/v1/completions/render")
def render_completion():
    sim = simulator()
    body = load(completion_render_schema, parse_json_body())
    prompt = body.prompt
    if prompt is None:
        raise InvalidParam("prompt: Field required.", "prompt")
    _render_model(sim, body.model)
    rid = request_id()
    kind, items = prompt
    if kind == "ids":
        out = [{"token_ids": ids} for ids in items]
    else:
        out = [{"token_ids": sim.tokenize_text(text)[0]} for text in items]
    return json_response(out, headers=response_headers(rid))


@bp.post("/v1/chat/completions/render")
def render_chat():
    sim = simulator()
    body = load(chat_render_schema, parse_json_body())
    messages = body.messages
    if not messages:
        raise InvalidParam("messages must not be empty", "messages")
    _render_model(sim, body.model)
    rid = request_id()
    opts = chat_options(body)
    render = getattr(sim.tokenizer, "render_chat", None)      # --render-url: upstream features
    if render is not None:
        sim.check_request_chat_template(opts)
        if opts["continue_final_message"] and opts["add_generation_prompt"]:
            sim.tokenize_messages(messages, **opts)                  # raises vLLM's 400
        ids, _, features = render(messages, **opts)
    else:
        ids, _ = sim.tokenize_messages(messages, **opts)
        features = mm_features(media_items(messages), len(ids)) if sim.tokenizer.name == "simulated" else None
    out = {"token_ids": ids}
    if features is not None:
        out["features"] = features
    return json_response(out, headers=response_headers(rid))


def _check_optional_model(sim, model) -> None:
    """vLLM checks ``model`` on tokenize/detokenize only when one is given."""
    if model is not None:
        sim.resolve_model(model)


@bp.post("/tokenize")
def tokenize():
    sim = simulator()
    body = load(tokenize_schema, parse_json_body())
    prompt = body.prompt
    messages = body.messages
    if prompt and messages is not None:
        raise InvalidParam("both prompt and messages fields in tokenize request", "messages")
    if prompt is None and messages is None:
        raise InvalidParam("Either prompt or messages is required", "prompt")
    _check_optional_model(sim, body.model)
    if prompt is not None and (prompt or messages is None):
        ids, pieces = sim.tokenize_text(prompt, body.add_special_tokens is not False)
    else:
        ids, pieces = sim.tokenize_messages(messages, **chat_options(body))
    strs = None
    if body.return_token_strs:       # vLLM: the vocabulary strings (convert_ids_to_tokens)
        strs = sim.tokenizer.token_strs(ids) if sim.tokenizer.name == "hf" else list(pieces)
    return json_response({"count": len(ids), "max_model_len": sim.config.max_model_len, "tokens": ids,
                          "token_strs": strs})


@bp.post("/detokenize")
def detokenize():
    sim = simulator()
    body = load(detokenize_schema, parse_json_body())
    tokens = body.tokens
    if tokens is None:
        raise InvalidParam("tokens: Field required.", "tokens")
    _check_optional_model(sim, body.model)
    return json_response({"prompt": sim.tokenizer.decode_ids(tokens)})
