"""Python's cyclic collector waits while a burst of new connections is set up (issue 32).

A burst of 1,000 streaming requests opened at once must be parsed and set up within its TTFT
(200 ms in issue 32's benchmark) on the server's one core.  Each stream's set-up leaves
objects the collector tracks (the connection's greenlet, socket, environ, the request and its
stream), and every one of them survives a young and a middle collection before it reaches the
old generation: a burst of 1,000 streams ran 177 young and 16 middle collections over its
set-up and its 2 s of streaming, 44 ms of pauses (gc.callbacks, measured), against a set-up
budget of 200 ms with little to spare.  Whenever they pushed the set-up past the
first tokens' time, the streams not yet set up then waited for arrival turns among the tokens
of the ones running (5 accepts a loop turn of 10-25 ms) and the burst's TTFT p99 came out
0.3-0.8 s late instead of 25-35 ms, in 14 of 20 runs one day; with the collector off, none of
8 runs was.

Serving makes no cyclic garbage in steady state (:func:`server.worker.freeze_startup_heap`), so
:class:`BurstPause` turns automatic collection off while connections arrive faster than
``burst`` per ``window`` seconds and back on when they slow down.  Turning it back on alone only
moves the work: the next allocation then collects every object the burst left, in one pause of
100 ms or more, at the burst's first tokens (TTFT p50 +120-160 ms).  So the pause ends with
``gc.freeze()``: what the burst left moves to the permanent generation, which no collection
walks; its objects are still freed by their reference counts when the streams end.  Cyclic
garbage among them (a client's error traceback, say) waits for :meth:`BurstPause.reclaim`: once
the server has no request in flight and the permanent generation holds ``leak_bound`` objects
more than before the first pause, they go back to the collector for one full collection
(``gc.unfreeze``, ``gc.collect``, ``gc.freeze``, as at start-up).  That walks the whole heap
(the start-up heap included, 0.1 s or more), so it waits for a real leak: streams that ended
took their frozen objects with them, and a collection after every burst landed, now and then,
on the next burst's set-up (TTFT p99 +480 ms in one of 4 runs).  Three bounds keep a flood
from holding memory: the pause ends when the young generation's count (allocations less
deallocations of tracked objects) passes ``cap``, or after ``longest`` seconds; after a pause
that a bound ended, no new one starts for ``longest`` seconds.  Python collects as usual on its
next allocation once the collector is back on.
"""
from __future__ import annotations

import gc as _gc
from time import monotonic


class BurstPause:
    """Turns ``gc``'s automatic collection off during bursts of arrivals (module docstring).

    ``arrived()`` per new connection; ``check()`` every ``window`` seconds while paused (the
    caller's timer: :func:`install` uses the event loop's), returns whether the pause goes on.
    ``clock`` and ``gc`` are injectable for tests."""

    def __init__(self, burst: int = 50, window: float = 0.1, cap: int = 1_000_000, longest: float = 2.0,
                 leak_bound: int = 200_000, clock=monotonic, gc=_gc):
        self.burst, self.window, self.cap, self.longest = burst, window, cap, longest
        self.leak_bound = leak_bound
        self.baseline = None            # the permanent generation's size before the first pause
        self.clock, self.gc = clock, gc
        self.window_start = -1e18
        self.count = 0                  # arrivals in the window starting at window_start
        self.paused_at = None           # when this pause began (None: not paused)
        self.quiet_until = -1e18        # no pause before this (after a bound ended one)
        self.pauses = 0                 # pauses begun, for tests and logs
        self.since_check = 0            # arrivals since the pause began or was last checked
        self.frozen = False             # a pause froze objects that reclaim() has not collected
        self.last_arrival = -1e18
        self.reclaims = 0

    def arrived(self) -> bool:
        """Count an arrival; returns True when it begins a pause (the caller arms its check)."""
        now = self.last_arrival = self.clock()
        if now - self.window_start >= self.window:
            self.window_start, self.count = now, 0
        self.count += 1
        self.since_check += 1
        if (self.paused_at is None and self.count >= self.burst and now >= self.quiet_until
                and self.gc.isenabled()):
            if self.baseline is None:
                self.baseline = self.gc.get_freeze_count()
            self.gc.disable()
            self.paused_at = now
            self.since_check = 0
            self.pauses += 1
            return True
        return False

    def check(self) -> bool:
        """End the pause when fewer than ``burst`` arrived since the last check (a ``window``
        ago), or a bound is reached; returns whether it goes on."""
        if self.paused_at is None:
            return False
        now = self.clock()
        slowed, self.since_check = self.since_check < self.burst, 0
        bound = self.gc.get_count()[0] >= self.cap or now - self.paused_at >= self.longest
        if not (slowed or bound):
            return True
        self.paused_at = None
        self.gc.freeze()                # what the burst left: never walked (module docstring)
        self.frozen = True
        self.gc.enable()
        if bound:
            self.quiet_until = now + self.longest
        return False

    def reclaim(self, idle: bool, quiet: float = 1.0) -> bool:
        """With ``idle`` (no request in flight), no arrival for ``quiet`` seconds (a burst's
        first requests are not in flight yet while they are parsed), no pause on, and
        ``leak_bound`` objects more frozen than before the first pause: one full collection
        over everything frozen, then freeze what survives (the start-up heap and the server's
        own objects).  Returns whether it collected."""
        if not (idle and self.frozen and self.paused_at is None
                and self.clock() - self.last_arrival >= quiet):
            return False
        if self.gc.get_freeze_count() - self.baseline < self.leak_bound:
            return False                # what the bursts froze was freed with their streams
        self.frozen = False
        self.gc.unfreeze()
        self.gc.collect()
        self.gc.freeze()
        self.baseline = self.gc.get_freeze_count()
        self.reclaims += 1
        return True


RECLAIM_EVERY = 1.0          # s: how often an idle server looks for frozen burst objects


def install(loop, idle) -> BurstPause:
    """A :class:`BurstPause` whose checks run on ``loop``'s timers (gevent's libev loop), and
    whose :meth:`~BurstPause.reclaim` runs every :data:`RECLAIM_EVERY` seconds with ``idle()``
    (no request in flight).  Returns it; the caller calls its ``on_arrival()`` for each new
    connection."""
    pause = BurstPause()
    state = {"timer": None}
    keeper = loop.timer(RECLAIM_EVERY, RECLAIM_EVERY)
    keeper.start(lambda: pause.frozen and pause.reclaim(idle(), RECLAIM_EVERY))
    pause.keeper = keeper

    def tick():
        if not pause.check():
            timer, state["timer"] = state["timer"], None
            if timer is not None:
                timer.close()

    def on_arrival():
        if pause.arrived() and state["timer"] is None:
            timer = state["timer"] = loop.timer(pause.window, pause.window)
            timer.start(tick)

    pause.on_arrival = on_arrival
    return pause
