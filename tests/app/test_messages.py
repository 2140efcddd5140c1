"""Anthropic Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) in-process
(and, for the SDK streams, against a real server), driven with the official ``anthropic`` SDK
and raw ``httpx`` (case C30, C19 item 5, api.md 13 cases 73-78)."""
from __future__ import annotations

import json

import anthropic
import gevent
import httpx
import pytest

from support import TIMING_PATHS, named_events

U = "This is a test."          # "### user: This is a test.\n" -> 10 prompt tokens
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"}

WEATHER = {"name": "get_weather", "description": "Get the weather",
           "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                            "required": ["location"]}}
TEMPERATURE = {"name": "get_temperature", "description": "Get the temperature",
               "input_schema": {"type": "object",
                                "properties": {"city": {"type": "string"},
                                               "unit": {"type": "string", "enum": ["C", "F"]}},
                                "required": ["city", "unit"]}}


def client(base) -> anthropic.Anthropic:
    return base.anthropic(api_key="sk-ant-test", max_retries=0, timeout=30)


def post(base, body: dict, headers: dict | None = None) -> httpx.Response:
    return base.post("/v1/messages", json=body, headers={**HEADERS, **(headers or {})}, timeout=30)


def events(resp: httpx.Response) -> list:
    return named_events(resp.text)


# ---- non-streaming ---------------------------------------------------------------------------------

def test_basic_random(api):
    msg = client(api).messages.create(model="test-model", max_tokens=100,
                                         messages=[{"role": "user", "content": U}])
    assert msg.id.startswith("msg_") and len(msg.id) > 10
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "test-model"
    assert len(msg.content) == 1 and msg.content[0].type == "text" and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.stop_sequence is None
    assert msg.usage.input_tokens == 10
    assert 1 <= msg.usage.output_tokens <= 100
    # vLLM 0.34: without cache information the cache counters are left out
    assert msg.usage.cache_creation_input_tokens is None and msg.usage.cache_read_input_tokens is None
    assert msg.usage.model_dump(exclude_unset=True) == {"input_tokens": 10, "output_tokens": msg.usage.output_tokens}


def test_the_body_is_laid_out_as_vllms_model(api):
    """vLLM 0.34's AnthropicMessagesResponse order (anthropic/protocol.py l. 441-453): ``content``
    before ``model``; AnthropicUsage's: input, output, then the cache counters (l. 56-62)."""
    r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 3,
                                       "messages": [{"role": "user", "content": U}]})
    body = r.json()
    # model_dump(exclude_none=True) (anthropic/api_router.py l. 83): no stop string matched, no
    # stop_sequence key
    assert list(body) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]
    assert list(body["usage"]) == ["input_tokens", "output_tokens"]


def test_body_leaves_out_its_null_fields_as_vllm(echo_api):
    """vLLM 0.34 answers ``model_dump(exclude_none=True)`` (anthropic/api_router.py l. 83): a
    matched stop string is ``stop_sequence``, none is no key (the SDK reads None either way); an
    answer that stops before its first character is one empty text block, not ``[]``
    (messages_full_converter, anthropic/serving.py l. 986-990)."""
    base = {"model": "test-model", "max_tokens": 10, "messages": [{"role": "user", "content": U}]}
    body = post(echo_api, {**base, "stop_sequences": ["test"]}).json()
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "test")
    body = post(echo_api, base).json()
    assert body["stop_reason"] == "end_turn" and "stop_sequence" not in body
    body = post(echo_api, {**base, "stop_sequences": ["This"]}).json()
    assert body["content"] == [{"type": "text", "text": ""}]
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "This")
    msg = client(echo_api).messages.create(**{**base, "stop_sequences": ["This"]})
    assert msg.content[0].type == "text" and msg.content[0].text == ""
    # a stream of that answer opens no block at all, as vLLM's converter skips empty deltas
    names = [name for name, _ in events(post(echo_api, {**base, "stop_sequences": ["This"], "stream": True}))]
    assert names == ["message_start", "message_delta", "message_stop"]


def test_echo_exact_text_and_usage(echo_api):
    msg = client(echo_api).messages.create(model="test-model", max_tokens=100,
                                              messages=[{"role": "user", "content": U}])
    assert msg.content[0].text == U
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (10, 5)


@pytest.mark.parametrize("system", ["Be brief.", [{"type": "text", "text": "Be brief."}]])
def test_system_string_or_blocks(echo_api, system):
    # "### system: Be brief.\n" adds 8 tokens (#,#,# ,system,: ,Be ,brief,.\n).
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50, system=system,
                                              messages=[{"role": "user", "content": U}])
    assert msg.usage.input_tokens == 18
    assert msg.content[0].text == U


def test_multi_turn_with_tool_history(echo_api):
    c = client(echo_api)
    messages = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"},
            {"type": "text", "text": "Thanks!"}]},
    ]
    msg = c.messages.create(model="test-model", max_tokens=50, messages=messages, tools=[WEATHER])
    # tool_choice auto may call a tool or answer; the prompt count is what we check here.
    counted = c.messages.count_tokens(model="test-model", messages=messages, tools=[WEATHER])
    assert msg.usage.input_tokens == counted.input_tokens
    no_history = c.messages.count_tokens(model="test-model", messages=[messages[0]])
    assert counted.input_tokens > no_history.input_tokens + 20
    # The tool result comes first, then the user's text, which echo mode replays.
    echoed = c.messages.create(model="test-model", max_tokens=50, messages=messages)
    assert echoed.content[0].text == "Thanks!"


def test_tool_result_blocks_content_is_echoed(echo_api):
    messages = [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01",
         "content": [{"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}]}]}]
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50, messages=messages)
    assert msg.content[0].text == "line one\nline two"


def test_image_blocks(echo_api):
    content = [{"type": "text", "text": "Describe this"},
               {"type": "image", "source": {"type": "url", "url": "https://example.com/img.png"}}]
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50,
                                              messages=[{"role": "user", "content": content}])
    assert msg.content[0].text == "Describe this\nimage: https://example.com/img.png"
    b64 = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo"}}]
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50,
                                              messages=[{"role": "user", "content": b64}])
    assert msg.content[0].text == "image: data:image/png;base64,iVBORw0KGgo"


def test_ignored_fields_accepted(api):
    msg = client(api).messages.create(
        model="test-model", max_tokens=5, messages=[{"role": "user", "content": U}],
        metadata={"user_id": "u1"},
        extra_body={"ignore_eos": True, "temperature": 0.2, "top_k": 5, "top_p": 0.9,
                    "thinking": {"type": "adaptive"}})
    assert msg.usage.output_tokens == 5 and msg.stop_reason == "max_tokens"


def test_stop_sequences(echo_api):
    text = "This is a test. Stop here please."
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50, stop_sequences=["zzz", "here"],
                                              messages=[{"role": "user", "content": text}])
    assert msg.content[0].text == "This is a test. Stop "
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "here"
    # This , is , a , test, . , Stop , here: vLLM 0.34's detokenizer keeps the token that
    # completes the stop string (v1/engine/detokenizer.py l. 133-157), its text cut
    assert msg.usage.output_tokens == 7
    body = {"model": "test-model", "max_tokens": 50, "stream": True, "stop_sequences": ["here"],
            "messages": [{"role": "user", "content": text}]}
    evs = events(post(echo_api, body))
    deltas = "".join(d["delta"]["text"] for n, d in evs if n == "content_block_delta")
    assert deltas == "This is a test. Stop "
    md = [d for n, d in evs if n == "message_delta"][0]
    assert md["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "here"}
    assert md["usage"]["output_tokens"] == 7


def test_stop_sequences_bounds_as_vllm(api):
    """vLLM 0.34: ``stop_sequences`` holds at most ``VLLM_MAX_STOP_STRINGS`` (4) strings, pydantic's
    ``too_long`` (anthropic/protocol.py:278-280), and becomes chat's ``stop`` as sent, where
    SamplingParams refuses an empty string (sampling_params.py:739-740)."""
    base = {"model": "test-model", "max_tokens": 5, "messages": [{"role": "user", "content": U}]}
    assert post(api, {**base, "stop_sequences": ["a", "b", "c", "d"]}).status_code == 200
    r = post(api, {**base, "stop_sequences": ["a", "b", "c", "d", "e"]})
    _assert_anthropic_error(r, 400, "invalid_request_error")
    assert r.json()["error"]["message"] == (
        "1 validation error:\n  {'type': 'too_long', 'loc': 'body.stop_sequences', 'msg': 'List should have at most 4 "
        "items after validation, not 5', 'input': '<list of 5 items>', 'ctx': {'field_type': 'List', 'max_length': 4, "
        "'actual_length': 5}}")
    for stops in (["a", ""], [""]):
        r = post(api, {**base, "stop_sequences": stops})
        _assert_anthropic_error(r, 400, "invalid_request_error")
        assert r.json()["error"]["message"] == "stop cannot contain an empty string."


# ---- tools -----------------------------------------------------------------------------------------

def test_tool_choice_any(api):
    for _ in range(5):
        msg = client(api).messages.create(model="test-model", max_tokens=100, tools=[WEATHER],
                                             tool_choice={"type": "any"},
                                             messages=[{"role": "user", "content": "Weather in Paris?"}])
        assert msg.stop_reason == "tool_use"
        assert msg.content and all(b.type == "tool_use" for b in msg.content)
        for b in msg.content:
            assert b.id.startswith("toolu_") and b.name == "get_weather"
            assert isinstance(b.input, dict) and isinstance(b.input["location"], str)


def test_tool_choice_tool(api):
    for _ in range(5):
        msg = client(api).messages.create(model="test-model", max_tokens=100, tools=[WEATHER, TEMPERATURE],
                                             tool_choice={"type": "tool", "name": "get_temperature"},
                                             messages=[{"role": "user", "content": U}])
        assert msg.stop_reason == "tool_use"
        assert [b.name for b in msg.content] == ["get_temperature"]
        assert set(msg.content[0].input) == {"city", "unit"} and msg.content[0].input["unit"] in ("C", "F")
        assert msg.usage.input_tokens == 10      # tool schemas add no prompt tokens


def test_tool_choice_none_and_disable_parallel(api):
    c = client(api)
    msg = c.messages.create(model="test-model", max_tokens=20, tools=[WEATHER], tool_choice={"type": "none"},
                            messages=[{"role": "user", "content": U}])
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.content[0].type == "text"
    for _ in range(5):
        msg = c.messages.create(model="test-model", max_tokens=20, tools=[WEATHER, TEMPERATURE],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                messages=[{"role": "user", "content": U}])
        assert msg.stop_reason == "tool_use" and len(msg.content) == 1


def test_stream_tools_with_sdk(any_api):
    with client(any_api).messages.stream(model="test-model", max_tokens=100, tools=[WEATHER, TEMPERATURE],
                                        tool_choice={"type": "tool", "name": "get_weather"},
                                        messages=[{"role": "user", "content": U}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].name == "get_weather" and isinstance(final.content[0].input["location"], str)
    assert final.content[0].id.startswith("toolu_")


def test_c30_stream_tool_use_raw(api):
    body = {"model": "test-model", "max_tokens": 4, "stream": True, "tools": [WEATHER, TEMPERATURE],
            "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "hi"}]}
    r = post(api, body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    evs = events(r)
    names = [n for n, _ in evs]
    assert names[0] == "message_start" and names[-1] == "message_stop" and "[DONE]" not in r.text
    for n, d in evs:
        assert d["type"] == n
    starts = [d for n, d in evs if n == "content_block_start"]
    assert starts and all(d["content_block"]["type"] == "tool_use" for d in starts)
    assert [d["index"] for d in starts] == list(range(len(starts)))
    args = {}
    for n, d in evs:
        if n == "content_block_delta":
            assert d["delta"]["type"] == "input_json_delta" and d["delta"]["partial_json"]
            args[d["index"]] = args.get(d["index"], "") + d["delta"]["partial_json"]
    for d in starts:
        cb = d["content_block"]
        assert cb["id"].startswith("toolu_") and cb["name"] in ("get_weather", "get_temperature")
        assert isinstance(json.loads(args[d["index"]]), dict)
    stops = [d["index"] for n, d in evs if n == "content_block_stop"]
    assert stops == list(range(len(starts)))
    md = [d for n, d in evs if n == "message_delta"]
    assert len(md) == 1 and md[0]["delta"]["stop_reason"] == "tool_use"
    assert md[0]["usage"]["output_tokens"] == sum(1 for n, _ in evs if n == "content_block_delta")


# ---- streaming text --------------------------------------------------------------------------------

def test_c30_stream_text_raw(api):
    body = {"model": "test-model", "max_tokens": 4, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}]}
    r = post(api, body)
    assert r.status_code == 200
    # every frame: "event: X\ndata: {...,"type":"X"}"
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    for f in frames:
        ev_line, data_line = f.split("\n")
        assert ev_line.startswith("event: ") and data_line.startswith("data: ")
        assert json.loads(data_line[6:])["type"] == ev_line[7:]
    evs = [(n, d) for n, d in events(r) if n != "ping"]
    names = [n for n, _ in evs]
    assert names == (["message_start", "content_block_start"] + ["content_block_delta"] * 4 +
                     ["content_block_stop", "message_delta", "message_stop"])
    start = evs[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["id"].startswith("msg_")
    assert start["usage"]["input_tokens"] > 0 and start["model"] == "test-model"
    assert evs[1][1]["index"] == 0 and evs[1][1]["content_block"] == {"type": "text", "text": ""}
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for n, d in evs if n == "content_block_delta")
    md = evs[-2][1]
    assert md["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert md["usage"]["output_tokens"] == 4
    assert "ping" not in [n for n, _ in events(r)]       # vLLM 0.34's converter sends none


def test_stream_text_with_sdk(echo_api):
    with client(echo_api).messages.stream(model="test-model", max_tokens=50,
                                             messages=[{"role": "user", "content": U}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == U
    assert final.content[0].text == U and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 5)
    assert final.id.startswith("msg_")


def test_stream_create_iterates_events(any_api):
    stream = client(any_api).messages.create(model="test-model", max_tokens=6, stream=True,
                                            messages=[{"role": "user", "content": U}],
                                            extra_body={"ignore_eos": True})
    types = [e.type for e in stream]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert types.count("content_block_delta") == 6


# ---- count_tokens ----------------------------------------------------------------------------------

def test_count_tokens(api):
    c = client(api)
    n = c.messages.count_tokens(model="test-model", messages=[{"role": "user", "content": U}])
    assert n.input_tokens == 10
    n = c.messages.count_tokens(model="test-model", system="Be brief.", tools=[WEATHER],
                                messages=[{"role": "user", "content": U}])
    assert n.input_tokens == 18
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="nope", messages=[{"role": "user", "content": U}])


def test_count_tokens_counts_past_max_model_len(app_client):
    """vLLM 0.34's count_tokens counts a prompt longer than ``max_model_len`` (like /tokenize)."""
    n = client(app_client("--max-model-len", "64")).messages.count_tokens(
        model="test-model", messages=[{"role": "user", "content": "word " * 200}])
    assert n.input_tokens == 205


# ---- vLLM 0.34's additions ------------------------------------------------------------------------

def test_min_tokens_between_tools_and_custom_tools(app_client):
    """``min_tokens`` holds the answer open (vLLM's extension), ``thinking: between_tools`` is
    thinking off, and ``type: "custom"`` tools are client tools."""
    base = app_client("--reasoning-parser", "qwen3", "--seed", "3")
    for _ in range(5):
        r = post(base, {"model": "test-model", "max_tokens": 30, "min_tokens": 30, "thinking": {"type": "between_tools"},
                        "messages": [{"role": "user", "content": U}]})
        msg = r.json()
        assert r.status_code == 200 and msg["usage"]["output_tokens"] == 30
        assert [b["type"] for b in msg["content"]] == ["text"]       # no thinking block
    r = post(base, {"model": "test-model", "max_tokens": 10, "tool_choice": {"type": "any"},
                    "tools": [{**WEATHER, "type": "custom"}], "messages": [{"role": "user", "content": U}]})
    assert r.status_code == 200 and r.json()["content"][0]["name"] == "get_weather"
    _assert_anthropic_error(post(base, {"model": "test-model", "max_tokens": 3, "min_tokens": 4,
                                        "messages": [{"role": "user", "content": U}]}),
                            400, "invalid_request_error", "min_tokens must be less than or equal to max_tokens=3, got 4.")


def test_an_empty_reasoning_has_no_thinking_block(app_client):
    """vLLM 0.34's converters add a thinking block only for a non-empty reasoning
    (``if choice.message.reasoning``; the stream skips empty reasoning deltas): an answer whose
    first token ends its reasoning (max_tokens 1, a P/D prefill leg's) had an empty thinking
    block, so an empty answer was not the one empty text block either."""
    base = app_client("--reasoning-parser", "deepseek_r1")
    body = {"model": "test-model", "max_tokens": 1, "messages": [{"role": "user", "content": U}]}
    chat = base.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert chat["reasoning"] == "" and chat["content"] is None
    assert post(base, body).json()["content"] == [{"type": "text", "text": ""}]
    evs = events(post(base, {**body, "stream": True}))
    assert not [d for n, d in evs if n.startswith("content_block")]
    body["max_tokens"] = 2          # a reasoning token and its end, or the end and a text token
    seen = set()
    for _ in range(12):
        evs = events(post(base, {**body, "stream": True}))
        starts = tuple((d["index"], d["content_block"]["type"]) for n, d in evs if n == "content_block_start")
        thoughts = [d["delta"]["thinking"] for n, d in evs if n == "content_block_delta"
                    and d["delta"]["type"] == "thinking_delta"]
        assert starts in (((0, "thinking"),), ((0, "text"),)) and all(thoughts)
        assert bool(thoughts) == (starts == ((0, "thinking"),))
        seen.add(starts)
    assert ((0, "text"),) in seen


@pytest.mark.parametrize("tool", [{"type": "web_search_20250305", "name": "web_search"},
                                  {"type": "bash_20250124", "name": "bash", "input_schema": {"type": "object"}}])
def test_built_in_tools_are_refused_by_type(api, tool):
    r = post(api, {"model": "test-model", "max_tokens": 5, "tools": [tool], "messages": [{"role": "user", "content": U}]})
    _assert_anthropic_error(r, 400, "invalid_request_error",
                            f"tools[0].type: tool type {tool['type']!r} is not supported; only custom tools with an "
                            f"input_schema are supported")


def test_cache_counters_only_with_cache_information(app_client):
    """vLLM 0.34: the cache counters come with ``--enable-prompt-tokens-details`` (or the KV
    cache), in the body and in the stream's ``message_start`` and ``message_delta``."""
    body = {"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": U}]}
    for base, extra in ((app_client(), {}),
                        (app_client("--enable-prompt-tokens-details"),
                         {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})):
        usage = post(base, body).json()["usage"]
        assert usage == {"input_tokens": 10, "output_tokens": usage["output_tokens"], **extra}
        evs = events(post(base, {**body, "stream": True}))
        start = [d for n, d in evs if n == "message_start"][0]["message"]["usage"]
        delta = [d for n, d in evs if n == "message_delta"][0]["usage"]
        assert start == {"input_tokens": 10, "output_tokens": 0, **extra}
        assert delta == {"input_tokens": 10, "output_tokens": delta["output_tokens"], **extra}


# ---- errors (Anthropic envelope) -------------------------------------------------------------------

def _assert_anthropic_error(r: httpx.Response, status: int, etype: str, contains: str = ""):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype
    assert contains in body["error"]["message"]
    assert set(body) == {"type", "error"}


def test_missing_max_tokens(api):
    r = post(api, {"model": "test-model", "messages": [{"role": "user", "content": U}]})
    _assert_anthropic_error(r, 400, "invalid_request_error", "max_tokens")
    r = post(api, {"model": "test-model", "max_tokens": None, "messages": [{"role": "user", "content": U}]})
    _assert_anthropic_error(r, 400, "invalid_request_error", "max_tokens")


def _missing(field: str, size: int) -> str:
    return f"  {{'type': 'missing', 'loc': 'body.{field}', 'msg': 'Field required', 'input': '<dict of {size} items>'}}"


@pytest.mark.parametrize("body,message", [
    ({"model": "test-model", "messages": [{"role": "user", "content": U}]},
     "1 validation error:\n" + _missing("max_tokens", 2)),
    ({"model": "test-model", "max_tokens": 5}, "1 validation error:\n" + _missing("messages", 2)),
    ({"model": "test-model", "max_tokens": 5, "messages": [{"content": U}]}, "messages[0].role: Field required."),
])
def test_missing_field(api, body, message):
    """A missing top-level field is pydantic's ``missing`` error, as vLLM's AnthropicMessagesRequest
    (anthropic/protocol.py:272-274: ``model``, ``messages``, ``max_tokens`` without defaults) is
    read by pydantic, its ``input`` the whole body (vLLM's validation handler,
    serve/exception_handling/handlers/validation.py:97, shows it as ``<dict of N items>``); a
    message's own missing field keeps the simulator's words (its content checks are its own)."""
    r = post(api, body)
    _assert_anthropic_error(r, 400, "invalid_request_error", "Field required")
    assert r.json()["error"]["message"] == message


@pytest.mark.parametrize("body,field", [
    ({"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages[0].content[0].source"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": U}], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"messages": [{"role": "user", "content": U}], "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"messages": [{"role": "user", "content": U}], "system": 3}, "system"),
    ({"messages": [{"role": "user", "content": U}], "max_tokens": 0}, "max_tokens"),
])
def test_malformed_bodies(api, body, field):
    full = {"model": "test-model", "max_tokens": 10, **body}
    _assert_anthropic_error(post(api, full), 400, "invalid_request_error", field)


@pytest.mark.parametrize("value", [0, -3])
def test_max_tokens_not_positive_is_vllms_value_error(api, value):
    """vLLM 0.34's ``validate_max_tokens`` (anthropic/protocol.py:369-374) raises a ValueError
    inside pydantic: its validation handler's words, not SamplingParams' (the request never gets
    that far)."""
    r = post(api, {"model": "test-model", "max_tokens": value, "messages": [{"role": "user", "content": U}]})
    _assert_anthropic_error(r, 400, "invalid_request_error")
    assert r.json()["error"]["message"] == (
        "1 validation error:\n  {'type': 'value_error', 'loc': 'body.max_tokens', 'msg': 'Value error, max_tokens "
        f"must be positive', 'input': '{value}', 'ctx': {{'error': ValueError('max_tokens must be positive')}}}}")


def test_not_json(api):
    r = api.post("/v1/messages", content=b"{nope", headers={"content-type": "application/json"})
    _assert_anthropic_error(r, 400, "invalid_request_error")


def test_sdk_raises_typed_errors(api):
    c = client(api)
    with pytest.raises(anthropic.NotFoundError) as ei:
        c.messages.create(model="some-other-model", max_tokens=10, messages=[{"role": "user", "content": U}])
    assert ei.value.body["error"]["type"] == "not_found_error"
    assert "The model `some-other-model` does not exist" in ei.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(model="test-model", max_tokens=10, messages=[])


@pytest.mark.parametrize("code,etype", [(400, "invalid_request_error"), (401, "authentication_error"),
                                        (403, "permission_error"), (429, "rate_limit_error"),
                                        (500, "api_error"), (503, "overloaded_error"), (529, "overloaded_error")])
def test_forced_errors_use_anthropic_types(api, code, etype):
    r = post(api, {"model": "test-model", "max_tokens": 10, "messages": [{"role": "user", "content": U}]},
             headers={"X-Return-Error": str(code)})
    _assert_anthropic_error(r, code, etype, "X-Return-Error")


def test_request_too_large(app_client):
    base = app_client("--max-request-body-size-mb", "1")
    big = "word " * 300_000
    r = post(base, {"model": "test-model", "max_tokens": 10, "messages": [{"role": "user", "content": big}]})
    _assert_anthropic_error(r, 413, "request_too_large")
    # the limit and its flag are named (vLLM has none: a client that worked against it needs them)
    limit = ("The data value transmitted exceeds the capacity limit. The request body limit is 1048576 bytes "
             "(--max-request-body-size-mb 1).")
    assert r.json()["error"]["message"] == limit
    r = base.post("/v1/chat/completions", json={"model": "test-model", "messages": [{"role": "user", "content": big}]})
    assert r.status_code == 413 and r.json()["error"]["message"] == limit


def test_other_endpoints_keep_openai_envelope(api):
    r = api.post("/v1/chat/completions", json={"model": "nope", "messages": []})
    assert r.status_code == 404 and "error" in r.json() and "type" not in r.json()


def test_prefill_answer_carries_its_kv_transfer_params(api):
    """vLLM 0.34's messages_full_converter copies the chat answer's kv_transfer_params into the
    message (anthropic/serving.py l. 941-950), so a P/D proxy reads the prefill's transfer
    parameters from /v1/messages as from chat; an ordinary answer has no such key (exclude_none)."""
    body = {"model": "test-model", "max_tokens": 5, "messages": [{"role": "user", "content": U}]}
    prefill = post(api, {**body, "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}).json()
    chat = api.post("/v1/chat/completions", json={
        "model": "test-model", "max_tokens": 5, "messages": [{"role": "user", "content": U}],
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}).json()
    assert prefill["kv_transfer_params"] == chat["kv_transfer_params"]
    assert prefill["kv_transfer_params"]["do_remote_prefill"] is True
    assert list(prefill)[-1] == "kv_transfer_params"
    assert "kv_transfer_params" not in post(api, body).json()


# ---- cache_threshold (C19 item 5) ------------------------------------------------------------------

def test_cache_threshold_header(api):
    h = {"X-Cache-Threshold-Finish-Reason": "true"}
    body = {"model": "test-model", "max_tokens": 10, "messages": [{"role": "user", "content": U}]}
    r = post(api, body, h)
    assert r.status_code == 200
    msg = r.json()
    assert msg["stop_reason"] == "max_tokens" and msg["usage"]["output_tokens"] == 0
    # no token: one empty text block, as vLLM's messages_full_converter answers an empty completion
    assert msg["usage"]["input_tokens"] == 10 and msg["content"] == [{"type": "text", "text": ""}]
    evs = events(post(api, {**body, "stream": True}, h))
    names = [n for n, _ in evs]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    md = [d for n, d in evs if n == "message_delta"][0]
    assert md["delta"]["stop_reason"] == "max_tokens" and md["usage"]["output_tokens"] == 0
    assert "content_block_delta" not in names


# ---- prefix cache accounting -----------------------------------------------------------------------

def test_cache_read_tokens(app_client):
    base = app_client("--enable-kvcache", "--block-size", "16", env={"POD_IP": "127.0.0.1"})
    long = " ".join(f"msg{i}" for i in range(100))
    body = {"model": "test-model", "max_tokens": 5, "messages": [{"role": "user", "content": long}]}
    first = post(base, body).json()["usage"]
    second = post(base, body).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] > 0 and second["cache_read_input_tokens"] % 16 == 0
    # Anthropic accounting: the input counters add up to the prompt.
    assert second["input_tokens"] + second["cache_read_input_tokens"] == \
        first["input_tokens"] + first["cache_creation_input_tokens"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]    # what it wrote
    assert second["cache_creation_input_tokens"] == 0


@pytest.mark.parametrize("flags", [("--enable-kvcache", "--block-size", "16"),
                                   ("--latency-calculator", "step", "--force-dummy-tokenizer", "--vllm-version", "0.33.0",
                                    "--enable-prompt-tokens-details")], ids=["kvcache", "step"])
def test_cache_creation_counts_the_prompts_whole_blocks_written(app_client, flags):
    """vLLM 0.34 (``anthropic/serving.py`` ``_to_anthropic_usage``, ``PrefillStats.finalize``):
    a cold prompt of 105 tokens writes its 6 whole 16-token blocks (96 tokens) to the prefix
    cache, ``cache_creation_input_tokens`` 96 and ``input_tokens`` the 9 left; the repeat reads
    the 96 (at most 104, whole blocks) and writes nothing; the stream's ``message_start`` already
    has the split its ``message_delta`` reports (vLLM's test_anthropic_streaming_cache_usage)."""
    base = app_client(*flags, env={"POD_IP": "127.0.0.1"})
    long = " ".join(f"blocks{i}" for i in range(100))        # a prompt no other test caches
    body = {"model": "test-model", "max_tokens": 1, "messages": [{"role": "user", "content": long}]}
    counted = base.post("/v1/messages/count_tokens", json={"model": "test-model", "messages": body["messages"]})
    assert counted.json()["input_tokens"] == 105
    cold = post(base, body).json()["usage"]
    assert cold == {"input_tokens": 9, "cache_creation_input_tokens": 96, "cache_read_input_tokens": 0,
                    "output_tokens": 1}
    evs = events(post(base, {**body, "stream": True}))
    start = [d for n, d in evs if n == "message_start"][0]["message"]["usage"]
    delta = [d for n, d in evs if n == "message_delta"][0]["usage"]
    warm = {"input_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 96}
    assert start == {**warm, "output_tokens": 0} and delta == {**warm, "output_tokens": 1}


def test_thinking_and_document_history_accepted(echo_api):
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                                  {"type": "text", "text": "Hello"}]},
                {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "doc"}},
                                             {"type": "text", "text": U}]}]
    msg = client(echo_api).messages.create(model="test-model", max_tokens=50, messages=messages)
    assert msg.content[0].text == U


def test_queue_full_is_anthropic_rate_limit(app_client):
    base = app_client("--time-to-first-token", "500ms", "--max-num-seqs", "1", "--max-waiting-queue-length", "1")
    body = {"model": "test-model", "max_tokens": 5, "messages": [{"role": "user", "content": U}]}
    futs = []
    for i in range(4):               # concurrent in-process requests: greenlets on the engine's hub
        futs.append(gevent.spawn(post, base, {**body, "stream": i % 2 == 1}))
        gevent.sleep(0.05)           # all four arrive within 0.15 s, while the first runs 0.5 s
    results = [f.get() for f in futs]
    codes = [r.status_code for r in results]
    assert codes[:2] == [200, 200] and codes[2:] == [429, 429]
    for r in results[2:]:
        _assert_anthropic_error(r, 429, "rate_limit_error", "waiting requests queue is full")


def test_a_tool_argument_past_64_bits_is_served(api):
    """A schema's ``minimum`` past 2**64 makes a generated integer orjson cannot encode; the body
    falls back to the standard library's JSON (vLLM's pydantic has no such bound), not a 500."""
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "minimum": 2 ** 64}}}
    r = post(api, {"model": "test-model", "max_tokens": 20, "messages": [{"role": "user", "content": U}],
                   "tools": [{"name": "f", "input_schema": schema}], "tool_choice": {"type": "any"}})
    assert r.status_code == 200, r.text
    (block,) = [b for b in r.json()["content"] if b["type"] == "tool_use"]
    assert isinstance(block["input"]["a"], int) and block["input"]["a"] >= 2 ** 64


# ---- the same events whatever the timing path (issue 32: schedules emitted by the server's hub) ----

MESSAGE_BODIES = {
    "text": ({"max_tokens": 12, "ignore_eos": True}, ()),
    "thinking": ({"max_tokens": 40, "thinking": {"type": "adaptive"}},
                 ("--reasoning-parser", "qwen3")),
    "tool use": ({"max_tokens": 60, "tools": [WEATHER], "tool_choice": {"type": "any"}}, ()),
    "stream interval": ({"max_tokens": 12, "ignore_eos": True}, ("--stream-interval", "3")),
}


@pytest.mark.parametrize("name", MESSAGE_BODIES)
def test_message_stream_events_do_not_depend_on_the_timing_path(app_client, name):
    """A stream with a constant inter-token latency hands its tokens to the hub as a schedule (the
    block-opening and -closing events rendered per token, in order): the events are those of the
    stream that waits for nothing, and of one waiting per token."""
    extra, flags = MESSAGE_BODIES[name]
    seed = str(11 + list(MESSAGE_BODIES).index(name))     # an app of its own: a drawn ITL shares the seeded draws
    runs = {}
    for timing, timing_flags in TIMING_PATHS.items():
        r = post(app_client("--seed", seed, *flags, *timing_flags),
                 {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": U}], **extra})
        assert r.status_code == 200, r.text
        evs = events(r)
        for _, data in evs:
            if isinstance(data, dict) and data.get("type") == "message_start":
                data["message"].pop("id")
            block = data.get("content_block") if isinstance(data, dict) else None
            if block and block.get("type") == "tool_use":
                block.pop("id")
        runs[timing] = evs
    assert runs["schedule from the first token"] == runs["all at once"]
    assert runs["deadline per token"] == runs["all at once"]
    assert [e for e, _ in runs["all at once"]][-2:] == ["message_delta", "message_stop"]
    assert sum(e == "content_block_delta" for e, _ in runs["all at once"]) >= (4 if "ignore_eos" in extra else 2)


# ---- the prompt a chat template sees (vLLM 0.34's _convert_messages and chat_message.py) -----------

_SHOW = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
         "{% if m['reasoning_content'] is defined %}[r:{{ m['reasoning_content'] }}]{% endif %}"
         "{% for c in m['tool_calls'] or [] %}[c:{{ c['function']['arguments'] | tojson }}]{% endfor %}{% endfor %}"
         "{% for t in tools or [] %}[t:{{ t['function']['parameters'] | tojson }}]{% endfor %}")


def test_template_sees_vllms_conversation(app_client, hub):
    """An assistant's thinking blocks are its ``reasoning`` (``reasoning_content`` in the
    template), a tool_use input keeps the client's key order, a tool_result's text items are
    joined by newlines, and a tool schema without ``type`` gets ``"type": "object"``: the token
    ids of /v1/messages/render are those of the text vLLM's template renders."""
    import os

    from support.tokenizer_hub import MODEL
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", _SHOW, model=MODEL)
    body = {"model": MODEL, "tools": [{"name": "f", "input_schema": {"properties": {}}}], "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]}]}
    # the render reads an AnthropicMessagesRequest (scale_out/render/api_router.py): max_tokens is required
    r = c.post("/v1/messages/render", json={**body, "max_tokens": 4})
    assert r.status_code == 200, r.text
    text = '<user>q<assistant>[r:hm][c:{"b": 1, "a": 2}]<tool>x\ny[t:{"properties": {}, "type": "object"}]'
    want = c.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert r.json()["token_ids"] == want


_GUARDED = ("{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
            "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
            "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")


@pytest.mark.parametrize("template, text", [
    # a template that renders a system message after a user one: each stays in its place
    (_SHOW, "<system>S<user>a<system>I<user>b"),
    # Qwen's loop.first guard: merged into the leading system prompt (vLLM's probe raises)
    (_GUARDED, "<system>SI<user>a<user>b"),
])
def test_inline_system_messages_as_the_template_takes_them(app_client, hub, template, text):
    """vLLM 0.34's _should_merge_inline_system (anthropic/serving.py): inline system messages are
    merged into the leading system prompt only when the chat template cannot render a system
    message after a user one."""
    import os

    from support.tokenizer_hub import MODEL
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", template, model=MODEL)
    body = {"model": MODEL, "system": "S", "messages": [
        {"role": "user", "content": "a"}, {"role": "system", "content": "I"}, {"role": "user", "content": "b"}]}
    # the render reads an AnthropicMessagesRequest (scale_out/render/api_router.py): max_tokens is required
    r = c.post("/v1/messages/render", json={**body, "max_tokens": 4})
    assert r.status_code == 200, r.text
    want = c.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert r.json()["token_ids"] == want
    assert c.post("/v1/messages/count_tokens", json=body).json()["input_tokens"] == len(want)


@pytest.mark.parametrize("extra,message", [
    ('"vllm_xargs": {"a": 18446744073709551616}', "extra_args integers must be between -2**63 and 2**64 - 1."),
    ('"kv_transfer_params": {"a": [-9223372036854775809]}', "extra_args integers must be between"),
    ('"ec_transfer_params": {"a": 18446744073709551616}', "extra_args integers must be between"),
    ('"vllm_xargs": {"a": {"b": 1}}', "'loc': 'body.vllm_xargs.a'"),
])
def test_extra_args_are_checked_as_chat_checks_them(api, extra, message):
    """vLLM 0.34's AnthropicMessagesRequest carries vllm_xargs (typed as chat's),
    kv_transfer_params and ec_transfer_params into the chat request it converts to, whose
    to_sampling_params refuses an integer MessagePack cannot carry: a 400 in Anthropic's envelope
    (the simulator did not read vllm_xargs nor ec_transfer_params and served them)."""
    body = '{"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}], %s}' % extra
    r = api.post("/v1/messages", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert message in r.json()["error"]["message"]
    ok = '{"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}], ' \
         '"vllm_xargs": {"a": 18446744073709551615, "b": [1, "x", 2.5]}, "ec_transfer_params": {"c": 1}}'
    assert api.post("/v1/messages", content=ok.encode(), headers={"content-type": "application/json"}).status_code == 200
