"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` - the Anthropic Messages API,
translated onto the chat path of the one engine (as vLLM's Anthropic endpoint does).

The body is converted to a chat request (``system`` -> a leading system message; image blocks
-> ``image_url`` blocks; ``tool_use`` blocks -> assistant ``tool_calls``; ``tool_result``
blocks -> ``tool`` messages placed before the rest of their message; ``input_schema`` tools ->
chat function tools; ``tool_choice`` auto/any/tool/none -> auto/required/named/none) and runs
through :func:`blueprints.chat.build_chat_request`, so tokenization, queueing (429), timing,
metrics and P/D behave exactly as for chat.  The answer is rendered in Anthropic's shapes:
a ``message`` object, or the named SSE events ``message_start``, ``content_block_start``,
``ping``, ``content_block_delta`` (``text_delta`` / ``input_json_delta``),
``content_block_stop``, ``message_delta``, ``message_stop`` (no ``[DONE]``).

Errors from this blueprint use Anthropic's envelope
``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``.
"""
from __future__ import annotations

import json
import logging

import orjson
from flask import Blueprint, Response
from werkzeug.exceptions import HTTPException

from generation.engine import Simulator
from generation.errors import APIError
from schemas.common import load
from schemas.messages import count_tokens_request_schema, messages_request_schema

from .chat import build_chat_request
from .common import (JSON_MIME, dumps, header_checks, json_response, parse_json_body, request_id,
                     response_headers, run_to_completion, simulator, sse_response)

log = logging.getLogger("vllm_sim")

bp = Blueprint("messages", __name__)

# HTTP status -> Anthropic error type (https://docs.anthropic.com/en/api/errors).
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 504: "timeout_error",
                529: "overloaded_error"}

# finish_reason -> stop_reason (api.md 5.4.2; cache_threshold reads as a cut-short answer).
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "cache_threshold": "max_tokens",
                 "tool_calls": "tool_use", "remote_decode": "end_turn"}


def anthropic_error_type(status: int) -> str:
    """Anthropic error ``type`` for an HTTP status (unknown 4xx -> invalid_request_error,
    unknown 5xx -> api_error)."""
    t = _ERROR_TYPES.get(status)
    if t is None:
        t = "api_error" if status >= 500 else "invalid_request_error"
    return t


def anthropic_error_body(message: str, status: int) -> dict:
    """``{"type": "error", "error": {"type": <anthropic type>, "message": message}}``."""
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def _error(message: str, status: int) -> Response:
    return Response(orjson.dumps(anthropic_error_body(message, status)), status=status, mimetype=JSON_MIME)


@bp.errorhandler(APIError)
def _api_error(err: APIError):
    return _error(err.message, err.status)


@bp.errorhandler(HTTPException)
def _http_error(err: HTTPException):
    return _error(err.description or err.name, err.code or 500)


@bp.errorhandler(Exception)
def _unexpected(err: Exception):
    log.exception("unexpected error in /v1/messages")
    return _error(f"Internal server error: {type(err).__name__}: {err}", 500)


# ---- request translation ----------------------------------------------------------------------

def _image_block(block: dict) -> dict:
    src = block["source"]
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type')};base64,{src.get('data')}"
    else:
        url = src.get("url")
    return {"type": "image_url", "image_url": {"url": url}}


def _chat_parts(blocks) -> list:
    """Anthropic text/image blocks -> chat content parts (other blocks add no tokens)."""
    out = []
    for b in blocks:
        t = b.get("type")
        if t == "text":
            out.append({"type": "text", "text": b["text"]})
        elif t == "image":
            out.append(_image_block(b))
    return out


def to_chat_messages(data: dict) -> list:
    """Validated Anthropic ``system`` + ``messages`` -> chat messages.

    ``tool_result`` blocks become ``tool`` messages (``tool_call_id`` = ``tool_use_id``) placed
    before the remaining content of their message, as chat expects results right after the
    assistant's calls.  ``tool_use`` input is serialised as compact JSON with sorted keys.  A
    message left with no content and no tool calls is dropped (reference api.md 5.4.1)."""
    out = []
    system = data.get("system")
    if isinstance(system, str):
        if system:
            out.append({"role": "system", "content": system})
    elif system:
        out.append({"role": "system", "content": _chat_parts(system)})
    for m in data["messages"]:
        role, content = m["role"], m["content"]
        if isinstance(content, str):
            if content:
                out.append({"role": role, "content": content})
            continue
        parts, calls = [], []
        for b in content:
            t = b["type"]
            if t == "tool_result":
                rc = b.get("content")
                out.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                            "content": rc if isinstance(rc, str) or rc is None else _chat_parts(rc)})
            elif t == "tool_use":
                calls.append({"id": b["id"], "type": "function",
                              "function": {"name": b["name"],
                                           "arguments": json.dumps(b.get("input") or {}, sort_keys=True,
                                                                   separators=(",", ":"))}})
            elif t in ("text", "image"):
                parts.extend(_chat_parts([b]))
        if not parts and not calls:
            continue
        msg = {"role": role, "content": parts or None}
        if len(parts) == 1 and parts[0]["type"] == "text":
            msg["content"] = parts[0]["text"]
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def to_chat_tools(tools) -> list | None:
    """Anthropic ``{name, description, input_schema}`` -> chat function tools (None if empty)."""
    if not tools:
        return None
    out = []
    for t in tools:
        fn = {"name": t["name"], "parameters": t["input_schema"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def to_chat_tool_choice(choice: dict | None):
    """Anthropic tool_choice -> chat: auto -> "auto", any -> "required", none -> "none",
    ``{"type":"tool","name":X}`` -> ``{"type":"function","function":{"name":X}}``."""
    if not choice:
        return None
    t = choice["type"]
    if t == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}[t]


def apply_stop_sequences(seqs, stops) -> dict:
    """Cut each text answer at the earliest of ``stops`` (the stop string is not returned, as
    Anthropic and vLLM do) and return ``{seq.index: matched stop string}``.

    The engine's own ``stop`` handling does not say which string matched, so the blueprint
    keeps ``stop_sequences`` out of the engine request and applies them here, before the
    sequences are admitted (token counts and metrics then see the cut answer)."""
    matched = {}
    stops = [s for s in stops or () if s]
    if not stops:
        return matched
    for seq in seqs:
        if seq.tool_calls or seq.finish_reason == "cache_threshold":
            continue
        text = seq.output_text()
        best, pos = None, -1
        for s in stops:
            i = text.find(s)
            if i >= 0 and (pos < 0 or i < pos):
                best, pos = s, i
        if best is None:
            continue
        remote = seq.finish_reason == "remote_decode"
        Simulator._apply_stop([best], seq)
        seq.completion_tokens = len(seq.pieces)
        if remote:
            seq.finish_reason = "remote_decode"
        matched[seq.index] = best
    return matched


def _chat_body(data: dict) -> dict:
    return {"model": data.get("model"), "messages": to_chat_messages(data),
            "tools": to_chat_tools(data.get("tools")), "tool_choice": to_chat_tool_choice(data.get("tool_choice")),
            "max_tokens": data.get("max_tokens"), "ignore_eos": data.get("ignore_eos"),
            "stream": data.get("stream"), "kv_transfer_params": data.get("kv_transfer_params")}


# ---- endpoints ----------------------------------------------------------------------------------

@bp.post("/v1/messages")
def create_message():
    """Anthropic ``message`` JSON, or its SSE stream when ``stream`` is true."""
    sim = simulator()
    body = parse_json_body()
    data = load(messages_request_schema, body)
    rid = request_id(sim)
    force_ct = header_checks(sim)
    req = build_chat_request(sim, _chat_body(data), rid, force_ct, n=1)
    if (data.get("tool_choice") or {}).get("disable_parallel_tool_use"):
        req.max_tool_calls = 1
    seqs = sim.prepare(req)
    stops = apply_stop_sequences(seqs, data.get("stop_sequences"))
    sim.admit(seqs)
    headers = response_headers(rid)
    seq = seqs[0]
    if req.stream:
        return sse_response(stream_message(sim, req, seq, stops.get(seq.index)), headers, sim, seqs)
    run_to_completion(sim, seqs)
    return json_response(render_message(req, seq, stops.get(seq.index)), headers=headers)


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    """``{"input_tokens": N}``: the prompt tokens /v1/messages would report (tools and the
    tool_choice add none, as in the simulated tokenizer's chat flattening)."""
    sim = simulator()
    data = load(count_tokens_request_schema, parse_json_body())
    sim.resolve_model(data.get("model"))
    ids, _ = sim.tokenize_messages(to_chat_messages(data))
    return json_response({"input_tokens": len(ids)})


# ---- rendering ------------------------------------------------------------------------------------

def tool_use_id(chat_id: str) -> str:
    """``chatcmpl-tool-<hex>`` -> ``toolu_<hex>`` (Anthropic's id style)."""
    return "toolu_" + chat_id.rsplit("-", 1)[-1]


def _usage(seq, output_tokens: int) -> dict:
    """Anthropic usage: ``input_tokens`` excludes prefix-cache hits, which are reported as
    ``cache_read_input_tokens`` (Anthropic's accounting: the three input counters add up to the
    prompt).  Nothing is ever written to a cache on request, so cache_creation is 0."""
    cached = seq.cached_tokens
    return {"input_tokens": seq.prompt_len - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": output_tokens}


def _stop_reason(seq, stop_sequence) -> str:
    if seq.tool_calls:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return _STOP_REASONS.get(seq.finish_reason, "end_turn")


def render_message(req, seq, stop_sequence) -> dict:
    """Non-streaming ``message`` object."""
    if seq.tool_calls:
        content = [{"type": "tool_use", "id": tool_use_id(tc["id"]), "name": tc["name"],
                    "input": json.loads(tc["arguments"] or "{}")} for tc in seq.tool_calls]
    else:
        text = seq.output_text()
        content = [{"type": "text", "text": text}] if text else []
    return {"id": f"msg_{req.request_id}", "type": "message", "role": "assistant", "model": req.model,
            "content": content, "stop_reason": _stop_reason(seq, stop_sequence), "stop_sequence": stop_sequence,
            "usage": _usage(seq, seq.completion_tokens)}


def _frame(name: str, obj) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"


_PING = _frame("ping", {"type": "ping"})
_TEXT_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
               b'"delta":{"type":"text_delta","text":')


def stream_message(sim, req, seq, stop_sequence):
    """SSE body in Anthropic's event order.  ``message_start`` goes out at once (Anthropic sends
    it before the first token); per text token only the piece is serialised."""
    try:
        start = {"id": f"msg_{req.request_id}", "type": "message", "role": "assistant", "model": req.model,
                 "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage(seq, 0)}
        yield _frame("message_start", {"type": "message_start", "message": start})
        calls = seq.tool_calls
        text_block = not calls and bool(seq.pieces)
        if text_block:
            yield _frame("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}})
        yield _PING
        opened = 0          # number of tool_use blocks started so far

        def open_call(c: int):
            out = b""
            if c > 0:
                out += _frame("content_block_stop", {"type": "content_block_stop", "index": c - 1})
            tc = calls[c]
            return out + _frame("content_block_start", {
                "type": "content_block_start", "index": c,
                "content_block": {"type": "tool_use", "id": tool_use_id(tc["id"]), "name": tc["name"], "input": {}}})

        call_of = seq.tool_call_of_piece() if calls else None
        for _, k in sim.stream([seq]):
            piece = seq.pieces[k]
            if calls:
                c = call_of[k]
                out = b""
                while opened <= c:
                    out += open_call(opened)
                    opened += 1
                yield out + _frame("content_block_delta", {"type": "content_block_delta", "index": c,
                                                           "delta": {"type": "input_json_delta",
                                                                     "partial_json": piece}})
            else:
                yield _TEXT_DELTA + dumps(piece) + b"}}\n\n"
        out = b""
        if calls:
            while opened < len(calls):          # calls without argument tokens
                out += open_call(opened)
                opened += 1
            out += _frame("content_block_stop", {"type": "content_block_stop", "index": len(calls) - 1})
        elif text_block:
            out += _frame("content_block_stop", {"type": "content_block_stop", "index": 0})
        out += _frame("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": _stop_reason(seq, stop_sequence),
                                                  "stop_sequence": stop_sequence},
                                        "usage": {"output_tokens": seq.completion_tokens}})
        yield out + _frame("message_stop", {"type": "message_stop"})
    except APIError as e:
        yield _frame("error", anthropic_error_body(e.message, e.status))
