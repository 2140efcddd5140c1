"""A real server's answers to requests it aborts (``/inference/v1/abort_requests``): the streams
are emitted from the hub (server/sse_emitter.py, token schedules), which must resume their
bodies to write vLLM's ending: the ``finish_reason: "abort"`` chunk, the usage of the tokens
streamed, ``[DONE]`` (Anthropic: ``message_delta`` with ``stop_reason`` null, ``message_stop``);
a non-streamed request gets a 200 with what it made.  Clock and step mode."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from support import external_ids, metric, posted_then_aborted, scrape, sse_events

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module", params=["clock", "step"])
def server_mode(request, sim_server):
    if request.param == "clock":
        return sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "10ms")
    return sim_server("--latency-calculator", "step", "--force-dummy-tokenizer")


def test_aborted_requests_end_as_vllm_ends_them(server_mode):
    base = server_mode
    before = metric(scrape(base), "vllm:request_success_total", finished_reason="abort")
    common = {"model": "test-model", "max_tokens": 1000, "ignore_eos": True}
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    jobs = {"chat-s": {"path": "/v1/chat/completions", "json": {**common, "messages": MSG, **usage}},
            "cmpl-s": {"path": "/v1/completions", "json": {**common, "prompt": "hi", **usage}},
            "chat-n": {"path": "/v1/chat/completions", "json": {**common, "messages": MSG}},
            "msg-s": {"path": "/v1/messages", "json": {**common, "messages": MSG, "stream": True}}}
    out = posted_then_aborted(base, jobs, 0.6)
    for rid in ("chat-s", "cmpl-s"):
        r = out[rid]
        assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n"), rid
        *chunks, fin, use, done = sse_events(r.text)
        tokens = chunks[1:] if rid == "chat-s" else chunks              # chat: the role chunk first
        assert 1 <= len(tokens) < 1000 and all(ch["choices"][0]["finish_reason"] is None for ch in tokens)
        # vLLM 0.34: after tokens the chat abort delta is {"content": ""} (stream_processor.py l. 92);
        # a finishing choice sets token_ids and weight_versions too (completions: and prompt_token_ids)
        want = ({"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "abort", "stop_reason": None,
                 "token_ids": None, "weight_versions": None}
                if rid == "chat-s" else
                {"index": 0, "text": "", "logprobs": None, "finish_reason": "abort", "stop_reason": None,
                 "prompt_token_ids": None, "token_ids": None, "weight_versions": None})
        assert fin["choices"] == [want]
        assert use["choices"] == [] and use["usage"]["completion_tokens"] == len(tokens)
    d = out["chat-n"].json()
    assert out["chat-n"].status_code == 200 and d["choices"][0]["finish_reason"] == "abort"
    assert 1 <= d["usage"]["completion_tokens"] < 1000 and d["choices"][0]["message"]["content"]
    blocks = [b for b in out["msg-s"].text.split("\n\n") if b]
    names = [b.split("\n", 1)[0][len("event: "):] for b in blocks]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    delta = json.loads(blocks[-2].split("\n", 1)[1][len("data: "):])
    assert delta["delta"] == {"stop_reason": None, "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == names.count("content_block_delta")
    m = scrape(base)
    assert metric(m, "vllm:request_success_total", finished_reason="abort") == before + 4
    assert metric(m, "vllm:num_requests_running") == 0


def test_aborted_running_usage_counts_the_tokens_sent(server_mode):
    """``continuous_usage_stats``: the abort chunk's running usage is the last token chunk's (vLLM's
    abort output adds no token) and the final usage's.  In step mode the hub renders a stream's
    next chunk while the engine steps (sse_emitter._render_ahead), which counted that unsent
    token in the running usage: the abort chunk said one token more than was streamed."""
    base = server_mode
    body = {"model": "test-model", "max_tokens": 1000, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    jobs = {f"cus-{k}": {"path": "/v1/chat/completions", "json": {**body, "messages": MSG}} for k in range(2)}
    jobs |= {f"cus-c{k}": {"path": "/v1/completions", "json": {**body, "prompt": "hi"}} for k in range(2)}
    out = posted_then_aborted(base, jobs, 0.4)
    for rid, r in out.items():
        *chunks, fin, use, done = sse_events(r.text)
        assert done == "[DONE]" and fin["choices"][0]["finish_reason"] == "abort", rid
        streamed = [c for c in chunks if (c["choices"][0].get("delta") or {}).get("content") or c["choices"][0].get("text")]
        n = use["usage"]["completion_tokens"]
        assert n == len(streamed) == (chunks[-1]["usage"]["completion_tokens"] if chunks else 0), rid
        assert fin["usage"]["completion_tokens"] == n, rid


def _blocks_well_formed(text: str) -> list:
    """The problems of an Anthropic stream's block events: a delta or stop of a block not open,
    a block left open, an end other than message_delta, message_stop."""
    problems, open_, names = [], set(), []
    for block in filter(None, text.split("\n\n")):
        name = block.split("\n", 1)[0][len("event: "):]
        data = json.loads(block.split("\n", 1)[1][len("data: "):])
        names.append(name)
        if name == "content_block_start":
            open_.add(data["index"])
        elif name in ("content_block_delta", "content_block_stop") and data["index"] not in open_:
            problems.append(f"{name} of block {data['index']}, not open")
        if name == "content_block_stop":
            open_.discard(data["index"])
    if open_:
        problems.append(f"left open: {sorted(open_)}")
    if names[-2:] != ["message_delta", "message_stop"]:
        problems.append(f"ends with {names[-2:]}")
    return problems


def _reasoning_server(sim_server) -> str:
    """Step mode with qwen3's reasoning parser, the Cohere routes on: one server for the messages
    and Cohere cases (the variable adds routes and changes nothing of /v1/messages; a second
    server without it cost a start)."""
    return sim_server("--latency-calculator", "step", "--force-dummy-tokenizer", "--reasoning-parser", "qwen3",
                      env={"VLLM_ENABLE_COHERE_API": "1"})


def test_aborted_messages_streams_close_the_blocks_the_client_saw(sim_server):
    """Step mode renders a stream's next token while the engine steps (sse_emitter._render_ahead);
    the messages renderer's block state (thinking closed, text or tool_use opened) followed that
    render, so a stream aborted just before its first answer token was sent ended with a
    content_block_stop of a block never started and its thinking block left open.  Streams
    started a step or so apart and aborted together: one of them is cut at that token."""
    base = _reasoning_server(sim_server)
    body = {"model": "test-model", "max_tokens": 40, "ignore_eos": True, "stream": True, "messages": MSG}
    out = _staggered_then_aborted(base, "/v1/messages", body, "blocks")
    bad = {rid: p for rid, p in ((rid, _blocks_well_formed(r.text)) for rid, r in out.items()) if p}
    assert len(out) == 120 and not bad


def _cohere_well_formed(text: str) -> list:
    """The problems of a Cohere v2 stream's events: a delta or end of a block or tool call not
    open, one left open, an end other than message-end."""
    problems, blocks, calls, types = [], set(), set(), []
    for d in (e for e in sse_events(text) if e != "[DONE]"):
        t = d["type"]
        types.append(t)
        opened = blocks if t.startswith("content-") else calls if t.startswith("tool-call-") else None
        if opened is None:
            continue
        if t.endswith("-start"):
            opened.add(d["index"])
        elif d["index"] not in opened:
            problems.append(f"{t} of {d['index']}, not open")
        if t.endswith("-end"):
            opened.discard(d["index"])
    if blocks or calls:
        problems.append(f"left open: {sorted(blocks)} {sorted(calls)}")
    if types[:1] != ["message-start"] or types[-1:] != ["message-end"]:
        problems.append(f"begins with {types[:1]}, ends with {types[-1:]}")
    return problems


@pytest.mark.parametrize("tools", [False, True])
def test_aborted_cohere_streams_close_the_blocks_the_client_saw(sim_server, tools):
    """As the messages stream above, Cohere v2 chat's: its block state (message-start sent, the
    open block, the tool calls started) followed the hub's render ahead, so a stream cut at its
    first answer token ended with a content-end (or tool-call-end) of a block never started and
    its thinking block left open."""
    base = _reasoning_server(sim_server)
    body = {"model": "test-model", "max_tokens": 40, "stream": True, "messages": MSG}
    if tools:
        body |= {"max_tokens": 200, "tool_choice": "REQUIRED", "tools": [{"type": "function", "function": {
            "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]}}}]}
    out = _staggered_then_aborted(base, "/cohere/v2/chat", body, f"co-{tools}")
    bad = {rid: p for rid, p in ((rid, _cohere_well_formed(r.text)) for rid, r in out.items()) if p}
    assert len(out) == 120 and not bad


def _staggered_then_aborted(base: str, path: str, body: dict, prefix: str, rounds: int = 3, n: int = 40) -> dict:
    """``rounds`` times: ``n`` streams of ``body`` started 5 ms apart (40 tokens take about 0.3 s
    in step mode, so at the abort the streams are spread over their tokens and each round cuts a
    stream at any given token about a third of the time), then all aborted together; returns
    ``{request id: response}``."""
    out = {}

    def post(rid):
        out[rid] = httpx.post(base + path, json=body, headers={"X-Request-Id": rid}, timeout=30)

    for round_ in range(rounds):
        ids, threads = [f"{prefix}-{round_}-{k}" for k in range(n)], []
        for rid in ids:
            threads.append(threading.Thread(target=post, args=(rid,)))
            threads[-1].start()
            time.sleep(0.005)
        time.sleep(0.08)
        external = [i for rid in ids for i in external_ids(path, rid)]
        assert httpx.post(base + "/inference/v1/abort_requests", json={"request_ids": external}).status_code == 200
        for t in threads:
            t.join(15)
    return out
