"""Request fields every generation API maps onto the engine the same way: vLLM's sampling
semantics (``seed``, ``temperature``, ``stop_token_ids``, ``include_stop_str_in_output``),
``structured_outputs``, and the reasoning switches of each API (chat, Anthropic, Responses).

Reasoning switches (with ``--reasoning-parser``; without one no answer has a reasoning span):

* chat: ``chat_template_kwargs.enable_thinking`` (or ``thinking``) ``false`` turns it off;
  ``reasoning_effort`` scales it (``"none"`` turns it off unless ``enable_thinking`` says
  otherwise); ``thinking_token_budget`` caps it; ``include_reasoning: false`` keeps the tokens
  (and their time and usage) but returns no reasoning text;
* Anthropic: ``thinking.type`` ``enabled`` (``budget_tokens`` caps it), ``adaptive``,
  ``disabled``; ``output_config.effort`` scales it; no ``thinking`` field: on, as vLLM runs the
  parser on every answer;
* Responses: ``reasoning.effort`` scales it (``"none"`` turns it off).

On chat, Anthropic and Responses ``--default-chat-template-kwargs`` lies under the request's
own ``chat_template_kwargs`` (:func:`template_kwargs`): its ``enable_thinking`` (or
``thinking``) switch counts when the request gives neither a switch nor an effort, as vLLM
0.34's ``build_chat_params`` sets ``enable_thinking`` from the effort before the defaults.
"""
from __future__ import annotations

import json

from generation.config.reasoning_effort import EFFORTS, map_effort
from generation.content import reasoning as rz
from generation.errors import APIError, InvalidParam
from generation.structured.structured_outputs import anthropic_format, constraint
from generation.tokenization.chat_template import effort_kwargs, merge_kwargs

def sampling_semantics(b) -> dict:
    """The GenerationRequest fields of vLLM's sampling semantics, from a chat / completions
    typed request.  Raises InvalidParam for a negative stop token id."""
    ids = getattr(b, "stop_token_ids", None)
    if ids and min(ids) < 0:          # min first: a body may hold 2 M ids
        i = next(k for k, t in enumerate(ids) if t < 0)
        raise InvalidParam(f"stop_token_ids[{i}]: must be a non-negative token id.", f"stop_token_ids[{i}]")
    return {"seed": b.seed, "temperature": b.temperature, "stop_token_ids": ids or None,
            "use_beam_search": bool(getattr(b, "use_beam_search", False)),
            "allowed_token_ids": getattr(b, "allowed_token_ids", None),
            "logprob_token_ids": getattr(b, "logprob_token_ids", None) or None,
            "include_stop_str_in_output": bool(getattr(b, "include_stop_str_in_output", False))}


def response_format_overrides(rf) -> dict | None:
    """The ``structured_outputs`` fields a ``response_format`` sets, as vLLM 0.34's
    ``structured_outputs_from_response_format`` (``entrypoints/generate/base/protocol.py``
    l. 181-211) sets them: ``json_object`` -> ``json_object: true``, ``json_schema`` -> ``json``
    (its ``schema``, None when it has none), ``structural_tag`` -> ``structural_tag``; None for
    ``text``, no ``response_format`` or one of another shape."""
    if not isinstance(rf, dict):
        return None
    kind = rf.get("type")
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        js = rf.get("json_schema")
        return {"json": js.get("schema") if isinstance(js, dict) else None}
    if kind == "structural_tag":
        return {"structural_tag": json.dumps(rf)}
    return None


def structured_constraint(sim, so, rf=None) -> dict | None:
    """``structured_outputs`` as the engine's constraint (see
    :mod:`generation.structured.structured_outputs`); raises its InvalidParams.  ``rf``: the
    request's ``response_format``, which vLLM 0.34 lays over ``structured_outputs`` with
    ``dataclasses.replace`` (:func:`response_format_overrides`), so that its kind beside another
    of ``structured_outputs`` is ``StructuredOutputsParams``' "multiple are specified" 400, and a
    ``json_schema`` without a ``schema`` its "none are specified" 400."""
    if sim.tool_synthesizer is None:
        return None
    overrides = response_format_overrides(rf)
    if overrides is not None and (isinstance(so, dict) or (so is None and overrides.get("json", 0) is None)):
        so = {**(so or {}), **overrides}
    if so is None:
        return None
    return constraint(sim.tool_synthesizer.validator, so)


def _as_dict(obj):
    """``output_config`` as loaded (a dataclass of :mod:`generation.adapters.protocol`) or raw."""
    import dataclasses
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def anthropic_constraint(sim, output_config) -> dict | None:
    """Anthropic ``output_config.format`` (a JSON schema) as the engine's constraint."""
    output_config = _as_dict(output_config)
    if not isinstance(output_config, dict) or sim.tool_synthesizer is None:
        return None
    return anthropic_format(sim.tool_synthesizer.validator, output_config.get("format"))


def mapped_effort(sim, effort):
    """``effort`` as ``--reasoning-effort-map`` rewrites it (:func:`~generation.config.
    reasoning_effort.map_effort`): what vLLM 0.34's ``build_chat_params`` gives the chat template
    and the reasoning parser, and derives ``enable_thinking`` from."""
    return map_effort(effort, getattr(getattr(sim, "config", None), "reasoning_effort_map", None))


def _effort(value, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in EFFORTS:
        raise InvalidParam(f"{param}: Input should be one of {', '.join(map(repr, EFFORTS))}, got {value!r}.",
                           param)
    return value


def _budget(value, param: str) -> int | None:
    """A thinking budget: None or -1 = no cap, else a count >= 0 (vLLM 0.34's
    ``validate_thinking_token_budget``: anything else, a float or a boolean too, is its 400)."""
    if value is None or (value == -1 and value.__class__ is int):
        return None
    if value.__class__ is not int or value < 0:
        raise InvalidParam(f"`{param}` must be a non-negative integer or -1 for unlimited.", param)
    return value


def template_kwargs(sim, requested) -> dict:
    """The chat template kwargs of a chat-templated request (chat, batch chat, Messages and
    count_tokens, Responses, their render routes, ``/tokenize``): --default-chat-template-kwargs
    under the request's ``chat_template_kwargs`` (a dict, else none), whose null / ``"auto"``
    values do not override.  vLLM 0.34: ``ChatParams.with_defaults`` (``renderers/params.py``)
    in ``OnlineRenderer.preprocess_chat`` and ``effective_chat_template_kwargs``; its pooling
    routes and ``/inference/v1/generate`` do not apply the defaults."""
    return merge_kwargs(sim.config.default_chat_template_kwargs, requested if isinstance(requested, dict) else None)


def _switch(kwargs) -> bool | None:
    """A kwargs dict's thinking switch: ``enable_thinking``, else ``thinking``; None unless a bool."""
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    on = kwargs.get("enable_thinking", kwargs.get("thinking"))
    return on if isinstance(on, bool) else None


def _thinking(own, effort, kwargs) -> bool | None:
    """Whether the template is told to think: the request's own switch, else its effort (on
    unless ``"none"``), else the switch of ``kwargs`` (the effective ones, :func:`template_kwargs`);
    None when none says.  vLLM 0.34's ``ChatCompletionRequest.build_chat_params`` sets
    ``enable_thinking`` from the effort unless the request sets it, then ``with_defaults``."""
    on = _switch(own)
    if on is None and effort is not None:
        on = effort != "none"
    return _switch(kwargs) if on is None else on


def responses_effort(reasoning, effort_map=None) -> str | None:
    """A Responses request's ``reasoning.effort`` when it is one of vLLM's efforts, else None;
    rewritten by ``effort_map`` (``--reasoning-effort-map``), as ``ResponsesRequest.build_chat_params``."""
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return map_effort(effort if effort in EFFORTS else None, effort_map)


def parser_effort(effort, kwargs) -> object:
    """The ``reasoning_effort`` the server's reasoning parser is built with: the request's own
    effort, which vLLM 0.34's ``build_chat_params`` lays over the chat template kwargs (chat,
    Responses, the Messages conversion), else the effective kwargs' ``reasoning_effort``
    (``chat_template_kwargs`` over ``--default-chat-template-kwargs``); None when neither has one.
    The parser reads ``chat_template_kwargs.get("reasoning_effort")``."""
    if effort is not None:
        return effort
    return kwargs.get("reasoning_effort") if isinstance(kwargs, dict) else None


def effort_markers(row, effort) -> tuple | None:
    """The ``(start, end)`` marker strings of a parser that picks them by effort
    (``Parser.efforts``: K2 Horizon's ``_EFFORT_TOKENS``, ``high`` when none is given), None
    for the others.  Any other effort is the parser's ``ValueError`` from its ``__init__``,
    which vLLM 0.34's ``create_error_response`` answers 400 (``BadRequestError``, no param)."""
    if not row.efforts:
        return None
    effort = row.efforts[0][0] if effort is None else effort
    for name, start, end in row.efforts:
        if effort == name:
            return start, end
    raise InvalidParam(f"Unsupported reasoning_effort {effort!r}. "
                       f"Supported values: {', '.join(e[0] for e in row.efforts)}.")


def effort_thinks(row, effort, enabled: bool | None) -> bool | None:
    """``enabled`` (the request's thinking switch, :func:`_thinking`), or for a parser that
    decides by effort alone (``Parser.effort_gated``: vLLM 0.34's ``HYV3ReasoningParser``, the
    identity parser when ``chat_template_kwargs.get("reasoning_effort") or "no_think"`` is
    ``no_think``) whether ``effort`` (:func:`parser_effort`) is given and not ``no_think``."""
    if not row.effort_gated:
        return enabled
    return bool(effort) and effort != "no_think"


def _with_markers(opts, markers):
    if opts is not None and markers is not None:
        opts.markers = markers
    return opts


def chat_reasoning(sim, b, kwargs: dict | None = None, effort_map=None) -> rz.ReasoningSettings | None:
    """The reasoning settings of a chat (or completions) request; None without a parser or
    when the request turns it off.  ``kwargs``: the effective chat template kwargs
    (:func:`template_kwargs`; None: the request's own, where vLLM applies no defaults);
    ``effort_map``: ``--reasoning-effort-map``, which rewrites the request's (valid) effort.
    Raises InvalidParam naming ``reasoning_effort`` / ``thinking_token_budget``."""
    effort = map_effort(_effort(getattr(b, "reasoning_effort", None), "reasoning_effort"), effort_map)
    budget = _budget(getattr(b, "thinking_token_budget", None), "thinking_token_budget")
    if sim.reasoning is None:
        return None
    own = getattr(b, "chat_template_kwargs", None)
    kwargs = own if kwargs is None else kwargs
    seen = parser_effort(effort, kwargs)
    markers = effort_markers(sim.reasoning.row, seen)
    enabled = effort_thinks(sim.reasoning.row, seen, _thinking(own, effort, kwargs))
    return _with_markers(rz.settings(enabled, effort, budget, getattr(b, "include_reasoning", None) is not False,
                                     sim.reasoning.row), markers)


ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")     # vLLM 0.34's AnthropicEffort


def disabled_thinking_effort(sim) -> str:
    """The ``reasoning_effort`` vLLM 0.34 sends the chat template for Anthropic ``thinking``
    ``disabled`` / ``between_tools`` (``DisabledThinkingEffortResolver``, anthropic/serving.py,
    ``--anthropic-disabled-thinking-effort auto``): ``"none"``, unless rendering a one-message
    conversation ("Hi") with effort ``"none"`` fails or gives the prompt of one of
    :data:`ANTHROPIC_EFFORTS` (a template that ignores the effort and the switch it implies):
    then ``"low"``.  Probed once per server; a --anthropic-disabled-thinking-effort other than
    ``auto`` is the effort itself, as vLLM's resolver takes it.  The simulated tokenizer's
    flattening (no template) stands for a template that honours the switch: ``"none"``."""
    cached = getattr(sim, "_disabled_thinking_effort", None)
    if cached is not None:
        return cached
    fixed = getattr(getattr(sim, "config", None), "anthropic_disabled_thinking_effort", "auto")
    if fixed and fixed != "auto":       # vLLM: the flag's effort, no probe
        return fixed
    effort = "none"
    if sim.tokenizer.name != "simulated":
        def prompt(e):
            try:
                kwargs = template_kwargs(sim, effort_kwargs(None, mapped_effort(sim, e)))   # render_chat's map
                return sim.tokenize_messages([{"role": "user", "content": "Hi"}], chat_template_kwargs=kwargs)[0]
            except InvalidParam:    # vLLM: the template failed to render (logged at debug); a
                return None         # --render-url outage propagates, so nothing is cached then
            except APIError as e:   # --render-url: the service refused to render it (its 400 /
                if e.status in (400, 422):      # 422) is the failed render; 5xx, 429 propagate
                    return None
                raise
        none = prompt("none")
        if none is None or any(prompt(e) == none for e in ANTHROPIC_EFFORTS):
            effort = "low"
    sim._disabled_thinking_effort = effort
    return effort


def anthropic_effort(sim, thinking, output_config) -> str | None:
    """The ``reasoning_effort`` of the chat request vLLM 0.34 converts a Messages request to
    (``AnthropicServingMessages.to_chat_completion_request``): ``_handle_output_config`` sets
    ``output_config.effort``, then ``_handle_thinking`` replaces it with
    :func:`disabled_thinking_effort` for ``thinking`` ``disabled`` / ``between_tools``; None when
    neither applies (an effort vLLM's Literal does not know is left out, as the simulator reads
    Anthropic's shapes leniently)."""
    if isinstance(thinking, dict) and thinking.get("type") in ("disabled", "between_tools"):
        return disabled_thinking_effort(sim)
    output_config = _as_dict(output_config)
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    return effort if effort in EFFORTS else None


def anthropic_kwargs(sim, body) -> dict:
    """The effective chat template kwargs of a Messages request (``/v1/messages``, its
    count_tokens and render): :func:`anthropic_effort` laid over its ``chat_template_kwargs`` as
    vLLM 0.34's ``ChatCompletionRequest.build_chat_params`` does (``reasoning_effort`` and, unless
    the request's kwargs name ``enable_thinking``, ``enable_thinking = effort != "none"``), over
    --default-chat-template-kwargs (``effective_chat_template_kwargs``)."""
    effort = anthropic_effort(sim, getattr(body, "thinking", None), getattr(body, "output_config", None))
    return template_kwargs(sim, effort_kwargs(getattr(body, "chat_template_kwargs", None), mapped_effort(sim, effort)))


def anthropic_reasoning(sim, thinking, output_config, own=None, kwargs=None) -> rz.ReasoningSettings | None:
    """Anthropic ``thinking`` (``{"type": "enabled", "budget_tokens": n}``, ``{"type":
    "adaptive"}``, ``{"type": "disabled"}``, ``{"type": "between_tools"}`` read as disabled, as
    vLLM 0.34 maps it) and ``output_config.effort``.  Lenient, as the
    request shapes Claude Code sends keep changing: an unknown ``thinking`` type or effort, or a
    ``budget_tokens`` that is not a count, leaves the default (reasoning on, unscaled).
    ``own`` / ``kwargs``: the request's ``chat_template_kwargs`` and the effective ones
    (:func:`anthropic_kwargs`): a switch they turn off wins over ``enabled`` / ``adaptive``, as
    vLLM 0.34's chat conversion pins no ``enable_thinking`` for those (only a budget).
    ``disabled`` / ``between_tools`` pin only the effort (:func:`anthropic_effort`), whose
    switch decides unless the request's kwargs name ``enable_thinking``: ``"none"`` turns
    thinking off, ``"low"`` (a template that ignores ``"none"``) leaves it on, as in vLLM."""
    if sim.reasoning is None:
        return None
    effort = mapped_effort(sim, anthropic_effort(sim, thinking, output_config))   # build_chat_params' map
    enabled, budget = None, None
    t = thinking.get("type") if isinstance(thinking, dict) else None
    if t in ("enabled", "adaptive"):
        enabled = True
    bt = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if t == "enabled" and isinstance(bt, int) and not isinstance(bt, bool) and bt >= 0:
        budget = bt
    row = sim.reasoning.row
    # the parser is built with the effective kwargs, whose effort vLLM's conversion set
    seen = parser_effort(effort, kwargs)
    markers = effort_markers(row, seen)
    switch = _thinking(own, effort, kwargs)
    if t in ("disabled", "between_tools"):
        enabled = switch
    if enabled is not False and switch is False and not row.effort_gated:
        enabled = False
    if enabled is not False and row.effort_gated:
        enabled = effort_thinks(row, seen, enabled)
    elif enabled and not row.thinks:
        enabled = switch        # the template of a model that thinks only when told sees no Anthropic type
    return _with_markers(rz.settings(enabled, effort, budget, parser=sim.reasoning.row), markers)


def responses_reasoning(sim, reasoning, thinking_token_budget=None, own=None, kwargs=None) -> rz.ReasoningSettings | None:
    """Responses ``reasoning`` (``{"effort": ..., "summary": ...}``); an effort it does not
    know leaves the default (Codex sends new values before servers know them).
    ``thinking_token_budget`` (vLLM 0.34) caps the reasoning tokens as on chat; raises
    InvalidParam naming it when it is neither -1 nor a count.  ``own`` / ``kwargs``: the request's
    ``chat_template_kwargs`` and the effective ones (:func:`template_kwargs`): the request's
    switch, else its effort, else the effective switch decides (vLLM 0.34's
    ``ResponsesRequest.build_chat_params``)."""
    budget = _budget(thinking_token_budget, "thinking_token_budget")
    if sim.reasoning is None:
        return None
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    effort = mapped_effort(sim, effort if effort in EFFORTS else None)
    row = sim.reasoning.row
    seen = parser_effort(effort, kwargs)
    markers = effort_markers(row, seen)
    return _with_markers(rz.settings(effort_thinks(row, seen, _thinking(own, effort, kwargs)), effort, budget,
                                     parser=row), markers)


def tool_parser_type(sim, request_type: str, tools, tool_choice, stream: bool) -> str | None:
    """``request_type`` (``"chat_completions"``, ``"responses"``) when vLLM's tool parser
    (``--tool-call-parser``) parses this request's output, else None: with tools and the wire
    ``tool_choice`` ``"auto"`` (or absent or null, which vLLM reads as auto with tools), and, not
    streaming, ``--enable-auto-tool-choice`` (vllm/parser/abstract_parser.py: ``parse`` calls
    ``extract_tool_calls`` only for auto tools; ``parse_delta`` calls ``extract_tool_calls_streaming``
    for any choice but none, required and a named tool, which a parser with
    ``supports_required_and_named`` answers itself).  For
    ``vllm:tool_call_parser_invocations`` (:meth:`~generation.metrics.recorder.MetricsRecorder.parsed`)."""
    metrics = sim.metrics
    if metrics.parser_calls is None or not tools or tool_choice not in (None, "auto"):
        return None
    return request_type if stream or metrics.auto_tool_choice else None
