"""--kv-cache-metrics through the in-process app in step mode: a shared prefix hit twice, then
prompts that take the whole (small) KV cache, evict every block; the three residency families
(vLLM 0.34's ``vllm/v1/metrics/loggers.py``: names, help, buckets, labels) count one lifetime and
one idle time per evicted block and one gap per pair of hits; without the flag they are absent."""
from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from generation.metrics.buckets import KV_CACHE_RESIDENCY_BUCKETS
from support import metric, scrape

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# 16-token blocks; 8 blocks, 7 for tokens (vLLM's null block)
SMALL = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--vllm-version", "0.33.0",
         "--num-gpu-blocks-override", "8", "--max-model-len", "128")
NAMES = ("vllm:kv_block_lifetime_seconds", "vllm:kv_block_idle_before_evict_seconds", "vllm:kv_block_reuse_gap_seconds")


def complete(c, first: int, tokens: int) -> None:
    r = c.post("/v1/completions", json={"prompt": list(range(first, first + tokens)), "max_tokens": 1,
                                        "ignore_eos": True})
    assert r.status_code == 200, r.text


def test_evictions_fill_the_three_families(app_client):
    c = app_client(*SMALL, "--kv-cache-metrics", "--kv-cache-metrics-sample", "1", model=LLAMA)
    pool = c.sim.engine.scheduler.pool
    assert pool.kv_metrics is c.sim.metrics.kv_residency
    for _ in range(3):
        complete(c, 100, 48)     # blocks 0-2; then hits on 0 and 1 (twice), and blocks 3 and 4
    complete(c, 1000, 100)       # 7 blocks: 5 and 6, then 2, 3, 4, 1, 0 evicted
    complete(c, 2000, 100)       # the 7 blocks again: all evicted
    m = scrape(c)
    lbl = {"model_name": LLAMA, "engine": "0"}
    assert metric(m, "vllm:kv_block_lifetime_seconds_count", **lbl) == 12
    assert metric(m, "vllm:kv_block_idle_before_evict_seconds_count", **lbl) == 12
    assert metric(m, "vllm:kv_block_reuse_gap_seconds_count", **lbl) == 2       # blocks 0 and 1: two hits each
    lifetime = metric(m, "vllm:kv_block_lifetime_seconds_sum")
    idle = metric(m, "vllm:kv_block_idle_before_evict_seconds_sum")
    gaps = metric(m, "vllm:kv_block_reuse_gap_seconds_sum")
    # a block's lifetime is its idle time plus the time to its last hit, which covers its gaps
    assert 0 < idle < lifetime and 0 < gaps <= lifetime - idle + 1e-9
    assert len(c.sim.metrics.kv_residency.blocks) == 7       # the last prompt's blocks, followed

    text = c.get("/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in NAMES:
        fam = fams[name]
        assert fam.type == "histogram"
        assert fam.documentation.endswith("Sampled metrics (controlled by --kv-cache-metrics-sample).")
        les = [float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")]
        assert les == [*map(float, KV_CACHE_RESIDENCY_BUCKETS), float("inf")]
    # in vLLM's order, after the other engine histograms
    assert text.index("vllm:request_num_preemptions_bucket") < text.index(NAMES[0]) < text.index(NAMES[1]) \
        < text.index(NAMES[2])

    from prometheus_client import generate_latest     # the fast render is prometheus_client's text

    def lines(body: bytes) -> list:
        return sorted(line for line in body.decode().splitlines()      # the process' own figures move
                      if not line.startswith(("process_", "python_gc_")))
    assert lines(c.sim.metrics.render()) == lines(generate_latest(c.sim.metrics.registry))


def test_without_the_flag_the_families_are_absent(app_client):
    c = app_client(*SMALL, model=LLAMA)
    complete(c, 100, 48)
    assert c.sim.engine.scheduler.pool.kv_metrics is None and c.sim.metrics.kv_residency is None
    assert "kv_block" not in c.get("/metrics").text


def test_without_prefix_caching_or_steps_the_families_stay_empty(app_client):
    # vLLM's pool without prefix caching never evicts; the default mode has no block pool
    for c in (app_client(*SMALL, "--no-enable-prefix-caching", "--kv-cache-metrics", "--kv-cache-metrics-sample", "1",
                         model=LLAMA),
              app_client("--kv-cache-metrics")):
        complete(c, 100, 48)
        complete(c, 1000, 100)
        m = scrape(c)
        for name in NAMES:
            assert metric(m, name + "_count") == 0
    assert app_client(*SMALL, "--no-enable-prefix-caching", "--kv-cache-metrics", model=LLAMA) \
        .sim.engine.scheduler.pool.kv_metrics is None


def test_custom_buckets_apply_to_the_residency_family(app_client):
    c = app_client("--kv-cache-metrics", "--custom-histogram-buckets", json.dumps({"kv_cache_residency": [0.5, 5]}))
    fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    for name in NAMES:
        assert [s.labels["le"] for s in fams[name].samples if s.name.endswith("_bucket")] == ["0.5", "5.0", "+Inf"]
