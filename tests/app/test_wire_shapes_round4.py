"""Request shapes vLLM 0.34's pydantic models refuse and the simulator let through (a hostile
client's findings): a Responses ``item_reference`` without its ``id``, a ``function_call`` with a
``status`` outside the SDK's three, an ``allowed_tools`` tool choice without ``mode`` or with
``tools`` that is not a list of objects, and an Anthropic content block whose string fields are
not strings (``thinking: 5``).  Each is a 400 naming the field, in the API's envelope."""
from __future__ import annotations

import pytest

H = {"anthropic-version": "2023-06-01"}
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
HI = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("body,param", [
    ({"input": [{"type": "item_reference"}, HI]}, "input[0].id"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "status": "bogus"}, HI]},
     "input[0].status"),
    ({"input": "hi", "tools": TOOLS, "tool_choice": {"type": "allowed_tools", "tools": [{"type": "function"}]}},
     "tool_choice.mode"),
    ({"input": "hi", "tools": TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": 5}},
     "tool_choice.tools"),
])
def test_responses_shapes(api, body, param):
    r = api.post("/v1/responses", json={"model": "test-model", **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_responses_shapes_that_stay_valid(api):
    for body in ({"input": [{"type": "item_reference", "id": "msg_1"}, HI]},
                 {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
                             "status": "completed"}, HI]},
                 {"input": "hi", "tools": TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "required",
                                                                 "tools": [{"type": "function", "name": "f"}]}}):
        r = api.post("/v1/responses", json={"model": "test-model", **body})
        assert r.status_code == 200, (body, r.text)


@pytest.mark.parametrize("block,key", [({"type": "thinking", "thinking": 5, "signature": "s"}, "thinking"),
                                       ({"type": "thinking", "thinking": "t", "signature": 1}, "signature"),
                                       ({"type": "redacted_thinking", "data": {}}, "data"),
                                       ({"type": "text", "text": "t", "id": 3}, "id")])
def test_messages_block_strings(api, block, key):
    body = {"model": "test-model", "max_tokens": 3,
            "messages": [HI, {"role": "assistant", "content": [block]}, {"role": "user", "content": "go"}]}
    r = api.post("/v1/messages", json=body, headers=H)
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert r.json()["error"]["message"] == f"messages[1].content[0].{key}: Must be a string."

