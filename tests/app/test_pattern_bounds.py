"""Patterns and schemas bounded by their worst case (issue 23 items 1, 2 and 9), in-process.

A 60-byte ``pattern`` once held the hub 1-2 s and kept ~380 MB for ever (the unrolling check
counted only minimum repeats, and the compiled pattern was cached for a refused request);
``x{4294967296}`` was a 500; four 3 MB schemas made a one-property tool wait 98 s in the
shared schema pool.
"""
from __future__ import annotations

import time

import gevent
import pytest

from generation.structured import schema_sampler as ss
from generation.structured.regex_sampler import expansion, parse, text_expansion
from support import make_app
from support.hub_probe import rss_mb

USER = [{"role": "user", "content": "hi"}]




def string_schema(pattern: str) -> dict:
    return {"type": "object", "required": ["s"], "properties": {"s": {"type": "string", "pattern": pattern}}}


def requests_for(schema: dict):
    """``(path, body, param)`` for each API that takes a schema (param None: Anthropic/Responses
    envelopes)."""
    return [
        ("/v1/chat/completions", {"messages": USER, "tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "f", "parameters": schema}}]}, "tools[0].function.parameters"),
        ("/v1/chat/completions", {"messages": USER, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}, "response_format.json_schema.schema"),
        ("/v1/messages", {"max_tokens": 20, "messages": USER, "tool_choice": {"type": "any"},
                          "tools": [{"name": "f", "input_schema": schema}]}, None),
        ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                               "schema": schema}}}, None),
    ]


@pytest.mark.parametrize("pattern,atoms", [
    ("(?:(?:a?){1000}){1000}", 1_000_000), ("(?:a?){5000}", 5000), ("(?:a{1,3000}){2}", 6000),
    ("(?:ab|c{0,50}){100}", 5000), ("x{5,}", 6), ("a{3}", 3), ("(?:ab|cd)*", 2),
])
def test_expansion_counts_maximum_repeats(pattern, atoms):
    assert expansion(parse(pattern)) == atoms


def test_text_expansion_bounds_patterns_python_cannot_parse():
    assert text_expansion(r"\p{L}{3,5}") == len(r"\p{L}{3,5}") * 5
    assert text_expansion("x{4294967296}") >= 4294967296


@pytest.mark.parametrize("pattern", ["(?:(?:a?){1000}){1000}", "x{4294967296}", "x?{1000}", "(?:a{0,99}){99}",
                                     "a" * 5000])
@pytest.mark.parametrize("case", range(4), ids=["chat-tools", "chat-response-format", "messages", "responses"])
def test_worst_case_patterns_are_400s_at_once_and_leave_nothing(api, pattern, case):
    path, body, param = requests_for(string_schema(pattern))[case]
    t0 = time.monotonic()
    r = api.post(path, json={"model": "test-model", **body})
    assert time.monotonic() - t0 < 1.0
    assert r.status_code == 400, r.text[:300]
    assert "$.properties.s" in r.text
    if param is not None:
        assert r.json()["error"]["param"] == param
    assert pattern not in ss._compiled
    synth = api.sim.tool_synthesizer
    assert not any(pattern.encode() in k for k in synth.validator._schema_ok)


def test_pattern_properties_keys_are_bounded_too(api):
    schema = {"type": "object", "patternProperties": {"(?:(?:a?){1000}){1000}": {"type": "string"}}}
    path, body, param = requests_for(schema)[1]
    r = api.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400 and "patternProperties key" in r.json()["error"]["message"]


def test_a_flood_of_distinct_bad_patterns_keeps_memory_and_the_hub(api):
    """14 distinct 60-byte patterns took the worker to 5.6 GB; now each is a parse and a 400."""
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)
    g = gevent.spawn(ticker)
    gevent.sleep(0.02)
    before = rss_mb()
    for i in range(14):
        pattern = f"(?:(?:{chr(97 + i)}?){{1000}}){{1000}}"
        r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": string_schema(pattern)}}})
        assert r.status_code == 400
    g.kill()
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 0.5
    assert rss_mb() - before < 30, (before, rss_mb())


def test_compiled_pattern_cache_is_bounded_in_atoms():
    for i in range(40):
        ss._pattern(f"(?:{i}[a-z]{{0,40}}){{95}}")          # ~4000 atoms each
    assert ss._compiled_atoms[0] <= ss._COMPILED_ATOMS
    assert sum(v[2] for v in ss._compiled.values()) == ss._compiled_atoms[0]
    assert len(ss._compiled) <= ss._COMPILED_ATOMS // 3000


def big_schema(n_props: int, desc: int = 10) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * desc}
                                             for i in range(n_props)}}


def test_a_schema_past_the_size_bound_is_a_400(api):
    schema = big_schema(3000, 400)                   # ~1.3 MB
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "response_format.json_schema.schema" and "more than the 1048576" in err["message"]


def test_a_small_schema_does_not_wait_behind_a_large_one(app_client):
    """The large schema's metaschema check takes seconds in its lane; a one-property tool sent
    meanwhile is checked in the other lane and answers at once."""
    c = app_client("--max-num-seqs", "8")
    large = big_schema(4000, 100)                   # ~560 KB: seconds of jsonschema work
    done = {}

    def send_large():
        t0 = time.monotonic()
        r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "max_tokens": 2,
                                                 "response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "x", "schema": large}}})
        done["large"] = (r.status_code, time.monotonic() - t0)
    g = gevent.spawn(send_large)
    gevent.sleep(0.3)
    t0 = time.monotonic()
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "max_tokens": 2, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"q": {"type": "string"}}}}}]})
    small = time.monotonic() - t0
    health_t0 = time.monotonic()
    assert c.get("/health").status_code == 200
    health = time.monotonic() - health_t0
    g.join()
    assert r.status_code == 200
    assert done["large"][0] == 200
    assert health < 0.5, (small, health, done)
    assert small < 2.0 and small < done["large"][1] / 4, (small, done)    # 0.1-0.2 s idle, 0.8 s at load 10


def test_verdict_cache_is_bounded_in_bytes(monkeypatch):
    """The cache's byte budget at a small scale (2 KB instead of 8 MB, the same rules): a schema
    over an eighth of the budget is checked but not remembered, and older verdicts are evicted
    once the remembered bytes would pass the budget (3 x 330 KB schemas took ~5 s here)."""
    import orjson

    from generation.structured import tool_validation as tv
    monkeypatch.setattr(tv, "_SCHEMA_CACHE_BYTES", 2 << 10)
    validator = tv.ToolValidator(make_app().extensions["simulator"])
    key = lambda schema: orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)      # noqa: E731
    large = big_schema(10, 20)
    assert len(key(large)) > (2 << 10) // 8
    validator.check_schema(large, "tools[0].function.parameters")
    assert (validator._cached_bytes, len(validator._schema_ok)) == (0, 0)
    small = [{"type": "object", "properties": {f"q{i:03d}": {"type": "string"}}} for i in range(60)]
    size = len(key(small[0]))
    assert {len(key(s)) for s in small} == {size}
    for schema in small:
        validator.check_schema(schema, "tools[0].function.parameters")
    kept = (2 << 10) // size
    assert kept < len(small)
    assert (validator._cached_bytes, len(validator._schema_ok)) == (kept * size, kept)
    assert list(validator._schema_ok) == [key(s) for s in small[-kept:]]
