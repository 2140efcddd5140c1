"""Differences found by vLLM 0.34's own entrypoint tests (``bench/vllm_entrypoint_tests.py``),
each checked against vLLM 0.34's source: ``--response-length max``, ``allowed_token_ids`` with
``logprob_token_ids``, the token-in / token-out route's 0.34 fields."""
from __future__ import annotations

import json

import gevent
import pytest

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


# ---- /inference/v1/generate (vLLM 0.34 token_in_token_out/serving.py) ---------------------------

GEN = "/inference/v1/generate"


def test_tokens_only_refuses_stop_strings_and_text_modes(app_client, api):
    c = app_client("--tokens-only")
    body = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 5, "stop": ["never"]}}
    r = c.post(GEN, json=body)
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "stop strings are not supported on a --tokens-only server because detokenization is disabled. "
                   "Check stop strings on the coordinator, or use stop_token_ids.",
        "type": "BadRequestError", "param": "stop", "code": 400}
    body["sampling_params"]["stop"] = None
    assert c.post(GEN, json=body).status_code == 200
    r = c.post(GEN, json={**body, "output_mode": "text"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "output_mode"
    assert r.json()["error"]["message"].startswith("output_mode='text' requires a tokenizer, but this server does "
                                                    "not load one (--tokens-only or --skip-tokenizer-init).")
    assert c.post(GEN, json={**body, "output_mode": "tokens"}).status_code == 200
    # the legacy unauthenticated abort path is served with --tokens-only only
    assert c.post("/abort_requests", json={"request_ids": ["x"]}).status_code == 200
    assert api.post("/abort_requests", json={"request_ids": ["x"]}).status_code == 404
    assert api.post(GEN, json={**body, "sampling_params": {"max_tokens": 2, "stop": ["x"]}}).status_code == 200


@pytest.mark.parametrize("mode", ["tokens", "text"])
def test_abort_requests_ends_a_generate_stream_with_an_abort_chunk(app_client, mode):
    c = app_client("--inter-token-latency", "50ms")
    job = gevent.spawn(c.post, GEN, json={"model": "test-model", "token_ids": [1, 2, 3], "request_id": f"ab-{mode}",
                                          "output_mode": mode, "stream": True,
                                          "sampling_params": {"max_tokens": 100, "ignore_eos": True}})
    gevent.sleep(0.2)
    assert c.post("/inference/v1/abort_requests", json={"request_ids": [f"ab-{mode}"]}).status_code == 200
    job.join(3)
    r = job.value
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    chunks = _events(r.text)
    assert {ch["output_mode"] for ch in chunks} == {mode}
    *tokens, last = chunks
    assert 1 <= len(tokens) < 100 and all(ch["choices"][0]["finish_reason"] is None for ch in tokens)
    want = {"index": 0, "finish_reason": "abort", "token_ids": []}
    if mode == "text":
        want.update(stop_reason=None, text="")
    assert last["choices"] == [want] and last["request_id"] == f"ab-{mode}"
    assert c.sim.running == 0
