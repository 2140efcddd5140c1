"""Measuring what an attack costs the server in-process: the RSS of a process, and how long
the gevent hub was held (a 5 ms ticker's longest gap), less how long the machine itself stalled
(:class:`StallWitness`)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import gevent

# A separate process that wakes every 5 ms until its stdin closes, then prints its longest gap.
_WITNESS = ("import select,sys,time\n"
            "last=time.monotonic();worst=0.0\n"
            "while not select.select([sys.stdin],[],[],0.005)[0]:\n"
            " now=time.monotonic();worst=max(worst,now-last);last=now\n"
            "print(max(worst,time.monotonic()-last))\n")


class StallWitness:
    """How long the machine kept a runnable process waiting while a probe ran: a separate
    process (``python -S``, about 15 ms to start) that wakes every 5 ms and reports its
    longest gap.  A probe's wait counts only beyond it.  On CI a whole machine once stalled
    for 18 s (an in-process probe's 18.7 s beside a real server's 0.95 s gap and a kernel
    clock slewed 0.2 ms in the same minute), which no hold of the hub explains; a hub that
    is held while other processes run still counts in full."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", _WITNESS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def stop(self) -> float:
        """The longest gap, seconds (0 if the witness failed: nothing is excused then)."""
        try:
            out, _ = self.proc.communicate("", timeout=30)
            return float(out.strip() or 0.0)
        except (subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            return 0.0


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of ``pid`` (default this process), MiB, from /proc."""
    with open(f"/proc/{pid or os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


class Ticker:
    """A greenlet that wakes every 5 ms: its longest gap is how long the hub was held."""

    def __init__(self):
        self.ticks = []
        self.witness = StallWitness()
        self.g = gevent.spawn(self._run)
        gevent.sleep(0.02)

    def _run(self):
        while True:
            self.ticks.append(time.monotonic())
            gevent.sleep(0.005)

    def stop(self) -> float:
        """The longest gap beyond the machine's own longest stall, seconds."""
        self.g.kill()
        gap = max(b - a for a, b in zip(self.ticks, self.ticks[1:]))
        return max(0.0, gap - self.witness.stop())


def health_bound(seconds: float = 0.5) -> float:
    """The longest ``/health`` wait a test allows: ``seconds`` (issue 23's 0.5 s), times how
    oversubscribed the machine is now (per CPU, between 1 and 4: the 1-minute load average, or
    the tasks running at this instant where more, ``/proc/loadavg``'s fourth field: the load
    average lags, and beside the suite's other workers a test's hub work stretches at once; a
    many-tools attack's 0.08-0.1 s alone took 0.27 s there at load 1.7).  On a 2-core machine at
    load 16 every process waits for a CPU: an idle server's probe took 0.7-1.5 s there, while the
    faults this guards against stalled it for 10-98 s."""
    load = os.getloadavg()[0]
    try:
        with open("/proc/loadavg") as fh:
            load = max(load, int(fh.read().split()[3].split("/")[0]))
    except (OSError, ValueError, IndexError):
        pass
    return seconds * min(4.0, max(1.0, load / (os.cpu_count() or 1)))


class HealthProbe:
    """``GET /health`` every 10 ms beside an in-process attack (a greenlet on the test's
    client).  A probe's wait runs from when it was due (10 ms after the previous answer), so
    an attack that holds the hub counts in full even though the probe could not be sent
    meanwhile.  :meth:`stop` lets the probe in flight finish, checks every probe got a 200 and
    that there were at least ``min_probes``, and returns the longest wait beyond the machine's
    own longest stall (:class:`StallWitness`), seconds."""

    def __init__(self, client, min_probes: int = 2):
        self.witness = StallWitness()
        self.client = client
        self.min_probes = min_probes
        self.waits: list = []
        self.statuses: list = []
        self.stopping = False
        self.g = gevent.spawn(self._run)
        gevent.sleep(0.02)

    def _run(self):
        due = time.monotonic()
        while not self.stopping:
            self.statuses.append(self.client.get("/health").status_code)
            end = time.monotonic()
            self.waits.append(end - due)
            due = end + 0.01
            gevent.sleep(0.01)

    def stop(self) -> float:
        gevent.sleep(0.02)            # one more probe after the attack's last step
        self.stopping = True
        self.g.join(5)
        self.g.kill()
        assert len(self.waits) >= self.min_probes, self.waits
        assert set(self.statuses) == {200}, self.statuses
        return max(0.0, max(self.waits) - self.witness.stop())


class ServerHealthProbe:
    """``GET /health`` on a fresh connection every 0.1 s from a thread, beside an attack on
    the real server at ``base`` (a new connection each time: it has to be accepted too).
    :meth:`stop` returns the longest wait beyond the machine's own longest stall
    (:class:`StallWitness`), seconds (a probe that fails counts as its 5 s timeout, and fails
    the check of at least ``min_probes`` answered)."""

    def __init__(self, base: str, min_probes: int = 3, verify: bool = True):
        import threading
        self.witness = StallWitness()
        self.base = base
        self.verify = verify
        self.min_probes = min_probes
        self.waits: list = []
        self.failed = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import httpx
        while not self.stopping:
            t0 = time.monotonic()
            try:
                ok = httpx.get(self.base + "/health", timeout=5, verify=self.verify).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.failed += not ok
            self.waits.append(time.monotonic() - t0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))

    def stop(self) -> float:
        deadline = time.monotonic() + 5
        while len(self.waits) < self.min_probes and time.monotonic() < deadline:
            time.sleep(0.05)          # a short attack: the probes after it count
        self.stopping = True
        self.thread.join(10)
        assert self.failed == 0, (self.failed, self.waits)
        assert len(self.waits) >= self.min_probes, self.waits
        return max(0.0, max(self.waits) - self.witness.stop())
