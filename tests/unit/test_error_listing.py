"""``schemas.common.load`` turning marshmallow's error dict into vLLM's 400
(``_refusal``): pydantic's errors in the model's order, the simulator's own wording only when it
comes first, a request validator's error alone."""
from __future__ import annotations

import pytest
from marshmallow import fields

from generation.errors import InvalidParam, Rejected, RequestInvalid
from schemas.chat import batch_chat_request_schema
from schemas.common import BaseSchema, StrictBool, StrictInt, load

INT = "'type': 'int_parsing'"


class Model(BaseSchema):
    """A schema declaring its fields in another order than its model."""
    __order__ = ("b", "a")
    a = StrictInt()
    b = StrictInt()
    c = StrictBool()          # not the model's: after its fields
    d = fields.String()       # the simulator's wording


def refusal(schema, body) -> InvalidParam:
    with pytest.raises(InvalidParam) as e:
        load(schema, body)
    return e.value


def test_the_models_order_then_the_rest():
    e = refusal(Model(), {"c": "x", "a": "x", "b": "x"})
    assert type(e) is RequestInvalid and e.param == "body.b"
    assert [row.split("'loc': ")[1].split(",")[0] for row in e.message.splitlines()[1:]] == \
        ["'body.b'", "'body.a'", "'body.c'"]


def test_the_simulators_wording_alone_when_first_and_left_out_after():
    e = refusal(Model(), {"d": 5, "a": "x"})
    assert e.message.startswith("1 validation error:\n") and INT in e.message and e.param == "body.a"
    Model.__order__ = ("d", "b", "a")
    try:
        e = refusal(Model(), {"d": 5, "a": "x"})
    finally:
        Model.__order__ = ("b", "a")
    assert type(e) is InvalidParam and (e.message, e.param) == ("d: Not a valid string.", "d")


def test_a_request_validators_error_met_in_a_field_is_alone():
    """The batch has no request validators of chat's; its logprobs counts still refuse a string
    in their own words (``LogprobCount``), ahead of the field errors listed before them."""
    e = refusal(batch_chat_request_schema, {"messages": [[{"role": "user", "content": "hi"}]], "temperature": "x",
                                            "top_logprobs": "a"})
    assert type(e) is Rejected and e.param == "top_logprobs"


class Required(BaseSchema):
    """A model whose first field is required (``b: int`` without a default)."""
    __order__ = ("b", "a")
    a = StrictInt()
    b = StrictInt(required=True)


class Unordered(BaseSchema):
    """No field order: no pydantic model's, so its missing field keeps the simulator's words."""
    b = StrictInt(required=True)


def test_a_missing_required_field_is_pydantics_missing_in_its_place():
    """pydantic's ``missing``: ``Field required`` at the field, its ``input`` the whole body
    (vLLM's handler: ``<dict of N items>``), listed in the model's order with the other errors."""
    e = refusal(Required(), {"a": "x"})
    assert type(e) is RequestInvalid and e.param == "body.b"
    assert e.message == ("2 validation errors:\n"
                         "  {'type': 'missing', 'loc': 'body.b', 'msg': 'Field required', 'input': '<dict of 1 items>'}\n"
                         "  {'type': 'int_parsing', 'loc': 'body.a', 'msg': 'Input should be a valid integer, unable "
                         "to parse string as an integer', 'input': 'x'}")


def test_a_required_field_sent_null_is_its_own_type_error():
    """pydantic reads ``null`` for ``int`` as ``int_type``, not as absent."""
    e = refusal(Required(), {"b": None})
    assert e.message == ("1 validation error:\n  {'type': 'int_type', 'loc': 'body.b', 'msg': 'Input should be a "
                         "valid integer', 'input': 'None'}")


def test_a_schema_without_a_field_order_keeps_its_words():
    e = refusal(Unordered(), {})
    assert type(e) is InvalidParam and (e.message, e.param) == ("b: Missing data for required field.", "b")
