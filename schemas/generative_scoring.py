"""The request of ``POST /generative_scoring``, read as vLLM 0.34's pydantic model reads it.

vLLM's ``GenerativeScoringRequest`` (``vllm/entrypoints/generate/generative_scoring/serving.py``,
an ``OpenAIBaseModel``: unknown keys ignored) declares, in this order::

    model: str | None = None
    query: str | list[int]                        (required)
    items: list[str] | list[list[int]]            (required)
    label_token_ids: list[int]                    (required)
    apply_softmax: bool = True
    item_first: bool = False
    add_special_tokens: bool = True
    cache_salt: str | None = None
    priority: int = Field(0, ge=-2**63, le=2**63 - 1)
    request_id: str = Field(default_factory=random_uuid)

and a before-validator, ``check_cache_salt_support`` (``validate_cache_salt``), that runs on the
raw body first and raises its own ``VLLMValidationError``.  pydantic then validates every field
(lax mode: ``"3"`` and ``3.0`` are the integer 3, ``true`` is 1, ``"yes"`` a boolean) and
reports every error, field by field in declaration order; for a union each member's errors in
turn, all at the field's cleaned location (``body.query``, ``body.items.1``).  vLLM's handler
words them (:func:`generation.adapters.validation.validation_errors`: the first 10 shown, the
rest counted).

Lists of ids are checked in C loops over slices with hub turns between them (a 4 MiB body
holds 2 M ids); only a list that fails is read element by element, for pydantic's messages,
and of its errors only the ones the message shows are kept (a million bad ids are counted,
not held).
"""
from __future__ import annotations


from generation.adapters.fields import INT64_MAX, INT64_MIN
from generation.adapters.generative_scoring import GenerativeScoringRequest
from generation.adapters.validation import Errors, Mismatch, read_bool, read_int, read_str, validation_errors

from .common import TOKEN_SLICE, hub_turn, salted_body

_STRING = ("string_type", "Input should be a valid string")
_LIST = ("list_type", "Input should be a valid list")
_DEFAULTS = {"apply_softmax": True, "item_first": False, "add_special_tokens": True}


def _all_ints(values: list) -> bool:
    """Whether every element is an ``int`` (no ``bool``): ``set(map(type, ...))`` over slices."""
    for lo in range(0, len(values), TOKEN_SLICE):
        if lo:
            hub_turn()
        if not set(map(type, values[lo:lo + TOKEN_SLICE])) <= {int}:
            return False
    return True


def _int_list(loc: tuple, value, errors: Errors):
    """``list[int]`` at ``loc``: the list (its elements read as pydantic's lax ``int``), or None
    with its errors added to ``errors``."""
    if not isinstance(value, list):
        errors.add(loc, value, *_LIST)
        return None
    if _all_ints(value):
        return value
    out, failed = [], False
    for k, v in enumerate(value):
        if k and k % TOKEN_SLICE == 0:
            hub_turn()
        try:
            out.append(read_int(v))
        except Mismatch as e:
            errors.add((*loc, k), v, *e.error)
            failed = True
    return None if failed else out


def _query(value, errors: Errors):
    """``str | list[int]``: ``("text", str)`` or ``("ids", list)``, else both members' errors."""
    if isinstance(value, str):
        return "text", value
    branch = Errors()
    ids = _int_list(("query",), value, branch)
    if ids is not None:
        return "ids", ids
    errors.add("query", value, *_STRING)
    errors.extend(branch)
    return None


def _items(value, errors: Errors):
    """``list[str] | list[list[int]]``: ``("text", [str])`` or ``("ids", [[int]])``, else both
    members' errors (``list[str]``'s elements that are not strings, then ``list[list[int]]``'s)."""
    if not isinstance(value, list):
        errors.add("items", value, *_LIST)
        errors.add("items", value, *_LIST)
        return None
    if set(map(type, value)) <= {str}:
        return "text", value
    texts = Errors()
    for k, v in enumerate(value):
        if not isinstance(v, str):
            texts.add(("items", k), v, *_STRING)
    branch = Errors()
    lists, done = [], 0
    for k, v in enumerate(value):
        lists.append(_int_list(("items", k), v, branch))
        done += len(v) if isinstance(v, list) else 1
        if done >= TOKEN_SLICE:            # many short lists: a hub turn per slice's worth of ids
            hub_turn()
            done = 0
    if not branch.count:
        return "ids", lists
    errors.extend(texts)
    errors.extend(branch)
    return None


def _read(errors: Errors, loc: str, value, read, nullable: bool = False):
    """One scalar field: ``read(value)`` (None stays None when ``nullable``), or None with its
    error added."""
    if value is None and nullable:
        return None
    try:
        return read(value)
    except Mismatch as e:
        errors.add(loc, value, *e.error)
        return None


def read_priority(value) -> int:
    """``int`` with pydantic's ``Field(ge=-2**63, le=2**63 - 1)``."""
    v = read_int(value)
    if v < INT64_MIN:
        raise Mismatch("greater_than_equal", f"Input should be greater than or equal to {INT64_MIN}",
                       {"ge": INT64_MIN})
    if v > INT64_MAX:
        raise Mismatch("less_than_equal", f"Input should be less than or equal to {INT64_MAX}", {"le": INT64_MAX})
    return v


def load_generative_scoring(body) -> GenerativeScoringRequest:
    """The typed request of a decoded JSON body.  Raises InvalidParam: ``cache_salt``'s own
    error first (``validate_cache_salt``, named ``cache_salt``), else pydantic's errors as vLLM's
    validation handler words them (``param`` the first one's location)."""
    errors = salted_body(body)
    out = {"model": _read(errors, "model", body.get("model"), read_str, nullable=True)}
    for name, read in (("query", _query), ("items", _items)):
        if name in body:
            out[name] = read(body[name], errors)
        else:
            errors.add(name, body, "missing", "Field required")
    if "label_token_ids" in body:
        out["label_token_ids"] = _int_list(("label_token_ids",), body["label_token_ids"], errors)
    else:
        errors.add("label_token_ids", body, "missing", "Field required")
    for name, default in _DEFAULTS.items():
        out[name] = _read(errors, name, body[name], read_bool) if name in body else default
    out["cache_salt"] = body.get("cache_salt")          # a string or None (checked above)
    if "priority" in body:
        out["priority"] = _read(errors, "priority", body["priority"], read_priority)
    if "request_id" in body:
        out["request_id"] = _read(errors, "request_id", body["request_id"], read_str)
    if errors.count:
        raise validation_errors(errors.kept, total=errors.count)
    return GenerativeScoringRequest(**out)
