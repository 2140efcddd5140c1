"""pydantic's validation of a tree of models, as vLLM runs it on a request body whose types come
from a third-party SDK (Cohere's ``cohere.types``, :mod:`schemas.cohere`), without pydantic.

A type below reads a JSON value as pydantic 2's lax mode does (the scalar readers of
:mod:`generation.adapters.validation`) and reports a failure as pydantic does: ``(loc, input,
type, msg[, ctx])``, ``loc`` the path of field names and list indexes.  :class:`Union` is
pydantic's *smart* union of ``typing.Union[...]`` (the SDK's ``UnionMetadata`` is no pydantic
discriminator): the member that validates with the most of its own fields set wins, the first
on a tie; when none does, every member's errors are reported, each under its model's class name
(``messages.0.UserChatMessageV2.content``; a ``str`` or ``list`` member adds no name, as vLLM's
handler drops pydantic's ``str`` / ``list[...]`` markers from ``loc``).

The work is bounded, where pydantic's is not: a list stops at the first item past
:data:`BUDGET` errors, of which :class:`Errors` keeps the ten vLLM's handler reports, so a
hostile body of 2 M malformed messages costs what a thousand errors cost (pydantic itself built
4 M errors, 6 GB and 40 s in the cohere SDK's models).  Past the budget the count in ``...and N
more errors`` is the count so far, not pydantic's total.  A long list gives the hub a turn every
:data:`SLICE` items.
"""
from __future__ import annotations

from types import SimpleNamespace


from generation.adapters.validation import Mismatch, MAX_REPORTED_ERRORS, literal_mismatch, validation_errors

from .common import hub_turn

SLICE = 4096          # list items validated between hub turns
BUDGET = 1000         # errors counted before the traversal stops


class Errors:
    """pydantic's errors of one validation, in its order: the first ``keep`` kept, up to
    ``budget`` counted (:attr:`full`: the traversal stops one past it)."""

    def __init__(self, keep: int = MAX_REPORTED_ERRORS, budget: int = BUDGET):
        self.keep, self.budget = keep, budget
        self.count = 0
        self.items: list = []

    @property
    def full(self) -> bool:
        return self.count > self.budget

    def add(self, loc: tuple, value, kind: str, msg: str, ctx: dict | None = None) -> None:
        self.count += 1
        if len(self.items) < self.keep:
            self.items.append((loc, value, kind, msg) if ctx is None else (loc, value, kind, msg, ctx))

    def sub(self) -> Errors:
        """A collector for one part whose errors :meth:`merge` adds here: what room is left."""
        return Errors(max(self.keep - len(self.items), 0), max(self.budget - self.count, 0))

    def merge(self, other: Errors) -> None:
        self.items += other.items[:max(self.keep - len(self.items), 0)]
        self.count += other.count

    def raise_400(self):
        """vLLM's validation handler's 400 (:func:`validation_errors`: ``N validation errors:``,
        ``loc`` below ``body``).  Raises RequestInvalid."""
        rows = [(_clean(loc), *rest) for loc, *rest in self.items]
        raise validation_errors(rows, total=self.count)


# pydantic-core's schema kinds that vLLM's handler drops from ``loc`` (``_INTERNAL_LOC_MARKERS``
# of serve/exception_handling/handlers/validation.py), a field of the same name included
# (``tool_calls.0.function.arguments`` reads ``tool_calls.0.function``)
LOC_MARKERS = frozenset({
    "function-wrap", "function-after", "function-before", "function-plain", "json-or-python", "lax-or-strict",
    "chain", "default", "nullable", "tagged-union", "union", "call", "arguments", "is-instance", "is-subclass",
    "callable", "str", "int", "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
    "complex", "none", "nonetype"})


def _clean(loc: tuple) -> str:
    """vLLM's ``clean_loc_for_param`` of a ``loc`` (below ``body``) this module built."""
    kept = [str(p) for p in loc if str(p).lower() not in LOC_MARKERS]
    return ".".join(kept if kept else map(str, loc))


FAIL = object()           # what a type reads from a value it refuses (its errors are in Errors)


class Type:
    """A field's type: :meth:`read` returns the value as pydantic would hold it, or
    :data:`FAIL` with the errors added to ``errs``."""
    label: str | None = None          # a union member's name in ``loc`` (models: their class name)

    def read(self, value, loc: tuple, errs: Errors):
        raise NotImplementedError


class Scalar(Type):
    """``str``, ``int``, ``float``, ``bool``, ``dict[str, Any]``: a reader of
    :mod:`generation.adapters.validation` (raises Mismatch); ``ge``/``le``: ``Field`` bounds."""

    def __init__(self, reader, ge=None, le=None):
        self.reader, self.ge, self.le = reader, ge, le

    def read(self, value, loc, errs):
        try:
            out = self.reader(value)
        except Mismatch as e:
            errs.add(loc, value, *e.error)
            return FAIL
        if self.ge is not None and out < self.ge:
            errs.add(loc, value, "greater_than_equal", f"Input should be greater than or equal to {self.ge}",
                     {"ge": self.ge})
            return FAIL
        if self.le is not None and out > self.le:
            errs.add(loc, value, "less_than_equal", f"Input should be less than or equal to {self.le}", {"le": self.le})
            return FAIL
        return out


class Anything(Type):
    """``typing.Any``, and the SDK's open enums ``Union[Literal[...], Any]``."""

    def read(self, value, loc, errs):
        return value


class Literal(Type):
    def __init__(self, *choices):
        self.choices = choices

    def read(self, value, loc, errs):
        if isinstance(value, str) and value in self.choices:
            return value
        errs.add(loc, value, *literal_mismatch(self.choices).error)
        return FAIL


class Optional(Type):
    """``X | None``: null is None, anything else is ``X``'s (no ``loc`` marker of its own)."""

    def __init__(self, inner: Type):
        self.inner = inner
        self.label = inner.label

    def read(self, value, loc, errs):
        return None if value is None else self.inner.read(value, loc, errs)


class ListOf(Type):
    """``list[X]``, with ``Field(max_length=...)`` checked before the items, as pydantic-core does."""

    def __init__(self, item: Type, max_length: int | None = None):
        self.item, self.max_length = item, max_length

    def read(self, value, loc, errs):
        if not isinstance(value, list):
            errs.add(loc, value, "list_type", "Input should be a valid list")
            return FAIL
        n = len(value)
        if self.max_length is not None and n > self.max_length:
            errs.add(loc, value, "too_long", f"List should have at most {self.max_length} item"
                     f"{'' if self.max_length == 1 else 's'} after validation, not {n}",
                     {"field_type": "List", "max_length": self.max_length, "actual_length": n})
            return FAIL
        out, failed, read = [], False, self.item.read
        for i, v in enumerate(value):
            if i and not i % SLICE:
                hub_turn()
            r = read(v, (*loc, i), errs)
            if r is FAIL:
                failed = True
                if errs.full:
                    break
            out.append(r)
        return FAIL if failed else out


class Model(Type):
    """A pydantic model with ``extra="allow"`` (the SDK's): its declared ``fields`` (name ->
    ``(type, default)``; :data:`REQUIRED` for none) read from a dict, extra keys kept apart.
    Reads into a :class:`Parsed`.  ``tag``: the field whose ``Literal`` default names the model
    (``role``, ``type``): a union skips this member early when the value holds another."""

    def __init__(self, name: str, fields: dict, tag: str | None = None):
        self.name = self.label = name
        self.fields = fields
        self.tag = tag

    def excluded(self, value) -> bool:
        """Whether ``value`` cannot be this model by its tag (it fails on it, whatever else)."""
        if self.tag is None or not isinstance(value, dict) or self.tag not in value:
            return False
        t = self.fields[self.tag][0]
        return not (isinstance(value[self.tag], str) and value[self.tag] in t.choices)

    def read(self, value, loc, errs):
        if not isinstance(value, dict):
            errs.add(loc, value, "model_type", f"Input should be a valid dictionary or instance of {self.name}",
                     {"class_name": self.name})
            return FAIL
        out, failed = {}, False
        for name, (t, default) in self.fields.items():
            if name in value:
                r = t.read(value[name], (*loc, name), errs)
                if r is FAIL:
                    failed = True
                    if errs.full:
                        return FAIL
                out[name] = r
            elif default is REQUIRED:
                errs.add((*loc, name), value, "missing", "Field required")
                failed = True
            else:
                out[name] = default
        if failed:
            return FAIL
        extra = {k: v for k, v in value.items() if k not in self.fields}
        return Parsed(self.name, sum(1 for k in self.fields if k in value), extra, out)


REQUIRED = object()


class Parsed(SimpleNamespace):
    """A validated model: its fields as attributes, ``model_name``, how many of its fields the
    input set (``fields_set``, the smart union's tie-break) and its ``extra`` keys."""

    def __init__(self, model_name: str, fields_set: int, extra: dict, values: dict):
        super().__init__(**values)
        self.model_name, self.fields_set, self.extra = model_name, fields_set, extra


class Union(Type):
    """pydantic's smart ``Union[...]`` (see the module's docstring).  Members are tried without
    keeping errors first; only a value no member takes is read again for its errors."""

    def __init__(self, *members: Type):
        self.members = members

    def read(self, value, loc, errs):
        best, best_set = FAIL, -1
        for m in self.members:
            if isinstance(m, Model) and m.excluded(value):
                continue
            r = m.read(value, loc, Errors(0, 0))
            if r is not FAIL:
                n = r.fields_set if isinstance(r, Parsed) else 0
                if n > best_set:
                    best, best_set = r, n
        if best is not FAIL:
            return best
        for m in self.members:
            sub = errs.sub()
            m.read(value, (*loc, m.label) if m.label else loc, sub)
            errs.merge(sub)
            if errs.full:
                break
        return FAIL
