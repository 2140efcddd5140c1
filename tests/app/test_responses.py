"""OpenAI Responses API (``/v1/responses``) in-process (the SDK streams also against a real
server), driven with the official ``openai`` SDK and raw ``httpx`` (cases C28, C29; api.md 13
cases 59-72)."""
from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from support import error_type_400

from support import named_events

U = "This is a test."          # one user message -> 10 prompt tokens

GET_WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}
GET_TEMPERATURE = {"type": "function", "name": "get_temperature",
                   "parameters": {"type": "object",
                                  "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string", "enum": ["C", "F"]}},
                                  "required": ["city", "unit"]}}

TEXT_ORDER_HEAD = ["response.created", "response.in_progress", "response.output_item.added",
                   "response.content_part.added"]
TEXT_ORDER_TAIL = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                   "response.completed"]


def client(base) -> openai.OpenAI:
    return base.openai(api_key="sk-test", max_retries=0, timeout=30)


def post(base, body: dict, headers: dict | None = None) -> httpx.Response:
    return base.post("/v1/responses", json=body, headers=headers, timeout=30)


def user_msg(content) -> dict:
    return {"type": "message", "role": "user", "content": content}


# ---- basic ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("inp", [U, [user_msg([{"type": "input_text", "text": U}])], [user_msg(U)],
                                 [{"role": "user", "content": U}]])
def test_basic_echo(echo_api, inp):
    r = client(echo_api).responses.create(model="test-model", input=inp)
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    assert r.model == "test-model" and r.instructions is None and r.incomplete_details is None
    assert len(r.output) == 1
    item = r.output[0]
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.id.startswith("msg_")
    assert item.content[0].type == "output_text" and item.content[0].text == U
    assert item.content[0].annotations == []
    assert r.output_text == U
    u = r.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (10, 5, 15)
    assert u.input_tokens_details.cached_tokens == 0 and u.output_tokens_details.reasoning_tokens == 0
    # vLLM's check_tool_usage: no tools, tool_choice absent -> "none" (responses/protocol.py l. 882-884)
    assert r.tools == [] and r.tool_choice == "none" and r.parallel_tool_calls is True
    assert r.text.format.type == "text"


def test_basic_random(api):
    r = client(api).responses.create(model="test-model", input=U)
    assert r.status in ("completed", "incomplete") and r.output_text
    assert r.usage.input_tokens == 10 and r.usage.output_tokens >= 1
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_instructions_echoed_and_counted_as_the_system_message(echo_api):
    """vLLM's construct_input_messages puts instructions first as the system message (the older
    reference simulator did not count them); echo mode still answers the user's text."""
    r = client(echo_api).responses.create(model="test-model", input=U, instructions="Reply in French")
    assert r.instructions == "Reply in French" and r.output_text == U
    as_system = client(echo_api).responses.create(model="test-model", input=[
        {"role": "system", "content": "Reply in French"}, {"role": "user", "content": U}])
    assert r.usage.input_tokens == as_system.usage.input_tokens > 10


def test_max_output_tokens(api):
    c = client(api)
    for _ in range(5):
        r = c.responses.create(model="test-model", input=U, max_output_tokens=2)
        assert 1 <= r.usage.output_tokens <= 2 and r.max_output_tokens == 2
    r = c.responses.create(model="test-model", input=U, max_output_tokens=5, extra_body={"ignore_eos": True})
    assert r.usage.output_tokens == 5
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.output_text


def test_unknown_model(api):
    with pytest.raises(openai.NotFoundError) as ei:
        client(api).responses.create(model="some-other-model", input=U)
    assert "The model `some-other-model` does not exist" in ei.value.message
    r = post(api, {"model": "some-other-model", "input": U})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == 404 and err["type"] == "NotFoundError"


# ---- streaming ------------------------------------------------------------------------------------

def test_c28_stream_event_order_raw(api):
    r = post(api, {"model": "test-model", "input": "hi", "max_output_tokens": 8, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in r.text
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    for f in frames:
        ev_line, data_line = f.split("\n")
        assert ev_line.startswith("event: ") and data_line.startswith("data: ")
        assert json.loads(data_line[6:])["type"] == ev_line[7:]
    evs = named_events(r.text)
    names = [n for n, _ in evs]
    k = names.count("response.output_text.delta")
    assert k >= 1
    # C28's order; an answer that reached max_output_tokens ends with response.incomplete (C36)
    terminal = "response.incomplete" if k == 8 else "response.completed"
    assert names == TEXT_ORDER_HEAD + ["response.output_text.delta"] * k + TEXT_ORDER_TAIL[:-1] + [terminal]
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    assert evs[0][1]["response"]["status"] == "in_progress"
    deltas = [d for n, d in evs if n == "response.output_text.delta"]
    assert len({d["item_id"] for d in deltas}) == 1
    assert deltas[0]["item_id"] == evs[2][1]["item"]["id"]
    joined = "".join(d["delta"] for d in deltas)
    done = dict(evs)["response.output_text.done"]
    final = evs[-1][1]["response"]
    assert done["text"] == joined == final["output"][0]["content"][0]["text"]
    assert final["usage"]["output_tokens"] == k >= 1
    assert final["status"] == terminal.split(".")[1]
    for _, d in evs[2:-1]:
        assert d["output_index"] == 0
        if "content_index" in d:
            assert d["content_index"] == 0


def test_stream_with_sdk(echo_api):
    stream = client(echo_api).responses.create(model="test-model", input=U, stream=True)
    evs = list(stream)
    types = [e.type for e in evs]
    assert types[:4] == TEXT_ORDER_HEAD and types[-4:] == TEXT_ORDER_TAIL
    assert [e.sequence_number for e in evs] == list(range(len(evs)))
    text = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
    assert text == U
    final = evs[-1].response
    assert final.status == "completed" and final.output_text == U
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 5)
    assert final.output[0].id == evs[2].item.id


def test_stream_helper_final_response(echo_api):
    with client(echo_api).responses.stream(model="test-model", input=U) as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert final.output_text == U


# ---- logprobs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("top", [0, 2])
def test_logprobs_non_stream(echo_api, top):
    body = {"model": "test-model", "input": U, "include": ["message.output_text.logprobs"], "top_logprobs": top}
    part = post(echo_api, body).json()["output"][0]["content"][0]
    lps = part["logprobs"]
    assert [e["token"] for e in lps] == ["This ", "is ", "a ", "test", "."]
    assert [e["logprob"] for e in lps] == [-1.0, -1.1, -1.2, -1.0, -1.1]
    for e in lps:
        assert e["bytes"] == list(e["token"].encode())
        assert len(e["top_logprobs"]) == top
        if top:
            assert e["top_logprobs"][0]["token"] == e["token"]
            assert e["top_logprobs"][1] == {"token": e["token"] + "_1", "logprob": round(e["logprob"] - 0.5, 6),
                                            "bytes": list((e["token"] + "_1").encode())}
    plain = post(echo_api, {"model": "test-model", "input": U}).json()["output"][0]["content"][0]
    assert "logprobs" not in plain


def test_logprobs_stream_placement(echo_api):
    body = {"model": "test-model", "input": U, "include": ["message.output_text.logprobs"], "top_logprobs": 2,
            "stream": True}
    evs = named_events(post(echo_api, body).text)
    by = {}
    for n, d in evs:
        by.setdefault(n, []).append(d)
    assert by["response.content_part.added"][0]["part"]["logprobs"] == []
    deltas = by["response.output_text.delta"]
    streamed = []
    for d in deltas:
        assert len(d["logprobs"]) == 1 and d["logprobs"][0]["token"] == d["delta"]
        streamed += d["logprobs"]
    assert by["response.output_text.done"][0]["logprobs"] == []
    # vLLM 0.34 (responses/streaming_events.py emit_simple_content_done l. 915-923): the done part
    # carries the logprobs streamed; a delta's entries are response_text_delta_event.Logprob
    # (token, logprob, top_logprobs of token and logprob: no bytes, _to_stream_logprobs l. 876)
    whole = evs[-1][1]["response"]["output"][0]["content"][0]["logprobs"]
    assert by["response.content_part.done"][0]["part"]["logprobs"] == whole
    assert by["response.output_item.done"][0]["item"]["content"][0]["logprobs"] == whole
    assert streamed == [{"token": e["token"], "logprob": e["logprob"],
                         "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]} for t in e["top_logprobs"]]}
                        for e in whole]
    assert all(list(e) == ["token", "logprob", "top_logprobs"] for e in streamed)
    # without include: deltas carry the SDK-required empty list; vLLM's parts open with [] and
    # close with null; the response object's part (the specification's) carries none
    evs = named_events(post(echo_api, {"model": "test-model", "input": U, "stream": True}).text)
    for n, d in evs:
        if n == "response.output_text.delta":
            assert d["logprobs"] == []
        if n == "response.content_part.added":
            assert d["part"] == {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        if n == "response.content_part.done":
            assert list(d["part"]) == ["annotations", "text", "type", "logprobs"] and d["part"]["logprobs"] is None
    assert "logprobs" not in evs[-1][1]["response"]["output"][0]["content"][0]


# ---- multimodal -----------------------------------------------------------------------------------

def test_multimodal_inputs(echo_api, api):
    text_image = [user_msg([{"type": "input_text", "text": "Describe this"},
                            {"type": "input_image", "image_url": "https://example.com/img.png"}])]
    r = client(echo_api).responses.create(model="test-model", input=text_image)
    assert r.output_text == "Describe this\nimage: https://example.com/img.png"
    audio = [user_msg([{"type": "input_text", "text": "Transcribe this audio clip."},
                       {"type": "input_audio", "data": "UklGRgAAAAA=", "format": "wav"}])]
    r = post(echo_api, {"model": "test-model", "input": audio}).json()
    assert r["output"][0]["content"][0]["text"] == "Transcribe this audio clip.\naudio: wav"
    mixed = [user_msg([{"type": "input_text", "text": "Analyze the following media."},
                       {"type": "input_image", "image_url": "https://example.com/diagram.png"},
                       {"type": "input_audio", "data": "UklGRgAAAAA=", "format": "mp3"}])]
    r = post(api, {"model": "test-model", "input": mixed, "stream": True})
    final = named_events(r.text)[-1][1]["response"]
    assert final["status"] in ("completed", "incomplete") and final["output"][0]["content"][0]["text"]
    assert final["usage"]["input_tokens"] > 0 and final["usage"]["output_tokens"] > 0
    r = post(api, {"model": "test-model", "input": [user_msg([{"type": "input_video", "url": "x"}])]})
    assert r.status_code == 400 and "unsupported input content type" in r.json()["error"]["message"]


# ---- tools ----------------------------------------------------------------------------------------

def test_c29_function_call_loop(api):
    c = client(api)
    first = c.responses.create(model="test-model", input="weather in Paris?", tools=[GET_WEATHER],
                               tool_choice="required")
    assert len(first.output) == 1
    call = first.output[0]
    assert call.type == "function_call" and call.status == "completed" and call.name == "get_weather"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert call.id[3:] == call.call_id[5:]
    args = json.loads(call.arguments)
    assert isinstance(args, dict) and isinstance(args["city"], str)
    assert first.status == "completed" and first.usage.output_tokens >= 1
    history = [{"role": "user", "content": "weather in Paris?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp":20}'}]
    second = c.responses.create(model="test-model", input=history, tools=[GET_WEATHER])
    assert second.output[0].type == "message" and second.output_text
    assert all(o.type != "function_call" for o in second.output)
    # a later user turn still carries tool history: tool calling stays off
    third = c.responses.create(model="test-model", input=history + [{"role": "user", "content": "and Rome?"}],
                               tools=[GET_WEATHER], tool_choice="required")
    assert [o.type for o in third.output] == ["message"]
    none = c.responses.create(model="test-model", input="weather?", tools=[GET_WEATHER], tool_choice="none")
    assert [o.type for o in none.output] == ["message"]


def test_tool_loop_exit_echoes_output(echo_api):
    history = [user_msg("weather?"),
               {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
               {"type": "function_call_output", "call_id": "call_1", "output": '{"temp":20}'}]
    r = client(echo_api).responses.create(model="test-model", input=history, tools=[GET_WEATHER])
    assert r.output_text == '{"temp":20}'
    evs = named_events(post(echo_api, {"model": "test-model", "input": history, "tools": [GET_WEATHER],
                                          "stream": True}).text)
    names = [n for n, _ in evs]
    assert "response.output_text.delta" in names and "response.function_call_arguments.delta" not in names


def test_one_call_with_default_choice_and_two_tools(api):
    c = client(api)
    for _ in range(8):
        r = c.responses.create(model="test-model", input="hi", tools=[GET_WEATHER, GET_TEMPERATURE])
        assert len(r.output) == 1 and r.output[0].type == "function_call"
        assert r.output[0].name in ("get_weather", "get_temperature")
    for choice in ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]},
                   {"type": "custom", "name": "x"}):        # a named choice names a tool (vLLM's check_tool_usage)
        r = post(api, {"model": "test-model", "input": "hi", "tools": [GET_WEATHER, {"type": "custom", "name": "x"}],
                       "tool_choice": choice})
        assert r.status_code == 200, r.text
        assert [o["type"] for o in r.json()["output"]] == ["function_call"]


def test_named_tool_choice(api):
    c = client(api)
    for _ in range(3):
        r = c.responses.create(model="test-model", input="hi", tools=[GET_WEATHER, GET_TEMPERATURE],
                               tool_choice={"type": "function", "name": "get_temperature"})
        assert [o.name for o in r.output] == ["get_temperature"]
        assert set(json.loads(r.output[0].arguments)) == {"city", "unit"}
    evs = named_events(post(api, {"model": "test-model", "input": "hi", "stream": True,
                                     "tools": [GET_WEATHER, GET_TEMPERATURE],
                                     "tool_choice": {"type": "function", "name": "get_temperature"}}).text)
    added = [d for n, d in evs if n == "response.output_item.added"]
    assert added[0]["item"]["name"] == "get_temperature"
    r = post(api, {"model": "test-model", "input": "hi", "tools": [GET_WEATHER],
                      "tool_choice": {"type": "function", "name": "get_temperature"}})
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (   # vLLM 0.34's words
        400, "Tool choice 'function' not found in 'tools' parameter. (parameter=tool_choice)", "tool_choice")


def test_stream_function_call_raw(api):
    r = post(api, {"model": "test-model", "input": "weather in Paris?", "tools": [GET_WEATHER], "stream": True})
    evs = named_events(r.text)
    names = [n for n, _ in evs]
    k = names.count("response.function_call_arguments.delta")
    assert k >= 1
    assert names == (["response.created", "response.in_progress", "response.output_item.added"] +
                     ["response.function_call_arguments.delta"] * k +
                     ["response.function_call_arguments.done", "response.output_item.done", "response.completed"])
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    item = evs[2][1]["item"]
    assert item["type"] == "function_call" and item["status"] == "in_progress" and item["arguments"] == ""
    assert item["id"].startswith("fc_") and item["call_id"].startswith("call_")
    deltas = [d for n, d in evs if n == "response.function_call_arguments.delta"]
    assert all(d["item_id"] == item["id"] and d["output_index"] == 0 for d in deltas)
    done = evs[-3][1]
    assert done["arguments"] == "".join(d["delta"] for d in deltas) and done["name"] == "get_weather"
    assert isinstance(json.loads(done["arguments"])["city"], str)
    assert evs[-2][1]["item"] == {**item, "status": "completed", "arguments": done["arguments"]}
    final = evs[-1][1]["response"]
    assert final["output"] == [evs[-2][1]["item"]]
    assert final["usage"]["output_tokens"] == k


def test_stream_function_call_sdk(any_api):
    with client(any_api).responses.stream(model="test-model", input="hi", tools=[GET_WEATHER]) as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert [o.type for o in final.output] == ["function_call"]
    assert json.loads(final.output[0].arguments)["city"]


def test_history_counts_toward_input_tokens(api):
    c = client(api)
    plain = c.responses.create(model="test-model", input=[user_msg(U)], max_output_tokens=3)
    hist = c.responses.create(model="test-model", max_output_tokens=3, input=[
        user_msg(U),
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert hist.usage.input_tokens > plain.usage.input_tokens == 10


def test_tools_echoed_in_response(api):
    r = client(api).responses.create(model="test-model", input="hi", tools=[GET_WEATHER],
                                        tool_choice={"type": "function", "name": "get_weather"})
    assert r.tools[0].name == "get_weather" and r.tools[0].parameters == GET_WEATHER["parameters"]
    assert r.tool_choice.type == "function" and r.tool_choice.name == "get_weather"


# ---- structured output ----------------------------------------------------------------------------

def test_text_format_json(api):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client(api).responses.create(model="test-model", input=U, text={
        "format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    obj = json.loads(r.output_text)
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)
    assert r.text.format.type == "json_schema"
    r = client(api).responses.create(model="test-model", input=U, text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)


# ---- errors (OpenAI envelope) ---------------------------------------------------------------------

@pytest.mark.parametrize("body,contains", [
    # ResponsesRequest.input has no default (responses/protocol.py:264): pydantic's missing, its
    # input the body after check_tool_usage (:865) set tool_choice "none" (two items)
    ({}, "{'type': 'missing', 'loc': 'body.input', 'msg': 'Field required', 'input': '<dict of 2 items>'}"),
    ({"input": None}, "input is required"),
    ({"input": 5}, "input must be a string or array"),
    ({"input": [{"type": "telepathy", "summary": []}]}, 'unsupported input item type "telepathy"'),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     'unsupported input content type "input_file"'),
    ({"input": [{"type": "function_call_output", "output": "x", "call_id": 5}]}, "input[0].call_id"),
    ({"input": U, "tools": [{"type": "telepathy"}]}, 'unsupported tool type "telepathy"'),
    ({"input": U, "tools": [{"type": "function"}]}, "tool name is required"),
    ({"input": U, "tools": [{"type": "function", "name": "f", "parameters": {"type": "stringstring"}}]},
     "Tool validation failed"),
    ({"input": U, "tool_choice": {"type": "function"}}, "tool_choice function requires a name"),
    ({"input": U, "max_output_tokens": 0}, "max_tokens must be at least 1, got 0."),     # SamplingParams'
    ({"input": U, "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": U, "stream": "maybe"}, "body.stream"),
])
def test_malformed_bodies(api, body, contains):
    r = post(api, {"model": "test-model", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert contains in err["message"] and err["type"] == error_type_400(err["message"]) and err["code"] == 400


def test_background_without_the_store_is_vllms_invalid_request_error(api):
    """_validate_create_responses_input (responses/serving.py:264-276): err_type
    ``invalid_request_error``, param ``background``."""
    r = post(api, {"model": "test-model", "input": U, "background": True})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "This vLLM engine does not support `store=True` and therefore does not support the background "
                   "mode. To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` "
                   "when launching the vLLM server.",
        "type": "invalid_request_error", "param": "background", "code": 400}


def test_sdk_bad_request(api):
    with pytest.raises(openai.BadRequestError):
        client(api).responses.create(model="test-model", input=[{"type": "telepathy", "summary": []}])


def test_forced_error_header(api):
    r = post(api, {"model": "test-model", "input": U}, {"X-Return-Error": "429"})
    assert r.status_code == 429 and r.json()["error"]["type"] == "RateLimitError"


def test_cache_threshold_header(api):
    r = post(api, {"model": "test-model", "input": U}, {"X-Cache-Threshold-Finish-Reason": "true"}).json()
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "cache_threshold"}
    assert r["usage"]["output_tokens"] == 0 and r["output"][0]["content"][0]["text"] == ""


def test_cached_tokens_reported(app_client):
    base = app_client("--enable-kvcache", "--block-size", "16", env={"POD_IP": "127.0.0.1"})
    long = " ".join(f"resp{i}" for i in range(100))
    first = client(base).responses.create(model="test-model", input=long, max_output_tokens=5)
    second = client(base).responses.create(model="test-model", input=long, max_output_tokens=5)
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached > 0 and cached % 16 == 0 and second.usage.input_tokens == first.usage.input_tokens


# ---- the same events whatever the timing path (issue 32: schedules emitted by the server's hub) ----

QWEN3 = ("--reasoning-parser", "qwen3")
LOGPROBS = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
CALL = {"max_output_tokens": 60, "tools": [GET_WEATHER], "tool_choice": "required"}
RESPONSE_BODIES = {
    "text": ({"max_output_tokens": 12, "ignore_eos": True}, ()),
    "logprobs": ({"max_output_tokens": 12, "ignore_eos": True, **LOGPROBS}, ()),
    "reasoning": ({"max_output_tokens": 20, "ignore_eos": True, **LOGPROBS}, QWEN3),
    "cut inside the reasoning": ({"max_output_tokens": 1, "ignore_eos": True}, QWEN3),
    "function call": (CALL, ()),
    "reasoning, then a function call": (CALL, QWEN3),
    "stream interval": ({"max_output_tokens": 12, "ignore_eos": True}, ("--stream-interval", "3")),
    "stream interval across the reasoning": ({"max_output_tokens": 20, "ignore_eos": True, **LOGPROBS},
                                             ("--stream-interval", "3", *QWEN3)),
    "stream interval, function call": (CALL, ("--stream-interval", "3", *QWEN3)),
}
RESPONSE_TIMINGS = {"all at once": (), "schedule from the first token": ("--time-to-first-token", "2ms",
                                                                         "--inter-token-latency", "1ms"),
                    "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms")}


@pytest.mark.parametrize("name", RESPONSE_BODIES)
def test_response_stream_events_do_not_depend_on_the_timing_path(app_client, name):
    """A stream with a constant inter-token latency hands its tokens to the hub as a schedule
    (each token's events rendered by it, in order: the reasoning item closing and the answer's
    opening at the first answer token, the sequence numbers): the events are those of the stream
    that waits for nothing, and of one waiting per token."""
    extra, flags = RESPONSE_BODIES[name]
    seed = str(11 + list(RESPONSE_BODIES).index(name))     # an app of its own: a drawn ITL shares the seeded draws
    runs = {}
    for timing, timing_flags in RESPONSE_TIMINGS.items():
        r = post(app_client("--seed", seed, *flags, *timing_flags),
                 {"model": "test-model", "input": U, "stream": True, **extra})
        assert r.status_code == 200, r.text
        text = r.text
        for tag in ("resp", "msg", "rs", "fc", "call"):         # the ids, and when it was made
            text = re.sub(rf'"{tag}_[0-9A-Za-z-]+"', f'"{tag}_"', text)
        runs[timing] = named_events(re.sub(r'"created_at":\d+', '"created_at":0', text))
    assert runs["schedule from the first token"] == runs["all at once"]
    assert runs["deadline per token"] == runs["all at once"]
    evs = runs["all at once"]
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    deltas = sum(n.endswith(".delta") for n, _ in evs)
    assert deltas >= (0 if name.startswith("cut") else 2 if "interval" in name or "reasoning" in name else 4)
