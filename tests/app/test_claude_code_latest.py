"""Claude Code 2.1.332's recorded requests (issue 21, the CLI's release after the one the first
fixtures came from): its first turn (``thinking: {"type": "adaptive", "display": "omitted"}``,
the inline ``system`` message in blocks, a ``defer_loading`` tool and ``ToolSearch``) and a
later turn of the same session (a billing header with ``cc_workload=cron``, the inline system
message as a string, the simulator's own ``thinking`` blocks with their signatures, ``tool_use``
and ``tool_result`` blocks) answered 200, streamed and not, with and without a reasoning parser,
every event valid for the anthropic SDK and every tool call valid for its tool's schema."""
from __future__ import annotations

import json

import pytest

from support import named_events
from support.agentic import CLAUDE_HEADERS, LONG, check_anthropic_stream, fixture

FIRST = "claude_code_2_1_332_first_turn.json"
LATER = "claude_code_2_1_332_later_turn.json"


def test_the_fixtures_carry_the_new_shapes():
    first, later = fixture(FIRST), fixture(LATER)
    assert first["thinking"] == {"type": "adaptive", "display": "omitted"}
    assert first["messages"][1]["role"] == "system" and isinstance(first["messages"][1]["content"], list)
    assert [t["name"] for t in first["tools"] if t.get("defer_loading")] == ["DeferredToolPlaceholder"]
    kinds = [b["type"] for m in later["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert {"thinking", "tool_use", "tool_result"} <= set(kinds)
    assert "cc_workload=cron" in later["system"][0]["text"]


@pytest.mark.parametrize("flags", [LONG, LONG + ("--reasoning-parser", "qwen3")], ids=["plain", "qwen3"])
@pytest.mark.parametrize("name", [FIRST, LATER], ids=["first_turn", "later_turn"])
def test_replayed_streamed(app_client, name, flags):
    body = fixture(name)
    r = app_client(*flags).post("/v1/messages?beta=true", json=body, headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    message = check_anthropic_stream(r.text, body)
    kinds = [b["type"] for b in message["content"]]
    assert ("thinking" in kinds) == ("--reasoning-parser" in flags)
    thinking = [b for b in message["content"] if b["type"] == "thinking"]
    assert all(b["thinking"] for b in thinking)                   # display is not read, as in vLLM
    signatures = [d["delta"]["signature"] for n, d in named_events(r.text)
                  if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"]
    assert len(signatures) == len(thinking) and all(signatures)


@pytest.mark.parametrize("name", [FIRST, LATER], ids=["first_turn", "later_turn"])
def test_replayed_not_streamed_and_counted(app_client, name):
    api = app_client(*LONG)
    body = {**fixture(name), "stream": False}
    counted = api.post("/v1/messages/count_tokens?beta=true", headers=CLAUDE_HEADERS,
                       json={k: body[k] for k in ("model", "messages", "system", "tools", "thinking")})
    assert counted.status_code == 200, counted.text
    r = api.post("/v1/messages?beta=true", json=body, headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["type"] == "message" and msg["stop_reason"] in ("end_turn", "max_tokens", "tool_use")
    usage = msg["usage"]
    assert usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) == counted.json()["input_tokens"]
    for block in msg["content"]:
        if block["type"] == "tool_use":
            json.dumps(block["input"])
