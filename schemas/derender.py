"""The request shapes of vLLM 0.34's derender routes (``/v1/chat/completions/derender``,
``/v1/completions/derender``), checked by hand so that nothing below fails on them: vLLM's
``GenerateTokensResponse`` (its choices, logprobs, token ids) and the fields of the original
completion request the derenderer reads.  Each raises InvalidParam (400) naming the field."""
from __future__ import annotations

from generation.errors import InvalidParam
from generation.structured.numeric import is_int

from .common import are_tokens


def bad_field(path: str, what: str) -> InvalidParam:
    return InvalidParam(f"{path}: {what}", path)


def check_token_list(v, path: str, nullable: bool = True) -> None:
    if v is None and nullable:
        return
    if not isinstance(v, list) or not are_tokens(v):
        raise bad_field(path, "Input should be a list of token ids (non-negative integers).")


def _check_logprobs(lps, path: str) -> None:
    """vLLM's ``GenerateLogProbs``: ``{"content": [{"token_id", "logprob", "rank"?, "top_logprobs"?}]}``
    (candidates ``{"token_id", "logprob", "rank"?}``)."""
    if lps is None:
        return
    if not isinstance(lps, dict):
        raise bad_field(path, "Input should be a valid dictionary (a GenerateLogProbs object).")
    content = lps.get("content")
    if content is None:
        return
    if not isinstance(content, list):
        raise bad_field(f"{path}.content", "Input should be a valid list.")
    for i, e in enumerate(content):
        where = f"{path}.content[{i}]"
        if not isinstance(e, dict):
            raise bad_field(where, "Input should be a valid dictionary.")
        tops = e.get("top_logprobs")
        if tops is not None and not isinstance(tops, list):
            raise bad_field(f"{where}.top_logprobs", "Input should be a valid list.")
        for j, cand in enumerate([e, *(tops or ())]):      # the sampled token, then its candidates
            at = where if j == 0 else f"{where}.top_logprobs[{j - 1}]"
            if not isinstance(cand, dict) or not is_int(cand.get("token_id")):
                raise bad_field(f"{at}.token_id", "Field required (an integer).")
            if isinstance(cand.get("logprob"), bool) or not isinstance(cand.get("logprob"), (int, float)):
                raise bad_field(f"{at}.logprob", "Field required (a number).")


def check_generate_response(gen, path: str) -> None:
    """The shape of one ``GenerateTokensResponse`` of a derender request, so that nothing below
    fails on it: ``choices`` (each with its ``index``, ``token_ids``, ``finish_reason``,
    ``stop_reason``, ``logprobs``), ``request_id``, ``usage``, ``prompt_token_ids``,
    ``prompt_logprobs``, ``kv_transfer_params`` and ``metrics``.  Raises InvalidParam naming
    the field."""
    if not isinstance(gen, dict):
        raise bad_field(path, "Input should be a valid dictionary (a GenerateResponse object).")
    if gen.get("output_mode", "tokens") != "tokens":      # vLLM: only tokens-level answers (Literal["tokens"])
        raise bad_field(f"{path}.output_mode", "Input should be 'tokens'")
    choices = gen.get("choices")
    if not isinstance(choices, list):
        raise bad_field(f"{path}.choices", "Field required (a list of choices).")
    for j, c in enumerate(choices):
        where = f"{path}.choices[{j}]"
        if not isinstance(c, dict):
            raise bad_field(where, "Input should be a valid dictionary.")
        if not is_int(c.get("index")):
            raise bad_field(f"{where}.index", "Field required (an integer).")
        check_token_list(c.get("token_ids"), f"{where}.token_ids")
        if c.get("finish_reason") is not None and not isinstance(c["finish_reason"], str):
            raise bad_field(f"{where}.finish_reason", "Input should be a valid string.")
        reason = c.get("stop_reason")
        if reason is not None and not (isinstance(reason, str) or is_int(reason)):
            raise bad_field(f"{where}.stop_reason", "Input should be a string or an integer.")
        _check_logprobs(c.get("logprobs"), f"{where}.logprobs")
    if gen.get("request_id") is not None and not isinstance(gen["request_id"], str):
        raise bad_field(f"{path}.request_id", "Input should be a valid string.")
    for key in ("usage", "kv_transfer_params", "metrics"):
        if gen.get(key) is not None and not isinstance(gen[key], dict):
            raise bad_field(f"{path}.{key}", "Input should be a valid dictionary.")
    check_token_list(gen.get("prompt_token_ids"), f"{path}.prompt_token_ids")
    plp = gen.get("prompt_logprobs")
    if plp is not None and (not isinstance(plp, list) or not all(x is None or isinstance(x, dict) for x in plp)):
        raise bad_field(f"{path}.prompt_logprobs", "Input should be a list of objects or nulls.")


def check_completion_request(cr) -> dict:
    """The fields of the original completion request the derenderer reads, type-checked (vLLM
    reads the whole ``CompletionRequest``); ``{}`` when none was sent."""
    if cr is None:
        return {}
    if not isinstance(cr, dict):
        raise bad_field("completion_request", "Input should be a valid dictionary (a CompletionRequest object).")
    if cr.get("logprobs") is not None and not is_int(cr["logprobs"]):
        raise bad_field("completion_request.logprobs", "Input should be a valid integer.")
    for key in ("return_token_ids", "return_tokens_as_token_ids"):
        if cr.get(key) is not None and not isinstance(cr[key], bool):
            raise bad_field(f"completion_request.{key}", "Input should be a valid boolean.")
    ids = cr.get("logprob_token_ids")
    if ids is not None and (not isinstance(ids, list) or not all(is_int(t) for t in ids)):
        raise bad_field("completion_request.logprob_token_ids", "Input should be a list of integers.")
    return cr
