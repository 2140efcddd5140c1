"""The pooling runner (``--runner pooling``): vLLM's pooling APIs on the simulator's engine.

A pooling request becomes one engine :class:`~generation.engine.request.Sequence` per pooled
input (``/score`` and ``/rerank``: per (query, document) pair) with no output tokens: it waits
for a slot like any request (``--max-num-seqs``, the waiting queue and its 429), takes the time
to first token (the prefill, from the latency model and the prompt length), and is counted in
``/metrics`` as vLLM counts a pooling request (prompt tokens, success with finish reason
``stop``, queue / prefill / e2e latency; no generation tokens).  The outputs themselves come
from :mod:`generation.content.pooling` and depend only on the token ids.

Model kinds (``SimConfig.pooling_kind``), as vLLM's supported tasks decide which routes exist:

========  ===========================  ==============================================
kind      tasks                        routes
========  ===========================  ==============================================
embed     embed, token_embed           /pooling, /v1/embeddings, /v2/embed, score (cosine)
classify  classify, token_classify     /pooling, /classify (2 labels)
score     classify, token_classify     /pooling, /classify (1 label), score (cross-encoder)
========  ===========================  ==============================================

"score" routes are ``/score``, ``/v1/score``, ``/rerank``, ``/v1/rerank``, ``/v2/rerank``.
Everything here is free of Flask; the routes are :mod:`blueprints.pooling`.
"""
from __future__ import annotations

import base64
import time

from generation.content import pooling as pool
from generation.engine.request import GenerationRequest, Prompt, Sequence
from generation.tokenization.tokenizer import plain_message

from .base import tokenize_texts
from ..errors import InvalidParam, ModelNotFound, Rejected
from .fields import INT64_MAX, INT64_MIN, check_bounds, check_chat_part_types, check_cache_salt, check_mm_kwargs, scheduling_priority
from .response_bodies import pooling_usage

MAX_INPUTS = 2048             # OpenAI's limit per embeddings request; also pairs per score request
MAX_VALUES = 1 << 22          # floats per response (~45 MB of JSON): bounds memory per request

# the tasks each kind supports and vLLM 0.34's removed tasks' messages (vllm/tasks.py)
from generation.config.sim_config import POOLING_TASKS as TASKS, REMOVED_POOLING_TASKS as REMOVED_TASKS   # noqa: E402


def supported_tasks(kind: str) -> tuple:
    return TASKS[kind]


def serves_scores(kind: str | None) -> bool:
    """Whether the score / rerank routes exist: a bi-encoder (embed) or a cross-encoder."""
    return kind in ("embed", "score")


def num_labels(kind: str) -> int:
    return 1 if kind == "score" else pool.NUM_CLASSIFY_LABELS


def labels(kind: str) -> list[str]:
    """HF's default ``id2label`` (``LABEL_<i>``)."""
    return [f"LABEL_{i}" for i in range(num_labels(kind))]


def usage(prompt_tokens: int) -> dict:
    """vLLM's UsageInfo of a pooling response (no completion; vLLM 0.34 leaves the null
    ``prompt_tokens_details`` out and sends ``completion_tokens_details: null``)."""
    return pooling_usage(prompt_tokens)


# ---- inputs ------------------------------------------------------------------------------------

def input_token_lists(sim, data: dict) -> list[list[int]]:
    """Token ids of each input of an ``input`` / ``messages`` request, in order (at most
    :data:`MAX_INPUTS`).  Raises InvalidParam naming ``input`` or ``messages``."""
    messages = data.get("messages")
    inp = data.get("input")
    if inp is None:
        if messages is None:
            raise InvalidParam("input is required and must be a non-empty string or array", "input")
        check_chat_part_types(messages)
        # PoolingChatRequest / ClassificationChatRequest: both options default to False, and
        # check_generation_prompt refuses the two together
        opts = {k: bool(data.get(k)) for k in ("add_generation_prompt", "continue_final_message")}
        opts.update(chat_options(data))
        return [sim.tokenize_messages(messages, **opts)[0]]
    if messages is not None:
        raise InvalidParam("Only one of input and messages may be given", "messages")
    kind, items = inp
    if not items:       # PoolingBaseServing._preprocessing (pooling/base/serving.py l. 85-88): a ValueError
        raise Rejected("You must pass at least one prompt")
    if len(items) > MAX_INPUTS:
        raise InvalidParam(f"input must have at most {MAX_INPUTS} items, got {len(items)}.", "input")
    if kind == "ids":
        return items
    add_special = data.get("add_special_tokens")
    return [ids for ids, _ in tokenize_texts(sim, items, True if add_special is None else add_special)]


def chat_options(data: dict) -> dict:
    """A pooling chat request's ``chat_template`` / ``chat_template_kwargs`` (vLLM 0.34's
    ChatRequestOptionsMixin) for ``tokenize_messages``, which refuses a request template
    without ``--trust-request-chat-template`` (the pooling io_processor's
    ``_validate_chat_template``, pooling/base/io_processor.py l. 287-305) and renders it when
    trusted."""
    return {k: data[k] for k in ("chat_template", "chat_template_kwargs") if data.get(k) is not None}


def check_request(sim, data: dict, removed_params: bool = True) -> None:
    """vLLM 0.34's checks of a pooling request (``/v1/embeddings``, ``/pooling``, ``/classify``,
    score, rerank) before its model is looked up, in its order: ``reject_removed_pooling_
    parameters`` (``pooling/base/protocol.py``, the before-validator of the embedding, pooling
    and classification requests, ``removed_params``: a ``normalize`` key, even null, and the
    removed tasks), the ``cache_salt`` validator every ``PoolingBasicRequestMixin`` has
    (``check_cache_salt_support``, chat's ``validate_cache_salt``), rerank's ``top_n: int =
    Field(ge=0)``, then ``PoolingBaseServing._init_ctx``'s ``validate_request_mm_kwargs``.
    Raises InvalidParam."""
    if removed_params:
        # VLLMValidationError(..., parameter=) from a before-validator: no ValueError, so pydantic
        # lets it through and the client reads str(exc), " (parameter=...)" included
        if "normalize" in data:
            raise Rejected("Parameter `normalize` was removed; use `use_activation` instead.", "normalize")
        task = data.get("task")
        if isinstance(task, str) and task in REMOVED_TASKS:
            raise Rejected(REMOVED_TASKS[task], "task")
    check_cache_salt(data.get("cache_salt"))
    check_bounds("top_n", data.get("top_n"), 0)
    if data.get("mm_processor_kwargs") or data.get("media_io_kwargs"):
        check_mm_kwargs(sim, data.get("mm_processor_kwargs"), data.get("media_io_kwargs"))


def resolve_model(sim, model) -> tuple[str, str | None]:
    """``sim.resolve_model`` as vLLM 0.34's pooling routes meet an unknown model: its
    ``PoolingBaseServing._check_model`` never answers, ``_maybe_get_adapters`` raises
    ``VLLMNotFoundError`` (serve/engine/serving.py l. 213-217), whose 404 has a null ``param``
    (error_response.py l. 52-55), where the generation routes' ``_check_model`` names ``model``."""
    try:
        return sim.resolve_model(model)
    except ModelNotFound as e:
        e.param = None
        raise


def check_dimensions(cfg, dims) -> int:
    """The vector size of ``dimensions`` (``/v1/embeddings``; ``output_dimension`` on
    ``/v2/embed``): the model's (``--default-embedding-dimensions``) when None, else vLLM 0.34's
    ``PoolingParams._set_default_parameters`` check for a Matryoshka model (pooling_params.py
    l. 240-257), a VLLMValidationError without a parameter.  Raises Rejected."""
    size = cfg.default_embedding_dimensions
    if dims is None:
        return size
    if not 1 <= dims <= size:
        raise Rejected(f"Model {cfg.served_names[0]!r} only supports dimensions in range [1, {size}], got {dims}.")
    return dims


def check_priority(sim, data: dict) -> None:
    """A pooling request's ``priority`` as vLLM 0.34 checks it (``PoolingBasicRequestMixin``:
    within int64; the engine client refuses a non-zero one without ``--scheduling-policy
    priority``).  Raises InvalidParam naming ``priority``; the pooling runner does not queue by it."""
    priority = data.get("priority")
    check_bounds("priority", priority, INT64_MIN, INT64_MAX)
    scheduling_priority(sim, priority)


def default_truncation_side(cfg) -> str:
    """The tokenizer's ``truncation_side`` a request without one gets: ``right`` (the first
    tokens kept) for the pooling runner, ``left`` for the generation runner (vLLM 0.34's
    ``get_tokenizer``, tokenizers/registry.py l. 139-144)."""
    return "right" if getattr(cfg, "pooling_kind", None) else "left"


def fit_context(cfg, token_lists: list, truncate, what: str, param: str = "input", side: str | None = None) -> list:
    """Apply ``truncate_prompt_tokens`` (-1 = the model's maximum; more than it is vLLM 0.34's
    400; ``side`` ``right`` keeps the first tokens, ``left`` the end of the prompt, as vLLM's
    ``truncation_side``; unset, the tokenizer's: ``right`` for the pooling runner, ``left`` for
    the generation runner, as vLLM 0.34's ``get_tokenizer`` sets it, tokenizers/registry.py
    l. 139-144) and check every input against ``--max-model-len``.  Raises InvalidParam."""
    side = side or default_truncation_side(cfg)
    max_len = cfg.max_model_len
    if truncate is not None and truncate > max_len:     # vLLM 0.34's PoolingBaseServing._validate_request
        raise InvalidParam("truncate_prompt_tokens value is greater than max_model_len. Please request a smaller "
                           "truncation size.", "truncate_prompt_tokens")
    if truncate is not None:
        keep = max_len if truncate == -1 else truncate
        token_lists = [t[:keep] for t in token_lists] if side == "right" else [t[-keep:] for t in token_lists]
    for t in token_lists:
        if len(t) > max_len:
            raise InvalidParam(f"This model's maximum context length is {max_len} tokens. However, you requested "
                               f"{len(t)} tokens in the input for {what}. Please reduce the length of the input.",
                               param)
    return token_lists


def pair_prompts(cfg, q_ids: list, d_ids: list, pairs: list, truncate, what: str, param: str) -> list:
    """A cross-encoder's prompts, query then document per ``(i, j)`` of ``pairs``, as
    :func:`fit_context` leaves ``[q_ids[i] + d_ids[j] ...]`` (the same truncation, from the side
    it takes by default - the pooling runner's right, keeping the first tokens - and the same 400
    on the first pair past ``--max-model-len``), without building a pair before its length is
    known: one long query against 2,048 documents made 2,048 copies of it first (3 GB and 6 s
    for a 1 MB body, only to be refused)."""
    max_len = cfg.max_model_len
    if truncate is not None and truncate > max_len:
        return fit_context(cfg, [], truncate, what, param)      # its 400
    keep = None if truncate is None else (max_len if truncate == -1 else truncate)
    first = default_truncation_side(cfg) == "right"     # fit_context's default side
    out = []
    for i, j in pairs:
        q, d = q_ids[i], d_ids[j]
        n = len(q) + len(d)
        if keep is not None and n > keep and first:     # the first `keep` tokens of q + d
            out.append(q[:keep] if len(q) >= keep else q + d[:keep - len(q)])
            continue
        if keep is not None and n > keep:       # the last `keep` tokens of q + d
            out.append(d[len(d) - keep:] if len(d) >= keep else q[n - keep:] + d)
            continue
        if n > max_len:
            raise InvalidParam(f"This model's maximum context length is {max_len} tokens. However, you requested "
                               f"{n} tokens in the input for {what}. Please reduce the length of the input.", param)
        out.append(q + d)
    return out


def item_text(item) -> str:
    """A score input's text: the string, or its content parts flattened as chat content is
    (text parts, media as ``image: <url>`` lines)."""
    if isinstance(item, str):
        return item
    return plain_message({"role": "user", "content": item["content"]}, False)


def score_pairs(data: dict, rerank: bool) -> tuple[list, list, list]:
    """``(queries, documents, pairs)`` of a score or rerank request, ``pairs`` the (query index,
    document index) list: 1:1, 1:N (one query against every document) or N:N (pairwise), as
    vLLM's ``validate_score_input``.  Raises InvalidParam."""
    if rerank:
        queries, docs = [data["query"]], data["documents"]
    else:
        spellings = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))
        given = [(a, b) for a, b in spellings if data.get(a) is not None and data.get(b) is not None]
        if not given:
            for a, b in spellings:
                if data.get(a) is not None or data.get(b) is not None:
                    raise InvalidParam(f"{a} and {b} must be given together", a if data.get(a) is None else b)
            raise InvalidParam("queries and documents are required (or data_1 and data_2, text_1 and text_2, "
                               "queries and items)", "queries")
        queries, docs = data[given[0][0]], data[given[0][1]]
    # _validate_score_input_lens (scoring/utils.py l. 123-137): VLLMValidationErrors without a parameter
    if len(queries) > 1 and len(queries) != len(docs):
        raise Rejected("Input lengths must be either 1:1, 1:N or N:N")
    if not queries:
        raise Rejected("At least one text element must be given")
    if not docs:
        raise Rejected("At least one text_pair element must be given")
    if len(docs) > MAX_INPUTS:       # counted before the pairs are built (750,000 held the hub 0.1 s)
        raise InvalidParam(f"at most {MAX_INPUTS} pairs may be scored per request, got {len(docs)}.",
                           "documents")
    pairs = [(0, j) for j in range(len(docs))] if len(queries) == 1 else [(i, i) for i in range(len(docs))]
    return queries, docs, pairs


def token_limits(cfg, data: dict) -> tuple[int, int]:
    """``max_tokens_per_query`` and ``max_tokens_per_doc`` (0: no limit) as vLLM 0.34's
    ``ScoringIOProcessor._get_token_limits`` checks them (scoring/io_processor.py l. 115-146):
    not negative, below ``--max-model-len``; its ValueErrors are 400s without a ``param``."""
    out = []
    for name in ("max_tokens_per_query", "max_tokens_per_doc"):
        value = data.get(name) or 0
        if value < 0:
            raise Rejected(f"{name} must be a non-negative integer")
        if value >= cfg.max_model_len:
            raise Rejected(f"{name} ({value}) must be less than max_model_len ({cfg.max_model_len}).")
        out.append(value)
    return out[0], out[1]


def truncate_items(items: list, token_lists: list, limit: int) -> list:
    """A text item's first ``limit`` tokens (``_truncate_scoring_data``: only strings, through
    ``truncate_text_to_tokens``); content-part items and ``limit`` 0 as they are."""
    if limit <= 0:
        return token_lists
    return [t[:limit] if isinstance(x, str) else t for x, t in zip(items, token_lists)]


# ---- the engine ----------------------------------------------------------------------------------

def pooling_sequences(sim, rid: str, model: str, lora: str | None, token_lists: list) -> list:
    """One finished-output sequence per input (no tokens to generate, finish reason ``stop``),
    ready for ``Simulator.admit`` (the callers bound the inputs to :data:`MAX_INPUTS`; more than
    the seats and the queue hold are run in waves: ``blueprints.pooling.run_pooled``)."""
    req = GenerationRequest(request_id=rid, model=model, lora=lora, prompts=[Prompt(list(t)) for t in token_lists],
                            max_tokens=0, pooling=True)
    seqs = []
    for i, prompt in enumerate(req.prompts):
        seq = Sequence(req, i, i, prompt)
        seq.finish_reason = "stop"
        if sim.kv_cache is not None:
            seq.cached_tokens = sim.kv_cache.lookup(seq)
        seqs.append(seq)
    return seqs


# ---- outputs --------------------------------------------------------------------------------------

def pooled_output(kind: str, task: str, ids, size: int, use_activation):
    """What ``/pooling`` pools for ``task`` (the model's pooling task, ``--pooler-config``'s), as
    the float32 array vLLM's ``outputs.data`` is: the embedding (``embed``), one per token
    (``token_embed``: ``len(ids) x size``), the class probabilities (``classify``; logits with
    ``use_activation: false``) or one row of them per token (``token_classify``, token ``i``'s
    from the prefix ``ids[:i+1]``)."""
    import numpy as np
    if task == "embed":
        return np.asarray(pool.embedding_vector(ids, size, size), dtype=np.float32)
    if task == "token_embed":
        return np.asarray(pool.token_embeddings(ids, size, size), dtype=np.float32)
    n = num_labels(kind)

    def probs(logits):
        return pool.activate(logits) if use_activation is not False else logits
    if task == "classify":
        return np.asarray(probs(pool.classify_logits(ids, size, n)), dtype=np.float32)
    rows = pool.token_classify_logits(ids, size, n)
    return np.asarray([probs(r) for r in rows], dtype=np.float32).reshape(len(ids), n)


def classification(kind: str, ids, size: int, use_activation) -> dict:
    """One ClassificationData without its index: ``label`` (argmax), ``probs``, ``num_classes``."""
    logits = pool.classify_logits(ids, size, num_labels(kind))
    probs = pool.activate(logits) if use_activation is not False else logits
    best = max(range(len(probs)), key=probs.__getitem__)
    return {"label": labels(kind)[best], "probs": probs, "num_classes": len(probs)}


def pair_score(kind: str, q_ids, d_ids, size: int, use_activation) -> float:
    """The score of a pair: a bi-encoder's cosine, or a cross-encoder's (sigmoid) logit."""
    if kind == "embed":
        return pool.cosine(pool.embedding_vector(q_ids, size), pool.embedding_vector(d_ids, size))
    logit = pool.cross_encoder_logit(q_ids, d_ids, size)
    return pool.activate([logit])[0] if use_activation is not False else logit


def listing(prefix: str, rid: str, model: str, data: list, prompt_tokens: int) -> dict:
    """The common envelope: ``{"id", "object": "list", "created", "model", "data", "usage"}``."""
    return {"id": f"{prefix}-{rid}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": usage(prompt_tokens)}


def rerank_response(rid: str, model: str, docs: list, scores: list[float], top_n, prompt_tokens: int) -> dict:
    """vLLM's RerankResponse: results sorted by relevance (highest first; ties keep document
    order), the first ``top_n`` when 0 < top_n < len(documents)."""
    results = []
    for j, s in enumerate(scores):
        d = docs[j]
        document = {"text": d, "multi_modal": None} if isinstance(d, str) else \
            {"text": None, "multi_modal": d.get("content", [])}
        results.append({"index": j, "document": document, "relevance_score": s})
    results.sort(key=lambda r: r["relevance_score"], reverse=True)
    n = top_n if top_n and top_n > 0 else len(results)
    if n < len(docs):
        results = results[:n]
    return {"id": f"score-{rid}", "model": model, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            "results": results}


def cohere_embeddings(vectors: list, types: list[str]) -> dict:
    """Cohere's ``embeddings`` by type: ``float`` lists, ``binary`` / ``ubinary`` bit-packed
    (8 signs per byte, most significant first; binary is signed: byte - 128), ``base64`` of the
    little-endian float32 bytes.  Raises InvalidParam for a binary type when the size is not a
    multiple of 8.

    ``float`` holds Python floats, not the float32 arrays: vLLM 0.34 builds it with
    ``encode_pooling_output_float`` (``tensor.tolist()``, pooling/utils.py l. 69-72; embed/serving.py
    l. 182-185), so each float32 value is written as the double it widens to
    (``0.12345679104328156``), where ``/v1/embeddings`` hands orjson the ndarray (``0.12345679``)."""
    import numpy as np
    out = {}
    for t in types:
        if t == "float":
            out["float"] = [v.tolist() for v in vectors]
        elif t in ("binary", "ubinary"):
            if vectors and len(vectors[0]) % 8:
                raise Rejected(f"Embedding dimension must be a multiple of 8 for binary embedding types, but got "
                               f"{len(vectors[0])}.")          # _pack_binary_embeddings' ValueError
            packed = [np.packbits(v >= 0).astype(np.int64) for v in vectors]
            out[t] = [(p - 128 if t == "binary" else p).tolist() for p in packed]
        elif t == "base64":
            out["base64"] = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    return out
