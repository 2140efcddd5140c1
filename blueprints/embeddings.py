"""``POST /v1/embeddings`` - OpenAI embeddings with vLLM's behaviour.

No queue and no latency (the reference answers directly), no failure injection and no
``X-Return-Error``; with ``--runner pooling`` (an embedding model) the inputs run on the engine
instead, as every pooling request does (:mod:`blueprints.pooling`).  Unlike the reference, ``model`` is checked like every vLLM endpoint:
absent means the first served name, anything not served is a 404.  Each input becomes one
deterministic unit-length float32 vector (:func:`generation.content.pooling.embedding_vector`:
the same tokens always give the same vector, texts sharing tokens are close, and a
``dimensions`` vector is the prefix of the full one re-normalised, as matryoshka models do).
``encoding_format: "base64"`` (what the openai SDK asks for by default) returns standard
base64 of the vector's bytes (vLLM's ``embed_dtype``, float32 by default, and ``endianness``,
native by default); ``bytes`` / ``bytes_only`` return the raw bytes (:func:`_bytes_response`).
Usage is vLLM's (``completion_tokens: 0``).  Not served in ``--mm-encoder-only`` mode.

Bounds, checked before any input is tokenized or any vector built (README "Robustness
limits"): at most :data:`MAX_INPUTS` inputs (OpenAI's limit per request), each within
``--max-model-len`` tokens (vLLM); ``dimensions`` at most ``--default-embedding-dimensions``,
which plays the model's hidden size (vLLM slices the pooled hidden state, so it can never return
more); and inputs x dimensions at most :data:`MAX_VALUES` floats per response.
"""
from __future__ import annotations

import base64
import json
import sys
import time

import orjson
from flask import Blueprint, Response
from werkzeug.exceptions import NotFound

from generation.adapters.fields import check_chat_part_types
from generation.adapters.response_bodies import embedding_data, pooling_usage
from generation.content.pooling import embedding_vectors
from generation.errors import APIError, Rejected
from generation.tokenization.tokenizer import each_text
from schemas.common import load, required_refusal
from schemas.embeddings import embedding_request_schema, is_batched_chat_messages, is_chat_messages

from .pooling_run import run_pooled
from .common import JSON_MIME, parse_json_body, request_id, response_headers, simulator

bp = Blueprint("embeddings", __name__)

MAX_INPUTS = 2048             # OpenAI: "must be 2048 dimensions or less" for an input array
MAX_VALUES = 1 << 22          # floats per response (~45 MB of JSON): bounds memory per request


def encode_vector(vec, embed_dtype: str, endianness: str) -> bytes:
    """vLLM's binary embedding: ``vec`` (float32) cast to ``embed_dtype`` (``float32``,
    ``float16``, ``bfloat16``, ``fp8_e4m3`` - torch's ``float8_e4m3fn`` - or ``fp8_e5m2``;
    round to nearest even, as ``tensor.to(dtype)``), its bytes in ``endianness`` order
    (``native``, ``big``, ``little``; one-byte types are the same either way)."""
    if embed_dtype == "float32":
        arr = vec.astype("=f4")
    elif embed_dtype == "float16":
        arr = vec.astype("=f2")
    else:
        import ml_dtypes
        arr = vec.astype({"bfloat16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                          "fp8_e5m2": ml_dtypes.float8_e5m2}[embed_dtype])
    if arr.dtype.itemsize > 1 and endianness != "native" and endianness != sys.byteorder:
        arr = arr.byteswap()
    return arr.tobytes()


def _bytes_response(vectors, dtype: str, endian: str, bytes_only: bool, body_id: str, created: int, model: str,
                    total: int, headers: dict) -> Response:
    """``encoding_format`` ``bytes`` / ``bytes_only`` as vLLM answers it: the embeddings' raw
    bytes back to back (``application/octet-stream``) and, for ``bytes``, a ``metadata`` header
    (JSON: ``id``, ``created``, ``model``, ``data`` items with ``index``, ``embed_dtype``,
    ``endianness``, ``start``, ``end``, ``shape`` - the tensor's whole shape, ``[tokens, size]``
    for a per-token task, as vLLM 0.34's encode_pooling_bytes - and ``usage``)."""
    parts, items, start = [], [], 0
    for i, vec in enumerate(vectors):
        raw = encode_vector(vec, dtype, endian)
        parts.append(raw)
        items.append({"index": i, "embed_dtype": dtype, "endianness": endian, "start": start,
                      "end": start + len(raw), "shape": list(vec.shape)})   # output.outputs.data.shape
        start += len(raw)
    headers = dict(headers)
    if not bytes_only:
        # json.dumps, as vLLM 0.34's build_pooling_bytes_streaming_response writes it (pooling/utils.py)
        headers["metadata"] = json.dumps({"id": body_id, "created": created, "model": model, "data": items,
                                          "usage": {"prompt_tokens": total, "total_tokens": total}})
    return Response(b"".join(parts), status=200, mimetype="application/octet-stream", headers=headers)


def _token_lists(sim, data: dict) -> list[list[int]]:
    """Token ids of every input, in input order.  Raises APIError 400 naming ``input``."""
    messages = data.get("messages")
    inp = data.get("input")
    if inp is None:
        if messages is None:
            raise APIError("input is required and must be a non-empty string or array", 400, "input")
        # vLLM's EmbeddingChatRequest: both options default to False
        opts = {k: bool(data.get(k)) for k in ("add_generation_prompt", "continue_final_message")}
        from generation.adapters.pooling import chat_options
        opts.update(chat_options(data))
        form, convs = messages
        convs = convs if form == "batch" else [convs]
        if len(convs) > MAX_INPUTS:
            raise APIError(f"messages must have at most {MAX_INPUTS} conversations, got {len(convs)}.", 400,
                           "messages")
        for conv in convs:
            check_chat_part_types(conv)
        return [sim.tokenize_messages(conv, **opts)[0] for conv in convs]
    if messages is not None:
        raise APIError("Only one of input and messages may be given", 400, "messages")
    kind, items = inp
    if not items:       # PoolingBaseServing._preprocessing (pooling/base/serving.py l. 85-88): a ValueError
        raise Rejected("You must pass at least one prompt")
    if len(items) > MAX_INPUTS:
        raise APIError(f"input must have at most {MAX_INPUTS} items, got {len(items)}.", 400, "input")
    if kind == "ids":
        return items
    for text in items:        # every text's length before any is tokenized
        sim.check_prompt_chars(len(text), "input")
    # together: off the hub past 8 KiB in all (500 texts of 8,000 characters held it 4.6 s)
    return [ids for ids, _ in each_text(sim.tokenizer.encode, items)]


@bp.post("/v1/embeddings")
def create_embeddings():
    sim = simulator()
    cfg = sim.config
    if cfg.mm_encoder_only:   # the reference does not register the route in this mode
        raise NotFound()
    raw = parse_json_body(members=5)     # EmbeddingRequest: a union of 5 models (pooling/embed/protocol.py:190)
    if isinstance(raw, dict) and "messages" not in raw and "input" in raw and (
            is_chat_messages(raw["input"]) or is_batched_chat_messages(raw["input"])):
        # EmbeddingChatInputRequest / EmbeddingBatchChatInputRequest (l. 113-160): chat messages,
        # or a list of conversations, in `input` are read as `messages`
        raw = {**{k: v for k, v in raw.items() if k != "input"}, "messages": raw["input"]}
    data = load(embedding_request_schema, raw)
    from generation.adapters.pooling import check_request
    check_request(sim, data)
    if data.get("input") is None and data.get("messages") is None:
        # pydantic's: input missing (EmbeddingCompletionRequest), messages null (EmbeddingChatRequest)
        refusal = required_refusal(embedding_request_schema, raw)
        if refusal is not None:
            raise refusal
    model = data.get("model")
    from generation.adapters.pooling import resolve_model
    display, lora = resolve_model(sim, cfg.served_names[0] if model in (None, "") else model)
    from generation.adapters.pooling import check_priority
    check_priority(sim, data)
    size = cfg.default_embedding_dimensions
    from generation.adapters.pooling import check_dimensions
    dims = check_dimensions(cfg, data.get("dimensions"))
    inp, messages = data.get("input"), data.get("messages")
    count = len(inp[1]) if inp is not None else len(messages[1]) if messages and messages[0] == "batch" else 1
    if count * dims > MAX_VALUES:
        raise APIError(f"{count} inputs x {dims} dimensions exceed the {MAX_VALUES} values one response may "
                       f"carry; send fewer inputs per request.", 400, "input")
    token_lists = _token_lists(sim, data)
    from generation.adapters.pooling import fit_context
    token_lists = fit_context(cfg, token_lists, data.get("truncate_prompt_tokens"), "embedding generation", "input",
                              data.get("truncation_side"))
    fmt = data.get("encoding_format") or "float"
    dtype = data.get("embed_dtype") or "float32"
    endian = data.get("endianness") or "native"
    rid = request_id(sim, data.get("request_id"))     # header, else the body's (PoolingBasicRequestMixin)
    if cfg.pooling_kind:      # the pooling runner: the inputs run on the engine (slot, prefill, metrics)
        from generation.adapters.pooling import pooling_sequences
        run_pooled(sim, pooling_sequences(sim, rid, display, lora, token_lists))
    vectors = embedding_vectors(token_lists, dims, size)
    total = sum(len(ids) for ids in token_lists)
    created = int(time.time())
    if fmt in ("bytes", "bytes_only"):
        return _bytes_response(vectors, dtype, endian, fmt == "bytes_only", f"embd-{rid}", created, display, total,
                               response_headers(rid))
    out = []
    for i, vec in enumerate(vectors):
        emb = base64.b64encode(encode_vector(vec, dtype, endian)).decode("ascii") if fmt == "base64" else vec
        out.append(embedding_data(i, emb))
    body = {"id": f"embd-{rid}", "object": "list", "created": created, "model": display,
            "data": out, "usage": pooling_usage(total)}
    # orjson writes float32 arrays in their shortest float32 form; never compressed.
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status=200, mimetype=JSON_MIME,
                    headers=response_headers(rid))
