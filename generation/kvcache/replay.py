"""KV-event replay (``--kv-events-replay-endpoint``, engine.md 4.9).

An indexer that missed KV-event batches (it restarted, or the PUB socket dropped them) asks for
them again from a sequence number.  The simulator binds a ZMQ ROUTER socket on the endpoint
(offset by the data-parallel rank, like the PUB endpoint) and keeps the last
``--kv-events-replay-queue-size`` published batches ``(seq, payload)``.

Request, REQ-style frames: ``[identity, "", start_seq (8-byte big-endian)]``; any other frame
count, or a shorter sequence frame, is ignored.  Reply: every retained batch with
``seq >= start_seq`` in order as ``[identity, "", topic, seq, payload]``, then the sentinel
``[identity, "", "", 0xFFFFFFFFFFFFFFFF, ""]``: several messages, so the client must be a DEALER
socket that sends the empty delimiter itself (it then reads ``["", topic, seq, payload]`` and
recognises the end by the empty topic).  A REQ socket reads only the first message of the
reply (libzmq's REQ state machine allows one reply per request: ``EFSM``), which suffices
only when nothing but the sentinel is due.  A start older than the window gets every retained
batch; one past the newest gets only the sentinel.

The socket is ``zmq.green`` and served by one greenlet, so it never blocks the gevent hub; the
greenlet gives the hub a turn between requests and every 2 ms of sending, and each client
(ZMQ identity) gets at most :data:`REPLAYS_PER_SECOND` replays a second (a burst of as many);
requests beyond are dropped with one debug line per client and second.  8 DEALER clients
sending 300 requests each drew 115,186 replies back to back and held ``/health`` 5.6 s.
"""
from __future__ import annotations

import logging
import os
import struct
from collections import deque

log = logging.getLogger("vllm_sim.kvcache")

SENTINEL_SEQ = b"\xff" * 8
REPLAYS_PER_SECOND = 4          # replays one client (ZMQ identity) may get per second
ALL_REPLAYS_PER_SECOND = 64    # replays all clients together may get per second
MAX_CLIENTS = 4096              # identities whose budget is remembered (cleared when full)
SLICE = 0.002                   # s of sending before the hub gets a turn


class ReplayServer:
    """Binds a ROUTER socket on ``endpoint`` and answers replay requests from a greenlet.

    :meth:`record` is the publisher's ``on_sent`` hook: call it with the 8-byte sequence frame
    and the payload of every batch sent."""

    def __init__(self, endpoint: str, topic: str, queue_size: int):
        self.endpoint = endpoint
        self.topic = topic.encode() if isinstance(topic, str) else topic
        self.batches: deque = deque(maxlen=max(int(queue_size), 1))
        self._socket = None
        self._greenlet = None
        self._pid = 0
        self.bind_error: str | None = None     # why the socket could not be bound
        self._budgets: dict = {}       # identity -> (tokens left, when counted)
        self._all = (float(ALL_REPLAYS_PER_SECOND), 0.0)
        self._warned: dict = {}

    def record(self, seq: bytes, payload: bytes) -> None:
        """Keep one published batch (the oldest drops out); starts the server in this process
        on first use (after a fork the socket must be the child's own)."""
        self.batches.append((struct.unpack(">Q", seq)[0], seq, payload))
        if self._pid != os.getpid():
            self.start()

    def start(self) -> None:
        """Bind the socket and start answering (idempotent per process)."""
        if self._pid == os.getpid():
            return
        import gevent
        import zmq.green as zmq
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            log.error("cannot bind the KV-event replay socket to %s: %s", self.endpoint, e)
            self.bind_error = f"cannot bind the KV-event replay socket to {self.endpoint}: {e}"
            sock.close(0)
            self._pid = os.getpid()
            return
        self._socket = sock
        self._pid = os.getpid()
        self._greenlet = gevent.spawn(self._serve)

    def allowed(self, ident: bytes, now: float) -> bool:
        """Take one replay from ``ident``'s budget (a token bucket of
        :data:`REPLAYS_PER_SECOND`, refilled continuously) and from everyone's
        (:data:`ALL_REPLAYS_PER_SECOND`: clients may pick fresh identities); False when
        either is spent."""
        tokens, at = self._all
        tokens = min(float(ALL_REPLAYS_PER_SECOND), tokens + (now - at) * ALL_REPLAYS_PER_SECOND)
        if tokens < 1.0:
            self._all = (tokens, now)
            return False
        self._all = (tokens - 1.0, now)
        budget = self._budgets
        tokens, at = budget.get(ident, (float(REPLAYS_PER_SECOND), now))
        tokens = min(float(REPLAYS_PER_SECOND), tokens + (now - at) * REPLAYS_PER_SECOND)
        if tokens < 1.0:
            budget[ident] = (tokens, now)
            if self._warned.get(ident, 0.0) < now - 1.0:
                self._warned[ident] = now
                log.debug("KV-event replay: client %r over %d replays/s, requests dropped", ident,
                          REPLAYS_PER_SECOND)
            return False
        if len(budget) >= MAX_CLIENTS and ident not in budget:
            budget.clear()
            self._warned.clear()
        budget[ident] = (tokens - 1.0, now)
        return True

    def _serve(self) -> None:
        import time

        import gevent
        sock = self._socket
        monotonic = time.monotonic
        turn_by = monotonic() + SLICE
        while True:
            if monotonic() >= turn_by:     # a flood of refused requests: the hub's turn too
                gevent.sleep(0)
                turn_by = monotonic() + SLICE
            try:
                frames = sock.recv_multipart()
            except Exception:          # socket closed
                return
            if len(frames) != 3 or len(frames[2]) < 8:
                continue
            ident, start = frames[0], struct.unpack(">Q", frames[2][:8])[0]
            if not self.allowed(ident, monotonic()):
                continue
            try:
                turn_by = monotonic() + SLICE
                for seq_n, seq, payload in list(self.batches):
                    if seq_n >= start:
                        sock.send_multipart([ident, b"", self.topic, seq, payload])
                        if monotonic() >= turn_by:
                            gevent.sleep(0)
                            turn_by = monotonic() + SLICE
                sock.send_multipart([ident, b"", b"", SENTINEL_SEQ, b""])
            except Exception:
                log.exception("KV-event replay to a client failed")
            gevent.sleep(0)            # the next request after the hub's turn

    def close(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None
