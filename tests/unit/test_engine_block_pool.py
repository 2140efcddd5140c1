"""The step engine's KV blocks as vLLM V1's BlockPool keeps them (generation/engine/block_pool.py,
generation/engine/scheduler.py): shared prefixes held once, blocks cached chunk by chunk, free
blocks keeping their content until they are handed out again (least recently freed first, a
request's tail first), a preempted request finding its own blocks, and the prefix-cache facade
(generation/engine/step_cache.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from generation.engine.block_pool import BlockPool
from generation.engine.replay import TraceRequest, replay
from generation.engine.scheduler import EngineRequest
from generation.engine.step_cache import StepPrefixCache
from support.engine import make_scheduler, run_step as step


def test_fresh_blocks_go_first_in_id_order_then_the_least_recently_freed():
    evicted = []
    pool = BlockPool(6, on_evict=evicted.append)
    a = pool.allocate(3)
    b = pool.allocate(2)
    assert (a, b, pool.num_free) == ([0, 1, 2], [3, 4], 1)
    assert pool.cache(0, "h0") and pool.cache(1, "h1") and pool.cache(2, "h2")
    pool.free(a)                                   # tail first: 2, then 1, then 0
    assert pool.num_free == 4 and pool.usage() == pytest.approx(2 / 6)
    assert pool.allocate(1) == [5]                 # the never-used block first
    assert pool.allocate(2) == [2, 1] and evicted == [["h2", "h1"]]
    assert pool.lookup(["h0", "h1"], 10) == [0]    # h1 is gone: the run stops there
    with pytest.raises(ValueError):
        pool.allocate(2)


def test_holding_a_cached_free_block_takes_it_out_of_the_free_ones():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    pool.cache(blocks[0], "x")
    pool.free(blocks)
    assert pool.num_free == 4 and pool.count_free([0]) == 1
    pool.touch([0])
    pool.touch([0])                                # a second holder
    assert pool.num_free == 3 and pool.count_free([0]) == 0
    pool.free([0])
    assert pool.num_free == 3
    pool.free([0])
    assert pool.num_free == 4 and pool.is_cached("x")
    assert not pool.cache(0, "y")                  # a block has one hash
    assert pool.reset() and not pool.is_cached("x")


def test_a_hash_computed_twice_keeps_both_copies_as_vllm_does():
    """vLLM's BlockPool does not de-duplicate: a second block computed with the same hash is
    cached too (its own BlockStored); a lookup finds the oldest copy; each copy's eviction is a
    BlockRemoved, and the hash stays cached until its last copy goes (a consistency helper saw a
    stored block's parent removed while an identical block still held it)."""
    removed = []
    pool = BlockPool(3, on_evict=removed.extend)
    a, b, c = pool.allocate(3)
    assert pool.cache(a, "x") and pool.cache(b, "x") and pool.cache(c, "z")
    assert pool.num_cached == 3 and pool.lookup(["x"], 1) == [a]
    pool.free([a, b, c])                           # freed tail first: c, b, a
    assert pool.allocate(1) == [c] and removed == ["z"]
    assert pool.allocate(1) == [b] and removed == ["z", "x"]
    assert pool.is_cached("x") and pool.lookup(["x"], 1) == [a]      # the other copy still serves
    assert pool.allocate(1) == [a] and removed == ["z", "x", "x"] and not pool.is_cached("x")
    assert pool._dups == {} and pool.num_cached == 0


def test_reset_is_refused_while_blocks_are_held_unless_forced():
    pool = BlockPool(4)
    held = pool.allocate(1)
    pool.cache(held[0], "y")
    assert not pool.reset() and pool.is_cached("y")
    assert pool.reset(force=True) and pool.num_cached == 0


def hashed(prompt: int, output: int, prefix: str = "p", block_size: int = 16, unique: str = "") -> EngineRequest:
    r = EngineRequest(prompt, output)
    r.block_hashes = [(prefix if i < 4 else prefix + unique, i) for i in range(prompt // block_size)]
    return r


def sched(**kw):
    return make_scheduler(**{"num_gpu_blocks": 100, **kw})


def test_a_prefix_shared_by_running_requests_is_held_once():
    s = sched()
    first = hashed(100, 50, unique="a")            # 6 full blocks, the first 4 shared
    s.add(first, 0.0)
    step(s, 0.0)
    assert first.blocks == 7 and s.used_blocks == 7
    second = hashed(100, 50, unique="b")
    s.add(second, 0.01)
    plan, _ = step(s, 0.01)
    assert second.cached_tokens == 64 and (second, 36) in plan.scheduled
    assert second.block_ids[:4] == first.block_ids[:4]
    assert s.used_blocks == 7 + 3                  # 4 shared blocks counted once
    assert s.usage() == pytest.approx(0.10)


def test_blocks_are_cached_as_each_chunk_computes_them():
    stored = []
    s = sched(max_num_batched_tokens=40, on_cached=lambda r, a, b: stored.append((a, b)))
    r = hashed(100, 2)
    s.add(r, 0.0)
    for i in range(3):
        step(s, float(i))
    # chunks of 40, 40, 20 tokens: full blocks 2, then 5, then 6 (the last 4 tokens stay unnamed)
    assert stored == [(0, 2), (2, 5), (5, 6)]
    assert r.num_cached_blocks == 6


def test_freed_blocks_stay_cached_until_handed_out_and_eviction_is_announced():
    evicted = []
    s = sched(num_gpu_blocks=10)
    s.pool.on_evict = evicted.extend
    a = hashed(64, 1, prefix="a")                  # 4 full blocks, +1 for the first token: 5
    s.add(a, 0.0)
    step(s, 0.0)
    assert a.finished and s.free_blocks == 10
    again = hashed(64, 1, prefix="a")
    s.add(again, 1.0)
    step(s, 1.0)
    assert again.cached_tokens == 48               # num_tokens - 1, block-aligned: 3 of the 4 blocks
    big = hashed(160, 1, prefix="b")               # 10 blocks: every cached block of "a" goes
    s.add(big, 2.0)
    step(s, 2.0)
    # the block-aligned repeat recomputed block 3 (a hit stops at num_tokens - 1): a second copy
    # of its hash, cached and evicted on its own, as vLLM keeps both
    assert big.finished and sorted(evicted) == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 3)]


def test_a_preempted_request_finds_its_own_blocks_again():
    s = sched(num_gpu_blocks=8, max_num_seqs=2)
    old = hashed(64, 40, prefix="o")               # 4 prompt blocks, then 1 per 16 tokens
    new = hashed(32, 40, prefix="n")
    s.add(old, 0.0)
    s.add(new, 0.0)
    t = 0.0
    while not new.preemptions and t < 100:
        step(s, t)
        t += 1
    assert new.preemptions == 1 and new.state == EngineRequest.WAITING
    assert s.pool.lookup(new.block_hashes, 10)     # its computed blocks are still cached
    while not (old.finished and new.finished) and t < 200:
        step(s, t)
        t += 1
    assert old.num_output == new.num_output == 40
    assert s.free_blocks == 8 and s.used_blocks == 0


def test_aborts_free_shared_blocks_once_every_holder_is_gone():
    s = sched()
    a, b = hashed(100, 50, unique="a"), hashed(100, 50, unique="b")
    s.add(a, 0.0)
    step(s, 0.0)
    s.add(b, 0.01)
    step(s, 0.01)
    s.abort(a)
    assert s.used_blocks == 7 and b.blocks == 7    # the shared 4 are still b's
    s.abort(b)
    assert s.used_blocks == 0 and s.free_blocks == 100


class FakeKV:
    def __init__(self):
        self.events = []
        self.queries = []

    def block_hashes(self, seq):
        return seq.hashes

    def announce_stored(self, seq, hashes, a, b):
        self.events.append(("stored", tuple(hashes[a:b])))

    def announce_removed(self, hashes):
        self.events.append(("removed", tuple(hashes)))

    def announce_cleared(self):
        self.events.append(("cleared",))

    def count_prefix(self, queried, hit):
        self.queries.append((queried, hit))


def test_the_facade_is_the_pool_seen_as_a_prefix_cache():
    s = sched(num_gpu_blocks=20)
    kv = FakeKV()
    cache = StepPrefixCache(s, kv)
    seq = SimpleNamespace(hashes=["a", "b", "c"], prompt_len=50, cached_tokens=None)
    r = EngineRequest(50, 1, seq=seq)
    r.block_hashes = cache.block_hashes(seq)
    s.add(r, 0.0)
    step(s, 0.0)
    assert kv.events == [("stored", ("a", "b", "c"))] and kv.queries == [(50, 0)]
    assert cache.lookup(seq) == 48 and cache.usage() == 0.0
    cache.start(seq)                               # an answer that never reaches the engine
    assert seq.cached_tokens == 48 and kv.queries[-1] == (50, 48)
    assert cache.reset_prefix_cache() and kv.events[-1] == ("cleared",) and cache.lookup(seq) == 0
    cache.sleep()
    assert cache.block_hashes(seq) is None and cache.lookup(seq) == 0
    cache.wake()
    assert cache.block_hashes(seq) == ["a", "b", "c"]


def test_the_replay_shares_and_evicts_group_prefixes_as_the_server_does():
    class Step:
        kv_bytes_per_token = 1

        def step_time(self, *a):
            return 0.001

        def frontend_time(self):
            return 0.0

    trace = [TraceRequest(0.0 + i, 256, 4, "sys", 128) for i in range(3)]
    s = sched(num_gpu_blocks=64)
    result = replay(s, Step(), trace)
    assert [r.cached_tokens for r in result.requests] == [0, 128, 128]
    assert s.free_blocks == 64
