"""The hypervisor's steal on one CPU, sampled while a bench runs: time the virtual machine's CPU
was runnable but the host ran something else.  On the 2-core development VM it is 6-9% of a busy
CPU's time (0.7-1.1 s over a 12 s ``engine_emission_lag.py``, against ~0.4% while idle), in
chunks of about 10 ms, and a step whose sends are descheduled that long reads as emission lag
that no code of the server can remove.  The timing benches print it beside their figures.

Linux's ``/proc/stat`` gives each CPU's steal (the 8th value of its ``cpuN`` line) in
``USER_HZ`` ticks (10 ms), from the paravirtual steal clock: a sample tells how much was stolen
since the previous one, to within a tick.
"""
from __future__ import annotations

import os
import threading
import time

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")          # USER_HZ: /proc/stat's unit (10 ms)


def steal_ticks(cpu: int | None, fd: int | None = None) -> int:
    """CPU ``cpu``'s steal so far (None: all CPUs'), in ``USER_HZ`` ticks (0 where
    ``/proc/stat`` has no steal field: not Linux, or no hypervisor)."""
    own = fd is None
    if own:
        fd = os.open("/proc/stat", os.O_RDONLY)
    try:
        text = os.pread(fd, 1 << 16, 0).decode()
    finally:
        if own:
            os.close(fd)
    prefix = "cpu " if cpu is None else f"cpu{cpu} "
    for line in text.splitlines():
        if line.startswith(prefix):
            fields = line.split()
            return int(fields[8]) if len(fields) > 8 else 0
    return 0


class StealSampler:
    """Samples CPU ``cpu``'s steal (None: all CPUs') every ``period`` seconds in a thread (pinned to ``on_cpu``
    when given, so as not to run on the measured CPU), between :meth:`start` and :meth:`stop`.

    ``events``: ``(wall clock, seconds stolen since the previous sample)`` for each sample that
    saw steal, the wall clock (``time.time()``) being the sample's; ``total_s``: their sum.
    Where ``/proc/stat`` is unreadable, nothing is sampled and both stay empty."""

    def __init__(self, cpu: int | None, period: float = 0.002, on_cpu: int | None = None):
        self.cpu, self.period, self.on_cpu = cpu, period, on_cpu
        self.events: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.events)

    def start(self) -> "StealSampler":
        self._thread = threading.Thread(target=self._run, name="steal-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "StealSampler":
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self

    def _run(self) -> None:
        if self.on_cpu is not None:
            os.sched_setaffinity(0, {self.on_cpu})   # this thread only
        try:
            fd = os.open("/proc/stat", os.O_RDONLY)
        except OSError:
            return
        try:
            last = steal_ticks(self.cpu, fd)
            while not self._stop.wait(self.period):
                now = steal_ticks(self.cpu, fd)
                if now != last:
                    self.events.append((time.time(), (now - last) * TICK_S))
                    last = now
        finally:
            os.close(fd)


def near_steal(at: float, span: float, events: list[tuple[float, float]], margin: float = 2 * TICK_S) -> bool:
    """Whether steal was seen while something that ended at wall clock ``at`` and lasted
    ``span`` seconds ran (a token's emission lag: from its step's end to its send), within
    ``margin`` either side (the counter's tick and the sampling period)."""
    lo, hi = at - span - margin, at + margin
    return any(lo <= t <= hi for t, _ in events)
