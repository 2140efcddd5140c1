"""vLLM 0.34's completions derender (``POST /v1/completions/derender``, non-streaming:
``vllm/entrypoints/scale_out/derender/serving.py`` ``derender_completion_response`` and
``vllm/renderers/online_derenderer.py`` ``_derender_completion``): the tokens-level answers of
``/inference/v1/generate``, one per prompt of a ``/v1/completions/render``, turned into the
``text_completion`` the coupled route gives.

Each generate choice becomes a completion choice, indexed 0.. across all the responses in
order; its text is its ``token_ids`` decoded token by token (as the chat derender here: no stop
token dropped, no stop string cut, ids the tokenizer cannot invert as decimals); ``logprobs``
when the generate choice has them, as coupled completions give the tokens their ``content``
names (``completion_request.logprobs`` alternatives, else as many as generate sent; ``token_id:N``
with ``return_tokens_as_token_ids``); ``prompt_logprobs`` as generate sent them;
``token_ids`` / ``prompt_token_ids`` with ``completion_request.return_token_ids``.  ``echo`` is
not applied (vLLM's derender does not either).  Usage: the prompts' tokens (``prompt_tokens``,
else each response's ``usage.prompt_tokens``, else 0) and every choice's ``token_ids``.

The bounds are vLLM's ``_validate_derender_bounds`` (``VLLM_MAX_N_SEQUENCES`` responses and
choices, ``--max-model-len`` token ids, logprob positions and prompt logprobs per list,
``--max-logprobs`` candidates), checked before anything is decoded, in its words; the request's
shapes are checked by the route (``blueprints.render``).
"""
from __future__ import annotations

from generation.content import logprobs as lp
from generation.errors import InvalidParam
from generation.structured.numeric import is_int
from .base import MAX_N, check_work
from .response_bodies import completion_choice


def check_derender_bounds(sim, gens: list, single: str | None = None) -> None:
    """vLLM's ``_validate_derender_bounds`` on the generate responses ``gens`` (dicts whose
    shapes the route checked; ``single``: the field of the one response a chat derender sends,
    else they are ``generate_responses[k]``).  Raises InvalidParam (400) with vLLM's message,
    naming the field."""
    max_len = sim.config.max_model_len
    max_logprobs = sim.config.max_logprobs
    if len(gens) > MAX_N:
        raise InvalidParam(f"generate_responses count ({len(gens)}) exceeds server maximum ({MAX_N}). "
                           f"Set VLLM_MAX_N_SEQUENCES to increase this limit.", "generate_responses")
    for k, gen in enumerate(gens):
        where = single or f"generate_responses[{k}]"
        rid = gen.get("request_id")
        choices = gen["choices"]
        if len(choices) > MAX_N:
            raise InvalidParam(f"choices count ({len(choices)}) in response '{rid}' exceeds server maximum "
                               f"({MAX_N}).", f"{where}.choices")
        for j, c in enumerate(choices):
            ids = c.get("token_ids")
            if ids and len(ids) > max_len:
                raise InvalidParam(f"token_ids length ({len(ids)}) in choice {c['index']} exceeds max_model_len "
                                   f"({max_len}).", f"{where}.choices[{j}].token_ids")
            content = (c.get("logprobs") or {}).get("content")
            if content:
                if len(content) > max_len:
                    raise InvalidParam(f"logprobs.content length ({len(content)}) in choice {c['index']} exceeds "
                                       f"max_model_len ({max_len}).", f"{where}.choices[{j}].logprobs.content")
                for e in content:
                    tops = e.get("top_logprobs")
                    if max_logprobs >= 0 and tops and len(tops) > max_logprobs:
                        raise InvalidParam(f"top_logprobs count ({len(tops)}) in choice {c['index']} exceeds "
                                           f"max_logprobs ({max_logprobs}).",
                                           f"{where}.choices[{j}].logprobs.content")
        plp = gen.get("prompt_logprobs")
        if plp and len(plp) > max_len:
            raise InvalidParam(f"prompt_logprobs length ({len(plp)}) in response '{rid}' exceeds max_model_len "
                               f"({max_len}).", f"{where}.prompt_logprobs")


def check_chat_derender_work(sim, tokens: int, chat: dict) -> None:
    """``--max-request-work`` on a chat derender: its ``tokens`` ids, each with
    ``chat_request.top_logprobs`` alternatives when ``chat_request.logprobs`` asks for them (the
    simulator makes those up, as coupled chat does; vLLM's derender copies the ones the generate
    response carries, which its bounds cap at ``--max-logprobs``).  A 200-byte request asking
    100,000 alternatives for 100 ids held the hub 40 s and 4.7 GB.  Raises InvalidParam naming
    ``generate_response``, or ``chat_request.top_logprobs`` when the alternatives pass the cap."""
    top = chat.get("top_logprobs")
    top = top if chat.get("logprobs") is True and is_int(top) and top > 0 else 0
    check_work(sim, tokens, "generate_response's token ids", "generate_response")
    if top:
        check_work(sim, tokens * (1 + top), "generate_response's token ids x (1 + chat_request.top_logprobs)",
                   "chat_request.top_logprobs")


def check_prompt_token_ids(sim, lists: list, field: str) -> None:
    """vLLM's ``_validate_prompt_token_ids``: none longer than ``--max-model-len``."""
    max_len = sim.config.max_model_len
    for ids in lists:
        if ids is not None and len(ids) > max_len:
            raise InvalidParam(f"prompt_token_ids length ({len(ids)}) exceeds max_model_len ({max_len}).", field)


def resolve_prompt_tokens(given, usage) -> int:
    """vLLM's ``resolve_prompt_tokens``: the request's count (0 included), else the generate
    response's ``usage.prompt_tokens``, else 0."""
    if given is not None:
        return given
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def completion_logprobs(tokenizer, logprobs: dict, top: int | None, as_ids: bool, listed) -> dict:
    """A choice's completions logprobs from generate's ``GenerateLogProbs``: one position per
    ``content`` entry, its token the entry's ``token_id`` (decoded, or ``token_id:N``), the
    values the simulator's coupled completions give (``top`` alternatives; None: as many as the
    entry's candidates); a position whose entry had no candidates has ``null`` top logprobs, as
    vLLM's ``_convert_chat_logprobs_to_completion_logprobs``.  No content: empty lists."""
    content = logprobs.get("content")
    if content is None:
        return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    ids = [e["token_id"] for e in content]
    pieces = [tokenizer.decode_ids([t]) for t in ids]
    if top is None:
        top = max((len(e.get("top_logprobs") or ()) for e in content), default=1)
    out = lp.completion_logprobs(pieces, top, ids=ids if as_ids else None, listed=listed)
    if not all(e.get("top_logprobs") for e in content):
        out["top_logprobs"] = [d if e.get("top_logprobs") else None for d, e in zip(out["top_logprobs"], content)]
    return out


def derender_completion(sim, gens: list, prompt_tokens: list | None, request: dict, as_ids: bool) -> tuple:
    """vLLM's ``_derender_completion``: ``(choices, prompt tokens, completion tokens)`` of the
    generate responses ``gens`` read with the original completion ``request`` (its
    ``logprobs``, ``logprob_token_ids`` and ``return_token_ids``; ``{}`` when none was sent).
    Raises InvalidParam for a choice without token ids (vLLM's ``ValueError``, a 400)."""
    tokenizer = sim.tokenizer
    top = request.get("logprobs")
    top = top if isinstance(top, int) and not isinstance(top, bool) and top >= 0 else None
    listed = lp.listed_names(tokenizer, request.get("logprob_token_ids"), as_ids) \
        if isinstance(request.get("logprob_token_ids"), list) else None
    return_ids = request.get("return_token_ids") is True
    choices = []
    total_prompt = total_completion = 0
    for k, gen in enumerate(gens):
        plp = gen.get("prompt_logprobs")
        for c in gen["choices"]:
            ids = c.get("token_ids")
            if not ids:
                raise InvalidParam(f"choice {c['index']} in response {gen.get('request_id')} has empty or null "
                                   f"token_ids", f"generate_responses[{k}].choices")
            text = "".join(tokenizer.decode_ids([t]) for t in ids)
            logprobs = c.get("logprobs")
            if logprobs is not None:
                logprobs = completion_logprobs(tokenizer, logprobs, top, as_ids, listed)
            choices.append(completion_choice(index=len(choices), text=text, logprobs=logprobs,
                                             finish_reason=c.get("finish_reason", "stop"),
                                             stop_reason=c.get("stop_reason"),
                                             token_ids=list(ids) if return_ids else None, prompt_logprobs=plp,
                                             prompt_token_ids=gen.get("prompt_token_ids") if return_ids else None))
            total_completion += len(ids)
        total_prompt += resolve_prompt_tokens(prompt_tokens[k] if prompt_tokens is not None else None,
                                              gen.get("usage"))
    return choices, total_prompt, total_completion
