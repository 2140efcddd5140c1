"""Structured outputs on both APIs (issue 21 audit): each of ``json``, ``regex``, ``choice``,
``grammar`` and ``json_object`` on chat and on completions, JSON and streamed (the streamed text
is the same kind of answer), and the removed ``guided_*`` fields on completions answered as
vLLM 0.33 answers them (ignored: plain text)."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from support import sse_events

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name", "age"], "additionalProperties": False}
GBNF = 'root ::= answer "." \nanswer ::= "yes" | "no" | num\nnum ::= [0-9]{1,3}'


def _valid_json(text):
    jsonschema.validate(json.loads(text), SCHEMA)
    return True


CASES = {
    "json": ({"json": SCHEMA}, _valid_json),
    "regex": ({"regex": r"[A-Z][a-z]{2,5}-\d{3}"}, lambda t: re.fullmatch(r"[A-Z][a-z]{2,5}-\d{3}", t)),
    "choice": ({"choice": ["left", "right"]}, lambda t: t in ("left", "right")),
    "grammar": ({"grammar": GBNF}, lambda t: re.fullmatch(r"(yes|no|[0-9]{1,3})\.", t)),
    "json_object": ({"json_object": True}, lambda t: isinstance(json.loads(t), dict)),
}


def _post(api, path, so, stream):
    # no max_tokens: a json_object answer's length is drawn as any answer's (Normal(40, 20)
    # tokens without max_tokens), so it is never cut by the limit (finish "length")
    body = {"model": "test-model", "structured_outputs": so, "stream": stream}
    body.update({"messages": [{"role": "user", "content": "Answer."}]} if path.endswith("chat/completions")
                else {"prompt": "Answer:"})
    r = api.post(path, json=body)
    assert r.status_code == 200, r.text
    if not stream:
        choice = r.json()["choices"][0]
        return choice.get("text") if "text" in choice else choice["message"]["content"]
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    return "".join((e["choices"][0].get("text") or (e["choices"][0].get("delta") or {}).get("content") or "")
                   for e in events[:-1] if e["choices"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"], ids=["chat", "completions"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_on_each_api(api, kind, path, stream):
    so, ok = CASES[kind]
    for _ in range(3):
        text = _post(api, path, so, stream)
        assert ok(text), text


@pytest.mark.parametrize("field,value", [("guided_json", SCHEMA), ("guided_regex", "x+"), ("guided_choice", ["a"]),
                                         ("guided_grammar", GBNF), ("guided_decoding_backend", "xgrammar")])
def test_removed_guided_fields_on_completions_are_ignored(api, field, value):
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Answer:", "max_tokens": 5,
                                          "ignore_eos": True, field: value})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5


def test_two_kinds_at_once_on_completions_is_a_400(api):
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Answer:",
                                          "structured_outputs": {"choice": ["a"], "regex": "b"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs"
