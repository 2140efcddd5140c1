"""Loading a request body with its schema (:func:`load`): the fast path that reads each field
with its own field (:func:`_fast_load`), marshmallow's load for the rest and for the error
messages, and the validation lane that keeps a large body's check off the hub."""
from __future__ import annotations

import contextvars
import gc

from marshmallow import Schema, ValidationError, missing

from generation.adapters.validation import BODY_BYTES, body_not_an_object
from generation.adapters import wide_ints
from generation.adapters.wide_ints import release
from generation.lanes import FairLane, on_hub_thread

from .refusal import _refusal


_SUBSETS: dict = {}


def _subset(schema: Schema, body: dict) -> Schema:
    """The schema restricted to the fields the body carries (plus required ones).

    marshmallow visits every declared field on each load; request schemas declare dozens of
    optional fields and a body uses a handful, so this halves validation time.  Cached per
    key set (bounded)."""
    key = (id(schema), frozenset(body))
    sub = _SUBSETS.get(key)
    if sub is None:
        fields_ = schema.fields
        only = tuple(k for k, f in fields_.items() if k in body or f.required)
        sub = type(schema)(only=only) if len(only) < len(fields_) else schema
        if len(_SUBSETS) < 4096:
            _SUBSETS[key] = sub
    return sub


_FAST: dict = {}
HOOKED, CHECK_ONLY = True, False        # _fast_plan's marks


def _fast_plan(schema: Schema):
    """``(fields, required names, marked fields, model, direct)`` when ``schema`` can be loaded
    field by field (:func:`_fast_load`), else None: no data_key/attribute renames, no
    load_default, and no hooks besides ``@validates`` on single fields and :class:`BaseSchema`'s
    ``_typed``.  ``marked``: name -> :data:`HOOKED` for a field with a ``@validates`` hook,
    :data:`CHECK_ONLY` for one the model leaves out (:class:`BaseSchema`)."""
    marked = dict.fromkeys(getattr(schema, "_check_only", ()), CHECK_ONLY)
    for kind, hooks in schema._hooks.items():
        for name, _, opts in hooks:
            if kind == "validates":
                marked.update(dict.fromkeys(opts.get("field_names", ()), HOOKED))
            elif not (kind == "post_load" and name == "_typed"):
                return None
    fields_ = schema.load_fields
    for name, f in fields_.items():
        if f.data_key not in (None, name) or f.attribute not in (None, name) or f.load_default is not missing:
            return None
    required = tuple(n for n, f in fields_.items() if f.required)
    # Field.deserialize of a value that is neither missing nor None, for a field without
    # validators or pre/post-load functions, is its _deserialize: called directly, without the
    # checks that cannot apply and the ``And`` of no validators marshmallow builds per call
    # (a third of a small body's validation, issue 32)
    direct = {n: f._deserialize for n, f in fields_.items()
              if not f.validators and not getattr(f, "pre_load", None) and not getattr(f, "post_load", None)}
    return fields_, required, marked, getattr(schema, "__model__", None), direct


def _fast_load(schema: Schema, body: dict):
    """The typed request of a body every field of which passes its own field's
    ``deserialize``, without the schema's machinery (error store, unknown-key pass, hooks:
    most of a load's time).  Returns None whenever anything is unusual (a field with a
    ``@validates`` hook, a missing required field), so that :func:`load` runs marshmallow and
    its error messages stay marshmallow's; a :class:`FieldFailed` for a field that refused its
    value (marshmallow reads the others)."""
    plan = _FAST.get(id(schema))
    if plan is None:
        plan = _FAST[id(schema)] = _fast_plan(schema) or False
    if not plan:
        return None
    fields_, required, marked, model, direct = plan
    for name in required:
        if name not in body:
            return None
    data = {}
    try:
        for k, v in body.items():
            f = fields_.get(k)
            if f is None:
                continue                   # unknown keys are ignored (EXCLUDE)
            mark = marked.get(k)
            if mark is not None:
                if mark is HOOKED:
                    return None
                f.deserialize(v, k, body)  # CHECK_ONLY: read (or refused), not kept
                continue
            fast = direct.get(k) if v is not None else None
            data[k] = fast(v, k, body) if fast is not None else f.deserialize(v, k, body)
    except ValidationError as e:
        return FieldFailed(k, e.messages)
    return data if model is None else model(**data)


class FieldFailed:
    """What :func:`_fast_load` found: field ``name`` refused its value with marshmallow's error
    ``messages``, the same that the schema's load stores for it."""
    __slots__ = ("name", "messages")

    def __init__(self, name: str, messages):
        self.name, self.messages = name, messages

    def all_errors(self, schema: Schema, body: dict) -> dict:
        """marshmallow's error dict of ``body``: the other fields' errors from ``schema``, this
        field's as the fast path found them, in marshmallow's order (checking this field again
        had cost a million refused items twice the seconds)."""
        rest = {k: v for k, v in body.items() if k != self.name}
        errors = _subset(schema, rest).validate(rest)
        errors[self.name] = self.messages
        return {k: errors[k] for k in (*schema.fields, *errors) if k in errors}


OFF_HUB_BYTES = 8 << 10        # a body larger than this is validated in the validation lane
_LANE: list = []


def load(schema: Schema, body):
    """Validate a decoded JSON body with ``schema``; returns the schema's typed request.

    A body of more than :data:`OFF_HUB_BYTES` (:data:`~generation.adapters.validation.BODY_BYTES`,
    which the body's reader sets) is validated in the validation lane's thread
    (:class:`~generation.lanes.FairLane`, clients taking turns), under the caller's context
    variables: refusing a million bad list items costs seconds of pure Python (an error built
    per item), which on the hub held every other stream and ``/health`` for as long.  Smaller
    bodies stay on the hub, where a handoff would cost more than the check (at most ~30 ms of
    errors at 8 KiB).

    Raises InvalidParam whose message starts with the failing field's path and whose
    ``param`` is that path (the simulator's words: type "BadRequestError"), or RequestInvalid
    for a body that is not an object (vLLM's validation handler: "Bad Request")."""
    if not isinstance(body, dict):
        raise body_not_an_object(body)
    filled_body = getattr(schema, "filled_body", None)
    if filled_body is not None:
        body = filled_body(body)
    try:
        if BODY_BYTES.get() > OFF_HUB_BYTES and on_hub_thread():
            failed, out = validation_lane().apply(contextvars.copy_context().run, (_load_in_lane, schema, body))
            if failed:
                try:
                    raise out
                finally:
                    out = None          # else this frame, in the error's traceback, keeps it: a cycle
            return out
        return _load(schema, body)
    finally:
        release(None)                   # the body parse_json_body held for its wide integers


def validation_lane() -> FairLane:
    """The lane (one thread, clients taking turns) where large bodies are checked off the hub,
    made at first use: the schema load here, and the body's exact re-read for wide integers
    (``blueprints.common.parse_json_body``)."""
    if not _LANE:
        _LANE.append(FairLane())
    return _LANE[0]


wide_ints.OFF_HUB[:] = [OFF_HUB_BYTES, validation_lane]     # a large body's exact re-read, there too


def _load_in_lane(schema: Schema, body: dict):
    """:func:`_load` with no full collection of the cyclic collector while it runs (young and
    middle ones go on): refusing a million items builds millions of objects that live until the
    answer, and every full collection they set off walked them all holding the interpreter
    lock, 0.1-0.3 s each in which the hub could not run (``gc.callbacks``).  With the collector
    off instead, the exceptions' reference cycles piled up for one 1 s collection after.

    Returns ``(False, request)`` or ``(True, the error it raised)``, which the caller raises
    (gevent's pool would print a traceback of every refusal)."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
    try:
        return False, _load(schema, body)
    except Exception as e:      # noqa: BLE001 - raised again by load, on the hub
        return True, e.with_traceback(None)
    finally:
        gc.set_threshold(young, middle, full)


def _load(schema: Schema, body: dict):
    """:func:`load` of an object, where it stands."""
    out = _fast_load(schema, body)
    if out.__class__ is FieldFailed:
        messages = out.all_errors(schema, body)
    elif out is not None:
        return out
    else:
        try:
            return _subset(schema, body).load(body)
        except ValidationError as e:
            e.__traceback__ = None          # see BaseSchema._do_load (a schema not built on it)
            messages = e.messages
    request_validators = getattr(schema, "request_validators", None)
    if request_validators is not None:
        request_validators(body)
    raise _refusal(schema, messages, body)
