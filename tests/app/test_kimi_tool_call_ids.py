"""A Kimi model's tool calls are numbered ``functions.<name>:<i>``, as vLLM 0.34 numbers them
(``renderers/chat_utils/tool_call.py``: ``make_tool_call_id`` for the model types of
``_KIMI_MODEL_TYPES``; ``parser/utils.py`` counts the history's calls first), on chat,
``/v1/messages`` and ``/v1/responses``; every other model keeps its random ids.  In-process tier;
the model type is the one ``apply_model_defaults`` reads from the served model's ``config.json``
(the unit test at the end), set here on the app's config."""
from __future__ import annotations

import pytest

from support import sse_events

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "weather in Paris?"}]
HISTORY = USER + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "functions.get_time:1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
    {"role": "tool", "tool_call_id": "functions.get_time:1", "content": "noon"},
    {"role": "user", "content": "and tomorrow?"}]


@pytest.fixture(scope="module")
def kimi(app_client):
    # --tool-call-extra-call-probability 100: "required" draws a call per tool (two here)
    c = app_client("--tool-call-extra-call-probability", "100", "--seed", "7")
    c.sim.config.model_types = ("kimi_k2",)
    return c


def chat(c, messages, **extra):
    body = {"model": "test-model", "messages": messages, "tools": [WEATHER, TIME], "tool_choice": "required", **extra}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r


def test_chat_ids_count_from_zero_without_history(kimi):
    calls = chat(kimi, USER).json()["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == [f"functions.{c['function']['name']}:{i}" for i, c in enumerate(calls)]
    assert len(calls) == 2


def test_chat_ids_count_on_from_the_historys_calls(kimi):
    calls = chat(kimi, HISTORY).json()["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == [f"functions.{c['function']['name']}:{i}" for i, c in enumerate(calls, 2)]


def test_a_named_tool_choice_is_numbered_too(kimi):
    body = {"model": "test-model", "messages": HISTORY, "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    calls = kimi.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["functions.get_time:2"]


def test_streamed_ids_match(kimi):
    r = chat(kimi, HISTORY, stream=True)
    deltas = [tc for e in sse_events(r.text) if isinstance(e, dict)
              for ch in e["choices"] for tc in ch["delta"].get("tool_calls") or ()]
    ids = [tc["id"] for tc in deltas if tc.get("id")]
    names = [tc["function"]["name"] for tc in deltas if tc.get("function", {}).get("name")]
    assert ids == [f"functions.{n}:{i}" for i, n in enumerate(names, 2)] and len(ids) == 2


def test_messages_tool_use_ids_are_the_chat_ids(kimi):
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "functions.get_time:0", "name": "get_time",
                                                  "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "functions.get_time:0",
                                             "content": "noon"}]}]
    body = {"model": "test-model", "max_tokens": 50, "messages": history, "tool_choice": {"type": "any"},
            "tools": [{"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]}
    r = kimi.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    blocks = [b for b in r.json()["content"] if b["type"] == "tool_use"]
    assert blocks and [b["id"] for b in blocks] == [f"functions.get_time:{i}" for i in range(1, len(blocks) + 1)]


def test_responses_call_ids_are_the_chat_ids(kimi):
    # (a function_call_output in the input makes the seeds' answer text: the call before it only)
    inp = [{"role": "user", "content": "time?"},
           {"type": "function_call", "call_id": "functions.get_time:0", "name": "get_time", "arguments": "{}"},
           {"role": "user", "content": "and again?"}]
    body = {"model": "test-model", "input": inp, "tool_choice": "required",
            "tools": [{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]}
    r = kimi.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    items = [o for o in r.json()["output"] if o["type"] == "function_call"]
    assert items and items[0]["call_id"] == "functions.get_time:1" and items[0]["id"].startswith("fc_")


def test_other_models_keep_random_ids(api):
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": HISTORY, "tools": [WEATHER],
                                               "tool_choice": "required"})
    ids = [c["id"] for c in r.json()["choices"][0]["message"]["tool_calls"]]
    assert ids and all(i.startswith("chatcmpl-tool-") and len(i) == len("chatcmpl-tool-") + 32 for i in ids)


def test_model_types_read_from_config_json():
    from generation.structured.tool_calls import count_tool_calls, responses_history_tool_calls
    from generation.tokenization.model_config import model_types, preset_config
    assert model_types(preset_config("moonshotai/Kimi-K2-Instruct")[1]) == ("kimi_k2",)
    assert model_types({"model_type": "kimi_k25", "text_config": {"model_type": "deepseek_v3"}}) == \
        ("kimi_k25", "deepseek_v3")
    assert model_types({}) == ()
    # vLLM's count_tool_calls: an object or a string is one call, a list its length
    assert [count_tool_calls(x) for x in (None, {}, "x", [1, 2, 3], ())] == [0, 1, 1, 3, 0]
    assert responses_history_tool_calls("hi") == 0
    assert responses_history_tool_calls([{"type": "function_call"}, {"type": "custom_tool_call"},
                                         {"role": "assistant", "tool_calls": [{}, {}]}]) == 3
