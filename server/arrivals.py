"""Requests on open keep-alive connections take turns with due tokens (issue 13).

New connections come in at most :data:`server.listening.ACCEPT_BATCH` per event-loop turn
(:func:`server.listening.accept_server`).  A request on a connection that is already open
instead wakes its greenlet from the connection's I/O watcher, and gevent runs every wake-up of
a loop turn back to back: a pooled client sending 500 requests at once (say, the next wave of a
fixed-length concurrency benchmark) made one turn of ~200 ms of parsing and set-up, and every
running stream's due tokens waited for it.

:class:`ArrivalTurns` lets at most ``per_turn`` such requests start parsing per loop turn.  The
others wait with their first bytes read; a low-priority timer lets the next ``per_turn`` go
once per turn, after the turn's due timers.  :func:`install` makes gunicorn's HTTP/1 parser
take a turn before every request, a connection's first included (a client may open its
connections well before it sends).  A request waiting its turn has arrived: if the keep-alive
timeout runs out meanwhile, it keeps its place and the timeout restarts for the rest of its
headers.
"""
from __future__ import annotations

import struct
from collections import deque
from socket import SOL_SOCKET
from time import monotonic

from gevent import Timeout, sleep
from gevent.hub import Waiter, get_hub


READ_SLICE = 0.002      # s: the longest one request's reads run before the hub gets a turn


class ArrivalTurns:
    """At most ``per_turn`` callers of :meth:`take` return per event-loop turn; the others
    wait in arrival order."""

    def __init__(self, per_turn: int):
        self.per_turn = per_turn
        self.turn = -1                  # loop.iteration the count below belongs to
        self.used = 0
        self.waiting: deque = deque()
        self.later: deque = deque()     # low priority: go only when no request waits
        self.timer = None

    def take(self, low: bool = False) -> None:
        """Return when the calling greenlet may go on (at once if this turn has room).  With
        ``low``, only in turns that have room after every waiting request went."""
        hub = get_hub()
        loop = hub.loop
        if not self.waiting and not (low and self.later):
            if loop.iteration != self.turn:
                self.turn, self.used = loop.iteration, 0
            if self.used < self.per_turn:
                self.used += 1
                return
        waiter = Waiter(hub)
        (self.later if low else self.waiting).append(waiter)
        if self.timer is None:
            self._arm(loop)
        expired = None
        while True:
            try:
                waiter.get()
                break
            except Timeout as timeout:
                if timeout.exception is not False:     # not gunicorn's Timeout(keepalive, False)
                    self._forget(waiter)
                    raise
                expired = timeout        # the keep-alive timeout: this request has arrived
            except BaseException:
                self._forget(waiter)
                raise
        if expired is not None:
            expired.start()              # the rest of the headers get the usual time

    def _forget(self, waiter) -> None:
        for queue in (self.waiting, self.later):
            try:
                queue.remove(waiter)
                return
            except ValueError:           # already released or dropped
                pass

    def _arm(self, loop) -> None:
        timer = self.timer = loop.timer(0.0)
        timer.priority = loop.MINPRI     # after the turn's other due watchers (stream tokens)
        timer.start(self._release, loop)

    def _release(self, loop) -> None:
        try:
            self.turn, self.used = loop.iteration, 0
            while self.waiting and self.used < self.per_turn:
                self.used += 1
                self.waiting.popleft().switch(None)     # runs until that request first waits
            while self.later and not self.waiting and self.used < self.per_turn:
                self.used += 1
                self.later.popleft().switch(None)
        finally:
            timer, self.timer = self.timer, None        # kept until here: no second timer meanwhile
            timer.close()
            if self.waiting or self.later:
                self._arm(loop)

    def waiting_greenlets(self) -> set:
        """The greenlets of the requests waiting their turn (they have arrived: a server that
        drains serves them, as it serves requests in flight)."""
        return {w.greenlet for w in self.waiting if w.greenlet is not None}

    def drop_waiting(self) -> list:
        """Empty the queue and return the greenlets that waited (a server whose grace is over
        closes their connections before any byte of a response, as idle ones)."""
        greenlets = [w.greenlet for w in self.waiting if w.greenlet is not None]
        self.waiting.clear()
        return greenlets


def wait_for_request(unreader, turns: ArrivalTurns) -> None:
    """Block until the next request's first bytes are in ``unreader`` (a gunicorn
    ``SocketUnreader``; already buffered bytes count) or the peer closed, then take a turn.
    A fresh read of a plain socket notes when the kernel received its bytes
    (:func:`first_read`)."""
    buf = unreader.buf
    if not buf.seek(0, 2):
        data = first_read(unreader) if unreader.__class__ is _StampedUnreader else unreader.chunk()
        if not data:
            return                       # closed: the parser reads the end again and stops
        buf.write(data)                  # unreader.unread(data) into an empty buffer, without its copies
    else:
        unreader.stamp = None            # pipelined behind an earlier request: no fresh read
        data = buf.getvalue()[:16]
    if data.startswith(PROBES):
        return                           # a liveness probe: ~0.1 ms, never queued behind a burst
    turns.take()


SO_TIMESTAMPNS = 35          # Linux (asm-generic); its control message, SCM_TIMESTAMPNS, has the same number
_TIMESPEC = struct.Struct("qq")


def first_read(unreader) -> bytes:
    """``unreader.chunk()`` through ``recvmsg``: with ``SO_TIMESTAMPNS`` on the socket
    (:func:`server.listening.bind` sets it on the listener; accepted sockets inherit it) the
    kernel says when it received the bytes read, to the microsecond, and ``unreader.stamp``
    keeps it (``time.time`` seconds; None without).  The stamp holds while every byte of the
    request comes from this read: any further read clears it (:class:`_StampedUnreader`), and
    the server runtime hands it to the request only when its body was already buffered
    (:class:`server.wsgi_layers.FrontDoor`); :func:`blueprints.common.received_at` reads it."""
    data, ancillary, _, _ = unreader.sock.recvmsg(unreader.mxchunk, 64)
    stamp = None
    for level, kind, payload in ancillary:
        if level == SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(payload)
            stamp = sec + nsec * 1e-9
    unreader.stamp = stamp
    return data


PROBES = (b"GET /health ", b"GET /health?", b"GET /ping ", b"HEAD /health ", b"GET /load ")


_turns: ArrivalTurns | None = None


def read_to_end(body) -> bool:
    """Whether ``body`` (a request's gunicorn ``Body``) was read to its end: a sized body with
    no byte left in the socket or in its buffer, reading it did not fail.  What
    ``Parser.finish_body`` would find (nothing to drain), without its work."""
    reader = body.reader
    return (body.__class__ in _Body and reader.__class__ is _LengthReader and not reader.length
            and not body.failed and not body.buf.tell())


_Body = _LengthReader = None        # gunicorn's (the body classes, the reader), set by install()
_StampedUnreader = None             # set by install()


def take_turn(low: bool = False) -> None:
    """Wait for a turn of the installed :class:`ArrivalTurns` (at once before :func:`install`):
    for work that arrives in waves, such as slow bodies timing out together (``low``: after
    the requests that wait, so that 5,000 expiring bodies do not queue a new request behind
    their 408s)."""
    if _turns is not None:
        _turns.take(low)


def waiting_greenlets() -> set:
    """:meth:`ArrivalTurns.waiting_greenlets` of the installed turns (empty before
    :func:`install`)."""
    return _turns.waiting_greenlets() if _turns is not None else set()


def waiting_count() -> int:
    """Requests waiting their turn now (0 before :func:`install`): more than a few means a
    burst is arriving faster than requests are let in."""
    return len(_turns.waiting) if _turns is not None else 0


def drop_waiting() -> list:
    """:meth:`ArrivalTurns.drop_waiting` of the installed turns (empty before :func:`install`)."""
    return _turns.drop_waiting() if _turns is not None else []


def install(per_turn: int) -> None:
    """Make ``gunicorn.http.get_parser`` return HTTP/1 parsers that take a turn before each
    request and read a plain head in one pass (:class:`server.request_head.LeanRequest`).
    Idempotent."""
    global _turns, _Body, _LengthReader, _StampedUnreader
    from gevent.socket import socket as plain_socket
    from gunicorn import http
    from gunicorn.http.body import Body, LengthReader
    from gunicorn.http.parser import RequestParser
    from gunicorn.http.unreader import SocketUnreader

    if _turns is not None:
        _turns.per_turn = per_turn
        return
    _turns = turns = ArrivalTurns(per_turn)
    from .request_head import ContinueBody, LeanRequest
    _Body, _LengthReader = (Body, ContinueBody), LengthReader       # (an Expect: 100-continue request's)

    class SlicedUnreader(SocketUnreader):
        """A socket's unreader that gives the hub a turn every :data:`READ_SLICE` of one
        request's reads: reads that find bytes waiting never block, and a TLS client sending
        its body as one-byte records (one ``recv`` each) held every other client ~10 s with a
        2 MB body.  ``turn_by`` is set as each request's turn is taken (:class:`TurnTakingParser`)."""
        turn_by = float("inf")

        def chunk(self, size_hint=None):
            if monotonic() >= self.turn_by:
                sleep(0)
                self.turn_by = monotonic() + READ_SLICE
            return SocketUnreader.chunk(self, size_hint)

    class StampedUnreader(SlicedUnreader):
        """A plain socket's unreader: its :func:`first_read` notes the kernel's receive time
        in ``stamp``, which any other read clears."""
        stamp = None

        def chunk(self, size_hint=None):
            self.stamp = None
            return SlicedUnreader.chunk(self, size_hint)
    _StampedUnreader = StampedUnreader

    class TurnTakingParser(RequestParser):
        mesg_class = LeanRequest        # a plain head is read in one pass (server.request_head)

        def __next__(self):
            # gunicorn's Parser.__next__ with the turn taken first, and a previous body that
            # was read to its end not drained again (finish_body's timeout juggling and read:
            # ~3% of a small request's CPU)
            mesg = self.mesg
            if mesg is not None and mesg.should_close():
                raise StopIteration()
            unreader = self.unreader
            unreader.turn_by = float("inf")         # (a SlicedUnreader) the wait is not reading
            wait_for_request(unreader, turns)
            unreader.turn_by = monotonic() + READ_SLICE
            if mesg is not None and not (read_to_end(mesg.body) or self.finish_body()):
                raise StopIteration()
            self.req_count += 1
            self.mesg = self.mesg_class(self.cfg, self.unreader, self.source_addr, self.req_count)
            return self.mesg
        next = __next__

    original = http.get_parser

    def get_parser(cfg, source, source_addr, http2_connection=False):
        parser = original(cfg, source, source_addr, http2_connection=http2_connection)
        if type(parser) is RequestParser:
            parser.__class__ = TurnTakingParser
            if type(parser.unreader) is SocketUnreader:
                # not TLS: recvmsg; TLS: only the turns within a request's reads
                parser.unreader.__class__ = StampedUnreader if type(source) is plain_socket else SlicedUnreader
        return parser
    http.get_parser = get_parser
