"""Measuring what an attack costs the server in-process: the RSS of a process, and how long
the gevent hub was held (a 5 ms ticker's longest gap)."""
from __future__ import annotations

import os
import time

import gevent


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of ``pid`` (default this process), MiB, from /proc."""
    with open(f"/proc/{pid or os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


class Ticker:
    """A greenlet that wakes every 5 ms: its longest gap is how long the hub was held."""

    def __init__(self):
        self.ticks = []
        self.g = gevent.spawn(self._run)
        gevent.sleep(0.02)

    def _run(self):
        while True:
            self.ticks.append(time.monotonic())
            gevent.sleep(0.005)

    def stop(self) -> float:
        self.g.kill()
        return max(b - a for a, b in zip(self.ticks, self.ticks[1:]))
