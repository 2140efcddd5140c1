"""--custom-histogram-buckets on /metrics, through the in-process app: the families it names take
its bounds verbatim in every histogram of the family (vLLM 0.34's ``vllm/v1/metrics/loggers.py``:
``request_tokens`` is the prompt, generation, max-generation, max_tokens and prefill-KV histograms),
the others keep vLLM's defaults; ``--fake-metrics`` arrays fill the same bounds."""
from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.metrics.buckets import PARAMS_N_BUCKETS, REQUEST_LATENCY_BUCKETS, TPOT_BUCKETS, buckets_1_2_5

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
TTFT = [0.05, 0.5, 3]
TOKENS = [4, 40, 400]
FLAGS = ("--custom-histogram-buckets", json.dumps({"time_to_first_token": TTFT, "request_tokens": TOKENS}),
         "--time-to-first-token", "150ms")
INF = float("inf")


def buckets(client, name: str) -> dict:
    """``{le: cumulative count}`` of histogram ``name`` on /metrics."""
    r = client.get("/metrics")
    assert r.status_code == 200
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            if s.name == name + "_bucket":
                out[float(s.labels["le"])] = s.value
    return out


def test_the_named_families_take_the_bounds_and_the_others_keep_theirs(app_client):
    api = app_client(*FLAGS)
    r = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 3, "ignore_eos": True},
                 timeout=30)
    assert r.status_code == 200
    prompt = r.json()["usage"]["prompt_tokens"]
    assert 4 < prompt <= 40, prompt
    # TTFT 150 ms: in (0.05, 0.5]
    assert buckets(api, "vllm:time_to_first_token_seconds") == {0.05: 0, 0.5: 1, 3.0: 1, INF: 1}
    assert buckets(api, "vllm:request_prompt_tokens") == {4.0: 0, 40.0: 1, 400.0: 1, INF: 1}
    assert buckets(api, "vllm:request_generation_tokens") == {4.0: 1, 40.0: 1, 400.0: 1, INF: 1}
    for name in ("vllm:request_max_num_generation_tokens", "vllm:request_params_max_tokens",
                 "vllm:request_prefill_kv_computed_tokens"):
        assert list(buckets(api, name)) == [*map(float, TOKENS), INF], name
    # families not named: vLLM's defaults
    assert list(buckets(api, "vllm:e2e_request_latency_seconds")) == [*REQUEST_LATENCY_BUCKETS, INF]
    assert list(buckets(api, "vllm:inter_token_latency_seconds")) == [*TPOT_BUCKETS, INF]
    assert list(buckets(api, "vllm:request_params_n")) == [*map(float, PARAMS_N_BUCKETS), INF]


def test_without_the_flag_the_defaults(app_client):
    api = app_client()
    assert list(buckets(api, "vllm:request_prompt_tokens")) == [*buckets_1_2_5(api.sim.config.max_model_len), INF]
    assert 0.001 in buckets(api, "vllm:time_to_first_token_seconds")


def test_fake_metrics_fill_the_custom_bounds(app_client):
    api = app_client("--fake-metrics", json.dumps({"ttft-buckets-values": [1, 2, 3, 4],
                                                   "e2erl-buckets-values": [5]}), *FLAGS[:2])
    assert buckets(api, "vllm:time_to_first_token_seconds") == {0.05: 1, 0.5: 3, 3.0: 6, INF: 10}
    e2e = buckets(api, "vllm:e2e_request_latency_seconds")
    assert list(e2e) == [*REQUEST_LATENCY_BUCKETS, INF] and set(e2e.values()) == {5}
    # at most one count per custom bound and +Inf, at start-up and through /admin/config
    with pytest.raises(ConfigError, match="fake time-to-first-token array is too long"):
        load_config(["--fake-metrics", json.dumps({"ttft-buckets-values": [1, 2, 3, 4, 5]}), *FLAGS[:2]])
    r = api.post("/admin/config", json={"fake-metrics": {"ttft-buckets-values": [0, 0, 0, 0, 1]}}, timeout=10)
    assert r.status_code == 400 and "array is too long" in r.text
    r = api.post("/admin/config", json={"fake-metrics": {"ttft-buckets-values": [0, 0, 0, 7]}}, timeout=10)
    assert r.status_code == 200
    assert buckets(api, "vllm:time_to_first_token_seconds") == {0.05: 0, 0.5: 0, 3.0: 0, INF: 7}
