"""KV-event helpers of the in-process, unit and real-server KV tests: a consumer that binds its
SUB socket the way llm-d's kv-cache manager does, a recording stand-in for the publisher, and
a completions request."""
from __future__ import annotations

import struct
import time

import gevent
import httpx
import msgpack
import zmq

POD_IP = "10.0.0.5"     # the POD_IP the simulators under test get: their KV-event topics name it

class Listener:
    """A KV-event consumer: SUB socket bound on a free port, subscribed to ``kv@``."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.last_seq = None        # none yet (vLLM numbers from 0 with --kv-events-config, the reference from 1)
        self.messages = []          # every message ever received: (topic, seq, payload)
        self.publisher = None       # in-process: the app's EventPublisher (drain knows its seq)

    def prime(self) -> None:
        """libzmq delivers a bound SUB's subscription to a connecting PUB only once the SUB
        processes its commands (poll/recv); a consumer blocked in recv does so at once."""
        for _ in range(4):
            self._wait(50)
        self.drain()

    def _wait(self, timeout_ms: int) -> bool:
        """Poll without blocking the gevent hub: an in-process publisher flushes its batches
        from a gevent timer, which runs only while this (main) greenlet sleeps."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self.sub.poll(0):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            gevent.sleep(min(0.005, left))

    def _recv(self, timeout_ms: int):
        if not self._wait(timeout_ms):
            return None
        frames = self.sub.recv_multipart()
        assert len(frames) == 3, frames
        topic, seq_b, payload = frames
        assert len(seq_b) == 8
        seq = struct.unpack(">Q", seq_b)[0]
        assert self.last_seq is None or seq > self.last_seq, "sequence numbers must strictly increase"
        self.last_seq = seq
        msg = (topic, seq, msgpack.unpackb(payload))
        self.messages.append(msg)
        return msg

    def drain(self) -> list:
        """Messages still on their way: until 100 ms pass without one (a real server) or, in
        process, until every event the app has published so far has arrived (nothing pending in
        its publisher, its last sequence number received)."""
        out = []
        if self.publisher is None:
            while (m := self._recv(100)) is not None:
                out.append(m)
            return out
        deadline = time.monotonic() + 5
        while self.publisher.pending or self._last() < self.publisher.seq:
            assert time.monotonic() < deadline, f"published up to seq {self.publisher.seq}, got {self.last_seq}"
            if (m := self._recv(100)) is not None:
                out.append(m)
        return out

    def _last(self) -> int:
        """The last sequence number received (before any: the one before the publisher's first)."""
        return self.publisher.first_seq - 1 if self.last_seq is None else self.last_seq

    def events_until(self, pred, timeout: float = 5.0) -> list:
        """Events received until one satisfies ``pred`` (then a short grace period for the rest
        of its batch), in order."""
        events, deadline = [], time.time() + timeout
        while time.time() < deadline:
            m = self._recv(100)
            if m is None:
                continue
            events.extend(m[2][1])
            if any(pred(e) for e in m[2][1]):
                for m2 in self.drain():
                    events.extend(m2[2][1])
                return events
        raise AssertionError(f"no matching event within {timeout}s; got {events}")

    def close(self):
        self.sub.close(0)
        self.ctx.term()


def kind(ev) -> str:
    return ev["type"] if isinstance(ev, dict) else ev[0]


def completion(base: httpx.Client, prompt, model: str = "m1", **extra) -> httpx.Response:
    return base.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 2, **extra},
                     timeout=30)


class Recorder:
    """Stands in for the ZMQ publisher."""

    def __init__(self):
        self.events = []

    def publish(self, ev):
        self.events.append(ev)
