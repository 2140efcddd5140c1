"""``POST /inference/v1/generate`` - vLLM's token-in / token-out generation (api.md 5.5).

The prompt is ``token_ids`` (never tokenized: prompt tokens = ``len(token_ids)``); the
answer is token ids.  It goes through the same engine path as every generation API
(context check, queue, TTFT/ITL).  Non-streaming: ``request_id``, ``choices`` (``index``,
``finish_reason``, ``token_ids``), ``usage``, ``ec_transfer_params`` and, with
``do_remote_decode``, ``kv_transfer_params``.  Streaming: one chunk per token, the last
token chunk of a choice carrying its finish reason; an optional usage chunk with
``choices: []``; then ``data: [DONE]``.
"""
from __future__ import annotations

from flask import Blueprint, request

from generation.errors import APIError
from generation.request import GenerationRequest, Prompt
from schemas.common import load
from schemas.generate import generate_request_schema

from .chat import request_usage
from .common import (REMOTE_DECODE_PARAMS, check_kv_transfer, dumps, effective_max_tokens, header_checks,
                     json_response, parse_json_body, request_id, response_headers, run_to_completion, simulator,
                     sse_response)

bp = Blueprint("generate", __name__)

# mm-encoder-only: what the encoder pod reports per multimodal hash (api.md 5.1.10).
EC_TRANSFER_DUMMY = {"peer_host": "DUMMY", "peer_port": 1234, "size_bytes": 2359296,
                     "nixl_agent_metadata_b64": "TklYTF9NRVRBREFUQV9QTEFDRUhPTERFUg=="}


def _request_id(sim, data: dict) -> str:
    """``X-Request-Id`` (with ``--enable-request-id-headers``), else the body's
    ``request_id`` (vLLM's GenerateRequest field), else a fresh id."""
    rid = data.get("request_id")
    if rid and not (sim.config.enable_request_id_headers and request.headers.get("X-Request-Id")):
        return rid
    return request_id()


def ec_transfer_params(sim, features: dict | None) -> dict | None:
    """In ``--mm-encoder-only`` mode, one dummy transfer entry per ``features.mm_hashes`` hash
    (all modalities); None otherwise."""
    if not sim.config.mm_encoder_only or not features:
        return None
    hashes = [h for hs in (features.get("mm_hashes") or {}).values() for h in (hs or ())]
    return {h: dict(EC_TRANSFER_DUMMY) for h in hashes} or None


@bp.post("/inference/v1/generate")
def generate():
    sim = simulator()
    data = load(generate_request_schema, parse_json_body())
    rid = _request_id(sim, data)
    header_checks()   # X-Return-Error / failure injection; the cache-threshold header does not apply
    model, lora = sim.resolve_model(data.get("model"))
    ids = data.get("token_ids")
    if ids is None:
        raise APIError("Missing input token_ids", 400, "token_ids")
    sp = data.get("sampling_params")
    if sp is None:
        raise APIError("Missing sampling_params field", 400, "sampling_params")
    max_tokens = sp.get("max_tokens")
    ignore_eos = bool(data.get("ignore_eos") or sp.get("ignore_eos"))
    n = sp.get("n")
    effective_max_tokens(max_tokens, ignore_eos, n)
    stream = bool(data.get("stream"))
    kv = data.get("kv_transfer_params")
    if kv is None:   # where real vLLM clients put it
        kv = (sp.get("extra_args") or {}).get("kv_transfer_params")
    check_kv_transfer(kv, stream)
    prompt = Prompt(list(ids))
    if sim.config.mode == "echo":
        prompt.echo_ids, prompt.echo_pieces = list(ids), sim.tokenizer.id_pieces(ids)
    req = GenerationRequest(
        request_id=rid, model=model, lora=lora, prompts=[prompt], n=n or 1, max_tokens=max_tokens,
        ignore_eos=ignore_eos, stream=stream, kv_transfer_params=kv)
    seqs = sim.prepare(req)
    sim.admit(seqs)
    headers = response_headers(rid)
    if stream:
        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
        return sse_response(stream_generate(sim, req, seqs, include_usage), headers, sim, seqs)
    run_to_completion(sim, seqs)
    return json_response(render_generate(req, seqs, ec_transfer_params(sim, data.get("features"))),
                         headers=headers)


def render_generate(req: GenerationRequest, seqs, ec: dict | None) -> dict:
    """The non-streaming body: api.md 5.5.2 plus ``usage`` and the ``id``/``model``/``object``
    fields the user's spec lists."""
    out = {}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    out.update({
        "id": req.request_id, "object": "generate", "model": req.model, "request_id": req.request_id,
        "choices": [{"index": s.index, "finish_reason": s.finish_reason, "token_ids": list(s.ids)} for s in seqs],
        "usage": request_usage(seqs), "ec_transfer_params": ec})
    return out


def stream_generate(sim, req: GenerationRequest, seqs, include_usage: bool):
    """SSE body (api.md 5.5.3, case C32).  A choice's last token chunk carries its finish
    reason; a choice with no tokens (cache_threshold, empty echo) gets one finishing chunk
    with ``token_ids`` null (cache_threshold) or ``[]``."""
    head = b'data: {"request_id":' + dumps(req.request_id) + b',"choices":['
    open_ = head + b'{"index":'
    last = [len(s.ids) - 1 for s in seqs]
    emitted = [False] * len(seqs)
    for seq, k in sim.stream(seqs):
        i = seq.index
        emitted[i] = True
        fr = dumps(seq.finish_reason) if k == last[i] else b"null"
        yield (open_ + str(i).encode() + b',"finish_reason":' + fr + b',"token_ids":[' +
               str(seq.ids[k]).encode() + b']}]}\n\n')
    for seq in seqs:
        if not emitted[seq.index]:
            tids = b"null" if seq.finish_reason == "cache_threshold" else b"[]"
            yield (open_ + str(seq.index).encode() + b',"finish_reason":' + dumps(seq.finish_reason) +
                   b',"token_ids":' + tids + b'}]}\n\n')
    if include_usage:
        yield head + b'],"usage":' + dumps(request_usage(seqs)) + b"}\n\n"
    yield b"data: [DONE]\n\n"
