"""Claude Code 2.1.332's recorded first and later turns (tests/fixtures) replayed against a real
``python app.py --max-model-len 200000 --reasoning-parser qwen3``, streamed: 200, every event
valid for the anthropic SDK, every tool call valid for its tool's schema, thinking first."""
from __future__ import annotations

import pytest

from support.agentic import CLAUDE_HEADERS, LONG, check_anthropic_stream, fixture


@pytest.mark.parametrize("name", ["claude_code_2_1_332_first_turn.json", "claude_code_2_1_332_later_turn.json"],
                         ids=["first_turn", "later_turn"])
def test_claude_code_2_1_332_replayed(live_client, name):
    body = fixture(name)
    r = live_client(*LONG, "--reasoning-parser", "qwen3").post("/v1/messages?beta=true", json=body,
                                                               headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    message = check_anthropic_stream(r.text, body)
    assert message["content"][0]["type"] == "thinking"
