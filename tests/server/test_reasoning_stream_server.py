"""Reasoning output on a real server: a stream whose hidden reasoning tokens send no chunk still ends whole."""
from __future__ import annotations
from support import named_events, sse_events



CHAT = "/v1/chat/completions"


MSGS = [{"role": "user", "content": "Why is the sky blue?"}]


QWEN = ("--reasoning-parser", "qwen3", "--seed", "3")


def test_real_server_stream_with_hidden_tokens(live_client):
    api = live_client(*QWEN, "--inter-token-latency", "2ms")
    for extra in ({}, {"include_reasoning": False}):
        r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True,
                                 "stream": True, "stream_options": {"include_usage": True}, **extra})
        assert r.status_code == 200
        events = sse_events(r.text)
        assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 20
        deltas = [e["choices"][0]["delta"] for e in events[:-2]]
        assert sum("reasoning" in d for d in deltas) == (0 if extra else 8)
        assert sum(bool(d.get("content")) for d in deltas) == 10
    r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 20, "ignore_eos": True, "messages": MSGS,
                                       "stream": True})
    names = [n for n, _ in named_events(r.text)]
    assert names[-1] == "message_stop" and names.count("content_block_delta") == 19     # 8 + signature + 10
