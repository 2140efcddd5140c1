"""vLLM's stream interval (``--stream-interval``, a request's ``stream_interval``) through the
Flask app: a stream sends the first token alone, then one chunk per ``interval`` tokens, the
rest with the finish (``vllm/v1/engine/output_processor.py``, ``make_request_output``), on every
API's stream and every timing path; the chunks together carry exactly what the per-token stream
carries; the engine's metrics stay per token; non-streaming answers are untouched."""
from __future__ import annotations

import httpx
import pytest

from support import make_app, metric, named_events, scrape, streamed as stream

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "Hello there"}]
TIMINGS = {"all at once": (), "schedule": ("--inter-token-latency", "1ms"),
           "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms"),
           "step mode": ("--latency-calculator", "step")}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

_apps: dict = {}


def client(*flags) -> httpx.Client:
    if flags not in _apps:
        _apps[flags] = httpx.Client(transport=httpx.WSGITransport(app=make_app(*flags)), base_url="http://sim")
    return _apps[flags]


def fresh(*flags) -> httpx.Client:
    """An app of its own: its first request draws the same answer as another fresh app's
    (``--seed``), for the APIs without a request ``seed``."""
    return httpx.Client(transport=httpx.WSGITransport(app=make_app("--seed", "5", *flags)), base_url="http://sim")


def choices(events) -> dict:
    """index -> that choice's chunk entries (role chunks left out), in order."""
    out: dict = {}
    for e in events:
        for c in e["choices"]:
            if "role" not in c.get("delta", {}):
                out.setdefault(c["index"], []).append(c)
    return out


def chat_body(**extra) -> dict:
    return {"messages": MSG, "max_tokens": 10, "ignore_eos": True, "seed": 11, "return_token_ids": True, **extra}


def joined(entries, key="content") -> str:
    return "".join(e["delta"].get(key) or "" for e in entries)


# ---- the grouping ----------------------------------------------------------------------------
@pytest.mark.parametrize("timing", TIMINGS)
def test_ten_tokens_at_interval_four_are_chunks_of_1_4_4_1(timing):
    """make_request_output: the first token alone, then an output once 4 are unsent (tokens
    2-5, 6-9), then the last one with the finish; the usage chunk after, as always."""
    flags = ("--stream-interval", "4", *TIMINGS[timing])
    events = stream(client(*flags), CHAT, chat_body(stream_options={"include_usage": True}))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    entries = choices(events)[0]
    assert [len(e["token_ids"]) for e in entries] == [1, 4, 4, 1]
    assert [e["finish_reason"] for e in entries] == [None, None, None, "length"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 10
    one = choices(stream(client(*TIMINGS[timing]), CHAT, chat_body()))[0]      # the same answer, per token
    assert [t for e in entries for t in e["token_ids"]] == [t for e in one for t in e["token_ids"]]
    assert joined(entries) == joined(one)
    assert [joined(entries[k:k + 1]) for k in range(4)] == [
        joined(one[:1]), joined(one[1:5]), joined(one[5:9]), joined(one[9:])]


@pytest.mark.parametrize("tokens, interval, sizes", [(1, 4, [1]), (2, 4, [1, 1]), (5, 4, [1, 4]), (6, 4, [1, 4, 1]),
                                                     (9, 2, [1, 2, 2, 2, 2]), (7, 10, [1, 6])])
def test_the_rule_at_the_edges(tokens, interval, sizes):
    entries = choices(stream(client("--stream-interval", str(interval)), CHAT, chat_body(max_tokens=tokens)))[0]
    assert [len(e["token_ids"]) for e in entries] == sizes
    assert entries[-1]["finish_reason"] == "length"


@pytest.mark.parametrize("server, own, sizes", [("4", 2, [1, 4, 4, 1]),       # below the server's: clamped up
                                                ("2", 4, [1, 4, 4, 1]),       # above: the request's
                                                ("1", 3, [1, 3, 3, 3]),
                                                ("3", None, [1, 3, 3, 3])])
def test_the_request_value_is_clamped_up_to_the_servers(server, own, sizes):
    body = chat_body() if own is None else chat_body(stream_interval=own)
    assert [len(e["token_ids"]) for e in choices(stream(client("--stream-interval", server), CHAT, body))[0]] == sizes
    entries = choices(stream(client("--stream-interval", server), COMPLETIONS, {
        "prompt": "Hello", "max_tokens": 10, "ignore_eos": True, "return_token_ids": True,
        **({} if own is None else {"stream_interval": own})}))[0]
    assert [len(e["token_ids"]) for e in entries] == sizes


def test_non_streaming_answers_are_untouched():
    body = {"model": "test-model", "messages": MSG, "max_tokens": 10, "seed": 3, "logprobs": True}
    plain = client().post(CHAT, json=body).json()
    grouped = client("--stream-interval", "4").post(CHAT, json={**body, "stream_interval": 5}).json()
    for out in (plain, grouped):
        out.pop("id"), out.pop("created")
    assert grouped == plain


@pytest.mark.parametrize("timing", ["all at once", "deadline per token", "step mode"])
def test_each_choice_of_n_is_grouped_on_its_own(timing):
    events = stream(client("--stream-interval", "4", *TIMINGS[timing]), CHAT, chat_body(n=3))
    assert [c["index"] for e in events[:3] for c in e["choices"]] == [0, 1, 2]      # the role chunks first
    by = choices(events)
    assert sorted(by) == [0, 1, 2]
    for entries in by.values():
        assert [len(e["token_ids"]) for e in entries] == [1, 4, 4, 1]
        assert entries[-1]["finish_reason"] == "length"


# ---- what a chunk of several tokens carries (chat) --------------------------------------------
def test_logprobs_one_entry_per_token_of_the_chunk():
    body = chat_body(logprobs=True, top_logprobs=2)
    entries = choices(stream(client("--stream-interval", "4"), CHAT, body))[0]
    one = choices(stream(client(), CHAT, body))[0]
    assert [len(e["logprobs"]["content"]) for e in entries] == [1, 4, 4, 1]
    assert [x for e in entries for x in e["logprobs"]["content"]] == [x for e in one for x in e["logprobs"]["content"]]
    assert "".join(x["token"] for x in entries[1]["logprobs"]["content"]) == entries[1]["delta"]["content"]


def test_continuous_usage_counts_every_token_of_the_chunk():
    events = stream(client("--stream-interval", "4"), CHAT, chat_body(
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert [e["usage"]["completion_tokens"] for e in events] == [0, 1, 5, 9, 10, 10]    # role, 4 chunks, usage
    assert all(e["usage"]["total_tokens"] == e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"]
               for e in events)


def test_completions_chunks_join_text_logprobs_and_token_ids():
    body = {"prompt": "Hello", "max_tokens": 10, "ignore_eos": True, "seed": 11, "logprobs": 1, "echo": True,
            "return_token_ids": True}
    entries = choices(stream(client("--stream-interval", "4"), COMPLETIONS, body))[0]
    one = choices(stream(client(), COMPLETIONS, body))[0]
    assert [len(e["token_ids"]) for e in entries] == [1, 4, 4, 1]
    # echo with return_token_ids: the prompt's ids (and logprobs) with token 0, but not its text, as
    # vLLM 0.34 sets prompt_text = "" then (completion/serving.py completion_stream_generator)
    assert not entries[0]["text"].startswith("Hello") and entries[0]["prompt_token_ids"]
    assert entries[0]["logprobs"]["tokens"][0] == "Hello"
    assert "".join(e["text"] for e in entries) == "".join(e["text"] for e in one)
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert [x for e in entries for x in e["logprobs"][key]] == [x for e in one for x in e["logprobs"][key]]
    assert [e["finish_reason"] for e in entries] == [None, None, None, "length"]


def test_reasoning_and_answer_in_one_chunk_as_the_parser_splits_them():
    """qwen3's layout: ``<think>``, the reasoning, ``</think>``, the answer.  A chunk across the
    end holds both (``content`` then ``reasoning``, DeltaMessage's order); the markers show
    nothing, but with ``return_token_ids`` vLLM still sends their chunk, ``delta: {}`` with their
    ids (chat_completion/serving.py l. 749-758), so the lone first token (``<think>``) sends one."""
    flags = ("--reasoning-parser", "qwen3")
    body = chat_body(max_tokens=40, stream_options={"include_usage": True})
    one_events = stream(client(*flags), CHAT, body)
    r = one_events[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"]
    layout = choices(one_events)[0]                  # token -> its own chunk, the markers' empty
    assert len(layout) == 40 and layout[0]["delta"] == layout[r + 1]["delta"] == {}
    want = []
    for start, stop in [(0, 1)] + [(k, k + 4) for k in range(1, 40, 4)]:
        group = layout[start:stop]
        delta = {key: "".join(e["delta"][key] for e in group if key in e["delta"])
                 for key in ("content", "reasoning") if any(key in e["delta"] for e in group)}
        want.append((delta, [e["token_ids"][0] for e in group]))
    got = [(e["delta"], e["token_ids"]) for e in choices(stream(client(*flags, "--stream-interval", "4"), CHAT, body))[0]]
    assert got == want
    assert r == 18                                   # tokens 17-20: two of reasoning, </think>, the answer's first
    assert [list(d) for d, _ in got].count(["content", "reasoning"]) == 1
    assert got[0] == ({}, layout[0]["token_ids"]) and len(got[1][1]) == 4     # <think> alone, then tokens 1-4
    # without logprobs or token ids a marker's chunk is not sent: token 0's group sends nothing
    plain = choices(stream(client(*flags, "--stream-interval", "4"), CHAT, {**body, "return_token_ids": False}))[0]
    assert [e["delta"] for e in plain] == [d for d, _ in got[1:]]


def test_tool_call_fragments_join_per_call():
    body = {"messages": MSG, "tools": TOOLS, "tool_choice": "required", "seed": 4,
            "stream_options": {"include_usage": True}}
    events = stream(client("--stream-interval", "3"), CHAT, body)
    one = choices(stream(client(), CHAT, body))[0]
    entries = choices(events)[0]
    n = events[-1]["usage"]["completion_tokens"]
    assert len(entries) == 1 + (n - 1 + 2) // 3
    calls = [e["delta"]["tool_calls"] for e in entries]
    assert all(len(c) == 1 and c[0]["index"] == 0 for c in calls)
    assert calls[0][0]["id"].startswith("chatcmpl-tool-") and calls[0][0]["function"]["name"] == "get_weather"
    assert all(set(c[0]) == {"index", "function"} for c in calls[1:])
    args = [c[0]["function"]["arguments"] for c in calls]
    assert "".join(args) == "".join(e["delta"]["tool_calls"][0]["function"]["arguments"] for e in one)
    assert len(args[1]) > len(one[1]["delta"]["tool_calls"][0]["function"]["arguments"])
    assert entries[-1]["finish_reason"] == "tool_calls"


# ---- the other APIs ----------------------------------------------------------------------------
def test_messages_deltas_join_per_block():
    """vLLM's /v1/messages converts the chat chunks: one delta event per chunk and block."""
    def deltas(*flags):
        r = fresh(*flags).post("/v1/messages", json={"model": "test-model", "stream": True, "messages": MSG,
                                                     "max_tokens": 12})
        return [d["delta"] for name, d in named_events(r.text) if name == "content_block_delta"]
    one, four = deltas("--reasoning-parser", "qwen3"), deltas("--reasoning-parser", "qwen3", "--stream-interval", "4")
    for kind, key in (("thinking_delta", "thinking"), ("text_delta", "text")):
        assert "".join(d[key] for d in four if d["type"] == kind) == "".join(d[key] for d in one if d["type"] == kind)
    assert len(four) < len(one)
    assert [d["type"] for d in four].count("signature_delta") == 1


def test_responses_deltas_join():
    def deltas(*flags):
        r = fresh(*flags).post("/v1/responses", json={"model": "test-model", "stream": True, "input": "hi",
                                                      "max_output_tokens": 16})
        return [(name, d["delta"]) for name, d in named_events(r.text) if name.endswith(".delta")]
    one, four = deltas("--reasoning-parser", "qwen3"), deltas("--reasoning-parser", "qwen3", "--stream-interval", "4")
    for kind in ("response.reasoning_text.delta", "response.output_text.delta"):
        assert "".join(d for n, d in four if n == kind) == "".join(d for n, d in one if n == kind)
    assert len(four) < len(one)


@pytest.mark.parametrize("mode", ["tokens", "text"])
def test_generate_chunks_carry_their_tokens(mode):
    body = {"token_ids": [1, 2, 3], "output_mode": mode,
            "sampling_params": {"max_tokens": 10, "ignore_eos": True, "seed": 2, "logprobs": 0, "stream_interval": 4}}
    events = stream(client(), "/inference/v1/generate", body)
    one = stream(client(), "/inference/v1/generate", {**body, "sampling_params": {
        **body["sampling_params"], "stream_interval": None}})
    chunks = [c for e in events for c in e["choices"]]
    assert [len(c["token_ids"]) for c in chunks] == [1, 4, 4, 1]
    assert [len(c["logprobs"]["content"]) for c in chunks] == [1, 4, 4, 1]
    assert [t for c in chunks for t in c["token_ids"]] == [t for e in one for c in e["choices"] for t in c["token_ids"]]
    assert [c["finish_reason"] for c in chunks] == [None, None, None, "length"]
    if mode == "text":
        assert "".join(c["text"] for c in chunks) == "".join(c["text"] for e in one for c in e["choices"])


# ---- the engine's metrics stay per token -------------------------------------------------------
@pytest.mark.parametrize("timing", ["schedule", "deadline per token", "step mode"])
def test_metrics_count_tokens_not_chunks(timing):
    counts = []
    for interval in ("1", "4"):
        c = httpx.Client(transport=httpx.WSGITransport(app=make_app("--stream-interval", interval, *TIMINGS[timing])),
                         base_url="http://sim")
        stream(c, CHAT, chat_body())
        m = scrape(c)
        counts.append([metric(m, name) for name in (
            "vllm:inter_token_latency_seconds_count", "vllm:time_to_first_token_seconds_count",
            "vllm:generation_tokens_total", "vllm_sim:token_emission_lag_seconds_count")])
        itl_sum = metric(m, "vllm:inter_token_latency_seconds_sum")
        if timing != "step mode":                    # 1 ms a token, made on time whatever is sent
            assert 9 * 0.0008 <= itl_sum <= 9 * 0.001 + 0.5
    assert counts[0] == counts[1] == [9, 1, 10, 10]


# ---- --vllm-version: the request field from 0.27.0 ---------------------------------------------
def test_before_027_the_request_field_is_an_unknown_key():
    old = client("--vllm-version", "0.26.0")
    entries = choices(stream(old, CHAT, chat_body(stream_interval=4)))[0]
    assert [len(e["token_ids"]) for e in entries] == [1] * 10
    for bad in (0, "x", [1]):                        # not even read
        assert old.post(CHAT, json={"model": "test-model", "messages": MSG, "stream_interval": bad}).status_code == 200
    grouped = choices(stream(client("--vllm-version", "0.26.0", "--stream-interval", "4"), CHAT, chat_body()))[0]
    assert [len(e["token_ids"]) for e in grouped] == [1, 4, 4, 1]          # the server flag is older
    new = choices(stream(client("--vllm-version", "0.27.0"), CHAT, chat_body(stream_interval=4)))[0]
    assert [len(e["token_ids"]) for e in new] == [1, 4, 4, 1]


def test_the_field_is_read_as_vllm_reads_it():
    c = client()

    def err(path, body):
        r = c.post(path, json={"model": "test-model", **body})
        assert r.status_code == 400
        return r.json()["error"]["message"], r.json()["error"]["param"]
    assert err(CHAT, {"messages": MSG, "stream_interval": "x"}) == (
        "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.stream_interval', 'msg': 'Input should be a valid "
        "integer, unable to parse string as an integer', 'input': 'x'}", "body.stream_interval")
    assert err(COMPLETIONS, {"prompt": "a", "stream_interval": 0})[1] == "body.stream_interval"
    assert err("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"stream_interval": 0}}) == (
        "stream_interval must be at least 1, got 0. (parameter=stream_interval, value=0)", "stream_interval")
    entries = choices(stream(c, CHAT, chat_body(stream_interval="4")))[0]          # pydantic's lax int
    assert [len(e["token_ids"]) for e in entries] == [1, 4, 4, 1]
