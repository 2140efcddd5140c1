"""vLLM's ``vllm:kv_offload_*`` families (``offloading/metrics.py``) through the in-process app in
step mode with a small CPU tier: a prompt stored, evicted from the GPU by another, then reloaded
from the CPU; the store and load counters and histograms are the blocks the pool moved x a
block's bytes (Llama-3.1-8B, BF16, 16-token blocks: 16 x 128 KiB = 2 MiB), exactly; a refused
store counts one allocation failure; without a tier the families are absent; each release shows
its own families."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from support import metric, metric_values, scrape

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
BLOCK = 16 * 131072                 # bytes of a 16-token block, tp 1
PCIE = 25e9                         # bytes/s (generation.engine.perf.step_model.PCIE_BANDWIDTH)
# 16-token blocks; 8 GPU blocks (7 for tokens); a CPU tier of 64 MiB: 32 blocks
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--block-size", "16",
        "--num-gpu-blocks-override", "8", "--max-model-len", "128")
TIER = ("--kv-offloading-size", "0.0625")
LBL = {"model_name": LLAMA, "engine": "0"}


def complete(c, first: int, tokens: int) -> None:
    r = c.post("/v1/completions", json={"prompt": list(range(first, first + tokens)), "max_tokens": 1,
                                        "ignore_eos": True})
    assert r.status_code == 200, r.text


def evict_and_reload(c) -> None:
    complete(c, 100, 48)        # 3 blocks computed, stored: one job of 3
    complete(c, 1000, 100)      # 6 full prompt blocks stored (one job), the GPU's 7 blocks taken: A evicted
    complete(c, 100, 48)        # A's first 2 blocks reloaded from the CPU (one job; its last block is computed)


def families(c) -> dict:
    """The families of ``/metrics`` but the ``_created`` gauges (the 0.0.4 text's own families)."""
    return {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)
            if not f.name.endswith("_created")}


def test_stores_and_loads_are_the_blocks_moved(app_client):
    c = app_client(*STEP, *TIER, model=LLAMA)
    pool = c.sim.engine.scheduler.pool
    assert pool.num_cpu_blocks == 32 and pool.kv_offload is c.sim.metrics.kv_offload
    evict_and_reload(c)
    assert c.sim.engine.scheduler.running == [] and pool.cpu_inflight == 0
    m = scrape(c)
    store, load = 9 * BLOCK, 2 * BLOCK
    assert metric(m, "vllm:kv_offload_store_bytes_total", **LBL) == store == 18874368
    assert metric(m, "vllm:kv_offload_load_bytes_total", **LBL) == load == 4194304
    assert metric(m, "vllm:kv_offload_store_time_total", **LBL) == store / PCIE
    assert metric(m, "vllm:kv_offload_load_time_total", **LBL) == load / PCIE
    assert metric(m, "vllm:kv_offload_store_size_count", **LBL) == 2                # two jobs: 3 and 6 blocks
    assert metric(m, "vllm:kv_offload_store_size_sum", **LBL) == store
    assert metric(m, "vllm:kv_offload_store_size_bucket", le="1e+07", **LBL) == 1    # 6 MiB
    assert metric(m, "vllm:kv_offload_store_size_bucket", le="2e+07", **LBL) == 2    # 12 MiB
    assert metric(m, "vllm:kv_offload_load_size_count", **LBL) == 1
    assert metric(m, "vllm:kv_offload_load_size_sum", **LBL) == load
    # the deprecated families carry the same values under transfer_type
    for t, total in (("GPU_to_CPU", store), ("CPU_to_GPU", load)):
        assert metric(m, "vllm:kv_offload_total_bytes_total", transfer_type=t, **LBL) == total
        assert metric(m, "vllm:kv_offload_size_sum", transfer_type=t, **LBL) == total
        assert metric(m, "vllm:kv_offload_total_time_total", transfer_type=t, **LBL) == total / PCIE
    # the reload is what the step model timed, and the external prefix-cache hits count it
    assert metric(m, "vllm:external_prefix_cache_hits_total", **LBL) == 32
    assert metric(m, "vllm:kv_offload_config_info", cpu_num_chunks="32", cpu_blocks_per_chunk="1",
                  cpu_kv_cache_size_bytes=str(32 * BLOCK), cpu_kv_cache_size_tokens="512", **LBL) == 1
    assert not metric_values(m, "vllm:kv_offload_allocation_failure_total")     # no refusal: no series

    fams = families(c)
    for name in ("vllm:kv_offload_lookup_sync_delay_seconds", "vllm:kv_offload_lookup_async_delay_seconds"):
        assert fams[name].type == "histogram" and fams[name].samples == []    # registered, never observed
    size = fams["vllm:kv_offload_store_size"]
    les = [float(s.labels["le"]) for s in size.samples if s.name.endswith("_bucket")]
    assert les == [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6, float("inf")]
    text = c.get("/metrics").text
    for name in ("vllm:kv_offload_store_size_created{", "vllm:kv_offload_load_bytes_created{"):
        assert name in text                     # as prometheus_client's series have them
    # vLLM 0.34's order: the connector's families before the scheduler's, deprecated ones first
    order = [n for n in fams if n.startswith("vllm:")]
    assert order[:13] == ["vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time", "vllm:kv_offload_size",
                          "vllm:kv_offload_load_bytes", "vllm:kv_offload_load_time", "vllm:kv_offload_load_size",
                          "vllm:kv_offload_store_bytes", "vllm:kv_offload_store_time", "vllm:kv_offload_store_size",
                          "vllm:kv_offload_lookup_sync_delay_seconds", "vllm:kv_offload_lookup_async_delay_seconds",
                          "vllm:kv_offload_allocation_failure", "vllm:kv_offload_config_info"]
    assert order[13] == "vllm:num_requests_running"


def test_a_refused_store_is_an_allocation_failure(app_client):
    # a tier of 2 blocks (4 MiB): a 3-block prompt's store does not fit, and nothing can be evicted;
    # offered in its step, and again when it finishes (vLLM's request_finished leaves its last
    # store to the next step's _build_store_jobs): two refusals
    c = app_client(*STEP, "--kv-offloading-size", str(2 * BLOCK / 2**30), model=LLAMA)
    assert c.sim.engine.scheduler.pool.num_cpu_blocks == 2
    complete(c, 100, 48)
    m = scrape(c)
    assert metric(m, "vllm:kv_offload_allocation_failure_total", **LBL) == 2
    assert not metric_values(m, "vllm:kv_offload_store_bytes_total")
    assert metric(m, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU", **LBL) == 0


def test_without_a_cpu_tier_the_families_are_absent(app_client):
    c = app_client(*STEP, model=LLAMA)
    assert c.sim.metrics.kv_offload is None and c.sim.engine.scheduler.pool.kv_offload is None
    complete(c, 100, 48)
    assert not [n for n in families(c) if n.startswith("vllm:kv_offload")]


def test_without_steps_the_families_are_registered_and_idle(app_client):
    c = app_client("--kv-offloading-size", "1", model=LLAMA)
    complete(c, 100, 48)
    m = scrape(c)
    assert metric(m, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU", **LBL) == 0
    assert not metric_values(m, "vllm:kv_offload_config_info")       # no engine step
    assert "vllm:kv_offload_store_bytes" in families(c)


def test_each_release_shows_its_families(app_client):
    # 0.20.0: vLLM 0.15.1's tier (stores counted when accepted), only the deprecated families,
    # whose series appear with their first transfer
    c = app_client(*STEP, *TIER, "--vllm-version", "0.20.0", model=LLAMA)
    assert not [n for n in families(c) if n.startswith("vllm:kv_offload")][3:]
    assert not metric_values(scrape(c), "vllm:kv_offload_total_bytes_total")
    evict_and_reload(c)
    m = scrape(c)
    assert metric(m, "vllm:kv_offload_total_bytes_total", transfer_type="CPU_to_GPU", **LBL) == 2 * BLOCK
    assert metric(m, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU", **LBL) == 9 * BLOCK
    assert metric(m, "vllm:kv_offload_size_count", transfer_type="GPU_to_CPU", **LBL) == 2
    assert [n for n in families(c) if n.startswith("vllm:kv_offload")] == [
        "vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time", "vllm:kv_offload_size"]
    # 0.24.0: the flat families too; 0.26.0: the connector's; 0.34.0: the config info
    for version, count in (("0.24.0", 9), ("0.26.0", 12), ("0.33.0", 12), ("0.34.0", 13)):
        c = app_client(*STEP, *TIER, "--vllm-version", version, model=LLAMA)
        assert len([n for n in families(c) if n.startswith("vllm:kv_offload")]) == count, version


def test_tensor_parallel_ranks_each_report_their_share(app_client):
    # tp 2: each rank holds 4 of the 8 KV heads, 1 MiB of a block; the tier (64 MiB over both) is
    # still 32 blocks; a job's bytes are both ranks', its sizes one per rank
    c = app_client(*STEP, *TIER, "--tensor-parallel-size", "2", model=LLAMA)
    assert c.sim.engine.scheduler.pool.num_cpu_blocks == 32
    evict_and_reload(c)
    m = scrape(c)
    assert metric(m, "vllm:kv_offload_store_bytes_total", **LBL) == 9 * BLOCK
    assert metric(m, "vllm:kv_offload_store_size_count", **LBL) == 4
    assert metric(m, "vllm:kv_offload_load_bytes_total", **LBL) == 2 * BLOCK
    assert metric(m, "vllm:kv_offload_load_size_bucket", le="1e+06", **LBL) == 0
    assert metric(m, "vllm:kv_offload_load_size_bucket", le="5e+06", **LBL) == 2      # two ranks' 2 MiB
    assert metric(m, "vllm:kv_offload_load_time_total", **LBL) == 2 * (BLOCK / PCIE)
