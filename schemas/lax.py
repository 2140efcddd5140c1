"""Fields of vLLM's request models that the simulator only checks, read as pydantic reads them
(:mod:`generation.adapters.validation`) and refused in vLLM's validation handler's words: the
400 ``1 validation error: {'type': ..., 'loc': 'body.<field>', ...}`` with ``param``
``body.<field>`` (a :class:`~schemas.common.Refused` error, listed with the body's other
field errors by :func:`schemas.common.load`).

A field is read only when the body carries it (:func:`schemas.common.load` loads the fields
present), so a request without them pays nothing.  ``null`` is "not given" where vLLM's type is
optional and pydantic's type error where it is not (``length_penalty: float = 1.0``,
``mm_payload: Literal[...]``, ``spaces_between_special_tokens: bool``)."""
from __future__ import annotations

from marshmallow import fields

from generation.adapters.validation import Mismatch, read_bool, read_dict, read_float, read_int, read_list, read_str
from generation.errors import InvalidParam

from .common import Literal, NullableField, read_as_pydantic, refuse


class Lax(NullableField):
    """One value read by ``reader`` (``read_bool``, ``read_float``, ...); ``nullable=False``:
    ``null`` is refused as pydantic refuses it for a non-optional field."""

    def __init__(self, reader, *, nullable: bool = True, **kwargs):
        super().__init__(nullable=nullable, **kwargs)
        self.reader = reader

    def _deserialize(self, value, attr, data, **kwargs):
        return read_as_pydantic(self.reader, value)


def lax_bool(nullable: bool = True) -> Lax:
    return Lax(read_bool, nullable=nullable)


def lax_float(nullable: bool = True, ge: float | None = None, le: float | None = None) -> Lax:
    """``float``, with pydantic's ``Field(ge=..., le=...)`` when given (its message shows an
    integral bound without ``.0``, its ``ctx`` the float)."""
    if ge is None and le is None:
        return Lax(read_float, nullable=nullable)

    def read(v):
        x = read_float(v)
        if ge is not None and x < ge:
            raise Mismatch("greater_than_equal", f"Input should be greater than or equal to {_shown(ge)}", {"ge": ge})
        if le is not None and x > le:
            raise Mismatch("less_than_equal", f"Input should be less than or equal to {_shown(le)}", {"le": le})
        return x
    return Lax(read, nullable=nullable)


def _shown(bound: float):
    return int(bound) if float(bound).is_integer() else bound


def lax_int() -> Lax:
    return Lax(read_int)


def lax_str(min_length: int | None = None, max_length: int | None = None) -> Lax:
    """``str``, with pydantic's ``Field(min_length=..., max_length=...)`` when given."""
    if min_length is None and max_length is None:
        return Lax(read_str)

    def read(v):
        text = read_str(v)
        if min_length is not None and len(text) < min_length:
            raise Mismatch("string_too_short", f"String should have at least {min_length} "
                           f"character{'' if min_length == 1 else 's'}", {"min_length": min_length})
        if max_length is not None and len(text) > max_length:
            raise Mismatch("string_too_long", f"String should have at most {max_length} "
                           f"character{'' if max_length == 1 else 's'}", {"max_length": max_length})
        return text
    return Lax(read)


def lax_dict() -> Lax:
    return Lax(read_dict)


def lax_literal(*choices, nullable: bool = False) -> Literal:
    """``Literal[choices]`` (pydantic's ``literal_error``: ``Input should be 'a' or 'b'``): the
    shared :class:`schemas.common.Literal`."""
    return Literal(*choices, nullable=nullable)


def _collect(items, read, where: str = "") -> list:
    """pydantic's errors of ``read`` on each ``(path, value)`` of ``items`` (all of them, as
    pydantic reports every failing item), as :class:`~schemas.common.Refused` errors below the
    field (``where``: a path below it, ``"3."``)."""
    errors = []
    for path, v in items:
        try:
            read(v)
        except Mismatch as e:
            errors.append((f"{where}{path}", v, *e.error))
    return errors


class DictOfDicts(fields.Field):
    """``dict[str, dict[str, Any]]`` (vLLM's ``media_io_kwargs``: kwargs per modality)."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_dict, value)
        errors = _collect(value.items(), read_dict)
        if errors:
            raise refuse(*errors)
        return value


class StrDict(fields.Field):
    """``dict[str, str]`` (the openai SDK's ``Metadata``, the Responses API's ``metadata``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_dict, value)
        errors = _collect(value.items(), read_str)
        if errors:
            raise refuse(*errors)
        return value


class ListOfStrDicts(fields.Field):
    """``list[dict[str, str]]`` (chat's ``documents``, the RAG documents a template may read)."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_list, value)
        errors = []
        for i, doc in enumerate(value):
            if not isinstance(doc, dict):
                errors.append((str(i), doc, "dict_type", "Input should be a valid dictionary"))
            else:
                errors.extend(_collect(doc.items(), read_str, f"{i}."))
        if errors:
            raise refuse(*errors)
        return value


REPETITION_FIELDS = ("max_pattern_size", "min_pattern_size", "min_count")


class RepetitionDetection(fields.Field):
    """vLLM 0.34's ``repetition_detection`` (``sampling_params.py``: ``RepetitionDetectionParams``,
    a pydantic dataclass of three ints defaulting to 0; other keys ignored): an object (pydantic's
    ``dataclass_type`` otherwise), its ints read as pydantic reads them, then its
    ``__post_init__`` checks in their words (vLLM raises them without a parameter; the simulator
    names the field, after ``where``: ``"sampling_params."`` in a generate request).  Loads into
    ``{name: int}`` with the defaults filled in."""

    def __init__(self, where: str = "", **kwargs):
        super().__init__(**kwargs)
        self.where = where

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise refuse(("", value, "dataclass_type", "Input should be a dictionary or an instance of "
                          "RepetitionDetectionParams", {"class_name": "RepetitionDetectionParams"}))
        errors = _collect(((k, value[k]) for k in REPETITION_FIELDS if k in value), read_int)
        if errors:
            raise refuse(*errors)
        attr = self.where + attr
        p = {k: read_int(value[k]) if k in value else 0 for k in REPETITION_FIELDS}
        if p["max_pattern_size"] < 0 or p["min_pattern_size"] < 0 or p["min_pattern_size"] > p["max_pattern_size"]:
            raise InvalidParam("max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= "
                               "max_pattern_size. Set both to 0 to disable repetitive pattern detection.", attr)
        if p["max_pattern_size"] > 0 and p["min_count"] < 2:
            raise InvalidParam("min_count must be >= 2 to detect repetitive patterns in engine output. If you do not "
                               "wish to detect repetitive patterns, set max_pattern_size to 0.", attr)
        return p


MM_PAYLOADS = ("tensors", "none")       # vLLM 0.34's MMPayload (generate/base/protocol.py)


def mm_payload(raw: dict) -> str:
    """The request's ``mm_payload`` (checked by its schema: ``lax_literal(*MM_PAYLOADS)``), its
    default ``tensors``, or ``none`` for the deprecated ``return_mm_kwargs: false`` when
    ``mm_payload`` is not given (vLLM's ``resolve_return_mm_kwargs_alias``, on the raw body)."""
    value = raw.get("mm_payload")
    if value is not None:
        return value
    return "none" if raw.get("return_mm_kwargs") is False else "tensors"


__all__ = ["Lax", "lax_bool", "lax_float", "lax_int", "lax_str", "lax_dict", "lax_literal", "DictOfDicts", "ListOfStrDicts",
           "RepetitionDetection", "MM_PAYLOADS", "mm_payload"]
