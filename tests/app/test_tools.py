"""Tool calling on ``/v1/chat/completions``, in-process (api.md 8, cases C11).

Clients over the WSGI transport: the ``openai`` SDK where it can express the request, ``httpx``
for raw SSE and for malformed bodies the SDK would refuse to send.  Arguments are checked with
``jsonschema``.
"""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from support import sse_events

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TEMPERATURE = {"type": "function", "function": {
    "name": "get_temperature",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["C", "F"]}},
                   "required": ["city", "unit"]}}}
LOCATION = {"type": "function", "function": {
    "name": "get_location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
USER = [{"role": "user", "content": "This is a test."}]      # 10 prompt tokens (api.md 13)
PARIS = [{"role": "user", "content": "weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TEMPERATURE, LOCATION)}


def client(base) -> openai.OpenAI:
    return base.openai(api_key="sk-test", max_retries=0, timeout=30)


def post(base, body: dict):
    return base.post("/v1/chat/completions", json={"model": "test-model", **body}, timeout=30)


def expected_finish(choice) -> str:
    """A tool call ends with "tool_calls", "stop" under a named tool_choice (case C11, vLLM's
    ``resolve_finish_reason``)."""
    return "stop" if isinstance(choice, dict) else "tool_calls"


def stream_calls(base, body: dict):
    """POST a streaming request; check the tool-call delta protocol (C11, api.md 8.3) and
    return ``(calls, events)`` with ``calls = [{"id", "name", "arguments"}]`` by index."""
    r = post(base, {**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls: dict[int, dict] = {}
    finish = None
    for ch in chunks[1:]:
        if not ch["choices"]:
            continue
        choice = ch["choices"][0]
        delta = choice["delta"]
        assert not delta.get("content")           # tool-call chunks carry no text
        if choice["finish_reason"] is not None:
            finish = choice["finish_reason"]
        for tc in delta.get("tool_calls") or ():
            idx = tc["index"]
            if idx not in calls:
                # first delta of a call: id, type and name (vLLM #16340, #18412)
                assert isinstance(tc["id"], str) and tc["id"].startswith("chatcmpl-tool-")
                assert tc["type"] == "function"
                assert isinstance(tc["function"]["name"], str) and tc["function"]["name"]
                assert idx == len(calls)            # indexes grow by one
                calls[idx] = {"id": tc["id"], "name": tc["function"]["name"],
                              "arguments": tc["function"].get("arguments") or ""}
            else:
                # later deltas: argument fragments only (id, if repeated, identical)
                assert tc.get("id") in (None, calls[idx]["id"])
                assert tc["function"].get("name") in (None, calls[idx]["name"])
                assert tc.get("type") in (None, "function")
                calls[idx]["arguments"] += tc["function"].get("arguments") or ""
    assert finish == expected_finish(body.get("tool_choice"))
    return [calls[i] for i in sorted(calls)], chunks


# ---- C11: streaming and non-streaming tool-call shape ----------------------------------------
@pytest.mark.parametrize("choice", [NAMED, "required"], ids=["named", "required"])
def test_c11_stream(api, choice):
    calls, chunks = stream_calls(api, {"messages": PARIS, "tools": [WEATHER], "tool_choice": choice})
    assert len(calls) == 1                       # one tool: "required" cannot add more
    assert calls[0]["name"] == "get_weather"
    args = json.loads(calls[0]["arguments"])
    assert isinstance(args, dict) and isinstance(args["city"], str)
    # the closing chunk carries the finish reason
    closing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in closing] == [expected_finish(choice)]


@pytest.mark.parametrize("choice", [NAMED, "required"], ids=["named", "required"])
def test_c11_non_stream(api, choice):
    resp = client(api).chat.completions.create(model="test-model", messages=PARIS, tools=[WEATHER],
                                                  tool_choice=choice)
    c = resp.choices[0]
    assert c.finish_reason == expected_finish(choice)
    assert not c.message.content
    tc = c.message.tool_calls[0]
    assert isinstance(tc.id, str) and tc.id.startswith("chatcmpl-tool-")
    assert tc.type == "function" and tc.function.name == "get_weather"
    assert isinstance(tc.function.arguments, str)
    assert isinstance(json.loads(tc.function.arguments)["city"], str)


def test_openai_sdk_stream_accumulates(api):
    """The SDK's own streaming objects: first delta has id/name, joined arguments are JSON."""
    stream = client(api).chat.completions.create(model="test-model", messages=PARIS, tools=[WEATHER],
                                                    tool_choice=NAMED, stream=True,
                                                    stream_options={"include_usage": True})
    args, names, ids, finish, usage, n_arg_chunks = "", [], set(), None, None, 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or ():
                if tc.function and tc.function.name:
                    names.append(tc.function.name)
                if tc.id:
                    ids.add(tc.id)
                if tc.function and tc.function.arguments is not None:
                    args += tc.function.arguments
                    n_arg_chunks += 1
    assert names == ["get_weather"] and len(ids) == 1
    assert finish == "stop"                   # a named tool_choice (case C11)
    assert isinstance(json.loads(args)["city"], str)
    assert usage.completion_tokens == n_arg_chunks      # one token per streamed argument piece


def test_required_two_tools_reference_48(api):
    """api.md 13 case 48: names from the list, arguments per schema, tools not counted."""
    for _ in range(5):
        resp = client(api).chat.completions.create(model="test-model", messages=USER,
                                                      tools=[WEATHER, TEMPERATURE], tool_choice="required")
        assert resp.usage.prompt_tokens == 10
        calls = resp.choices[0].message.tool_calls
        assert 1 <= len(calls) <= 2
        for i, tc in enumerate(calls):
            args = json.loads(tc.function.arguments)
            jsonschema.validate(args, SCHEMAS[tc.function.name])
            if tc.function.name == "get_temperature":
                assert args["unit"] in ("C", "F")


def test_required_stream_two_tools_reference_49(app_client):
    base = app_client("--tool-call-extra-call-probability", "100")
    calls, chunks = stream_calls(base, {"messages": USER, "tools": [WEATHER, TEMPERATURE],
                                        "tool_choice": "required", "stream_options": {"include_usage": True}})
    assert len(calls) == 2
    assert len({c["id"] for c in calls}) == 2
    for c in calls:
        jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])
    usage = [c for c in chunks if c.get("usage")]
    assert len(usage) == 1 and usage[0]["usage"]["prompt_tokens"] == 10
    arg_chunks = sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls"))
    assert usage[0]["usage"]["completion_tokens"] == arg_chunks


def test_named_choice_flat_and_nested(app_client):
    base = app_client("--tool-call-extra-call-probability", "100")
    for choice in ({"type": "function", "function": {"name": "get_temperature"}},
                   {"type": "function", "name": "get_temperature"}):
        for _ in range(3):
            r = post(base, {"messages": USER, "tools": [WEATHER, TEMPERATURE], "tool_choice": choice})
            calls = r.json()["choices"][0]["message"]["tool_calls"]
            assert [c["function"]["name"] for c in calls] == ["get_temperature"]   # exactly one call


def test_max_tokens_does_not_cut_tool_calls(api):
    r = post(api, {"messages": USER, "tools": [TEMPERATURE], "tool_choice": "required", "max_tokens": 2})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    jsonschema.validate(json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]),
                        SCHEMAS["get_temperature"])


# ---- how many calls -----------------------------------------------------------------------------
def test_auto_extra_call_probability_0_gives_text(app_client):
    base = app_client("--tool-call-extra-call-probability", "0")
    for _ in range(3):
        r = post(base, {"messages": USER, "tools": [WEATHER, TEMPERATURE], "tool_choice": "auto",
                        "max_tokens": 5})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] in ("stop", "length")
        assert choice["message"]["content"] and not choice["message"].get("tool_calls")
    # "required" is still exactly one call
    r = post(base, {"messages": USER, "tools": [WEATHER, TEMPERATURE], "tool_choice": "required"})
    assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 1


def test_auto_extra_call_probability_100_calls_every_tool_count(app_client):
    base = app_client("--tool-call-extra-call-probability", "100")
    tools = [WEATHER, TEMPERATURE, LOCATION]
    for body in ({"tool_choice": "auto"}, {}, {"tool_choice": {"type": "allowed_tools", "allowed_tools": {
            "mode": "auto", "tools": [{"type": "function", "function": {"name": "get_weather"}}]}}}):
        r = post(base, {"messages": USER, "tools": tools, **body})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        calls = choice["message"]["tool_calls"]
        assert len(calls) == 3                                 # up to len(tools), all rolls succeed
        assert all(list(c) == ["id", "type", "function"] for c in calls)      # vLLM's ToolCall: no index
        for c in calls:
            jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[c["function"]["name"]])
        assert r.json()["usage"]["completion_tokens"] > 3


def test_auto_default_probability_mixes_text_and_calls(api):
    kinds = set()
    for _ in range(30):
        r = post(api, {"messages": USER, "tools": [WEATHER], "max_tokens": 3})
        kinds.add(r.json()["choices"][0]["finish_reason"])
        if len(kinds) > 1 and "tool_calls" in kinds:
            break
    assert "tool_calls" in kinds and kinds & {"stop", "length"}      # 45% per request (api.md 8.1)


def test_tool_choice_none_gives_text(api):
    resp = client(api).chat.completions.create(model="test-model", messages=USER, tools=[WEATHER],
                                                  tool_choice="none", max_tokens=5)
    c = resp.choices[0]
    assert c.finish_reason in ("stop", "length")
    assert c.message.content and not c.message.tool_calls


@pytest.mark.parametrize("flags", [(), ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")])
def test_tool_choice_null_returns_no_tool_calls(app_client, flags):
    """vLLM 0.34: an explicit ``tool_choice: null`` beside tools passes check_tool_usage (which
    fills in "auto" only for an absent one) and is parsed as auto, but ``keeps_tool_calls``
    (chat_completion/message_assembly.py l. 65-100) keeps calls only for "auto", "required" or a
    named tool: the answer is text, streamed or not.  Absent, it is "auto": the same seeds call."""
    base = app_client(*flags)
    called = 0
    for seed in range(6):
        body = {"messages": PARIS, "tools": [WEATHER, TEMPERATURE], "seed": seed, "max_tokens": 8}
        def shape(choice):        # the call ids are drawn afresh
            return ([tc["function"] for tc in choice["message"].get("tool_calls", [])],
                    choice["message"]["content"], choice["finish_reason"])
        absent = post(base, body).json()["choices"][0]
        assert shape(absent) == shape(post(base, {**body, "tool_choice": "auto"}).json()["choices"][0])
        called += "tool_calls" in absent["message"]
        r = post(base, {**body, "tool_choice": None})
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        assert "tool_calls" not in c["message"] and c["message"]["content"] and c["finish_reason"] in ("stop", "length")
    assert called
    r = post(base, {"messages": PARIS, "tools": [WEATHER], "tool_choice": None, "seed": 1, "max_tokens": 8,
                    "stream": True})
    deltas = [e["choices"][0]["delta"] for e in sse_events(r.text)[:-1]]
    assert deltas and all("tool_calls" not in d for d in deltas)


def test_empty_tools_falls_back_to_none(api):
    """vLLM 0.34 (and OpenAI): ``tools: []`` is no tools; "required" falls back to "none"."""
    r = post(api, {"messages": USER, "tools": [], "tool_choice": "required", "max_tokens": 4, "ignore_eos": True})
    choice = r.json()["choices"][0]
    assert r.status_code == 200 and choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]


# ---- conversation history -------------------------------------------------------------------------
def test_tool_history_accepted_and_counted(api):
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "20 C"}]
    resp = client(api).chat.completions.create(model="test-model", messages=history, tools=[WEATHER],
                                                  tool_choice="none", max_tokens=3)
    # "### assistant: [get_weather({"city":"Paris"})]\n" is 19 tokens, "### tool(call_1): 20 C\n" 10
    assert resp.usage.prompt_tokens == 10 + 19 + 10
    assert resp.choices[0].message.content


# ---- validation (400 naming the field) -------------------------------------------------------------
def _tool(params, name="f"):
    return {"type": "function", "function": {"name": name, "parameters": params}}


@pytest.mark.parametrize("tools,param", [
    ([_tool({"type": "object", "properties": {"city": {"type": "stringstring"}}})], "tools[0].function.parameters"),
    ([WEATHER, _tool({"type": "object", "properties": {"u": {"type": "string", "enum": [1, 2]}}})],
     "tools[1].function.parameters"),
    ([_tool({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"},
                                                    "minItems": 3, "maxItems": 1}}})],
     "tools[0].function.parameters"),
    ([_tool({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})], "tools[0].function.parameters"),
    ([_tool({"type": "object", "properties": {"u": {"type": "string", "enum": []}}})], "tools[0].function.parameters"),
    ([_tool({"type": "object", "required": "city"})], "tools[0].function.parameters"),
], ids=["bad-type", "enum-type", "min-gt-max", "dangling-ref", "empty-enum", "required-not-list"])
def test_invalid_tools_rejected(api, tools, param):
    r = post(api, {"messages": USER, "tools": tools, "tool_choice": "required"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert param.split(".")[0].split("[")[0] in err["message"]


@pytest.mark.parametrize("tools,error", [
    ([_tool(["not", "a", "schema"])],
     "{'type': 'dict_type', 'loc': 'body.tools.0.function.parameters', 'msg': 'Input should be a valid dictionary', "
     "'input': '<list of 3 items>'}"),
    ([{"type": "function", "function": {"parameters": {}}}],
     "{'type': 'missing', 'loc': 'body.tools.0.function.name', 'msg': 'Field required', 'input': '<dict of 1 items>'}"),
    ([{"type": "function"}],
     "{'type': 'missing', 'loc': 'body.tools.0.function', 'msg': 'Field required', 'input': '<dict of 1 items>'}"),
    ([{"type": "retrieval", "function": {"name": "f"}}],
     "{'type': 'literal_error', 'loc': 'body.tools.0.type', 'msg': \"Input should be 'function'\", 'input': 'retrieval', "
     "'ctx': {'expected': \"'function'\"}}"),
    ([{"type": "function", "function": {"name": 5}}],
     "{'type': 'string_type', 'loc': 'body.tools.0.function.name', 'msg': 'Input should be a valid string', 'input': '5'}"),
    ([7], "{'type': 'model_type', 'loc': 'body.tools.0', 'msg': 'Input should be a valid dictionary or instance of "
          "ChatCompletionToolsParam', 'input': '7', 'ctx': {'class_name': 'ChatCompletionToolsParam'}}"),
], ids=["parameters-not-object", "no-name", "no-function", "bad-tool-type", "name-not-string", "not-an-object"])
def test_tool_shapes_are_pydantics_errors(api, tools, error):
    """vLLM 0.34 reads ``tools`` as ``list[ChatCompletionToolsParam]``: a wrong shape is pydantic's
    error in its validation handler's words (schemas/chat_tools.py), not the simulator's."""
    r = post(api, {"messages": USER, "tools": tools, "tool_choice": "required"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "Bad Request" and err["code"] == 400
    assert err["message"] == "1 validation error:\n  " + error


@pytest.mark.parametrize("choice,param", [
    ("sometimes", "tool_choice"),
    ({"type": "function", "function": {}}, "tool_choice.function.name"),
    ({"type": "function"}, "tool_choice.function"),         # vLLM: Invalid value for `function`
    ({"type": "function", "function": {"name": "nope"}}, "tool_choice"),
    ({"type": "function", "name": "nope"}, "tool_choice"),
    ({"type": "magic"}, "tool_choice.type"),
], ids=["unknown-string", "no-name", "no-function", "not-found", "flat-not-found", "bad-type"])
def test_invalid_tool_choice_rejected(api, choice, param):
    r = post(api, {"messages": USER, "tools": [WEATHER], "tool_choice": choice})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param


def test_tool_not_found_message_like_vllm(api):
    with pytest.raises(openai.BadRequestError) as e:
        client(api).chat.completions.create(
            model="test-model", messages=USER, tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_stock"}})
    assert "The tool `get_stock` specified in `tool_choice` does not match any of the specified `tools`" in str(e.value)


def test_forcing_tool_choice_without_tools(api):
    for choice in ("required", NAMED):
        r = post(api, {"messages": USER, "tool_choice": choice})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = post(api, {"messages": USER, "tool_choice": "auto", "max_tokens": 2})     # vLLM: "auto" too (issue 22)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"


def test_openai_accepted_schemas(api):
    """Shapes OpenAI and vLLM accept (the reference rejects them): no parameters, {},
    $defs/$ref, anyOf, $comment, type arrays, const."""
    rich = {"type": "object", "$comment": "ok", "$defs": {
                "Addr": {"type": "object", "properties": {"street": {"type": "string"},
                                                          "zip": {"type": "string", "pattern": "^[0-9]+$"}},
                         "required": ["street", "zip"], "additionalProperties": False}},
            "properties": {"addr": {"$ref": "#/$defs/Addr"},
                           "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
                           "kind": {"const": "home"},
                           "n": {"type": ["integer", "null"], "minimum": 1000, "maximum": 1005},
                           "x": {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.75}},
            "required": ["addr", "when", "kind", "n", "x"], "additionalProperties": False}
    cases = [({"type": "function", "function": {"name": "ping"}}, None),
             (_tool({}, "ping"), {}),
             (_tool(rich, "rich"), rich)]
    for tool, schema in cases:
        for _ in range(5):
            r = post(api, {"messages": USER, "tools": [tool], "tool_choice": "required"})
            assert r.status_code == 200, r.text
            args = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
            if schema is None or schema == {}:
                assert args == {}
            else:
                jsonschema.validate(args, schema)
                assert 1000 <= args["n"] <= 1005            # schema bounds win over the flag range


def test_skip_tool_validation(app_client):
    bad = _tool({"type": "object", "properties": {"city": {"type": "stringstring"}}, "required": ["city"]}, "w")
    base = app_client("--skip-tool-validation")
    r = post(base, {"messages": USER, "tools": [bad], "tool_choice": "required"})
    assert r.status_code == 200, r.text
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert calls[0]["function"]["name"] == "w" and "city" in json.loads(calls[0]["function"]["arguments"])
    # the tool_choice is still checked
    r = post(base, {"messages": USER, "tools": [bad], "tool_choice": {"type": "function", "name": "x"}})
    assert r.status_code == 400


# ---- argument synthesis and the config flags -------------------------------------------------------
MULTIPLY = _tool({"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
                  "required": ["numbers"]}, "multiply_numbers")


@pytest.mark.parametrize("a,b,x,y", [(3, 7, -100.2, -5.75), (2, 2, -100, 100), (4, 5, 222.222, 333.333)])
def test_array_and_number_ranges_reference_53(app_client, a, b, x, y):
    base = app_client("--min-tool-call-array-param-length", str(a), "--max-tool-call-array-param-length", str(b),
                      "--min-tool-call-number-param", str(x), "--max-tool-call-number-param", str(y))
    lengths = set()
    for _ in range(15):
        r = post(base, {"messages": USER, "tools": [MULTIPLY], "tool_choice": "required"})
        calls = r.json()["choices"][0]["message"]["tool_calls"]
        assert len(calls) == 1
        nums = json.loads(calls[0]["function"]["arguments"])["numbers"]
        lengths.add(len(nums))
        assert a <= len(nums) <= b
        assert all(isinstance(v, (int, float)) and x <= v <= y for v in nums)
    assert len(lengths) > 1 or a == b


def test_integer_range_flags(app_client):
    base = app_client("--min-tool-call-integer-param", "150", "--max-tool-call-integer-param", "155")
    tool = _tool({"type": "object", "properties": {"q": {"type": "integer"}, "r": {"type": "integer", "maximum": 152}},
                  "required": ["q", "r"]}, "count")
    seen = set()
    for _ in range(15):
        r = post(base, {"messages": USER, "tools": [tool], "tool_choice": "required"})
        args = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
        assert isinstance(args["q"], int) and 150 <= args["q"] <= 155
        assert 150 <= args["r"] <= 152
        seen.add(args["q"])
    assert len(seen) > 1


def test_nested_arrays_reference_54(api):
    schema = {"type": "object", "required": ["tensor"], "properties": {"tensor": {
        "type": "array", "minItems": 2, "items": {
            "type": "array", "minItems": 0, "maxItems": 1, "items": {
                "type": "array", "maxItems": 3, "items": {"type": "string"}}}}}}
    for _ in range(10):
        r = post(api, {"messages": USER, "tools": [_tool(schema, "t")], "tool_choice": "required"})
        tensor = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["tensor"]
        assert 2 <= len(tensor) <= 5
        for mid in tensor:
            assert len(mid) in (0, 1)
            for inner in mid:
                assert 1 <= len(inner) <= 3 and all(isinstance(s, str) for s in inner)


ORDER = {"type": "object", "required": ["order_info", "name"], "properties": {
    "name": {"type": "string"},
    "order_info": {"type": "object", "properties": {
        "item": {"type": "string"}, "quantity": {"type": "integer"},
        "address": {"type": "object", "required": ["street", "number", "home"], "properties": {
            "street": {"type": "string"}, "number": {"type": "number"}, "home": {"type": "boolean"}}}}}}}
OPTIONAL3 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"},
                                              "c": {"type": "boolean"}}}


def test_nested_objects_all_required_reference_56(api):
    schema = json.loads(json.dumps(ORDER))
    schema["properties"]["order_info"]["required"] = ["item", "quantity", "address"]
    r = post(api, {"messages": USER, "tools": [_tool(schema, "order")], "tool_choice": "required"})
    args = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    jsonschema.validate(args, schema)
    addr = args["order_info"]["address"]
    assert isinstance(addr["street"], str) and isinstance(addr["home"], bool)
    assert isinstance(addr["number"], (int, float)) and isinstance(args["order_info"]["quantity"], int)


@pytest.mark.parametrize("stream", [False, True])
def test_optional_probability_0_reference_57_58(app_client, stream):
    base = app_client("--tool-call-not-required-param-probability", "0",
                      "--object-tool-call-not-required-field-probability", "0")
    for tool, expect in ((_tool(OPTIONAL3, "opt"), {}),):
        for _ in range(5):
            body = {"messages": USER, "tools": [tool], "tool_choice": "required"}
            args = (json.loads(stream_calls(base, body)[0][0]["arguments"]) if stream else
                    json.loads(post(base, body).json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]))
            assert args == expect
    r = post(base, {"messages": USER, "tools": [_tool(ORDER, "order")], "tool_choice": "required"})
    args = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    assert args["order_info"] == {} and isinstance(args["name"], str)


@pytest.mark.parametrize("stream", [False, True])
def test_optional_probability_100_reference_57_58(app_client, stream):
    base = app_client("--tool-call-not-required-param-probability", "100",
                      "--object-tool-call-not-required-field-probability", "100",
                      "--min-tool-call-integer-param", "5", "--max-tool-call-integer-param", "150")
    body = {"messages": USER, "tools": [_tool(OPTIONAL3, "opt")], "tool_choice": "required"}
    for _ in range(3):
        args = (json.loads(stream_calls(base, body)[0][0]["arguments"]) if stream else
                json.loads(post(base, body).json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]))
        assert set(args) == {"a", "b", "c"}
        jsonschema.validate(args, OPTIONAL3)
    r = post(base, {"messages": USER, "tools": [_tool(ORDER, "order")], "tool_choice": "required"})
    info = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["order_info"]
    assert set(info) == {"item", "quantity", "address"}
    assert 5 <= info["quantity"] <= 150


def test_n2_each_choice_has_its_own_calls(api):
    r = post(api, {"messages": USER, "tools": [WEATHER], "tool_choice": "required", "n": 2})
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    ids = [c["message"]["tool_calls"][0]["id"] for c in choices]
    assert ids[0] != ids[1]
    assert all(c["finish_reason"] == "tool_calls" for c in choices)


# ---- reproducibility ------------------------------------------------------------------------------
def test_same_seed_same_tool_calls(app_client):
    """Two fresh simulators with the same --seed answer the same request sequence identically
    (the second flag only makes the fixture build a distinct app)."""
    outs = []
    for seqs in ("7", "8"):
        base = app_client("--seed", "4242", "--max-num-seqs", seqs, "--tool-call-extra-call-probability", "60")
        run = []
        for body in ({"tools": [WEATHER, TEMPERATURE, LOCATION], "tool_choice": "required"},
                     {"tools": [WEATHER, TEMPERATURE, LOCATION]},
                     {"tools": [_tool(ORDER, "order")], "tool_choice": "required"}):
            r = post(base, {"messages": USER, **body})
            msg = r.json()["choices"][0]["message"]
            run.append((msg.get("content"), [(c["id"], c["function"]["name"], c["function"]["arguments"])
                                             for c in msg.get("tool_calls") or ()]))
        calls, _ = stream_calls(base, {"messages": USER, "tools": [TEMPERATURE], "tool_choice": "required"})
        run.append(calls)
        outs.append(run)
    assert outs[0] == outs[1]
