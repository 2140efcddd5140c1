"""``POST /v1/decisions`` on real ``python app.py`` servers: the model's ``config.json``
(``--hf-config-path``) decides whether vLLM would serve it (its architecture among the Decisions
read strategies' generation models), and the OpenAI SDK's ``decisions.create`` over the network."""
from __future__ import annotations

import json

import openai
import pytest

BODY = {"model": "test-model", "input": "The sky is blue today.",
        "questions": [{"type": "predicate", "instructions": "Is it about weather?"},
                      {"type": "score", "instructions": "How sunny?", "levels": [{"label": "not"}, {"label": "very"}]}]}


def config_dir(tmp_path_factory, architecture: str) -> str:
    d = tmp_path_factory.mktemp(architecture)
    (d / "config.json").write_text(json.dumps({"architectures": [architecture], "max_position_embeddings": 4096}))
    return str(d)


def test_a_supported_architecture_answers_through_the_sdk(live_client, tmp_path_factory):
    c = live_client("--hf-config-path", config_dir(tmp_path_factory, "Qwen3ForCausalLM"), "--force-dummy-tokenizer")
    d = c.openai().decisions.create(**BODY)
    assert [a.type for a in d.answers] == ["predicate", "score"]
    assert d.usage.output_tokens == 2 and d.usage.total_tokens == d.usage.input_tokens + 2
    assert d.model_dump(exclude_unset=True) == c.post("/v1/decisions", json=BODY).json()


def test_another_architecture_is_vllms_501(live_client, tmp_path_factory):
    c = live_client("--hf-config-path", config_dir(tmp_path_factory, "LlamaForCausalLM"), "--force-dummy-tokenizer")
    r = c.post("/v1/decisions", json=BODY)
    assert r.status_code == 501 and r.json() == {"error": {
        "message": "The model does not support the Decisions API", "type": "NotImplementedError", "param": None,
        "code": 501}}
    with pytest.raises(openai.APIStatusError) as e:
        c.openai().decisions.create(**BODY)
    assert e.value.status_code == 501
    assert c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 2}).status_code == 200
