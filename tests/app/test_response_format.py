"""Structured output (``response_format``) on ``/v1/chat/completions``, in-process (WSGI transport).

vLLM answers ``json_object`` with a JSON object and ``json_schema`` with an instance of the
schema (guided decoding); the simulator synthesises such an instance.  Checked with
``jsonschema`` and with the ``openai`` SDK's own ``parse`` helper (pydantic)."""
from __future__ import annotations

import json
from typing import Literal, Optional

import jsonschema
import pydantic
import pytest

from support import sse_events

USER = [{"role": "user", "content": "Describe a city as JSON."}]
CITY = {"type": "object", "additionalProperties": False,
        "required": ["name", "population", "coastal", "tags", "mayor", "founded"],
        "properties": {
            "name": {"type": "string", "minLength": 3},
            "population": {"type": "integer", "minimum": 1000, "maximum": 5000},
            "coastal": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["old", "big", "green"]},
                     "minItems": 1, "maxItems": 3},
            "mayor": {"$ref": "#/$defs/person"},
            "founded": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "area": {"type": "number"}},
        "$defs": {"person": {"type": "object", "required": ["first", "last"], "additionalProperties": False,
                             "properties": {"first": {"type": "string"}, "last": {"type": "string"}}}}}
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}


def client(base):
    return base.openai(api_key="sk-test", max_retries=0, timeout=30)


def post(base, body: dict):
    return base.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, **body},
                     timeout=30)


def streamed_text(base, body: dict) -> tuple[str, str, dict]:
    r = post(base, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    text, finish, usage, pieces = "", None, None, 0
    for ev in events[:-1]:
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev["choices"]:
            content = ch["delta"].get("content")
            if content:
                text += content
                pieces += 1
            finish = ch["finish_reason"] or finish
    assert usage["completion_tokens"] == pieces
    return text, finish, usage


def test_json_object_non_stream(api):
    for _ in range(5):
        resp = client(api).chat.completions.create(model="test-model", messages=USER,
                                                      response_format={"type": "json_object"})
        c = resp.choices[0]
        obj = json.loads(c.message.content)
        assert isinstance(obj, dict) and obj
        assert c.finish_reason == "stop"
        assert resp.usage.completion_tokens > 0


def test_json_object_stream(api):
    text, finish, _ = streamed_text(api, {"response_format": {"type": "json_object"}})
    assert isinstance(json.loads(text), dict)
    assert finish == "stop"


def test_json_schema_non_stream(api):
    for _ in range(10):
        r = post(api, {"response_format": SCHEMA_FORMAT})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        value = json.loads(choice["message"]["content"])
        jsonschema.validate(value, CITY)
        assert 1000 <= value["population"] <= 5000
        assert choice["finish_reason"] == "stop"


def test_json_schema_stream(api):
    for _ in range(3):
        text, finish, usage = streamed_text(api, {"response_format": SCHEMA_FORMAT})
        jsonschema.validate(json.loads(text), CITY)
        assert finish == "stop" and usage["completion_tokens"] > 10


def test_json_schema_non_object_top_level(api):
    schema = {"type": "array", "items": {"type": "integer", "minimum": -3, "maximum": -1}, "minItems": 2,
              "maxItems": 2}
    r = post(api, {"response_format": {"type": "json_schema", "json_schema": {"name": "xs", "schema": schema}}})
    value = json.loads(r.json()["choices"][0]["message"]["content"])
    jsonschema.validate(value, schema)
    assert len(value) == 2


def test_openai_sdk_parse_with_pydantic(api):
    """The SDK turns a pydantic model into a strict json_schema and parses the answer back."""
    class Step(pydantic.BaseModel):
        explanation: str
        output: str

    class Answer(pydantic.BaseModel):
        steps: list[Step]
        final_answer: str
        confidence: float
        mood: Literal["happy", "sad"]
        note: Optional[str]

    completion = client(api).chat.completions.parse(model="test-model", messages=USER,
                                                       response_format=Answer)
    msg = completion.choices[0].message
    assert isinstance(msg.parsed, Answer)
    assert msg.parsed.mood in ("happy", "sad")
    assert completion.choices[0].finish_reason == "stop"


def test_text_format_is_plain_text(api):
    r = post(api, {"response_format": {"type": "text"}, "max_tokens": 5, "ignore_eos": True})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == 5


def test_max_tokens_cuts_json_like_vllm(api):
    """Guided decoding still stops at max_tokens: the JSON is cut and finish_reason is length."""
    r = post(api, {"response_format": SCHEMA_FORMAT, "max_tokens": 4})
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4
    assert body["choices"][0]["message"]["content"].startswith("{")


@pytest.mark.parametrize("fmt,param", [
    ({"type": "xml"}, "body.response_format.type"),         # pydantic's union errors (vLLM 0.34)
    ({}, "body.response_format.type"),
    ({"type": "json_schema"}, "response_format"),
    ({"type": "json_schema", "json_schema": {"schema": CITY}}, "body.response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "a": {"type": "stringstring"}}}}}, "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "enum": [1]}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": []}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "x": {"type": "string", "enum": []}}, "required": ["x"]}}}, "response_format.json_schema.schema"),
], ids=["unknown-type", "no-type", "no-json-schema", "no-name", "bad-schema", "enum-type", "empty-enum",
        "empty-enum-property"])
def test_invalid_response_format(api, fmt, param):
    r = post(api, {"response_format": fmt})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["code"] == 400


def test_a_refused_schema_is_worded_as_vllms_grammar_backend(api):
    """A schema the answer must follow is refused in vLLM's xgrammar words; a tool's keeps the
    reference's ("Tool validation failed")."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": []}}}
    r = post(api, {"response_format": fmt})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "Failed to transform json schema into a grammar: response_format.json_schema.schema is not "
        "a valid JSON Schema: enum has no values (at $.enum)")
    r = post(api, {"structured_outputs": {"json": {"enum": []}}})
    assert r.json()["error"]["message"].startswith("Failed to transform json schema into a grammar: structured_outputs.json")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"enum": []}}}
    r = post(api, {"tools": [tool], "tool_choice": "required"})
    assert r.json()["error"]["message"].startswith("Tool validation failed: tools[0].function.parameters")


NO_KIND = ("{'json': None, 'regex': None, 'choice': None, 'grammar': None, 'json_object': None, "
           "'disable_any_whitespace': False, 'disable_additional_properties': False, 'whitespace_pattern': None, "
           "'structural_tag': None, '_backend': None, '_backend_was_auto': False}")


@pytest.mark.parametrize("path,key,value", [("/v1/chat/completions", "messages", USER),
                                            ("/v1/completions", "prompt", "Describe a city as JSON.")])
def test_response_format_lies_over_structured_outputs(api, path, key, value):
    """vLLM 0.34's ``structured_outputs_from_response_format`` lays ``response_format`` over
    ``structured_outputs`` (``dataclasses.replace``), whose ``__post_init__`` then counts the kinds:
    a ``json_schema`` without ``schema`` sets none (400), a kind beside another of
    ``structured_outputs`` two (400), the same kind is the ``response_format``'s."""
    def send(body):
        return api.post(path, json={"model": "test-model", key: value, "seed": 3, **body})
    r = send({"response_format": {"type": "json_schema", "json_schema": {"name": "anything"}}})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"message": "You must use one kind of structured outputs constraint but none are "
                                            "specified: " + NO_KIND, "type": "BadRequestError", "param": None,
                                 "code": 400}
    r = send({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "ab+"}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == (
        "You can only use one kind of structured outputs constraint but multiple are specified: "
        + NO_KIND.replace("'regex': None", "'regex': 'ab+'").replace("'json_object': None", "'json_object': True"))
    r = send({"response_format": SCHEMA_FORMAT, "structured_outputs": {"json": {"type": "string", "enum": ["q"]}}})
    assert r.status_code == 200, r.text
    out = r.json()["choices"][0]
    jsonschema.validate(json.loads(out["message"]["content"] if "message" in out else out["text"]), CITY)
    r = send({"response_format": {"type": "text"}, "structured_outputs": {"choice": ["a", "b"]}})
    out = r.json()["choices"][0]
    assert (out["message"]["content"] if "message" in out else out["text"]) in ("a", "b")


def test_same_seed_same_json(app_client):
    outs = []
    for seqs in ("9", "10"):
        base = app_client("--seed", "777", "--max-num-seqs", seqs)
        outs.append([post(base, {"response_format": f}).json()["choices"][0]["message"]["content"]
                     for f in (SCHEMA_FORMAT, {"type": "json_object"})])
    assert outs[0] == outs[1]
    jsonschema.validate(json.loads(outs[0][0]), CITY)
