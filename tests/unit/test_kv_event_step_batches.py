"""KV-event batches in step mode: one per engine step, as vLLM's EngineCore publishes them."""
from __future__ import annotations

import gevent

from generation.kvcache.events import EventPublisher, block_removed


def test_step_mode_sends_one_batch_per_step():
    """vLLM publishes one KVEventBatch per engine step (all of the step's events, no size cap);
    with ``hold`` (step mode) the events of a running step wait for its end, and events while no
    step runs still go out after the short flush delay, ``batch_size`` per message."""
    pub = EventPublisher("", "", 2, 0, 100)
    got = []
    pub.listeners.append(lambda seq, ts, events: got.append((seq, list(events))))
    stepping = [True]
    pub.hold = lambda: stepping[0]
    for h in range(5):
        pub.publish(block_removed([h], True))
    gevent.sleep(0.02)
    assert got == []                                  # held for the step's end
    pub.step_end()
    assert [(seq, [e["block_hashes"][0] for e in evs]) for seq, evs in got] == [(1, [0, 1, 2, 3, 4])]
    stepping[0] = False
    for h in range(3):
        pub.publish(block_removed([h], True))
    gevent.sleep(0.02)
    assert [len(evs) for _, evs in got[1:]] == [2, 1]
