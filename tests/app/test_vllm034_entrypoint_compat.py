"""Differences found by vLLM 0.34's own entrypoint tests (``bench/vllm_entrypoint_tests.py``),
each checked against vLLM 0.34's source: ``--response-length max``, ``allowed_token_ids`` with
``logprob_token_ids``, the token-in / token-out route's 0.34 fields."""
from __future__ import annotations

import json

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "what is 1+1?"}]


def _events(text: str) -> list:
    return [json.loads(e[6:]) for e in text.strip().split("\n\n") if e.startswith("data: {")]


def test_response_length_max_runs_capped_answers_to_their_cap(app_client, api):
    c = app_client("--response-length", "max")
    for k in range(8):
        d = c.post(CHAT, json={"messages": MSG, "max_tokens": 5, "seed": k}).json()
        assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 5
        d = c.post("/v1/completions", json={"prompt": "Hello, my name is", "max_tokens": 7, "seed": k}).json()
        assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 7
    # the default (the spec's histogram) still ends some answers early
    lengths = {api.post(CHAT, json={"messages": MSG, "max_tokens": 60, "seed": k}).json()["usage"]["completion_tokens"]
               for k in range(20)}
    assert min(lengths) < 60
    # stop strings still end an answer early (every sentence has a space)
    d = c.post(CHAT, json={"messages": MSG, "max_tokens": 30, "stop": [" "]}).json()
    assert d["choices"][0]["finish_reason"] == "stop" and d["usage"]["completion_tokens"] < 30
