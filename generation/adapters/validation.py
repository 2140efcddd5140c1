"""vLLM 0.34's words for a request field pydantic refuses, and pydantic's reading of the types
vLLM's request models declare.

vLLM validates a body with pydantic (python mode, lax: ``"yes"`` is a boolean, ``"1.5"`` a
number) and answers a failure with its validation handler
(``serve/exception_handling/handlers/validation.py``: ``validation_exception_handler``): ``N
validation error(s):`` and one line per error (at most 10, each cut at 1,000 characters), the
error's ``loc`` cleaned to a dotted path (``body.stop``, ``query.level``) that is also the
answer's ``param``.  The readers below (``read_bool``, ``read_float``, ...) accept what pydantic
accepts and raise :class:`Mismatch` with pydantic's error type and message otherwise; the schema
fields of :mod:`schemas.lax` and the nested checks here turn that into the 400."""
from __future__ import annotations

import json
import math
import re

import contextvars

from ..errors import InvalidParam, RequestInvalid
from .wide_ints import exact_integer

BODY_BYTES = contextvars.ContextVar("body_bytes", default=0)   # the JSON body being read: its size in bytes

MAX_INPUT_CHARS = 200         # the handler's _MAX_ERROR_INPUT_CHARS: an echoed ``input`` is cut here
MAX_REPORTED_ERRORS = 10      # _MAX_REPORTED_ERRORS
MAX_ERROR_CHARS = 1000        # _MAX_ERROR_CHARS: one error's line


def error_input(value):
    """A field's value as vLLM 0.34's validation handler echoes it (``_summarize_error_input``):
    a string as it is (cut at 200 characters), a container as ``<list of N items>``, anything
    else as its ``str``."""
    if isinstance(value, str):
        return value if len(value) <= MAX_INPUT_CHARS else value[:MAX_INPUT_CHARS] + "...[truncated]"
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    if value.__class__ is float and value.is_integer() and abs(value) >= _I64:
        value = exact_integer(value) or value       # orjson's float of a wider integer literal: its digits
    text = str(value)
    return text if len(text) <= MAX_INPUT_CHARS else text[:MAX_INPUT_CHARS] + "...[truncated]"


# the handler's _INTERNAL_LOC_MARKERS: pydantic-core's schema kinds, dropped from a loc (even where
# they are a field's or a key's name), as is any segment with a bracket
_LOC_MARKERS = frozenset((
    "function-wrap", "function-after", "function-before", "function-plain", "json-or-python", "lax-or-strict",
    "chain", "default", "nullable", "tagged-union", "union", "call", "arguments", "is-instance", "is-subclass",
    "callable", "str", "int", "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
    "complex", "none", "nonetype"))
_BRACKETED = re.compile(r"[\[\]{}()]")


def clean_loc(loc: str) -> str:
    """``clean_loc_for_param`` of a dotted ``loc``: its segments that name pydantic-core's
    internals left out (all of them kept when nothing else would remain)."""
    parts = loc.split(".")
    kept = [p for p in parts if p.lower() not in _LOC_MARKERS and not _BRACKETED.search(p)]
    return ".".join(kept) if kept else loc


def validation_errors(errors: list, where: str = "body", total: int | None = None) -> InvalidParam:
    """The handler's 400 for ``errors``, each ``(loc, value, type, msg)`` or ``(loc, value, type,
    msg, ctx)`` with ``loc`` the dotted path below ``where`` (``body`` for a JSON or form field,
    ``query`` for a query parameter), cleaned as the handler cleans it (:func:`clean_loc`);
    ``param`` is the first error's location.  ``total``: how many errors there were, when
    ``errors`` holds only the first ones (at least the :data:`MAX_REPORTED_ERRORS` the message
    shows)."""
    count = len(errors) if total is None else total
    label = "error" if count == 1 else "errors"
    lines = []
    for loc, value, kind, msg, *ctx in errors[:MAX_REPORTED_ERRORS]:
        error = {"type": kind, "loc": clean_loc(_below(where, loc)), "msg": msg, "input": error_input(value)}
        if ctx:
            error["ctx"] = ctx[0]
        text = str(error)
        lines.append(f"  {text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + '...[truncated]'}")
    if count > MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {count - MAX_REPORTED_ERRORS} more {label}")
    return RequestInvalid(f"{count} validation {label}:\n" + "\n".join(lines), clean_loc(_below(where, errors[0][0])))


def _below(where: str, loc: str) -> str:
    """``loc`` below ``where``; an empty ``loc`` is ``where`` itself (FastAPI's ``("body",)``: the
    body as a whole)."""
    return f"{where}.{loc}" if loc != "" else where


# ---- the body as a whole -----------------------------------------------------------------------
# What vLLM 0.34 answers on a route whose body is a request model (``request: ChatCompletionRequest``)
# when the body itself is wrong; FastAPI (with the strict Content-Type check vLLM 0.34 runs on:
# ``scale_out/token_in_token_out/api_router.py:94``) raises each as a RequestValidationError, which
# the validation handler formats as for a field.

NOT_AN_OBJECT = ("model_attributes_type", "Input should be a valid dictionary or object to extract fields from")


def body_missing() -> RequestInvalid:
    """An empty body: FastAPI leaves it ``Undefined`` (``fastapi/routing.py``
    ``get_request_handler``: ``if body_bytes:``), and the required body field is
    ``get_missing_field_error(("body",))`` (``dependencies/utils.py``
    ``_validate_value_with_model_field``), its ``input`` set to None."""
    return validation_errors([("", None, "missing", "Field required")])


def body_json_invalid(msg: str, pos: int) -> RequestInvalid:
    """A body ``json.loads`` refuses (FastAPI reads a JSON body with ``request.json()``):
    ``fastapi/routing.py`` ``get_request_handler``'s ``except json.JSONDecodeError``, the error
    ``{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error", "input": {},
    "ctx": {"error": e.msg}}``; ``param`` ``body.<pos>``."""
    return validation_errors([(str(pos), {}, "json_invalid", "JSON decode error", {"error": msg})])


JSON_WORDS_MAX = 256 << 10   # json.loads on the hub: ~6 ms at most (a 4 MiB body took ~90 ms)


def body_unparsable(raw: bytes, e: ValueError) -> RequestInvalid:
    """The 400 for a body orjson refused (``blueprints.common.loads_body``): FastAPI's
    ``json_invalid`` with Python's ``json`` words and position where ``json.loads`` refuses it
    too (worked out on this path only, for a body up to :data:`JSON_WORDS_MAX`); else (``NaN``,
    ``1e400``, a lone surrogate, 1024 levels, not UTF-8, a larger body) the simulator's own
    message."""
    if len(raw) <= JSON_WORDS_MAX:
        try:
            json.loads(raw)
        except json.JSONDecodeError as d:
            return body_json_invalid(d.msg, d.pos)
        except (ValueError, RecursionError):
            pass
    return RequestInvalid(f"Failed to parse the request body as JSON: {e}")


def body_not_an_object(value, members: int = 1) -> RequestInvalid:
    """A JSON body that is not an object (``[1]``, ``"x"``, ``3``, ``null``): pydantic validates
    it against the route's model (``TypeAdapter.validate_python(value, from_attributes=True)``,
    FastAPI's ``ModelField.validate``), after the model's before-validators, which vLLM's request
    models all guard with ``if not isinstance(data, dict): return data``: ``model_attributes_type``
    at ``body``.  ``members``: the models of a union body (``EmbeddingRequest``'s 5), one error
    each, their union tags (``function-wrap[__log_extra_fields__()]``, OpenAIBaseModel's wrap
    validator) dropped from the loc by the handler."""
    return validation_errors([("", value, *NOT_AN_OBJECT)] * members)


class Errors:
    """pydantic's errors in order, ``(loc, value, type, msg[, ctx])``: the first
    :data:`MAX_REPORTED_ERRORS` kept (all that vLLM's handler shows), every one counted.  ``loc``
    may be given as a tuple of parts, joined with dots only when the error is kept."""

    def __init__(self):
        self.kept: list = []
        self.count = 0

    def add(self, loc, value, *error) -> None:
        self.count += 1
        if len(self.kept) < MAX_REPORTED_ERRORS:
            self.kept.append((loc if isinstance(loc, str) else ".".join(map(str, loc)), value, *error))

    def extend(self, other: "Errors") -> None:
        """``other``'s errors after these."""
        for e in other.kept[:MAX_REPORTED_ERRORS - len(self.kept)]:
            self.kept.append(e)
        self.count += other.count


def pydantic_error(param: str, value, *errors: tuple, where: str = "body") -> InvalidParam:
    """:func:`validation_errors` of ``errors`` (``(type, msg)`` or ``(type, msg, ctx)``), all on
    ``value`` at ``param`` (``stop``, ``vllm_xargs.a``, ``level``)."""
    return validation_errors([(param, value, *e) for e in errors], where)


def literal_error(param: str, value, choices, where: str = "body") -> InvalidParam:
    """pydantic's ``literal_error`` for a ``Literal[...]`` field (``Input should be 'a', 'b' or
    'c'``, the same words in ``ctx.expected``)."""
    return pydantic_error(param, value, literal_mismatch(choices).error, where=where)


def read_fields(body: dict, fields, missing_input="body") -> dict:
    """``body``'s ``fields`` (``(name, reader, default)``; no default: required) as pydantic reads
    a request model's: each value through its reader (a :class:`Mismatch` is that field's error),
    a null taking a default of None; all the errors in field order as vLLM's validation handler
    answers them (``body.<field>``: raises the 400).  A missing field's error quotes
    ``missing_input``: the body itself (``"body"``, a model body: FastAPI's input is the object)
    or None (FastAPI's ``Body(embed=True)`` fields)."""
    errors, out = Errors(), {}
    for name, read, *default in fields:
        if name not in body:
            if not default:
                errors.add(name, body if missing_input == "body" else missing_input, "missing", "Field required")
            else:
                out[name] = default[0]
            continue
        value = body[name]
        if value is None and default and default[0] is None:
            out[name] = None
            continue
        try:
            out[name] = read(value)
        except Mismatch as m:
            errors.add(name, value, *m.error)
    if errors.count:
        raise validation_errors(errors.kept, total=errors.count)
    return out


class Mismatch(Exception):
    """A value pydantic refuses for a type: ``error`` is its ``(type, msg[, ctx])``."""

    def __init__(self, *error):
        super().__init__(error[1])
        self.error = error


def literal_mismatch(choices) -> Mismatch:
    quoted = [repr(c) for c in choices]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return Mismatch("literal_error", f"Input should be {expected}", {"expected": expected})


_TRUE = frozenset(("1", "on", "t", "true", "y", "yes"))
_FALSE = frozenset(("0", "off", "f", "false", "n", "no"))
_BOOL_PARSING = ("bool_parsing", "Input should be a valid boolean, unable to interpret input")
_I64 = 2 ** 63
_INT_STR = re.compile(r"\s*[+-]?\d(?:_?\d)*(?:\.0*)?\s*")
_MAX_INT_DIGITS = 4300        # pydantic-core's (and Python's int_max_str_digits)


def read_bool(v) -> bool:
    """``bool``: a boolean, ``0`` / ``1`` (also as floats), or one of pydantic's words (``true``,
    ``yes``, ``on``, ``t``, ``y``, ``1`` and their negatives, any case, no spaces).  Another
    number is pydantic's ``bool_parsing`` when it is an integer within int64 (``2``, ``1000.0``),
    else ``bool_type`` (``1.5``, ``2**63``, ``1e20``), as pydantic-core reads it as an i64 first."""
    if v is True or v is False:
        return v
    if isinstance(v, str):
        low = v.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise Mismatch(*_BOOL_PARSING)
    if isinstance(v, int):
        if v in (0, 1):
            return bool(v)
        if -_I64 <= v < _I64:
            raise Mismatch(*_BOOL_PARSING)
    elif isinstance(v, float):
        if v in (0.0, 1.0):
            return bool(v)
        if v.is_integer() and -_I64 < v < _I64:
            raise Mismatch(*_BOOL_PARSING)
    raise Mismatch("bool_type", "Input should be a valid boolean")


def read_float(v) -> float:
    """``float``: a number (a boolean counts, as 0.0 / 1.0) or a string ``float`` reads
    (surrounding spaces allowed); not an integer too large for a float."""
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            raise Mismatch("float_type", "Input should be a valid number") from None
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            raise Mismatch("float_parsing", "Input should be a valid number, unable to parse string as a number") \
                from None
    raise Mismatch("float_type", "Input should be a valid number")


def read_int(v) -> int:
    """``int``: an integer (a boolean counts), a float without a fractional part within int64
    (orjson reads a JSON integer past 64 bits as one), or a string of digits (``"3"``, ``" 3 "``,
    ``"3.0"``, ``"1_000"``) of at most 4,300 digits (pydantic's ``int_parsing_size`` past that: a
    form field of 5,000 digits was a 500 from Python's own int() limit)."""
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Mismatch("finite_number", "Input should be a finite number")
        if not v.is_integer():
            raise Mismatch("int_from_float", "Input should be a valid integer, got a number with a fractional part")
        if not -_I64 < v < _I64:          # pydantic-core takes a float as an i64 only
            exact = exact_integer(v)      # unless orjson made it of a wider integer literal
            if exact is not None and exact is not v:
                return exact
            raise Mismatch("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size")
        return int(v)
    if isinstance(v, str):
        if _INT_STR.fullmatch(v):
            # pydantic-core's bound on a string's digits (leading zeros, "+", "_" and ".0" not
            # counted, "-" counted); Python's int() refuses past 4300 digits with a ValueError
            text = v.strip().split(".")[0].replace("_", "")
            sign = "-" if text[0] == "-" else ""
            digits = text.lstrip("+-").lstrip("0") or "0"
            if len(sign) + len(digits) > _MAX_INT_DIGITS:
                raise Mismatch("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size")
            return int(sign + digits)
        raise Mismatch("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
    raise Mismatch("int_type", "Input should be a valid integer")


def read_str(v) -> str:
    """``str``: a string (pydantic's lax mode takes no number or boolean for one)."""
    if isinstance(v, str):
        return v
    raise Mismatch("string_type", "Input should be a valid string")


def read_dict(v) -> dict:
    if isinstance(v, dict):
        return v
    raise Mismatch("dict_type", "Input should be a valid dictionary")


def read_list(v) -> list:
    if isinstance(v, list):
        return v
    raise Mismatch("list_type", "Input should be a valid list")
