"""Stream shape as vLLM's (issue 22): a stream of N tokens is the role chunk (chat) plus N token
chunks, the last token's chunk carrying ``finish_reason`` (no empty finishing chunk), then the
usage chunk when asked for.  Checked on every timing path the server has (all tokens at once, a
constant inter-token latency emitted as a schedule, a latency drawn per token)."""
from __future__ import annotations

import httpx
import pytest

from support import make_app, streamed

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "Hello there"}]
TIMINGS = {"all at once": (), "schedule": ("--inter-token-latency", "1ms"),
           "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms")}

_apps: dict = {}


def client(*flags) -> httpx.Client:
    if flags not in _apps:
        _apps[flags] = httpx.Client(transport=httpx.WSGITransport(app=make_app(*flags)), base_url="http://sim")
    return _apps[flags]


def chunks(flags, path, body) -> list:
    return streamed(client(*flags), path, body)


def by_choice(events) -> dict:
    """index -> that choice's chunk entries, in order."""
    out: dict = {}
    for e in events:
        for c in e["choices"]:
            out.setdefault(c["index"], []).append(c)
    return out


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("n", [1, 3])
def test_chat_stream_is_role_chunk_plus_one_chunk_per_token(timing, n):
    events = chunks(TIMINGS[timing], CHAT, {"messages": MSG, "max_tokens": 7, "ignore_eos": True, "n": n,
                                            "stream_options": {"include_usage": True}})
    assert len(events) == n * (1 + 7) + 1
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 7 * n
    for i, entries in by_choice(events[:-1]).items():
        assert len(entries) == 1 + 7
        assert entries[0]["delta"] == {"role": "assistant", "content": ""}
        assert all(e["delta"]["content"] for e in entries[1:])         # every token chunk has text
        assert [e["finish_reason"] for e in entries] == [None] * 7 + ["length"]
        assert entries[-1]["stop_reason"] is None
        assert all("stop_reason" not in e for e in entries[:-1])       # vLLM: set only when finishing


@pytest.mark.parametrize("flags", [("--time-to-first-token", "60ms", "--time-to-first-token-std-dev", "18ms"),
                                   ("--time-to-first-token", "20ms", "--inter-token-latency", "4ms",
                                    "--inter-token-latency-std-dev", "1ms", "--time-to-first-token-std-dev", "6ms")])
def test_every_role_chunk_comes_first_in_index_order(flags):
    """vLLM sends the n role chunks together, in index order, at the request's first output (the
    openai SDK's ``chat.completions.stream`` helper raised IndexError when choice 1's came
    first, as it did when each choice's first token, drawn apart, carried its own)."""
    for _ in range(5):
        events = chunks(flags, CHAT, {"messages": MSG, "max_tokens": 4, "ignore_eos": True, "n": 3})
        firsts = [(c["index"], c["delta"]) for e in events[:3] for c in e["choices"]]
        assert firsts == [(i, {"role": "assistant", "content": ""}) for i in range(3)], firsts


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("n", [1, 2])
def test_completion_stream_is_one_chunk_per_token(timing, n):
    events = chunks(TIMINGS[timing], COMPLETIONS, {"prompt": "Hello there", "max_tokens": 6, "ignore_eos": True,
                                                   "n": n, "stream_options": {"include_usage": True}})
    assert len(events) == n * 6 + 1
    for entries in by_choice(events[:-1]).values():
        assert len(entries) == 6 and all(e["text"] for e in entries)
        assert [e["finish_reason"] for e in entries] == [None] * 5 + ["length"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_stop_string_finishes_on_the_last_kept_token(path):
    body = {"messages": [{"role": "user", "content": "one two three four five"}]} if path == CHAT \
        else {"prompt": "one two three four five"}
    events = chunks(("--mode", "echo"), path, {**body, "stop": [" three"], "n": 2})
    for entries in by_choice(events).values():
        tokens = entries[1:] if path == CHAT else entries
        texts = [e["delta"]["content"] if path == CHAT else e["text"] for e in tokens]
        # vLLM 0.34's detokenizer keeps the token that completes the stop string (its text cut):
        # it is the last kept token, whose chunk carries the finish.  Its deltas hold back the
        # last len(" three") - 1 = 5 characters until the output finishes (stop_buffer_length):
        # "one " -> "", "one two " -> "one", then the rest of the cut text "one two"
        assert texts == ["", "one", " two"]
        assert [e["finish_reason"] for e in tokens] == [None, None, "stop"]
        assert tokens[-1]["stop_reason"] == " three"


@pytest.mark.parametrize("timing", TIMINGS)
def test_continuous_usage_counts_each_token_once(timing):
    events = chunks(TIMINGS[timing], CHAT, {"messages": MSG, "max_tokens": 4, "ignore_eos": True,
                                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert [e["usage"]["completion_tokens"] for e in events] == [0, 1, 2, 3, 4, 4]    # role, 4 tokens, usage
    assert events[4]["choices"][0]["finish_reason"] == "length"


def test_a_tool_call_stream_finishes_on_its_last_argument_chunk():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    events = chunks((), CHAT, {"messages": MSG, "tools": tools, "tool_choice": "required",
                               "stream_options": {"include_usage": True}})
    usage = events[-1]["usage"]
    entries = by_choice(events[:-1])[0]
    assert len(entries) == 1 + usage["completion_tokens"]
    assert entries[-1]["finish_reason"] == "tool_calls" and entries[-1]["delta"]["tool_calls"]
    assert all(e["finish_reason"] is None for e in entries[:-1])


def test_a_choice_without_tokens_still_finishes():
    """An empty echo has no token to carry the finish reason: one closing chunk, as before."""
    events = chunks(("--mode", "echo"), CHAT, {"messages": [{"role": "user", "content": ""}]})
    assert [(e["choices"][0]["delta"], e["choices"][0]["finish_reason"]) for e in events] == \
        [({"role": "assistant", "content": ""}, None), ({}, "stop")]


@pytest.mark.parametrize("timing", TIMINGS)
def test_echo_is_prepended_to_the_first_token_chunk(timing):
    events = chunks(TIMINGS[timing], COMPLETIONS, {"prompt": "Hello there", "max_tokens": 5, "ignore_eos": True,
                                                   "echo": True, "n": 2})
    for entries in by_choice(events).values():
        assert len(entries) == 5
        assert entries[0]["text"].startswith("Hello there") and len(entries[0]["text"]) > len("Hello there")
        assert [e["finish_reason"] for e in entries] == [None] * 4 + ["length"]
