"""``--reasoning-effort-map`` as vLLM 0.34 applies it: ``map_reasoning_effort``
(``renderers/params.py``) rewrites a request's effort in ``ChatCompletionRequest.build_chat_params``
(chat, and the chat request the Messages API converts to) and ``ResponsesRequest.build_chat_params``,
before the chat template, the reasoning parser and the derived ``enable_thinking`` see it; efforts
the map does not list pass through.  ``validate_reasoning_effort_map``
(``entrypoints/common/cli_args.py``) refuses a malformed map at start-up.  The simulator accepted
the flag and ignored it."""
from __future__ import annotations

import json
import os

import pytest

from support.tokenizer_hub import MODEL

MAP = json.dumps({"medium": "low", "none": "high"})
MSGS = [{"role": "user", "content": "Hi"}]
GEN = {"add_generation_prompt": True, "continue_final_message": False}


@pytest.fixture(scope="module")
def mapped(app_client):
    return app_client("--reasoning-parser", "qwen3", "--reasoning-effort-map", MAP)


def kwargs_of(out):
    return out["reasoning_parser_kwargs"]["chat_template_kwargs"]


def test_chat_render_reports_the_mapped_effort(mapped):
    def render(effort):
        r = mapped.post("/v1/chat/completions/render", json={"model": "test-model", "messages": MSGS,
                                                              "reasoning_effort": effort})
        assert r.status_code == 200, r.text
        return r.json()
    out = render("medium")
    assert kwargs_of(out) == {"reasoning_effort": "low", "enable_thinking": True, **GEN}
    assert out["parse_context"]["chat_template_kwargs"] == kwargs_of(out)
    # "none" mapped to "high": the switch follows the mapped effort (on)
    out = render("none")
    assert kwargs_of(out) == {"reasoning_effort": "high", "enable_thinking": True, **GEN}
    assert out["reasoning_ended"] is False
    # an effort the map does not list passes through
    assert kwargs_of(render("xhigh")) == {"reasoning_effort": "xhigh", "enable_thinking": True, **GEN}


def test_responses_and_messages_renders_map_their_efforts(mapped):
    r = mapped.post("/v1/responses/render", json={"model": "test-model", "input": "Hi",
                                                  "reasoning": {"effort": "medium"}})
    assert r.status_code == 200, r.text
    assert kwargs_of(r.json()) == {"reasoning_effort": "low", "enable_thinking": True, **GEN}
    body = {"model": "test-model", "max_tokens": 20, "messages": MSGS}
    r = mapped.post("/v1/messages/render", json={**body, "output_config": {"effort": "medium"}})
    assert r.status_code == 200, r.text
    assert kwargs_of(r.json()) == {"reasoning_effort": "low", "enable_thinking": True, **GEN}
    # a disabled thinking sends "none" (the simulated template honours it), which the map rewrites
    r = mapped.post("/v1/messages/render", json={**body, "thinking": {"type": "disabled"}})
    assert kwargs_of(r.json()) == {"reasoning_effort": "high", "enable_thinking": True, **GEN}
    assert r.json()["reasoning_ended"] is False


def test_generation_reasons_by_the_mapped_effort(app_client, mapped):
    plain = app_client("--reasoning-parser", "qwen3")
    chat = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True, "reasoning_effort": "none"}
    assert plain.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]["reasoning"] is None
    assert mapped.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]["reasoning"]
    msg = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "ignore_eos": True,
           "thinking": {"type": "disabled"}}
    assert [b["type"] for b in plain.post("/v1/messages", json=msg).json()["content"]] == ["text"]
    assert [b["type"] for b in mapped.post("/v1/messages", json=msg).json()["content"]] == ["thinking", "text"]
    resp = {"model": "test-model", "input": "Hi", "max_output_tokens": 20, "ignore_eos": True,
            "reasoning": {"effort": "none"}}
    kinds = [o["type"] for o in mapped.post("/v1/responses", json=resp).json()["output"]]
    assert kinds == ["reasoning", "message"]
    kinds = [o["type"] for o in plain.post("/v1/responses", json=resp).json()["output"]]
    assert kinds == ["message"]


SHOW = "{{ reasoning_effort }}|{{ enable_thinking }}|{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_the_chat_template_sees_the_mapped_effort(app_client, hub):
    api = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", SHOW,
                     "--reasoning-effort-map", MAP, model=MODEL)

    def tokens(text):
        return api.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["tokens"]
    for effort, text in (("medium", "low|True|Hi"), ("none", "high|True|Hi"), ("high", "high|True|Hi")):
        r = api.post("/v1/chat/completions/render", json={"model": MODEL, "messages": MSGS, "reasoning_effort": effort})
        assert r.json()["token_ids"] == tokens(text), effort
        usage = api.post("/v1/chat/completions", json={"model": MODEL, "messages": MSGS, "max_tokens": 1,
                                                       "reasoning_effort": effort}).json()["usage"]
        assert usage["prompt_tokens"] == len(tokens(text))
    n = api.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": MSGS,
                                                    "output_config": {"effort": "medium"}}).json()["input_tokens"]
    assert n == len(tokens("low|True|Hi"))


@pytest.mark.parametrize("value, message", [
    ('{"fast": "low", "quick": "low"}', "Error: --reasoning-effort-map has unknown efforts ['fast', 'quick']; keys "
                                        "must be one of ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']."),
    ('{"low": 1}', "Error: --reasoning-effort-map must be a JSON object mapping reasoning efforts to strings."),
])
def test_a_malformed_map_stops_the_start(app_client, value, message):
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError) as e:
        app_client("--reasoning-effort-map", value)
    assert str(e.value) == message
