"""The fields of vLLM 0.34's render answers (``GenerateRequest``, ``scale_out/render/serving.py``)
that the chat, completions and Messages renders share: the request's sampling params over
vLLM's defaults (:func:`generate_fields`), and what the chat render adds for the derender /
generate step that follows (:func:`chat_parse_fields`)."""
from __future__ import annotations

from generation.adapters.sampling import (effort_markers, effort_thinks, mapped_effort, parser_effort,
                                          template_kwargs)
from generation.engine.outputs import prompt_too_long
from generation.structured.numeric import is_int
from generation.tokenization.chat_template import effort_kwargs

# vLLM's SamplingParams defaults, as a render's ``sampling_params`` reports them
SAMPLING_DEFAULTS = {"n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
                     "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": None, "stop": [],
                     "stop_token_ids": [], "ignore_eos": False, "max_tokens": None, "min_tokens": 0,
                     "logprobs": None, "prompt_logprobs": None, "skip_special_tokens": True,
                     "spaces_between_special_tokens": True, "logit_bias": None}


def _scalar(v) -> bool:
    """A value orjson writes back as it came: a string, bool, float, or an int within 64 bits."""
    if isinstance(v, int) and not isinstance(v, bool):
        return -(2 ** 63) <= v < 2 ** 64
    return isinstance(v, (str, float, bool))


_SCALARS = frozenset((str, float, bool, int))


def _all_scalar(values) -> bool:
    """Every one of ``values`` a :func:`_scalar`, read in C loops (the types, then the ints'
    range): a per-item call took ~0.4 us, and a 750,000-string ``stop`` was read twice per
    completions render, holding the hub 0.3 s."""
    types = set(map(type, values))
    if not types <= _SCALARS:
        return False
    if int not in types:
        return True
    ints = values if len(types) == 1 else [x for x in values if type(x) is int]
    return -(2 ** 63) <= min(ints) and max(ints) < 2 ** 64


def _plain(v) -> bool:
    """A scalar, a flat list of scalars or a flat object of scalars (the shapes sampling fields
    have); anything else a render copies nowhere (it checks nothing, and must not fail to write)."""
    if _scalar(v):
        return True
    if isinstance(v, list):
        return _all_scalar(v)
    if isinstance(v, dict):
        return _all_scalar(list(v.values()))
    return False


def body_sampling(raw: dict, keys) -> dict:
    """vLLM's sampling defaults (:data:`SAMPLING_DEFAULTS`) with the body's plain values of
    ``keys`` over them (judged by :func:`~generation.adapters.fields.check_render_sampling`); ``stop`` a list."""
    sp = dict(SAMPLING_DEFAULTS)
    for k in keys:
        if raw.get(k) is not None and _plain(raw[k]):
            sp[k] = raw[k]
    if isinstance(sp["stop"], str):
        sp["stop"] = [sp["stop"]]
    return sp


def generate_fields(sim, raw: dict, rid: str, model: str, n_ids: int, chat: bool) -> dict:
    """vLLM's ``GenerateRequest`` fields of a render answer besides ``token_ids`` / ``features``:
    ``request_id``, ``model``, ``sampling_params`` (the body's sampling fields over vLLM's
    defaults, checked by :func:`~generation.adapters.fields.check_render_sampling`; ``max_tokens``
    the request's capped to the room left in the context window, or that room when it gives none:
    ``get_max_tokens``, ``entrypoints/serve/utils/api_utils.py``, which counts the prompt at most
    ``truncate_prompt_tokens`` long), ``stream`` / ``stream_options`` (the options only with
    ``stream``), and the request's ``return_token_ids``, ``cache_salt``, ``priority`` and
    ``kv_transfer_params`` / ``ec_transfer_params`` (hoisted out of the sampling params' extra
    args: an empty one is null), as ``scale_out/render/serving.py`` builds them; lay them out with
    :func:`~generation.adapters.response_bodies.generate_request`.  A prompt longer than the
    context is vLLM's 400 (:func:`prompt_too_long`)."""
    if n_ids > sim.config.max_model_len and raw.get("truncate_prompt_tokens") is None:
        raise prompt_too_long(sim.config.max_model_len, n_ids)     # the renderer's _token_len_check, as /v1/responses/render
    sp = body_sampling(raw, SAMPLING_DEFAULTS)
    limit = raw.get("max_completion_tokens") if chat else None
    if limit is None:
        limit = raw.get("max_tokens")
    if limit is not None and not _scalar(limit):
        limit = None
    max_len, cut = sim.config.max_model_len, raw.get("truncate_prompt_tokens")
    room = max(max_len - (min(n_ids, max_len if cut == -1 else cut) if is_int(cut) else n_ids), 0)
    sp["max_tokens"] = room if limit is None else min(limit, room) if is_int(limit) else limit
    if chat:
        top = raw.get("top_logprobs")
        sp["logprobs"] = (top if _scalar(top) else 0) if raw.get("logprobs") is True else None
    out = {"request_id": rid, "model": model, "sampling_params": sp}
    out["stream"] = stream = raw.get("stream") is True
    opts = raw.get("stream_options")
    out["stream_options"] = opts if stream and isinstance(opts, dict) and _plain(opts) else None
    rti, salt, priority = raw.get("return_token_ids"), raw.get("cache_salt"), raw.get("priority")
    out["return_token_ids"] = rti if isinstance(rti, bool) else None
    out["cache_salt"] = salt if isinstance(salt, str) else None
    out["priority"] = priority if type(priority) is int else 0
    for key in ("kv_transfer_params", "ec_transfer_params"):
        v = raw.get(key)
        out[key] = v if isinstance(v, dict) and v else None
    return out


def chat_parse_fields(sim, raw: dict, messages) -> dict:
    """What vLLM 0.34's chat render (``scale_out/render/serving.py``) adds for the generate
    call that follows: ``sampling_params.structured_outputs`` from ``response_format`` (a JSON
    schema or JSON object, as ``to_sampling_params``), ``reasoning_ended`` (True when
    ``include_reasoning`` is false, so the constraint applies from the first token; with a
    reasoning parser False while the answer still reasons, True when the request turns
    thinking off; else None), ``reasoning_parser_kwargs`` (with a reasoning parser: the chat
    template kwargs), and ``parse_context`` (the fields the derender step reads: ``tools``,
    ``tool_choice``, ``parallel_tool_calls``, ``include_reasoning``,
    ``return_tokens_as_token_ids``, ``chat_template_kwargs``, ``history_tool_call_cnt``).  The
    kwargs are the effective ones (:func:`~generation.adapters.sampling.template_kwargs`), as
    vLLM's ``effective_chat_template_kwargs``."""
    # vLLM's effective_chat_template_kwargs: build_chat_params lays the effort (and the switch it
    # implies) over the request's kwargs, so a render -> generate round trip keeps the effort
    # build_chat_params also lays the request's add_generation_prompt and continue_final_message
    # (ChatCompletionRequest's defaults True / False: the Messages conversion's too) and its
    # documents (when given) over its kwargs
    own = raw.get("chat_template_kwargs")
    agp, cfm = raw.get("add_generation_prompt"), raw.get("continue_final_message")
    extra = {"add_generation_prompt": agp if isinstance(agp, bool) else True,
             "continue_final_message": cfm if isinstance(cfm, bool) else False}
    if isinstance(raw.get("documents"), list):
        extra["documents"] = raw["documents"]
    effort = mapped_effort(sim, raw.get("reasoning_effort"))     # --reasoning-effort-map (build_chat_params)
    kwargs = template_kwargs(sim, effort_kwargs({**(own if isinstance(own, dict) else {}), **extra}, effort))
    if sim.reasoning is not None:
        # the render builds the reasoning parser with these kwargs: K2 Horizon's __init__ refuses
        # an effort it has no markers for (its ValueError, vLLM's 400), as chat does
        effort_markers(sim.reasoning.row, parser_effort(effort, kwargs))
    include = raw.get("include_reasoning") is not False
    if not include:
        ended = True
    elif sim.config.reasoning_parser:
        thinking = kwargs.get("enable_thinking", kwargs.get("thinking"))
        row = sim.reasoning.row
        if row.effort_gated:      # hy_v3: the identity parser (ended) unless an effort other than no_think
            ended = not effort_thinks(row, parser_effort(effort, kwargs), None)
        else:                     # a parser whose model thinks only when told (deepseek_v3's identity parser) ends at once
            ended = thinking is False or (thinking is None and not row.thinks)
    else:
        ended = None
    tools = raw.get("tools") if isinstance(raw.get("tools"), list) else None
    history = sum(len(m.get("tool_calls") or ()) for m in messages
                  if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list))
    out = {"reasoning_ended": ended,
           "reasoning_parser_kwargs": {"chat_template_kwargs": kwargs} if sim.config.reasoning_parser else None,
           "parse_context": {"tools": tools, "tool_choice": raw.get("tool_choice", "none" if not tools else "auto"),
                             "parallel_tool_calls": raw.get("parallel_tool_calls") is not False,
                             "include_reasoning": include,
                             "return_tokens_as_token_ids": raw.get("return_tokens_as_token_ids")
                             if isinstance(raw.get("return_tokens_as_token_ids"), bool) else None,
                             "chat_template_kwargs": kwargs, "history_tool_call_cnt": history}}
    if out["parse_context"]["return_tokens_as_token_ids"] is None:
        # ParseContext's Field(exclude_if=lambda value: value is None): vLLM's dump leaves it out
        del out["parse_context"]["return_tokens_as_token_ids"]
    rf = raw.get("response_format")
    if isinstance(raw.get("structured_outputs"), dict) and _plain(raw["structured_outputs"]):
        out["structured_outputs"] = raw["structured_outputs"]
    elif isinstance(rf, dict) and rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), dict):
        out["structured_outputs"] = {"json": rf["json_schema"].get("schema", {})}
    elif isinstance(rf, dict) and rf.get("type") == "json_object":
        out["structured_outputs"] = {"json_object": True}
    return out
