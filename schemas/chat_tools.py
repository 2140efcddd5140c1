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

from .refusal import Capped, model_type_error, read_key, refuse

TOOL, FUNCTION = "ChatCompletionToolsParam", "FunctionDefinition"
_FUNCTION_TYPE = literal_mismatch(("function",)).error


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
            errors.append(model_type_error(str(i), tool, TOOL))
            continue
        if tool.get("type", "function") != "function":
            errors.append((f"{i}.type", tool["type"], *_FUNCTION_TYPE))
        fn = tool.get("function")
        if "function" not in tool:
            read_key(errors, tool, "function", read_dict, True, f"{i}.")       # missing
        elif not isinstance(fn, dict):
            errors.append(model_type_error(f"{i}.function", fn, FUNCTION))
        else:
            at = f"{i}.function."
            read_key(errors, fn, "name", read_str, True, at)
            read_key(errors, fn, "description", read_str, path=at)
            read_key(errors, fn, "parameters", read_dict, path=at)
            read_key(errors, fn, "strict", read_bool, path=at)
            read_key(errors, fn, "defer_loading", read_bool, path=at)
        read_key(errors, tool, "defer_loading", read_bool, path=f"{i}.")
    return errors


class ChatToolsField(fields.Field):
    """``tools: list[ChatCompletionToolsParam] | None`` (``null``: not given; module docstring)."""

    def _deserialize(self, value, attr, data, **kwargs):
        errors = tool_errors(value)
        if errors:
            raise refuse(*errors, more=errors.more)
        return value
