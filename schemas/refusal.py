"""How a failed load is answered (:func:`schemas.common.load`): marshmallow's error dict walked in
the order pydantic reports a vLLM model's errors, pydantic's errors (:class:`Refused`) listed in
vLLM's validation handler's words (:func:`~generation.adapters.validation.validation_errors`),
the simulator's own wording answered alone where it comes first."""
from __future__ import annotations

from marshmallow import ValidationError, fields

from generation.adapters.validation import Errors, validation_errors
from generation.errors import InvalidParam, SimulatorError


class Refused:
    """A field's value pydantic refuses, as a leaf of marshmallow's error tree: ``errors`` are
    pydantic's ``(subpath, input, type, msg[, ctx])`` (``subpath`` ``""`` for the field itself,
    ``"3"`` for its item 3).  :func:`~schemas.common.load` words them as vLLM's validation handler
    (:func:`~generation.adapters.validation.validation_errors`) at the field's path in the body,
    nested schemas and list indexes included."""
    __slots__ = ("errors",)

    def __init__(self, *errors):
        self.errors = errors

    def __str__(self):
        return self.errors[0][3]


def refuse(*errors) -> ValidationError:
    """The marshmallow error of a field pydantic refuses with ``errors`` (:class:`Refused`)."""
    return ValidationError([Refused(*errors)])


def _nested(schema, key):
    """The schema that words the errors under ``key`` of ``schema``'s error dict (a
    ``Nested`` field's, or a list of them), or None."""
    field = schema.fields.get(key) if schema is not None else None
    field = getattr(field, "inner", field)
    return field.schema if isinstance(field, fields.Nested) else None


def _leaves(messages, schema, body, parts=()):
    """``(path, leaf)`` of every error in a marshmallow error dict, in pydantic's order: a
    schema's fields in its model's order (:meth:`~schemas.common.BaseSchema.field_order`; its ``_schema``
    errors first, fields it does not order after the rest, as marshmallow met them), list
    items by index, a field's own errors as it raised them."""
    if isinstance(messages, dict):
        items = messages.items()
        if getattr(schema, "field_rank", None) is not None and not all(isinstance(k, int) for k in messages):
            rank = schema.field_rank(body if isinstance(body, dict) else {})
            items = sorted(items, key=lambda kv: rank.get(kv[0], len(rank)))
        for k, v in items:
            if k == "_schema":
                yield from _leaves(v, None, None, parts)
            elif isinstance(k, int):
                yield from _leaves(v, schema, body[k] if isinstance(body, list) and k < len(body) else None,
                                   (*parts, k))
            else:
                yield from _leaves(v, _nested(schema, k), body.get(k) if isinstance(body, dict) else None,
                                   (*parts, k))
    elif isinstance(messages, list):
        for m in messages:
            yield from _leaves(m, schema, body, parts)
    else:
        yield parts, messages


def _refusal(schema, messages, body):
    """The 400 of a failed load (marshmallow's error dict ``messages``): when the first error in
    pydantic's order is pydantic's (:class:`Refused`), vLLM's validation handler's answer
    listing every :class:`Refused` error in that order (:func:`validation_errors`: ten shown,
    all counted); otherwise that first error alone in the simulator's words, ``path: message``
    with ``param`` the path (``messages[0].content``), as vLLM words it differently and the
    simulator has no pydantic wording for it.  The simulator's own errors after a pydantic one
    are left out (they have no line of pydantic's to show).  A request validator's error that a
    field met (``LogprobCount``) is answered alone, as pydantic lets it through."""
    for _, leaf in _leaves(messages, schema, body):
        if isinstance(leaf, SimulatorError):
            return leaf          # a request validator's, found reading a field (LogprobCount)
    errors = Errors()
    for parts, leaf in _leaves(messages, schema, body):
        if not isinstance(leaf, Refused):
            if errors.count:
                continue
            path = ""
            for k in parts:
                path = f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else str(k))
            return InvalidParam(f"{path}: {leaf}" if path else str(leaf), path or None)
        for sub, *e in leaf.errors:
            errors.add((*parts, sub) if sub else parts, *e)
    return validation_errors(errors.kept, total=errors.count)
