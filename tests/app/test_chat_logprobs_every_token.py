"""Chat ``logprobs`` (and, streamed, ``token_ids``) cover every output token under a reasoning
parser or beside a tool call, as vLLM 0.34's chat fills them from the engine output's
``token_ids`` before its parser runs (chat_completion/serving.py l. 697-707 streamed, l.
1009-1021 not): the reasoning, its ``<think>`` / ``</think>`` markers and a tool call's tokens
included.  Streamed, a token the parser shows nothing for (a marker) still sends a chunk,
``delta: {}``, when logprobs or token ids are asked (l. 749-758); ``include_reasoning: false``
hides both (``suppress_metadata`` l. 1032-1035, 1078-1081; ``hide_metadata`` l. 745-747).

qwen3 with the simulated tokenizer: 20 tokens are ``<think>``, 8 of reasoning, ``</think>``, 10
of content.
"""
from __future__ import annotations

import json

import pytest

from support import sse_events

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Why is the sky blue?"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}
TOOLS = {"tools": [TOOL], "tool_choice": "required"}


@pytest.fixture(scope="module")
def qwen(app_client):
    return app_client("--reasoning-parser", "qwen3", "--seed", "3")


def chat(api, **kw):
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True, "seed": 7, **kw}
    r = api.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    return r


def token_chunks(api, **kw) -> list:
    """The choice of each chunk after the role chunk (the usage chunk left out)."""
    events = sse_events(chat(api, stream=True, **kw).text)
    assert events[-1] == "[DONE]"
    return [e["choices"][0] for e in events[1:-1] if e["choices"]]


def tokens_of(entries) -> list:
    return [e["token"] for e in entries]


def test_non_streamed_reasoning_answer_lists_every_token(qwen):
    out = chat(qwen, logprobs=True, top_logprobs=2, return_token_ids=True).json()
    c = out["choices"][0]
    entries = c["logprobs"]["content"]
    assert len(entries) == len(c["token_ids"]) == out["usage"]["completion_tokens"] == 20
    toks = tokens_of(entries)
    assert toks[0] == "<think>" and toks[9] == "</think>"
    assert "".join(toks[1:9]) == c["message"]["reasoning"] and "".join(toks[10:]) == c["message"]["content"]
    # each entry at its token's position in the whole answer, as a stream gives it
    assert [e["logprob"] for e in entries[:4]] == [-1.0, -1.1, -1.2, -1.0]
    assert all(len(e["top_logprobs"]) == 2 for e in entries)


def test_non_streamed_tool_call_has_its_tokens_logprobs(qwen):
    out = chat(qwen, logprobs=True, return_token_ids=True, max_tokens=60, ignore_eos=False, **TOOLS).json()
    c = out["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["tool_calls"]
    toks = tokens_of(c["logprobs"]["content"])
    assert len(toks) == len(c["token_ids"]) == out["usage"]["completion_tokens"]
    assert toks[0] == "<think>" and "</think>" in toks
    assert "".join(toks[toks.index("</think>") + 1:]) == c["message"]["tool_calls"][0]["function"]["arguments"]


def test_non_streamed_include_reasoning_false_hides_logprobs_and_token_ids(qwen):
    out = chat(qwen, logprobs=True, return_token_ids=True, include_reasoning=False).json()
    c = out["choices"][0]
    assert c["logprobs"] is None and c["token_ids"] is None and out["prompt_token_ids"]
    assert out["usage"]["completion_tokens"] == 20


def test_non_streamed_without_parser_unchanged(api):
    c = chat(api, logprobs=True).json()["choices"][0]
    assert "".join(tokens_of(c["logprobs"]["content"])) == c["message"]["content"]


def test_streamed_every_token_has_a_chunk_with_its_logprobs(qwen):
    got = token_chunks(qwen, logprobs=True, stream_options={"include_usage": True})
    assert len(got) == 20
    assert [c["delta"] for c in (got[0], got[9])] == [{}, {}]        # the markers: DeltaMessage()
    assert [tokens_of(c["logprobs"]["content"]) for c in (got[0], got[9])] == [["<think>"], ["</think>"]]
    assert all(len(c["logprobs"]["content"]) == 1 for c in got)
    assert all("reasoning" in c["delta"] for c in got[1:9]) and all("content" in c["delta"] for c in got[10:])
    assert [c["logprobs"]["content"][0]["token"] for c in got[1:9]] == [c["delta"]["reasoning"] for c in got[1:9]]
    # the same entries as the non-streamed answer's
    whole = chat(qwen, logprobs=True).json()["choices"][0]["logprobs"]["content"]
    assert [c["logprobs"]["content"][0] for c in got] == whole


def test_streamed_token_ids_alone_send_the_markers_chunks(qwen):
    got = token_chunks(qwen, return_token_ids=True)
    ids = chat(qwen, return_token_ids=True).json()["choices"][0]["token_ids"]
    assert [t for c in got for t in c["token_ids"]] == ids and len(got) == 20
    assert got[0]["delta"] == {} and got[0]["logprobs"] is None


def test_streamed_without_logprobs_or_token_ids_markers_send_nothing(qwen):
    got = token_chunks(qwen, stream_options={"include_usage": True, "continuous_usage_stats": True})
    assert len(got) == 18 and all(c["delta"] for c in got)
    events = sse_events(chat(qwen, stream=True, logprobs=True,
                             stream_options={"include_usage": True, "continuous_usage_stats": True}).text)
    running = [e["usage"]["completion_tokens"] for e in events[1:-1] if e["choices"]]
    assert running == list(range(1, 21))                  # an empty-delta chunk counts its token


def test_streamed_include_reasoning_false_hides_them(qwen):
    got = token_chunks(qwen, logprobs=True, return_token_ids=True, include_reasoning=False)
    assert len(got) == 10 and all(c["logprobs"] is None and c["token_ids"] is None for c in got)
    assert all("content" in c["delta"] for c in got)


def test_streamed_tool_call_chunks_carry_their_logprobs(qwen):
    body = {"logprobs": True, "return_token_ids": True, "max_tokens": 60, "ignore_eos": False, **TOOLS}
    got = token_chunks(qwen, **body)
    whole = chat(qwen, **body).json()["choices"][0]
    assert [c["logprobs"]["content"][0] for c in got] == whole["logprobs"]["content"]
    assert [t for c in got for t in c["token_ids"]] == whole["token_ids"]
    calls = [c for c in got if "tool_calls" in c["delta"]]
    assert calls and all(tokens_of(c["logprobs"]["content"]) == [c["delta"]["tool_calls"][0]["function"]["arguments"]]
                         for c in calls)
    args = "".join(c["delta"]["tool_calls"][0]["function"]["arguments"] for c in calls)
    assert json.loads(args) == json.loads(whole["message"]["tool_calls"][0]["function"]["arguments"])


def test_stream_interval_groups_cover_every_token(app_client):
    c = app_client("--reasoning-parser", "qwen3", "--seed", "3", "--stream-interval", "4")
    got = token_chunks(c, logprobs=True, return_token_ids=True)
    whole = chat(c, logprobs=True, return_token_ids=True).json()["choices"][0]
    assert [e for g in got for e in g["logprobs"]["content"]] == whole["logprobs"]["content"]
    assert [t for g in got for t in g["token_ids"]] == whole["token_ids"]
    assert got[0]["delta"] == {} and len(got[0]["token_ids"]) == 1       # <think> alone: the first output
    body = {"logprobs": True, "return_token_ids": True, "max_tokens": 60, "ignore_eos": False, **TOOLS}
    got = token_chunks(c, **body)
    whole = chat(c, **body).json()["choices"][0]
    assert [e for g in got for e in g["logprobs"]["content"]] == whole["logprobs"]["content"]
    assert [t for g in got for t in g["token_ids"]] == whole["token_ids"]


def test_batch_lists_every_token_even_with_reasoning_hidden(qwen):
    """vLLM's batch route (batch_serving.py l. 282-291, 315-316, 352-354) builds logprobs and
    token ids over every output token and keeps them when include_reasoning: false hides the text."""
    conv = [{"role": "user", "content": "Hi"}]
    for hide in (False, True):
        out = qwen.post(CHAT + "/batch", json={"messages": [MSGS, conv], "max_tokens": 20, "ignore_eos": True,
                                               "logprobs": True, "return_token_ids": True,
                                               "include_reasoning": not hide}).json()
        for c in out["choices"]:
            toks = tokens_of(c["logprobs"]["content"])
            assert len(toks) == len(c["token_ids"]) == 20 and toks[0] == "<think>"
            assert (c["message"]["reasoning"] is None) == hide


@pytest.fixture(scope="module")
def hermes(app_client):
    return app_client("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--seed", "3")


@pytest.mark.parametrize("server,kw", [
    ("hermes", {}),                                                            # a tool parser alone
    ("qwen", {"chat_template_kwargs": {"enable_thinking": False}}),           # thinking off
])
def test_include_reasoning_false_hides_the_metadata_wherever_vllm_has_a_parser(request, server, kw):
    """vLLM hides logprobs and token ids for ``include_reasoning: false`` whenever its chat has a
    parser (``parser is not None and not request.include_reasoning``), a tool parser with
    ``--enable-auto-tool-choice`` included, whether or not the answer reasons; without the field
    they are there."""
    api = request.getfixturevalue(server)
    out = chat(api, logprobs=True, return_token_ids=True, include_reasoning=False, **kw).json()["choices"][0]
    assert out["logprobs"] is None and out["token_ids"] is None and out["message"].get("reasoning") is None
    for c in token_chunks(api, logprobs=True, return_token_ids=True, include_reasoning=False, **kw):
        assert c["logprobs"] is None and c["token_ids"] is None
    shown = chat(api, logprobs=True, return_token_ids=True, **kw).json()["choices"][0]
    assert len(shown["logprobs"]["content"]) == len(shown["token_ids"]) == 20


def test_include_reasoning_false_without_a_parser_changes_nothing(api):
    out = chat(api, logprobs=True, return_token_ids=True, include_reasoning=False).json()["choices"][0]
    assert len(out["logprobs"]["content"]) == len(out["token_ids"]) == 20
