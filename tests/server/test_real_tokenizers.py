"""Real Hugging Face tokenizers in real servers, nothing downloaded: a model name resolved
offline from ``HF_HOME`` (the ``hub`` fixture, issue 9), and a ``--tokenizer`` file built in
the test with the ``tokenizers`` library."""
from __future__ import annotations

import httpx
import pytest

from support.tokenizer_hub import MODEL, save_sentence_bpe, template_ids

MESSAGES = [{"role": "user", "content": "Hello there, how are you today?"}]


# ---- a model name, offline from HF_HOME ----------------------------------------------------------
@pytest.mark.server
def test_server_model_name_offline_from_hf_home(sim_server, hub, ref):
    import httpx
    base = sim_server(env={"HF_HOME": hub, "HF_HUB_OFFLINE": "1"}, model=MODEL)
    r = httpx.post(base + "/tokenize", json={"messages": MESSAGES}, timeout=30).json()
    assert r["tokens"] == template_ids(ref, MESSAGES)
    r = httpx.post(base + "/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                   timeout=30).json()
    assert r["usage"]["prompt_tokens"] == len(template_ids(ref, MESSAGES))


# ---- a --tokenizer file --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    return save_sentence_bpe(tmp_path_factory, extra=["Hello there, how are you today?"])


def test_prompt_tokens_come_from_the_real_tokenizer(sim_server, tokenizer_file):
    path, tok = tokenizer_file
    base = sim_server("--tokenizer", path, "--mode", "echo")
    text = "Hello there, how are you today?"
    r = httpx.post(base + "/v1/completions", json={"model": "test-model", "prompt": text}, timeout=30).json()
    n = len(tok.encode(text).ids)
    assert r["usage"]["prompt_tokens"] == n and r["usage"]["completion_tokens"] == n
    assert r["choices"][0]["text"] == text
    t = httpx.post(base + "/tokenize", json={"model": "test-model", "prompt": text}).json()
    assert t["tokens"] == tok.encode(text).ids


def test_random_mode_with_real_tokenizer(sim_server, tokenizer_file):
    path, tok = tokenizer_file
    base = sim_server("--tokenizer", path)
    r = httpx.post(base + "/v1/chat/completions", json={
        "model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
        "ignore_eos": True}, timeout=30).json()
    assert r["usage"]["completion_tokens"] == 12
    assert r["choices"][0]["message"]["content"]
