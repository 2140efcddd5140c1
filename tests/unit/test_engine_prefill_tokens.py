"""``Scheduler.prefill_tokens``, the running total that ``--max-num-queued-tokens`` reads per
arrival in step mode (generation/engine/admission.py): after every step, arrival and abort it
equals what admission summed over the queue before (the prompts of the waiting and running
requests without a token yet), through chunked prefills, preemptions, the priority policy and
the replay's group decoding (generation/engine/fast_decode.py).  The default mode's total:
tests/app/test_admission_totals.py."""
from __future__ import annotations

import random

import pytest

from generation.engine.scheduler import EngineRequest, Scheduler


def scanned(s: Scheduler) -> int:
    """The sum admission took before the running total (O(queue))."""
    return sum(r.prompt_len for r in s.waiting if not r.num_output) + \
        sum(r.prompt_len for r in s.running if not r.num_output)


@pytest.mark.parametrize("policy, group", [("fcfs", False), ("priority", False), ("fcfs", True)])
def test_the_running_total_is_the_queues_sum_at_every_step(policy, group):
    rng = random.Random(f"{policy}{group}")
    preempted = 0
    for case in range(6):
        s = Scheduler(num_gpu_blocks=rng.choice([30, 60, 400]), block_size=16, max_num_seqs=rng.choice([2, 8, 32]),
                      max_num_batched_tokens=rng.choice([64, 512]), max_model_len=512, policy=policy)
        s.decode_in_groups(group)
        made = [EngineRequest(rng.randint(1, 300), rng.randint(1, 60), priority=rng.randint(0, 3))
                for _ in range(60)]
        now, i = 0.0, 0
        for step in range(5000):
            while i < len(made) and rng.random() < 0.4:
                s.add(made[i], now)
                i += 1
            if rng.random() < 0.05:                     # a client leaves: queued, in prefill or decoding
                live = [*s.waiting, *s.running]
                if live:
                    s.abort(rng.choice(live))
            assert s.prefill_tokens == scanned(s), (case, step)
            plan = s.schedule(now)
            preempted += len(plan.preempted)
            now += 0.01
            if plan.scheduled or plan.num_decode:
                s.complete(plan, now)
            assert s.prefill_tokens == scanned(s), (case, step)
            if i == len(made) and not s.has_work():
                break
        s.decode_in_groups(False)
        assert s.prefill_tokens == scanned(s) == 0 and i == len(made)
    assert preempted            # the small KV caches preempted


def test_an_abort_before_the_request_reached_the_queue_counts_nothing():
    """Step mode's frontend delay: the engine aborts a request it has not queued yet (its own
    ``pending_tokens`` counts it meanwhile)."""
    s = Scheduler(num_gpu_blocks=100, block_size=16, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512)
    queued, pending = EngineRequest(100, 5), EngineRequest(50, 5)
    s.add(queued, 0.0)
    s.abort(pending)
    assert s.prefill_tokens == 100 == scanned(s)
