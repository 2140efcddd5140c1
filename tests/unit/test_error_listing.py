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
