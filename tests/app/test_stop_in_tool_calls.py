"""A stop string (or stop token) inside a tool call's text ends the answer there, as in any
text: vLLM 0.34's detokenizer checks every generated token's text, tool-call markup and arguments
included (``v1/engine/detokenizer.py`` ``check_stop_strings``), and the tool parser reads the cut
output after (``parser/abstract_parser.py`` ``_extract_tool_calls``; streamed, the
``tool_parsers/streaming.py`` paths).  The simulator's tool-call text is the calls' arguments.
A named call keeps the cut arguments (its output is the arguments); ``required``'s array and
``auto``'s markup no longer parse, so a non-streamed answer has no calls (content ``""`` and the
raw text); a streamed one has sent each call as its text came."""
from __future__ import annotations

import json

import pytest

from support import sse_events

CHAT = "/v1/chat/completions"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
BASE = {"model": "test-model", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}


def answer(api, **kw) -> dict:
    r = api.post(CHAT, json={**BASE, **kw})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def stream(api, **kw) -> list:
    r = api.post(CHAT, json={**BASE, "stream": True, **kw})
    assert r.status_code == 200, r.text
    return [e["choices"][0] for e in sse_events(r.text) if isinstance(e, dict) and e.get("choices")]


def a_call(api, choice, seed=0):
    """(seed, its first call's arguments, their tokens) of a seed whose answer calls a tool."""
    for s in range(seed, seed + 50):
        out = answer(api, tool_choice=choice, seed=s, logprobs=True)
        if out["message"].get("tool_calls"):
            tokens = [e["token"] for e in out["logprobs"]["content"]]
            return s, out["message"]["tool_calls"][0]["function"]["arguments"], tokens
    raise AssertionError("no seed made a call")


def a_stop(args: str) -> tuple[str, int]:
    """A 3-character stop string inside the arguments (after their first 2 characters), and where it first is."""
    for i in range(2, len(args) - 2):
        s = args[i:i + 3]
        if args.find(s) == i:
            return s, i
    raise AssertionError(args)


def held_deltas(tokens: list, cut: str, hold: int) -> list:
    """vLLM's streamed deltas (get_next_output_text) of ``tokens`` whose last one completes a
    stop string, the text cut to ``cut``."""
    out, sent, text = [], 0, ""
    for t in tokens[:-1]:
        text += t
        upto = len(text) - hold
        out.append(text[sent:upto] if upto > sent else "")
        sent = max(sent, upto)
    return out + [cut[sent:]]


def test_named_call_keeps_the_arguments_cut_at_the_stop(api):
    seed, args, tokens = a_call(api, NAMED)
    stop, i = a_stop(args)
    out = answer(api, tool_choice=NAMED, seed=seed, stop=[stop])
    calls = out["message"]["tool_calls"]
    assert [c["function"] for c in calls] == [{"name": "get_weather", "arguments": args[:i]}]
    assert out["message"]["content"] == ""
    assert (out["finish_reason"], out["stop_reason"]) == ("stop", stop)
    # the tokens through the one completing the stop string
    ends = [len("".join(tokens[:k + 1])) for k in range(len(tokens))]
    kept = next(k for k, e in enumerate(ends) if e >= i + len(stop)) + 1
    full = answer(api, tool_choice=NAMED, seed=seed, stop=[stop], logprobs=True)
    assert [e["token"] for e in full["logprobs"]["content"]] == tokens[:kept]
    # streamed: each output's text is the call's arguments, 2 characters held back
    chunks = stream(api, tool_choice=NAMED, seed=seed, stop=[stop])[1:]
    entries = [c["delta"]["tool_calls"][0] for c in chunks]
    assert entries[0]["function"]["name"] == "get_weather"
    assert [e["function"]["arguments"] for e in entries] == held_deltas(tokens[:kept], args[:i], len(stop) - 1)
    assert (chunks[-1]["finish_reason"], chunks[-1]["stop_reason"]) == ("stop", stop)


def test_a_stop_at_the_arguments_start_leaves_no_named_call(api):
    seed, args, _ = a_call(api, NAMED)
    out = answer(api, tool_choice=NAMED, seed=seed, stop=[args[:2]])
    assert not out["message"].get("tool_calls") and out["message"]["content"] == ""
    assert (out["finish_reason"], out["stop_reason"]) == ("stop", args[:2])


def test_required_answer_cut_by_a_stop_has_no_calls(api):
    seed, args, tokens = a_call(api, "required")
    stop, i = a_stop(args)
    out = answer(api, tool_choice="required", seed=seed, stop=[stop])
    # the array no longer parses (TypeAdapter(list[FunctionDefinition]) fails): no calls, and
    # a forced choice's content is "" (message_assembly)
    assert not out["message"].get("tool_calls") and out["message"]["content"] == ""
    assert (out["finish_reason"], out["stop_reason"]) == ("stop", stop)
    # streamed, the required scanner sent the call as its text came: the cut arguments
    chunks = stream(api, tool_choice="required", seed=seed, stop=[stop])[1:]
    calls = [tc for c in chunks for tc in c["delta"].get("tool_calls") or ()]
    assert calls[0]["function"]["name"] == "get_weather"
    assert all(tc["index"] == 0 for tc in calls)
    assert "".join(tc["function"]["arguments"] for tc in calls) == args[:i]
    assert all(tc["function"]["arguments"] for tc in calls[1:])          # no empty entries
    assert (chunks[-1]["finish_reason"], chunks[-1]["stop_reason"]) == ("tool_calls", stop)


def test_auto_answer_cut_by_a_stop_is_its_text(api):
    seed, args, _ = a_call(api, "auto")
    stop, i = a_stop(args)
    out = answer(api, tool_choice="auto", seed=seed, stop=[stop])
    # no whole call to parse: the parser returns the raw text as content
    assert not out["message"].get("tool_calls") and out["message"]["content"] == args[:i]
    assert (out["finish_reason"], out["stop_reason"]) == ("stop", stop)


def test_a_stop_token_in_the_arguments_cuts_the_call(api):
    seed, args, tokens = a_call(api, NAMED)
    out = answer(api, tool_choice=NAMED, seed=seed, return_token_ids=True)
    ids = out["token_ids"]
    k = next(k for k in range(1, len(ids)) if ids[k] not in ids[:k])
    cut = answer(api, tool_choice=NAMED, seed=seed, stop_token_ids=[ids[k]], return_token_ids=True)
    assert cut["token_ids"] == ids[:k + 1] and cut["stop_reason"] == ids[k]
    assert cut["message"]["tool_calls"][0]["function"]["arguments"] == "".join(tokens[:k])


def test_no_stop_in_the_arguments_changes_nothing(api):
    seed, args, _ = a_call(api, "required")
    out = answer(api, tool_choice="required", seed=seed, stop=["\x00never"])
    assert out["message"]["tool_calls"][0]["function"]["arguments"] == args
    assert (out["finish_reason"], out["stop_reason"]) == ("tool_calls", None)
    assert json.loads(args)


ANTHROPIC_TOOL = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}


def test_messages_and_responses_read_the_cut_call_as_vllm(api):
    """temperature 0: greedy, the same prompt gives the same call."""
    body = {"model": "test-model", "max_tokens": 100, "messages": BASE["messages"], "tools": [ANTHROPIC_TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather"}, "temperature": 0}
    args = json.dumps(api.post("/v1/messages", json=body).json()["content"][0]["input"], separators=(",", ":"))
    stop, i = a_stop(args)
    body["stop_sequences"] = [stop]
    # vLLM's messages_full_converter json.loads the cut arguments: its ValueError is a 400
    r = api.post("/v1/messages", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    try:
        json.loads(args[:i])
    except json.JSONDecodeError as e:
        assert err["message"] == str(e)
    # streamed, the arguments go out as they come; an output with none sends no event
    r = api.post("/v1/messages", json={**body, "stream": True})
    evs = [e for e in sse_events(r.text) if isinstance(e, dict)]
    parts = [e["delta"]["partial_json"] for e in evs if e.get("type") == "content_block_delta"]
    assert all(parts) and "".join(parts) == args[:i]
    # _to_anthropic_stop_reason: the call it cut (its arguments are not JSON) must not run, so
    # the stop sequence is the reason, not tool_use
    assert next(e for e in evs if e.get("type") == "message_delta")["delta"] == {"stop_reason": "stop_sequence",
                                                                                 "stop_sequence": stop}

    body = {"model": "test-model", "input": "Weather in Paris?", "tools": [RESPONSES_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"}, "temperature": 0}
    args = api.post("/v1/responses", json=body).json()["output"][0]["arguments"]
    stop, i = a_stop(args)
    body["stop"] = [stop]
    out = api.post("/v1/responses", json=body).json()["output"]
    assert [(o["type"], o["arguments"]) for o in out] == [("function_call", args[:i])]
    evs = [e for e in sse_events(api.post("/v1/responses", json={**body, "stream": True}).text) if isinstance(e, dict)]
    deltas = [e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta"]
    assert all(deltas) and "".join(deltas) == args[:i]


def test_messages_stop_reason_of_calls_as_vllm():
    """vLLM 0.34's ``_to_anthropic_stop_reason``: ``max_tokens`` wins, complete calls are
    ``tool_use`` with no stop sequence (a stop string matched after them included), a stop
    string wins over a call it cut, an abort has neither (the simulator had said ``tool_use``
    with the matched stop sequence for a cut streamed call)."""
    from types import SimpleNamespace as NS
    from generation.adapters.messages import _stop_reason
    assert _stop_reason(NS(finish_reason="length"), "x", True, True) == ("max_tokens", None)
    assert _stop_reason(NS(finish_reason="stop"), "x", True, True) == ("tool_use", None)
    assert _stop_reason(NS(finish_reason="stop"), "x", True, False) == ("stop_sequence", "x")
    assert _stop_reason(NS(finish_reason="stop"), None, True, False) == ("tool_use", None)
    assert _stop_reason(NS(finish_reason="tool_calls"), None, False, False) == ("tool_use", None)
    assert _stop_reason(NS(finish_reason="stop"), None, False, False) == ("end_turn", None)
    assert _stop_reason(NS(finish_reason="abort"), "x", True, True) == (None, None)


@pytest.mark.parametrize("choice", [NAMED, "required", "auto"])
def test_usage_counts_the_tokens_a_stop_kept(api, choice):
    """A stop in a tool-call answer drops the tokens after it: usage counts what is left, as the
    token ids and logprobs (streamed too) do; it had kept the uncut answer's count (30 tokens
    reported for 17 sent)."""
    seed, args, tokens = a_call(api, choice)
    stop, _ = a_stop(args)
    for extra in ({"stop": [stop]}, {"stop": [stop], "n": 2}):
        r = api.post(CHAT, json={**BASE, "tool_choice": choice, "seed": seed, "logprobs": True,
                                 "return_token_ids": True, **extra})
        assert r.status_code == 200, r.text
        out = r.json()
        kept = [len(c["token_ids"]) for c in out["choices"]]
        assert all(len(c["logprobs"]["content"]) == k for c, k in zip(out["choices"], kept))
        assert out["usage"]["completion_tokens"] == sum(kept)
        assert kept[0] < len(tokens)                    # the seed's answer, cut
        r = api.post(CHAT, json={**BASE, "tool_choice": choice, "seed": seed, "return_token_ids": True, "stream": True,
                                 "stream_options": {"include_usage": True}, **extra})
        evs = [e for e in sse_events(r.text) if isinstance(e, dict)]
        sent = sum(len(c.get("token_ids") or []) for e in evs for c in e.get("choices", []))
        assert sent == evs[-1]["usage"]["completion_tokens"] == sum(kept)


@pytest.mark.parametrize("choice", [NAMED, "required"])
def test_a_forced_choice_cut_after_its_reasoning_has_content_empty(app_client, choice):
    """vLLM 0.34's message_assembly: a forced choice's content is ``content or ""`` whatever came
    before; with a reasoning span and the call cut away (a stop at the arguments' start) the
    simulator answered null."""
    api = app_client("--reasoning-parser", "qwen3")
    for seed in range(5):
        out = answer(api, tool_choice=choice, seed=seed, stop=["{"])
        assert out["message"]["reasoning"] and not out["message"].get("tool_calls")
        assert out["message"]["content"] == ""
