"""How a failed load is answered (:func:`schemas.common.load`): marshmallow's error dict walked in
the order pydantic reports a vLLM model's errors, pydantic's errors (:class:`Refused`) listed in
vLLM's validation handler's words (:func:`~generation.adapters.validation.validation_errors`),
the simulator's own wording answered alone where it comes first; a required field the body
lacks is pydantic's ``missing`` error in that list."""
from __future__ import annotations

from marshmallow import ValidationError, fields

from generation.adapters.validation import MAX_REPORTED_ERRORS, Errors, Mismatch, validation_errors
from generation.errors import InvalidParam, SimulatorError


class Refused:
    """A field's value pydantic refuses, as a leaf of marshmallow's error tree: ``errors`` are
    pydantic's ``(subpath, input, type, msg[, ctx])`` (``subpath`` ``""`` for the field itself,
    ``"3"`` for its item 3).  :func:`~schemas.common.load` words them as vLLM's validation handler
    (:func:`~generation.adapters.validation.validation_errors`) at the field's path in the body,
    nested schemas and list indexes included.  ``more``: how many errors after these were only
    counted (:class:`Capped`), as vLLM's handler shows ten of them and counts the rest."""
    __slots__ = ("errors", "more")

    def __init__(self, *errors, more: int = 0):
        self.errors = errors
        self.more = more

    def __str__(self):
        return self.errors[0][3] if self.errors else ""


def refuse(*errors, more: int = 0) -> ValidationError:
    """The marshmallow error of a field pydantic refuses with ``errors`` (:class:`Refused`;
    ``more``: errors after them, counted only)."""
    return ValidationError([Refused(*errors, more=more)])


class Capped(list):
    """A field's pydantic errors as they are found: the first :data:`MAX_REPORTED_ERRORS` kept
    (all that vLLM's handler shows, whatever came before), the rest counted in ``more``.  A
    million refused items built a million error tuples that lived until the answer: seconds
    of allocation, and a heap the allocator kept fragmented after (RSS +8 MB a request).
    ``refuse(*capped, more=capped.more)``."""
    more = 0

    def append(self, error) -> None:
        if len(self) < MAX_REPORTED_ERRORS:
            super().append(error)
        else:
            self.more += 1

    def then(self, *others: "Capped") -> "Capped":
        """These errors followed by ``others``', capped alike."""
        out = Capped(self)
        out.more = self.more
        for other in others:
            for e in other:
                out.append(e)
            out.more += other.more
        return out


MISSING = ("missing", "Field required")


def model_type_error(path: str, value, cls: str) -> tuple:
    """pydantic's ``model_type`` error of a value that is no object where model ``cls`` is read."""
    return (path, value, "model_type", f"Input should be a valid dictionary or instance of {cls}", {"class_name": cls})


def read_key(errors: list, obj: dict, key, reader, required: bool = False, path: str = "") -> None:
    """pydantic's error for ``obj[key]`` read with ``reader`` (:mod:`generation.adapters.validation`:
    ``str``, ``dict``, ``bool``...; ``None`` allowed unless ``required``), appended to ``errors``
    at ``path + key``; an absent required key is ``missing``, its input ``obj``."""
    if key not in obj:
        if required:
            errors.append((f"{path}{key}", obj, *MISSING))
        return
    value = obj[key]
    if value is None and not required:
        return
    try:
        reader(value)
    except Mismatch as e:
        errors.append((f"{path}{key}", value, *e.error))


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


def mm_payload_alias(body: dict) -> dict:
    """vLLM 0.34's ``resolve_return_mm_kwargs_alias`` (a before-validator of chat, completions,
    responses and Anthropic's messages, ``generate/base/protocol.py:61``): ``return_mm_kwargs``
    false without ``mm_payload`` adds ``mm_payload: "none"`` to the body its fields are read
    from."""
    if body.get("return_mm_kwargs") is False and "mm_payload" not in body:
        return {**body, "mm_payload": "none"}
    return body


def _required_errors(schema, messages, body) -> dict:
    """``messages`` (marshmallow's error dict of ``body``) with pydantic's errors of the fields
    the vLLM model requires (:meth:`~schemas.common.BaseSchema.required_fields`): an absent one is
    ``missing``, its ``input`` the body as the model's fields see it
    (:meth:`~schemas.common.BaseSchema.validated_body`); a ``null`` one the field's own error
    when that is pydantic's (:class:`Refused`: ``list_type`` for ``messages``), as pydantic reads
    ``None`` for a type without it; else marshmallow's message stays."""
    required_fields = getattr(schema, "required_fields", None)
    required = required_fields(body) if required_fields is not None else ()
    out = messages
    for name in required:
        if name not in body:
            error = [Refused(("", schema.validated_body(body), *MISSING))]
        elif body[name] is None:
            try:
                schema.fields[name]._deserialize(None, name, body)
                continue
            except ValidationError as e:
                if not (isinstance(e.messages, list) and all(isinstance(m, Refused) for m in e.messages)):
                    continue
                error = e.messages
        else:
            continue
        if out is messages:
            out = dict(messages)
        out[name] = error
    return out


def required_refusal(schema, body: dict) -> InvalidParam | None:
    """The 400 of a body that loaded but lacks what the vLLM model it is read as requires, or
    None: pydantic's ``missing`` / type errors of those fields (for a schema that reads two of
    vLLM's models and so cannot require either's field: ``/tokenize``, ``/v1/embeddings``)."""
    messages = _required_errors(schema, {}, body)
    return _refusal(schema, messages, body) if messages else None


def _refusal(schema, messages, body):
    """The 400 of a failed load (marshmallow's error dict ``messages``): when the first error in
    pydantic's order is pydantic's (:class:`Refused`), vLLM's validation handler's answer
    listing every :class:`Refused` error in that order (:func:`validation_errors`: ten shown,
    all counted); otherwise that first error alone in the simulator's words, ``path: message``
    with ``param`` the path (``messages[0].content``), as vLLM words it differently and the
    simulator has no pydantic wording for it.  The simulator's own errors after a pydantic one
    are left out (they have no line of pydantic's to show).  A required field the body lacks is
    pydantic's ``missing`` in its place (:func:`_required_errors`).  A request validator's error
    that a field met (``LogprobCount``) is answered alone, as pydantic lets it through."""
    for _, leaf in _leaves(messages, schema, body):
        if isinstance(leaf, SimulatorError):
            return leaf          # a request validator's, found reading a field (LogprobCount)
    if isinstance(messages, dict) and isinstance(body, dict):
        messages = _required_errors(schema, messages, body)
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
        errors.count += leaf.more
    return validation_errors(errors.kept, total=errors.count)
