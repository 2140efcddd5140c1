"""Numbers in generated tool arguments and JSON answers (issue 21): an ``integer`` is always an
``int``, a ``number`` is a whole number when its range holds one (Codex read a simulated
``write_stdin`` ``session_id: 53.48`` and answered ``expected i32``), and every numeric keyword
(``minimum`` / ``maximum`` / ``exclusive*`` in both drafts' forms, ``multipleOf``, ``enum``,
``const``) is honoured.  Exact values under fixed seeds, then a Hypothesis property."""
from __future__ import annotations

import json
import pathlib
import random

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generation.config.sim_config import SimConfig
from generation.structured.schema_sampler import SchemaSampler

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
CFG = SimConfig()        # flag ranges: integers 0..100, numbers [0, 100)


def _draws(schema, seeds=range(5), cfg=CFG):
    return [SchemaSampler(cfg, random.Random(s), schema).sample(schema) for s in seeds]


@pytest.mark.parametrize("schema,expected", [
    ({"type": "integer"}, [49, 17, 7, 30, 30]),
    ({"type": "integer", "minimum": 0.5, "maximum": 2.5}, [2, 1, 1, 1, 1]),
    ({"type": "integer", "exclusiveMinimum": 0, "maximum": 9007199254740991}, [50, 18, 8, 31, 31]),
    ({"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 13}, [12, 11, 11, 11, 11]),
    ({"type": "integer", "minimum": 5, "exclusiveMinimum": True, "maximum": 7}, [7, 6, 6, 6, 6]),   # draft 4
    ({"type": "integer", "minimum": -3, "exclusiveMaximum": -1}, [-2, -3, -3, -3, -3]),
    ({"type": "integer", "minimum": 1000, "maximum": 1005}, [1003, 1001, 1000, 1001, 1001]),  # the schema wins
    ({"type": "integer", "multipleOf": 7}, [91, 14, 91, 21, 21]),
    ({"type": "integer", "multipleOf": 2.5, "minimum": 0, "maximum": 20}, [15, 5, 0, 5, 5]),
    ({"type": "integer", "enum": [1.0, 2.0, 3.5]}, [2, 1, 1, 1, 1]),        # 3.5 is no integer
    ({"type": "integer", "const": 4.0}, [4, 4, 4, 4, 4]),
    ({"type": ["integer", "null"], "minimum": 1, "maximum": 3}, [2, 3, 1, 3, 2]),
])
def test_integer_is_always_an_int(schema, expected):
    got = _draws(schema)
    assert got == expected
    assert all(type(v) is int for v in got)
    check = jsonschema.Draft4Validator if schema.get("exclusiveMinimum") is True else jsonschema.Draft202012Validator
    for v in got:
        check(schema).validate(v)
        assert "." not in json.dumps(v)


@pytest.mark.parametrize("schema,expected", [
    ({"type": "number"}, [49, 17, 7, 30, 30]),                                      # whole numbers
    ({"type": "number", "minimum": 0, "maximum": 600000}, [49, 17, 7, 30, 30]),    # Claude Code's TaskOutput.timeout
    ({"type": "number", "minimum": 1000, "maximum": 1005}, [1003, 1001, 1000, 1001, 1001]),
    ({"type": "number", "minimum": 0.5, "maximum": 0.75}, [0.71, 0.53, 0.74, 0.56, 0.56]),   # no whole number fits
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, [0.84, 0.13, 0.96, 0.24, 0.24]),
    ({"type": "number", "multipleOf": 0.25, "minimum": 1, "maximum": 2}, [1.75, 1.25, 1.0, 1.25, 1.25]),
    ({"type": "number", "enum": [1.0, 2.5]}, [2.5, 1.0, 1.0, 1.0, 1.0]),          # number keeps its floats
])
def test_number_values_and_bounds(schema, expected):
    got = _draws(schema)
    assert got == expected
    for v in got:
        jsonschema.validate(v, schema)


def test_number_flag_range_is_half_open_and_schema_maximum_inclusive():
    cfg = SimConfig(min_tool_call_number_param=3, max_tool_call_number_param=5)
    assert set(_draws({"type": "number"}, range(40), cfg)) == {3, 4}                  # [3, 5)
    assert set(_draws({"type": "number", "maximum": 5}, range(40), cfg)) == {3, 4}    # the flag's 5 ends it
    assert set(_draws({"type": "number", "minimum": 4, "maximum": 4}, range(5), cfg)) == {4}


def test_huge_ranges_give_exact_whole_numbers_or_floats():
    assert _draws({"type": "number", "minimum": 2.0 ** 60}, range(2)) == [2.0 ** 60, 2.0 ** 60]   # beyond 2**53
    assert _draws({"type": "integer", "minimum": 1e20}, range(1)) == [10 ** 20]


def _codex_tools():
    body = json.loads((FIXTURES / "codex_first_turn.json").read_text())
    flat = []
    for t in body["tools"]:
        flat += t["tools"] if t.get("type") == "namespace" else [t] if t.get("type") == "function" else []
    return {t["name"]: t["parameters"] for t in flat}


def test_codex_number_arguments_are_integers():
    """``write_stdin`` (``session_id: i32``, ``yield_time_ms`` / ``max_output_tokens``: Rust
    integers, declared ``number``) and every other Codex tool: all numbers whole."""
    cfg = SimConfig(tool_call_not_required_param_probability=100,
                    object_tool_call_not_required_field_probability=100)
    tools = _codex_tools()
    ws = tools["write_stdin"]
    assert [SchemaSampler(cfg, random.Random(s), ws).sample(ws)["session_id"] for s in range(5)] == [65, 32, 21, 47, 50]

    def numbers(v):
        if isinstance(v, dict):
            return [x for w in v.values() for x in numbers(w)]
        if isinstance(v, list):
            return [x for w in v for x in numbers(w)]
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else []

    seen = 0
    for name, params in tools.items():
        for s in range(20):
            args = SchemaSampler(cfg, random.Random(s), params).sample(params)
            jsonschema.validate(args, params)
            nums = numbers(args)
            seen += len(nums)
            assert all(type(x) is int for x in nums), (name, args)
    assert seen == 20 * 7       # exec_command 2, write_stdin 3, wait_agent 1, create_goal 1


_bound = st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False))


@st.composite
def integer_schemas(draw):
    schema = {"type": "integer"}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.booleans()):
            schema[key] = draw(_bound)
    if draw(st.booleans()):
        schema["multipleOf"] = draw(st.sampled_from([1, 2, 7, 0.5, 2.5, 1.0, 100]))
    return schema


@settings(max_examples=150, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(integer_schemas(), st.integers(0, 2**32))
def test_property_integer_schemas_give_ints(schema, seed):
    try:
        v = SchemaSampler(CFG, random.Random(seed), schema).sample(schema)
    except ValueError:          # SchemaUnsatisfiable: an empty range (the request check's 400)
        return
    assert type(v) is int
    jsonschema.validate(v, schema)


# ---- a plain pattern on a loaded machine (found in a Claude Code 2.1.332 run at load 16) ----------
def test_plain_pattern_is_found_even_when_the_time_bound_is_spent(monkeypatch):
    """Claude Code's ``Workflow.resumeFromRunId`` (``^wf_[a-z0-9-]{6,}$``) was answered with a 400
    (``no string ... found (within 0.05 s)``) when the word candidates had used the time: the
    first draws from the pattern now run regardless."""
    import regex
    from generation.structured import schema_sampler
    monkeypatch.setattr(schema_sampler, "PATTERN_SECONDS", 0.0)
    schema = {"type": "string", "pattern": "^wf_[a-z0-9-]{6,}$"}
    for seed in range(5):
        schema_sampler._witnesses.clear()
        v = SchemaSampler(CFG, random.Random(seed), schema).sample(schema)
        assert regex.fullmatch("wf_[a-z0-9-]{6,}", v), v
