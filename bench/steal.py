"""The hypervisor's steal on one CPU, sampled while a bench runs: time the virtual machine's CPU
was runnable but the host ran something else.  On the 2-core development VM it is 6-9% of a busy
CPU's time (0.7-1.1 s over a 12 s ``engine_emission_lag.py``, against ~0.4% while idle), in
chunks of about 10 ms, and a step whose sends are descheduled that long reads as emission lag
that no code of the server can remove.  The timing benches print it beside their figures.

    python bench/steal.py [--cpu 0] [--seconds 10]     # what the machine alone takes from a busy CPU

run as a script, it spins on one CPU (nothing else of the benches running) and prints the pauses
it saw (gaps between two reads of the clock over 1 and over 5 ms) beside the steal the counter
gave for the same time: on the development VM, in a noisy phase, 5-10 ms pauses about once a
second, which no server code causes or can remove; in a quiet one, none over 5 ms.

Linux's ``/proc/stat`` gives each CPU's steal (the 8th value of its ``cpuN`` line) in
``USER_HZ`` ticks (10 ms), from the paravirtual steal clock: a sample tells how much was stolen
since the previous one, to within a tick.

Given the server's pid, the sampler also reads its main thread's run delay (the second value of
``/proc/PID/schedstat``, nanoseconds): time it was runnable while the guest's own scheduler ran
another task on its CPU.  On the development VM that is mostly the sandbox's agent (PID 1's
``tokio-rt-worker`` threads), which takes the server's pinned core for 4-9 ms slices a few times
a second (``perf record -e sched:sched_switch -C 0``: 36 ms in 2.6 s of a 1,000-stream run); such
a slice stretches one gap of every stream it catches, as a steal does, and no server code
causes it either.
"""
from __future__ import annotations

import bisect
import os
import threading
import time

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")          # USER_HZ: /proc/stat's unit (10 ms)


def run_delay_ns(fd: int) -> int:
    """The run delay so far (ns) from an open ``/proc/PID/schedstat`` (0 where unreadable)."""
    try:
        return int(os.pread(fd, 256, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return 0


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
    Where ``/proc/stat`` is unreadable, nothing is sampled and both stay empty.

    With ``pid`` (the server's), ``waits``: ``(wall clock, seconds)`` for each sample in which
    that process's main thread waited on a run queue more than ``wait_threshold`` seconds (another
    task ran on its CPU: module docstring); ``waited_s``: their sum."""

    def __init__(self, cpu: int | None, period: float = 0.002, on_cpu: int | None = None,
                 pid: int | None = None, wait_threshold: float = 0.0005):
        self.cpu, self.period, self.on_cpu = cpu, period, on_cpu
        self.pid, self.wait_threshold = pid, wait_threshold
        self.events: list[tuple[float, float]] = []
        self.waits: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.events)

    @property
    def waited_s(self) -> float:
        return sum(s for _, s in self.waits)

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
        wfd = None
        if self.pid is not None:
            try:
                wfd = os.open(f"/proc/{self.pid}/schedstat", os.O_RDONLY)
            except OSError:
                pass
        try:
            last = steal_ticks(self.cpu, fd)
            waited = run_delay_ns(wfd) if wfd is not None else 0
            while not self._stop.wait(self.period):
                now = steal_ticks(self.cpu, fd)
                if now != last:
                    self.events.append((time.time(), (now - last) * TICK_S))
                    last = now
                if wfd is not None:
                    w = run_delay_ns(wfd)
                    if (w - waited) * 1e-9 > self.wait_threshold:
                        self.waits.append((time.time(), (w - waited) * 1e-9))
                    waited = w
        finally:
            os.close(fd)
            if wfd is not None:
                os.close(wfd)


def near_steal(at: float, span: float, events: list[tuple[float, float]], margin: float = 2 * TICK_S) -> bool:
    """Whether steal was seen while something that ended at wall clock ``at`` and lasted
    ``span`` seconds ran (a token's emission lag: from its step's end to its send), within
    ``margin`` either side (the counter's tick and the sampling period)."""
    lo, hi = at - span - margin, at + margin
    return any(lo <= t <= hi for t, _ in events)


def clear_of_steal(spans, events: list[tuple[float, float]], margin: float = 2 * TICK_S) -> list[bool]:
    """For each ``(start, end)`` wall-clock span (an inter-token gap as the client saw it),
    whether no steal was sampled within it or ``margin`` either side: :func:`near_steal` for
    many spans at once (a bisect per span, not a scan of ``events``)."""
    times = sorted(t for t, _ in events)
    out = []
    for start, end in spans:
        i = bisect.bisect_left(times, start - margin)
        out.append(i == len(times) or times[i] > end + margin)
    return out


def pauses(seconds: float, threshold: float = 0.001) -> list[tuple[float, float]]:
    """Spin for ``seconds`` reading the monotonic clock; returns ``(when, gap)`` (seconds from the
    start) for every gap between two reads over ``threshold`` seconds: time this process was not
    running although it wanted to (the hypervisor, the kernel, another process)."""
    now = time.monotonic
    t0 = prev = now()
    end = t0 + seconds
    out = []
    while prev < end:
        t = now()
        if t - prev > threshold:
            out.append((t - t0, t - prev))
        prev = t
    return out


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="what the machine alone takes from a busy CPU (module docstring)")
    p.add_argument("--cpu", type=int, default=sorted(os.sched_getaffinity(0))[0])
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {args.cpu})
    before = steal_ticks(args.cpu)
    got = pauses(args.seconds)
    stolen = (steal_ticks(args.cpu) - before) * TICK_S
    long = [g for _, g in got if g > 0.005]
    print(f"CPU {args.cpu}, {args.seconds:g} s spinning: {len(got)} pauses over 1 ms ({1000 * sum(g for _, g in got):.0f} ms "
          f"in all), {len(long)} over 5 ms" + (f" (longest {1000 * max(long):.1f} ms)" if long else "")
          + f"; steal counted {1000 * stolen:.0f} ms; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
