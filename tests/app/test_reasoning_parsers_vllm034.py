"""vLLM 0.34's other reasoning parsers through the app (in process, Flask's test client): each
lays its span out with its class's markers, splits it into ``reasoning`` / content on chat,
Messages and Responses, and reports ``reasoning_tokens`` as its ``count_reasoning_tokens`` does.

Lengths are exact: 40 tokens with ``ignore_eos`` at ``--reasoning-fraction`` 0.5 give the span 20
(markers included), the content 20; with the simulated tokenizer each marker string is a token.
"""
from __future__ import annotations

import pytest

from support import named_events, sse_events

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Why is the sky blue?"}]


def server(app_client, name):
    return app_client("--reasoning-parser", name, "--seed", "3")


def chat(api, **kw):
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 40, "ignore_eos": True, **kw}
    r = api.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    return r


def completion_text(api) -> str:
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Why?", "max_tokens": 40, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def tokens(api, text: str) -> int:
    return len(api.sim.tokenizer.encode(text)[0])


# name, start text, end text, reasoning tokens in the span, reasoning_tokens reported
CASES = [
    ("kimi_k3", "<|open|>think<|sep|>", "<|close|>think<|sep|><|open|>response<|sep|>", 11, 11),
    ("seed_oss", "<seed:think>", "</seed:think>", 18, 18),
    ("muse", " to=self<|message|>", "<|eom|><|start|>assistant to=user<|message|>", 13, 13),
    ("muse_glimmer", " to=self<|message|>", "<|eom|><|start|>assistant to=user<|message|>", 13, 0),
    ("hunyuan_a13b", "<think>\n", "\n</think>\n<answer>\n", 13, 0),
    ("inkling", "<|content_thinking|>", "<|end_message|><|message_model|><|content_text|>", 16, 16),
    ("step3p5", "", "</think>", 19, 19),
    ("olmo3", "<think>", "</think>", 18, 0),
]


@pytest.mark.parametrize("name,start,end,shown,counted", CASES)
def test_chat_split_and_reasoning_tokens(app_client, name, start, end, shown, counted):
    api = server(app_client, name)
    out = chat(api).json()
    msg = out["choices"][0]["message"]
    assert tokens(api, msg["reasoning"]) == shown and tokens(api, msg["content"]) == 20
    assert all(m not in msg["content"] + msg["reasoning"] for m in (start, end) if m)
    assert out["usage"]["completion_tokens"] == 40
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": counted}
    text = completion_text(api)              # completions: the raw output, markers in place
    assert text.startswith(start) and text.count(end) == 1


def test_kimi_k3_exact_message(app_client):
    """The output's tokens, as the token ids name them: XTML's think channel (3 tokens), 11
    reasoning tokens, the close and response open (6), then the 20 content tokens."""
    api = server(app_client, "kimi_k3")
    choice = chat(api, seed=7, return_token_ids=True).json()["choices"][0]
    pieces = [api.sim.tokenizer.decode_ids([i]) for i in choice["token_ids"]]
    msg = choice["message"]
    assert "".join(pieces[:3]) == "<|open|>think<|sep|>"
    assert "".join(pieces[3:14]) == msg["reasoning"]
    assert "".join(pieces[14:20]) == "<|close|>think<|sep|><|open|>response<|sep|>"
    assert "".join(pieces[20:]) == msg["content"] and len(pieces) == 40


def test_chat_stream_of_a_new_parser(app_client):
    api = server(app_client, "seed_oss")
    whole = chat(api, seed=5).json()["choices"][0]["message"]
    events = sse_events(chat(api, seed=5, stream=True, stream_options={"include_usage": True}).text)
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    kinds = [next(iter(d)) for d in deltas if d and "role" not in d]
    assert kinds == ["reasoning"] * 18 + ["content"] * 20            # the markers send no chunk
    assert "".join(d.get("reasoning", "") for d in deltas) == whole["reasoning"]
    assert "".join(d.get("content") or "" for d in deltas) == whole["content"]
    assert events[-2]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 18}


def test_append_think_returns_everything_as_content(app_client):
    """minimax_m2_append_think: the model reasons (the template opens <think>) and closes with
    </think>; the parser returns no reasoning and counts none."""
    api = server(app_client, "minimax_m2_append_think")
    out = chat(api).json()
    msg = out["choices"][0]["message"]
    assert msg["reasoning"] is None and msg["content"].count("</think>") == 1
    assert not msg["content"].startswith("</think>") and not msg["content"].endswith("</think>")
    assert out["usage"]["completion_tokens"] == 40
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    events = sse_events(chat(api, stream=True).text)
    assert not any("reasoning" in e["choices"][0]["delta"] for e in events[:-1] if e["choices"])


def test_append_think_tool_calls_stream_only_the_call(app_client):
    """A tool-call answer under minimax_m2_append_think: nothing precedes the call (the
    simulator's tool-call renderers read tokens before a call as a reasoning span's), so the
    stream's first tool delta is the call's header, not stray argument text."""
    api = app_client("--reasoning-parser", "minimax_m2_append_think", "--seed", "3", "--tool-call-parser", "hermes",
                     "--enable-auto-tool-choice")
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    body = {"model": "test-model", "messages": MSGS, "tools": [tool], "tool_choice": "required", "max_tokens": 200,
            "seed": 4}
    whole = api.post(CHAT, json=body).json()
    call = whole["choices"][0]["message"]["tool_calls"][0]["function"]
    events = sse_events(api.post(CHAT, json={**body, "stream": True}).text)
    calls = [d["tool_calls"][0] for d in (e["choices"][0]["delta"] for e in events[:-1] if e["choices"])
             if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == call["arguments"]
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.parametrize("name,on,shown,counted", [
    ("deepseek_v3", {"thinking": True}, 19, 0),            # R1's parser once thinking: its count is 0
    ("gemma4", {"enable_thinking": True}, 16, 18),          # its engine counts the stripped "thought\n" too
    ("poolside_v1", {"enable_thinking": True}, 19, 0),
])
def test_parsers_that_think_only_when_told(app_client, name, on, shown, counted):
    """DeepSeekV3ReasoningParser (and Laguna's) is the identity parser unless
    chat_template_kwargs turn thinking on; Gemma 4's enable_thinking defaults to False."""
    api = server(app_client, name)
    off = chat(api).json()
    assert off["choices"][0]["message"]["reasoning"] is None and tokens(api, off["choices"][0]["message"]["content"]) == 40
    assert off["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    out = chat(api, chat_template_kwargs=on).json()
    assert tokens(api, out["choices"][0]["message"]["reasoning"]) == shown
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": counted}
    effort = chat(api, reasoning_effort="high").json()         # vLLM sets enable_thinking from the effort
    assert effort["choices"][0]["message"]["reasoning"]


def test_holo2_thinks_by_default(app_client):
    out = chat(server(app_client, "holo2")).json()
    assert out["choices"][0]["message"]["reasoning"] and out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_anthropic_thinking_type_does_not_turn_on_a_parser_that_thinks_only_when_told(app_client):
    """vLLM 0.34's Messages conversion pins nothing for ``thinking: adaptive`` (only a budget for
    ``enabled``): the template of deepseek_v3 sees no switch, so the answer has no thinking block
    unless its kwargs say so."""
    api = server(app_client, "deepseek_v3")
    body = {"model": "test-model", "max_tokens": 40, "ignore_eos": True, "messages": MSGS,
            "thinking": {"type": "adaptive"}}
    out = api.post("/v1/messages", json=body).json()
    assert [b["type"] for b in out["content"]] == ["text"]
    out = api.post("/v1/messages", json={**body, "chat_template_kwargs": {"thinking": True}}).json()
    assert [b["type"] for b in out["content"]] == ["thinking", "text"]
    out = server(app_client, "kimi_k3").post("/v1/messages", json=body).json()
    assert [b["type"] for b in out["content"]] == ["thinking", "text"]
    assert tokens(api, out["content"][0]["thinking"]) == 11 and tokens(api, out["content"][1]["text"]) == 20


@pytest.mark.parametrize("name,shown,counted", [("kimi_k3", 11, 11), ("olmo3", 18, 0)])
def test_responses_reasoning_item_and_usage(app_client, name, shown, counted):
    api = server(app_client, name)
    r = api.post("/v1/responses", json={"model": "test-model", "input": "Why is the sky blue?",
                                        "max_output_tokens": 40, "ignore_eos": True})
    assert r.status_code == 200, r.text
    out = r.json()
    item, msg = out["output"]
    assert item["type"] == "reasoning" and tokens(api, item["content"][0]["text"]) == shown
    assert tokens(api, msg["content"][0]["text"]) == 20
    assert out["usage"]["output_tokens"] == 40
    assert out["usage"]["output_tokens_details"]["reasoning_tokens"] == counted
    events = named_events(api.post("/v1/responses", json={"model": "test-model", "input": "Why?", "stream": True,
                                                          "max_output_tokens": 40, "ignore_eos": True}).text)
    assert events[-1][0] == "response.incomplete"             # cut at max_output_tokens
    assert events[-1][1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == counted


def test_render_says_reasoning_ended_for_a_parser_that_thinks_only_when_told(app_client):
    """deepseek_v3 without a thinking switch is vLLM's identity parser (is_reasoning_end: True),
    so a chat render hands generate reasoning_ended true; with the switch, false."""
    api = server(app_client, "deepseek_v3")
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 40}
    assert api.post("/v1/chat/completions/render", json=body).json()["reasoning_ended"] is True
    on = {**body, "chat_template_kwargs": {"thinking": True}}
    assert api.post("/v1/chat/completions/render", json=on).json()["reasoning_ended"] is False
    assert server(app_client, "qwen3").post("/v1/chat/completions/render", json=body).json()["reasoning_ended"] is False


def test_real_tokenizer_encodes_a_multi_token_marker(app_client, tmp_path):
    """Kimi K3's XTML markers are 3-token sequences of special tokens (``<|open|>think<|sep|>``):
    with a real tokenizer the marker strings are encoded with its own ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|open|>", "<|close|>", "<|sep|>"])
    tok.train_from_iterator(["Okay, let me think about this. The user is asking a simple question. "
                             "Today is a nice sunny day. I am fine, how are you today? think response"] * 20, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    api = app_client("--reasoning-parser", "kimi_k3", "--tokenizer", str(path), "--seed", "3")
    out = chat(api, return_token_ids=True).json()
    choice = out["choices"][0]
    ids = choice["token_ids"]
    opened, sep, closed = (tok.token_to_id(t) for t in ("<|open|>", "<|sep|>", "<|close|>"))
    assert ids[0] == opened and ids[2] == sep and ids.count(closed) == 1
    k = ids.index(closed)
    assert ids[k:k + 6] == [closed, tok.token_to_id("think"), sep, opened, tok.token_to_id("response"), sep]
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": k - 3}
    assert "<|" not in choice["message"]["reasoning"] + choice["message"]["content"]


@pytest.mark.parametrize("kw,start,end", [
    ({}, "<ifm|think>", "</ifm|think>"),                                   # the parser's default: high
    ({"reasoning_effort": "high"}, "<ifm|think>", "</ifm|think>"),
    ({"reasoning_effort": "medium"}, "<ifm|think_fast>", "</ifm|think_fast>"),
    ({"reasoning_effort": "low"}, "<ifm|think_faster>", "</ifm|think_faster>"),
    ({"chat_template_kwargs": {"reasoning_effort": "medium"}}, "<ifm|think_fast>", "</ifm|think_fast>"),
    # the request's effort lies over its chat_template_kwargs' (build_chat_params)
    ({"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"}},
     "<ifm|think_faster>", "</ifm|think_faster>"),
])
def test_k2_horizon_markers_follow_the_effort(app_client, kw, start, end):
    """K2HorizonReasoningParser picks its think tokens by the chat template kwargs'
    reasoning_effort (_EFFORT_TOKENS: high <ifm|think>, medium <ifm|think_fast>, low
    <ifm|think_faster>; high when none is given): the answer opens and closes its span with them."""
    api = server(app_client, "k2_horizon")
    out = chat(api, seed=5, return_token_ids=True, **kw).json()
    choice = out["choices"][0]
    pieces = [api.sim.tokenizer.decode_ids([i]) for i in choice["token_ids"]]
    k = pieces.index(end)
    assert pieces[0] == start and [p for p in pieces if p.startswith(("<ifm", "</ifm"))] == [start, end]
    assert "".join(pieces[1:k]) == choice["message"]["reasoning"]
    assert "".join(pieces[k + 1:]) == choice["message"]["content"] and len(pieces) == 40
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": k - 1}
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "Why?", "max_tokens": 40, "ignore_eos": True})
    assert r.json()["choices"][0]["text"].startswith("<ifm|think>")        # no parser built: the default


def test_k2_horizon_effort_on_responses_and_messages(app_client):
    api = server(app_client, "k2_horizon")
    body = {"model": "test-model", "input": "Why is the sky blue?", "max_output_tokens": 40, "ignore_eos": True,
            "reasoning": {"effort": "medium"}, "seed": 5}
    r = api.post("/v1/responses", json=body)
    item, msg = r.json()["output"]
    # the same prompt and seed as chat's: the same span, laid out with think_fast's markers
    same = chat(api, seed=5, reasoning_effort="medium").json()["choices"][0]["message"]
    assert item["content"][0]["text"] == same["reasoning"] and msg["content"][0]["text"] == same["content"]
    assert r.json()["usage"]["output_tokens_details"]["reasoning_tokens"] == 18
    out = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 40, "ignore_eos": True, "messages": MSGS,
                                         "output_config": {"effort": "low"}}).json()
    assert [b["type"] for b in out["content"]] == ["thinking", "text"]


@pytest.mark.parametrize("path,body,effort", [
    (CHAT, {"messages": MSGS, "reasoning_effort": "max"}, "max"),
    (CHAT, {"messages": MSGS, "reasoning_effort": "none"}, "none"),
    (CHAT, {"messages": MSGS, "chat_template_kwargs": {"reasoning_effort": "turbo", "enable_thinking": False}},
     "turbo"),
    ("/v1/responses", {"input": "Why?", "reasoning": {"effort": "xhigh"}}, "xhigh"),
    # the chat render builds the parser with its kwargs too (render_chat_request): 200 before
    ("/v1/chat/completions/render", {"messages": MSGS, "reasoning_effort": "none"}, "none"),
    ("/v1/chat/completions/render", {"messages": MSGS, "chat_template_kwargs": {"reasoning_effort": "turbo"}},
     "turbo"),
])
def test_k2_horizon_refuses_another_effort(app_client, path, body, effort):
    """The parser's __init__ raises ValueError for an effort outside high / medium / low (built for
    every chat and Responses request, whatever the thinking switch): vLLM 0.34's
    create_error_response answers it 400 BadRequestError with no param."""
    r = server(app_client, "k2_horizon").post(path, json={"model": "test-model", **body})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": f"Unsupported reasoning_effort '{effort}'. Supported values: high, "
                                             f"medium, low.", "type": "BadRequestError", "param": None, "code": 400}}


@pytest.mark.parametrize("kw,counted", [
    ({}, 0),
    ({"chat_template_kwargs": {"enable_thinking": True}}, 0),              # no switch counts: still no_think
    ({"chat_template_kwargs": {"thinking": True}}, 0),
    ({"chat_template_kwargs": {"reasoning_effort": "no_think"}}, 0),
    ({"reasoning_effort": "high"}, 28),                                     # 1.5 x the 0.5 share
    ({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}}, 28),
    ({"reasoning_effort": "none"}, 18),            # "none" is an effort: not no_think, the thinking parser
    ({"chat_template_kwargs": {"reasoning_effort": "deep"}}, 18),
])
def test_hy_v3_thinks_by_its_effort_alone(app_client, kw, counted):
    """HYV3ReasoningParser (reasoning/hy_v3_reasoning_parser.py) is the identity parser when
    ``chat_kwargs.get("reasoning_effort") or "no_think"`` is ``no_think`` (the request's effort
    lies over chat_template_kwargs', build_chat_params), else BaseThinking's <think> parser:
    ``enable_thinking`` decides nothing; a chat render says reasoning_ended accordingly."""
    api = server(app_client, "hy_v3")
    out = chat(api, seed=5, **kw).json()
    msg = out["choices"][0]["message"]
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": counted}
    assert (msg["reasoning"] is None) == (counted == 0) and out["usage"]["completion_tokens"] == 40
    if not counted:
        assert tokens(api, msg["content"]) == 40
    render = api.post("/v1/chat/completions/render", json={"model": "test-model", "messages": MSGS, **kw}).json()
    assert render["reasoning_ended"] is (counted == 0)


def test_hy_v3_on_responses_and_messages(app_client):
    api = server(app_client, "hy_v3")
    body = {"model": "test-model", "input": "Why?", "max_output_tokens": 40, "ignore_eos": True}
    kinds = [[o["type"] for o in api.post("/v1/responses", json={**body, **extra}).json()["output"]]
             for extra in ({}, {"chat_template_kwargs": {"enable_thinking": True}}, {"reasoning": {"effort": "low"}})]
    assert kinds == [["message"], ["message"], ["reasoning", "message"]]
    body = {"model": "test-model", "max_tokens": 4000, "messages": MSGS}
    kinds = [[b["type"] for b in api.post("/v1/messages", json={**body, **extra}).json()["content"]]
             for extra in ({"thinking": {"type": "enabled", "budget_tokens": 2000}},
                           {"chat_template_kwargs": {"enable_thinking": True}},
                           {"output_config": {"effort": "high"}},
                           {"thinking": {"type": "adaptive"}, "chat_template_kwargs": {"reasoning_effort": "high"}})]
    assert kinds == [["text"], ["text"], ["thinking", "text"], ["thinking", "text"]]
