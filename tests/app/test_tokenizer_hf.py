"""Real tokenizers by model name in-process (issue 9): a tokenizer trained in the fixture, stored
in a Hugging Face cache layout (``hub``, ``support.tokenizer_hub``), loaded offline with
``--model org/tiny``.  Token ids, usage and KV block hashes must equal what transformers
(``ref``) computes in the test for the same text and messages.
"""
from __future__ import annotations

import os

import pytest

from generation.kvcache.block_hash import BlockHasher
from support.tokenizer_hub import MODEL, template_ids

TEXT = "Hello there, how are you today? déjà vu 日本語"
MESSAGES = [{"role": "user", "content": "Hello there, how are you today?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def client(app_client, hub):
    return app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--trust-request-chat-template",
                      model=MODEL)            # the template tests send templates with requests


def test_model_name_loads_the_cached_tokenizer(client):
    assert client.sim.tokenizer.name == "hf"


def test_tokenize_prompt_equals_transformers_and_ignores_padding(client, ref):
    r = client.post("/tokenize", json={"prompt": TEXT, "return_token_strs": True}).json()
    want = ref(TEXT)["input_ids"]                      # BOS added, as vLLM's default
    assert r["tokens"] == want and r["count"] == len(want) < 128     # padding=128 in the file is off
    assert r["token_strs"] == ref.convert_ids_to_tokens(want)            # vLLM's token_strs
    r = client.post("/tokenize", json={"prompt": TEXT, "add_special_tokens": False}).json()
    assert r["tokens"] == ref(TEXT, add_special_tokens=False)["input_ids"]


def test_tokenize_messages_uses_the_chat_template(client, ref):
    r = client.post("/tokenize", json={"messages": MESSAGES}).json()
    assert r["tokens"] == template_ids(ref, MESSAGES)
    r = client.post("/tokenize", json={"messages": MESSAGES, "add_generation_prompt": False}).json()
    assert r["tokens"] == template_ids(ref, MESSAGES, add_generation_prompt=False)


def test_chat_usage_counts_templated_ids_with_tools(client, ref):
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 3,
                                                   "tools": TOOLS})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(template_ids(ref, MESSAGES, tools=TOOLS))
    r = client.post("/v1/chat/completions/render", json={"model": MODEL, "messages": MESSAGES, "tools": TOOLS})
    assert r.json()["token_ids"] == template_ids(ref, MESSAGES, tools=TOOLS)


def test_request_chat_template_and_kwargs(client, ref):
    tmpl = "{% for m in messages %}{{ greeting }} {{ m['content'] }}{% endfor %}"
    r = client.post("/v1/chat/completions/render", json={
        "model": MODEL, "messages": MESSAGES, "chat_template": tmpl, "chat_template_kwargs": {"greeting": "Hello"}})
    assert r.status_code == 200, r.text
    text = "Hello " + MESSAGES[0]["content"]
    assert r.json()["token_ids"] == ref(text, add_special_tokens=False)["input_ids"]


def test_continue_final_message_with_generation_prompt_is_400(client):
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2,
                                                   "continue_final_message": True})
    assert r.status_code == 400 and "continue_final_message" in r.json()["error"]["message"]


def test_broken_template_is_400(client):
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2,
                                                   "chat_template": "{% for %}"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("Failed to apply chat template")


def test_completion_usage_and_echo(client, ref):
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": TEXT, "max_tokens": 2, "echo": True,
                                              "logprobs": 1}).json()
    assert r["usage"]["prompt_tokens"] == len(ref(TEXT)["input_ids"])
    assert r["choices"][0]["text"].startswith(TEXT)


def test_completion_add_special_tokens_false(client, ref):
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": TEXT, "max_tokens": 2,
                                              "add_special_tokens": False}).json()
    assert r["usage"]["prompt_tokens"] == len(ref(TEXT, add_special_tokens=False)["input_ids"])


def test_detokenize_is_exact_with_multibyte(client, ref):
    ids = ref(TEXT, add_special_tokens=False)["input_ids"]
    r = client.post("/detokenize", json={"tokens": ids}).json()
    assert r["prompt"] == TEXT == ref.decode(ids)
    pieces = client.sim.tokenizer.id_pieces(ids)
    assert "".join(pieces) == TEXT and len(pieces) == len(ids)


def test_kv_block_hashes_come_from_templated_ids(app_client, hub, ref):
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--enable-kvcache", "--block-size", "8",
                   "--zmq-endpoint", "", "--hash-seed", "3", env={"POD_IP": "10.0.0.1"}, model=MODEL)
    kv = c.sim.kv_cache
    messages = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 3}]
    ids = template_ids(ref, messages)
    assert len(ids) >= 16
    r1 = c.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 2})
    r2 = c.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 2})
    assert r1.status_code == r2.status_code == 200
    want = BlockHasher("3").block_hashes(MODEL, ids, 8)
    assert set(want) <= set(kv.model_of)
    assert r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == len(want) * 8


def test_force_dummy_tokenizer_and_plain_names(app_client, hub):
    assert app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--force-dummy-tokenizer",
                      model=MODEL).sim.tokenizer.name == "simulated"
    assert app_client(model="test-model").sim.tokenizer.name == "simulated"
    # unknown repo, offline: falls back to the simulated tokenizer
    assert app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), model="org/unknown").sim.tokenizer.name \
        == "simulated"


def test_chat_template_flag_overrides(app_client, hub, ref):
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template",
                   "{% for m in messages %}{{ m['content'] }}{% endfor %}", model=MODEL)
    r = c.post("/tokenize", json={"messages": MESSAGES}).json()
    assert r["tokens"] == ref(MESSAGES[0]["content"], add_special_tokens=False)["input_ids"]
