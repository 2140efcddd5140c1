"""OpenAI legacy completions as vLLM serves them (``POST /v1/completions``).

``prompt`` may be a string, a list of strings, a list of token ids or a list of token-id
lists; every prompt (times ``n``) is its own sequence, choices are indexed prompt-major.
Pre-tokenized prompts are never tokenized (prompt_tokens = number of ids).  Usage counts
each prompt once and sums completions.  Streams carry no role chunk; each choice ends with
a chunk whose ``text`` is empty and whose ``finish_reason`` is set.
"""
from __future__ import annotations

import time
from functools import partial

from generation.content import logprobs as lp
from ..errors import InvalidParam
from generation.engine.token_schedule import TokenSchedule
from generation.engine.request import GenerationRequest, Prompt
from .base import (CLOSE, REMOTE_DECODE_PARAMS, Adapter, ChunkFrame, PieceChunks, check_kv_transfer, check_limits,
                   check_logprobs_cap, check_logprobs_sign, check_prompt_logprobs, check_size, check_stream_options,
                   dumps, request_usage, stream_flags, due_items)
from .protocol import CompletionRequest
from .sampling import chat_reasoning, sampling_semantics, structured_constraint


class CompletionsAdapter(Adapter):
    body: CompletionRequest

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        stream = bool(b.stream)
        # vLLM's request validators (completion/protocol.py), before the model check
        check_stream_options(b.stream_options, stream)
        check_prompt_logprobs(b.prompt_logprobs, stream)
        check_logprobs_sign(b.logprobs, "logprobs")
        model, lora = sim.resolve_model(b.model)
        if b.prompt is None:
            raise InvalidParam("prompt array must contain at least one prompt", "prompt")
        check_logprobs_cap(sim, b.logprobs, "logprobs")
        check_logprobs_cap(sim, b.prompt_logprobs, "prompt_logprobs", "prompt")
        ignore_eos = bool(b.ignore_eos)
        check_limits(b.max_tokens, ignore_eos, b.n)
        check_kv_transfer(b.kv_transfer_params, stream)
        kind, items = b.prompt
        n = b.n or 1
        check_size(sim, len(items) * n, force_cache_threshold, b.cache_hit_threshold)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=build_prompts(sim, kind, items, b.add_special_tokens is not False), n=n,
            max_tokens=b.max_tokens, ignore_eos=ignore_eos, stream=stream, stop=b.stop,
            kv_transfer_params=b.kv_transfer_params, cache_hit_threshold=b.cache_hit_threshold,
            force_cache_threshold=force_cache_threshold, response_format=structured_constraint(sim, b.structured_outputs),
            reasoning=chat_reasoning(sim, b), **sampling_semantics(b))
        return self.req

    def render(self, seqs) -> dict:
        b = self.body
        echo = bool(b.echo)
        out = render_completion(self.sim.tokenizer, self.req, seqs, b.logprobs, echo)
        # vLLM: with echo, prompt_logprobs defaults to logprobs (CompletionRequest.to_sampling_params)
        plp = b.prompt_logprobs if b.prompt_logprobs is not None or not echo else b.logprobs
        if plp is not None or b.return_token_ids:
            cache: dict = {}
            for c, s in zip(out["choices"], seqs):
                if plp is not None:
                    key = s.prompt_index
                    if key not in cache:
                        cache[key] = lp.prompt_logprobs(self.sim.tokenizer, s.prompt.ids, plp)
                    c["prompt_logprobs"] = cache[key]
                if b.return_token_ids:
                    c["prompt_token_ids"] = list(s.prompt.ids)
                    c["token_ids"] = list(s.ids)
        return out

    def stream(self, seqs):
        b = self.body
        include_usage, continuous = stream_flags(b.stream_options, self.sim.config.enable_force_include_usage)
        return stream_completion(self.sim, self.req, seqs, include_usage, continuous, b.logprobs, bool(b.echo),
                                 bool(b.return_token_ids))


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
        if logprobs is not None and echo_prompt and head:
            # vLLM: nothing precedes the first prompt token, so it has no logprob (prompt_logprobs[0])
            logprobs["token_logprobs"][0] = logprobs["top_logprobs"][0] = None
        choices.append({"index": s.index, "text": text, "logprobs": logprobs, "finish_reason": s.finish_reason,
                        "stop_reason": s.stop_reason, "prompt_logprobs": None})
    out = {"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": int(time.time()),
           "model": req.model, "choices": choices, "usage": request_usage(seqs, None)}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    return out


# a plain token chunk after its head: ``,"text":<piece>,...}]}\n\n``
_PLAIN_REST = PieceChunks(b',"text":', b',"logprobs":null,"finish_reason":null,"stop_reason":null' + CLOSE)


def stream_completion(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool, top,
                      echo_prompt: bool, token_ids: bool = False):
    """SSE body: no role chunk; one chunk per token; a finish chunk with empty ``text`` per choice.
    ``token_ids`` (vLLM's ``return_token_ids``): a choice's first chunk carries its
    ``prompt_token_ids``, each token chunk its ``token_ids`` delta."""
    frame = ChunkFrame(f"cmpl-{req.request_id}", "text_completion", req.model, seqs, continuous)
    heads, tail = frame.heads, frame.tail
    out = []              # chunks due now: one write when the stream is about to wait
    put = out.append
    offsets = [0] * len(seqs)
    pids = {s.index: b',"prompt_token_ids":' + dumps(s.prompt.ids) for s in seqs} if token_ids else None
    if echo_prompt:
        for s in seqs:
            head = prompt_pieces(sim.tokenizer, s)
            text = "".join(head)
            logprobs = b"null"
            if top is not None and head:     # the prompt's logprobs, null for its first token (vLLM)
                d = lp.completion_logprobs(head, top)
                d["token_logprobs"][0] = d["top_logprobs"][0] = None
                logprobs = dumps(d)
                offsets[s.index] = len(text)
            put(heads[s.index] + b',"text":' + dumps(text) + b',"logprobs":' + logprobs +
                b',"finish_reason":null,"stop_reason":null' + (pids.pop(s.index) if token_ids else b"") +
                b'}]' + tail(0, s.index))
    # No logprobs, token ids nor running usage: a token chunk is its head plus a suffix that
    # depends only on the piece (cached in _PLAIN_REST).
    plain = top is None and not token_ids and not continuous
    get_rest, render_rest = _PLAIN_REST.get, _PLAIN_REST.render

    def token_chunk(seq, k: int) -> bytes:
        i = seq.index
        piece = seq.pieces[k]
        if plain:                # the common chunk: its bytes after the head are cached per piece
            return heads[i] + (get_rest(piece) or render_rest(piece))
        if top is not None:
            logprobs = dumps(lp.completion_logprobs([piece], top, start=k, offset=offsets[i]))
            offsets[i] += len(piece)
        else:
            logprobs = b"null"
        end = b"}]" + tail(1, i) if continuous else CLOSE     # "}]" closes the choices
        if token_ids:
            end = b',"token_ids":[' + str(seq.ids[k]).encode() + b"]" + pids.pop(i, b"") + end
        return (heads[i] + b',"text":' + dumps(piece) + b',"logprobs":' + logprobs +
                b',"finish_reason":null,"stop_reason":null' + end)

    for seq, k in sim.stream(seqs, flush=True, blocks=plain, deadlines=True):
        cls = k.__class__
        if cls is int and k >= 0:
            put(token_chunk(seq, k))
            continue
        if cls is range:                     # plain tokens due at once: their chunks in one bytes
            put(_PLAIN_REST.block(heads[seq.index], seq.pieces[k.start:k.stop]))
            continue
        if cls is TokenSchedule:             # the server emits tokens 1.. itself (token 0 came first)
            k.render = (_PLAIN_REST.renderer(heads[seq.index], seq.pieces) if plain
                        else partial(token_chunk, seq))
        yield from due_items(out, k)         # the stream waits here: what is due, then the deadline
    for seq in seqs:
        extra = b',"token_ids":[]' + pids.pop(seq.index, b"") if token_ids else b""
        put(heads[seq.index] + b',"text":"","logprobs":null,"finish_reason":' + dumps(seq.finish_reason) +
            b',"stop_reason":' + dumps(seq.stop_reason) + extra + b'}]' + tail(0, seq.index))
    if include_usage:
        put(frame.usage_chunk(request_usage(seqs, None)))
    put(b"data: [DONE]\n\n")
    yield b"".join(out)
