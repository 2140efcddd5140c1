"""vLLM 0.34's reasoning efforts and ``--reasoning-effort-map``.

``EFFORTS``: vLLM's ``ReasoningEffort`` literal (``vllm/renderers/params.py``), what chat's
``reasoning_effort`` and the effort map's keys may be.  ``--reasoning-effort-map`` (a JSON object,
``FrontendArgs.reasoning_effort_map``) rewrites a request's effort to one the chat template
supports before the template, the reasoning parser and the ``enable_thinking`` switch see it:
vLLM's ``map_reasoning_effort`` in ``ChatCompletionRequest.build_chat_params`` (chat, and the
Messages API's converted chat request) and ``ResponsesRequest.build_chat_params``.  Efforts the
map does not list pass through unchanged.
"""
from __future__ import annotations

from .values import ConfigError

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def check_effort_map(effort_map) -> None:
    """vLLM 0.34's start-up check of ``--reasoning-effort-map``
    (``entrypoints/common/cli_args.py`` ``validate_reasoning_effort_map``, from
    ``validate_parsed_serve_args``): an object of strings whose keys are all efforts.  Raises
    ConfigError with vLLM's words."""
    if effort_map is None:
        return
    if not isinstance(effort_map, dict) or not all(isinstance(v, str) for v in effort_map.values()):
        raise ConfigError("Error: --reasoning-effort-map must be a JSON object mapping reasoning efforts to strings.",
                          "reasoning-effort-map")
    unknown = sorted(set(effort_map) - set(EFFORTS))
    if unknown:
        raise ConfigError(f"Error: --reasoning-effort-map has unknown efforts {unknown}; keys must be one of "
                          f"{list(EFFORTS)}.", "reasoning-effort-map")


def map_effort(effort, effort_map):
    """vLLM 0.34's ``map_reasoning_effort`` (``renderers/params.py``): the effort the map
    rewrites ``effort`` to, else ``effort`` itself (None stays None)."""
    if effort is None or not effort_map:
        return effort
    return effort_map.get(effort, effort)
