"""OpenAI chat completions as vLLM serves them (``POST /v1/chat/completions``).

Non-streaming: one ``chat.completion`` object.  Streaming (``text/event-stream``): per choice a
role chunk, one chunk per token, a finish chunk with ``delta: {}``; then, only with
``stream_options.include_usage``, one usage chunk with ``choices: []``; then ``data: [DONE]``.
Tool calls stream as OpenAI clients expect: the first delta of each call carries ``id``,
``type`` and ``function.name``, later deltas only ``function.arguments`` fragments.
"""
from __future__ import annotations

import time
from functools import partial

from generation.content import logprobs as lp
from ..errors import InvalidParam
from generation.engine.token_schedule import TokenSchedule
from generation.engine.request import GenerationRequest
from .base import (CLOSE, REMOTE_DECODE_PARAMS, Adapter, ChunkFrame, PieceChunks, chat_prompt, check_kv_transfer,
                   check_limits, check_logprobs_cap, check_logprobs_sign, check_prompt_logprobs, check_size,
                   check_stream_options, check_tools, dumps, request_usage, stream_flags, with_prompt_token_ids,
                   due_items)
from generation.content.reasoning import content_text, reasoning_text, reasoning_tokens
from generation.tokenization.tokenizer import chat_options
from .protocol import ChatCompletionRequest
from .sampling import chat_reasoning, sampling_semantics, structured_constraint


class ChatAdapter(Adapter):
    body: ChatCompletionRequest

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        stream = bool(b.stream)
        # vLLM's request validators (chat_completion/protocol.py), before the model check
        check_stream_options(b.stream_options, stream)
        top = b.top_logprobs
        check_prompt_logprobs(b.prompt_logprobs, stream)
        check_logprobs_sign(top, "top_logprobs")
        if top is not None and top != 0 and not b.logprobs:
            raise InvalidParam("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        model, lora = sim.resolve_model(b.model)
        if b.logprobs:
            check_logprobs_cap(sim, top or 0, "top_logprobs")
        check_logprobs_cap(sim, b.prompt_logprobs, "prompt_logprobs", "prompt")
        check_tools(sim, b.tools, b.tool_choice, b.response_format)
        constraint = structured_constraint(sim, b.structured_outputs)
        mct = b.max_completion_tokens
        max_tokens = mct if mct is not None else b.max_tokens
        ignore_eos = bool(b.ignore_eos)
        check_limits(max_tokens, ignore_eos, b.n, "max_completion_tokens" if mct is not None else "max_tokens")
        check_kv_transfer(b.kv_transfer_params, stream)
        n = b.n or 1
        check_size(sim, n, force_cache_threshold, b.cache_hit_threshold)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=[chat_prompt(sim, b.messages or [], **chat_options(b))], n=n,
            max_tokens=max_tokens, ignore_eos=ignore_eos, stream=stream, tools=b.tools, tool_choice=b.tool_choice,
            response_format=constraint or b.response_format, stop=b.stop, kv_transfer_params=b.kv_transfer_params,
            cache_hit_threshold=b.cache_hit_threshold, force_cache_threshold=force_cache_threshold,
            max_tool_calls=1 if b.parallel_tool_calls is False else None, **sampling_semantics(b),
            reasoning=chat_reasoning(sim, b))
        return self.req

    def render(self, seqs) -> dict:
        b = self.body
        out = render_chat(self.req, seqs, bool(b.logprobs), b.top_logprobs or 0, self.sim.reasoning is not None)
        if b.prompt_logprobs is not None:
            out["prompt_logprobs"] = lp.prompt_logprobs(self.sim.tokenizer, seqs[0].prompt.ids, b.prompt_logprobs)
        if b.return_token_ids:     # vLLM: top-level prompt_token_ids, per choice token_ids
            out["prompt_token_ids"] = list(seqs[0].prompt.ids)
            for c, s in zip(out["choices"], seqs):
                c["token_ids"] = list(s.ids)
        return out

    def stream(self, seqs):
        b = self.body
        include_usage, continuous = stream_flags(b.stream_options, self.sim.config.enable_force_include_usage)
        body = stream_chat(self.sim, self.req, seqs, include_usage, continuous, bool(b.logprobs),
                           b.top_logprobs or 0, bool(b.return_token_ids), self.sim.reasoning is not None)
        if b.return_token_ids:
            return with_prompt_token_ids(body, seqs[0].prompt.ids)
        return body


def tool_calls_json(seq) -> list:
    return [{"id": tc["id"], "type": "function", "index": i,
             "function": {"name": tc["name"], "arguments": tc["arguments"]}}
            for i, tc in enumerate(seq.tool_calls)]


def named_choice(req: GenerationRequest) -> bool:
    """Whether ``tool_choice`` names one function (``{"type": "function", ...}``)."""
    tc = req.tool_choice
    return isinstance(tc, dict) and tc.get("type", "function") == "function"


def finish_reason(req: GenerationRequest, seq) -> str:
    """A choice's chat ``finish_reason``: a named ``tool_choice`` ends with ``"stop"``, as vLLM
    and OpenAI end a forced call (``"tool_calls"`` is for calls the model chose to make)."""
    if seq.tool_calls and seq.finish_reason == "tool_calls" and named_choice(req):
        return "stop"
    return seq.finish_reason


def render_chat(req: GenerationRequest, seqs, want_logprobs: bool, top: int, parser: bool = False) -> dict:
    """The ``chat.completion`` body.  Each message carries ``reasoning`` (its text; null without
    a reasoning span or when hidden by ``include_reasoning: false``); ``parser``:
    ``--reasoning-parser`` is set, so the usage has ``completion_tokens_details.reasoning_tokens``
    (null otherwise), as vLLM 0.33 reports them."""
    choices = []
    include = req.reasoning is None or req.reasoning.include
    for s in seqs:
        span = s.reasoning_span
        if s.tool_calls:
            content = "" if named_choice(req) else None    # vLLM: "" for a named call
            message = {"role": "assistant", "content": content, "tool_calls": tool_calls_json(s)}
            logprobs = None
        else:
            text = content_text(s)
            message = {"role": "assistant", "content": text if text or span is None else None, "tool_calls": []}
            pieces = s.pieces if span is None else s.pieces[span[2]:]
            logprobs = lp.chat_logprobs(pieces, top) if want_logprobs else None
        message["reasoning"] = reasoning_text(s) if include else None      # vLLM 0.33: always there
        choices.append({"index": s.index, "message": message, "logprobs": logprobs,
                        "finish_reason": finish_reason(req, s), "stop_reason": s.stop_reason})
    details = None
    if parser:
        details = {"reasoning_tokens": reasoning_tokens(seqs)}
    out = {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion", "created": int(time.time()),
           "model": req.model, "choices": choices, "usage": request_usage(seqs, details), "prompt_logprobs": None}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    return out


# a plain content chunk after its head: ``,"delta":{"content":<piece>},...}]}\n\n``
_PLAIN_REST = PieceChunks(b',"delta":{"content":', b'},"logprobs":null,"finish_reason":null' + CLOSE)


def stream_chat(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool,
                want_logprobs: bool, top: int, token_ids: bool = False, parser: bool = False):
    """SSE body.  Chunk prefixes are rendered once (:class:`ChunkFrame`); per token only the
    piece is serialised.  ``token_ids``: each token chunk's choice carries its ``token_ids``
    delta (vLLM's ``return_token_ids``).  Reasoning tokens stream as ``delta.reasoning``; the
    parser's markers (and reasoning hidden by ``include_reasoning: false``) send no chunk, as
    vLLM's parser returns no delta for them, but count in the usage."""
    frame = ChunkFrame(f"chatcmpl-{req.request_id}", "chat.completion.chunk", req.model, seqs, continuous)
    heads, tail = frame.heads, frame.tail
    include_reasoning = req.reasoning is None or req.reasoning.include
    out = []              # chunks due now: one write when the stream is about to wait
    put = out.append
    started = [False] * len(seqs)
    call_maps = {}

    def role_chunk(i: int) -> bytes:
        return (heads[i] + b',"delta":{"role":"assistant","content":""},"logprobs":null,'
                b'"finish_reason":null}]' + tail(0, i))

    # No logprobs, token ids nor running usage: a token chunk is its head plus a suffix that
    # depends only on the piece (cached in _PLAIN_REST; about 4x fewer bytes copied per chunk).
    plain = not (want_logprobs or token_ids or continuous or any(s.reasoning_span for s in seqs))
    blocks = plain and not any(s.tool_calls for s in seqs)
    get_rest, render_rest = _PLAIN_REST.get, _PLAIN_REST.render

    def token_chunk(seq, k: int) -> bytes:
        i = seq.index
        piece = seq.pieces[k]
        if plain and not seq.tool_calls:     # the common chunk: head + cached per-piece bytes
            return heads[i] + (get_rest(piece) or render_rest(piece))
        span = seq.reasoning_span
        if span is not None and k < span[2]:
            if not (include_reasoning and span[0] <= k < span[1]):
                if continuous:
                    frame.count(i)
                return b""                    # a marker, or reasoning not returned: no delta
            end = b"}]" + tail(1, i) if continuous else CLOSE
            if token_ids:
                end = b',"token_ids":[' + str(seq.ids[k]).encode() + b"]" + end
            return heads[i] + b',"delta":{"reasoning":' + dumps(piece) + b'},"logprobs":null,"finish_reason":null' + end
        end = b"}]" + tail(1, i) if continuous else CLOSE     # "}]" closes the choices
        if token_ids:
            end = b',"token_ids":[' + str(seq.ids[k]).encode() + b"]" + end
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
            return heads[i] + b',"delta":' + dumps(delta) + b',"logprobs":null,"finish_reason":null' + end
        logprobs = (b'{"content":[' + dumps(lp.chat_entry(piece, k, top)) + b']}') if want_logprobs else b"null"
        return (heads[i] + b',"delta":{"content":' + dumps(piece) + b'},"logprobs":' + logprobs +
                b',"finish_reason":null' + end)

    for seq, k in sim.stream(seqs, flush=True, blocks=blocks, deadlines=True):
        cls = k.__class__
        if cls is int and k >= 0:
            if not started[seq.index]:
                started[seq.index] = True
                put(role_chunk(seq.index))
            put(token_chunk(seq, k))
            continue
        if cls is range:                     # plain tokens due at once: their chunks in one bytes
            i = seq.index
            if not started[i]:
                started[i] = True
                put(role_chunk(i))
            put(_PLAIN_REST.block(heads[i], seq.pieces[k.start:k.stop]))
            continue
        if cls is TokenSchedule:             # the server emits tokens 1.. itself (token 0 came first)
            k.render = (_PLAIN_REST.renderer(heads[seq.index], seq.pieces) if plain and not seq.tool_calls
                        else partial(token_chunk, seq))
        yield from due_items(out, k)         # the stream waits here: what is due, then the deadline
    for seq in seqs:
        i = seq.index
        if not started[i] and seq.finish_reason != "cache_threshold":
            put(role_chunk(i))
        put(heads[i] + b',"delta":{},"logprobs":null,"finish_reason":' + dumps(finish_reason(req, seq)) +
            b',"stop_reason":' + dumps(seq.stop_reason) + b'}]' + tail(0, i))
    if include_usage:
        details = {"reasoning_tokens": reasoning_tokens(seqs)} if parser else None
        put(frame.usage_chunk(request_usage(seqs, details)))
    put(b"data: [DONE]\n\n")
    yield b"".join(out)
