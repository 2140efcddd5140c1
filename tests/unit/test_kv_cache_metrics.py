"""--kv-cache-metrics (generation/metrics/kv_residency.py), as vLLM 0.34's
``vllm/v1/core/kv_cache_metrics.py`` and its tests (``tests/v1/core/test_kv_cache_metrics.py``):
a block followed from its allocation, its prefix-cache hits, its eviction's lifetime, idle time and
reuse gaps (the last 4 accesses), seeded sampling; the block pool and scheduler calling it on the
engine's clock (virtual times here); vLLM's bounds on the sample rate; nothing without the flag."""
from __future__ import annotations

import random

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.engine.scheduler import EngineRequest, Scheduler
from generation.metrics.buckets import KV_CACHE_RESIDENCY_BUCKETS
from generation.metrics.kv_residency import KVResidency
from generation.metrics.recorder import MetricsRecorder


class Observed(list):
    def observe(self, value: float) -> None:
        self.append(value)


def collector(rate: float = 1.0, seed=0) -> KVResidency:
    return KVResidency(rate, seed, Observed(), Observed(), Observed())


def test_a_followed_block_observes_lifetime_idle_and_reuse_gaps_at_its_eviction():
    c = collector()
    c.now = 1.0
    c.allocated([5])
    assert c.blocks == {5: [1.0, 1.0, []]}
    for t in (2.0, 3.5):
        c.now = t
        c.accessed([5, 6])                 # 6 is not followed: nothing
    c.now = 6.0
    c.allocated([5])                        # handed out again: evicted, then followed anew
    assert (c.lifetime, c.idle, c.reuse_gap) == ([5.0], [2.5], [1.5])
    assert c.blocks == {5: [6.0, 6.0, []]}


def test_only_the_last_four_accesses_give_gaps():
    c = collector()
    c.allocated([0])
    for t in (1.0, 2.0, 4.0, 7.0, 11.0):    # five accesses, four kept: three gaps
        c.now = t
        c.accessed([0])
    c.now = 20.0
    c.allocated([1, 0])
    assert (c.lifetime, c.idle, c.reuse_gap) == ([20.0], [9.0], [2.0, 3.0, 4.0])


def test_a_block_without_accesses_or_never_followed_gives_no_gap():
    c = collector()
    c.now = 2.0
    c.allocated([3])
    c.now = 2.25
    c.allocated([3, 4])                      # 3 evicted: lifetime = idle, no gap; 4 never used
    assert (c.lifetime, c.idle, c.reuse_gap) == ([0.25], [0.25], [])


def test_sampling_draws_once_per_block_from_its_own_seeded_generator():
    c = collector(0.25, seed=7)
    c.allocated(range(1000))
    draw = random.Random("7-kv-cache-metrics").random
    assert sorted(c.blocks) == [b for b in range(1000) if draw() < 0.25]
    assert 200 < len(c.blocks) < 300
    again = collector(0.25, seed=7)
    again.allocated(range(1000))
    assert again.blocks == c.blocks
    c.reset()                                # /reset_prefix_cache: every followed block forgotten
    assert c.blocks == {}


def test_the_sample_rate_is_in_0_to_1():
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            collector(bad)
    assert load_config(["--kv-cache-metrics-sample", "1"]).kv_cache_metrics_sample == 1.0
    assert load_config([]).kv_cache_metrics_sample == 0.01 and load_config([]).kv_cache_metrics is False
    with pytest.raises(ConfigError) as e:                # checked with the flag off too, as vLLM's Field
        load_config(["--kv-cache-metrics-sample", "0"])
    assert e.value.param == "kv-cache-metrics-sample"
    assert "kv_cache_metrics_sample: Input should be greater than 0 [type=greater_than" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(["--kv-cache-metrics", "--kv-cache-metrics-sample", "1.5"])
    assert "Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5" in str(e.value)
    assert load_config(["--kv-cache-metrics", "--no-kv-cache-metrics"]).kv_cache_metrics is False


def test_the_recorder_makes_the_families_only_with_the_flag():
    off = MetricsRecorder(load_config([]))
    assert off.kv_residency is None
    assert b"kv_block" not in off.render()
    on = MetricsRecorder(load_config(["--kv-cache-metrics", "--seed", "3"]))
    text = on.render().decode()
    for name in ("lifetime", "idle_before_evict", "reuse_gap"):
        assert f"# TYPE vllm:kv_block_{name}_seconds histogram" in text
    assert on.kv_residency.sample_rate == 0.01
    assert on.kv_residency.lifetime.bounds == [float(b) for b in KV_CACHE_RESIDENCY_BUCKETS]


def run(s: Scheduler, req: EngineRequest, now: float) -> None:
    s.add(req, now)
    plan = s.schedule(now)
    assert [r for r, _ in plan.scheduled] == [req]
    assert s.complete(plan, now + 0.5) == [req] and req.state == EngineRequest.DONE


def test_the_pool_reports_allocations_hits_and_evictions_at_the_steps_times():
    # 4 blocks of 16 tokens, every block followed; the times are the steps' planning times
    s = Scheduler(num_gpu_blocks=4, block_size=16, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=256)
    c = s.pool.kv_metrics = collector()

    def req(tokens: int, key: str) -> EngineRequest:
        r = EngineRequest(tokens, 1)
        r.block_hashes = [f"{key}{i}" for i in range(tokens // 16)]
        return r
    run(s, req(48, "p"), 1.0)      # blocks 0, 1, 2 born at 1
    run(s, req(48, "p"), 3.0)      # hits 0, 1 (the last prompt block is computed again); 3 born at 3
    run(s, req(48, "p"), 4.0)      # hits 0, 1; block 2 (freed first) evicted and born again at 4
    assert (c.lifetime, c.idle, c.reuse_gap) == ([3.0], [3.0], [])
    run(s, req(64, "q"), 10.0)     # a new prompt takes all 4 blocks, least recently freed first: 3, 2, 1, 0
    assert c.lifetime == [3.0, 7.0, 6.0, 9.0, 9.0]
    assert c.idle == [3.0, 7.0, 6.0, 6.0, 6.0]
    assert c.reuse_gap == [1.0, 1.0]                     # blocks 1 and 0: hits at 3 and 4
    assert sorted(c.blocks) == [0, 1, 2, 3] and all(v[0] == 10.0 for v in c.blocks.values())
    assert s.pool.reset() and c.blocks == {}            # /reset_prefix_cache


def test_without_a_collector_the_pool_does_no_residency_work():
    s = Scheduler(num_gpu_blocks=4, block_size=16, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=256)
    assert s.pool.kv_metrics is None
    r = EngineRequest(48, 1)
    r.block_hashes = ["a", "b", "c"]
    run(s, r, 1.0)
    assert s.pool.num_cached == 3
