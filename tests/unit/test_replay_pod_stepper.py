"""The replay's loop as a per-pod stepper (:class:`generation.engine.replay.PodReplay`):
:func:`replay` is a thin wrapper around it with the outputs the loop gave before the move
(figures recorded from the loop as it was, on a seeded trace with prefix groups, repeated
prompts, preemptions, the frontend, jitter, timeouts and the closed loop), and a pod stepped
from outside (advanced to each arrival, then handed it) gives the same result as the whole
trace at once, which is what the fleet (:mod:`generation.fleet`) relies on.  Unit tier,
virtual time."""
from __future__ import annotations

import os
import random

import pytest

from generation.engine.hardware import gpu_by_name, resolve_arch
from generation.engine.perf.step_model import build_step_model
from generation.engine.pod_replay import PodReplay
from generation.engine.replay import TraceRequest, replay
from generation.engine.scheduler import Scheduler


@pytest.fixture(scope="module")
def setup():
    gpu = gpu_by_name("H100")
    arch, _ = resolve_arch("meta-llama/Llama-3.1-8B-Instruct")
    rng = random.Random(7)
    t, trace = 0.0, []
    for i in range(300):
        t += rng.expovariate(40.0)
        g = rng.randrange(4)
        trace.append(TraceRequest(t, rng.randint(200, 3000), rng.randint(1, 300), f"g{g}", 512,
                                  prompt=(f"p{rng.randrange(3)}" if i % 3 == 0 else None)))
    # the profile the figures were recorded with: they test the loop, not the fitted constants
    golden = os.path.join(os.path.dirname(__file__), "..", "fixtures", "perf", "h100-golden.json")
    return build_step_model(gpu, arch, profile_path=golden), trace


def sched():
    return Scheduler(num_gpu_blocks=1500, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048,
                     max_model_len=8192)


def digest(res):
    reqs = sorted(res.requests, key=lambda r: r.arrival)
    return (len(res.requests), len(res.steps), res.preemptions, len(res.timed_out), res.duration,
            sum(res.times(r)[0] - r.arrival for r in reqs), sum(res.itl), res.frontend_busy,
            [(r.arrival, res.times(r)[0], res.times(r)[1], r.cached_tokens) for r in reqs[:2]])


def kwargs(case):
    return dict(case, rng=random.Random(1)) if "jitter" in case else dict(case)


# recorded from replay()'s loop before it moved into PodReplay (commit 62b9425)
BEFORE = [
    ({}, (300, 2484, 117, 0, 27.210354629391357, 2561.768341068247, 498.3631537823241, 1.5805459999999836,
          [(0.009782871105870106, 0.054649537922653, 0.5615646229910992, 0),
           (0.052830446253250965, 0.10214176180478476, 3.4574643502265308, 0)])),
    ({"jitter": 0.05}, (300, 2484, 117, 0, 27.158888268345336, 2558.859133831656, 497.25760902582385,
                        1.5805459999999834,
                        [(0.009782871105870106, 0.060004696253250965, 0.5716101536333917, 0),
                         (0.052830446253250965, 0.10375745454846122, 3.4793417719031665, 0)])),
    ({"timeout": 2.0}, (36, 475, 13, 264, 8.632487361177436, 30.98948277032341, 150.55542161490465,
                        1.034170999999998,
                        [(0.009782871105870106, 0.054649537922653, 0.5615646229910992, 0),
                         (0.05432416782770849, 0.10906641115434909, 0.7822772950943737, 352)])),
    # recorded again when the closed loop began sending each next request at its client's last
    # token (the frontend's output latency after the step), not at the engine's step end
    ({"concurrency": 16}, (300, 3023, 7, 0, 28.897533391778488, 20.341198956174125, 427.8882151860841,
                           1.5805460000000222,
                           [(0.0, 0.04828624999999999, 0.4556081918324416, 0),
                            (0.0, 0.25768572261693556, 0.5854713110877561, 1184)])),
    ({"frontend": 0.002, "emission_cost": 1e-05},
     (300, 2484, 117, 0, 27.206011592729087, 2559.747935262187, 498.441432323332, 0.0,
      [(0.009782871105870106, 0.048044417922653, 0.5545248311400045, 0),
       (0.052830446253250965, 0.10233792869275943, 3.4591101808330382, 0)])),
]


def close(a, b):
    """Counts exact; times to 1e-9 relative (a faster core may sum in another order)."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return b == pytest.approx(a, rel=1e-9, abs=1e-12)
    return a == b


@pytest.mark.parametrize("case,expected", BEFORE, ids=[str(c) for c, _ in BEFORE])
def test_replay_gives_what_the_loop_gave(setup, case, expected):
    st, trace = setup
    assert close(expected, digest(replay(sched(), st, trace, **kwargs(case))))


@pytest.mark.parametrize("case", [c for c, _ in BEFORE if "concurrency" not in c], ids=str)
def test_a_pod_stepped_arrival_by_arrival_equals_the_whole_trace(setup, case):
    st, trace = setup
    pod = PodReplay(sched(), st, **kwargs(case))
    for tr in trace:
        pod.advance_until(tr.arrival)
        assert pod.next_event_time() >= tr.arrival
        pod.submit(tr, tr.arrival)
    pod.advance_until()
    assert pod.next_event_time() == float("inf")
    assert digest(pod.finish()) == digest(replay(sched(), st, trace, **kwargs(case)))


@pytest.mark.parametrize("case", [c for c, _ in BEFORE], ids=str)
def test_pure_group_steps_run_in_one_loop_with_the_same_result(setup, case, monkeypatch):
    """PodReplay._run_group runs the group steps in which nothing happens to a single request
    without the per-step calls; turned off, every step goes through _complete and the
    scheduler: the same digest, and the loop ran most steps."""
    st, trace = setup
    fast = replay(sched(), st, trace, **kwargs(case))
    calls = []
    original = PodReplay._run_group

    def counting(self, t):
        before = self.steps
        ran = original(self, t)
        calls.append(self.steps - before)
        return ran

    monkeypatch.setattr(PodReplay, "_run_group", counting)
    assert digest(replay(sched(), st, trace, **kwargs(case))) == digest(fast)
    assert sum(calls) > len(fast.steps) // 3
    monkeypatch.setattr(PodReplay, "_run_group", lambda self, t: False)
    assert digest(replay(sched(), st, trace, **kwargs(case))) == digest(fast)
