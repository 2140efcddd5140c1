"""OpenAI legacy completions as vLLM serves them (``POST /v1/completions``).

``prompt`` may be a string, a list of strings, a list of token ids or a list of token-id
lists; every prompt (times ``n``) is its own sequence, choices are indexed prompt-major.
Pre-tokenized prompts are never tokenized (prompt_tokens = number of ids).  Usage counts
each prompt once and sums completions.  Streams carry no role chunk; each choice ends with
a chunk whose ``text`` is empty and whose ``finish_reason`` is set.
"""
from __future__ import annotations

import time

from .. import logprobs as lp
from ..errors import InvalidParam
from ..request import GenerationRequest, Prompt
from .base import (CHUNK_END, REMOTE_DECODE_PARAMS, Adapter, ChunkFrame, check_kv_transfer, check_limits,
                   check_logprobs_cap, check_logprobs_sign, check_size, dumps, request_usage, stream_flags)
from .protocol import CompletionRequest


class CompletionsAdapter(Adapter):
    batch = True
    body: CompletionRequest

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        check_logprobs_sign(b.logprobs, "logprobs")
        check_logprobs_sign(b.prompt_logprobs, "prompt_logprobs")
        model, lora = sim.resolve_model(b.model)
        if b.prompt is None:
            raise InvalidParam("prompt array must contain at least one prompt", "prompt")
        check_logprobs_cap(sim, b.logprobs, "logprobs")
        check_logprobs_cap(sim, b.prompt_logprobs, "prompt_logprobs", "prompt")
        ignore_eos = bool(b.ignore_eos)
        check_limits(b.max_tokens, ignore_eos, b.n)
        stream = bool(b.stream)
        check_kv_transfer(b.kv_transfer_params, stream)
        kind, items = b.prompt
        n = b.n or 1
        check_size(sim, len(items) * n, force_cache_threshold, b.cache_hit_threshold)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=build_prompts(sim, kind, items, b.add_special_tokens is not False), n=n,
            max_tokens=b.max_tokens, ignore_eos=ignore_eos, stream=stream, stop=b.stop,
            kv_transfer_params=b.kv_transfer_params, cache_hit_threshold=b.cache_hit_threshold,
            force_cache_threshold=force_cache_threshold)
        return self.req

    def render(self, seqs) -> dict:
        return render_completion(self.sim.tokenizer, self.req, seqs, self.body.logprobs, bool(self.body.echo))

    def stream(self, seqs):
        include_usage, continuous = stream_flags(self.body.stream_options)
        return stream_completion(self.sim, self.req, seqs, include_usage, continuous, self.body.logprobs,
                                 bool(self.body.echo))


def build_prompts(sim, kind: str, items: list, add_special_tokens: bool = True) -> list[Prompt]:
    """``("text", [str])`` or ``("ids", [[int]])`` -> prompts (echo pieces in echo mode)."""
    prompts = []
    tok = sim.tokenizer
    echo = sim.config.mode == "echo"
    for item in items:
        if kind == "text":
            ids, pieces = tok.encode_prompt(item, add_special_tokens)
            p = Prompt(ids, text=item)
            if echo:
                p.echo_ids, p.echo_pieces = tok.encode_lossless(item)
        else:
            p = Prompt(list(item))
            if echo:
                p.echo_ids, p.echo_pieces = list(item), tok.id_pieces(item)
        prompts.append(p)
    return prompts


def prompt_pieces(tokenizer, seq) -> list:
    """The prompt as token pieces for ``echo: true``: a text prompt verbatim; a token-id prompt
    detokenized (ids the simulated tokenizer cannot invert show as comma-separated decimals)."""
    p = seq.prompt
    if p.text is not None:
        return tokenizer.encode_lossless(p.text)[1]
    n = len(p.ids)
    out = []
    for k, t in enumerate(p.ids):
        piece = tokenizer.decode_ids([t])
        if piece == str(t) and k < n - 1:
            piece += ","
        out.append(piece)
    return out


def render_completion(tokenizer, req: GenerationRequest, seqs, top, echo_prompt: bool) -> dict:
    choices = []
    for s in seqs:
        text = s.output_text()
        pieces = s.pieces
        if echo_prompt:
            head = prompt_pieces(tokenizer, s)
            pieces = head + list(pieces)
            text = "".join(head) + text
        logprobs = lp.completion_logprobs(pieces, top) if top is not None else None
        choices.append({"index": s.index, "text": text, "logprobs": logprobs, "finish_reason": s.finish_reason,
                        "stop_reason": s.stop_reason, "prompt_logprobs": None})
    out = {"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": int(time.time()),
           "model": req.model, "choices": choices, "usage": request_usage(seqs)}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    return out


def stream_completion(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool, top,
                      echo_prompt: bool):
    """SSE body: no role chunk; one chunk per token; a finish chunk with empty ``text`` per choice."""
    frame = ChunkFrame(f"cmpl-{req.request_id}", "text_completion", req.model, seqs, continuous)
    heads, tail = frame.heads, frame.tail
    offsets = [0] * len(seqs)
    if echo_prompt:
        for s in seqs:
            yield (heads[s.index] + b',"text":' + dumps("".join(prompt_pieces(sim.tokenizer, s))) +
                   b',"logprobs":null,"finish_reason":null,"stop_reason":null}]' + tail())
    for seq, k in sim.stream(seqs, flush=True):
        if k < 0:
            yield b""          # flush: the next token is not due yet
            continue
        i = seq.index
        piece = seq.pieces[k]
        if top is not None:
            logprobs = dumps(lp.completion_logprobs([piece], top, start=k, offset=offsets[i]))
            offsets[i] += len(piece)
        else:
            logprobs = b"null"
        yield (heads[i] + b',"text":' + dumps(piece) + b',"logprobs":' + logprobs +
               b',"finish_reason":null,"stop_reason":null}]' + (tail(1) if continuous else CHUNK_END))
    for seq in seqs:
        yield (heads[seq.index] + b',"text":"","logprobs":null,"finish_reason":' + dumps(seq.finish_reason) +
               b',"stop_reason":' + dumps(seq.stop_reason) + b'}]' + tail())
    if include_usage:
        yield frame.usage_chunk(request_usage(seqs))
    yield b"data: [DONE]\n\n"
