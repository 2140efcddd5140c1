"""Structured outputs as vLLM 0.33 takes them (issue 21): ``structured_outputs`` with ``json``,
``regex``, ``choice``, ``grammar`` and ``json_object`` on chat and completions, the answer
honouring each; the removed ``guided_*`` fields ignored as vLLM's models ignore unknown fields;
Anthropic ``output_config.format`` producing conforming JSON."""
from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from generation.structured.grammar import GrammarError, compile_grammar

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name", "age"]}
MSGS = [{"role": "user", "content": "Describe a person."}]


def chat(api, so, **kw):
    return api.post("/v1/chat/completions", json={"model": "test-model", "messages": MSGS,
                                                  "structured_outputs": so, **kw})


def text_of(r):
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("schema", [SCHEMA, json.dumps(SCHEMA)], ids=["object", "string"])
def test_json_schema(api, schema):
    for _ in range(5):
        jsonschema.validate(json.loads(text_of(chat(api, {"json": schema}))), SCHEMA)


def test_json_object(api):
    assert isinstance(json.loads(text_of(chat(api, {"json_object": True}))), dict)


def test_regex_full_match(api):
    pattern = r"[A-Z][a-z]{2,5}-\d{3}"
    for _ in range(5):
        assert re.fullmatch(pattern, text_of(chat(api, {"regex": pattern})))


def test_choice(api):
    seen = {text_of(chat(api, {"choice": ["yes", "no", "maybe"]})) for _ in range(12)}
    assert seen <= {"yes", "no", "maybe"} and len(seen) >= 2


GBNF = 'root ::= answer "." \nanswer ::= "yes" | "no" | num\nnum ::= [0-9]{1,3}'


def test_grammar_gbnf(api):
    for _ in range(5):
        assert re.fullmatch(r"(yes|no|[0-9]{1,3})\.", text_of(chat(api, {"grammar": GBNF})))


def test_grammar_lark_recursive_is_bounded():
    g = compile_grammar('start: expr\nexpr: term | expr "+" term\nterm: NUMBER | "(" expr ")"\nNUMBER: /[0-9]+/\n')
    rng = random.Random(1)
    for _ in range(20):
        s = g.generate(rng)
        assert re.fullmatch(r"[0-9+()]+", s) and s.count("(") == s.count(")") and len(s) < 4096


@pytest.mark.parametrize("grammar", ['root ::= (""){99999999}', 'root ::= "a"{1000000}',
                                     "root ::= b1\n" + "".join(f"b{i} ::= b{i + 1}\n" for i in range(1, 6000)) + 'b6000 ::= "x"'])
def test_a_grammar_that_takes_unbounded_work_is_a_400(api, grammar):
    """A repeat of nothing, a repeat past the 4,096-character bound and a 6,000-rule chain held
    the hub for ever, 0.4 s and 23 s (every stream stalled meanwhile): each is refused within
    ``grammar.MAX_WORK`` steps (tests/unit/test_grammar_work.py)."""
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                          "structured_outputs": {"grammar": grammar}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs.grammar", r.text[:300]


@pytest.mark.parametrize("so", [{"regex": "[\\u0000-\\U0010ffff]{3000}"}, {"grammar": "root ::= [\\u0000-\\U0010ffff]{3000}"},
                                {"grammar": 'root ::= "\\ud800"'}])
def test_an_answer_holds_no_surrogate(api, so):
    """A class over every code point drew UTF-16 surrogates, and a grammar literal could hold
    one: the answer's encoding failed, a 500 (tests/unit/test_no_surrogates_drawn.py); drawn
    without them, or vLLM's 400 naming the field for what can only give one."""
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 500,
                                          "structured_outputs": so})
    if "ud800" in json.dumps(so):
        assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs.grammar", r.text[:300]
    else:
        assert r.status_code == 200, r.text[:300]
        text = r.json()["choices"][0]["text"]
        assert text and not any("\ud800" <= c <= "\udfff" for c in text)


@pytest.mark.parametrize("text", ["", "root ::= missing", "root ::= (", "root ::= root"])
def test_bad_grammar_is_rejected(text):
    with pytest.raises(GrammarError):
        compile_grammar(text)


@pytest.mark.parametrize("so,param", [
    ({"json": SCHEMA, "regex": "a"}, None),       # vLLM 0.34's chat validator names no parameter here
    ({"regex": "(unclosed"}, "structured_outputs.regex"),
    ({"choice": []}, "structured_outputs.choice"),
    ({"grammar": "root ::= nothing"}, "structured_outputs.grammar"),
    ({"json": "{not json"}, "structured_outputs.json"),
    ({"json": {"type": "bogus"}}, "structured_outputs.json"),
])
def test_bad_structured_outputs_are_400_naming_the_field(api, so, param):
    r = chat(api, so)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("tag", ["", "not json", "[1]"])
def test_a_structural_tag_that_is_no_json_object_is_400(api, path, tag):
    """vLLM 0.34's ``validate_structured_outputs_structural_tag`` (a request validator of chat and
    completions): the string is ``json.loads``-ed and compiled by xgrammar, else its 400."""
    key, value = ("messages", MSGS) if "chat" in path else ("prompt", "Answer:")
    r = api.post(path, json={"model": "test-model", key: value, "max_tokens": 5,
                             "structured_outputs": {"structural_tag": tag}})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"message": "Invalid structured_outputs structural_tag specification. "
                                            "(parameter=structured_outputs)",
                                 "type": "BadRequestError", "param": "structured_outputs", "code": 400}
    tag = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}})
    r = api.post(path, json={"model": "test-model", key: value, "max_tokens": 5,
                             "structured_outputs": {"structural_tag": tag}})
    assert r.status_code == 200, r.text


def test_bounded_by_max_tokens(api):
    r = chat(api, {"json": SCHEMA}, max_tokens=3)
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == 3


def test_completions_take_structured_outputs(api):
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Answer:", "max_tokens": 50,
                                          "structured_outputs": {"choice": ["left", "right"]}})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("left", "right")
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Answer:", "max_tokens": 50,
                                          "structured_outputs": {"json": SCHEMA}})
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), SCHEMA)


def test_structured_output_streams_the_same_text(api):
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": MSGS, "stream": True,
                                               "structured_outputs": {"regex": r"\d{4}-\d{2}"}})
    from support import sse_events
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in sse_events(r.text)[:-1])
    assert re.fullmatch(r"\d{4}-\d{2}", text)


@pytest.mark.parametrize("field", ["guided_json", "guided_regex", "guided_choice", "guided_grammar"])
def test_removed_guided_fields_are_ignored_as_vllm_does(api, field):
    """vLLM 0.33 removed ``guided_*``; its request models accept unknown fields (a warning in the
    log), so the answer is plain text, not a 400."""
    value = {"guided_json": SCHEMA, "guided_regex": "x+", "guided_choice": ["a"], "guided_grammar": GBNF}[field]
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": MSGS, "max_tokens": 5,
                                               "ignore_eos": True, field: value})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5


def test_anthropic_output_config_format(api):
    for _ in range(3):
        r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 200, "messages": MSGS,
                                           "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}})
        assert r.status_code == 200, r.text
        jsonschema.validate(json.loads(r.json()["content"][0]["text"]), SCHEMA)


def test_anthropic_output_config_bad_schema_is_400(api):
    r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 20, "messages": MSGS,
                                       "output_config": {"format": {"type": "json_schema", "schema": "x"}}})
    assert r.status_code == 400 and "output_config.format.schema" in r.text


def test_structured_output_after_reasoning(app_client):
    api = app_client("--reasoning-parser", "qwen3")
    r = chat(api, {"json": SCHEMA}, max_tokens=200)
    msg = r.json()["choices"][0]["message"]
    assert msg["reasoning"]
    jsonschema.validate(json.loads(msg["content"]), SCHEMA)
