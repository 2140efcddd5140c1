"""The Cohere request types of :mod:`schemas.cohere` against the ``cohere`` SDK's own
(``cohere.types``, which vLLM 0.34's ``CohereChatV2Request`` declares its fields with), validated
by pydantic: on seeded random JSON values and a few written ones, the same errors (``loc`` as
vLLM's handler cleans it, type, message, input, context, in pydantic's order) and, for a value
both take, the same models picked by the smart unions, with the same field values."""
from __future__ import annotations

import random
import re

import pytest

types = pytest.importorskip("cohere.types")
pydantic = pytest.importorskip("pydantic")

from schemas.cohere import CHAT_MESSAGE, DOCUMENT, RESPONSE_FORMAT, STR, TOOL  # noqa: E402
from schemas.pydantic_model import FAIL, LOC_MARKERS, Errors, ListOf, Parsed, Union  # noqa: E402

PAIRS = {   # the SDK's type -> ours
    "messages": (list[types.ChatMessageV2], ListOf(CHAT_MESSAGE)),
    "tools": (list[types.ToolV2], ListOf(TOOL)),
    "documents": (list[str | types.Document], ListOf(Union(STR, DOCUMENT))),
    "response_format": (types.ResponseFormatV2, RESPONSE_FORMAT),
}
_BRACKETED = re.compile(r"[\[\]{}()]")


def sdk_read(kind: str, value):
    try:
        return pydantic.TypeAdapter(PAIRS[kind][0]).validate_python(value), None
    except pydantic.ValidationError as e:
        errors = []
        for err in e.errors(include_url=False):
            loc = [str(p) for p in err["loc"] if not _BRACKETED.search(str(p)) and str(p).lower() not in LOC_MARKERS]
            errors.append((".".join(loc), err["input"], err["type"], err["msg"], err.get("ctx")))
        return None, errors


def our_read(kind: str, value):
    errs = Errors(10 ** 6, 10 ** 6)
    out = PAIRS[kind][1].read(value, (), errs)
    rows = [(".".join(str(p) for p in loc if str(p).lower() not in LOC_MARKERS), v, t, m, c[0] if c else None)
            for loc, v, t, m, *c in errs.items]
    return (None if out is FAIL else out), rows or None


def shape(x):
    """A validated value as (model name, fields) trees, for either side."""
    if isinstance(x, list):
        return [shape(v) for v in x]
    if isinstance(x, Parsed):
        return x.model_name, {k: shape(v) for k, v in vars(x).items() if k not in ("model_name", "fields_set", "extra")}
    if isinstance(x, pydantic.BaseModel):
        return type(x).__name__, {k: shape(getattr(x, k)) for k in type(x).model_fields}
    return x


# ---- values: random JSON shaped like the SDK's, and written ones -----------------------------------------
KEYS = ("role", "content", "type", "text", "image_url", "url", "detail", "tool_calls", "tool_plan", "citations", "id",
        "function", "name", "arguments", "start", "end", "sources", "tool_output", "document", "content_index",
        "tool_call_id", "data", "thinking", "parameters", "description", "json_schema")
ROLES = ("user", "assistant", "system", "tool", "x", None, 5)
TYPES = ("text", "image_url", "thinking", "document", "function", "tool", "json_object", "x", None)


def scalar(r):
    return r.choice(["s", "", 5, -1, 1.5, True, None, "5", "true", [], {}])


def value(r, depth=0):
    if depth > 3 or r.random() < 0.35:
        return scalar(r)
    if r.random() < 0.4:
        return [value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return obj(r, depth + 1)


def obj(r, depth=0):
    out = {}
    for _ in range(r.randint(0, 4)):
        k = r.choice(KEYS)
        out[k] = r.choice(ROLES) if k == "role" else r.choice(TYPES) if k == "type" else value(r, depth)
    return out


def message(r):
    m = obj(r, 1)
    if r.random() < 0.8:
        m["role"] = r.choice(ROLES)
    if r.random() < 0.7:
        m["content"] = r.choice(["hi", [{"type": r.choice(TYPES), "text": r.choice(["a", 5])}], value(r, 2)])
    return m


def samples(kind: str, n: int = 300):
    r = random.Random(kind)
    for _ in range(n):
        if kind == "messages":
            yield [message(r) for _ in range(r.randint(0, 3))] if r.random() < 0.9 else value(r)
        elif kind == "documents":
            yield [r.choice(["d", obj(r, 1), {"data": {"a": 1}}, {"data": value(r), "id": value(r)}])
                   for _ in range(r.randint(0, 2))]
        elif kind == "tools":
            yield [r.choice([obj(r, 1), {"function": obj(r, 2)}, {"function": {"name": "f", "parameters": {}}}])
                   for _ in range(r.randint(0, 2))]
        else:
            yield r.choice([obj(r, 1), {"type": "json_object", "json_schema": value(r)}, value(r)])


WRITTEN = {
    "messages": [[{"content": "hi"}], [{"content": "hi", "tool_call_id": "c"}], [{}], [{"tool_calls": []}],
                 [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": 5, "arguments": {}}}]}],
                 [{"role": "user", "content": [{"text": "x"}, {"image_url": {"url": "u"}}]}],
                 [{"role": "tool", "tool_call_id": "c", "content": [{"document": {"data": {}}}]}]],
    "response_format": [{"json_schema": {}}, {"type": "text", "json_schema": {}}, None],
}


@pytest.mark.parametrize("kind", list(PAIRS))
def test_the_same_errors_and_picks_as_the_sdks_types(kind):
    checked = 0
    for v in [*WRITTEN.get(kind, ()), *samples(kind)]:
        sdk_value, sdk_errors = sdk_read(kind, v)
        ours, our_errors = our_read(kind, v)
        assert our_errors == sdk_errors, v
        if sdk_errors is None:
            assert shape(ours) == shape(sdk_value), v
        checked += 1
    assert checked >= 300
