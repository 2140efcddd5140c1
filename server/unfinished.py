"""Connections that have not finished sending a request give way to new ones (issue 23 item 4).

A connection is *unfinished* from the moment it is accepted (a TLS handshake included) until
its request has fully arrived (headers, and the body when there is one), and again from the end
of each response until the next request has fully arrived (an idle keep-alive connection, a
body gunicorn drains after an early answer).  A request whose body is in is *in flight*; only
unfinished connections may be closed to make room.

gevent's accept loop stops accepting while every worker connection (``--worker-connections``)
is taken.  1,000 connections trickling a body one byte a second into a server with 1,000
worker connections therefore made every new client wait until the bodies timed out (the body
deadline, :class:`server.wsgi_layers.BodyDeadline`: 5.5 s for a 1 MB body).  Now, when a new
connection waits and the pool is full, :data:`EVICT_BATCH` of the oldest unfinished connections
are closed (a slow body gets its 408 first, as if its deadline had passed; one waiting for its
headers is closed as an idle keep-alive connection is), so a new client gets a connection in
about one event-loop turn while requests in flight keep theirs.  As nginx does with
``worker_connections`` (which closes idle keep-alive connections first), the oldest unfinished
connection is the one most likely to be a slow client.
"""
from __future__ import annotations

import logging
import time

from gevent import GreenletExit, getcurrent
from gevent.hub import get_hub

log = logging.getLogger("vllm_sim")

EVICT_BATCH = 5            # unfinished connections closed per accept attempt on a full pool
LOG_EVERY = 10.0           # seconds between two warning lines about evictions


class Evicted(GreenletExit):
    """Thrown into an unfinished connection's greenlet to close it (a ``GreenletExit``: the
    worker closes the connection without a traceback)."""


class Unfinished:
    """The unfinished connections of one worker, oldest first (by when they last started
    waiting for a request)."""

    def __init__(self):
        self.since: dict = {}       # greenlet -> time.monotonic() it became unfinished (insertion order)
        self.closing: set = set()   # chosen to close at the next loop turn
        self.evicted = 0            # connections closed to make room, in all
        self._logged = (0.0, 0)     # (when, evicted count) of the last warning line

    def begin(self, g) -> None:
        """``g``'s connection now waits for (the rest of) a request: the youngest unfinished."""
        since = self.since
        since.pop(g, None)
        since[g] = time.monotonic()
        self.closing.discard(g)

    def done(self, g) -> None:
        """``g``'s request has fully arrived (or its connection ended)."""
        self.since.pop(g, None)
        self.closing.discard(g)

    def evict(self, n: int = EVICT_BATCH) -> int:
        """Close up to ``n`` of the oldest unfinished connections; returns how many.  The close
        is a callback of the next loop turn (the greenlet sees :class:`Evicted` where it
        waits), skipped if the request arrived meanwhile."""
        since = self.since
        loop = get_hub().loop
        closed, oldest = 0, 0.0
        while closed < n and since:
            g = next(iter(since))
            t = since.pop(g)
            if g.dead:
                continue
            oldest = oldest or t
            self.closing.add(g)
            loop.run_callback(self._close, g)
            closed += 1
        if closed:
            self.evicted += closed
            self._log(oldest)
        return closed

    def _close(self, g) -> None:
        if g not in self.closing:          # its request arrived meanwhile, or it ended
            return
        self.closing.discard(g)
        if g.dead:
            return
        try:
            g.throw(Evicted())
        except Evicted:                    # not started yet
            pass

    def _log(self, oldest: float) -> None:
        now = time.monotonic()
        when, count = self._logged
        if now - when >= LOG_EVERY:
            log.warning("every worker connection taken: closed %d connection(s) whose request had not arrived "
                        "(the oldest for %.1fs) to admit new ones", self.evicted - count, now - oldest)
            self._logged = (now, self.evicted)


_current: Unfinished | None = None


def current() -> Unfinished | None:
    """The worker's :class:`Unfinished` (None outside a server: in-process bodies are whole)."""
    return _current


def install() -> Unfinished:
    """The process's :class:`Unfinished`, made on first use."""
    global _current
    if _current is None:
        _current = Unfinished()
    return _current


def done() -> None:
    """The calling greenlet's request has fully arrived (no-op outside a server)."""
    if _current is not None:
        _current.done(getcurrent())
