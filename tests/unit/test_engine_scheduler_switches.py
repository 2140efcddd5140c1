"""vLLM's scheduler switches in step mode (issue 28; generation/engine/scheduler.py,
block_pool.py, step_cache.py): ``--no-enable-prefix-caching`` (no lookups, no hits, nothing
cached), ``--no-enable-chunked-prefill`` (a prompt is scheduled whole or admission stops, as vLLM
V1's scheduler ``break``s), and the CPU KV tier of ``--kv-offloading-size`` (vLLM's offloading
connector: every full prompt block written through in the step that computes it, ready a step
later, least recently used out first; a hit there is reloaded and counted on the step's
``StepPlan.kv_reload_tokens``).  Virtual time, exact values."""
from __future__ import annotations

from types import SimpleNamespace

from generation.engine.block_pool import BlockPool
from generation.engine.replay import TraceRequest, replay
from generation.engine.scheduler import EngineRequest
from generation.engine.step_cache import StepPrefixCache
from support.engine import make_scheduler as sched, run_step as step


class FixedStep:
    kv_bytes_per_token = 1

    def step_time(self, *a):
        return 0.001

    def frontend_time(self):
        return 0.0


def hashed(prompt: int, output: int, names) -> EngineRequest:
    r = EngineRequest(prompt, output)
    r.block_hashes = list(names)
    return r


class FakeKV:
    def __init__(self):
        self.events, self.queries = [], []

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


# ---- --no-enable-prefix-caching -------------------------------------------------------------------
def test_without_prefix_caching_nothing_is_found_or_cached():
    for caching, hit, cached in ((True, 48, 3), (False, 0, 0)):
        s = sched(enable_prefix_caching=caching)
        first, second = hashed(50, 1, "abc"), hashed(50, 1, "abc")
        s.add(first, 0.0)
        step(s, 0.0)
        s.add(second, 0.1)
        plan, _ = step(s, 0.1)
        assert (second.cached_tokens, s.pool.num_cached, plan.prefill_tokens) == (hit, cached, 50 - hit)


def test_the_prefix_cache_facade_asks_and_counts_nothing_without_prefix_caching():
    s = sched(num_gpu_blocks=20, enable_prefix_caching=False)
    kv = FakeKV()
    cache = StepPrefixCache(s, kv)
    seq = SimpleNamespace(hashes=["a", "b", "c"], prompt_len=50, cached_tokens=None)
    r = EngineRequest(50, 1, seq=seq)
    r.block_hashes = cache.block_hashes(seq)
    assert r.block_hashes is None
    s.add(r, 0.0)
    step(s, 0.0)
    assert (kv.events, kv.queries, cache.lookup(seq)) == ([], [], 0)
    cache.start(seq)                                # an answer that never reaches the engine
    assert (seq.cached_tokens, kv.queries) == (0, [])


def test_a_replay_without_prefix_caching_recomputes_shared_prefixes():
    trace = [TraceRequest(float(i), 256, 4, "sys", 128) for i in range(3)]
    on = replay(sched(num_gpu_blocks=64), FixedStep(), trace)
    off = replay(sched(num_gpu_blocks=64, enable_prefix_caching=False), FixedStep(), trace)
    assert [r.cached_tokens for r in on.requests] == [0, 128, 128]
    assert [r.cached_tokens for r in off.requests] == [0, 0, 0]


# ---- --no-enable-chunked-prefill ----------------------------------------------------------------
def test_without_chunked_prefill_a_prompt_runs_whole_or_waits_and_blocks_the_queue():
    runs = {}
    for chunked in (True, False):
        s = sched(max_num_batched_tokens=100, enable_chunked_prefill=chunked)
        r0 = EngineRequest(10, 3)
        s.add(r0, 0.0)
        step(s, 0.0)                                 # r0's prompt and first token
        a, b = EngineRequest(100, 1), EngineRequest(10, 1)
        s.add(a, 0.01)
        s.add(b, 0.01)
        plans = [step(s, 0.01 * i)[0] for i in range(2, 6)]
        runs[chunked] = [[(r, n) for r, n in p.scheduled] for p in plans]
    # chunked: r0's decode and 99 of a's 100 tokens, then a's last token beside r0's
    assert runs[True][0][1][1] == 99 and runs[True][1][1][1] == 1
    # not chunked: a does not fit beside r0's decodes (99 tokens left), and b waits behind it
    assert [len(p) for p in runs[False]] == [1, 1, 1, 1]
    assert [n for p in runs[False][:2] for _, n in p] == [1, 1]              # r0's two decodes
    assert runs[False][2][0][1] == 100 and runs[False][3][0][1] == 10        # a whole, then b


def test_without_chunked_prefill_cache_hits_count_against_the_budget_not_the_prompt():
    s = sched(max_num_batched_tokens=100, enable_chunked_prefill=False)
    r0 = EngineRequest(10, 5)
    s.add(r0, 0.0)
    step(s, 0.0)
    a = EngineRequest(130, 1)
    a.prefix_hit = lambda req: 64                    # 66 tokens left: fits beside r0's decode
    s.add(a, 0.01)
    plan, _ = step(s, 0.01)
    assert [(r is a, n) for r, n in plan.scheduled] == [(False, 1), (True, 66)]


def test_without_chunked_prefill_the_long_prefill_threshold_still_caps_a_chunk():
    s = sched(max_num_batched_tokens=100, enable_chunked_prefill=False, long_prefill_token_threshold=40)
    a = EngineRequest(100, 1)
    s.add(a, 0.0)
    plan, _ = step(s, 0.0)
    assert plan.scheduled == [(a, 40)]


# ---- the CPU KV tier ------------------------------------------------------------------------------
def evict_into_cpu(num_cpu_blocks: int):
    """A 4-block GPU pool: x (hashes h0 h1 h2) runs and finishes (its blocks written through to the
    CPU tier, at once: nothing else runs), y (no hashes, 4 blocks) evicts x's cached blocks from
    the GPU (h2, then h1, then h0: x freed its tail first)."""
    removed = []
    s = sched(num_gpu_blocks=4, num_cpu_blocks=num_cpu_blocks)
    s.pool.on_evict = removed.extend
    x = hashed(50, 1, ["h0", "h1", "h2"])
    s.add(x, 0.0)
    step(s, 0.0)
    y = EngineRequest(64, 1)
    s.add(y, 0.1)
    step(s, 0.1)
    assert removed == ["h2", "h1", "h0"] and s.pool.num_cached == 0
    return s


def test_blocks_written_through_are_reloaded_once_the_gpu_evicted_them():
    s = evict_into_cpu(8)
    assert s.pool.num_cpu_cached == 3
    z = hashed(50, 1, ["h0", "h1", "h2"])
    s.add(z, 0.2)
    plan, emitted = step(s, 0.2)
    assert (z.cached_tokens, plan.kv_reload_tokens) == (48, 48)
    assert (plan.prefill_tokens, plan.prefill_context, plan.num_chunks) == (2, 48, 1) and emitted == [z]
    assert s.pool.num_cached == 3 and len(s.pool.lookup(["h0", "h1", "h2"], 3)) == 3     # on the GPU again
    later = sched().schedule(0.0)
    assert later.kv_reload_tokens == 0


def test_a_block_is_written_in_the_step_that_computes_it_and_ready_a_step_later():
    # vLLM: the store job of a step's blocks is built with the step (build_connector_meta), runs at
    # the next step's start (prepare_store_kv defers it) and completes at that step's end
    # (complete_store: the BlockStored of medium CPU); meanwhile a lookup does not find it
    s = sched(max_num_batched_tokens=32, num_cpu_blocks=8)
    s.pool.cpu_events = events = []
    x = hashed(80, 2, ["c0", "c1", "c2", "c3", "c4"])   # chunks of 32, 32 and 16 tokens
    s.add(x, 0.0)
    inflight, ready = [], []
    for k in range(4):
        step(s, 0.01 * k)
        inflight.append(s.pool.cpu_inflight)
        ready.append(s.pool.lookup_cpu(x.block_hashes, 0, 5))
    assert inflight == [2, 2, 1, 0] and ready == [0, 2, 4, 5]     # x's last step: nothing runs, all done
    assert events == [("stored", ["c0", "c1"]), ("stored", ["c2", "c3"]), ("stored", ["c4"])]
    assert list(s.pool._cpu) == ["c1", "c0", "c3", "c2", "c4"]   # a run's first block used last (LRU ranks)
    assert x.finished and s.pool.num_cpu_cached == 5


def test_the_cpu_tier_evicts_its_least_recently_used_blocks_for_new_ones():
    s = sched(num_gpu_blocks=4, num_cpu_blocks=4)
    s.pool.cpu_events = events = []
    for t, names, tokens in ((0.0, ["h0", "h1", "h2"], 50), (0.1, ["g0", "g1"], 40)):
        s.add(hashed(tokens, 1, names), t)
        step(s, t)
    # g0 g1 need a slot more than the 4 have: h2 goes, the least recently used (x's tail)
    assert events == [("stored", ["h0", "h1", "h2"]), ("removed", ["h2"]), ("stored", ["g0", "g1"])]
    assert list(s.pool._cpu) == ["h1", "h0", "g1", "g0"]
    z = hashed(50, 1, ["h0", "h1", "h2"])               # h0 still on the GPU, h1 on the CPU, h2 nowhere
    s.add(z, 0.2)
    plan, _ = step(s, 0.2)
    assert (z.cached_tokens, plan.kv_reload_tokens, plan.prefill_tokens) == (32, 16, 18)
    # z's reload made h1 the most recently used; z offers what it computes past it (h2: vLLM's
    # CHUNK_LEVEL policy skips the hits of a request that loaded), evicting h0, now the oldest
    assert events[3:] == [("removed", ["h0"]), ("stored", ["h2"])]
    assert list(s.pool._cpu) == ["g1", "g0", "h1", "h2"]


def test_a_request_finds_gpu_hits_and_writes_them_through_when_the_cpu_lacks_them():
    s = sched(num_cpu_blocks=2)
    s.pool.cpu_events = events = []
    x = hashed(50, 1, ["a0", "a1", "a2"])
    s.add(x, 0.0)
    step(s, 0.0)
    # 3 blocks for a tier of 2: vLLM's prepare_store cannot evict enough and stores none of them
    assert (events, s.pool.num_cpu_cached, s.pool.cpu_inflight, x.cpu_stored) == ([], 0, 0, 0)
    y = hashed(40, 1, ["a0", "a1"])
    s.add(y, 0.1)
    plan, _ = step(s, 0.1)
    # y's first step offers its GPU hits too (next_stored_chunk_idx from 0), and they fit
    assert (y.cached_tokens, plan.kv_reload_tokens, plan.prefill_tokens) == (32, 0, 8)
    assert events == [("stored", ["a0", "a1"])] and y.cpu_stored == 2


def test_without_a_cpu_tier_evicted_blocks_are_recomputed():
    s = evict_into_cpu(0)
    z = hashed(50, 1, ["h0", "h1", "h2"])
    s.add(z, 0.2)
    plan, _ = step(s, 0.2)
    assert (z.cached_tokens, plan.kv_reload_tokens, plan.prefill_tokens) == (0, 0, 50)


def test_gpu_hits_come_first_and_the_cpu_continues_the_run():
    s = evict_into_cpu(8)
    w = hashed(40, 1, ["h0", "h1"])                 # reloads h0 h1, leaves them cached on the GPU
    s.add(w, 0.2)
    assert step(s, 0.2)[0].kv_reload_tokens == 32
    kv = FakeKV()
    s.on_prefix = lambda req, hit: kv.queries.append((req.prompt_len, hit))
    z = hashed(60, 1, ["h0", "h1", "h2"])
    s.add(z, 0.3)
    plan, _ = step(s, 0.3)
    assert (z.cached_tokens, plan.kv_reload_tokens) == (48, 16)      # h0 h1 on the GPU, h2 from the CPU
    assert kv.queries == [(60, 32)]                 # the GPU prefix cache's own hits (vLLM's counter)


def test_the_cpu_tier_is_forgotten_on_reset_and_is_off_without_prefix_caching():
    s = evict_into_cpu(8)
    assert s.pool.reset() and s.pool.num_cpu_cached == 0
    s = sched(num_gpu_blocks=4, num_cpu_blocks=8, enable_prefix_caching=False)
    for names in (["h0", "h1", "h2"], [], ["h0", "h1", "h2"]):
        r = hashed(64 if not names else 50, 1, names)
        s.add(r, 0.0)
        plan, _ = step(s, 0.0)
        assert plan.kv_reload_tokens == 0 and s.pool.num_cpu_cached == 0 and s.pool.cpu_inflight == 0


def test_pool_cpu_stores_lookups_and_lru():
    pool = BlockPool(2, num_cpu_blocks=3)
    pool.cpu_events = events = []
    assert pool.store_cpu(["a", "b"]) and pool.cpu_inflight == 2
    pool.end_cpu_step()                             # written during the next step: not found yet
    assert pool.lookup_cpu(["a", "b"], 0, 2) == 0 and pool.cpu_inflight == 2
    pool.end_cpu_step()
    assert pool.lookup_cpu(["a", "b"], 0, 2) == 2 and pool.lookup_cpu(["a", "b"], 1, 1) == 1
    assert pool.lookup_cpu(["a", "b"], 0, 1) == 1 and pool.lookup_cpu(["x", "a"], 0, 2) == 0
    assert list(pool._cpu) == ["b", "a"]
    assert pool.store_cpu(["a", "c", "d"])          # a used again, never evicted for its own run: b goes
    assert list(pool._cpu) == ["a"] and pool.cpu_inflight == 2
    assert not pool.store_cpu(["e", "f"])           # 2 to evict, 1 evictable (c d are being written)
    assert pool.cpu_inflight == 2 and list(pool._cpu) == ["a"]
    pool.end_cpu_step(idle=True)                    # nothing runs: the writes are done at once
    assert list(pool._cpu) == ["a", "d", "c"] and pool.cpu_inflight == 0
    pool.touch_cpu(["a", "d"])
    assert list(pool._cpu) == ["c", "d", "a"]
    assert events == [("stored", ["a", "b"]), ("removed", ["b"]), ("stored", ["c", "d"])]
    assert pool.store_cpu(["g"]) and pool.reset() and (pool.num_cpu_cached, pool.cpu_inflight) == (0, 0)


def test_a_replay_finds_evicted_group_prefixes_in_the_cpu_tier():
    # 4 groups of a 128-token prefix (8 blocks), one request at a time, a 24-block GPU pool:
    # each group's blocks are evicted before the group comes back, unless the CPU tier keeps them
    trace = [TraceRequest(float(i), 256, 1, f"g{i % 4}", 128) for i in range(8)]
    gpu_only = replay(sched(num_gpu_blocks=24), FixedStep(), trace)
    tiered = replay(sched(num_gpu_blocks=24, num_cpu_blocks=64), FixedStep(), trace)
    assert [r.cached_tokens for r in gpu_only.requests] == [0] * 8
    assert [r.cached_tokens for r in tiered.requests] == [0] * 4 + [128] * 4


# ---- vLLM 0.19+'s full-sequence admission gate (scheduler_reserve_full_isl) ----------------------
def _run_until_idle(s, limit=500):
    t = 0.0
    for _ in range(limit):
        if not s.has_work():
            return
        step(s, t)
        t += 0.01
    raise AssertionError("the scheduler did not finish")


def test_with_the_gate_a_prompt_waits_for_room_for_all_of_it_not_its_first_chunk():
    # 20 blocks of 16 tokens, 64 tokens a step: r0 (160 + 40 tokens: 13 blocks at the end) is
    # prefilled in 3 chunks; after its last one 10 blocks are free and 32 tokens of budget left
    outcomes = {}
    for gate in (False, True):
        s = sched(num_gpu_blocks=20, max_num_batched_tokens=64, reserve_full_isl=gate)
        r0, r1 = EngineRequest(160, 40), EngineRequest(200, 10)      # r1's prompt: 13 blocks
        s.add(r0, 0.0)
        s.add(r1, 0.0)
        _run_until_idle(s)
        assert r0.finished and r1.finished
        outcomes[gate] = (s.num_preemptions, r1.first_scheduled >= r0.finished_at)
    # without the gate r1's first chunk (2 blocks) is admitted, both grow, and r1 is preempted;
    # with it (vLLM's default from 0.19) r1 waits for r0's blocks and nothing is preempted
    assert outcomes[False][0] >= 1 and not outcomes[False][1]
    assert outcomes[True] == (0, True)


def test_the_gate_counts_cached_blocks_nobody_holds_as_taken_from_the_free_ones():
    s = sched(num_gpu_blocks=12, max_num_batched_tokens=64, reserve_full_isl=True)
    first = hashed(96, 1, "abcdef")                  # 6 blocks, cached once computed
    s.add(first, 0.0)
    _run_until_idle(s)
    hog = EngineRequest(64, 200)                     # holds 4 blocks, and more as it decodes
    s.add(hog, 1.0)
    step(s, 1.0)
    again = hashed(160, 1, "abcdefghij")            # 10 blocks, 6 of them cached (free, not held)
    s.add(again, 1.01)
    plan, _ = step(s, 1.01)
    # 12 - 4 held = 8 free: the 6 cached ones are free blocks too, so the whole prompt needs
    # 4 new + 6 taken out of the free ones = 10 > 8: it waits (its first chunk alone would fit)
    assert again.state == EngineRequest.WAITING and [r for r, _ in plan.scheduled] == [hog]
    s.abort(hog)
    plan, _ = step(s, 1.02)
    assert [r for r, _ in plan.scheduled] == [again] and again.cached_tokens == 96


def test_the_version_decides_the_gate_unless_the_flag_does():
    from generation.config.cli import load_config
    from generation.config.vllm_versions import reserve_full_isl
    gate = lambda *flags: reserve_full_isl(load_config(["--latency-calculator", "step", *flags]))
    assert gate() is True                                            # 0.34.0
    assert gate("--vllm-version", "0.19.0") is True
    assert gate("--vllm-version", "0.15.1") is False                 # the sim-to-real runs' release
    assert gate("--vllm-version", "0.34.0", "--no-scheduler-reserve-full-isl") is False
    assert gate("--vllm-version", "0.15.1", "--scheduler-reserve-full-isl") is True


# ---- vLLM's null block, and a request larger than the pool --------------------------------------
def _settings(blocks, **kw):
    return SimpleNamespace(num_gpu_blocks=blocks, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048,
                           long_prefill_token_threshold=0, **kw)


def test_one_of_the_blocks_is_vllms_null_block():
    from generation.engine.replay import scheduler_for
    s = scheduler_for(_settings(10), 1024)
    assert s.free_blocks == 9                        # block 0 is never handed to a request
    r = EngineRequest(144, 1)                        # 9 blocks: all the pool has
    s.add(r, 0.0)
    plan = s.schedule(0.0)
    assert plan.scheduled == [(r, 144)] and s.usage() == 1.0      # kv_cache_usage_perc: 9 of 9


def test_a_request_larger_than_the_pool_is_never_scheduled_and_holds_the_queue():
    for gate in (False, True):
        s = sched(num_gpu_blocks=15, block_size=64, max_model_len=1024, reserve_full_isl=gate)
        big, small = EngineRequest(1000, 10), EngineRequest(100, 10)   # 16 blocks; 2
        s.add(big, 0.0)
        s.add(small, 0.0)
        for i in range(5):
            plan = s.schedule(0.01 * i)
            assert not plan.scheduled                # vLLM retries the head every step, in vain
        assert list(s.waiting) == [big, small] and s.free_blocks == 15
        s.abort(big)                                 # the client gives up: the queue moves
        _run_until_idle(s)
        assert small.finished


def test_a_request_that_outgrows_the_pool_stops_instead_of_preempting_itself_forever():
    # 900 + 124 tokens need 16 blocks of 64 at the end, the pool has 15: at 961 tokens it preempts
    # itself, and is not admitted again (without that rule it would be, to preempt itself again)
    for gate in (False, True):
        s = sched(num_gpu_blocks=15, block_size=64, max_model_len=1024, reserve_full_isl=gate)
        r = EngineRequest(900, 124)
        s.add(r, 0.0)
        t = 0.0
        for _ in range(300):
            step(s, t)
            t += 0.01
        assert r.num_output == 61 and r.preemptions == 1 and list(s.waiting) == [r]


def test_the_replay_says_which_requests_never_finished(tmp_path, capsys):
    from generation.engine.replay import main
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival": 0, "prompt_tokens": 1000, "output_tokens": 10}\n'
                     '{"arrival": 0.1, "prompt_tokens": 100, "output_tokens": 10}\n')
    import json
    assert main(["--trace", str(trace), "--num-gpu-blocks-override", "16", "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["requests"], summary["unfinished"]) == (0, 2)
    assert "2 requests never finished" in err and "needs 16 KV blocks and the cache has 15" in err
    assert main(["--trace", str(trace), "--num-gpu-blocks-override", "17", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr()[0])["unfinished"] == 0
