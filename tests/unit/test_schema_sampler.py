"""Schema sampler and request checks, unit level (issue 12): the hostile schemas of the issue
and a Hypothesis property - every value the sampler returns validates with ``jsonschema``, or
the schema is rejected with a 400 naming the field, and every call finishes within a bound."""
from __future__ import annotations

import random
import time

import jsonschema
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from generation.config.sim_config import SimConfig
from blueprints.errors import status_of
from generation.errors import InvalidParam
from generation.structured.regex_sampler import expansion, generate, parse
from generation.structured.schema_sampler import MAX_STRING, SchemaSampler, SchemaUnsatisfiable
from generation.structured.tool_validation import MAX_SCHEMA_DEPTH, ToolValidator, json_depth_exceeds

BOUND_S = 3.0     # generous: the designed bound is 1 s of checks + 0.5 s of sampling


def _bounded_pattern(validator, patrn, instance, schema):
    """jsonschema's ``pattern`` keyword with a timeout (its own uses ``re``, which can hang)."""
    if isinstance(instance, str) and regex.search(patrn, instance, timeout=1.0) is None:
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


Checker = jsonschema.validators.extend(Draft202012Validator, {"pattern": _bounded_pattern})


class _Holder:
    def __init__(self, **kw):
        self.config = SimConfig(**kw)


def _validator(**kw) -> ToolValidator:
    return ToolValidator(_Holder(**kw))


def _check_then_sample(schema, seed=0):
    """``("rejected", InvalidParam)`` or ``("value", instance)``; asserts the time bound."""
    holder = _Holder()
    t0 = time.monotonic()
    try:
        ToolValidator(holder).check_schema(schema, "response_format.json_schema.schema")
    except InvalidParam as e:
        assert time.monotonic() - t0 < BOUND_S
        return "rejected", e
    try:
        value = SchemaSampler(holder.config, random.Random(seed), schema).sample(schema)
    except SchemaUnsatisfiable as e:        # allowed only for instance-size bounds
        assert time.monotonic() - t0 < BOUND_S
        return "unsatisfiable", e
    assert time.monotonic() - t0 < BOUND_S
    return "value", value


CATASTROPHIC = {"type": "object", "required": ["s"],
                "properties": {"s": {"type": "string", "minLength": 28, "pattern": "(.*)*!"}}}


def test_catastrophic_pattern_is_generated_quickly():
    kind, value = _check_then_sample(CATASTROPHIC)
    assert kind == "value"
    Checker(CATASTROPHIC).validate(value)
    assert len(value["s"]) >= 28 and value["s"].endswith("!")


@pytest.mark.parametrize("pattern,min_len,why", [
    ("^(?=x)y", 0, "within"),                          # no string matches
    ("a{5000}", 0, "unroll to more than 4096"),         # issue 23: refused before compiling
    ("(a{1000}){1000}", 0, "unroll to more than"),      # regex.compile alone would take a second
    ("^(a|b)$", 5, "within"),                          # minLength beyond every match
])
def test_unsatisfiable_pattern_is_a_400_naming_the_field(pattern, min_len, why):
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern, "minLength": min_len}}}
    t0 = time.monotonic()
    with pytest.raises(InvalidParam) as e:
        _validator().check_schema(schema, "tools[0].function.parameters")
    assert time.monotonic() - t0 < BOUND_S
    assert status_of(e.value) == 400 and e.value.param == "tools[0].function.parameters"
    assert "$.properties.s" in e.value.message and why in e.value.message


@pytest.mark.parametrize("schema,expect", [
    ({"type": "number", "multipleOf": 1e-5}, "value"),                 # IndexError before
    ({"type": "number", "minimum": 1e300, "multipleOf": 0.5}, "value"),  # OverflowError before
    ({"type": "number", "minimum": 1e300, "multipleOf": 1e-10}, "rejected"),
    ({"type": "number", "exclusiveMinimum": 1e308}, "value"),           # ValueError (inf) before
    ({"type": "integer", "exclusiveMinimum": 1e308}, "value"),
    ({"type": "number", "exclusiveMaximum": -1e308}, "value"),
    ({"type": "integer", "minimum": 0.2, "maximum": 0.8}, "rejected"),
    ({"type": "integer", "multipleOf": 0.5, "minimum": 3, "maximum": 3.2}, "value"),
    ({"type": "number", "multipleOf": 0.1, "minimum": 0.05, "maximum": 0.06}, "rejected"),
])
def test_numeric_keywords(schema, expect):
    kind, value = _check_then_sample(schema)
    assert kind == expect, value
    if kind == "value":
        Checker(schema).validate(value)
    else:
        assert status_of(value) == 400 and value.param == "response_format.json_schema.schema"


def _nest(levels: int) -> dict:
    s = {"type": "string"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
    return s


def test_schema_depth_bound():
    ok = _nest(MAX_SCHEMA_DEPTH // 2 - 1)            # properties + subschema: 2 JSON levels each
    kind, value = _check_then_sample(ok)
    assert kind == "value"
    Checker(ok).validate(value)
    with pytest.raises(InvalidParam) as e:               # RecursionError (a 500) before
        _validator().check_schema(_nest(96), "tools[0].function.parameters")
    assert e.value.param == "tools[0].function.parameters" and "nested deeper than 64" in e.value.message


def test_deep_schema_rejected_even_with_skip_tool_validation():
    v = _validator(skip_tool_validation=True)
    tool = {"type": "function", "function": {"name": "f", "parameters": _nest(96)}}
    with pytest.raises(InvalidParam) as e:
        v.validate_request([tool], "required")
    assert e.value.param == "tools[0].function.parameters"


def test_json_depth_is_iterative():
    deep: list = []
    for _ in range(100_000):                         # far beyond the interpreter's recursion limit
        deep = [deep]
    assert json_depth_exceeds(deep, 1024)
    assert not json_depth_exceeds({"a": [1, {"b": 2}]}, 3)
    assert json_depth_exceeds({"a": [1, {"b": []}]}, 3)


def test_regex_generator_is_bounded():
    parsed = parse("((a*)*)*b")
    s = generate(parsed, random.Random(0), 100, 4)
    assert s.endswith("b") and len(s) <= 100
    assert expansion(parse("(a{1000}){1000}")) == 1_000_000
    assert expansion(parse("(x|y{10}){3}")) == 30


def test_subschemas_never_generated_are_not_dry_run():
    schema = {"type": "object", "properties": {"s": {"type": "string", "not": {"pattern": "^(?=x)y"}}},
              "required": ["s"]}
    kind, value = _check_then_sample(schema)
    assert kind == "value"
    Checker(schema).validate(value)


def test_min_items_bound():
    kind, err = _check_then_sample({"type": "array", "minItems": 100_000})
    assert kind == "rejected" and "minItems 100000" in err.message


# ---- property: numeric keywords and patterns --------------------------------------------------
_EXTREMES = [0, 1, -1, 0.5, 1e-5, 1e300, -1e300, 1e308, -1e308, 1.7976931348623157e308, 2**63, 100, 3.3]
_num = st.one_of(st.sampled_from(_EXTREMES),
                 st.floats(allow_nan=False, allow_infinity=False, width=64),
                 st.integers(min_value=-(10**30), max_value=10**30))
_multiple = st.one_of(st.sampled_from([1e-5, 1e-10, 0.1, 0.25, 3, 7, 1e5, 1e300, 2.5e-300, 0.3]),
                      st.floats(min_value=1e-12, max_value=1e12, allow_nan=False),
                      st.integers(min_value=1, max_value=10**6))
_PATTERNS = ["(.*)*!", "^(a+)+$", "(x+x+)+y", "^[a-z]{3,}\\d$", "^\\d{3}-\\d{4}$", "[A-Z]", "^$",
             "(a|aa)*c", "\\bword\\b", "^(?!x).+", "(?P<q>['\"]).*(?P=q)", "[^a-z]{2,5}", "a{4096}",
             "((a{100}){100})*", "^(ab|cd){2,}$", "\\w+@\\w+\\.com", "^[\\u0041-\\u005a]+$", "(?i)yes|no"]


@st.composite
def numeric_schemas(draw):
    schema = {"type": draw(st.sampled_from(["integer", "number"]))}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.booleans()):
            schema[key] = draw(_num)
    if draw(st.booleans()):
        schema["multipleOf"] = draw(_multiple)
    return schema


@st.composite
def string_schemas(draw):
    schema = {"type": "string", "pattern": draw(st.sampled_from(_PATTERNS))}
    if draw(st.booleans()):
        schema["minLength"] = draw(st.sampled_from([0, 1, 28, 100, 4096, 5000]))
    if draw(st.booleans()):
        schema["maxLength"] = draw(st.sampled_from([0, 2, 5, 50, 4096]))
    return schema


@settings(max_examples=60, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(numeric_schemas(), string_schemas()))
def test_property_sampler_values_validate_or_400(leaf):
    schema = {"type": "object", "required": ["v"], "properties": {"v": leaf}}
    kind, value = _check_then_sample(schema, seed=1)
    if kind == "value":
        Checker(schema).validate(value)
    elif kind == "rejected":
        assert status_of(value) == 400 and value.param == "response_format.json_schema.schema"
        assert "$.properties.v" in value.message
    else:
        pytest.fail(f"checked schema failed at generation: {value}")


def test_long_strings_stay_within_the_bound():
    kind, value = _check_then_sample({"type": "string", "minLength": MAX_STRING})
    assert kind == "value" and len(value) == MAX_STRING
    kind, err = _check_then_sample({"type": "string", "minLength": MAX_STRING + 1})
    assert kind == "rejected" and "minLength 4097" in err.message
