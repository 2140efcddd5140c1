"""Chat's and completions' ``response_format`` as pydantic reads vLLM 0.34's
``AnyResponseFormat | None`` (``generate/base/protocol.py:137-178``): the union ``ResponseFormat
| StructuralTagResponseFormat | LegacyStructuralTagResponseFormat``, each an ``OpenAIBaseModel``
(extra keys allowed, a wrap validator whose union tag the validation handler drops from the
``loc``).  A value none of them takes is every member's errors, in the union's order, in vLLM's
validation handler's words (``N validation errors:``, ``type`` "Bad Request", ``param``
``body.response_format...``): a non-object is three ``model_type`` errors, an unknown ``type``
(``"xml"``) six, a ``json_schema`` without its ``name`` six too.  A value a member takes passes
here; the simulator's own checks (the schema's validity, a non-empty ``name``) run after, as
before."""
from __future__ import annotations

from marshmallow import fields

from generation.adapters.validation import MAX_REPORTED_ERRORS, literal_mismatch, read_bool, read_dict, read_str

from .refusal import MISSING, Capped, model_type_error, read_key, refuse

MEMBERS = ("ResponseFormat", "StructuralTagResponseFormat", "LegacyStructuralTagResponseFormat")
FORMAT_TYPES = ("text", "json_object", "json_schema")          # ResponseFormat.type
TAG_TYPES = ("structural_tag",)                                 # both structural-tag members' type


def _type(errors: list, value: dict, choices) -> None:
    if "type" not in value:
        errors.append(("type", value, *MISSING))
    elif not (isinstance(value["type"], str) and value["type"] in choices):
        errors.append(("type", value["type"], *literal_mismatch(choices).error))


def _json_schema(errors: list, value: dict) -> None:
    """``ResponseFormat.json_schema: JsonSchemaResponseFormat | None`` (``name: str``,
    ``description: str | None``, ``schema`` (alias): ``dict | None``, ``strict: bool | None``)."""
    js = value.get("json_schema")
    if js is None:
        return
    if not isinstance(js, dict):
        errors.append(model_type_error("json_schema", js, "JsonSchemaResponseFormat"))
        return
    read_key(errors, js, "name", read_str, True, "json_schema.")
    read_key(errors, js, "description", read_str, path="json_schema.")
    read_key(errors, js, "schema", read_dict, path="json_schema.")
    read_key(errors, js, "strict", read_bool, path="json_schema.")


def _legacy_tag(errors: list, value: dict) -> None:
    """``structures: list[LegacyStructuralTag]`` (``begin: str``, ``schema`` (alias): ``dict |
    None``, ``end: str``) and ``triggers: list[str]``."""
    for key in ("structures", "triggers"):
        if key not in value:
            errors.append((key, value, *MISSING))
            continue
        items = value[key]
        if not isinstance(items, list):
            errors.append((key, items, "list_type", "Input should be a valid list"))
            continue
        if key == "triggers":             # list[str]: read_str refuses whatever is not a str
            for i, item in enumerate(items):
                if not isinstance(item, str):
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append((f"triggers.{i}", item, "string_type", "Input should be a valid string"))
                    else:
                        errors.more += 1        # counted, not built (Capped)
            continue
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                errors.append(model_type_error(f"structures.{i}", item, "LegacyStructuralTag"))
            else:
                read_key(errors, item, "begin", read_str, True, f"structures.{i}.")
                read_key(errors, item, "schema", read_dict, path=f"structures.{i}.")
                read_key(errors, item, "end", read_str, True, f"structures.{i}.")


def response_format_errors(value) -> list:
    """pydantic's errors for ``value`` as ``AnyResponseFormat`` (``(subpath, input, type, msg[,
    ctx])``): ``[]`` when a member takes it, else every member's errors in the union's order
    (pydantic's smart-mode union reports them all; a :class:`~.refusal.Capped` list past a
    non-object: the first ten, the rest in its ``more``)."""
    if not isinstance(value, dict):
        return [model_type_error("", value, cls) for cls in MEMBERS]
    plain = Capped()
    _type(plain, value, FORMAT_TYPES)                  # ResponseFormat
    _json_schema(plain, value)
    if not plain:
        return []
    tag = Capped()
    _type(tag, value, TAG_TYPES)                       # StructuralTagResponseFormat
    if "format" not in value:
        tag.append(("format", value, *MISSING))
    if not tag:
        return []
    legacy = Capped()
    _type(legacy, value, TAG_TYPES)                    # LegacyStructuralTagResponseFormat
    _legacy_tag(legacy, value)
    if not legacy:
        return []
    return plain.then(tag, legacy)


class ResponseFormatField(fields.Field):
    """``response_format: AnyResponseFormat | None`` (``null``: not given)."""

    def _deserialize(self, value, attr, data, **kwargs):
        errors = response_format_errors(value)
        if errors:
            raise refuse(*errors, more=getattr(errors, "more", 0))
        return value


__all__ = ["ResponseFormatField", "response_format_errors"]
