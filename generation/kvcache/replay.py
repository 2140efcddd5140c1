"""KV-event replay (``--kv-events-replay-endpoint``, engine.md 4.9).

An indexer that missed KV-event batches (it restarted, or the PUB socket dropped them) asks for
them again from a sequence number.  The simulator binds a ZMQ ROUTER socket on the endpoint
(offset by the data-parallel rank, like the PUB endpoint) and keeps the last
``--kv-events-replay-queue-size`` published batches ``(seq, payload)``.

Request (a REQ client's message): ``[identity, "", start_seq (8-byte big-endian)]``; any other
frame count, or a shorter sequence frame, is ignored.  Reply: every retained batch with
``seq >= start_seq`` in order as ``[identity, "", topic, seq, payload]``, then the sentinel
``[identity, "", "", 0xFFFFFFFFFFFFFFFF, ""]`` (a REQ client sees ``[topic, seq, payload]``
messages and recognises the end by the empty topic).  A start older than the window gets every
retained batch; one past the newest gets only the sentinel.

The socket is ``zmq.green`` and served by one greenlet, so it never blocks the gevent hub.
"""
from __future__ import annotations

import logging
import os
import struct
from collections import deque

log = logging.getLogger("vllm_sim.kvcache")

SENTINEL_SEQ = b"\xff" * 8


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
        except zmq.ZMQError:
            log.exception("cannot bind the KV-event replay socket to %s", self.endpoint)
            sock.close(0)
            self._pid = os.getpid()
            return
        self._socket = sock
        self._pid = os.getpid()
        self._greenlet = gevent.spawn(self._serve)

    def _serve(self) -> None:
        sock = self._socket
        while True:
            try:
                frames = sock.recv_multipart()
            except Exception:          # socket closed
                return
            if len(frames) != 3 or len(frames[2]) < 8:
                continue
            ident, start = frames[0], struct.unpack(">Q", frames[2][:8])[0]
            try:
                for seq_n, seq, payload in list(self.batches):
                    if seq_n >= start:
                        sock.send_multipart([ident, b"", self.topic, seq, payload])
                sock.send_multipart([ident, b"", b"", SENTINEL_SEQ, b""])
            except Exception:
                log.exception("KV-event replay to a client failed")

    def close(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None
