"""vLLM 0.34's generative scoring (``POST /generative_scoring``) on the simulator's engine.

Source: ``vllm/entrypoints/generate/generative_scoring/serving.py``
(``ServingGenerativeScoring.create_generative_scoring``, ``_build_prompts``,
``_compute_probabilities``) and ``vllm/entrypoints/generate/label_reads.py``
(``next_token_label_reads``).  For each item vLLM builds one prompt, ``query + item`` (or
``item + query`` with ``item_first``; a text query tokenized with ``add_special_tokens``, a text
item without special tokens), cut to its first ``max_model_len - 1`` tokens, and runs it as its
own engine request (``{id}-{i}``) with ``SamplingParams(max_tokens=1, logprobs=len(labels),
logprob_token_ids=labels)``: a prefill and one output token.  The item's score is the
probability of the first label id: ``exp(logprob)``, or with ``apply_softmax`` (the default)
the softmax of the label ids' logprobs over those ids alone (each id counted once).

Here each item is one :class:`~generation.engine.request.Sequence` of one request (the engine
counts, queues and times each as vLLM's engine does a request: ``--max-num-seqs``, the waiting
queue, the prefill and one token, the KV cache, ``/metrics``); its one output token is the
label with the highest logprob.  The logprobs are the synthetic ones of
:mod:`generation.content.label_logprobs`, a function of the (prompt, label id) pair.

Checks, in vLLM's order (each a 4xx in vLLM's envelope; the request's types are checked first,
by :mod:`schemas.generative_scoring`): the model (404); the sequences the server could ever
hold (429, ``check_admission``'s place); a tokenizer (``--tokens-only``); each label id in the
vocabulary, then at least one label id and one item; the simulator's work bound; the prompts
built; then what the engine checks per request: ``logprobs`` against ``--max-logprobs``, at
most 128 ``logprob_token_ids``, the scheduling priority, and each prompt non-empty with its ids
in the vocabulary.  Everything here is free of Flask; the route is
:mod:`blueprints.generative_scoring`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import repeat

from generation.content.label_logprobs import label_logprobs
from generation.engine.request import GenerationRequest, Prompt, Sequence
from generation.lanes import paced
from generation.tokenization.tokenizer import each_text

from ..errors import InvalidParam
from .base import check_logprobs_cap, check_size, check_work
from .fields import check_logprob_token_ids, prompt_vocab_size, scheduling_priority, vocab_size

ID_PREFIX = "generative-scoring-"      # vLLM: request_id = f"generative-scoring-{base_id}"
ID_SLICE = 65536                       # ids per C-loop call when a list is searched for a bad id


@dataclass
class GenerativeScoringRequest:
    """vLLM 0.34's ``GenerativeScoringRequest`` as :mod:`schemas.generative_scoring` loads it
    (pydantic's types and defaults).  ``query`` and ``items`` are tagged with their form:
    ``("text", str)`` or ``("ids", [int, ...])``; ``("text", [str, ...])`` or ``("ids", [[int,
    ...], ...])``."""
    query: tuple
    items: tuple
    label_token_ids: list
    model: str | None = None
    apply_softmax: bool = True
    item_first: bool = False
    add_special_tokens: bool = True
    cache_salt: str | None = None
    priority: int = 0
    request_id: str | None = None      # vLLM's default is a fresh uuid: the route draws one


# ---- checks --------------------------------------------------------------------------------------

def first_out_of_range(ids: list, lo: int, hi: int):
    """The first id of ``ids`` outside ``lo .. hi - 1``, or None: ``min`` / ``max`` over slices
    of :data:`ID_SLICE` (C loops), a Python scan only of the first slice that holds one."""
    for start in range(0, len(ids), ID_SLICE):
        part = ids[start:start + ID_SLICE]
        if min(part) < lo or max(part) >= hi:
            return next(t for t in part if t < lo or t >= hi)
    return None


def check_labels(sim, b: GenerativeScoringRequest) -> None:
    """``create_generative_scoring``'s own checks, in its order: every label id within the
    model's vocabulary (the first one outside it named), at least one label id, at least one
    item.  Raises InvalidParam (vLLM's ``create_error_response(str)``: 400, no ``param``)."""
    vocab = vocab_size(sim)
    bad = first_out_of_range(b.label_token_ids, 0, vocab)
    if bad is not None:
        raise InvalidParam(f"label_token_id {bad} is out of vocabulary range [0, {vocab}). "
                           f"Please provide valid token IDs.")
    if not b.label_token_ids:
        raise InvalidParam("label_token_ids must contain at least one token ID.")
    if not b.items[1]:
        raise InvalidParam("items must contain at least one item.")


def tokenize(sim, b: GenerativeScoringRequest) -> tuple[list, list]:
    """``(query ids, [item ids, ...])``: texts tokenized as ``_build_prompts`` does (the query
    with the request's ``add_special_tokens``, items without special tokens; several texts that
    add up past the tokenizer's threshold in its worker thread), ids taken as they are.  No
    length bound: vLLM cuts each prompt to the context instead (the body limit bounds the text)."""
    kind, query = b.query
    if kind == "text":
        add_special = b.add_special_tokens
        query = each_text(lambda t: sim.tokenizer.encode_prompt(t, add_special)[0], [query])[0]
    kind, items = b.items
    if kind == "text":
        items = each_text(lambda t: sim.tokenizer.encode_prompt(t, False)[0], items)
    return query, items


def prompt_lengths(query: list, items: list, max_model_len: int) -> list[int]:
    """Each item's prompt length once cut to ``max_model_len - 1`` tokens (room for the one
    output token), before any prompt is built."""
    room = max(max_model_len - 1, 0)
    q = len(query)
    return [min(q + len(it), room) for it in items]


def build_prompts(query: list, items: list, item_first: bool, max_model_len: int) -> list[list]:
    """``_build_prompts``: ``query + item`` (``item + query`` with ``item_first``) per item, its
    first ``max_model_len - 1`` tokens kept."""
    room = max(max_model_len - 1, 0)
    if item_first:
        return [it[:room] + query[:room - min(len(it), room)] for it in paced(items)]
    head = query[:room]            # cut before joining: a long query is not copied whole per item
    return [head + it[:room - len(head)] for it in paced(items)]


def check_engine_input(sim, labels: list, priority: int, prompts: list) -> int:
    """What vLLM's engine checks on each item's request (``InputProcessor.process_inputs``: the
    params, then the prompt), in its order: ``logprobs=len(labels)`` against ``--max-logprobs``
    and at most 128 ``logprob_token_ids`` (``SamplingParams._validate_logprobs``), the priority
    (the simulator's scheduling check), then per prompt in item order a non-empty prompt
    (``_validate_prompt_len``) and ids within the vocabulary (``BaseRenderer.validate_token_ids``:
    the smallest negative one, else the largest one past it).  Returns the priority."""
    check_logprobs_cap(sim, len(labels), "logprobs")
    check_logprob_token_ids(labels, True)
    priority = scheduling_priority(sim, priority)
    top = prompt_vocab_size(sim)
    for ids in paced(prompts):
        if not ids:
            raise InvalidParam("The decoder prompt cannot be empty")
        if first_out_of_range(ids, 0, top) is not None:
            low = min(ids)
            raise InvalidParam(f"Token id {low if low < 0 else max(ids)} is out of vocabulary")
    return priority


def work(lengths: list[int], labels: list) -> tuple[int, str, str]:
    """``(units, formula, param)`` for ``check_work``: each item a choice of one output token
    with ``len(labels)`` logprobs (``items x (1 + label_token_ids)``), plus the prompt tokens the
    items' prompts hold (the query is copied into every one of them)."""
    n = len(lengths)
    return sum(lengths) + n * (1 + len(labels)), "items' prompt tokens + items x (1 + label_token_ids)", "items"


# ---- the engine ------------------------------------------------------------------------------------

def scoring_sequences(sim, rid: str, model: str, lora: str | None, prompts: list, b: GenerativeScoringRequest):
    """:func:`label_read_sequences` of the items' prompts, each read for every label id."""
    labels = b.label_token_ids
    req = GenerationRequest(request_id=rid, model=model, lora=lora, prompts=[Prompt(p) for p in prompts],
                            max_tokens=1, priority=b.priority, cache_salt=b.cache_salt, logprob_token_ids=labels)
    return label_read_sequences(sim, req, repeat(labels))


def label_read_sequences(sim, req: GenerationRequest, label_sets) -> tuple[list, list]:
    """vLLM's label reads (``label_reads.next_token_label_reads``): one sequence per prompt of
    ``req`` (a generation request, ``max_tokens=1``, ``n=1``: vLLM's ``request_params_*``
    histograms observe each read), its one output token decided (of the prompt's label ids,
    ``label_sets[i]``, the one with the highest logprob; finish reason ``length``), and each
    prompt's label logprobs (:func:`~generation.content.label_logprobs.label_logprobs`):
    ``(seqs, logprobs)``."""
    seqs, logprobs = [], []
    for i, (prompt, labels) in enumerate(zip(paced(req.prompts), label_sets)):
        lps = label_logprobs(prompt.ids, labels)
        seq = Sequence(req, i, i, prompt)
        best = max(range(len(labels)), key=lps.__getitem__)
        seq.ids, seq.pieces = [labels[best]], [""]        # vLLM's scoring never detokenizes it
        seq.completion_tokens = 1
        seq.finish_reason = "length"
        if sim.kv_cache is not None:
            seq.cached_tokens = sim.kv_cache.lookup(seq)
        seqs.append(seq)
        logprobs.append(lps)
    return seqs, logprobs


# ---- outputs ---------------------------------------------------------------------------------------

def label_probabilities(labels: list, logprobs: list[float], apply_softmax: bool) -> dict:
    """``_compute_probabilities`` of ``dict(zip(labels, logprobs))`` (a repeated id counted once):
    the softmax over those ids (max subtracted, then normalised) with ``apply_softmax``, else
    ``exp`` of each logprob.  ``{label id: probability}``."""
    by_id = dict(zip(labels, logprobs))
    if not apply_softmax:
        return {t: math.exp(v) for t, v in by_id.items()}
    top = max(by_id.values())
    exps = {t: math.exp(v - top) for t, v in by_id.items()}
    total = sum(exps.values())
    return {t: e / total for t, e in exps.items()}


def response(rid: str, model: str, b: GenerativeScoringRequest, seqs, logprobs: list) -> dict:
    """vLLM's ``GenerativeScoringResponse.model_dump()``: ``{"id": "generative-scoring-<id>",
    "object": "list", "created", "model", "data": [{"index", "object": "score", "score"}],
    "usage"}``; ``score`` is the first label id's probability.  Usage (``UsageInfo``) sums every
    item's prompt (the query counted once per item) and its one output token; its null
    ``prompt_tokens_details`` is left out, ``completion_tokens_details`` is null."""
    first = b.label_token_ids[0]
    data = [{"index": i, "object": "score",
             "score": label_probabilities(b.label_token_ids, lps, b.apply_softmax)[first]}
            for i, lps in enumerate(paced(logprobs))]
    prompt_tokens = sum(s.prompt_len for s in seqs)
    completion_tokens = sum(s.completion_tokens for s in seqs)
    return {"id": f"{ID_PREFIX}{rid}", "object": "list", "created": int(time.time()), "model": model, "data": data,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                      "completion_tokens": completion_tokens, "completion_tokens_details": None}}


def prepare(sim, b: GenerativeScoringRequest, rid: str):
    """Every check and the sequences of a loaded request, before anything is admitted:
    ``(model, seqs, logprobs)``.  Raises the domain errors (see the module docstring)."""
    cfg = sim.config
    model, lora = sim.resolve_model(b.model)
    check_size(sim, len(b.items[1]), False)           # vLLM's check_admission(len(items)) comes here
    if cfg.tokens_only:                                # vLLM: the renderer has no tokenizer
        raise InvalidParam("Tokenizer not available. Cannot process generative scoring request.")
    check_labels(sim, b)
    query, items = tokenize(sim, b)
    lengths = prompt_lengths(query, items, cfg.max_model_len)
    check_work(sim, *work(lengths, b.label_token_ids))
    prompts = build_prompts(query, items, b.item_first, cfg.max_model_len)
    b.priority = check_engine_input(sim, b.label_token_ids, b.priority, prompts)
    seqs, logprobs = scoring_sequences(sim, rid, model, lora, prompts, b)
    return model, seqs, logprobs
