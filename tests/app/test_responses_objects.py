"""The Responses API's response object and output items field for field, as vLLM 0.34 dumps them.

vLLM answers ``ResponsesResponse.model_dump(mode="json", by_alias=True)`` (responses/
api_router.py l. 75, 101) and streams events holding it (l. 34-44): every field of
``ResponsesResponse`` (responses/protocol.py l. 905-986, built by ``from_request`` l. 1001-1066) in
its order, null where vLLM has nothing (``metrics`` left out while null); the output items are
the openai SDK's models (``ResponseOutputMessage``, ``ResponseOutputText``,
``ResponseReasoningItem``, ``ResponseFunctionToolCall``) built by responses/utils.py l. 155-236 and
streaming_events.py l. 839-1220.  The project's specification keeps ``text.format`` present and
an ``output_text`` part's ``logprobs`` only with the logprobs ``include``.
"""
from __future__ import annotations

import openai.types.responses as sdk
import pytest

from support import named_events

PATH = "/v1/responses"
RESPONSE = ["id", "created_at", "incomplete_details", "instructions", "metadata", "model", "object", "output",
            "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p", "background", "max_output_tokens",
            "max_tool_calls", "previous_response_id", "prompt", "prompt_cache_options", "prompt_cache_key",
            "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "status", "text",
            "top_logprobs", "truncation", "usage", "user", "presence_penalty", "frequency_penalty",
            "kv_transfer_params", "ec_transfer_params", "input_messages", "output_messages"]
MESSAGE = ["id", "content", "role", "status", "type", "phase"]
TEXT_PART = ["annotations", "text", "type"]
REASONING = ["id", "summary", "type", "content", "encrypted_content", "status"]
CALL = ["arguments", "call_id", "name", "type", "id", "async", "caller", "namespace", "status"]
USAGE = ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"]
IN_DETAILS = ["cached_tokens", "cache_write_tokens", "input_tokens_per_turn", "cached_tokens_per_turn"]
OUT_DETAILS = ["reasoning_tokens", "tool_output_tokens", "output_tokens_per_turn", "tool_output_tokens_per_turn"]
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = {"model": "test-model", "input": "This is a test.", "max_output_tokens": 8}


def keys(d: dict) -> list:
    return list(d)


def body(c, **kw) -> dict:
    r = c.post(PATH, json={**ASK, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def stream(c, **kw) -> dict:
    r = c.post(PATH, json={**ASK, "stream": True, **kw})
    assert r.status_code == 200, r.text
    out: dict = {}
    for name, d in named_events(r.text):
        out.setdefault(name, []).append(d)
    return out


def check_response(out: dict, status: str | None = None) -> None:
    """Every field in vLLM's order, and the SDK's ``Response`` model still reads it."""
    assert keys(out) == RESPONSE and out["object"] == "response"
    assert out["status"] in (("completed", "incomplete") if status is None else (status,))
    sdk.Response.model_validate(out)
    if out["usage"] is not None:
        u = out["usage"]
        assert keys(u) == USAGE and keys(u["input_tokens_details"]) == IN_DETAILS
        assert keys(u["output_tokens_details"]) == OUT_DETAILS
        assert u["input_tokens_details"]["input_tokens_per_turn"] == [] == u["output_tokens_details"][
            "tool_output_tokens_per_turn"] and u["output_tokens_details"]["tool_output_tokens"] == 0


def test_body_every_field_in_order(echo_api):
    out = body(echo_api)
    check_response(out, "completed")
    room = echo_api.sim.config.max_model_len - out["usage"]["input_tokens"]
    # from_request: sampling parameters resolved (to_sampling_params l. 578-615), the rest echoed
    assert {k: out[k] for k in ("metadata", "temperature", "top_p", "max_output_tokens", "top_logprobs",
                                "service_tier", "truncation", "tool_choice", "tools", "reasoning", "background",
                                "presence_penalty", "frequency_penalty", "kv_transfer_params", "prompt",
                                "input_messages", "output_messages")} == {
        "metadata": None, "temperature": 1.0, "top_p": 1.0, "max_output_tokens": min(8, room), "top_logprobs": None,
        "service_tier": "auto", "truncation": "disabled", "tool_choice": "none", "tools": [], "reasoning": None,
        "background": False, "presence_penalty": 0.0, "frequency_penalty": 0.0, "kv_transfer_params": None,
        "prompt": None, "input_messages": None, "output_messages": None}
    assert out["text"] == {"format": {"type": "text"}, "verbosity": None}         # the specification's
    (msg,) = out["output"]
    assert keys(msg) == MESSAGE and msg["phase"] is None and msg["status"] == "completed"
    assert keys(msg["content"][0]) == TEXT_PART          # no logprobs without include (specification)


def test_body_echoes_the_request_settings(echo_api):
    out = body(echo_api, max_output_tokens=None, temperature=0, top_p=0.5, presence_penalty=1, metadata={"a": "b"},
               service_tier="default", safety_identifier="u1", prompt_cache_key="k", reasoning={"effort": "low"},
               text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}})
    check_response(out)
    assert (out["temperature"], out["top_p"], out["presence_penalty"]) == (0.0, 0.5, 1.0)
    assert out["max_output_tokens"] == echo_api.sim.config.max_model_len - out["usage"]["input_tokens"]
    assert (out["metadata"], out["service_tier"], out["safety_identifier"], out["prompt_cache_key"]) == \
        ({"a": "b"}, "default", "u1", "k")
    assert keys(out["reasoning"]) == ["context", "effort", "generate_summary", "mode", "summary"]
    assert out["reasoning"]["effort"] == "low"
    assert keys(out["text"]) == ["format", "verbosity"]
    assert keys(out["text"]["format"]) == ["name", "schema", "type", "description", "strict"]


def test_logprobs_part_and_top_logprobs(echo_api):
    out = body(echo_api, include=["message.output_text.logprobs"], top_logprobs=2)
    check_response(out)
    assert out["top_logprobs"] == 2
    part = out["output"][0]["content"][0]
    assert keys(part) == [*TEXT_PART, "logprobs"]
    entry = part["logprobs"][0]
    assert keys(entry) == ["token", "bytes", "logprob", "top_logprobs"]
    assert [keys(t) for t in entry["top_logprobs"]] == [["token", "bytes", "logprob"]] * 2
    assert body(echo_api, include=["message.output_text.logprobs"])["top_logprobs"] == 0


def test_stored_get_is_the_body(app_client):
    c = app_client(env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    out = body(c)
    got = c.get(f"{PATH}/{out['id']}").json()
    assert got == out and keys(got) == RESPONSE
    queued = body(c, background=True)
    check_response(queued, "queued")
    assert (queued["output"], queued["usage"], queued["background"]) == ([], None, True)


def test_stream_response_objects_and_message_items(api):
    ev = stream(api)
    (created,), (progress,) = ev["response.created"], ev["response.in_progress"]
    check_response(created["response"], "in_progress")
    assert created["response"] == progress["response"] and created["response"]["usage"] is None
    final = (ev.get("response.completed") or ev["response.incomplete"])[0]["response"]
    check_response(final, final["status"])
    (added,), (done,) = ev["response.output_item.added"], ev["response.output_item.done"]
    assert keys(added["item"]) == MESSAGE and added["item"]["content"] == [] and added["item"]["status"] == "in_progress"
    assert keys(done["item"]) == MESSAGE and keys(done["item"]["content"][0]) == [*TEXT_PART, "logprobs"]
    assert keys(final["output"][0]) == MESSAGE and final["output"][0]["id"] == done["item"]["id"]


@pytest.fixture(scope="module")
def qwen(app_client):
    return app_client("--reasoning-parser", "qwen3", "--seed", "3")


def test_reasoning_items(qwen):
    """A body built whole: status null (utils.py l. 175-183); streamed: opened with content null,
    in_progress (streaming_events.py l. 973-978), closed completed with its part (l. 1037-1044),
    and the final response reuses the streamed items (serving.py l. 861-864)."""
    kw = {"max_output_tokens": 20, "ignore_eos": True}
    out = body(qwen, **kw)
    check_response(out, "incomplete")
    item, msg = out["output"]
    assert keys(item) == REASONING and item["status"] is None and item["encrypted_content"] is None
    assert keys(item["content"][0]) == ["text", "type"] and keys(msg) == MESSAGE
    ev = stream(qwen, **kw)
    added = ev["response.output_item.added"][0]["item"]
    assert keys(added) == REASONING and (added["content"], added["status"]) == (None, "in_progress")
    done = ev["response.output_item.done"][0]["item"]
    assert keys(done) == REASONING and done["status"] == "completed" and done["content"]
    final = ev["response.incomplete"][0]["response"]
    check_response(final, "incomplete")
    assert final["output"][0] == done


def test_function_call_items_and_tools_echo(api):
    out = body(api, tools=[WEATHER], max_output_tokens=200)
    check_response(out, "completed")
    (call,) = out["output"]
    assert keys(call) == CALL and (call["namespace"], call["async"], call["caller"]) == (None, None, None)
    assert call["status"] == "completed" and call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert out["tool_choice"] == "auto"
    (tool,) = out["tools"]
    assert keys(tool) == ["name", "parameters", "strict", "type", "allowed_callers", "async", "defer_loading",
                          "description", "output_schema"]
    named = body(api, tools=[WEATHER], max_output_tokens=200, tool_choice={"type": "function", "name": "get_weather"})
    assert named["tool_choice"] == {"name": "get_weather", "type": "function"}
    ev = stream(api, tools=[WEATHER], max_output_tokens=200)
    added, done = ev["response.output_item.added"][0]["item"], ev["response.output_item.done"][0]["item"]
    assert keys(added) == CALL == keys(done) and (added["status"], added["arguments"]) == ("in_progress", "")
    final = ev["response.completed"][0]["response"]
    check_response(final)
    assert final["output"] == [done]


def test_per_request_metrics_after_user(app_client):
    """``metrics`` is dumped only when set (protocol.py l. 939-941: exclude_if None)."""
    c = app_client("--enable-per-request-metrics")
    out = body(c)
    assert keys(out) == [*RESPONSE[:RESPONSE.index("user") + 1], "metrics", *RESPONSE[RESPONSE.index("user") + 1:]]
    assert out["metrics"]["time_to_first_token_ms"] >= 0
    ev = stream(c)          # (a random answer longer than max_output_tokens ends "incomplete")
    final = (ev.get("response.completed") or ev["response.incomplete"])[0]["response"]
    assert "metrics" in final
