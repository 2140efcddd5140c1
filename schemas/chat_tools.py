"""Chat's ``tools`` as pydantic reads vLLM 0.34's ``list[ChatCompletionToolsParam] | None``
(``entrypoints/openai/chat_completion/protocol.py`` l. 208-216: ``type: Literal["function"] =
"function"``, ``function: FunctionDefinition``, ``defer_loading: bool | None``; and
``generate/base/protocol.py`` l. 298-303, ``FunctionDefinition``: ``name: str``,
``description: str | None``, ``parameters: dict[str, Any] | None``, ``strict: bool | None``,
``defer_loading: bool | None``).  Every error of every tool, in the models' field order, in
vLLM's validation handler's words (``N validation errors:``, ``loc`` ``body.tools.0.function.
name``); ten built, the rest counted (:class:`~.refusal.Capped`).  Extra keys are allowed, as
``OpenAIBaseModel`` allows them.  What pydantic takes passes here; the simulator's own checks
of a tool (its ``parameters`` a usable JSON Schema) run after, as before."""
from __future__ import annotations

from marshmallow import fields

from generation.adapters.validation import Mismatch, literal_mismatch, read_bool, read_dict, read_list, read_str
from generation.lanes import paced

from .refusal import Capped, refuse

TOOL, FUNCTION = "ChatCompletionToolsParam", "FunctionDefinition"
_FUNCTION_TYPE = literal_mismatch(("function",)).error


def _model_type(errors: Capped, path: str, value, cls: str) -> None:
    errors.append((path, value, "model_type", f"Input should be a valid dictionary or instance of {cls}",
                   {"class_name": cls}))


def _optional(errors: Capped, obj: dict, key: str, reader, path: str) -> None:
    value = obj.get(key)
    if value is None:
        return
    try:
        reader(value)
    except Mismatch as e:
        errors.append((f"{path}{key}", value, *e.error))


def tool_errors(tools) -> Capped:
    """pydantic's errors of ``tools`` (``(subpath, input, type, msg[, ctx])``, subpaths below
    the field: ``"0.function.name"``); empty when it takes them."""
    errors = Capped()
    try:
        read_list(tools)
    except Mismatch as e:
        errors.append(("", tools, *e.error))
        return errors
    for i, tool in enumerate(paced(tools)):
        if not isinstance(tool, dict):
            _model_type(errors, str(i), tool, TOOL)
            continue
        if "type" in tool and tool["type"] != "function" or type(tool.get("type", "function")) is not str:
            errors.append((f"{i}.type", tool["type"], *_FUNCTION_TYPE))
        if "function" not in tool:
            errors.append((f"{i}.function", tool, "missing", "Field required"))
        elif not isinstance(tool["function"], dict):
            _model_type(errors, f"{i}.function", tool["function"], FUNCTION)
        else:
            fn, at = tool["function"], f"{i}.function."
            if "name" not in fn:
                errors.append((f"{at}name", fn, "missing", "Field required"))
            else:
                try:
                    read_str(fn["name"])
                except Mismatch as e:
                    errors.append((f"{at}name", fn["name"], *e.error))
            _optional(errors, fn, "description", read_str, at)
            _optional(errors, fn, "parameters", read_dict, at)
            _optional(errors, fn, "strict", read_bool, at)
            _optional(errors, fn, "defer_loading", read_bool, at)
        _optional(errors, tool, "defer_loading", read_bool, f"{i}.")
    return errors


class ChatToolsField(fields.Field):
    """``tools: list[ChatCompletionToolsParam] | None`` (``null``: not given; module docstring)."""

    def _deserialize(self, value, attr, data, **kwargs):
        errors = tool_errors(value)
        if errors:
            raise refuse(*errors, more=errors.more)
        return value
