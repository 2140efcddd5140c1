"""generation.metrics.kv_offload: a job's bytes, seconds and sizes over the workers, the config
info's labels, when the families exist, and the text: the same as prometheus_client's own
Counter / Histogram / Gauge objects give when driven as vLLM 0.34's ``OffloadPromMetrics`` drives
them (``offloading/metrics.py``), ``_created`` values aside."""
from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from generation.metrics.kv_offload import (CONFIG_INFO, CONNECTOR, DEPRECATED, FLAT, LOOKUP_ASYNC_BUCKETS,
                                           LOOKUP_SYNC_BUCKETS, TRANSFER_SIZE_BUCKETS, KVOffloadMetrics, config_info,
                                           configured, transfer)

MIB = 1 << 20
LBL = {"model_name": "m", "engine": "0"}
ALL = {DEPRECATED: True, FLAT: True, CONNECTOR: True, CONFIG_INFO: True}


def test_a_job_is_every_workers_share():
    # 3 blocks of 2 MiB per worker, 2 workers at 25 GB/s each: 12 MiB in all, two 6 MiB sizes
    assert transfer(3, 2 * MIB, 2, 25e9) == (12 * MIB, 2 * (6 * MIB / 25e9), 6 * MIB)
    assert transfer(1, 2 * MIB, 1, 25e9) == (2 * MIB, 2 * MIB / 25e9, 2 * MIB)


def test_config_info_labels():
    # 32 blocks of 16 tokens, 2 MiB per worker over 2 workers; 128-token requests take 8 blocks
    assert config_info(32, 16, 2 * MIB, 2, 128) == {
        "cpu_num_chunks": "32", "cpu_blocks_per_chunk": "1", "cpu_kv_cache_size_bytes": str(128 * MIB),
        "cpu_kv_cache_size_tokens": "512"}
    assert config_info(5, 64, MIB, 1, 100)["cpu_kv_cache_size_tokens"] == str(5 * 100 // 2)
    assert config_info(5, 64, MIB, 1, 0)["cpu_kv_cache_size_tokens"] == "None"


def test_configured_by_a_cpu_tier():
    assert configured(SimpleNamespace(kv_offloading_size=1.0, latency_calculator="constant", cpu_offload_gb=0))
    assert configured(SimpleNamespace(kv_offloading_size=None, latency_calculator="step", cpu_offload_gb=2))
    # --cpu-offload-gb is vLLM's weight offload: a KV tier only in step mode's reading
    assert not configured(SimpleNamespace(kv_offloading_size=None, latency_calculator="constant", cpu_offload_gb=2))
    assert not configured(SimpleNamespace(kv_offloading_size=None, latency_calculator="step", cpu_offload_gb=0))


def attached(shown=ALL, tp=2, steps=1):
    m = KVOffloadMetrics(LBL, shown)
    pool = SimpleNamespace(num_cpu_blocks=32, kv_offload=None)
    m.attach(pool, SimpleNamespace(steps=steps), 16, 2 * MIB, tp, 128, float(1 << 31))
    assert pool.kv_offload is m
    return m


def render(collector) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return generate_latest(reg).decode()


def without_created(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if "_created" not in line)


def vllm_like(jobs, failures: int, tp: int) -> str:
    """vLLM 0.34's OffloadPromMetrics with one engine, driven by the workers' reports of ``jobs``
    (``(direction, blocks)``), with prometheus_client's own classes."""
    reg = CollectorRegistry()
    names = ["model_name", "engine"]
    old_bytes = Counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                        names + ["transfer_type"], registry=reg)
    old_time = Counter("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations",
                       names + ["transfer_type"], registry=reg)
    old_size = Histogram("vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes.",
                         names + ["transfer_type"], buckets=TRANSFER_SIZE_BUCKETS, registry=reg)
    for t in ("CPU_to_GPU", "GPU_to_CPU"):
        for metric in (old_bytes, old_time, old_size):
            metric.labels("m", "0", t)
    flat = {}
    for what, word, prep in (("load", "loaded", "from offload storage to GPU"),
                             ("store", "stored", "from GPU to offload storage")):
        flat[what] = (
            Counter(f"vllm:kv_offload_{what}_bytes", f"Total bytes {word} {prep}.", names, registry=reg),
            Counter(f"vllm:kv_offload_{what}_time", f"Total {what} time {prep}, in seconds.", names, registry=reg),
            Histogram(f"vllm:kv_offload_{what}_size", f"Histogram of KV offload {what} operation size, in bytes.",
                      names, buckets=TRANSFER_SIZE_BUCKETS, registry=reg))
    Histogram("vllm:kv_offload_lookup_sync_delay_seconds",
              "Histogram of the time spent in a single offload lookup call, in seconds.", names,
              buckets=LOOKUP_SYNC_BUCKETS, registry=reg)
    Histogram("vllm:kv_offload_lookup_async_delay_seconds",
              "Histogram of time between a request's offload lookup first deferring and the following lookup "
              "resolving, or request finish, in seconds.", names, buckets=LOOKUP_ASYNC_BUCKETS, registry=reg)
    failed = Counter("vllm:kv_offload_allocation_failure", "Number of KV offload store allocation attempts that failed.",
                     names, registry=reg)
    from generation.metrics.kv_offload import _INFO_DOC, INFO_LABELS
    info = Gauge(CONFIG_INFO, _INFO_DOC, names + list(INFO_LABELS), registry=reg)
    info.labels("m", "0", *config_info(32, 16, 2 * MIB, tp, 128).values()).set(1)
    for what, blocks in jobs:
        t = "CPU_to_GPU" if what == "load" else "GPU_to_CPU"
        for _ in range(tp):                                 # one report per worker, summed
            size = blocks * 2 * MIB
            seconds = size / float(1 << 31)
            flat[what][0].labels("m", "0").inc(size)
            flat[what][1].labels("m", "0").inc(seconds)
            flat[what][2].labels("m", "0").observe(size)
            old_bytes.labels("m", "0", t).inc(size)
            old_time.labels("m", "0", t).inc(seconds)
            old_size.labels("m", "0", t).observe(size)
    for _ in range(failures):
        failed.labels("m", "0").inc()
    return generate_latest(reg).decode()


def test_the_text_is_vllms():
    m = attached()
    jobs = [("store", 3), ("store", 6), ("load", 2), ("store", 1)]
    for what, blocks in jobs:
        (m.stored if what == "store" else m.loaded)(blocks)
    m.refused()
    m.refused()
    assert without_created(render(m)) == without_created(vllm_like(jobs, 2, tp=2))
    text = render(m)
    # the series made: the deprecated at start-up, the flat ones and the failures on first use
    assert text.count("_created{") == 2 * 3 + 2 * 3 + 1


def test_before_0_24_the_deprecated_series_come_with_their_first_transfer():
    m = attached({DEPRECATED: True, FLAT: False, CONNECTOR: False, CONFIG_INFO: False}, tp=1)
    text = render(m)
    assert "vllm:kv_offload_total_bytes_total{" not in text and "vllm:kv_offload_load" not in text
    m.stored(2)
    text = render(m)
    assert 'transfer_type="GPU_to_CPU"} 4.194304e+06' in text and 'transfer_type="CPU_to_GPU"' not in text
    assert "vllm:kv_offload_allocation_failure" not in text and CONFIG_INFO not in text


def test_config_info_from_the_first_step():
    m = attached(steps=0)
    assert f"{CONFIG_INFO}{{" not in render(m)
    m.engine.steps = 1
    assert 'cpu_kv_cache_size_tokens="512"' in render(m)

