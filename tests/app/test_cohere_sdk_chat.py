"""``/cohere/v2/chat`` through the real client, the ``cohere`` SDK's ``ClientV2`` (``chat``,
``chat_stream``), against the in-process app (an httpx WSGI transport)."""
from __future__ import annotations

import json

import httpx
import pytest

cohere = pytest.importorskip("cohere")

ON = {"VLLM_ENABLE_COHERE_API": "1"}
HI = [{"role": "user", "content": "Hello there friend"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def client(api, key: str = "x"):
    return cohere.ClientV2(api_key=key, base_url=api.url + "/cohere",
                           httpx_client=httpx.Client(transport=httpx.WSGITransport(app=api.app)))


@pytest.fixture(scope="module")
def co(app_client):
    return client(app_client("--mode", "echo", env=ON))


def test_chat(co):
    r = co.chat(model="test-model", messages=HI)
    assert r.id.startswith("chatcmpl-") and r.finish_reason == "COMPLETE"
    assert [(c.type, c.text) for c in r.message.content] == [("text", "Hello there friend")]
    assert (r.usage.tokens.input_tokens, r.usage.tokens.output_tokens) == (8, 3)
    assert (r.usage.billed_units.input_tokens, r.usage.billed_units.output_tokens) == (8, 3)
    r = co.chat(model="test-model", messages=HI, stop_sequences=["there"], logprobs=True)
    assert (r.finish_reason, r.message.content[0].text) == ("STOP_SEQUENCE", "Hello ")
    # the token that completes the stop string is generated and counted (vLLM's detokenizer),
    # its logprob entry with the whole token's text
    assert [(lp.text, len(lp.token_ids)) for lp in r.logprobs] == [("Hello ", 1), ("there ", 1)]


def test_chat_stream(co):
    events = list(co.chat_stream(model="test-model", messages=HI))
    assert [e.type for e in events] == ["message-start", "content-start", "content-delta", "content-delta",
                                        "content-delta", "content-end", "message-end"]
    text = "".join(e.delta.message.content.text for e in events if e.type == "content-delta")
    end = events[-1]
    assert (text, end.id, end.delta.finish_reason) == ("Hello there friend", events[0].id, "COMPLETE")
    assert (end.delta.usage.tokens.input_tokens, end.delta.usage.tokens.output_tokens) == (8, 3)


def test_tool_calls_and_thinking(app_client):
    co = client(app_client("--reasoning-parser", "qwen3", env=ON))
    r = co.chat(model="test-model", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
                tool_choice="REQUIRED", max_tokens=80)
    assert r.finish_reason == "TOOL_CALL" and [c.type for c in r.message.content] == ["thinking"]
    (tc,) = r.message.tool_calls
    assert tc.function.name == "get_weather" and list(json.loads(tc.function.arguments)) == ["city"]
    # the answer goes back as history: an assistant turn with its call, then the tool's result
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "tool_calls": [tc.model_dump(exclude_none=True)],
                "content": [{"type": "thinking", "thinking": r.message.content[0].thinking}]},
               {"role": "tool", "tool_call_id": tc.id,
                "content": [{"type": "document", "document": {"data": {"temperature": "20C"}}}]}]
    events = list(co.chat_stream(model="test-model", messages=history, tools=[WEATHER], tool_choice="NONE",
                                 max_tokens=80))
    kinds = [e.type for e in events]
    assert kinds[0] == "message-start" and kinds[-1] == "message-end" and "tool-call-start" not in kinds
    starts = [e.delta.message.content.type for e in events if e.type == "content-start"]
    assert starts == ["thinking", "text"]


def test_errors_are_the_sdks_exceptions(co):
    with pytest.raises(cohere.BadRequestError) as e:
        co.chat(model="test-model", messages=HI, max_tokens=-1)
    assert e.value.body == {"message": "max_tokens must be non-negative (parameter=max_tokens, value=-1)"}
    with pytest.raises(cohere.NotFoundError) as e:
        co.chat(model="nope", messages=HI)
    assert e.value.body == {"message": "The model `nope` does not exist."}
    with pytest.raises(cohere.BadRequestError):
        list(co.chat_stream(model="test-model", messages=[]))


def test_api_key(app_client):
    api = app_client("--mode", "echo", "--api-key", "k1", env=ON)
    assert client(api, "k1").chat(model="test-model", messages=HI).finish_reason == "COMPLETE"
    with pytest.raises(cohere.UnauthorizedError) as e:
        client(api, "wrong").chat(model="test-model", messages=HI)
    assert e.value.body == {"error": "Unauthorized"}            # vLLM's, which its Cohere envelope leaves alone
