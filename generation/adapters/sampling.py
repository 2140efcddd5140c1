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
"""
from __future__ import annotations

from generation.content import reasoning as rz
from generation.errors import InvalidParam
from generation.structured.structured_outputs import anthropic_format, constraint

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


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


def structured_constraint(sim, so) -> dict | None:
    """``structured_outputs`` as the engine's constraint (see
    :mod:`generation.structured.structured_outputs`); raises its InvalidParams."""
    if so is None or sim.tool_synthesizer is None:
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


def chat_reasoning(sim, b) -> rz.ReasoningSettings | None:
    """The reasoning settings of a chat (or completions) request; None without a parser or
    when the request turns it off.  Raises InvalidParam naming ``reasoning_effort`` /
    ``thinking_token_budget``."""
    effort = _effort(getattr(b, "reasoning_effort", None), "reasoning_effort")
    budget = _budget(getattr(b, "thinking_token_budget", None), "thinking_token_budget")
    if sim.reasoning is None:
        return None
    kwargs = getattr(b, "chat_template_kwargs", None) or {}
    enabled = kwargs.get("enable_thinking", kwargs.get("thinking"))
    enabled = enabled if isinstance(enabled, bool) else None
    if enabled is None and effort not in (None, "none"):
        enabled = True                 # reasoning_effort implies thinking
    return rz.settings(enabled, effort, budget, getattr(b, "include_reasoning", None) is not False)


def anthropic_reasoning(sim, thinking, output_config) -> rz.ReasoningSettings | None:
    """Anthropic ``thinking`` (``{"type": "enabled", "budget_tokens": n}``, ``{"type":
    "adaptive"}``, ``{"type": "disabled"}``, ``{"type": "between_tools"}`` read as disabled, as
    vLLM 0.34 maps it) and ``output_config.effort``.  Lenient, as the
    request shapes Claude Code sends keep changing: an unknown ``thinking`` type or effort, or a
    ``budget_tokens`` that is not a count, leaves the default (reasoning on, unscaled)."""
    if sim.reasoning is None:
        return None
    output_config = _as_dict(output_config)
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if effort not in EFFORTS:
        effort = None
    enabled, budget = None, None
    if isinstance(thinking, dict):
        t = thinking.get("type")
        if t in ("disabled", "between_tools"):       # vLLM 0.34: between_tools is off up front
            enabled = False
        elif t in ("enabled", "adaptive"):
            enabled = True
        bt = thinking.get("budget_tokens")
        if t == "enabled" and isinstance(bt, int) and not isinstance(bt, bool) and bt >= 0:
            budget = bt
    return rz.settings(enabled, effort, budget)


def responses_reasoning(sim, reasoning, thinking_token_budget=None) -> rz.ReasoningSettings | None:
    """Responses ``reasoning`` (``{"effort": ..., "summary": ...}``); an effort it does not
    know leaves the default (Codex sends new values before servers know them).
    ``thinking_token_budget`` (vLLM 0.34) caps the reasoning tokens as on chat; raises
    InvalidParam naming it when it is neither -1 nor a count."""
    budget = _budget(thinking_token_budget, "thinking_token_budget")
    if sim.reasoning is None:
        return None
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return rz.settings(None, effort if effort in EFFORTS else None, budget)
