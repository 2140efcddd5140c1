"""The pooling runner's routes (``--runner pooling``, :mod:`generation.adapters.pooling`):
``POST /pooling``, ``/classify``, ``/score``, ``/v1/score``, ``/rerank``, ``/v1/rerank``,
``/v2/rerank`` and Cohere's ``/v2/embed``, with vLLM 0.33's request and response shapes.

Which routes exist depends on the model kind, as vLLM registers its pooling routers by the
supported tasks (:func:`register`): a route the model does not serve is a 404, and so are the
generation routes (chat, completions, responses, messages, generate) of a pooling model.

Every request is checked before anything is admitted (400 naming the field); its inputs then
run on the engine (:func:`run_pooled`: a slot each, the prefill time, metrics), and a client
that leaves meanwhile aborts them.  Bounds (README "Robustness limits"): at most 2048 inputs or
pairs, each within ``--max-model-len`` tokens, at most 2**22 floats per response.
"""
from __future__ import annotations

import base64
import time

import orjson
from flask import Blueprint, Response

from generation.adapters import pooling as pa
from generation.adapters.response_bodies import cohere_embed_response
from generation.adapters.validation import validation_errors
from generation.content.pooling import embedding_vectors
from generation.errors import APIError, Rejected
from generation.lanes import paced
from generation.tokenization.tokenizer import each_text
from schemas.common import load
from schemas.pooling import (classify_request_schema, cohere_embed_request_schema, pooling_request_schema,
                             rerank_request_schema, score_request_schema)

from .pooling_run import run_pooled
from .common import JSON_MIME, parse_json_body, request_id, response_headers, simulator
from .embeddings import _bytes_response, encode_vector

pooling_bp = Blueprint("pooling", __name__)
classify_bp = Blueprint("classify", __name__)
score_bp = Blueprint("score", __name__)
cohere_bp = Blueprint("cohere_embed", __name__)


def register(app, kind: str) -> None:
    """Register the routes a ``kind`` model serves (vLLM's ``register_pooling_api_routers``)."""
    app.register_blueprint(pooling_bp)
    if kind in ("classify", "score"):
        app.register_blueprint(classify_bp)
    if kind == "embed":
        app.register_blueprint(cohere_bp)
    if pa.serves_scores(kind):
        app.register_blueprint(score_bp)


def _reply(body: dict, rid: str) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status=200, mimetype=JSON_MIME,
                    headers=response_headers(rid))


def _check_values(count: int, dims: int, what: str = "inputs") -> None:
    """At most :data:`MAX_VALUES` floats in one response: ``count`` ``what`` (inputs, or tokens
    for a per-token task) x ``dims`` values each."""
    if count * dims > pa.MAX_VALUES:
        raise APIError(f"{count} {what} x {dims} dimensions exceed the {pa.MAX_VALUES} values one response may "
                       f"carry; send fewer {what} per request.", 400, "input")


@pooling_bp.post("/pooling")
def create_pooling():
    """vLLM's ``/pooling``: the model's pooling task (its own, ``embed`` or ``classify``, or
    ``--pooler-config``'s ``token_embed`` / ``token_classify``) decides what ``data`` holds: a
    vector, per-token vectors, class probabilities or per-token ones; ``task`` may only name it."""
    sim = simulator()
    cfg = sim.config
    kind = cfg.pooling_kind
    data = load(pooling_request_schema, parse_json_body(members=3))    # PoolingRequest (pooling/protocol.py:96)
    pa.check_request(sim, data)
    # ServingPooling._verify_pooling_task (pooling/pooling/serving.py l. 60-99): no `dimensions`
    # on /pooling at all, and only the model's one pooling task (get_pooling_task: its own, embed
    # or classify, or --pooler-config's task); another task it supports needs --pooler-config.task
    if data.get("dimensions") is not None:
        raise Rejected("dimensions is currently not supported", "dimensions")
    tasks = pa.supported_tasks(kind)
    own = cfg.pooling_task
    task = data.get("task") or own
    if task == "plugin":        # skips the task checks; no IOProcessor plugin is simulated
        raise Rejected("No IOProcessor plugin installed. Please refer to the documentation and to the "
                       "'prithvi_geospatial_mae_io_processor' offline inference example for more details.", "task")
    if task not in tasks:
        # the engine's supported tasks: a sorted tuple (v1/worker/gpu/model_runner.py l. 387-396)
        raise Rejected(f"Unsupported task: {task!r} Supported tasks: {tuple(tasks)}", "task")
    if task != own:
        raise Rejected(f"Try switching the model's pooling_task via --pooler-config.task {task}.", "task")
    display, lora = pa.resolve_model(sim, data.get("model"))
    pa.check_priority(sim, data)
    size = cfg.default_embedding_dimensions
    inp = data.get("input")
    if task == "embed":
        _check_values(len(inp[1]) if inp is not None else 1, size)
    token_lists = pa.fit_context(cfg, pa.input_token_lists(sim, data), data.get("truncate_prompt_tokens"), "pooling",
                                 side=data.get("truncation_side"))
    if task.startswith("token_"):       # one row per token: bound the response before pooling it
        _check_values(sum(map(len, token_lists)), size if task == "token_embed" else pa.num_labels(kind), "tokens")
    rid = request_id(sim, data.get("request_id"))
    seqs = pa.pooling_sequences(sim, rid, display, lora, token_lists)
    run_pooled(sim, seqs)
    arrays = [pa.pooled_output(kind, task, ids, size, data.get("use_activation")) for ids in paced(token_lists)]
    fmt = data.get("encoding_format") or "float"
    dtype, endian = data.get("embed_dtype") or "float32", data.get("endianness") or "native"
    total = sum(map(len, token_lists))
    # ServingPooling.request_id_prefix "pooling" (pooling/pooling/serving.py l. 36; base/serving.py l. 115)
    if fmt in ("bytes", "bytes_only"):      # build_pooling_bytes_streaming_response (pooling/utils.py)
        return _bytes_response(arrays, dtype, endian, fmt == "bytes_only", f"pooling-{rid}", int(time.time()),
                               display, total, response_headers(rid))
    # float: encode_pooling_output_float, the tensor's tolist() (float32 values as doubles);
    # base64: its bytes in embed_dtype / endianness, whatever the task (pooling/utils.py l. 62-140)
    out = [{"index": i, "object": "pooling",
            "data": base64.b64encode(encode_vector(a, dtype, endian)).decode("ascii") if fmt == "base64" else a.tolist()}
           for i, a in enumerate(arrays)]
    return _reply(pa.listing("pooling", rid, display, out, total), rid)


@classify_bp.post("/classify")
def create_classify():
    """vLLM's ``/classify``: per input ``{"index", "label", "probs", "num_classes"}``."""
    sim = simulator()
    cfg = sim.config
    data = load(classify_request_schema, parse_json_body(members=2))  # ClassificationRequest (classify/protocol.py:52)
    pa.check_request(sim, data)
    display, lora = pa.resolve_model(sim, data.get("model"))
    pa.check_priority(sim, data)
    token_lists = pa.fit_context(cfg, pa.input_token_lists(sim, data), data.get("truncate_prompt_tokens"),
                                 "classification", side=data.get("truncation_side"))
    rid = request_id(sim, data.get("request_id"))
    run_pooled(sim, pa.pooling_sequences(sim, rid, display, lora, token_lists))
    size = cfg.default_embedding_dimensions
    out = [{"index": i, **pa.classification(cfg.pooling_kind, ids, size, data.get("use_activation"))}
           for i, ids in enumerate(paced(token_lists))]
    return _reply(pa.listing("classify", rid, display, out, sum(map(len, token_lists))), rid)


def _scored(data: dict, rerank: bool):
    """Validate, tokenize, run and score a score / rerank request: ``(rid, model, documents,
    scores, prompt tokens)``."""
    sim = simulator()
    cfg = sim.config
    kind = cfg.pooling_kind
    pa.check_request(sim, data, removed_params=False)     # ScoringRequestMixin: no removed-parameter check
    queries, docs, pairs = pa.score_pairs(data, rerank)
    display, lora = pa.resolve_model(sim, data.get("model"))
    pa.check_priority(sim, data)
    max_q, max_d = pa.token_limits(cfg, data)
    # the texts together: off the hub past 8 KiB in all (2,048 short documents add up)
    encoded = each_text(sim.tokenizer.encode, [pa.item_text(x) for x in queries + docs])
    q_ids = pa.truncate_items(queries, [ids for ids, _ in encoded[:len(queries)]], max_q)
    d_ids = pa.truncate_items(docs, [ids for ids, _ in encoded[len(queries):]], max_d)
    trunc = data.get("truncate_prompt_tokens")
    if kind == "embed":          # a bi-encoder embeds each text on its own, once (vLLM 0.34's
        # BiEncoderIOProcessor: one engine input per query and per document; the usage is theirs,
        # scoring/serving.py l. 83-86)
        q_ids = pa.fit_context(cfg, q_ids, trunc, "scoring", "query" if rerank else "queries")
        d_ids = pa.fit_context(cfg, d_ids, trunc, "scoring", "documents")
        prompts = q_ids + d_ids
    else:                        # a cross-encoder reads the pair as one prompt
        prompts = pa.pair_prompts(cfg, q_ids, d_ids, pairs, trunc, "scoring", "documents")
    rid = request_id(sim, data.get("request_id"))
    run_pooled(sim, pa.pooling_sequences(sim, rid, display, lora, prompts))
    size = cfg.default_embedding_dimensions
    act = data.get("use_activation")
    scores = [pa.pair_score(kind, q_ids[i], d_ids[j], size, act) for i, j in paced(pairs)]
    return rid, display, docs, scores, sum(map(len, prompts))


@score_bp.post("/score")
@score_bp.post("/v1/score")
def create_score():
    """vLLM's ``/score``: one ``{"index", "object": "score", "score"}`` per pair (1:1, 1:N, N:N)."""
    body = parse_json_body(members=4)       # ScoreRequest: a union of 4 (scoring/protocol.py:130)
    rid, display, _, scores, tokens = _scored(load(score_request_schema, body), False)
    out = [{"index": k, "object": "score", "score": s} for k, s in enumerate(scores)]
    return _reply(pa.listing("score", rid, display, out, tokens), rid)


@score_bp.post("/rerank")
@score_bp.post("/v1/rerank")
@score_bp.post("/v2/rerank")
def create_rerank():
    """vLLM's ``/rerank`` (Jina / Cohere shape): ``results`` sorted by ``relevance_score``."""
    data = load(rerank_request_schema, parse_json_body())
    rid, display, docs, scores, tokens = _scored(data, True)
    return _reply(pa.rerank_response(rid, display, docs, scores, data.get("top_n"), tokens), rid)


def _value_error(loc: str, value, msg: str) -> tuple:
    return loc, value, "value_error", f"Value error, {msg}", {"error": ValueError(msg)}


def _check_cohere_embed(raw: dict, texts, images, inputs) -> None:
    """The model validators of vLLM's ``CohereEmbedRequest`` (pooling/embed/protocol.py l. 240-283),
    as its validation handler words them: each ``inputs`` content part with its payload
    (``CohereEmbedContent``, all such errors), then exactly one of ``texts``, ``images`` and
    ``inputs``, non-empty (the body's own error, ``loc`` ``body``).  Raises RequestInvalid."""
    rows = []
    for i, item in enumerate(inputs or ()):
        for j, part in enumerate(item["content"]):
            url = part.get("image_url")
            if part["type"] == "text" and part.get("text") is None:
                msg = "CohereEmbedContent with type='text' requires text"
            elif part["type"] == "image_url" and not (url and url.get("url")):
                msg = "CohereEmbedContent with type='image_url' requires image_url.url"
            else:
                continue
            rows.append(_value_error(f"inputs.{i}.content.{j}", raw["inputs"][i]["content"][j], msg))
    if rows:
        raise validation_errors(rows)
    given = [f for f in (texts, images, inputs) if f is not None]
    if len(given) != 1 or not given[0]:
        raise validation_errors([_value_error("", raw, "Exactly one of texts, images, or inputs must be provided, "
                                                       "and it must be non-empty")])


@cohere_bp.post("/v2/embed")
def create_cohere_embed():
    """Cohere's ``/v2/embed`` as vLLM serves it: ``texts``, ``images`` (data or http URLs) or
    mixed ``inputs``; ``embeddings`` by ``embedding_types`` (default ``float``)."""
    sim = simulator()
    cfg = sim.config
    raw = parse_json_body()
    data = load(cohere_embed_request_schema, raw)
    texts, images, inputs = data.get("texts"), data.get("images"), data.get("inputs")
    _check_cohere_embed(raw, texts, images, inputs)
    if data.get("input_type") is not None:
        # EmbedIOProcessor._validate_input_type (pooling/embed/io_processor.py l. 633-646): a ValueError
        raise Rejected(f"Unsupported input_type {data['input_type']!r}. This model does not define any input_type "
                       f"task instructions.")
    display, lora = pa.resolve_model(sim, data.get("model"))
    pa.check_priority(sim, data)
    dims = pa.check_dimensions(cfg, data.get("output_dimension"))
    if images is not None:
        items = [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}}]}] for u in images]
        param = "images"
    elif inputs is not None:
        items = [[{"role": "user", "content": [{k: v for k, v in c.items() if v is not None} for c in inp["content"]]}]
                 for inp in inputs]
        param = "inputs"
    else:
        items, param = texts, "texts"
    if len(items) > pa.MAX_INPUTS:
        raise APIError(f"{param} must have at most {pa.MAX_INPUTS} items, got {len(items)}.", 400, param)
    _check_values(len(items), dims)
    if param == "texts":      # together: off the hub past 8 KiB in all
        token_lists = [ids for ids, _ in each_text(sim.tokenizer.encode, items)]
    else:
        token_lists = [sim.tokenize_messages(x)[0] for x in items]
    max_tokens, truncate = data.get("max_tokens"), data.get("truncate") or "END"
    if truncate == "NONE":
        if max_tokens is not None:
            for t in token_lists:
                if len(t) > max_tokens:
                    raise Rejected(f"Input of {len(t)} tokens exceeds max_tokens={max_tokens} with truncate=NONE. "
                                   f"Set truncate to END or START to allow truncation.")      # a ValueError (l. 455-473)
    else:
        keep = min(max_tokens or cfg.max_model_len, cfg.max_model_len)
        token_lists = [t[-keep:] if truncate == "START" else t[:keep] for t in token_lists]
    token_lists = pa.fit_context(cfg, token_lists, None, "embedding generation", param)
    rid = request_id(sim)
    run_pooled(sim, pa.pooling_sequences(sim, rid, display, lora, token_lists))
    size = cfg.default_embedding_dimensions
    vectors = embedding_vectors(token_lists, dims, size)
    total = sum(map(len, token_lists))
    has_image = images is not None or any(c.get("type") == "image_url" for inp in inputs or () for c in inp["content"])
    image_tokens = total if has_image else 0        # vLLM bills every token of a request with an image as image
    body = cohere_embed_response(f"embd-{rid}", pa.cohere_embeddings(vectors, data.get("embedding_types") or ["float"]),
                                    texts, total - image_tokens, image_tokens)
    return _reply(body, rid)
