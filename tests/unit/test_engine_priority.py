"""``--scheduling-policy priority`` in the step engine's scheduler (generation/engine/scheduler.py),
in virtual time: the waiting queue by (priority, arrival), a preempted request back in its place
by key, and the victim of a preemption chosen by the largest (priority, arrival), even when it was
scheduled earlier in the same step, as vLLM V1's scheduler does."""
from __future__ import annotations

import pytest

from generation.engine.scheduler import EngineRequest, PriorityQueue
from support.engine import make_scheduler, run_step as step


def sched(**kw):
    return make_scheduler(**{"policy": "priority", **kw})


def test_the_queue_keeps_priority_then_arrival_order():
    q = PriorityQueue()
    a, b, c, d = (EngineRequest(10, 1, arrival=t, priority=p) for t, p in ((0, 5), (1, 0), (2, 5), (3, -1)))
    for r in (a, b, c, d):
        q.append(r)
    assert list(q) == [d, b, a, c]
    assert q.popleft() is d and q[0] is b
    q.appendleft(d)                      # put back: by key, not at the head
    q.extendleft([a])
    assert list(q) == [d, b, a, a, c]


def test_waiting_requests_are_admitted_by_priority():
    s = sched(max_num_seqs=1)
    low, high, mid = (EngineRequest(32, 2, arrival=t, priority=p) for t, p in ((0.0, 9), (0.1, 1), (0.2, 5)))
    for r in (low, high, mid):
        s.add(r, r.arrival)
    order = []
    t = 1.0
    while len(order) < 3:
        plan, _ = step(s, t)
        order += [r for r, _ in plan.scheduled if r.first_scheduled == t]
        t += 1
    assert order == [high, mid, low]


def test_fcfs_keeps_arrival_order_whatever_the_priority():
    s = sched(max_num_seqs=1, policy="fcfs")
    first, second = EngineRequest(32, 1, arrival=0.0, priority=9), EngineRequest(32, 1, arrival=0.1, priority=0)
    s.add(first, 0.0)
    s.add(second, 0.1)
    plan, _ = step(s, 1.0)
    assert [r for r, _ in plan.scheduled] == [first]


@pytest.mark.parametrize("a_priority,b_priority", [(9, 0), (0, 9)])
def test_the_running_request_with_the_largest_key_is_preempted(a_priority, b_priority):
    # 6 blocks, 3 each; a (first in the batch) has room for its next token, b needs a 4th block.
    # vLLM picks the victim by (priority, arrival): a, although it was scheduled first in this
    # step (its token goes back to the budget), or b itself
    s = sched(num_gpu_blocks=6, max_num_batched_tokens=4096)
    a = EngineRequest(47, 10, arrival=0.0, priority=a_priority)
    b = EngineRequest(48, 10, arrival=0.1, priority=b_priority)
    s.add(a, 0.0)
    s.add(b, 0.1)
    step(s, 0.0)                         # both prefilled (3 blocks each), one token out each
    assert (a.blocks, b.blocks, s.free_blocks) == (3, 3, 0)
    plan, emitted = step(s, 1.0)
    victim, survivor = (a, b) if a_priority > b_priority else (b, a)
    assert plan.preempted == [victim] and victim.state == EngineRequest.WAITING and victim.preemptions == 1
    assert [r for r, _ in plan.scheduled] == [survivor] and emitted == [survivor]
    assert plan.num_decode == 1 and list(s.waiting) == [victim]
    if victim is a:
        assert plan.decode_context == 49 and s.free_blocks == 2
