"""Reasoning switches on streams (issue 21 audit): every switch of chat, Anthropic Messages and
Responses has the same effect streamed as in the JSON answer, the streamed usage counts the
reasoning, the reasoning is seeded, and the metrics count hidden reasoning tokens.

Lengths as in test_reasoning_output.py: ``ignore_eos`` with 20 tokens, qwen3's markers one token
each, ``--reasoning-fraction`` 0.5: 8 reasoning tokens (``low`` 3, ``high`` 13)."""
from __future__ import annotations

import pytest

from support import metric, named_events, scrape, sse_events

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Why is the sky blue?"}]
QWEN = ("--reasoning-parser", "qwen3", "--seed", "3")


@pytest.fixture(scope="module")
def qwen(app_client):
    return app_client(*QWEN)


def chat_stream(api, **kw):
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, **kw}
    r = api.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    kinds = [k for d in deltas for k in d if k in ("reasoning", "content") and d[k]]
    return kinds, events[-2]["usage"]


@pytest.mark.parametrize("kw,reasoning", [
    ({"chat_template_kwargs": {"enable_thinking": False}}, 0),
    ({"reasoning_effort": "low"}, 3),
    ({"reasoning_effort": "high"}, 13),
    ({"reasoning_effort": "none"}, 0),
    ({"thinking_token_budget": 3}, 3),
    ({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}}, 0),
])
def test_chat_switches_streamed(qwen, kw, reasoning):
    kinds, usage = chat_stream(qwen, **kw)
    markers = 2 if reasoning else 0
    assert kinds == ["reasoning"] * reasoning + ["content"] * (20 - reasoning - markers)
    assert usage["completion_tokens"] == 20
    assert usage["completion_tokens_details"] == {"reasoning_tokens": reasoning}


def message_stream(api, **kw):
    body = {"model": "test-model", "max_tokens": 20, "ignore_eos": True, "messages": MSGS, "stream": True, **kw}
    r = api.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    return named_events(r.text)


@pytest.mark.parametrize("kw,thinking", [
    ({"thinking": {"type": "disabled"}}, 0),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 3000}, 1024),   # 40% would be 1,200 (context 8,192)
    ({"thinking": {"type": "adaptive"}}, 8),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, 13),
    ({"output_config": {"effort": "low"}}, 3),
])
def test_anthropic_switches_streamed(qwen, app_client, kw, thinking):
    api = app_client(*QWEN, "--max-model-len", "8192") if kw.get("max_tokens", 20) > 1000 else qwen
    events = message_stream(api, **kw)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == (["thinking", "text"] if thinking else ["text"])
    deltas = [d["delta"]["type"] for n, d in events if n == "content_block_delta"]
    markers = 2 if thinking else 0
    total = kw.get("max_tokens", 20)
    assert deltas == (["thinking_delta"] * thinking + ["signature_delta"] if thinking else []) \
        + ["text_delta"] * (total - thinking - markers)
    usage = next(d["usage"] for n, d in events if n == "message_delta")
    assert usage["output_tokens"] == total


def response_stream(api, **kw):
    body = {"model": "test-model", "input": "Why is the sky blue?", "max_output_tokens": 20, "ignore_eos": True,
            "stream": True, **kw}
    r = api.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    return named_events(r.text)


@pytest.mark.parametrize("effort,reasoning", [(None, 8), ("low", 3), ("medium", 8), ("high", 13), ("none", 0)])
def test_responses_effort_streamed(qwen, effort, reasoning):
    events = response_stream(qwen, **({"reasoning": {"effort": effort}} if effort else {}))
    names = [n for n, _ in events]
    assert names.count("response.reasoning_text.delta") == reasoning
    assert ("response.reasoning_text.delta" in names) == bool(reasoning)
    parts = [d["part"]["type"] for n, d in events if n == "response.content_part.added"]
    assert parts == ["reasoning_text", "output_text"] if reasoning else ["output_text"]
    assert names.count("response.output_text.delta") == 20 - reasoning - (2 if reasoning else 0)
    final = events[-1][1]["response"]
    assert names[-1] == "response.incomplete"                       # cut by max_output_tokens
    assert final["usage"]["output_tokens"] == 20
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == reasoning
    assert [o["type"] for o in final["output"]] == (["reasoning", "message"] if reasoning else ["message"])


def test_reasoning_is_seeded(app_client):
    """A request ``seed`` reproduces the reasoning (and the answer); ``--seed`` reproduces a run."""
    api = app_client(*QWEN)
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 40, "seed": 9}
    a, b = (api.post(CHAT, json=body).json()["choices"][0]["message"] for _ in range(2))
    assert a["reasoning"] and (a["reasoning"], a["content"]) == (b["reasoning"], b["content"])
    runs = []
    for k in (7, 8):                     # a distinct flag set: app_client caches a server per flag set
        fresh = app_client(*QWEN, "--max-num-seqs", str(k))
        runs.append([fresh.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 40})
                     .json()["choices"][0]["message"]["reasoning"] for _ in range(3)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def test_hidden_reasoning_counts_in_the_metrics(app_client):
    """``include_reasoning: false`` on a stream: the hidden reasoning tokens are generated tokens
    in ``vllm:generation_tokens_total`` and ``vllm:request_generation_tokens``, as in vLLM."""
    api = app_client(*QWEN)
    before = scrape(api)
    kinds, usage = chat_stream(api, include_reasoning=False)
    assert kinds == ["content"] * 10 and usage["completion_tokens_details"] == {"reasoning_tokens": 8}
    after = scrape(api)
    for name in ("vllm:generation_tokens_total", "vllm:request_generation_tokens_sum"):
        assert metric(after, name) - metric(before, name) == 20
    assert metric(after, "vllm:request_generation_tokens_count") - metric(before, "vllm:request_generation_tokens_count") == 1
