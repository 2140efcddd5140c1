"""Issue 22's metric items in the default engine (no ``--enable-kvcache``, no step engine):
``vllm:kv_cache_usage_perc`` reports the blocks the running sequences' tokens fill, as vLLM
reports blocks held by running requests, and ``vllm:request_num_preemptions`` is observed once
per finished request (0: nothing is preempted without engine steps)."""
from __future__ import annotations

import gevent

from support import metric, scrape

PROMPT = list(range(100, 140))          # 40 prompt tokens: 3 blocks of 16


def test_kv_cache_usage_counts_the_running_sequences_blocks(app_client):
    api = app_client("--time-to-first-token", "300ms", "--kv-cache-size", "100", "--block-size", "16")
    assert metric(scrape(api), "vllm:kv_cache_usage_perc") == 0.0
    body = {"model": "test-model", "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True}
    calls = [gevent.spawn(api.post, "/v1/completions", json=body) for _ in range(2)]
    gevent.sleep(0.1)                   # both admitted, neither has its first token yet
    assert metric(scrape(api), "vllm:kv_cache_usage_perc") == 0.06
    gevent.joinall(calls, timeout=5)
    assert all(c.value.status_code == 200 for c in calls)
    text = scrape(api)
    assert metric(text, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(text, "vllm:request_num_preemptions_count") == 2
    assert metric(text, "vllm:request_num_preemptions_sum") == 0
