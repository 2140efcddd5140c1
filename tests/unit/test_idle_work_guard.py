"""IdleWork keeps clear of the one step engine's end timer (server.loop_turns, issue 32): an idle
turn runs nothing within GUARD_MARGIN of it and stops short of it; a second engine on the loop
turns the guard off."""
from __future__ import annotations

import math
from time import monotonic
from types import SimpleNamespace

from server.loop_turns import END_BUDGET, GUARD_MARGIN, IdleWork


class Idle:
    def close(self):
        pass


def work(deadline_in: float, calls: int = 5, each: float = 0.0002):
    """An IdleWork with ``calls`` queued calls of ``each`` seconds, guarded by an engine whose end
    timer is due ``deadline_in`` seconds from now; returns how many ran in one turn."""
    idle = IdleWork(SimpleNamespace())
    idle.idle = Idle()
    ran = []
    # asked once, at the turn's start: the deadline is that far from the turn, however loaded the machine
    engine = SimpleNamespace(end_timer_due=lambda: monotonic() + deadline_in)
    idle.guard_with(engine.end_timer_due)

    def call(i):
        def f():
            ran.append(i)
            end = monotonic() + each
            while monotonic() < end:
                pass
        return f
    for i in range(calls):
        idle.waiting[call(i)] = None
    idle._turn()
    return len(ran), idle


def test_an_idle_turn_runs_nothing_just_before_the_step_end_timer():
    assert work(GUARD_MARGIN / 2)[0] == 0


def test_an_idle_turn_stops_short_of_the_step_end_timer():
    ran, _ = work(GUARD_MARGIN + 0.0003, calls=10)     # 0.3 ms of room: calls of 0.2 ms
    assert 1 <= ran <= 2


def test_far_from_a_step_end_the_turn_takes_its_budget():
    ran, _ = work(1.0, calls=20)
    assert 1 <= ran <= round(END_BUDGET / 0.0002)       # (fewer only if the machine stalled a call)


def test_between_steps_and_with_a_second_engine_there_is_no_guard():
    idle = IdleWork(SimpleNamespace())
    idle.guard_with(SimpleNamespace(end_timer_due=lambda: math.inf).end_timer_due)
    assert idle.deadline() == math.inf
    first = SimpleNamespace(end_timer_due=lambda: 0.0)
    idle = IdleWork(SimpleNamespace())
    idle.guard_with(first.end_timer_due)
    idle.guard_with(first.end_timer_due)        # the same engine again: still guarded
    assert idle.deadline == first.end_timer_due
    idle.guard_with(SimpleNamespace(end_timer_due=lambda: 0.0).end_timer_due)
    assert idle.deadline is False
