"""vLLM V1's scheduling rules (generation/engine/scheduler.py), step by step in virtual time:
the token budget, chunked prefill, running requests first, head-of-line blocking, preemption
order, no admission after a preemption, block accounting, and a preempted stream's tokens."""
from __future__ import annotations

from generation.engine.replay import ReplayResult, TraceRequest, replay
from generation.engine.scheduler import EngineRequest, Scheduler


class FixedStep:
    """1 ms per step plus 1 us per token: easy to reason about."""
    kv_bytes_per_token = 1

    def step_time(self, num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context):
        return 0.001 + 1e-6 * (num_decode + prefill_tokens)

    def frontend_time(self):
        return 0.0


def sched(**kw) -> Scheduler:
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048,
                max_model_len=4096)
    args.update(kw)
    return Scheduler(**args)


def run_step(s: Scheduler, now: float):
    plan = s.schedule(now)
    emitted = s.complete(plan, now + 0.01)
    return plan, emitted


def test_budget_chunks_a_long_prompt():
    s = sched(max_num_batched_tokens=100)
    r = EngineRequest(250, 3)
    s.add(r, 0.0)
    chunks = []
    for i in range(3):
        plan, emitted = run_step(s, i)
        chunks.append([n for _, n in plan.scheduled])
        assert emitted == ([r] if i == 2 else [])
    assert chunks == [[100], [100], [50]]
    assert (r.num_computed, r.num_output, r.blocks) == (250, 1, 16)
    plan, emitted = run_step(s, 3)       # decode: one token, no new block until 256
    assert [n for _, n in plan.scheduled] == [1] and plan.num_decode == 1 and plan.num_chunks == 0
    assert (r.num_output, r.blocks) == (2, 16)


def test_running_first_then_waiting_fcfs_within_budget():
    s = sched(max_num_batched_tokens=64)
    a = EngineRequest(32, 10)
    s.add(a, 0.0)
    run_step(s, 0)                        # a prefilled, emits its first token
    b, c = EngineRequest(40, 5), EngineRequest(40, 5)
    s.add(b, 0.5)
    s.add(c, 0.6)
    plan, _ = run_step(s, 1)
    assert [(r, n) for r, n in plan.scheduled] == [(a, 1), (b, 40), (c, 23)]
    assert plan.num_tokens == 64 and plan.num_decode == 1 and plan.num_chunks == 2


def test_long_prefill_token_threshold_caps_chunks():
    s = sched(long_prefill_token_threshold=30)
    r = EngineRequest(70, 1)
    s.add(r, 0)
    sizes = [run_step(s, i)[0].scheduled[0][1] for i in range(3)]
    assert sizes == [30, 30, 10] and r.finished


def test_max_num_seqs_caps_the_batch():
    s = sched(max_num_seqs=2)
    reqs = [EngineRequest(10, 5) for _ in range(3)]
    for r in reqs:
        s.add(r, 0)
    plan, _ = run_step(s, 0)
    assert [r for r, _ in plan.scheduled] == reqs[:2] and list(s.waiting) == reqs[2:]


def test_head_of_line_blocking_on_blocks():
    s = sched(num_gpu_blocks=10)
    big, small = EngineRequest(200, 2), EngineRequest(10, 2)     # 13 blocks do not fit in 10
    s.add(big, 0)
    s.add(small, 0)
    plan, _ = run_step(s, 0)
    assert plan.scheduled == [] and list(s.waiting) == [big, small]   # small waits behind big
    assert s.free_blocks == 10 and big.num_computed == 0


def test_preemption_takes_the_newest_running_and_blocks_admission():
    # 3 blocks of 4 tokens; two requests of 4-token prompts hold one block each, then decode
    s = sched(num_gpu_blocks=3, block_size=4, max_model_len=64)
    old, new = EngineRequest(4, 8), EngineRequest(4, 8)
    s.add(old, 0)
    s.add(new, 0)
    run_step(s, 0)                       # both prefilled: 1 block each, 1 free
    assert (old.blocks, new.blocks, s.free_blocks) == (1, 1, 1)
    late = EngineRequest(2, 2)
    s.add(late, 1)
    plan, emitted = run_step(s, 1)       # old needs block 2 (token 5): takes the free one
    # step 1: old gets the last free block; new's 5th token needs a block: new (newest) preempted
    assert plan.preempted == [new]
    assert [r for r, _ in plan.scheduled] == [old]
    assert list(s.waiting)[:2] == [new, late]          # back at the head, before the later arrival
    assert late.state == EngineRequest.WAITING          # no admission in a step with a preemption
    assert (new.num_computed, new.blocks, new.preemptions, s.num_preemptions) == (0, 0, 1, 1)


def test_a_preempted_request_frees_its_blocks_for_the_older_one():
    s = sched(num_gpu_blocks=2, block_size=4, max_model_len=64)
    a, b = EngineRequest(4, 20), EngineRequest(4, 20)
    s.add(a, 0)
    s.add(b, 0)
    run_step(s, 0)                        # one block each, none free
    assert s.free_blocks == 0
    plan = s.schedule(1)                  # a's 5th token needs a 2nd block: b (newest) preempted
    assert plan.preempted == [b] and plan.scheduled == [(a, 1)]
    assert (a.blocks, b.blocks, s.free_blocks) == (2, 0, 0)


def test_preempted_stream_emits_every_token_once_in_order():
    s = sched(num_gpu_blocks=6, block_size=4, max_model_len=64, max_num_batched_tokens=64)
    reqs = [EngineRequest(6, 12) for _ in range(3)]
    for r in reqs:
        s.add(r, 0)
    seen = {id(r): [] for r in reqs}
    t = 0.0
    for _ in range(500):
        if not s.has_work():
            break
        plan = s.schedule(t)
        t += 0.01
        for r in s.complete(plan, t):
            seen[id(r)].append(r.num_output)
    assert s.num_preemptions > 0
    for r in reqs:
        assert seen[id(r)] == list(range(1, 13))          # nothing repeated, nothing lost
        assert r.finished and r.blocks == 0
    assert s.free_blocks == 6                               # nothing leaked


def test_resume_recomputes_prompt_and_generated_tokens():
    s = sched(num_gpu_blocks=3, block_size=4, max_model_len=64, max_num_batched_tokens=64)
    old, new = EngineRequest(4, 8), EngineRequest(4, 8)
    s.add(old, 0)
    s.add(new, 0)
    run_step(s, 0)
    plan, _ = run_step(s, 1)
    assert plan.preempted == [new] and new.num_output == 1
    while new.state == EngineRequest.WAITING:
        plan = s.schedule(2)
        if new in [r for r, _ in plan.scheduled]:
            n = dict((id(r), k) for r, k in plan.scheduled)[id(new)]
            assert n == new.num_tokens == 5       # prompt 4 + the 1 token it had emitted
            break
        s.complete(plan, 2.01)


def test_aborts_release_every_block():
    s = sched(num_gpu_blocks=50, max_num_batched_tokens=64)
    reqs = [EngineRequest(100, 50) for _ in range(4)]
    for r in reqs:
        s.add(r, 0)
    for i in range(5):
        run_step(s, i)
    assert s.free_blocks < 50
    for r in reqs:
        s.abort(r)
    assert s.free_blocks == 50 and not s.running and not s.waiting
    assert all(r.state == EngineRequest.ABORTED for r in reqs)


def test_prefix_hit_is_block_aligned_and_leaves_a_token_to_compute():
    s = sched(block_size=16)
    r = EngineRequest(64, 2)
    r.prefix_hit = lambda req: 64          # the whole prompt is cached
    s.add(r, 0)
    plan, emitted = run_step(s, 0)
    assert r.cached_tokens == 48           # at most num_tokens - 1, block-aligned
    assert plan.scheduled == [(r, 16)] and emitted == [r]


def test_lora_budget_defers_other_adapters():
    s = sched(max_loras=1)
    a, b, c = EngineRequest(8, 4, lora="x"), EngineRequest(8, 4, lora="y"), EngineRequest(8, 4, lora="x")
    for r in (a, b, c):
        s.add(r, 0)
    plan, _ = run_step(s, 0)
    assert [r for r, _ in plan.scheduled] == [a, c] and list(s.waiting) == [b]


def test_replay_metric_definitions():
    s = sched(max_num_batched_tokens=8192)
    res: ReplayResult = replay(s, FixedStep(), [TraceRequest(0.0, 100, 4), TraceRequest(0.0, 100, 4)])
    a, b = res.requests
    step1 = 0.001 + 200e-6                 # both prompts in one step
    step2 = 0.001 + 2e-6                   # two decodes
    assert abs(a.first_token - step1) < 1e-12 and abs(b.first_token - step1) < 1e-12
    assert abs(a.finished_at - (step1 + 3 * step2)) < 1e-12
    assert len(res.itl) == 6 and all(abs(x - step2) < 1e-12 for x in res.itl)
    summary = res.summary()
    assert summary["requests"] == 2 and summary["preemptions"] == 0
    assert abs(summary["tpot_s"]["p50"] - step2) < 1e-12
    assert s.free_blocks == s.num_gpu_blocks


def test_replay_closed_loop_keeps_concurrency():
    s = sched(max_num_seqs=64)
    trace = [TraceRequest(0.0, 32, 8) for _ in range(20)]
    res = replay(s, FixedStep(), trace, concurrency=4)
    assert len(res.requests) == 20
    assert max(step[2] for step in res.steps) == 4


def test_async_scheduling_holds_a_finished_requests_slot_for_one_more_plan():
    """vLLM's async scheduling plans step k + 1 before step k's output is processed: a request
    that finished in step k still counts against max_num_seqs then, and its slot is free from
    step k + 2 on (or once the engine plans later than that step's end)."""
    for hold, admitted_at in ((False, 1), (True, 2)):
        s = sched(max_num_seqs=2)
        s.hold_finished_slots = hold
        a, long, b = EngineRequest(10, 1), EngineRequest(10, 50), EngineRequest(10, 1)
        for r in (a, long, b):
            s.add(r, 0.0)
        times = [0.0]
        for step in range(1, 4):
            plan = s.schedule(times[-1])
            s.complete(plan, times[-1] + 0.01)
            times.append(times[-1] + 0.01)
            if b.first_scheduled is not None:
                break
        assert a.finished_at == 0.01 and b.first_scheduled == times[admitted_at], hold
    # with nothing else running the step would be empty: no hold (vLLM plans again at once)
    s = sched(max_num_seqs=1)
    s.hold_finished_slots = True
    a, b = EngineRequest(10, 1), EngineRequest(10, 1)
    s.add(a, 0.0)
    s.add(b, 0.0)
    s.complete(s.schedule(0.0), 0.01)
    assert s.schedule(0.01).scheduled == [(b, 10)]


def test_a_remote_prefill_holds_its_blocks_while_its_kv_loads():
    """vLLM 0.34 allocates a remote prefill's blocks when it is admitted and holds them while the
    KV arrives (WAITING_FOR_REMOTE_KVS: counted as waiting, its blocks in the KV usage); it then
    runs on them; an abort meanwhile gives them back."""
    s = sched(num_gpu_blocks=100)
    r = EngineRequest(160, 4, kv_ready_at=1.0)
    s.add(r, 0.0)
    plan, _ = run_step(s, 0.0)
    assert not plan.scheduled and list(s.waiting) == [r] and not s.running
    assert s.pool.num_held == 10 and s.usage() == 0.1          # 160 tokens: 10 blocks held
    run_step(s, 0.5)
    assert s.pool.num_held == 10                                # held once, not again each step
    plan, _ = run_step(s, 1.0)
    assert [q for q, _ in plan.scheduled] == [r] and s.pool.num_held == r.blocks == 10   # its own, not twice
    gone = EngineRequest(160, 4, kv_ready_at=5.0)
    s.add(gone, 1.0)
    run_step(s, 1.1)
    held = s.pool.num_held
    s.abort(gone)
    assert s.pool.num_held == held - 10
