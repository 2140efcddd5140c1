"""KV-event replay over a real ZMQ socket (engine.md 4.9, issue 9): a real server's replay
socket answers REQ and DEALER clients with the batches a consumer missed."""
from __future__ import annotations

import struct

import msgpack
import pytest
import zmq

from support.kv_events import POD_IP, Listener, completion, kind

SENTINEL = b"\xff" * 8


def replay(endpoint: str, start: int, timeout_ms: int = 5000) -> list:
    """Ask with a REQ socket (engine.md 4.9's client); returns the batches before the sentinel.
    libzmq hands a REQ socket one reply per request, so this suits single-message answers;
    :func:`replay_dealer` reads a whole replay."""
    ctx = zmq.Context.instance()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(endpoint)
    try:
        req.send(struct.pack(">Q", start))
        out = []
        while True:
            assert req.poll(timeout_ms), "no replay answer"
            frames = req.recv_multipart()
            topic, seq, payload = frames
            if topic == b"":
                assert seq == SENTINEL and payload == b""
                return out
            out.append((topic, struct.unpack(">Q", seq)[0], payload))
    finally:
        req.close(0)


def replay_dealer(endpoint: str, start: int, timeout_ms: int = 5000) -> list:
    """Ask with a DEALER socket (REQ's frames: empty delimiter, start); every batch to the sentinel."""
    ctx = zmq.Context.instance()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(endpoint)
    try:
        d.send_multipart([b"", struct.pack(">Q", start)])
        out = []
        while True:
            assert d.poll(timeout_ms), "no replay answer"
            empty, topic, seq, payload = d.recv_multipart()
            assert empty == b""
            if topic == b"":
                assert seq == SENTINEL and payload == b""
                return out
            out.append((topic, struct.unpack(">Q", seq)[0], payload))
    finally:
        d.close(0)


@pytest.fixture(scope="module")
def replaying(live_client):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    listener = Listener()
    endpoint = f"tcp://127.0.0.1:{port}"
    base = live_client("--model", "m1", "--enable-kvcache", "--zmq-endpoint", listener.endpoint,
                      "--event-batch-size", "1", "--hash-seed", "5", "--kv-events-replay-endpoint", endpoint,
                      "--kv-events-replay-queue-size", "64", env={"POD_IP": POD_IP})
    listener.prime()
    yield base, listener, endpoint
    listener.close()


def test_replay_returns_missed_batches(replaying):
    base, listener, endpoint = replaying
    for k in range(3):
        assert completion(base, list(range(1000 * (k + 1), 1000 * (k + 1) + 32))).status_code == 200
        listener.events_until(lambda e: kind(e) == "BlockStored")
    live = [(t, s) for t, s, _ in listener.messages]
    assert len(live) >= 3
    got = replay_dealer(endpoint, 1)
    assert [(t, s) for t, s, _ in got] == live                          # everything, in order
    assert [msgpack.unpackb(p) for _, _, p in got] == [p for _, _, p in listener.messages]
    last = live[-1][1]
    assert [s for _, s, _ in replay_dealer(endpoint, last)] == [last]    # from the last: one batch
    assert replay_dealer(endpoint, 999999) == []                          # past the newest: sentinel only


def test_replay_with_a_req_client(replaying):
    base, listener, endpoint = replaying
    got = replay(endpoint, 999999)        # REQ sees [topic, seq, payload]; sentinel has an empty topic
    assert got == []
