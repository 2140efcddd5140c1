"""server/gc_pause.py: Python's cyclic collector waits while a burst of connections is set up,
the burst's objects are frozen when it ends, and an idle server collects them once (issue 32).
A fake clock and a fake ``gc`` module: exact, and the test process's own collector untouched."""
from __future__ import annotations

from server.gc_pause import BurstPause


class FakeGC:
    def __init__(self):
        self.enabled, self.count, self.calls, self.frozen = True, 0, [], 1000

    def isenabled(self):
        return self.enabled

    def disable(self):
        self.enabled = False
        self.calls.append("disable")

    def enable(self):
        self.enabled = True
        self.calls.append("enable")

    def get_count(self):
        return (self.count, 0, 0)

    def freeze(self):
        self.calls.append("freeze")

    def get_freeze_count(self):
        return self.frozen

    def unfreeze(self):
        self.calls.append("unfreeze")

    def collect(self):
        self.calls.append("collect")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def pause_of(**kw):
    gc, clock = FakeGC(), Clock()
    return BurstPause(burst=3, window=0.1, clock=clock, gc=gc, **kw), gc, clock


def test_a_burst_pauses_the_collector_and_its_end_freezes_what_it_left():
    p, gc, clock = pause_of()
    assert [p.arrived(), p.arrived()] == [False, False] and gc.enabled     # 2 in the window: no burst
    assert p.arrived() is True and not gc.enabled and p.pauses == 1       # the 3rd: a burst
    clock.now += 0.1
    for _ in range(3):
        p.arrived()
    assert p.check() is True and not gc.enabled       # 3 more since: it goes on
    clock.now += 0.1
    p.arrived()
    assert p.check() is False and gc.enabled          # 1 since the last check: over
    assert gc.calls == ["disable", "freeze", "enable"] and p.frozen


def test_arrivals_slower_than_the_burst_never_pause():
    p, gc, clock = pause_of()
    for _ in range(20):
        p.arrived()
        clock.now += 0.06                 # 2 per window at most
    assert gc.calls == [] and p.pauses == 0


def test_a_flood_is_bounded_by_the_young_count_and_the_longest_pause():
    p, gc, clock = pause_of(cap=1000, longest=2.0)
    for _ in range(3):
        p.arrived()
    gc.count = 1000                       # the young generation grew past the cap
    clock.now += 0.1
    for _ in range(5):
        p.arrived()
    assert p.check() is False and gc.enabled
    for _ in range(5):
        p.arrived()                       # within longest after a bound ended it: no new pause
    assert p.pauses == 1 and gc.enabled
    clock.now += 2.0
    gc.count = 0
    for _ in range(3):
        p.arrived()
    assert p.pauses == 2 and not gc.enabled
    for _ in range(30):                   # arrivals never slow down: longest ends it
        clock.now += 0.1
        for _ in range(3):
            p.arrived()
        if not p.check():
            break
    assert gc.enabled and clock.now - 102.1 >= 2.0 - 1e-9


def test_an_idle_quiet_server_collects_the_frozen_objects_once_they_leak():
    p, gc, clock = pause_of(leak_bound=500)
    assert p.reclaim(True) is False                   # nothing frozen
    for _ in range(3):
        p.arrived()                                   # the first pause: 1,000 frozen before it
    clock.now += 0.1
    p.check()
    gc.frozen = 1499                                  # the burst's streams ended: 499 left
    clock.now += 1.0
    assert p.reclaim(True) is False and p.reclaims == 0
    gc.frozen = 1500                                  # 500 more than before: a leak
    assert p.reclaim(False) is False                  # requests in flight
    clock.now -= 0.9
    assert p.reclaim(True) is False                   # an arrival 0.2 s ago (a burst being parsed)
    clock.now += 0.9
    assert p.reclaim(True) is True and p.reclaims == 1
    assert gc.calls[-3:] == ["unfreeze", "collect", "freeze"]
    assert p.baseline == 1500                         # what survived is the new baseline
    assert p.reclaim(True) is False                   # once per pause
