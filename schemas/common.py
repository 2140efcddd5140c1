"""Shared marshmallow pieces: strict JSON types, content blocks, and error conversion.

Validation follows vLLM's pydantic models: unknown keys are ignored, ``null`` for an optional
field means absent, booleans must be JSON booleans, integers may not have a fraction.  Every
failure becomes a 400 in vLLM's envelope whose message and ``param`` name the field
(e.g. ``messages[0].content``).
"""
from __future__ import annotations

import math
import numbers

from marshmallow import EXCLUDE, Schema, ValidationError, fields, post_load, validates_schema

from generation.adapters import protocol as p
from generation.adapters.fields import check_cache_salt, check_logprob_number
from generation.adapters.wide_ints import exact_integer
from generation.adapters.validation import (MAX_REPORTED_ERRORS, Errors, Mismatch, body_not_an_object, literal_mismatch, read_bool, read_dict,
                                            read_float, read_int, read_list, read_str)
from generation.errors import Rejected
from generation.lanes import TURN, hub_turn  # noqa: F401  (TURN: the schemas' hub turn)

from . import field_order as order
from .refusal import Capped, Refused, _refusal, mm_payload_alias, refuse, required_refusal  # noqa: F401  (_refusal: tests)
from .loading import FieldFailed, _fast_load, _fast_plan, _subset, load  # noqa: F401  (load: the schemas' entry point)


def read_as_pydantic(reader, value):
    """``reader(value)`` (:mod:`generation.adapters.validation`), its :class:`Mismatch` turned into
    the field's pydantic error (:func:`refuse`)."""
    try:
        return reader(value)
    except Mismatch as e:
        raise refuse(("", value, *e.error)) from None


class StrictInt(fields.Integer):
    """``int`` as pydantic's lax mode reads it (:func:`read_int`: ``5``, ``5.0``, ``"5"``,
    ``true``; ``int_from_float`` / ``int_parsing`` / ``int_type`` in pydantic's words otherwise).
    An integral float past int64 is the integer literal orjson read it from, digit for digit
    (:func:`~generation.adapters.wide_ints.exact_integer`: vLLM's parser keeps it exact), or
    pydantic's ``int_parsing_size`` where it was a float literal (``1e30``).  With ``int64``, also integers past 64 bits are refused, for
    fields an answer echoes (``1e30`` became a 101-bit int that orjson could not serialise: a
    500 in the middle of a Responses stream).  Other fields keep big values for their own range
    checks, which name vLLM's bounds (``seed``)."""

    def __init__(self, *args, int64: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.int64 = int64

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is not int:
            if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) >= INT64:
                # orjson reads an integer past int64 as a float: the literal's own digits
                # (exact_integer), else (no body held) the float's integer, -2**63 once rounded
                # below (that literal was below vLLM's bound; test_long_seed sends INT64_MIN - 1)
                exact = exact_integer(value, data, attr)
                if exact is value:              # a float literal (1e30): pydantic's int_parsing_size
                    value = read_as_pydantic(read_int, value)
                elif exact is not None:
                    value = exact
                else:
                    value = min(int(value), -INT64 - 1) if value < 0 else int(value)
            else:
                value = read_as_pydantic(read_int, value)
        if self.int64 and not -INT64 <= value < INT64:
            raise self.make_error("invalid")
        return value


INT64 = 1 << 63


class LogprobCount(StrictInt):
    """A logprobs count (``logprobs``, ``top_logprobs``, ``prompt_logprobs``): vLLM 0.34's
    request validators (``check_logprobs``) refuse a value that is not a JSON number before
    pydantic reads the field, with their own words (``"`top_logprobs` must be an integer."``) and
    ``VLLMValidationError``'s ``(parameter=top_logprobs, value=...)``."""

    def _deserialize(self, value, attr, data, **kwargs):
        try:
            check_logprob_number(value, attr)
        except Rejected as e:
            raise ValidationError([e]) from None         # load() raises it alone, in its turn
        return super()._deserialize(value, attr, data, **kwargs)


class StrictFloat(fields.Float):
    """``float`` as pydantic's lax mode reads it (:func:`read_float`: a number, a boolean, a
    numeric string; ``float_parsing`` / ``float_type`` otherwise)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is float:
            return value
        return read_as_pydantic(read_float, value)


TOKEN_ID_MAX = 0xFFFFFFFF      # token ids are unsigned 32-bit, as vLLM's protocol types allow


def is_token(v) -> bool:
    """One JSON token id: an integer (not a boolean) from 0 to :data:`TOKEN_ID_MAX`."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= TOKEN_ID_MAX


TOKEN_SLICE = 65536            # ids checked per C-loop call before the hub gets a turn (~3 ms)


def are_tokens(value: list) -> bool:
    """Whether every element of ``value`` (a list; ``[]`` is) is a token id (:func:`is_token`).

    Built from C loops (``set(map(type, ...))``, ``min``, ``max``) over slices of
    :data:`TOKEN_SLICE` ids, the hub given a turn (``gevent.sleep(TURN)``) between slices: 2 M
    ids, the most a 4 MiB body holds, take ~0.1 s in ~3 ms pieces, where a Python call per
    element held the hub 1.5-3.8 s (issue 31, outage 1).  JSON integers decode to ``int`` and
    booleans to ``bool``, so the exact type test is :func:`is_token`'s check."""
    n = len(value)
    for lo in range(0, n, TOKEN_SLICE):
        if lo:
            hub_turn()
        part = value[lo:lo + TOKEN_SLICE] if n > TOKEN_SLICE else value
        if set(map(type, part)) != {int} or min(part) < 0 or max(part) > TOKEN_ID_MAX:
            return False
    return True


def are_token_lists(lists: list) -> bool:
    """Whether every element of ``lists`` is a list of token ids (:func:`are_tokens`), the hub
    given a turn after every :data:`TOKEN_SLICE` ids in all (2,000 lists of 1,000 ids held it
    0.14 s in one piece)."""
    done = 0
    for v in lists:
        if not are_tokens(v):
            return False
        done += len(v)
        if done >= TOKEN_SLICE:
            hub_turn()
            done = 0
    return True


def first_non_token(value: list) -> int:
    """The index of the first element of ``value`` that is not a token id, or -1 (only called
    once a list has failed :func:`are_tokens`, for the error message)."""
    return next((k for k, v in enumerate(value) if not is_token(v)), -1)


class IntList(fields.Field):
    """``list[int]``: checked in C loops over slices of :data:`TOKEN_SLICE` with hub turns
    between them when every element is an ``int`` (a 4 MiB body holds 2 M of them: one
    :class:`StrictInt` per element held the hub for seconds); otherwise element by element as
    pydantic reads them (:func:`read_int`: ``5.0`` and ``"5"`` count as 5), every bad one in
    pydantic's words at its index (``list_type`` for anything but an array)."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_list, value)
        for lo in range(0, len(value), TOKEN_SLICE):
            if lo:
                hub_turn()
            if set(map(type, value[lo:lo + TOKEN_SLICE])) != {int}:
                break
        else:
            return value
        out, bad, memo = [], Capped(), {}
        for k, v in enumerate(value):
            t = type(v)
            if t is int:
                out.append(v)
                continue
            # read_int's answer depends on the value of a str / float / bool and on the type of
            # anything else: remembered, a million "a"s cost one parse, not a million exceptions
            key = (t, v) if t is str or t is float or t is bool else t
            r = memo.get(key)
            if r is None:
                try:
                    r = (True, read_int(v))
                except Mismatch as e:
                    r = (False, e.error)
                if len(memo) < MEMO_SIZE:
                    memo[key] = r
            if r[0]:
                out.append(r[1])
            elif len(bad) < MAX_REPORTED_ERRORS:
                bad.append((str(k), v, *r[1]))
            else:
                bad.more += 1
        if bad:
            raise refuse(*bad, more=bad.more)
        return out


class StrictBool(fields.Boolean):
    """``bool`` as pydantic's lax mode reads it (vLLM's request models are not strict:
    :func:`read_bool`: ``true``/``false``, ``0``/``1``, ``"yes"``, ``"off"``, ...;
    ``bool_parsing`` / ``bool_type`` otherwise)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if value is True or value is False:
            return value
        return read_as_pydantic(read_bool, value)


LaxBool = StrictBool


class Str(fields.String):
    """``str`` (pydantic's ``string_type`` for anything else: lax mode takes no number)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is str:
            return value
        return read_as_pydantic(read_str, value)


class Dict(fields.Dict):
    """``dict[...]`` (pydantic's ``dict_type`` for anything but an object); its keys and values
    as marshmallow's ``Dict`` reads them."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_dict, value)
        return super()._deserialize(value, attr, data, **kwargs)


ITEM_SLICE = 256               # items a BoundedList loads at a time
MEMO_SIZE = 4096               # distinct values an IntList remembers read_int's answer for


class BoundedList(fields.List):
    """marshmallow's ``List``, its items loaded :data:`ITEM_SLICE` at a time (a list of nested
    schemas still ``many=True`` per slice), and no further once the erroneous item with the
    lowest index has no pydantic error (:class:`Refused`) under it: that item's first error is
    then the answer (:func:`~schemas.refusal._refusal` words the simulator's own errors alone),
    so the items after it cannot change it.  A body of a million bad items held the hub 6-22 s
    building a million errors of which one was sent (``"tools": [1, 1, ...]``).  Pydantic's
    errors go on being counted, as vLLM's answer counts them all, but once ten are kept (all
    that the answer shows) the later slices' are only counted (:attr:`Refused.more`)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is not list or len(value) <= ITEM_SLICE:
            return super()._deserialize(value, attr, data, **kwargs)
        out, errors, first, kept, more = [], {}, None, 0, 0
        for lo in range(0, len(value), ITEM_SLICE):
            try:
                out.extend(super()._deserialize(value[lo:lo + ITEM_SLICE], attr, data, **kwargs))
            except ValidationError as e:
                if not isinstance(e.messages, dict):
                    raise
                if kept >= MAX_REPORTED_ERRORS:           # the ten shown are kept: these are counted
                    more += _refused_count(e.messages)
                    continue
                errors.update((lo + k if isinstance(k, int) else k, v) for k, v in e.messages.items())
                kept += _refused_count(e.messages)
                if first is None:
                    first = min((k for k in errors if isinstance(k, int)), default=None)
                    if first is not None and not _refused_count(errors[first]):
                        break
        if more:
            errors[len(value)] = [Refused(more=more)]       # after every item: only counted
        if errors:
            raise ValidationError(errors)
        return out


def _refused_count(messages) -> int:
    """How many pydantic errors (:class:`Refused`) a marshmallow error tree holds."""
    if isinstance(messages, dict):
        return sum(_refused_count(m) for m in messages.values())
    if isinstance(messages, list):
        return sum(_refused_count(m) for m in messages)
    return len(messages.errors) + messages.more if isinstance(messages, Refused) else 0


class List(BoundedList):
    """``list[...]`` (pydantic's ``list_type`` for anything but an array); its items as the
    inner field reads them (:class:`BoundedList`)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is not list:
            read_as_pydantic(read_list, value)
        return super()._deserialize(value, attr, data, **kwargs)


class StrList(List):
    """``list[str]``: a list of strings passes in one loop over the types; a list whose bad
    items are all non-strings other than ``null`` gets pydantic's ``string_type`` at each of
    them without an error object per item (ten built, the rest counted: the message is
    :class:`List`'s); anything else (``null`` items, marshmallow's words) as :class:`List`
    reads it.  A million integers took 6.8 s through marshmallow's per-item errors."""

    def __init__(self, **kwargs):
        super().__init__(Str(), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is list and not self.inner.validators:
            if all(v.__class__ is str for v in value):
                return value
            if None not in value:
                errors, more = {}, 0
                for i, v in enumerate(value):
                    if not isinstance(v, str):
                        if len(errors) < MAX_REPORTED_ERRORS:
                            errors[i] = [Refused(("", v, *STRING_TYPE))]
                        else:
                            more += 1
                if errors:
                    if more:
                        errors[len(value)] = [Refused(more=more)]
                    raise ValidationError(errors)
                return value
        return super()._deserialize(value, attr, data, **kwargs)


class StringOrList(fields.Field):
    """``stop``: vLLM's ``str | list[str]``, normalised to a list; otherwise pydantic's errors
    of both union branches (the string's at the field, the list's at the field or at each item
    that is not a string)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            bad = Capped([("", value, *STRING_TYPE)])
            for i, v in enumerate(value):
                if not isinstance(v, str):
                    bad.append((str(i), v, *STRING_TYPE))
            if len(bad) == 1:
                return value
            raise refuse(*bad, more=bad.more)
        raise refuse(("", value, *STRING_TYPE), ("", value, "list_type", "Input should be a valid list"))


STRING_TYPE = ("string_type", "Input should be a valid string")


class NullableField(fields.Field):
    """A field whose ``null`` is read like any other value (so refused with the field's own
    error) when ``nullable`` is False, as pydantic refuses ``None`` where the annotation has no
    ``| None``; with ``nullable`` (the default) ``null`` is "not given", as marshmallow reads it."""

    def __init__(self, *, nullable: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.nullable = nullable

    def deserialize(self, value, attr=None, data=None, **kwargs):
        if value is None and not self.nullable:
            return self._deserialize(value, attr, data)
        return super().deserialize(value, attr, data, **kwargs)


class Literal(NullableField):
    """vLLM's ``Literal[choices]`` (``| None`` with ``nullable``): one of ``choices`` (compared
    by type and value, as pydantic's lax mode compares a JSON value with a string literal), else
    pydantic's ``literal_error`` (``Input should be 'left' or 'right'``, ``ctx`` its
    ``expected``) for a wrong value and a wrong type alike.  ``nullable=False``: ``null`` is that
    error too, as pydantic refuses it where the annotation has no ``None`` (``embed_dtype``)."""

    def __init__(self, *choices, nullable: bool = True, **kwargs):
        super().__init__(nullable=nullable, **kwargs)
        self.choices = choices

    def _deserialize(self, value, attr, data, **kwargs):
        for c in self.choices:
            if type(value) is type(c) and value == c:
                return value
        raise refuse(("", value, *literal_mismatch(self.choices).error))


_RANKS: dict = {}


class BaseSchema(Schema):
    """Unknown keys ignored, ``null`` allowed for every field that is not required; a schema that names a ``__model__``
    (a dataclass of :mod:`generation.adapters.protocol`) loads into it.  A field the dataclass
    does not declare is checked only: its value is read (and refused) as the field says, then
    left out (vLLM fields the simulator has no use for, :mod:`schemas.lax`), so the typed
    request does not grow an attribute to assign on every request for each of them."""
    __model__ = None
    __order__: tuple = ()           # the vLLM model's fields in pydantic's order (schemas.field_order)
    _check_only: frozenset = frozenset()

    class Meta:
        unknown = EXCLUDE

    def field_order(self, body: dict) -> tuple:
        """The fields of the vLLM model that ``body`` is read as, in the order pydantic
        validates them (and lists their errors): ``__order__``; a schema for two of vLLM's
        models picks one by the body."""
        return self.__order__

    def request_validators(self, body: dict) -> None:
        """vLLM's ``model_validator(mode="before")`` checks of the model, on the raw ``body``,
        in pydantic's order (:mod:`generation.adapters.request_validators`): :func:`load` runs
        them for a body whose fields failed, as pydantic runs them ahead of the fields and
        answers one that raises alone.  None here."""

    def required_fields(self, body: dict) -> tuple:
        """The fields the vLLM model that ``body`` is read as requires (no default): absent, each
        is pydantic's ``missing`` error in :func:`load`'s list (``null``, the field's own error,
        as pydantic reads ``None`` for a type without it).  The schema's required fields where it
        has a field order (a schema without one is no pydantic model's: the simulator words its
        missing fields); a schema for two of vLLM's models picks them by the body."""
        if not self.field_order(body):
            return ()
        names = self.__dict__.get("_required")
        if names is None:
            names = self._required = tuple(n for n, f in self.fields.items() if f.required)
        return names

    def validated_body(self, body: dict) -> dict:
        """``body`` as the vLLM model's fields are validated on it, after its before-validators
        (pydantic's ``input`` of a ``missing`` error: a validator that adds a key counts it)."""
        return body

    def field_rank(self, body: dict) -> dict:
        """``{field: place}`` of :meth:`field_order` (``_schema``, the schema's own errors,
        first)."""
        order = self.field_order(body)
        rank = _RANKS.get(order)
        if rank is None:
            rank = _RANKS[order] = {"_schema": -1, **{name: i for i, name in enumerate(order)}}
        return rank

    def on_bind_field(self, field_name, field_obj):
        # null is "not given" for an optional field; a required one stays required (a null
        # there is a 400 naming it, never a None the handler was promised it would not see).
        field_obj.allow_none = not field_obj.required
        if field_obj.required:
            field_obj.error_messages = {**field_obj.error_messages, "null": field_obj.error_messages["required"]}
        model = self.__model__
        if model is not None and field_name not in model.__dataclass_fields__:
            self._check_only = self._check_only | {field_name}

    def _do_load(self, *args, **kwargs):
        try:
            return super()._do_load(*args, **kwargs)
        except ValidationError as e:
            # marshmallow's _do_load raises the error from a local of its frame, which the
            # traceback holds: a reference cycle per refused load (per refused item of a list
            # of nested schemas) that only a full collection frees, a pause the hub feels
            # (0.7 s after a million refused items).  Raised again from here, without that frame.
            e.__traceback__ = None
            raise

    @post_load
    def _typed(self, data, **kwargs):
        cls = self.__model__
        if cls is None:
            return data
        for name in self._check_only.intersection(data):
            del data[name]
        return cls(**data)


class SamplingKnobsSchema(BaseSchema):
    """vLLM sampling parameters a simulator has no use for: type-checked, then ignored."""
    __model__ = p.SamplingKnobs
    temperature = StrictFloat()
    top_p = StrictFloat()
    top_k = StrictInt()
    min_p = StrictFloat()
    seed = StrictInt()
    presence_penalty = StrictFloat()
    frequency_penalty = StrictFloat()
    repetition_penalty = StrictFloat()
    min_tokens = StrictInt()
    use_beam_search = StrictBool()


class ModelNested(fields.Nested):
    """A field whose type is a pydantic model (``StreamOptions | None``, ...): a value that is no
    object is pydantic's ``model_type`` (``Input should be a valid dictionary or instance of
    StreamOptions``), where marshmallow said "Invalid input type."."""

    def __init__(self, nested, *, model_name: str, **kwargs):
        super().__init__(nested, **kwargs)
        self.model_name = model_name

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise refuse(("", value, "model_type", f"Input should be a valid dictionary or instance of "
                          f"{self.model_name}", {"class_name": self.model_name}))
        return super()._deserialize(value, attr, data, **kwargs)


class ModelDict(fields.Field):
    """A pydantic model field kept as the object sent (the openai SDK's ``Reasoning``, ...): a
    value that is no object is pydantic's ``model_type``."""

    def __init__(self, *, model_name: str, **kwargs):
        super().__init__(**kwargs)
        self.model_name = model_name

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise refuse(("", value, "model_type", f"Input should be a valid dictionary or instance of "
                          f"{self.model_name}", {"class_name": self.model_name}))
        return value


class StreamOptionsSchema(BaseSchema):
    __model__ = p.StreamOptions
    __order__ = order.StreamOptions
    include_usage = StrictBool()
    continuous_usage_stats = StrictBool()

    @post_load(pass_original=True)
    def _typed(self, data, original, **kwargs):
        """Whether the object had any key (vLLM's check is on the raw object's truthiness)."""
        return p.StreamOptions(**data, given=bool(original))


_MEDIA_URL_BLOCKS = {"image_url": "image_url", "audio_url": "audio_url", "video_url": "video_url"}


def validate_content_blocks(content):
    """Check a chat ``content`` value: a string, null, or a list of typed blocks.

    Text blocks need a string ``text``; ``image_url``/``audio_url``/``video_url`` blocks need
    ``{"url": str}`` (or a bare URL string); ``input_audio`` needs ``{"data": str}``.  Other
    block types pass here (vLLM's models take any object as a part): the render refuses those
    vLLM does not know (:func:`generation.adapters.fields.check_chat_part_types`), the others
    contribute no tokens.
    Raises ValidationError naming the block."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ValidationError("Input should be a valid string or a list of content parts.")
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise ValidationError({i: ["Content part must be an object."]})
        t = block.get("type")
        if not isinstance(t, str):
            raise ValidationError({i: {"type": ["Field required (a string)."]}})
        if t == "text":
            if not isinstance(block.get("text"), str):
                raise ValidationError({i: {"text": ["Field required (a string) for a text part."]}})
        elif t in _MEDIA_URL_BLOCKS:
            v = block.get(t)
            url = v.get("url") if isinstance(v, dict) else v
            if not isinstance(url, str):
                raise ValidationError({i: {t: {"url": ["Field required (a string)."]}}})
        elif t == "input_audio":
            v = block.get("input_audio")
            if not isinstance(v, dict) or not isinstance(v.get("data"), str):
                raise ValidationError({i: {"input_audio": {"data": ["Field required (a string)."]}}})


__all__ = ["BaseSchema", "SamplingKnobsSchema", "Refused", "refuse", "read_as_pydantic", "required_refusal", "mm_payload_alias", "Str", "Dict", "List", "StrictInt", "LogprobCount", "IntList", "is_token", "are_tokens",
           "are_token_lists", "first_non_token", "TOKEN_ID_MAX", "StrictFloat", "StrictBool", "StringOrList", "Literal",
           "StreamOptionsSchema", "ModelNested", "ModelDict", "LaxBool", "validate_content_blocks", "load", "hub_turn", "TURN", "BoundedList", "StrList", "fields", "validates_schema",
           "ValidationError"]


def salted_body(body) -> Errors:
    """What vLLM's request models with ``check_cache_salt_support`` (a before-validator) do
    before their fields: the body an object (else the handler's 400), ``cache_salt`` checked by
    ``validate_cache_salt``, whose own 400 names it.  Returns the :class:`Errors` to collect the
    fields' errors in (pydantic's, raised by the caller with ``validation_errors``)."""
    if not isinstance(body, dict):
        raise body_not_an_object(body)
    check_cache_salt(body.get("cache_salt"))
    return Errors()
