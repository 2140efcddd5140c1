"""vLLM's checks on request fields a simulator otherwise has little use for (chat, completions,
generate): each raises InvalidParam naming the field, with vLLM's message where it has one,
before anything is admitted.  Also the fields that change the output (``min_tokens``,
``truncate_prompt_tokens``, ``return_tokens_as_token_ids``)."""
from __future__ import annotations

import math

from ..errors import InvalidParam

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
EMPTY_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty."


def vocab_size(sim) -> int:
    """The bound of ``stop_token_ids`` and ``logit_bias`` ids: the model's vocabulary size from
    its ``config.json`` when it was read (vLLM's ``model_config.get_vocab_size()``), else the
    tokenizer's (the simulated tokenizer's ids are 32-bit)."""
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


def check_seed(seed) -> None:
    """vLLM: ``seed`` within int64 (pydantic ``ge``/``le``).  The message is vLLM 0.34's
    validation handler's (``1 validation error:`` and pydantic's error, whose ``type``
    ``greater_than_equal`` / ``less_than_equal`` vLLM's ``test_long_seed`` reads)."""
    if seed is None:
        return
    if seed < INT64_MIN:
        kind, words, bound, key = "greater_than_equal", "greater than or equal to", INT64_MIN, "ge"
    elif seed > INT64_MAX:
        kind, words, bound, key = "less_than_equal", "less than or equal to", INT64_MAX, "le"
    else:
        return
    error = {"type": kind, "loc": "body.seed", "msg": f"Input should be {words} {bound}", "input": str(seed),
             "ctx": {key: bound}}
    raise InvalidParam(f"1 validation error:\n  {error}", "seed")


def _is_number(v) -> bool:
    """A JSON number, or a string pydantic's lax ``float`` reads as one."""
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        try:
            float(v)
            return True
        except ValueError:
            return False
    return False


def check_logit_bias(bias, vocab: int) -> None:
    """vLLM's ``logit_bias`` checks: keys are integer token ids (the strings ``int()`` reads),
    values numbers, ids within the vocabulary (vLLM's ``token_id(s) [...] in logit_bias contain
    out-of-vocab token ids. Vocabulary size: N``).  Each message names every offending key."""
    if not bias:
        return
    ids, not_int, not_num = [], [], []
    for k, v in bias.items():
        try:
            ids.append(int(k))
        except ValueError:
            not_int.append(k)
        if not _is_number(v):
            not_num.append(k)
    if not_int:
        raise InvalidParam(f"logit_bias keys must be integer token ids; not integers: {not_int}", "logit_bias")
    if not_num:
        raise InvalidParam(f"logit_bias values must be numbers; not numbers for token_id(s) {not_num}", "logit_bias")
    bad = [t for t in ids if t < 0 or t >= vocab]
    if bad:
        raise InvalidParam(f"token_id(s) {bad} in logit_bias contain out-of-vocab token ids. "
                           f"Vocabulary size: {vocab}", "logit_bias")


def check_stop_token_ids(ids, vocab: int) -> None:
    """``stop_token_ids``: every id in ``0 .. vocab-1`` (``min`` / ``max`` first: a body may
    hold 2 M ids; the message lists the first 10 bad ones)."""
    if not ids or (min(ids) >= 0 and max(ids) < vocab):
        return
    bad = [t for t in ids if t < 0 or t >= vocab][:10]
    if bad:
        raise InvalidParam(f"token_id(s) {bad} in stop_token_ids contain out-of-vocab token ids. "
                           f"Vocabulary size: {vocab}", "stop_token_ids")


def check_prompt_ids(prompts, vocab: int, field: str = "prompt") -> None:
    """vLLM's ``Token id N is out of vocabulary`` for pre-tokenized prompts (the largest id)."""
    top = max((max(p.ids) for p in prompts if p.ids), default=-1)
    if top >= vocab:
        raise InvalidParam(f"Token id {top} is out of vocabulary", field)


def check_cache_salt(salt) -> None:
    """vLLM: ``cache_salt``, when given, a non-empty string."""
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise InvalidParam("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")


MAX_LOGPROB_TOKEN_IDS = 128        # vLLM 0.34 sampling_params.py


def check_logprob_token_ids(ids, logprobs_on: bool) -> None:
    """``logprob_token_ids``: a non-empty list, and only with ``logprobs``; at most
    :data:`MAX_LOGPROB_TOKEN_IDS` (vLLM 0.34's ``SamplingParams._validate_logprobs``)."""
    if ids is None:
        return
    if not ids:
        raise InvalidParam("`logprob_token_ids` must be a non-empty list of token ids.", "logprob_token_ids")
    if not logprobs_on:
        raise InvalidParam("`logprob_token_ids` requires `logprobs`.", "logprob_token_ids")
    if len(ids) > MAX_LOGPROB_TOKEN_IDS:
        raise InvalidParam(f"Requested logprob_token_ids of length {len(ids)}, which is greater than max allowed: "
                           f"{MAX_LOGPROB_TOKEN_IDS}", "logprob_token_ids")


def check_vocab_ids(b, vocab: int) -> None:
    """vLLM 0.34's ``SamplingParams`` checks of ``logprob_token_ids`` and ``allowed_token_ids``
    against the vocabulary (``_validate_logprobs``, ``_validate_allowed_token_ids``)."""
    ids = b.logprob_token_ids
    if ids:
        bad = [t for t in ids if t < 0 or t >= vocab][:16]
        if bad:
            raise InvalidParam(f"token_id(s) {bad} in logprob_token_ids contain out-of-vocab token ids. "
                               f"Vocabulary size: {vocab}", "logprob_token_ids")
    allowed = getattr(b, "allowed_token_ids", None)
    if allowed is not None:
        if not allowed:
            raise InvalidParam("allowed_token_ids is not None and empty!", "allowed_token_ids")
        if any(t < 0 or t >= vocab for t in allowed):
            raise InvalidParam("allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids")


def scheduling_priority(sim, priority) -> int:
    """The request's ``priority`` (0 when absent); vLLM refuses a non-zero one unless the server
    runs ``--scheduling-policy priority`` (its engine client's check)."""
    if not priority:
        return 0
    if sim.config.scheduling_policy != "priority":
        raise InvalidParam(f"Got priority {priority} but Priority scheduling is not enabled.", "priority")
    return priority


def check_min_tokens(min_tokens, max_tokens) -> None:
    """vLLM's SamplingParams checks on ``min_tokens``."""
    if min_tokens is None:
        return
    if min_tokens < 0:
        raise InvalidParam(f"min_tokens must be greater than or equal to 0, got {min_tokens}.", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise InvalidParam(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
                           "min_tokens")


def check_sampling_ranges(b) -> None:
    """vLLM's ``SamplingParams._verify_args`` ranges on the sampling fields ``b`` has (an absent
    or null one keeps its default): presence and frequency penalties in [-2, 2], a finite
    repetition penalty over 0, a finite non-negative temperature, ``top_p`` in (0, 1], ``top_k``
    -1, 0 or more, ``min_p`` in [0, 1].  Raises InvalidParam naming the field, with vLLM's
    message.  (vLLM's newest code also refuses a temperature over 2, and ``n`` over 1 when greedy;
    releases before it did not, so the simulator does not: ``n`` greedy choices are the same
    answer.)"""
    def get(name):
        return getattr(b, name, None)
    for name in ("presence_penalty", "frequency_penalty"):
        v = get(name)
        if v is not None and not -2.0 <= v <= 2.0:
            raise InvalidParam(f"{name} must be in [-2, 2], got {v}.", name)
    v = get("repetition_penalty")
    if v is not None:
        if not math.isfinite(v):
            raise InvalidParam(f"repetition_penalty must be a finite number, got {v}.", "repetition_penalty")
        if v <= 0.0:
            raise InvalidParam(f"repetition_penalty must be greater than zero, got {v}.", "repetition_penalty")
    t = get("temperature")
    if t is not None:
        if not math.isfinite(t):
            raise InvalidParam(f"temperature must be a finite number, got {t}.", "temperature")
        if t < 0.0:
            raise InvalidParam(f"temperature must be non-negative, got {t}.", "temperature")
    v = get("top_p")
    if v is not None and not 0.0 < v <= 1.0:
        raise InvalidParam(f"top_p must be in (0, 1], got {v}.", "top_p")
    v = get("top_k")
    if v is not None and v < -1:
        raise InvalidParam(f"top_k must be 0 (disable), or at least 1, got {v}.", "top_k")
    v = get("min_p")
    if v is not None and not 0.0 <= v <= 1.0:
        raise InvalidParam(f"min_p must be in [0, 1], got {v}.", "min_p")


def check_openai_fields(sim, b, logprobs_on: bool, max_tokens) -> None:
    """Every check above on a chat or completions request ``b``."""
    check_sampling_ranges(b)
    check_seed(b.seed)
    check_cache_salt(b.cache_salt)
    check_logprob_token_ids(b.logprob_token_ids, logprobs_on)
    check_min_tokens(b.min_tokens, max_tokens)
    if b.logprob_token_ids or getattr(b, "allowed_token_ids", None) is not None:
        check_vocab_ids(b, vocab_size(sim))
    if b.logit_bias or b.stop_token_ids:
        vocab = vocab_size(sim)
        check_logit_bias(b.logit_bias, vocab)
        check_stop_token_ids(b.stop_token_ids, vocab)
    if b.truncation_side is not None and b.truncation_side not in ("left", "right"):
        raise InvalidParam("truncation_side: Input should be 'left' or 'right'", "truncation_side")
    t = b.truncate_prompt_tokens
    if t is not None:
        limit = sim.config.max_model_len
        if t < -1:
            raise InvalidParam(f"truncate_prompt_tokens: Input should be greater than or equal to -1", "truncate_prompt_tokens")
        if t > limit:
            raise InvalidParam(f"truncate_prompt_tokens value ({t}) is greater than max_model_len ({limit}). "
                               f"Please, select a smaller truncation size.", "truncate_prompt_tokens")


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
