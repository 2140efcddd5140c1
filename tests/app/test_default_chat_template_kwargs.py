"""``--default-chat-template-kwargs`` as vLLM 0.34 applies it (``FrontendArgs``,
``ChatParams.with_defaults`` / ``merge_kwargs`` in ``vllm/renderers/params.py``): under each
chat-templated request's ``chat_template_kwargs`` (a request's null / ``"auto"`` does not
override) on chat, Messages, Responses, their render routes and ``/tokenize``; not on pooling nor
``/inference/v1/generate``.

Two Qwen3-like servers with ``--reasoning-parser qwen3 --default-chat-template-kwargs
'{"enable_thinking": false}'``: ``qwen`` (the simulated tokenizer, whose markers are one token
each: lengths as in test_reasoning_output.py, ``ignore_eos`` with 20 tokens,
``--reasoning-fraction`` 0.5: 8 reasoning tokens, ``high`` 13) for the reasoning, and
``templated`` (a real tokenizer, ``hub``, so that ``--chat-template`` renders) with a template
that writes ``/no_think`` when ``enable_thinking`` is false, for the prompt lengths."""
from __future__ import annotations

import json
import os

import pytest

from support.tokenizer_hub import MODEL

TEMPLATE = ("{% if enable_thinking is defined and enable_thinking is false %}/no_think {% endif %}"
            "{% for m in messages %}{{ m['content'] }}{% endfor %}")
OFF = json.dumps({"enable_thinking": False})
QUESTION = "Why is the sky blue?"
MSGS = [{"role": "user", "content": QUESTION}]
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def qwen(app_client):
    return app_client("--reasoning-parser", "qwen3", "--seed", "3", "--default-chat-template-kwargs", OFF)


@pytest.fixture(scope="module")
def templated(app_client, hub):
    return app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--reasoning-parser", "qwen3",
                      "--chat-template", TEMPLATE, "--default-chat-template-kwargs", OFF, model=MODEL)


@pytest.fixture(scope="module")
def lengths(templated):
    """Prompt tokens of the question with and without the template's ``/no_think`` (the plain
    prompt path, which no template kwargs reach)."""
    def count(text):
        r = templated.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
        assert r.status_code == 200, r.text
        return r.json()["count"]
    off, on = count("/no_think " + QUESTION), count(QUESTION)
    assert off > on
    return {"off": off, "on": on}


def post(api, path, **body):
    r = api.post(path, json={"model": MODEL if api.sim.tokenizer.name == "hf" else "test-model", **body})
    assert r.status_code == 200, r.text
    return r.json()


def chat(api, **kw):
    return post(api, CHAT, messages=MSGS, max_tokens=20, ignore_eos=True, **kw)


@pytest.mark.parametrize("kw,reasoning,prompt", [
    ({}, 0, "off"),                                                        # the flag's default
    ({"chat_template_kwargs": {"enable_thinking": True}}, 8, "on"),        # the request's wins
    ({"chat_template_kwargs": {"enable_thinking": None}}, 0, "off"),       # null does not override
    ({"chat_template_kwargs": {"enable_thinking": "auto"}}, 0, "off"),     # nor "auto"
    # the effort's switch beats the defaults' (vLLM's build_chat_params passes it as
    # enable_thinking, which this template reads)
    ({"reasoning_effort": "high"}, 13, "on"),
    ({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}}, 0, "off"),
])
def test_chat_reasoning_and_prompt_follow_the_effective_kwargs(qwen, templated, lengths, kw, reasoning, prompt):
    out = chat(qwen, **kw)
    assert (out["choices"][0]["message"]["reasoning"] is not None) == bool(reasoning)
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": reasoning}
    assert chat(templated, **kw)["usage"]["prompt_tokens"] == lengths[prompt]


def test_chat_stream_without_reasoning_by_default(qwen):
    r = qwen.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True,
                              "stream": True})
    assert r.status_code == 200 and '"reasoning":' not in r.text and '"content":' in r.text


@pytest.mark.parametrize("kwargs,prompt", [(None, "off"), ({"enable_thinking": True}, "on"),
                                           ({"enable_thinking": None}, "off")])
def test_tokenize_messages_counts_with_the_effective_kwargs(templated, lengths, kwargs, prompt):
    body = {"messages": MSGS, **({"chat_template_kwargs": kwargs} if kwargs is not None else {})}
    assert templated.post("/tokenize", json=body).json()["count"] == lengths[prompt]


# build_chat_params lays the request's add_generation_prompt / continue_final_message over its kwargs
GEN = {"add_generation_prompt": True, "continue_final_message": False}


def test_chat_render_reports_the_effective_kwargs(templated, lengths):
    r = post(templated, "/v1/chat/completions/render", messages=MSGS)
    assert len(r["token_ids"]) == lengths["off"]
    assert r["reasoning_ended"] is True
    assert r["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"enable_thinking": False, **GEN}}
    assert r["parse_context"]["chat_template_kwargs"] == {"enable_thinking": False, **GEN}
    r = post(templated, "/v1/chat/completions/render", messages=MSGS,
             chat_template_kwargs={"enable_thinking": True, "x": "auto"})
    assert len(r["token_ids"]) == lengths["on"] and r["reasoning_ended"] is False
    assert r["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"enable_thinking": True, **GEN}}


@pytest.mark.parametrize("kw,thinking,prompt", [
    ({}, 0, "off"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 1100}, 0, "off"),  # vLLM pins no enable_thinking for it: the default holds
    # vLLM 0.34's conversion passes output_config.effort as the chat request's reasoning_effort,
    # whose switch (build_chat_params' enable_thinking) the template reads: "on" (was "off")
    ({"output_config": {"effort": "high"}}, 13, "on"),
    ({"chat_template_kwargs": {"enable_thinking": True}}, 8, "on"),
    # thinking disabled: reasoning_effort "none" (the probe's pick for a template that reads the
    # switch), so enable_thinking false; the request's own switch still wins
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, 0, "off"),
    ({"thinking": {"type": "between_tools"}, "chat_template_kwargs": {"enable_thinking": True}}, 8, "on"),
])
def test_messages_follow_the_effective_kwargs(qwen, templated, lengths, kw, thinking, prompt):
    kw = {"max_tokens": 20, **kw}
    out = post(qwen, "/v1/messages", ignore_eos=True, messages=MSGS, **kw)
    assert [b["type"] for b in out["content"]] == (["thinking", "text"] if thinking else ["text"])
    out = post(templated, "/v1/messages", ignore_eos=True, messages=MSGS, **kw)
    assert out["usage"]["input_tokens"] == lengths[prompt]
    # count_tokens converts the same way (AnthropicCountTokensRequest has output_config and thinking)
    kw = {k: v for k, v in kw.items() if k != "max_tokens"}
    assert post(templated, "/v1/messages/count_tokens", messages=MSGS, **kw)["input_tokens"] == lengths[prompt]
    assert len(post(templated, "/v1/messages/render", max_tokens=1100, messages=MSGS, **kw)["token_ids"]) \
        == lengths[prompt]


@pytest.mark.parametrize("kw,reasoning,prompt", [
    ({}, 0, "off"),
    ({"reasoning": {"effort": "high"}}, 13, "on"),          # ResponsesRequest.build_chat_params' switch
    ({"chat_template_kwargs": {"enable_thinking": True}}, 8, "on"),
])
def test_responses_follow_the_effective_kwargs(qwen, templated, lengths, kw, reasoning, prompt):
    out = post(qwen, "/v1/responses", input=QUESTION, max_output_tokens=20, ignore_eos=True, **kw)
    assert out["usage"]["output_tokens_details"]["reasoning_tokens"] == reasoning
    out = post(templated, "/v1/responses", input=QUESTION, max_output_tokens=20, ignore_eos=True, **kw)
    assert out["usage"]["input_tokens"] == lengths[prompt]
    assert len(post(templated, "/v1/responses/render", input=QUESTION, **kw)["token_ids"]) == lengths[prompt]


@pytest.mark.parametrize("kwargs,reasons", [({}, True), ({"enable_thinking": False}, False)])
def test_generate_applies_no_defaults(qwen, kwargs, reasons):
    """vLLM's ``/inference/v1/generate`` takes ``reasoning_parser_kwargs`` as sent: empty ones
    reason (8 tokens between the one-token markers), the defaults notwithstanding."""
    out = post(qwen, "/inference/v1/generate", token_ids=[1, 2, 3],
               reasoning_parser_kwargs={"chat_template_kwargs": kwargs},
               sampling_params={"max_tokens": 20, "ignore_eos": True})
    ids = out["choices"][0]["token_ids"]
    (start,), (end,) = qwen.sim.reasoning.start[0], qwen.sim.reasoning.end[0]
    assert (ids[0], ids[9]) == (start, end) if reasons else start not in ids and end not in ids


def test_pooling_applies_no_defaults(app_client, hub, lengths):
    """vLLM 0.34's pooling io processors start from no template kwargs (``template_kwargs = None``)."""
    api = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", TEMPLATE,
                     "--default-chat-template-kwargs", OFF, model=MODEL)
    out = post(api, "/v1/embeddings", messages=MSGS)
    assert out["usage"]["prompt_tokens"] == lengths["on"]


def test_bad_flag_is_a_start_up_error():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    for bad in ('["enable_thinking"]', "{enable_thinking: false}"):
        with pytest.raises(ConfigError, match="^invalid value for --default-chat-template-kwargs: "):
            load_config(["--default-chat-template-kwargs", bad])


def test_a_chat_template_among_the_server_defaults_is_not_a_request_template(app_client):
    """vLLM's trust check reads the request's own kwargs: a ``chat_template`` key that
    --default-chat-template-kwargs holds is the server's, while a request's own is refused."""
    c = app_client("--default-chat-template-kwargs", '{"chat_template": "x"}')
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert c.post("/v1/chat/completions", json=body).status_code == 200
    r = c.post("/v1/chat/completions", json={**body, "chat_template_kwargs": {"chat_template": "x"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template"


@pytest.mark.parametrize("effort,own,switch", [("high", None, True), ("none", None, False),
                                               ("low", {"enable_thinking": False}, False)])
def test_chat_render_carries_the_effort(qwen, templated, lengths, effort, own, switch):
    """vLLM 0.34's render reports ``effective_chat_template_kwargs``: ``build_chat_params`` lays
    ``reasoning_effort`` and, unless the request's kwargs name ``enable_thinking``, the switch it
    implies (``effort != "none"``) over the request's kwargs, above the server's defaults; the
    prompt is rendered with them, and a render -> generate round trip keeps the effort (the
    render had dropped it: generate then reasoned at the default length)."""
    extra = {"chat_template_kwargs": own} if own else {}
    r = post(templated, "/v1/chat/completions/render", messages=MSGS, reasoning_effort=effort, **extra)
    assert r["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"enable_thinking": switch,
                                                                     "reasoning_effort": effort, **GEN}}
    assert r["parse_context"]["chat_template_kwargs"] == r["reasoning_parser_kwargs"]["chat_template_kwargs"]
    assert len(r["token_ids"]) == lengths["on" if switch else "off"] and r["reasoning_ended"] is (not switch)
    body = {"messages": MSGS, "reasoning_effort": effort, "max_tokens": 20, "ignore_eos": True, "seed": 5, **extra}
    chat_ids = post(qwen, CHAT, return_token_ids=True, **body)["choices"][0]["token_ids"]
    req = post(qwen, "/v1/chat/completions/render", **body)
    assert post(qwen, "/inference/v1/generate", **req)["choices"][0]["token_ids"] == chat_ids


def test_chat_render_checks_the_effort(qwen):
    """The render reads a ChatCompletionRequest: an effort outside ReasoningEffort is its 400."""
    r = qwen.post("/v1/chat/completions/render", json={"model": "test-model", "messages": MSGS,
                                                        "reasoning_effort": ["high"]})
    assert r.status_code == 400 and "reasoning_effort" in r.text, r.text


def test_chat_render_kwargs_carry_the_generation_prompt_switches(qwen):
    """vLLM 0.34's ChatCompletionRequest.build_chat_params puts add_generation_prompt,
    continue_final_message and documents (when given) into the chat template kwargs, over the
    request's own (merge_kwargs: the request fields win), so the render reports them."""
    msgs = MSGS + [{"role": "assistant", "content": "Because"}]
    r = post(qwen, "/v1/chat/completions/render", messages=msgs, add_generation_prompt=False,
             continue_final_message=True, documents=[{"title": "t", "text": "x"}],
             chat_template_kwargs={"add_generation_prompt": True, "k": 1})
    assert r["reasoning_parser_kwargs"]["chat_template_kwargs"] == {
        "enable_thinking": False, "add_generation_prompt": False, "k": 1, "continue_final_message": True,
        "documents": [{"title": "t", "text": "x"}]}
    assert r["parse_context"]["chat_template_kwargs"] == r["reasoning_parser_kwargs"]["chat_template_kwargs"]
