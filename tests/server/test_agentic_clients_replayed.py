"""Recorded Claude Code and Codex requests replayed against a real server (python app.py --max-model-len 200000), streamed, each event checked against the SDKs' own types."""
from __future__ import annotations
import pytest
from support.agentic import (LONG, CLAUDE_HEADERS, CODEX_HEADERS, claude_first, claude_tool_turn, codex_first, codex_tool_turn, check_anthropic_stream, check_responses_stream)




@pytest.mark.parametrize("make_body", [claude_first, claude_tool_turn], ids=["first_turn", "tool_turn"])
def test_claude_code_request_replayed(live_client, make_body):
    body = make_body()
    c = live_client(*LONG)
    r = c.post("/v1/messages?beta=true", json=body, headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    check_anthropic_stream(r.text, body)


def test_claude_code_request_not_streamed(live_client):
    body = {**claude_first(), "stream": False}
    r = live_client(*LONG).post("/v1/messages?beta=true", json=body, headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["type"] == "message" and msg["stop_reason"] in ("end_turn", "max_tokens", "tool_use")


def test_codex_first_turn_replayed(live_client):
    body = codex_first()
    r = live_client(*LONG).post("/v1/responses", json=body, headers=CODEX_HEADERS)
    assert r.status_code == 200, r.text
    final = check_responses_stream(r.text, body)
    # seeds' tool turn: exactly one call, to a function tool (namespaced ones included)
    assert [i["type"] for i in final["output"]] == ["function_call"]


def test_codex_tool_turn_replayed(live_client):
    body = codex_tool_turn()
    r = live_client(*LONG).post("/v1/responses", json=body, headers=CODEX_HEADERS)
    assert r.status_code == 200, r.text
    final = check_responses_stream(r.text, body)
    assert [i["type"] for i in final["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"]
