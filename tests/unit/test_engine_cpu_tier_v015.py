"""vLLM 0.15.1's CPU KV tier (``--kv-offloading-size`` under ``--vllm-version`` before 0.21.0;
generation/engine/cpu_tier_v015.py): every full block a request computes is written, its
generated ones too; none is found, evicted or announced before the request finishes (then the end
of the step after its last, all of them in one ``BlockStored`` with the block size) or is
preempted (at once); its GPU blocks are held until then; a lookup touches all the request's
blocks; before 0.18.0 a store may evict a block it is offered.  vLLM 0.15.1's
``offloading_connector.py`` and ``v1/kv_offload/lru_manager.py``.  Virtual time, exact values."""
from __future__ import annotations

from types import SimpleNamespace

from generation.engine.block_pool import BlockPool
from generation.engine.cpu_tier_v015 import StoreAtFinishPool, Unnamed, cpu_tier_pool
from generation.engine.replay import scheduler_for
from generation.engine.scheduler import EngineRequest
from generation.kvcache.events import cpu_blocks_stored
from support.engine import make_scheduler, run_step as step


def sched(num_gpu_blocks=1000, num_cpu_blocks=8, **kw):
    pool = StoreAtFinishPool(num_gpu_blocks, num_cpu_blocks=num_cpu_blocks, block_size=16)
    return make_scheduler(num_gpu_blocks=num_gpu_blocks, pool=pool, **kw)


def hashed(prompt: int, output: int, names) -> EngineRequest:
    r = EngineRequest(prompt, output)
    r.block_hashes = list(names)
    return r


def run(s, steps: int, t0: float = 0.0):
    for k in range(steps):
        step(s, t0 + 0.01 * k)


# ---- the manager (LRUOffloadingManager) -------------------------------------------------------
def test_a_store_is_not_found_or_evicted_until_it_completes():
    pool = StoreAtFinishPool(4, num_cpu_blocks=3)
    pool.cpu_events = events = []
    assert pool.store_cpu(["a", "b"]) and (pool.cpu_inflight, pool.num_cpu_cached) == (2, 0)
    assert pool.lookup_cpu(["a", "b"], 0, 2) == 0            # being written
    assert not pool.store_cpu(["c", "d"])                     # 1 slot free, nothing ready to evict
    assert pool.cpu_inflight == 2 and events == []
    pool.complete_store(["a", "b"])
    assert (pool.lookup_cpu(["a", "b"], 0, 2), pool.num_cpu_cached, pool.cpu_inflight) == (2, 2, 0)
    assert pool.store_cpu(["c", "d"])                         # the offer's touch left b the oldest
    assert events == [("stored", ["a", "b"], 16), ("removed", ["b"])]
    assert pool.lookup_cpu(["a"], 0, 1) == 1 and pool.lookup_cpu(["b"], 0, 1) == 0


def test_before_0_18_a_store_may_evict_a_block_it_is_offered():
    kept = {}
    for protect in (False, True):
        pool = StoreAtFinishPool(4, num_cpu_blocks=2, protect_offered=protect)
        pool.store_cpu(["a", "b"])
        pool.complete_store(["a", "b"])                       # b the least recently used
        assert pool.store_cpu(["b", "c"])                     # b held, c new, no slot free
        kept[protect] = [h for h in "abc" if pool.lookup_cpu([h], 0, 1) or h in pool._unready]
    assert kept == {False: ["a", "c"], True: ["b", "c"]}


def test_a_lookup_touches_every_block_of_the_request_first():
    order = {}
    for touched in (False, True):
        pool = StoreAtFinishPool(4, num_cpu_blocks=4)
        pool.store_cpu(["a", "b", "c", "d"])
        pool.complete_store(["a", "b", "c", "d"])             # least recently used first: d c b a
        if touched:                                           # get_num_new_matched_tokens: touch, then look
            assert pool.lookup_cpu(["c", "d"], 0, 0) == 0
        pool.store_cpu(["e"])
        order[touched] = [h for h in "abcd" if not pool.lookup_cpu([h], 0, 1)]
    assert order == {False: ["d"], True: ["b"]}


def test_a_ready_block_is_evicted_where_its_last_use_left_it():
    # vLLM's complete_store does not move a block: x's blocks, touched before y's, go first
    pool = StoreAtFinishPool(4, num_cpu_blocks=4)
    pool.store_cpu(["x0", "x1"])
    pool.store_cpu(["y0", "y1"])
    pool.complete_store(["y0", "y1"])
    pool.complete_store(["x0", "x1"])
    pool.cpu_events = events = []
    pool.store_cpu(["z0", "z1", "z2"])
    assert events == [("removed", ["x1", "x0", "y1"])]


# ---- the connector through the scheduler -------------------------------------------------------
def finish_while_another_runs(s, on_release=None):
    """x (50 prompt tokens: h0 h1 h2; 20 out) next to y (no hashes, 100 out) from step 0: x's
    prompt blocks are offered after step 0, its first generated block (tokens 48-63) when it
    takes its next block (step 15); it emits its last token at step 19's end."""
    s.on_release = on_release
    s.pool.cpu_events = events = []
    x, y = hashed(50, 20, ["h0", "h1", "h2"]), EngineRequest(16, 100)
    s.add(x, 0.0)
    s.add(y, 0.0)
    seen = []
    for k in range(21):
        step(s, 0.01 * k)
        seen.append((s.pool.num_cpu_cached, s.pool.cpu_inflight, s.pool.num_held - y.blocks,
                     s.pool.lookup_cpu(["h0", "h1", "h2"], 0, 3)))
    return x, events, seen


def test_a_requests_blocks_are_ready_and_its_gpu_blocks_free_a_step_after_it_finishes():
    s = sched()
    x, events, seen = finish_while_another_runs(s)
    assert x.finished and x.finished_at == 0.2
    # (ready, written or pending, x's GPU blocks, x's hashes found): 3 written after step 0, the
    # generated block from step 15; after step 19 x is done but holds 5 GPU blocks; at step 20's end
    # all 4 are ready and its blocks free
    assert seen[0] == (0, 3, 4, 0) and seen[14] == (0, 3, 4, 0) and seen[15] == (0, 4, 5, 0)
    assert seen[19] == (0, 5, 5, 0) and seen[20] == (4, 0, 0, 3)
    assert events == [("stored", ["h0", "h1", "h2"], 16)]       # the generated block is unnamed here
    assert [type(k) for k in x.offload.keys] == [str, str, str, Unnamed]


def test_0_34s_tier_frees_at_once_and_writes_prompt_blocks_only():
    s = make_scheduler(num_cpu_blocks=8)
    x, events, seen = finish_while_another_runs(s)
    assert seen[0] == (0, 3, 4, 0) and seen[1] == (3, 0, 4, 3) and seen[19] == (3, 0, 0, 3)
    assert events == [("stored", ["h0", "h1", "h2"])]


def test_generated_blocks_are_named_and_announced_once_the_server_hashed_them():
    s = sched()

    def release(req):                       # the server hashes the generated tokens' full blocks
        req.block_hashes = req.block_hashes + ["g3"]

    x, events, seen = finish_while_another_runs(s, release)
    assert events == [("stored", ["h0", "h1", "h2", "g3"], 16)]
    assert x.offload.keys == ["h0", "h1", "h2", "g3"] and s.pool.lookup_cpu(["h0", "h1", "h2", "g3"], 0, 4) == 4


def test_with_nothing_left_running_the_stores_complete_at_once():
    s = sched()
    s.pool.cpu_events = events = []
    x = hashed(50, 1, ["h0", "h1", "h2"])
    s.add(x, 0.0)
    step(s, 0.0)
    assert (s.pool.num_cpu_cached, s.pool.cpu_inflight, s.pool.num_held) == (3, 0, 0)
    assert events == [("stored", ["h0", "h1", "h2"], 16)]


def test_generated_blocks_hold_their_slots_until_the_request_finishes():
    # a 4-block tier: x's 2 prompt blocks and 2 generated ones fill it, written until x finishes,
    # so z's 2 prompt blocks cannot be stored (nothing ready to evict) and z offers them again;
    # z, one token long, finishes having stored nothing: its GPU blocks go at once
    outcome = {}
    for pool in ("0.15.1", "0.34"):
        s = sched(num_cpu_blocks=4) if pool == "0.15.1" else make_scheduler(num_cpu_blocks=4)
        x = hashed(32, 60, ["x0", "x1"])
        s.add(x, 0.0)
        run(s, 40)                                            # x's context: 71 tokens, 4 full blocks
        z = hashed(40, 1, ["z0", "z1"])
        s.add(z, 0.40)
        step(s, 0.40)
        outcome[pool] = (z.finished, z.cpu_stored, s.pool.num_cpu_cached, s.pool.lookup_cpu(["x0", "x1"], 0, 2),
                         s.pool.num_held - x.blocks)
    assert outcome == {"0.15.1": (True, 0, 0, 0, 0), "0.34": (True, 2, 2, 2, 0)}


def test_a_preempted_requests_stores_complete_at_once():
    # 6 GPU blocks: a (1 block, then 2) and x (4 prompt blocks); x's first decode needs a block
    # and preempts x itself (the newest), whose 4 blocks are ready on the CPU in that plan
    s = sched(num_gpu_blocks=6)
    s.pool.cpu_events = events = []
    a, x = EngineRequest(16, 200), hashed(64, 100, ["h0", "h1", "h2", "h3"])
    s.add(a, 0.0)
    s.add(x, 0.0)
    step(s, 0.0)
    assert (s.pool.num_cpu_cached, s.pool.cpu_inflight) == (0, 4)
    plan = s.schedule(0.01)
    assert plan.preempted == [x] and x.blocks == 0
    assert (s.pool.num_cpu_cached, s.pool.cpu_inflight) == (4, 0)
    assert events == [("stored", ["h0", "h1", "h2", "h3"], 16)]
    assert x.cpu_stored == 4                                  # kept: not offered again when it resumes


def test_a_finished_request_that_stored_nothing_frees_its_blocks_at_once():
    s = sched()
    s.pool.store_cpu(["h0", "h1", "h2"])
    s.pool.complete_store(["h0", "h1", "h2"])
    y = EngineRequest(16, 50)
    s.add(y, 0.0)
    x = hashed(50, 1, ["h0", "h1", "h2"])                      # all 3 ready: a reload, nothing new
    s.add(x, 0.0)
    plan, _ = step(s, 0.0)
    assert plan.kv_reload_tokens == 48 and x.finished and x.offload is None
    assert s.pool.num_held == y.blocks


# ---- which tier a release gets -------------------------------------------------------------------
def test_the_tier_follows_the_vllm_version():
    def pool(version):
        p = cpu_tier_pool(100, 10, 16, version)
        return None if p is None else (p.event_block_size, p.protect_offered)
    assert [pool(v) for v in ("0.15.1", "0.17.0", "0.18.0", "0.19.1", "0.20.2", "0.21.0", "0.34.0")] == \
        [(16, False), (16, False), (16, True), (16, True), (0, True), None, None]
    assert cpu_tier_pool(100, 0, 16, "0.15.1") is None and cpu_tier_pool(100, 10, 16, "") is None
    settings = SimpleNamespace(num_gpu_blocks=101, block_size=16, max_num_seqs=8, max_num_batched_tokens=512,
                               long_prefill_token_threshold=0, num_cpu_blocks=10)
    for version, kind in (("0.15.1", StoreAtFinishPool), ("0.34.0", BlockPool)):
        s = scheduler_for(SimpleNamespace(**vars(settings), vllm_version=version), 1024)
        assert type(s.pool) is kind and (s.pool.num_blocks, s.pool.num_cpu_blocks) == (100, 10)


def test_a_completed_store_is_one_blockstored_of_all_its_hashes():
    assert cpu_blocks_stored([7, 8], 16, False) == ["BlockStored", [7, 8], None, [], 16, None, "CPU", None, None]
    assert cpu_blocks_stored([7], 0, True) == {
        "type": "BlockStored", "block_hashes": [7], "parent_block_hash": None, "token_ids": [], "block_size": 0,
        "lora_id": None, "medium": "CPU", "lora_name": None, "group_idx": 0}


def test_a_block_filed_at_one_requests_touch_sees_another_touch_later():
    """Eviction is least recently used: a block filed in the heap at a running request's touch
    (its store completed while another request ran) is found fresh again when that request
    touches it later, and an older ready block goes instead."""
    from types import SimpleNamespace as NS
    from generation.engine.cpu_tier_v015 import StoreAtFinishPool
    p = StoreAtFinishPool(100, num_cpu_blocks=6, block_size=16)
    p.cpu_events = ev = []

    def req():
        return NS(cpu_stored=0, block_hashes=["k"], offload=None, num_computed=16, blocks=1, block_ids=[])
    r, q = req(), req()
    p.store_blocks(r, 1)                 # r writes k
    p.store_blocks(q, 2)                 # q (same prefix) offers k and a generated block: touches k
    p.end_request(r, preempted=True)     # r's store completes: k ready, filed at q's touch
    p.store_cpu(["x"])
    p.complete_store(["x"])              # x ready, more recent than q's first touch
    p.store_blocks(q, 3)                 # q touches k again, after x
    p.store_cpu(["y", "z"])
    p.complete_store(["y", "z"])
    ev.clear()
    p.store_cpu(["w"])                   # one eviction: x, the least recently used
    assert [e for e in ev if e[0] == "removed"] == [("removed", ["x"])]
