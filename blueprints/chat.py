"""``POST /v1/chat/completions`` - OpenAI chat completions as vLLM serves them.

Non-streaming: one ``chat.completion`` object.  Streaming (``text/event-stream``): per choice a
role chunk, one chunk per token, a finish chunk with ``delta: {}``; then, only with
``stream_options.include_usage``, one usage chunk with ``choices: []``; then ``data: [DONE]``.
Tool calls stream as OpenAI clients expect: the first delta of each call carries ``id``,
``type`` and ``function.name``, later deltas only ``function.arguments`` fragments.
"""
from __future__ import annotations

import time

from flask import Blueprint

from generation.request import GenerationRequest, Prompt
from generation.tokenizer import plain_message
from generation import logprobs as lp
from schemas.chat import chat_request_schema
from schemas.common import load

from .common import (CHUNK_END, REMOTE_DECODE_PARAMS, ChunkFrame, check_kv_transfer, dumps, effective_max_tokens, header_checks,
                     json_response, parse_json_body, request_id, response_headers, run_to_completion, simulator,
                     sse_response,
                     usage)

bp = Blueprint("chat", __name__)


def build_chat_request(sim, data: dict, rid: str, force_cache_threshold: bool, n: int | None = None) -> GenerationRequest:
    """Validated chat body -> engine request (shared with the Anthropic and Responses APIs,
    which are translated to chat messages first).  Raises APIError."""
    model, lora = sim.resolve_model(data.get("model"))
    tools = data.get("tools")
    tool_choice = data.get("tool_choice")
    if (tools is not None or tool_choice is not None) and sim.tool_synthesizer is not None:
        sim.tool_synthesizer.validate_request(tools, tool_choice)
    if data.get("response_format") is not None and sim.tool_synthesizer is not None:
        sim.tool_synthesizer.validate_response_format(data["response_format"])
    mct = data.get("max_completion_tokens")
    max_tokens = mct if mct is not None else data.get("max_tokens")
    ignore_eos = bool(data.get("ignore_eos"))
    n = data.get("n") if n is None else n
    effective_max_tokens(max_tokens, ignore_eos, n, "max_completion_tokens" if mct is not None else "max_tokens")
    stream = bool(data.get("stream"))
    kv = data.get("kv_transfer_params")
    check_kv_transfer(kv, stream)
    messages = data.get("messages") or []
    ids, _ = sim.tokenize_messages(messages)
    prompt = Prompt(ids)
    if sim.config.mode == "echo":
        echo_text = plain_message(messages[-1], False) if messages else ""
        prompt.echo_ids, prompt.echo_pieces = sim.tokenizer.encode_lossless(echo_text)
    return GenerationRequest(
        request_id=rid, model=model, lora=lora, prompts=[prompt], n=n or 1, max_tokens=max_tokens,
        ignore_eos=ignore_eos, stream=stream, tools=tools, tool_choice=tool_choice,
        response_format=data.get("response_format"), stop=data.get("stop"), kv_transfer_params=kv,
        cache_hit_threshold=data.get("cache_hit_threshold"), force_cache_threshold=force_cache_threshold,
        max_tool_calls=1 if data.get("parallel_tool_calls") is False else None)


@bp.post("/v1/chat/completions")
def create_chat_completion():
    sim = simulator()
    body = parse_json_body()
    data = load(chat_request_schema, body)
    rid = request_id(sim)
    force_ct = header_checks(sim)
    req = build_chat_request(sim, data, rid, force_ct)
    seqs = sim.prepare(req)
    sim.admit(seqs)
    headers = response_headers(rid, sim)
    want_lp = bool(data.get("logprobs"))
    top = data.get("top_logprobs") or 0
    if req.stream:
        opts = data.get("stream_options") or {}
        return sse_response(stream_chat(sim, req, seqs, bool(opts.get("include_usage")),
                                        bool(opts.get("continuous_usage_stats")), want_lp, top), headers,
                            sim, seqs, batch=True)
    run_to_completion(sim, seqs)
    return json_response(render_chat(req, seqs, want_lp, top), headers=headers)


def tool_calls_json(seq) -> list:
    return [{"id": tc["id"], "type": "function", "index": i,
             "function": {"name": tc["name"], "arguments": tc["arguments"]}}
            for i, tc in enumerate(seq.tool_calls)]


def request_usage(seqs) -> dict:
    """Usage over all choices: each distinct prompt counted once, completions summed."""
    prompts = {}
    for s in seqs:
        prompts.setdefault(s.prompt_index, (s.prompt_len, s.cached_tokens))
    p = sum(v[0] for v in prompts.values())
    cached = sum(v[1] for v in prompts.values())
    c = sum(s.completion_tokens for s in seqs)
    if all(s.finish_reason == "cache_threshold" for s in seqs):
        return usage(p, c, None)
    return usage(p, c, cached)


def render_chat(req: GenerationRequest, seqs, want_logprobs: bool, top: int) -> dict:
    choices = []
    for s in seqs:
        if s.tool_calls:
            message = {"role": "assistant", "content": None, "tool_calls": tool_calls_json(s)}
            logprobs = None
        else:
            message = {"role": "assistant", "content": s.output_text(), "tool_calls": []}
            logprobs = lp.chat_logprobs(s.pieces, top) if want_logprobs else None
        choices.append({"index": s.index, "message": message, "logprobs": logprobs,
                        "finish_reason": s.finish_reason, "stop_reason": s.stop_reason})
    out = {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion", "created": int(time.time()),
           "model": req.model, "choices": choices, "usage": request_usage(seqs), "prompt_logprobs": None}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    return out


def stream_chat(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool,
                want_logprobs: bool, top: int):
    """SSE body.  Chunk prefixes are rendered once (:class:`ChunkFrame`); per token only the
    piece is serialised."""
    frame = ChunkFrame(f"chatcmpl-{req.request_id}", "chat.completion.chunk", req.model, seqs, continuous)
    heads, tail = frame.heads, frame.tail
    started = [False] * len(seqs)
    call_maps = {}

    def role_chunk(i: int) -> bytes:
        return (heads[i] + b',"delta":{"role":"assistant","content":""},"logprobs":null,'
                b'"finish_reason":null}]' + tail())

    for seq, k in sim.stream(seqs, flush=True):
        if k < 0:
            yield b""          # flush: the next token is not due yet
            continue
        i = seq.index
        if not started[i]:
            started[i] = True
            yield role_chunk(i)
        end = tail(1) if continuous else CHUNK_END
        piece = seq.pieces[k]
        if seq.tool_calls:
            cmap = call_maps.get(i)
            if cmap is None:
                cmap = call_maps[i] = seq.tool_call_of_piece()
            c = cmap[k]
            tc = seq.tool_calls[c]
            if k == tc["start"]:
                delta = {"tool_calls": [{"index": c, "id": tc["id"], "type": "function",
                                         "function": {"name": tc["name"], "arguments": piece}}]}
            else:
                delta = {"tool_calls": [{"index": c, "function": {"arguments": piece}}]}
            yield heads[i] + b',"delta":' + dumps(delta) + b',"logprobs":null,"finish_reason":null}]' + end
            continue
        logprobs = (b'{"content":[' + dumps(lp.chat_entry(piece, k, top)) + b']}') if want_logprobs else b"null"
        yield (heads[i] + b',"delta":{"content":' + dumps(piece) + b'},"logprobs":' + logprobs +
               b',"finish_reason":null}]' + end)
    for seq in seqs:
        i = seq.index
        if not started[i] and seq.finish_reason != "cache_threshold":
            yield role_chunk(i)
        yield (heads[i] + b',"delta":{},"logprobs":null,"finish_reason":' + dumps(seq.finish_reason) +
               b',"stop_reason":' + dumps(seq.stop_reason) + b'}]' + tail())
    if include_usage:
        yield frame.usage_chunk(request_usage(seqs))
    yield b"data: [DONE]\n\n"
