"""Reasoning models (issue 21): ``--reasoning-parser`` makes answers start with a reasoning span,
returned in each API's form, streamed and not, with the request switches of vLLM 0.33.

Lengths are exact: with ``ignore_eos`` an answer has ``max_tokens`` tokens and the span takes
``round(share * max_tokens)`` of them (markers included), ``share`` = ``--reasoning-fraction``
(0.5) times the effort's scale.  qwen3's markers are ``<think>`` / ``</think>``, one token each
with the simulated tokenizer, so 20 tokens are 1 + 8 reasoning + 1 + 10 content.
"""
from __future__ import annotations

import re

import json

import pytest

from support import metric, named_events, scrape, sse_events

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Why is the sky blue?"}]
QWEN = ("--reasoning-parser", "qwen3", "--seed", "3")


def chat(api, **kw):
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True, **kw}
    r = api.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    return r


def tokens(api, text: str) -> int:
    return len(api.sim.tokenizer.encode(text)[0])


@pytest.fixture(scope="module")
def qwen(app_client):
    return app_client(*QWEN)


# ---- chat -------------------------------------------------------------------------------------------
def test_chat_message_reasoning_and_usage(qwen):
    out = chat(qwen).json()
    msg = out["choices"][0]["message"]
    assert tokens(qwen, msg["reasoning"]) == 8 and tokens(qwen, msg["content"]) == 10
    assert "<think>" not in msg["content"] + msg["reasoning"] and "reasoning_content" not in msg
    assert out["usage"]["completion_tokens"] == 20
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}
    assert out["choices"][0]["finish_reason"] == "length"


def test_reasoning_content_and_reasoning_accepted_on_input(qwen):
    history = MSGS + [{"role": "assistant", "content": "Rayleigh.", "reasoning_content": "Scattering."},
                      {"role": "assistant", "content": "Yes.", "reasoning": "Short."},
                      {"role": "user", "content": "More?"}]
    out = qwen.post(CHAT, json={"model": "test-model", "messages": history, "max_tokens": 20,
                                "ignore_eos": True}).json()
    assert tokens(qwen, out["choices"][0]["message"]["reasoning"]) == 8
    assert "reasoning_content" not in out["choices"][0]["message"]          # output: reasoning only


def test_chat_without_parser_has_null_details_and_no_reasoning(api):
    out = chat(api).json()
    assert out["usage"]["completion_tokens_details"] is None
    assert out["choices"][0]["message"]["reasoning"] is None
    assert tokens(api, out["choices"][0]["message"]["content"]) == 20


def test_chat_stream_reasoning_deltas_then_content(qwen):
    events = sse_events(chat(qwen, stream=True, stream_options={"include_usage": True}).text)
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    kinds = [next(iter(d)) for d in deltas if d and "role" not in d]
    assert kinds == ["reasoning"] * 8 + ["content"] * 10           # markers send no chunk
    assert events[-2]["usage"]["completion_tokens"] == 20
    assert events[-2]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}


def test_openai_sdk_reads_reasoning(qwen):
    r = qwen.openai().chat.completions.create(model="test-model", messages=MSGS, max_tokens=20,
                                              extra_body={"ignore_eos": True})
    assert tokens(qwen, r.choices[0].message.model_extra["reasoning"]) == 8
    assert r.usage.completion_tokens_details.reasoning_tokens == 8


def test_include_reasoning_false_drops_the_text_but_counts_the_tokens(qwen):
    out = chat(qwen, include_reasoning=False).json()
    assert out["choices"][0]["message"]["reasoning"] is None
    assert tokens(qwen, out["choices"][0]["message"]["content"]) == 10
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}
    events = sse_events(chat(qwen, include_reasoning=False, stream=True,
                             stream_options={"include_usage": True, "continuous_usage_stats": True}).text)
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert not any("reasoning" in d for d in deltas)
    assert sum(bool(d.get("content")) for d in deltas) == 10
    # the hidden tokens count in the running usage: the first content chunk is token 11
    first = next(e for e in events[:-1] if e["choices"] and e["choices"][0]["delta"].get("content"))
    assert first["usage"]["completion_tokens"] == 11
    assert events[-2]["usage"]["completion_tokens"] == 20


def test_enable_thinking_false_turns_it_off(qwen):
    out = chat(qwen, chat_template_kwargs={"enable_thinking": False}).json()
    assert out["choices"][0]["message"]["reasoning"] is None
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert tokens(qwen, out["choices"][0]["message"]["content"]) == 20


@pytest.mark.parametrize("effort,reasoning", [("low", 3), ("medium", 8), ("high", 13), ("none", 0)])
def test_reasoning_effort_scales_or_turns_it_off(qwen, effort, reasoning):
    out = chat(qwen, reasoning_effort=effort).json()
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": reasoning}
    assert (out["choices"][0]["message"]["reasoning"] is None) == (reasoning == 0)


def test_reasoning_effort_implies_thinking_and_enable_thinking_wins(qwen):
    out = chat(qwen, reasoning_effort="high", chat_template_kwargs={"enable_thinking": False}).json()
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_thinking_token_budget_caps_it(qwen):
    out = chat(qwen, thinking_token_budget=3).json()
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
    assert tokens(qwen, out["choices"][0]["message"]["content"]) == 15


@pytest.mark.parametrize("body,param", [({"reasoning_effort": "huge"}, "body.reasoning_effort"),   # pydantic's Literal
                                        ({"thinking_token_budget": -5}, "thinking_token_budget"),
                                        ({"include_reasoning": "maybe"}, "body.include_reasoning")])
def test_bad_switches_are_400_naming_the_field(qwen, body, param):
    r = qwen.post(CHAT, json={"model": "test-model", "messages": MSGS, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_reasoning_before_tool_calls(qwen):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}
    out = qwen.post(CHAT, json={"model": "test-model", "messages": MSGS, "tools": [tool],
                                "tool_choice": "required"}).json()
    msg = out["choices"][0]["message"]
    assert msg["reasoning"] and json.loads(msg["tool_calls"][0]["function"]["arguments"])["x"] >= 0
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    events = sse_events(qwen.post(CHAT, json={"model": "test-model", "messages": MSGS, "tools": [tool],
                                              "tool_choice": "required", "stream": True}).text)
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    kinds = [k for d in deltas for k in d if k in ("reasoning", "tool_calls")]
    assert kinds[0] == "reasoning" and kinds[-1] == "tool_calls"
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning")       # reasoning first, then the call
    args = "".join(tc["function"].get("arguments", "") for d in deltas for tc in d.get("tool_calls", ()))
    assert json.loads(args)["x"] >= 0


def test_reasoning_tokens_count_in_the_metrics(app_client):
    api = app_client(*QWEN)
    before = metric(scrape(api), "vllm:generation_tokens_total")
    chat(api)
    assert metric(scrape(api), "vllm:generation_tokens_total") - before == 20


# ---- completions: no parser on this API, the raw text carries the markers ---------------------------
def test_completions_text_carries_the_markers(qwen):
    out = qwen.post("/v1/completions", json={"model": "test-model", "prompt": "Why?", "max_tokens": 20,
                                             "ignore_eos": True}).json()
    text = out["choices"][0]["text"]
    assert text.startswith("<think>") and text.count("</think>") == 1
    assert out["usage"]["completion_tokens"] == 20 and out["usage"]["completion_tokens_details"] is None
    events = sse_events(qwen.post("/v1/completions", json={"model": "test-model", "prompt": "Why?", "max_tokens": 20,
                                                           "ignore_eos": True, "stream": True}).text)
    pieces = [e["choices"][0]["text"] for e in events[:-1] if e["choices"][0]["text"]]
    assert pieces[0] == "<think>" and len(pieces) == 20


@pytest.mark.parametrize("parser,starts,reasoning", [("deepseek_r1", False, 9), ("openai_gptoss", True, 11)])
def test_parsers_markers(app_client, parser, starts, reasoning):
    api = app_client("--reasoning-parser", parser, "--seed", "3")
    out = chat(api, max_tokens=40).json()
    shown = reasoning + (10 if parser == "deepseek_r1" else 0)
    assert tokens(api, out["choices"][0]["message"]["reasoning"]) == shown
    # DeepSeekR1ReasoningParser's count (BaseThinkingReasoningParser.count_reasoning_tokens) counts
    # the tokens after a <think> in the output: the template's <think> is in the prompt, so 0
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0 if parser == "deepseek_r1" else shown}
    text = api.post("/v1/completions", json={"model": "test-model", "prompt": "Why?", "max_tokens": 40,
                                             "ignore_eos": True}).json()["choices"][0]["text"]
    if parser == "deepseek_r1":      # the template opens the span in the prompt: only </think> is generated
        assert not text.startswith("<think>") and "</think>" in text
    else:
        assert text.startswith("<|channel|>analysis<|message|>")
        assert "<|end|><|start|>assistant<|channel|>final<|message|>" in text


@pytest.mark.parametrize("alias,same", [("glm47", "glm45"), ("step5", "deepseek_r1")])
def test_vllm_aliases_lay_out_as_their_class(app_client, alias, same):
    """vLLM 0.34 registers ``glm47`` on glm45's class and ``step5`` on deepseek_r1's
    (reasoning/__init__.py): a server started with either answers as with the other."""
    outs = [chat(app_client("--reasoning-parser", name, "--seed", "3"), max_tokens=40, seed=5).json()
            for name in (alias, same)]
    assert outs[0]["choices"][0]["message"] == outs[1]["choices"][0]["message"]
    assert outs[0]["choices"][0]["message"]["reasoning"]
    assert outs[0]["usage"] == outs[1]["usage"]


@pytest.mark.parametrize("constraint", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": {
        "type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}}}},
    {"response_format": {"type": "json_object"}},
    {"structured_outputs": {"choice": ["yes", "no"]}},
])
def test_structured_answer_without_max_tokens_reasons_first(app_client, constraint):
    """A structured answer on a reasoning server with no max_tokens (the context's room is the
    limit): reasoning, then the constrained content (it was a 500, the span's cap being None)."""
    api = app_client("--reasoning-parser", "qwen3")
    r = api.post("/v1/chat/completions", json={"model": "test-model", "seed": 1, **constraint,
                                               "messages": [{"role": "user", "content": "Why?"}]})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["reasoning"] and r.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    if "structured_outputs" in constraint:
        assert message["content"] in ("yes", "no")
    else:
        assert isinstance(json.loads(message["content"]), dict)


def test_unknown_parser_is_a_start_up_error():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError, match="reasoning-parser"):
        load_config(["--reasoning-parser", "bogus"], env={})


def test_real_tokenizer_markers_are_its_own_tokens(app_client, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<think>", "</think>"])
    tok.train_from_iterator(["Okay, let me think about this. The user is asking a simple question. "
                             "Today is a nice sunny day. I am fine, how are you today?"] * 20, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    api = app_client("--reasoning-parser", "qwen3", "--tokenizer", str(path), "--seed", "3")
    out = chat(api, return_token_ids=True).json()
    ids = out["choices"][0]["token_ids"]
    start, end = tok.token_to_id("<think>"), tok.token_to_id("</think>")
    assert ids[0] == start and ids.count(end) == 1
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == ids.index(end) - 1


# ---- Anthropic Messages ----------------------------------------------------------------------------
def message(api, **kw):
    body = {"model": "test-model", "max_tokens": 20, "ignore_eos": True, "messages": MSGS, **kw}
    r = api.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    return r


@pytest.mark.parametrize("thinking", [None, {"type": "adaptive"}])
def test_anthropic_thinking_block_with_signature(qwen, thinking):
    out = message(qwen, **({"thinking": thinking} if thinking else {})).json()
    block, text = out["content"]
    assert block["type"] == "thinking" and tokens(qwen, block["thinking"]) == 8
    assert re.fullmatch(r"[0-9a-f]{32}", block["signature"])      # vLLM 0.34's uuid4().hex shape
    assert text["type"] == "text" and tokens(qwen, text["text"]) == 10
    assert out["usage"]["output_tokens"] == 20


def test_anthropic_thinking_disabled_and_budget(qwen, app_client):
    out = message(qwen, thinking={"type": "disabled"}).json()
    assert [b["type"] for b in out["content"]] == ["text"]
    # the budget caps the thinking: 40% of 3,000 tokens would be 1,200 (a budget is at least
    # 1,024 and below max_tokens, so the context is larger than the default 1,024)
    long = app_client(*QWEN, "--max-model-len", "8192")
    out = message(long, max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 1024}).json()
    assert tokens(qwen, out["content"][0]["thinking"]) == 1024


def test_anthropic_stream_thinking_delta_and_signature_delta(qwen):
    events = named_events(message(qwen, stream=True).text)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [(d["index"], d["delta"]["type"]) for n, d in events if n == "content_block_delta"]
    assert deltas == [(0, "thinking_delta")] * 8 + [(0, "signature_delta")] + [(1, "text_delta")] * 10
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1]


def test_anthropic_sdk_reads_thinking(qwen):
    msg = qwen.anthropic().messages.create(model="test-model", max_tokens=1100, messages=MSGS,
                                           thinking={"type": "enabled", "budget_tokens": 1024})
    assert msg.content[0].type == "thinking" and msg.content[0].signature
    with qwen.anthropic().messages.stream(model="test-model", max_tokens=20, messages=MSGS) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking and final.content[0].signature


def test_anthropic_unknown_thinking_type_is_vllms_400_and_effort_scales(qwen):
    """An unknown thinking type is a 400 naming ``thinking.type`` (the request schema validates it,
    as vLLM's pydantic model does); a known effort scales the thinking."""
    r = qwen.post("/v1/messages", json={"model": "test-model", "max_tokens": 20, "thinking": {"type": "sometimes"},
                                        "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "thinking.type" in r.json()["error"]["message"]
    out = message(qwen, output_config={"effort": "high"}).json()
    assert tokens(qwen, out["content"][0]["thinking"]) == 13


# ---- Responses --------------------------------------------------------------------------------------
def output_details(reasoning: int) -> dict:
    """vLLM's own OutputTokensDetails (responses/protocol.py l. 106-110; no turns kept by a simple context)."""
    return {"reasoning_tokens": reasoning, "tool_output_tokens": 0, "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": []}


def respond(api, **kw):
    body = {"model": "test-model", "input": "Why is the sky blue?", "max_output_tokens": 20, "ignore_eos": True, **kw}
    r = api.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    return r


def test_responses_reasoning_item_and_usage(qwen):
    out = respond(qwen).json()
    item, msg = out["output"]
    assert item["type"] == "reasoning" and item["summary"] == []
    assert [c["type"] for c in item["content"]] == ["reasoning_text"]
    assert tokens(qwen, item["content"][0]["text"]) == 8
    assert tokens(qwen, msg["content"][0]["text"]) == 10
    assert out["usage"]["output_tokens"] == 20 and out["usage"]["output_tokens_details"] == output_details(8)


def test_responses_effort(qwen):
    assert respond(qwen, reasoning={"effort": "high"}).json()["usage"]["output_tokens_details"] == output_details(13)
    out = respond(qwen, reasoning={"effort": "none"}).json()
    assert [o["type"] for o in out["output"]] == ["message"]


def test_responses_thinking_token_budget(qwen):
    """vLLM 0.34's Responses ``thinking_token_budget`` caps the reasoning as on chat."""
    out = respond(qwen, thinking_token_budget=3).json()
    assert out["usage"]["output_tokens"] == 20 and out["usage"]["output_tokens_details"] == output_details(3)
    assert tokens(qwen, out["output"][1]["content"][0]["text"]) == 15
    r = qwen.post("/v1/responses", json={"model": "test-model", "input": "hi", "thinking_token_budget": -5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget"


def test_responses_input_items_normalised(qwen):
    """vLLM 0.34 (the OpenResponses spec): an assistant message or reasoning item without
    ``type``, ``id``, ``status`` or ``summary`` gets the defaults, and counts as before."""
    history = [{"role": "user", "content": "hi"},
               {"type": "reasoning", "id": "", "status": None, "summary": None,
                "content": [{"type": "reasoning_text", "text": "thinking it over"}]},
               {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
               {"role": "user", "content": "again"}]
    full = [history[0], {**history[1], "id": "rs_1", "status": "completed", "summary": []},
            {"type": "message", "id": "msg_1", "status": "completed", **history[2],
             "content": [{"type": "output_text", "text": "hello", "annotations": []}]}, history[3]]
    a = respond(qwen, input=history).json()["usage"]["input_tokens"]
    assert a == respond(qwen, input=full).json()["usage"]["input_tokens"] and a > 0


def test_responses_stream_reasoning_events(qwen):
    events = named_events(respond(qwen, stream=True).text)
    names = [n for n, _ in events]
    # vLLM 0.34 opens the reasoning's part with content_part.added (emit_simple_reasoning_open)
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names.count("response.reasoning_text.delta") == 8
    done = next(d for n, d in events if n == "response.reasoning_text.done")
    assert tokens(qwen, done["text"]) == 8
    assert names.count("response.output_text.delta") == 10
    assert names.index("response.reasoning_text.done") < names.index("response.output_text.delta")
    added = [d["output_index"] for n, d in events if n == "response.output_item.added"]
    assert added == [0, 1]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    final = events[-1][1]["response"]
    assert [o["type"] for o in final["output"]] == ["reasoning", "message"]


def test_openai_sdk_parses_the_reasoning_item(qwen):
    r = qwen.openai().responses.create(model="test-model", input="hi", max_output_tokens=20,
                                       extra_body={"ignore_eos": True})
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens == 8
    assert r.output_text


# ---- a real server: markers and hidden reasoning send nothing, also when the hub emits the stream --


# ---- the layout itself (unit) -------------------------------------------------------------------------
def _layout(n, cap, stopped, fraction=0.5, budget=None):
    import random
    from types import SimpleNamespace
    from generation.config.reasoning_parsers import PARSERS
    from generation.content.reasoning import ReasoningSettings, ReasoningSpans
    from generation.engine.request import GenerationRequest, Prompt, Sequence
    from generation.tokenization.tokenizer import SimulatedTokenizer
    spans = ReasoningSpans(SimpleNamespace(reasoning_fraction=fraction), SimulatedTokenizer(), "qwen3",
                           row=PARSERS["qwen3"])
    seq = Sequence(GenerationRequest(request_id="r", model="m"), 0, 0, Prompt([1]))
    seq.pieces, seq.ids = [f"w{i} " for i in range(n)], list(range(n))
    seq.finish_reason = "stop" if stopped else "length"
    spans.apply(seq, random.Random(0), ReasoningSettings(budget=budget), cap, stopped)
    return seq


@pytest.mark.parametrize("n,cap,stopped,fraction,budget,span,length,finish", [
    (20, 20, False, 0.5, None, (1, 9, 10), 20, "length"),
    (20, 100, True, 0.5, 4, (1, 5, 6), 20, "stop"),
    (20, 100, True, 0.0, None, (1, 1, 2), 20, "stop"),          # share 0: markers only
    (20, 20, False, 1.0, None, (1, 19, 20), 20, "length"),       # all reasoning, no content
    (1, 50, True, 0.5, None, (1, 2, 3), 4, "stop"),              # a short answer grows to fit
    (1, 1, False, 0.5, None, (1, 1, 1), 1, "length"),            # cut inside the reasoning
])
def test_layout(n, cap, stopped, fraction, budget, span, length, finish):
    seq = _layout(n, cap, stopped, fraction, budget)
    assert seq.reasoning_span == span and len(seq.pieces) == length == seq.completion_tokens
    assert seq.finish_reason == finish and seq.pieces[0] == "<think>"
    if span[2] > span[1]:
        assert seq.pieces[span[1]] == "</think>"
    if length <= n:                  # the content is the start of the drawn answer
        assert seq.pieces[span[2]:] == [f"w{i} " for i in range(length - span[2])]
