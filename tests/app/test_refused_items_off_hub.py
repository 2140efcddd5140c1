"""A body of a quarter of a million refused list items: each refusal was built on the hub, one
error per item (a million of them held ``/health`` 1-22 s per request, and their reference
cycles a later full collection 0.7 s more).  A body over 8 KiB is now validated in the
validation lane's thread, a list stops at the first item whose error is the simulator's own
(only that one is shown), and no refusal leaves cyclic garbage (``schemas.loading``)."""
from __future__ import annotations

import gc

import orjson
import pytest
from marshmallow import fields

from schemas.common import BoundedList, List, Str, _refusal
from schemas.loading import OFF_HUB_BYTES, _load, load
from generation.adapters.validation import BODY_BYTES
from generation.errors import InvalidParam
from schemas.chat import chat_request_schema
from support.hub_probe import HealthProbe, health_bound

N = 250_000
USER = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}
CHAT = {"model": "test-model", "messages": USER, "max_tokens": 1}
MSGS = {"model": "test-model", "messages": USER, "max_tokens": 1}

ATTACKS = [   # (route, body, a part of the message's first 200 characters)
    ("/v1/chat/completions", {**CHAT, "stop": [1] * N}, f"{N + 1} validation errors:"),
    ("/v1/chat/completions", {**CHAT, "allowed_token_ids": ["a"] * N}, f"{N} validation errors:"),
    ("/v1/chat/completions", {**CHAT, "tools": [1] * N}, f"{N} validation errors:"),     # pydantic's model_type each
    ("/v1/chat/completions", {**CHAT, "bad_words": [1] * N}, f"{N} validation errors:"),
    ("/v1/chat/completions", {**CHAT, "logit_bias": {str(i): "x" for i in range(N // 4)}},
     f"{N // 4} validation errors:"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "structural_tag", "structures": [],
                                                           "triggers": [1] * N}}, "validation errors:"),
    ("/v1/messages", {**MSGS, "tools": [1] * N}, "tools[0]: "),
    ("/v1/messages", {**MSGS, "stop_sequences": [1] * N}, f"{N} validation errors:"),
]


def _message(r) -> str:
    body = r.json()
    return body["error"]["message"]


def test_a_quarter_million_refused_items_leave_the_hub_free(app_client):
    c = app_client()
    bodies = [(route, orjson.dumps(body), start) for route, body, start in ATTACKS]
    gc.collect()
    probe = HealthProbe(c)
    out = [c.post(route, content=raw, headers=JSON) for route, raw, _ in bodies]
    health = probe.stop()
    for (route, _, start), r in zip(bodies, out):
        assert r.status_code == 400, (route, r.text[:300])
        assert start in _message(r)[:200], (route, _message(r)[:300])
    assert health < health_bound(), (health, health_bound())
    del out
    # no refusal left a reference cycle: marshmallow's per-load one, the lane's re-raise
    assert gc.collect() < 5_000


@pytest.fixture
def where_loaded(monkeypatch):
    """The threads ``schemas.loading._load`` ran in: True for the hub's, False for another."""
    from generation.lanes import on_hub_thread
    import schemas.loading as loading
    seen, real = [], loading._load

    def spy(schema, body):
        seen.append(on_hub_thread())
        return real(schema, body)
    monkeypatch.setattr(loading, "_load", spy)
    return seen


def test_a_large_body_is_refused_as_a_small_one_is(where_loaded):
    """The lane answers what the hub would: the same error for the same body."""
    body = {"messages": USER, "max_tokens": 1, "stop": [1] * 5000, "n": "x"}
    assert len(orjson.dumps(body)) > OFF_HUB_BYTES
    with pytest.raises(InvalidParam) as direct:
        _load(chat_request_schema, body)
    token = BODY_BYTES.set(OFF_HUB_BYTES + 1)
    try:
        with pytest.raises(InvalidParam) as laned:
            load(chat_request_schema, body)
    finally:
        BODY_BYTES.reset(token)
    assert where_loaded == [False]                  # checked in the lane's thread
    assert str(laned.value) == str(direct.value)
    assert str(direct.value).startswith("5002 validation errors:")     # stop's 5001 and n's one


def test_a_large_valid_body_loads_in_the_lane_and_a_small_one_on_the_hub(where_loaded):
    body = {"messages": USER * 2000, "max_tokens": 1}
    token = BODY_BYTES.set(len(orjson.dumps(body)))
    try:
        req = load(chat_request_schema, body)
    finally:
        BODY_BYTES.reset(token)
    assert len(req.messages) == 2000
    token = BODY_BYTES.set(OFF_HUB_BYTES)
    try:
        load(chat_request_schema, {"messages": USER, "max_tokens": 1})
    finally:
        BODY_BYTES.reset(token)
    assert where_loaded == [False, True]


def test_a_bounded_list_stops_at_the_first_error_of_its_own_words():
    from marshmallow import Schema, ValidationError

    class S(Schema):
        items = BoundedList(fields.Dict())
    with pytest.raises(ValidationError) as e:
        S().load({"items": [1] * 2000})
    assert sorted(e.value.messages["items"]) == list(range(256))      # one slice, then no further


def test_a_bounded_list_counts_every_pydantic_error():
    from marshmallow import Schema, ValidationError

    class S(Schema):
        items = List(Str())
    body = {"items": ["a"] * 300 + [1] * 700}
    with pytest.raises(ValidationError) as e:
        S().load(body)
    # the slice of items 256-511 is kept (212 errors: ten are shown), the later ones counted under
    # a key past the last item
    assert sorted(e.value.messages["items"]) == [*range(300, 512), 1000]
    assert e.value.messages["items"][1000][0].more == 488
    message = str(_refusal(S(), e.value.messages, body))
    assert message.startswith("700 validation errors:\n  {'type': 'string_type', 'loc': 'body.items.300',")
    assert message.endswith("...and 690 more errors")


def test_a_refusal_from_the_lane_prints_no_traceback(capfd):
    body = {"messages": USER, "max_tokens": 1, "stop": [1] * 3000}
    token = BODY_BYTES.set(OFF_HUB_BYTES + 1)
    try:
        with pytest.raises(InvalidParam):
            load(chat_request_schema, body)
    finally:
        BODY_BYTES.reset(token)
    assert "Traceback" not in capfd.readouterr().err
