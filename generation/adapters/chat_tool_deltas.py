"""A streamed chat choice's tool-call deltas, as vLLM 0.34 builds them on each ``tool_choice`` path.

The simulator's tool-call tokens are the calls' argument pieces (no markup, no name tokens), so
each path is mapped onto them (sources: ``/tmp/vsrc/vllm-0.34.0``):

* **named** (``{"type": "function", ...}``): ``extract_named_tool_call_streaming``
  (``vllm/tool_parsers/streaming.py`` l. 22-62).  The first output's entry is
  ``{"id", "type": "function", "index": 0, "function": {"name", "arguments": <its text>}}``,
  every later one ``{"index": 0, "function": {"arguments": <text>}}``; the delta is
  ``{"tool_calls": [...]}`` (``DeltaMessage(tool_calls=...)``: no ``content`` key).
* **required**: ``extract_required_tool_call_streaming`` (same file, l. 250-311).  A call's first
  entry is ``{"id", "type", "index": c, "function": {"name", "arguments": <its arguments so
  far>}}``; later ones ``{"index": c, "function": {"name": null, "arguments": <new text>}}``
  (``name=None`` is passed, so ``exclude_unset`` keeps it); one entry per call with new text,
  in index order; no ``content`` key.
* **auto** (a tool parser; ``hermes``, ``Hermes2ProToolParser.extract_tool_calls_streaming``,
  ``vllm/tool_parsers/hermes_tool_parser.py`` l. 204-274): the name is sent alone, as
  ``{"id", "type": "function", "index": c, "function": {"name"}}`` (its ``DeltaFunctionCall`` is
  dumped ``exclude_none``, so no ``arguments`` key), and the arguments follow as
  ``{"index": c, "function": {"arguments": <diff>}}``; one output that reveals both sends both
  entries, name first, in one delta.  The delta is ``DeltaMessage(content=content,
  tool_calls=...)`` with no text before the call: ``{"content": null, "tool_calls": [...]}``.
  In a token-per-chunk stream the name's chunk comes from the model's name tokens, which the
  simulator does not have: it is sent just before the call's first argument token's chunk, in
  that token's time slot, carrying no token (``logprobs`` ``{"content": []}``, ``token_ids``
  ``[]`` when asked, the running usage unchanged).

The chunks are dumped ``exclude_unset`` (``vllm/entrypoints/openai/chat_completion/serving.py`` l. 500-502), so the key
order is the models' (``vllm/entrypoints/generate/base/protocol.py`` l. 331-367): a delta's
``content``, ``reasoning``, ``tool_calls``; an entry's ``id``, ``type``, ``index``,
``function``; a function's ``name``, ``arguments``.
"""
from __future__ import annotations

from generation.engine.outputs import tool_choice_style


def call_style(req) -> str:
    """``"named"``, ``"required"`` or ``"auto"``: which of vLLM's streaming paths (module
    docstring) a request's tool calls take (the engine's :func:`~generation.engine.outputs.
    tool_choice_style`, which a stop in a call's text reads too)."""
    return tool_choice_style(req.tool_choice)


def name_entry(tc: dict, c: int) -> dict:
    """The auto path's name-alone entry of call ``c``: ``{"id", "type", "index", "function":
    {"name"}}`` (hermes_tool_parser.py l. 242-250)."""
    return {"id": tc["id"], "type": "function", "index": c, "function": {"name": tc["name"]}}


def call_entries(style: str, tc: dict, c: int, text: str, first: bool) -> list:
    """Call ``c``'s entries for an output with argument text ``text``; ``first``: the output
    starts the call.  No text (a stop cut it, or a stop string's holdback kept it) gives no
    entry but a call's first on the required and auto paths (their parsers send only new
    argument text: ``extract_required_tool_call_streaming``' ``if new_arguments``); the named
    path sends every output's text, empty too."""
    if not text and not first and style != "named":
        return []
    if style == "auto":
        if not text:
            return [name_entry(tc, c)]
        args = {"index": c, "function": {"arguments": text}}
        return [name_entry(tc, c), args] if first else [args]
    if first:
        return [{"id": tc["id"], "type": "function", "index": c, "function": {"name": tc["name"], "arguments": text}}]
    if style == "required":          # streaming.py l. 281-290: name=None is set, so dumped
        return [{"index": c, "function": {"name": None, "arguments": text}}]
    return [{"index": c, "function": {"arguments": text}}]


def tool_delta(style: str, entries: list, reasoning: str | None = None) -> dict:
    """A delta carrying ``entries`` (and ``reasoning``, when the output has some): the auto
    path's hermes ``DeltaMessage`` sets ``content`` (None), the others do not."""
    delta = {"content": None} if style == "auto" else {}
    if reasoning is not None:
        delta["reasoning"] = reasoning
    delta["tool_calls"] = entries
    return delta


def named_choice(req) -> bool:
    """Whether ``tool_choice`` names one function (``{"type": "function", ...}``)."""
    return tool_choice_style(req.tool_choice) == "named"


def finish_reason(req, seq) -> str:
    """A choice's chat ``finish_reason``: ``"tool_calls"`` for a tool call, except under a
    named ``tool_choice`` (one forced function), which finishes with ``"stop"`` as OpenAI and
    vLLM's ``resolve_finish_reason`` report it (case C11); anything else is the engine's."""
    if seq.finish_reason == "tool_calls" and named_choice(req):
        return "stop"
    return seq.finish_reason
