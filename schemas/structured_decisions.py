"""The request of ``POST /v1/systemone``, read as vLLM 0.34's pydantic model reads it.

vLLM's ``StructuredDecisionRequest`` (``vllm/entrypoints/generate/structured_decisions/
protocol.py``) forbids unknown keys; its fields, in order::

    model: str | None = None
    state: Any                                   (required)
    questions: dict[str, QuestionSpec]           (required; an id -> question, in order)
    instructions: str | None = None
    images / audio / videos: list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    joint: StrictBool = False
    cache_salt: str | None = None                (its own validator first, as on every route)
    priority: int = Field(0, ge=-2**63, le=2**63 - 1)
    request_id: str = Field(default_factory=random_uuid)

``QuestionSpec`` is ``{"type": str (required), "instructions": Any = "", "criteria": Any =
None}`` and takes unknown keys (an ``OpenAIBaseModel``), which the handler refuses afterwards,
naming them.  pydantic's errors in field order, an unknown key's after the fields, worded by
vLLM's handler (:func:`generation.adapters.validation.validation_errors`).
"""
from __future__ import annotations

from generation.adapters.structured_decisions import QuestionSpec, StructuredDecisionRequest
from generation.adapters.validation import Errors, Mismatch, validation_errors

from .common import salted_body
from .decisions import _BOOL, _LIST, _STRING, _extras, _field, _model
from .generative_scoring import read_priority

_FIELDS = ("model", "state", "questions", "instructions", "images", "audio", "videos", "chat_template_kwargs",
           "joint", "cache_salt", "priority", "request_id")
_DICT = ("dict_type", "Input should be a valid dictionary")


def _str(errors: Errors, loc: tuple, value):
    if isinstance(value, str):
        return value
    errors.add(loc, value, *_STRING)
    return None


def _spec(errors: Errors, loc: tuple, value) -> QuestionSpec | None:
    if not _model(errors, loc, value, "QuestionSpec"):
        return None
    kind = _field(errors, loc, value, "type", _str)
    if kind is None:
        return None
    extra = tuple(k for k in value if k not in ("type", "instructions", "criteria"))
    return QuestionSpec(kind, value.get("instructions", ""), value.get("criteria"), extra)


def _questions(errors: Errors, loc: tuple, value) -> dict | None:
    if not isinstance(value, dict):
        errors.add(loc, value, *_DICT)
        return None
    before = errors.count
    out = {k: _spec(errors, (*loc, k), v) for k, v in value.items()}
    return None if errors.count > before else out


def _urls(errors: Errors, loc: tuple, value) -> list | None:
    """``list[str] | None``."""
    if value is None:
        return None
    if not isinstance(value, list):
        errors.add(loc, value, *_LIST)
        return None
    for k, v in enumerate(value):
        if not isinstance(v, str):
            errors.add((*loc, k), v, *_STRING)
    return value


def load_structured_decision(body) -> StructuredDecisionRequest:
    """The typed request of a decoded JSON body.  Raises InvalidParam: ``cache_salt``'s own
    error first, else pydantic's errors as vLLM's validation handler words them."""
    errors = salted_body(body)
    out: dict = {}
    if body.get("model") is not None:
        out["model"] = _str(errors, ("model",), body["model"])
    out["state"] = _field(errors, (), body, "state", lambda _e, _l, v: v)
    out["questions"] = _field(errors, (), body, "questions", _questions)
    if body.get("instructions") is not None:
        out["instructions"] = _str(errors, ("instructions",), body["instructions"])
    for name in ("images", "audio", "videos"):
        out[name] = _urls(errors, (name,), body.get(name))
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        errors.add(("chat_template_kwargs",), kwargs, *_DICT)
    out["chat_template_kwargs"] = kwargs
    joint = body.get("joint", False)
    if not isinstance(joint, bool):
        errors.add(("joint",), joint, *_BOOL)
    out["joint"] = joint
    out["cache_salt"] = body.get("cache_salt")
    if "priority" in body:
        try:
            out["priority"] = read_priority(body["priority"])
        except Mismatch as e:
            errors.add(("priority",), body["priority"], *e.error)
    if "request_id" in body:
        out["request_id"] = _str(errors, ("request_id",), body["request_id"])
    _extras(errors, (), body, _FIELDS)
    if errors.count:
        raise validation_errors(errors.kept, total=errors.count)
    return StructuredDecisionRequest(**out)
