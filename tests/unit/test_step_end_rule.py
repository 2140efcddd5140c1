"""A step does not end more than STEP_LEAD before the previous step's tokens are out
(generation/engine/step_pacing.py ``step_end``): in virtual time (the replay's ``emission_cost``)
and on the live engine's clock (generation/engine/step_engine.py: an emission slower than the
steps holds them back, exactly; one that keeps up leaves the modelled timeline alone)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import gevent
import pytest

from generation.engine.replay import TraceRequest, replay
from generation.engine.scheduler import Scheduler
from generation.engine.step_pacing import STALL_LEAD, STEP_LEAD, step_end
from generation.engine.step_engine import StepEngine
from generation.metrics.recorder import LAG_BUCKETS, FastCounter, FastHistogram


class ConstantStep:
    """Every step takes ``dt`` seconds; no frontend delay."""
    kv_bytes_per_token = 1

    def __init__(self, dt: float):
        self.dt = dt

    def step_time(self, *_args):
        return self.dt

    def frontend_time(self):
        return 0.0


def sched() -> Scheduler:
    return Scheduler(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048,
                     max_model_len=4096)


def test_a_step_ends_at_its_modelled_end_or_lead_seconds_before_the_last_tokens_were_out():
    assert STEP_LEAD == 0.005
    assert step_end(1.0, 0.5) == 1.0
    assert step_end(1.0, 1.005) == 1.0
    assert step_end(1.0, 1.25) == pytest.approx(1.245)
    assert step_end(1.0, 1.25, lead=0.0) == 1.25


def trace(n: int, output: int) -> list:
    return [TraceRequest(0.0, 10, output) for _ in range(n)]


def test_a_replay_without_emission_cost_keeps_the_modelled_steps():
    res = replay(sched(), ConstantStep(0.01), trace(4, 6))
    assert [round(s[0], 9) for s in res.steps] == [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]
    assert res.itl == pytest.approx([0.01] * 20)
    assert res.duration == pytest.approx(0.06)


def test_an_emission_faster_than_the_steps_changes_nothing():
    # 4 tokens x 2 ms = 8 ms of sending per step, within the 10 ms of the next step
    res = replay(sched(), ConstantStep(0.01), trace(4, 6), emission_cost=0.002)
    assert res.itl == pytest.approx([0.01] * 20) and res.duration == pytest.approx(0.06)


def test_an_emission_slower_than_the_steps_sets_their_pace():
    # 4 tokens x 4 ms = 16 ms of sending per step, one step's after the other's: each step ends
    # 5 ms (STEP_LEAD) before the previous one's tokens are out, and the steps take 16 ms
    res = replay(sched(), ConstantStep(0.01), trace(4, 6), emission_cost=0.004)
    assert [round(s[0], 9) for s in res.steps] == [0.01, 0.021, 0.037, 0.053, 0.069, 0.085]
    assert res.itl == pytest.approx([0.011] * 4 + [0.016] * 16)
    ttft = [r.first_token for r in res.requests]
    assert ttft == pytest.approx([0.01] * 4)          # the first step had nothing before it to wait for
    # one request alone sends in 4 ms: the steps keep their 10 ms
    alone = replay(sched(), ConstantStep(0.01), trace(1, 6), emission_cost=0.004)
    assert alone.itl == pytest.approx([0.01] * 5)


# ---- the live engine ---------------------------------------------------------------------------

def engine_for(dt: float) -> tuple:
    metrics = SimpleNamespace(step_wait=FastCounter(), preemptions=FastCounter(),
                              iteration_tokens=FastHistogram("i", "i", (1, 10, 100), {}),
                              itl=FastHistogram("t", "t", LAG_BUCKETS, {}),
                              engine_tokens=lambda emitted: None)
    return StepEngine(sched(), ConstantStep(dt), metrics), metrics


def add(engine: StepEngine, output: int):
    seq = SimpleNamespace(request=SimpleNamespace(remote_prefill=False, remote_decode=False, priority=0),
                          pieces=["x"] * output, prompt_len=10, lora=None)
    return engine.add(seq, time.monotonic())


def run_until_done(reqs, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(r.state != r.DONE for r in reqs):
        assert time.monotonic() < deadline, "the engine did not finish"
        gevent.sleep(0.005)


def test_the_live_engine_waits_for_a_slow_emission_exactly():
    engine, metrics = engine_for(0.005)
    a, b = add(engine, 4), add(engine, 4)
    seen = []           # (step end, hub_free, sent_at) at each step's first notify: the previous step's

    def slow_send(req):
        if req is a:
            seen.append((req.last_token, engine.hub_free, engine.sent_at))
            spin = time.thread_time() + 0.012           # 12 ms of the hub's CPU "sending": > the 5 ms step
            while time.thread_time() < spin:
                pass
    a.notify = b.notify = slow_send
    run_until_done([a, b])
    assert len(seen) == 4
    for end, hub_free, sent_at in seen[1:]:
        # held back: the hub needed 12 ms of CPU per step (or, starved meanwhile, far longer)
        assert end == max(hub_free - STEP_LEAD, sent_at - STALL_LEAD)
    ends = [end for end, _, _ in seen]
    assert all(later - earlier >= 0.012 - STEP_LEAD for earlier, later in zip(ends, ends[1:]))
    assert metrics.itl.sum == pytest.approx(2 * (ends[-1] - ends[0]))     # ITL is what the streams got
    assert metrics.step_wait.value == pytest.approx(sum(later - earlier - 0.005
                                                        for earlier, later in zip(ends, ends[1:])))


def test_a_stall_of_the_process_is_caught_up_not_added():
    engine, metrics = engine_for(0.005)
    a = add(engine, 4)
    ends = []

    def stalled(req):
        ends.append(req.last_token)
        if len(ends) == 1:
            time.sleep(0.03)            # 30 ms without the CPU (the machine busy elsewhere): no hub work
    a.notify = stalled
    run_until_done([a])
    assert [later - earlier for earlier, later in zip(ends, ends[1:])] == pytest.approx([0.005] * 3, abs=1e-9)
    assert metrics.step_wait.value == 0


def test_a_long_stall_is_caught_up_only_to_stall_lead():
    engine, metrics = engine_for(0.005)
    a = add(engine, 3)
    seen = []

    def stalled(req):
        seen.append((req.last_token, engine.sent_at))
        if len(seen) == 1:
            time.sleep(0.15)            # 150 ms without the CPU: longer than STALL_LEAD
    a.notify = stalled
    run_until_done([a])
    assert STALL_LEAD == 0.1
    assert seen[1][0] == seen[1][1] - STALL_LEAD        # held back to 100 ms behind the actual sends
    assert seen[2][0] - seen[1][0] == pytest.approx(0.005, abs=1e-9)
    assert metrics.step_wait.value > 0.04


def test_the_live_engine_keeps_the_modelled_timeline_when_emission_keeps_up():
    engine, metrics = engine_for(0.05)
    a = add(engine, 3)
    ends = []
    a.notify = lambda req: ends.append(req.last_token)
    run_until_done([a])
    assert [later - earlier for earlier, later in zip(ends, ends[1:])] == pytest.approx([0.05, 0.05], abs=1e-9)
    assert metrics.step_wait.value == 0


def test_the_frontend_delay_is_a_floor_even_on_a_loop_whose_clock_is_stale():
    engine, _ = engine_for(0.005)
    engine.frontend = 0.007
    spin = time.perf_counter() + 0.03        # the hub busy for 30 ms: libev's cached clock falls behind
    while time.perf_counter() < spin:
        pass
    arrival = time.monotonic()
    req = add(engine, 2)
    req.arrival = arrival
    run_until_done([req])
    assert req.queued_at >= arrival + 0.007
    assert req.first_token >= arrival + 0.007 + 0.005


def test_a_step_is_completed_in_its_timers_lead_and_sent_at_its_end(monkeypatch):
    """The end-of-step timer fires END_LEAD early and sleeps the rest (blocking): the step's
    bookkeeping (Scheduler.complete) runs before that sleep, and the step's sends (presend)
    after it, never before the step's end."""
    from generation.engine import step_engine
    engine, _ = engine_for(0.005)
    log = []
    real_sleep, real_complete = step_engine._sleep, engine.scheduler.complete

    def sleep(seconds):
        log.append(("sleep", time.monotonic()))
        real_sleep(seconds)

    def complete(plan, end):
        log.append(("complete", time.monotonic()))
        return real_complete(plan, end)

    def presend(emitted):
        log.append(("presend", time.monotonic(), emitted[0].last_token))
        return emitted
    monkeypatch.setattr(step_engine, "_sleep", sleep)
    engine.scheduler.complete = complete
    engine.presend = presend
    reqs = [add(engine, 6), add(engine, 6)]
    run_until_done(reqs)
    steps, current = [], []
    for entry in log:
        current.append(entry[0])
        if entry[0] == "presend":
            assert entry[1] >= entry[2]                      # never before the step's end
            steps.append(current)
            current = []
    assert len(steps) == 6
    for kinds in steps:      # per step: the bookkeeping, the sleep to the end (if any), the sends
        assert kinds[0] == "complete" and set(kinds[1:-1]) <= {"sleep"}, steps
    assert any("sleep" in kinds for kinds in steps)          # the timer's lead was used
