"""vLLM's checks on request fields a simulator otherwise has little use for (chat, completions,
generate): each raises InvalidParam naming the field, with vLLM's message where it has one,
before anything is admitted.  Also the fields that change the output (``min_tokens``,
``truncate_prompt_tokens``, ``return_tokens_as_token_ids``)."""
from __future__ import annotations

import json
import math
import numbers
import os
from types import SimpleNamespace

from generation.tokenization.tokenizer import each_text

from ..errors import InvalidParam, Rejected
from ..lanes import paced
from ..structured.numeric import is_int, is_num
from .base import MAX_N, check_limits
from .extra_args import check_extra_args
from .validation import (MAX_REPORTED_ERRORS, Errors, Mismatch, pydantic_error, read_bool, read_float, read_int,
                         validation_errors)

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
# The request field ``stream_interval`` (chat, completions; generate's SamplingParams) came with
# vllm-project/vllm#49754 (merged 2026-07-24, after 0.25.1): the 0.24.0 and 0.26.0 sdists'
# chat_completion/protocol.py and sampling_params.py lack it, 0.27.0's have it.  The server flag
# --stream-interval is older (every sdist read, 0.17.0 on).
STREAM_INTERVAL_FIELD_FROM = (0, 27, 0)
EMPTY_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty."
NO_PROMPTS = "You must pass at least one prompt"     # vLLM 0.34 renderers/base.py:558, 581 (parameter="prompt")


def vocab_size(sim) -> int:
    """The bound of ``stop_token_ids`` and ``logit_bias`` ids: the model's vocabulary size from
    its ``config.json`` when it was read (vLLM's ``model_config.get_vocab_size()``), else the
    tokenizer's.  The simulated tokenizer's ids are 32-bit hashes, past any model's vocabulary:
    with it the bound stays its own, else ``HF_HUB_OFFLINE=1 python app.py Qwen/Qwen3-8B`` (the
    shipped config's 151,936) refused as out-of-vocab the ids its answers carry (``token_ids``)."""
    if getattr(sim.tokenizer, "name", None) == "simulated":
        return sim.tokenizer.vocab_size
    return getattr(sim.config, "model_vocab_size", None) or sim.tokenizer.vocab_size


def prompt_vocab_size(sim) -> int:
    """The bound of pre-tokenized prompt ids: the larger of the tokenizer's and the model's
    vocabulary (vLLM's ``validate_token_ids``)."""
    return max(sim.tokenizer.vocab_size, getattr(sim.config, "model_vocab_size", None) or 0)


def tokens_as_ids(sim, b) -> bool:
    """vLLM's ``return_tokens_as_token_ids``: the request's field when it gives one (``false``
    turns the server flag off: vLLM 0.34's tri-state ``return_as_token_id``), else the flag."""
    if b.return_tokens_as_token_ids is not None:
        return bool(b.return_tokens_as_token_ids)
    return bool(sim.config.return_tokens_as_token_ids)


def check_bounds(name: str, value, ge=None, le=None) -> None:
    """pydantic's ``Field(ge=..., le=...)`` on an integer field of vLLM's request models
    (``greater_than_equal`` / ``less_than_equal``, whose ``type`` vLLM's ``test_long_seed``
    reads).  None: not given."""
    if value is None:
        return
    if ge is not None and value < ge:
        raise pydantic_error(name, value, ("greater_than_equal", f"Input should be greater than or equal to {ge}",
                                           {"ge": ge}))
    if le is not None and value > le:
        raise pydantic_error(name, value, ("less_than_equal", f"Input should be less than or equal to {le}",
                                           {"le": le}))


def request_stream_interval(sim, value, param: str = "stream_interval", api: str = "openai") -> int | None:
    """A request's own ``stream_interval`` (tokens per streamed output, at least 1), None when
    absent or null, and None whatever it is under a ``--vllm-version`` before the field
    (:data:`STREAM_INTERVAL_FIELD_FROM`: vLLM's request models ignored the unknown key, as the
    schemas ignore one).  Read as pydantic reads vLLM's ``int`` (``"4"`` and ``4.0`` are 4),
    refused in its validation handler's words at ``param``; below 1, chat and completions
    (``api`` ``openai``) refuse with their ``Field(ge=1)``, the generate route's
    ``SamplingParams`` (``api`` ``sampling``) with its ``_verify_args`` message
    (``vllm/sampling_params.py``).  Raises InvalidParam."""
    if value is None or sim.config.vllm_release < STREAM_INTERVAL_FIELD_FROM:
        return None
    try:
        n = read_int(value)
    except Mismatch as e:
        raise pydantic_error(param, value, e.error) from None
    if n < 1:
        if api == "sampling":
            raise Rejected(f"stream_interval must be at least 1, got {n}.", "stream_interval", n)
        raise pydantic_error(param, value, ("greater_than_equal", "Input should be greater than or equal to 1",
                                            {"ge": 1}))
    return n


def check_seed(seed) -> None:
    """vLLM: ``seed`` within int64 (pydantic ``ge``/``le``, :func:`check_bounds`)."""
    check_bounds("seed", seed, INT64_MIN, INT64_MAX)


_NUMBERS = frozenset((int, float))


def check_logit_bias(bias, vocab: int) -> None:
    """vLLM 0.34's ``logit_bias`` checks, in its order: the values are numbers as pydantic reads
    ``dict[str, float]`` (every value that is not one is an error at ``logit_bias.<key>``), the
    keys integer token ids (``SamplingParams.from_optional``: ``int(key)``, ``logit_bias
    contains key(s) that cannot be converted to integer token IDs: [...]``), the ids within the
    vocabulary (``_validate_logit_bias``: ``token_id(s) [...] in logit_bias contain out-of-vocab
    token ids. Vocabulary size: N``)."""
    if not bias:
        return
    if not set(map(type, bias.values())) <= _NUMBERS:       # a C loop: 250,000 floats in ~5 ms
        not_num = Errors()
        for k, v in paced(bias.items()):       # ~2 us a value: 4 MiB held the hub 0.6 s
            try:
                read_float(v)
            except Mismatch as e:
                not_num.add(f"logit_bias.{k}", v, *e.error)
        if not_num.count:
            raise validation_errors(not_num.kept, total=not_num.count)
    ids, not_int = [], []
    for k in bias:
        try:
            ids.append(int(k))
        except ValueError:
            not_int.append(k)
    if not_int:
        raise Rejected(f"logit_bias contains key(s) that cannot be converted to integer token IDs: {not_int!r}",
                       "logit_bias", not_int)
    bad = [t for t in ids if t < 0 or t >= vocab]
    if bad:
        raise Rejected(f"token_id(s) {bad} in logit_bias contain out-of-vocab token ids. "
                       f"Vocabulary size: {vocab}", "logit_bias", bad)


def check_stop_token_ids(ids, vocab: int) -> None:
    """``stop_token_ids``: every id in ``0 .. vocab-1`` (``min`` / ``max`` first: a body may
    hold 2 M ids; the message lists the first 10 bad ones)."""
    if not ids or (min(ids) >= 0 and max(ids) < vocab):
        return
    bad = [t for t in ids if t < 0 or t >= vocab][:10]
    if bad:
        raise Rejected(f"token_id(s) {bad} in stop_token_ids contain out-of-vocab token ids. "
                       f"Vocabulary size: {vocab}", "stop_token_ids", bad)


def check_prompt_ids(prompts, vocab: int, field: str | None = None) -> None:
    """vLLM's ``Token id N is out of vocabulary`` for pre-tokenized prompts (the largest id):
    ``BaseRenderer.validate_token_ids``, whose ``parameter`` is None but where a caller names
    one (``kv_transfer_params.prompt_token_ids``)."""
    top = max((max(p.ids) for p in prompts if p.ids), default=-1)
    if top >= vocab:
        raise Rejected(f"Token id {top} is out of vocabulary", field)


MAX_CACHE_SALT = 128                      # vLLM 0.34 generate/base/protocol.py
CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")


def check_cache_salt(salt) -> None:
    """vLLM 0.34's ``validate_cache_salt``: ``cache_salt``, when given, a non-empty string of at
    most :data:`MAX_CACHE_SALT` characters without ``@``, ``/``, ``\\`` or NUL (it becomes part
    of cache keys and connector paths downstream)."""
    if salt is None:
        return
    if not isinstance(salt, str) or not salt:
        raise Rejected("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
    if len(salt) > MAX_CACHE_SALT or not CACHE_SALT_FORBIDDEN.isdisjoint(salt):
        raise Rejected("Parameter 'cache_salt' must be at most 128 characters and must not contain "
                       "'@', '/', '\\\\', or NUL.", "cache_salt")


MAX_LOGPROB_TOKEN_IDS = 128        # vLLM 0.34 sampling_params.py


def check_logprob_number(value, field: str) -> None:
    """vLLM 0.34's ``check_logprobs`` (a request validator, on the raw body, before pydantic
    reads the field): a logprobs count (``logprobs``, ``top_logprobs``, ``prompt_logprobs``)
    given and not a JSON number is refused in its own words, with the value
    (``"`top_logprobs` must be an integer."``).  A boolean passes (vLLM's ``isinstance(value,
    (int, float))``: a bool is an int), and pydantic's lax ``int`` reads it as 0 or 1."""
    if value is not None and not isinstance(value, numbers.Number):
        raise Rejected(f"`{field}` must be an integer.", field, value)


def check_beam_logprob_ids(ids, beam) -> None:
    """vLLM 0.34's ``check_logprobs`` (chat and completions): no ``logprob_token_ids`` with beam
    search (both judged by truthiness)."""
    if ids and beam:
        raise Rejected("`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")


def check_prompts_given(n: int) -> None:
    """vLLM 0.34's ``BaseRenderer.render_prompts_async`` (``renderers/base.py:580-583``): a
    ``prompt: []`` passes pydantic and the request validators and is refused when rendered,
    after the model check and before any ``SamplingParams`` check."""
    if n == 0:
        raise Rejected(NO_PROMPTS, "prompt")


def check_prompt_count(n: int) -> None:
    """vLLM 0.34's completions ``validate_prompt_list_length``: at most
    :data:`MAX_COMPLETION_PROMPTS` prompts (``n``: texts or token-id lists; a flat id list is
    one)."""
    if n > MAX_COMPLETION_PROMPTS:
        raise Rejected(f"prompt list length {n} exceeds the maximum allowed count of {MAX_COMPLETION_PROMPTS}. "
                       "To increase this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.", "prompt")


def check_logprob_token_ids(ids, logprobs_on: bool, api: str = "chat") -> None:
    """``logprob_token_ids``, as vLLM 0.34's request validators (``check_logprobs``) and
    ``SamplingParams._validate_logprobs`` check it: an empty list is no list (``[]`` is
    falsy there), a non-empty one needs ``logprobs`` (chat: ``true``; ``api`` ``completion``:
    given) and holds at most :data:`MAX_LOGPROB_TOKEN_IDS` ids."""
    if not ids:
        return
    if not logprobs_on:
        need = "must be set to true." if api == "chat" else "must be set."
        raise Rejected(f"when using `logprob_token_ids`, `logprobs` {need}", "logprob_token_ids")
    if len(ids) > MAX_LOGPROB_TOKEN_IDS:
        raise Rejected(f"Requested logprob_token_ids of length {len(ids)}, which is greater than max allowed: "
                       f"{MAX_LOGPROB_TOKEN_IDS}", "logprob_token_ids", len(ids))


def check_vocab_ids(b, vocab: int) -> None:
    """vLLM 0.34's ``SamplingParams`` checks of ``logprob_token_ids`` and ``allowed_token_ids``
    against the vocabulary (``_validate_logprobs``, ``_validate_allowed_token_ids``)."""
    ids = b.logprob_token_ids
    if ids:
        bad = [t for t in ids if t < 0 or t >= vocab][:16]
        if bad:
            raise Rejected(f"token_id(s) {bad} in logprob_token_ids contain out-of-vocab token ids. "
                           f"Vocabulary size: {vocab}", "logprob_token_ids", bad)
    allowed = getattr(b, "allowed_token_ids", None)
    if allowed is not None:
        if not allowed:
            raise Rejected("allowed_token_ids is not None and empty!", "allowed_token_ids", allowed)
        if any(t < 0 or t >= vocab for t in allowed):
            bad = [t for t in allowed if t < 0 or t >= vocab][:16]
            raise Rejected("allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids", bad)


def scheduling_priority(sim, priority) -> int:
    """The request's ``priority`` under ``--scheduling-policy priority``, else 0: vLLM 0.34 takes
    any (int64) priority and its FCFS queue ignores it (v1/core/sched/request_queue.py); the
    older engine's "Got priority N but Priority scheduling is not enabled." is gone from it."""
    if not priority or sim.config.scheduling_policy != "priority":
        return 0
    return priority


def check_min_tokens(min_tokens, max_tokens) -> None:
    """vLLM's SamplingParams checks on ``min_tokens``."""
    if min_tokens is None:
        return
    if min_tokens < 0:
        raise Rejected(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if max_tokens is not None and min_tokens > max_tokens:
        raise Rejected(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")


def check_sampling_ranges(b) -> None:
    """vLLM's ``SamplingParams._verify_args`` ranges on the sampling fields ``b`` has (an absent
    or null one keeps its default): presence and frequency penalties in [-2, 2], a finite
    repetition penalty over 0, a finite non-negative temperature, ``top_p`` in (0, 1], ``top_k``
    -1, 0 or more, ``min_p`` in [0, 1], and (vLLM 0.34) a temperature of at most 2.  Raises
    InvalidParam naming the field, with vLLM's message.  (``n`` over 1 with greedy sampling:
    :func:`check_greedy`.)"""
    def get(name):
        return getattr(b, name, None)
    for name in ("presence_penalty", "frequency_penalty"):
        v = get(name)
        if v is not None and not -2.0 <= v <= 2.0:
            raise Rejected(f"{name} must be in [-2, 2], got {v}.")
    v = get("repetition_penalty")
    if v is not None:
        if not math.isfinite(v):
            raise Rejected(f"repetition_penalty must be a finite number, got {v}.")
        if v <= 0.0:
            raise Rejected(f"repetition_penalty must be greater than zero, got {v}.")
    t = get("temperature")
    if t is not None:
        if not math.isfinite(t):
            raise Rejected(f"temperature must be a finite number, got {t}.", "temperature", t)
        if t < 0.0:
            raise Rejected(f"temperature must be non-negative, got {t}.", "temperature", t)
        if t > 2.0:
            raise Rejected(f"temperature must be in [0, 2], got {t}.", "temperature", t)
    v = get("top_p")
    if v is not None and not 0.0 < v <= 1.0:
        raise Rejected(f"top_p must be in (0, 1], got {v}.", "top_p", v)
    v = get("top_k")
    if v is not None and v < -1:
        raise Rejected(f"top_k must be 0 (disable), or at least 1, got {v}.")
    v = get("min_p")
    if v is not None and not 0.0 <= v <= 1.0:
        raise Rejected(f"min_p must be in [0, 1], got {v}.")


# SamplingParams fields checked by _verify_args that a chat render's sampling params take from the body
_RANGED = ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k", "min_p")


def check_render_sampling(raw: dict, max_tokens, stop=None, n=1) -> None:
    """vLLM 0.34's renders (``scale_out/render/serving.py``: ``render_chat_request``, behind it
    ``render_messages_request``, ``render_completion_request``, ``render_responses_request``)
    build the ``SamplingParams`` they answer (``request.to_sampling_params``), whose
    ``__post_init__`` raises the ``VLLMValidationError`` the generating routes answer (a 400), in
    ``_verify_args``' order: ``n`` from 1 to ``VLLM_MAX_N_SEQUENCES`` (``_verify_num_sequences``;
    None is 1), the body's ranges (:func:`check_sampling_ranges`), ``max_tokens`` (the
    render's: ``get_max_tokens`` caps the request's to the room the context leaves) at least 1,
    ``min_tokens`` at least 0 and at most that ``max_tokens`` (:func:`check_min_tokens`), no empty
    ``stop`` string (the request's ``stop`` as the render reads it: a list, or None), then
    ``_verify_greedy_sampling`` (``n`` over 1 at a temperature below 1e-5).  After the model
    check, the render and the context check, as there.  Only values of the right type are
    judged (a render's body is read laxly: another type is copied nowhere)."""
    if is_int(n) and not 1 <= n <= MAX_N:
        check_limits(None, False, n)
    # the float fields as pydantic reads them (``temperature: 3`` is 3.0 in the message)
    check_sampling_ranges(SimpleNamespace(**{k: (raw[k] if is_int(raw.get(k)) else None) if k == "top_k"
                                             else (float(raw[k]) if is_num(raw.get(k)) else None) for k in _RANGED}))
    if is_int(max_tokens) and max_tokens < 1:
        raise Rejected(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
    min_tokens = raw.get("min_tokens")
    if is_int(min_tokens):
        check_min_tokens(min_tokens, max_tokens if is_int(max_tokens) else None)
    if isinstance(stop, list) and "" in stop:
        raise Rejected("stop cannot contain an empty string.")
    t = raw.get("temperature")
    if is_int(n) and n > 1 and is_num(t) and t < SAMPLING_EPS:
        raise Rejected(f"n must be 1 when using greedy sampling, got {n}.")


def check_render_beam_search(raw: dict) -> None:
    """vLLM 0.34's ``render_chat_request`` / ``render_completion_request`` refuse
    ``use_beam_search`` after the model check, before rendering: ``create_error_response("Beam
    search is not supported by the render endpoint")``, a 400 ``BadRequestError`` without
    ``param`` (the value read as pydantic reads a ``bool``; another is no beam search here)."""
    try:
        on = raw.get("use_beam_search") is not None and read_bool(raw["use_beam_search"])
    except Mismatch:
        on = False
    if on:
        raise Rejected("Beam search is not supported by the render endpoint")


def render_stop(value) -> list | None:
    """A render body's ``stop`` as ``SamplingParams`` gets it: a string is a one-string list
    (``"stop": ""`` is ``[""]``, refused), a list as it is, anything else none (read laxly)."""
    if isinstance(value, str):
        return [value]
    return value if isinstance(value, list) else None


MAX_STOP_STRINGS = int(os.environ.get("VLLM_MAX_STOP_STRINGS", "4"))        # vLLM 0.34 envs.py
MAX_COMPLETION_PROMPTS = int(os.environ.get("VLLM_MAX_COMPLETION_PROMPTS", "1024"))
SAMPLING_EPS = 1e-5                 # vLLM: a temperature below it is greedy sampling


def check_stop(stop) -> None:
    """``stop`` (a list once loaded): at most ``VLLM_MAX_STOP_STRINGS`` strings (vLLM 0.34's
    ``StopParam``, ``Field(max_length=...)``: pydantic's two errors of the ``str | list[str]``
    union), none empty (``SamplingParams._verify_args``; ``"stop": ""`` is ``[""]`` there)."""
    if not stop:
        return
    if len(stop) > MAX_STOP_STRINGS:
        raise pydantic_error("stop", stop, ("string_type", "Input should be a valid string"),
                             ("too_long", f"List should have at most {MAX_STOP_STRINGS} items after validation, "
                                          f"not {len(stop)}",
                              {"field_type": "List", "max_length": MAX_STOP_STRINGS, "actual_length": len(stop)}))
    if not all(stop):
        raise Rejected("stop cannot contain an empty string.")


def check_bad_words(words, field: str = "bad_words") -> None:
    """``bad_words`` (vLLM 0.34: ``list[str]``): a list of strings (pydantic's errors, every
    item that is not one), none empty (the message prints the list without repeats, as
    ``SamplingParams.__post_init__`` leaves it).  ``field``: where the request keeps it
    (``sampling_params.bad_words`` in a generate request)."""
    if words is None:
        return
    if not isinstance(words, list):
        raise pydantic_error(field, words, ("list_type", "Input should be a valid list"))
    wrong = [i for i, w in enumerate(words) if not isinstance(w, str)]
    if wrong:                        # every bad item counted, the shown ones built
        raise validation_errors([(f"{field}.{i}", words[i], "string_type", "Input should be a valid string")
                                 for i in wrong[:MAX_REPORTED_ERRORS]], total=len(wrong))
    if not all(words):
        raise Rejected(f"bad_words cannot contain an empty string. Got bad_words={list(dict.fromkeys(words))!r}")


MAX_NUM_BAD_WORDS = int(os.environ.get("VLLM_MAX_NUM_BAD_WORDS", "128"))                  # vLLM 0.34 envs.py
MAX_BAD_WORDS_TOTAL_TOKENS = int(os.environ.get("VLLM_MAX_BAD_WORDS_TOTAL_TOKENS", "1024"))


def check_bad_words_tokens(tokenizer, words: list) -> None:
    """vLLM 0.34's ``SamplingParams.update_from_tokenizer``: each distinct word is tokenized
    without special tokens, as written (leading spaces stripped) and with one leading space;
    the first form always counts as a banned sequence (it must have a token: ``bad_words
    entries must tokenize to at least one token.``), the spaced one when it starts with another
    token and has as many; more than ``VLLM_MAX_NUM_BAD_WORDS`` (128) sequences is its 400.
    Then the logits processor's bound (``v1/worker/gpu/sample/bad_words.py``
    ``BadWordsState.add_request``): at most ``VLLM_MAX_BAD_WORDS_TOTAL_TOKENS`` (1024) tokens in
    all, which vLLM checks only on the engine (a ``ValueError`` there fails the engine): here
    the same words, as a 400.  Only the first 129 words can matter: each adds a sequence."""
    distinct = list(dict.fromkeys(words))[:MAX_NUM_BAD_WORDS + 1]
    texts = [form for w in distinct for form in (w.lstrip(), " " + w.lstrip())]
    encoded = each_text(tokenizer.encode, texts)       # in the tokenizer's thread past 8 KiB in all
    seqs: list = []
    for plain, spaced in zip(encoded[::2], encoded[1::2]):
        if not plain[0]:
            raise Rejected("bad_words entries must tokenize to at least one token.", "bad_words", list(dict.fromkeys(words)))
        for ids in (plain[0], spaced[0]):
            if ids is plain[0] or (ids and ids[0] != seqs[-1][0] and len(ids) == len(seqs[-1])):
                seqs.append(ids)
                if len(seqs) > MAX_NUM_BAD_WORDS:
                    raise Rejected(f"Too many bad words after tokenization: {len(seqs)}. The max number is "
                                   f"{MAX_NUM_BAD_WORDS}.", "bad_words", list(dict.fromkeys(words)))
    total = sum(map(len, seqs))
    if total > MAX_BAD_WORDS_TOTAL_TOKENS:
        raise InvalidParam(f"Too many total bad word tokens: {total}. The max is {MAX_BAD_WORDS_TOTAL_TOKENS}.",
                           "bad_words")


def check_mm_kwargs(sim, mm_processor_kwargs, media_io_kwargs) -> None:
    """vLLM 0.34's ``validate_request_mm_kwargs`` (``generate/base/protocol.py``, run by the
    renderer before a chat or completions prompt is built, and by the pooling routes): a
    non-empty per-request ``mm_processor_kwargs`` or ``media_io_kwargs`` is refused unless the
    server runs ``--trust-request-mm-kwargs``."""
    if sim.config.trust_request_mm_kwargs:
        return
    for name, value in (("mm_processor_kwargs", mm_processor_kwargs), ("media_io_kwargs", media_io_kwargs)):
        if value:
            raise Rejected(f"Per-request {name} are disabled by default because they can change multimodal "
                               f"{'preprocessing' if name == 'mm_processor_kwargs' else 'media loading'} resource "
                               f"usage. Start the server with --trust-request-mm-kwargs only when clients are "
                               f"trusted.", name)


def check_greedy(b, n: int) -> None:
    """vLLM 0.34's ``_verify_greedy_sampling``: greedy sampling (a temperature below 1e-5) with
    ``n`` over 1 is refused (beam search builds no SamplingParams, so it is exempt)."""
    t = getattr(b, "temperature", None)
    if t is not None and t < SAMPLING_EPS and n > 1 and not getattr(b, "use_beam_search", False):
        raise Rejected(f"n must be 1 when using greedy sampling, got {n}.")


def check_structured_count(so, tool_choice=None, api: str = "chat") -> None:
    """vLLM 0.34's ``check_structured_outputs_count`` (a request validator, before the
    ``StructuredOutputsParams`` checks): at most one of ``json``, ``regex``, ``choice``, and on
    chat none of them beside a named ``tool_choice`` (chat names no ``parameter``, completions
    ``structured_outputs``)."""
    if not isinstance(so, dict):
        return
    count = sum(so.get(k) is not None for k in ("json", "regex", "choice"))
    if count > 1:
        raise Rejected("You can only use one kind of constraints for structured outputs "
                       "('json', 'regex' or 'choice').", None if api == "chat" else "structured_outputs")
    if api == "chat" and count and tool_choice is not None and tool_choice not in ("none", "auto", "required"):
        raise Rejected("You can only either use constraints for structured outputs or tools, not both.")
    check_structural_tag_text(so.get("structural_tag"))


def check_structural_tag_text(tag) -> None:
    """vLLM 0.34's ``validate_structured_outputs_structural_tag`` (generate/base/protocol.py
    l. 245-290, the same request validator): a ``structural_tag`` string that is empty, not JSON
    or not a JSON object is no tag xgrammar compiles (``json.loads`` then
    ``Grammar.from_structural_tag``), its 400 naming ``structured_outputs``.  A JSON object is
    not checked further here (xgrammar's own checks are not made)."""
    if not isinstance(tag, str):
        return
    try:
        ok = bool(tag) and isinstance(json.loads(tag), dict)
    except ValueError:
        ok = False
    if not ok:
        raise Rejected("Invalid structured_outputs structural_tag specification.", "structured_outputs")


def check_response_format_schema(rf) -> None:
    """vLLM 0.34's ``validate_response_format``: ``type: json_schema`` needs ``json_schema``."""
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise Rejected("When response_format type is 'json_schema', the 'json_schema' field must be provided.",
                       "response_format")


def check_truncate_in_context(sim, truncate) -> None:
    """``truncate_prompt_tokens`` (one within pydantic's bounds) at most ``max_model_len``, in the
    words of vLLM 0.34's ``TokenizeParams.__post_init__`` (``renderers/params.py``), a
    ``VLLMValidationError`` naming the field.  Its other check there, an output limit past
    ``max_model_len``, is not made: the seeds cap ``max_tokens`` to the room the context leaves
    and never refuse it."""
    limit = sim.config.max_model_len
    if truncate is not None and limit < truncate <= INT64_MAX:
        raise Rejected(f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len = {limit}. "
                       f"Please request a smaller truncation size.", "truncate_prompt_tokens", truncate)


def check_openai_fields(sim, b, logprobs_on: bool, max_tokens, api: str = "chat") -> None:
    """Every check above on a chat or completions (``api`` ``completion``) request ``b``."""
    check_sampling_ranges(b)
    check_seed(b.seed)
    # pydantic's bounds (``Annotated[int, Field(ge=-1, le=_INT64_MAX)]``); the context's are
    # check_truncate_in_context's
    check_bounds("truncate_prompt_tokens", b.truncate_prompt_tokens, -1, INT64_MAX)
    check_bounds("priority", b.priority, INT64_MIN, INT64_MAX)
    check_bounds("routed_experts_prompt_start", b.routed_experts_prompt_start, 0)
    b.stream_interval = request_stream_interval(sim, b.stream_interval)
    check_cache_salt(b.cache_salt)
    check_stop(b.stop)
    check_bad_words(b.bad_words)
    if b.bad_words:
        check_bad_words_tokens(sim.tokenizer, b.bad_words)
    if b.mm_processor_kwargs or b.media_io_kwargs:
        check_mm_kwargs(sim, b.mm_processor_kwargs, b.media_io_kwargs)
    check_extra_args(b.vllm_xargs, b.kv_transfer_params, b.ec_transfer_params)
    check_logprob_token_ids(b.logprob_token_ids, logprobs_on, api)
    check_min_tokens(b.min_tokens, max_tokens)
    check_greedy(b, b.n or 1)
    if b.logprob_token_ids or getattr(b, "allowed_token_ids", None) is not None:
        check_vocab_ids(b, vocab_size(sim))
    if b.logit_bias or b.stop_token_ids:
        vocab = vocab_size(sim)
        check_logit_bias(b.logit_bias, vocab)
        check_stop_token_ids(b.stop_token_ids, vocab)


def truncate_prompts(tokenizer, prompts, k: int | None, side: str | None, max_model_len: int) -> None:
    """vLLM's ``truncate_prompt_tokens``: keep ``k`` tokens of each prompt (``-1``: the context
    window), the last ones (``truncation_side`` ``left``, the default) or the first (``right``).
    A truncated prompt loses its text: usage, ``echo`` and echo mode use the kept ids."""
    if k is None:
        return
    if k == -1:
        k = max_model_len
    for p in prompts:
        if len(p.ids) > k:
            p.ids = p.ids[:k] if side == "right" else p.ids[len(p.ids) - k:]
            p.text = None
            if p.echo_ids is not None:
                p.echo_ids, p.echo_pieces = list(p.ids), tokenizer.id_pieces(p.ids)


def forwarded_prompt_ids(kv: dict | None, messages) -> list | None:
    """vLLM 0.34's ``kv_transfer_params.prompt_token_ids``: a P/D proxy forwards the prefill's
    prompt ids, and the decode leg uses them verbatim instead of rendering ``messages`` (whose
    text then does not matter); ignored, as vLLM's ``drop_prompt_token_ids_with_media``, when a
    message has non-text content.  Returns the ids, or None.  Raises InvalidParam naming the
    field for anything but a list of non-negative integers."""
    ids = (kv or {}).get("prompt_token_ids")
    if ids is None:
        return None
    field = "kv_transfer_params.prompt_token_ids"
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise InvalidParam(f"{field}: must be a list of non-negative token ids", field)
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
        if isinstance(content, list) and any(
                (part.get("type") if isinstance(part, dict) else getattr(part, "type", "text")) not in ("text", None)
                for part in content):
            return None
    return list(ids)


# vLLM 0.34's chat content part types (renderers/chat_utils/chat_message.py: MM_PARSER_MAP's keys and
# PART_TYPES_TO_SKIP_NONE_CONTENT), sorted as its error lists them
CHAT_PART_TYPES = ("audio_embeds", "audio_url", "image_embeds", "image_pil", "image_url", "input_audio",
                   "input_image", "input_text", "output_text", "prompt_embeds", "refusal", "text", "thinking",
                   "tool_reference", "video_embeds", "video_url")
_CHAT_PART_TYPES = frozenset(CHAT_PART_TYPES)


def check_chat_part_types(messages) -> None:
    """vLLM 0.34's render of an OpenAI chat conversation (``parse_chat_message_content_part``,
    ``renderers/chat_utils/chat_message.py`` l. 443-556): a content part whose ``type`` is a
    string it does not know is refused, ``Unsupported chat content part type: 'file'. Supported
    types: ...`` (``parameter=type``, ``value`` the type), after the request's fields were
    validated (its pydantic models take any object as a part: ``CustomChatCompletionContent
    PILImageParam`` has no required key).  A part with a ``uuid`` takes vLLM's other branch
    (its type read from its keys) and passes here.  Raises Rejected."""
    if not isinstance(messages, list):
        return
    for m in paced(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict):
                t = part.get("type")
                if isinstance(t, str) and t not in _CHAT_PART_TYPES and part.get("uuid") is None:
                    raise Rejected(f"Unsupported chat content part type: {t!r}. Supported types: "
                                   f"{', '.join(CHAT_PART_TYPES)}.", "type", t)
