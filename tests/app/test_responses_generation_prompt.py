"""Responses prompts and the Responses render's chat template kwargs carry vLLM 0.34's
``ResponsesRequest.build_chat_params`` switches: ``add_generation_prompt = not continue_final``
and ``continue_final_message = continue_final``, ``continue_final`` being
``should_continue_final_message(input)`` (responses/utils.py: a last assistant ``message`` or
``reasoning`` item whose status is ``in_progress`` / ``incomplete``).  The render reported its
kwargs without them and /v1/responses always rendered a generation prompt after a partial
assistant message."""
from __future__ import annotations

import os

import pytest

from support.tokenizer_hub import MODEL

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
USER = {"role": "user", "content": "Hi"}
PARTIAL = {"type": "message", "role": "assistant", "status": "incomplete", "id": "msg_1",
           "content": [{"type": "output_text", "text": "Hello wor", "annotations": []}]}


@pytest.fixture(scope="module")
def templated(app_client, hub):
    return app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", TEMPLATE,
                      "--reasoning-parser", "qwen3", model=MODEL)


def count(api, text):
    r = api.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    return r.json()["count"]


def render(api, inp):
    r = api.post("/v1/responses/render", json={"model": MODEL, "input": inp})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("inp,text,cont", [
    ("Hi", "<user>Hi<assistant>", False),
    ([USER], "<user>Hi<assistant>", False),
    ([USER, {**PARTIAL, "status": "completed"}], "<user>Hi<assistant>Hello wor<assistant>", False),
    ([USER, PARTIAL], "<user>Hi<assistant>Hello wor", True),
    ([USER, {**PARTIAL, "status": "in_progress"}], "<user>Hi<assistant>Hello wor", True),
    # a partial reasoning item: continued as an assistant message with "" content (vLLM's parsing),
    # not transformers' "no content to continue" refusal
    ([USER, {"type": "reasoning", "id": "rs_1", "status": "incomplete", "summary": [],
             "content": [{"type": "reasoning_text", "text": "think"}]}], "<user>Hi<assistant>", True),
])
def test_responses_prompt_and_render_kwargs(templated, inp, text, cont):
    out = render(templated, inp)
    assert len(out["token_ids"]) == count(templated, text)
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"add_generation_prompt": not cont,
                                                                       "continue_final_message": cont}}
    r = templated.post("/v1/responses", json={"model": MODEL, "input": inp, "max_output_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["input_tokens"] == count(templated, text)


def test_responses_render_kwargs_keep_the_effort(templated):
    out = templated.post("/v1/responses/render", json={"model": MODEL, "input": "Hi",
                                                       "reasoning": {"effort": "low"}}).json()
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": {
        "add_generation_prompt": True, "continue_final_message": False, "reasoning_effort": "low",
        "enable_thinking": True}}
