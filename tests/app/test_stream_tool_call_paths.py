"""Streamed chat tool calls, chunk for chunk, on each of vLLM 0.34's ``tool_choice`` paths.

Sources (vLLM 0.34.0):

* auto, a tool parser (``hermes``): ``Hermes2ProToolParser.extract_tool_calls_streaming``
  (``vllm/tool_parsers/hermes_tool_parser.py`` l. 204-274): the name alone, its
  ``DeltaFunctionCall(name=name).model_dump(exclude_none=True)`` (l. 242-250), then argument
  diffs ``DeltaFunctionCall(arguments=diff)`` (l. 256-262), in ``DeltaMessage(content=content,
  tool_calls=...)`` (l. 265-268), ``content`` None before a call, so dumped ``null``;
* ``"required"``: ``extract_required_tool_call_streaming`` (``vllm/tool_parsers/streaming.py``
  l. 250-311): a call's first entry has its id, name and arguments so far (l. 295-307), later ones
  ``name=None`` (l. 281-290), so ``"name": null``;
* named: ``extract_named_tool_call_streaming`` (same file, l. 22-62): the first entry id, name and
  the output's text, later ones ``{"index": 0, "function": {"arguments"}}``;
* the chunks are dumped ``exclude_unset`` (``vllm/entrypoints/openai/chat_completion/serving.py``
  l. 500-502) in the models' field order (``vllm/entrypoints/generate/base/protocol.py``
  l. 331-367); the finish reason is ``resolve_finish_reason``'s
  (``vllm/entrypoints/serve/utils/tool_calls_utils.py`` l. 41-60): ``tool_calls``, ``stop`` for a
  named tool.

The simulator has no name tokens: the auto path's name chunk is sent just before the call's first
argument token, carrying no token (``generation/adapters/chat_tool_deltas.py``).
"""
from __future__ import annotations

import json

import pytest

from support import sse_events

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
COUNT = {"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
NAMED = {"type": "function", "function": {"name": "count"}}
TWO = ("--tool-call-extra-call-probability", "100")        # a second call, always
HERMES = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
TOKEN_CHOICE = ["index", "delta", "logprobs", "finish_reason", "token_ids"]
FINISH_CHOICE = ["index", "delta", "logprobs", "finish_reason", "stop_reason", "token_ids", "weight_versions"]


def stream(c, **body) -> list:
    r = c.post(CHAT, json={"model": "test-model", "stream": True, "messages": MSG, "tools": [WEATHER, COUNT],
                           "seed": 7, **body})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    return events[:-1]


def whole_calls(c, **body) -> list:
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "tools": [WEATHER, COUNT], "seed": 7, **body})
    return [(tc["function"]["name"], tc["function"]["arguments"]) for tc in r.json()["choices"][0]["message"]["tool_calls"]]


def joined(choices: list) -> list:
    """``(name, arguments)`` per call index, from the deltas' entries."""
    calls: dict = {}
    for ch in choices:
        for tc in ch["delta"].get("tool_calls", []):
            call = calls.setdefault(tc["index"], ["", ""])
            call[0] += tc["function"].get("name") or ""
            call[1] += tc["function"].get("arguments") or ""
    return [tuple(calls[i]) for i in sorted(calls)]


@pytest.mark.parametrize("flags", [TWO, TWO + HERMES], ids=["bare", "hermes"])
def test_auto_sends_the_name_alone_then_the_arguments(app_client, flags):
    """Per call: ``{"content": null, "tool_calls": [{"id", "type", "index", "function": {"name"}}]}``,
    then one ``{"content": null, "tool_calls": [{"index", "function": {"arguments"}}]}`` per token;
    the last token's chunk finishes with ``tool_calls``."""
    c = app_client(*flags)
    events = stream(c, tool_choice="auto", stream_options={"include_usage": True})
    role, *token_chunks, usage = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    choices = [e["choices"][0] for e in token_chunks]
    names = [i for i, ch in enumerate(choices) if "id" in ch["delta"]["tool_calls"][0]]
    assert len(names) == 2 and names[0] == 0
    for n, k in enumerate(names):
        name = choices[k]
        assert list(name) == TOKEN_CHOICE and name["finish_reason"] is None
        assert list(name["delta"]) == ["content", "tool_calls"] and name["delta"]["content"] is None
        entry, = name["delta"]["tool_calls"]
        assert list(entry) == ["id", "type", "index", "function"] and entry["index"] == n
        assert entry["id"].startswith("chatcmpl-tool-") and entry["type"] == "function"
        assert list(entry["function"]) == ["name"]                   # exclude_none: no "arguments"
    args = [ch for k, ch in enumerate(choices) if k not in names]
    for ch in args:
        assert list(ch["delta"]) == ["content", "tool_calls"] and ch["delta"]["content"] is None
        entry, = ch["delta"]["tool_calls"]
        assert list(entry) == ["index", "function"] and list(entry["function"]) == ["arguments"]
        assert entry["function"]["arguments"]
    assert [ch["delta"]["tool_calls"][0]["index"] for ch in args] == sorted(ch["delta"]["tool_calls"][0]["index"]
                                                                          for ch in args)
    assert all(ch["finish_reason"] is None for ch in choices[:-1])
    assert list(choices[-1]) == FINISH_CHOICE and choices[-1]["finish_reason"] == "tool_calls"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(args)   # one token per argument chunk
    assert joined(choices) == whole_calls(c, tool_choice="auto")


def test_auto_name_chunk_carries_no_token(app_client):
    """With logprobs, token ids and running usage the name chunk has ``{"content": []}``, ``[]``
    and the previous chunk's usage: it stands for no token, every argument chunk for one."""
    c = app_client(*TWO, *HERMES)
    events = stream(c, tool_choice="auto", logprobs=True, return_token_ids=True,
                    stream_options={"include_usage": True, "continuous_usage_stats": True})
    running = [e["usage"]["completion_tokens"] for e in events[:-1]]
    for e, before, now in zip(events[1:-1], running, running[1:]):
        ch = e["choices"][0]
        if "id" in ch["delta"]["tool_calls"][0]:
            assert ch["logprobs"] == {"content": []} and ch["token_ids"] == [] and now == before
        else:
            assert len(ch["logprobs"]["content"]) == 1 and len(ch["token_ids"]) == 1 and now == before + 1
            assert ch["logprobs"]["content"][0]["token"] == ch["delta"]["tool_calls"][0]["function"]["arguments"]


def test_auto_group_sends_name_and_arguments_in_one_delta(app_client):
    """A stream interval's group that starts a call: hermes' name entry, then its arguments
    entry with the same index, in one delta (hermes_tool_parser.py l. 237-262)."""
    c = app_client(*TWO, *HERMES, "--stream-interval", "4")
    choices = [e["choices"][0] for e in stream(c, tool_choice="auto")[1:]]
    assert list(choices[0]["delta"]["tool_calls"][0]["function"]) == ["name"]       # the first token goes alone
    both = [ch["delta"]["tool_calls"] for ch in choices[1:] if any("id" in tc for tc in ch["delta"]["tool_calls"])]
    assert both, "the second call starts inside a group"
    for entries in both:
        start = next(k for k, tc in enumerate(entries) if "id" in tc)
        name, args = entries[start], entries[start + 1]
        assert list(name["function"]) == ["name"] and list(args) == ["index", "function"]
        assert list(args["function"]) == ["arguments"] and args["index"] == name["index"]
    assert joined(choices) == whole_calls(c, tool_choice="auto")


def test_required_names_a_call_with_its_first_arguments(app_client):
    """``{"tool_calls": [{"id", "type", "index", "function": {"name", "arguments"}}]}`` at a
    call's first token, then ``{"tool_calls": [{"index", "function": {"name": null, "arguments"}}]}``;
    no ``content`` key (``DeltaMessage(tool_calls=...)``, streaming.py l. 311)."""
    c = app_client(*TWO)
    role, *token_chunks = stream(c, tool_choice="required")
    choices = [e["choices"][0] for e in token_chunks]
    starts = 0
    for ch in choices:
        assert list(ch["delta"]) == ["tool_calls"]
        entry, = ch["delta"]["tool_calls"]
        if "id" in entry:
            assert list(entry) == ["id", "type", "index", "function"] and entry["index"] == starts
            assert list(entry["function"]) == ["name", "arguments"] and entry["function"]["arguments"]
            starts += 1
        else:
            assert list(entry) == ["index", "function"] and entry["function"] == {
                "name": None, "arguments": entry["function"]["arguments"]}
    assert starts == 2 and "id" in choices[0]["delta"]["tool_calls"][0]
    assert list(choices[-1]) == FINISH_CHOICE and choices[-1]["finish_reason"] == "tool_calls"
    assert joined(choices) == whole_calls(c, tool_choice="required")


def test_named_streams_arguments_without_a_name(app_client):
    """The first entry ``{"id", "type", "index": 0, "function": {"name", "arguments"}}``, later
    ones ``{"index": 0, "function": {"arguments"}}``; the finish is ``stop`` (a named tool)."""
    c = app_client(*TWO)
    choices = [e["choices"][0] for e in stream(c, tool_choice=NAMED)[1:]]
    first, *rest = [ch["delta"] for ch in choices]
    assert list(first) == ["tool_calls"] and list(first["tool_calls"][0]) == ["id", "type", "index", "function"]
    assert first["tool_calls"][0]["function"]["name"] == "count" and first["tool_calls"][0]["index"] == 0
    assert list(first["tool_calls"][0]["function"]) == ["name", "arguments"]
    assert all(d == {"tool_calls": [{"index": 0, "function": {"arguments": d["tool_calls"][0]["function"]["arguments"]}}]}
               for d in rest)
    assert choices[-1]["finish_reason"] == "stop"
    assert joined(choices) == whole_calls(c, tool_choice=NAMED)


@pytest.mark.parametrize("choice", ["auto", "required", NAMED], ids=["auto", "required", "named"])
@pytest.mark.parametrize("interval", ["1", "4"])
def test_openai_sdk_accumulates_the_answer(app_client, choice, interval):
    """The openai SDK's stream helper joins the deltas into the non-streamed answer's calls."""
    c = app_client(*TWO, *HERMES, "--stream-interval", interval)
    kw = dict(model="test-model", messages=MSG, tools=[WEATHER, COUNT], tool_choice=choice, seed=7)
    sdk = c.openai(api_key="sk-test", max_retries=0, timeout=30)
    with sdk.chat.completions.stream(**kw) as s:
        for _ in s:
            pass
        got = s.get_final_completion().choices[0].message
    assert [(t.type, t.function.name, t.function.arguments) for t in got.tool_calls] == \
        [("function", *call) for call in whole_calls(c, tool_choice=choice)]
    assert all(t.id.startswith("chatcmpl-tool-") for t in got.tool_calls)
    assert [json.loads(t.function.arguments) for t in got.tool_calls]
