"""The first request's KV events after a fresh start reach a consumer that binds its SUB socket
(cases C20 and C38 read them).

ZMQ's slow joiner: a PUB socket drops what it sends before the consumer's subscription has
arrived, and a bound SUB sends its subscription only when it polls.  The publisher therefore
holds events until it sees a subscription (XPUB) or ``SUBSCRIBER_WAIT`` passes
(:class:`generation.kvcache.events.EventPublisher`).  Each start below is a new process; half of the
consumers poll before the request (as C38's does), half only after the response, which lost
the first batch every time before the fix.
"""
from __future__ import annotations

import struct
import time

import httpx
import msgpack
import pytest
import zmq

from support import ServerPool

pytestmark = pytest.mark.server

PROMPT = list(range(100, 140))            # 40 token ids: 2 full blocks of 16


def first_request_events(seed: int, map_format: bool, poll_first: bool) -> list:
    """Start a simulator publishing to a freshly bound SUB, send one completions request and
    return its port and the ``(topic, seq, decoded payload)`` messages received within 5 s."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.setsockopt(zmq.LINGER, 0)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    pool = ServerPool()
    try:
        flags = ["--model", "m1", "--enable-kvcache", "--block-size", "16", "--event-batch-size", "16",
                 "--zmq-endpoint", f"tcp://127.0.0.1:{port}", "--hash-seed", str(seed)]
        if map_format:
            flags.append("--use-vllm-map-event-format")
        base = pool.start(*flags, env={"POD_IP": "10.0.0.5"}, model=None)
        if poll_first:
            for _ in range(4):
                sub.poll(50)
        r = httpx.post(base + "/v1/completions", json={"model": "m1", "prompt": PROMPT, "max_tokens": 2},
                       timeout=10)
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 40
        if not poll_first:
            time.sleep(0.2)           # the batch is due 2 ms after the request: long gone by now
        messages, deadline = [], time.time() + 5
        while time.time() < deadline:
            if sub.poll(100):
                topic, seq, payload = sub.recv_multipart()
                messages.append((topic, struct.unpack(">Q", seq)[0], msgpack.unpackb(payload)))
                if any(_stored(e) for e in messages[-1][2][1]):
                    break
        return int(base.rsplit(":", 1)[1]), messages
    finally:
        pool.stop_all()
        sub.close()
        ctx.term()


def _stored(ev) -> bool:
    return (ev["type"] if isinstance(ev, dict) else ev[0]) == "BlockStored"


@pytest.mark.parametrize("run", range(5))
def test_first_request_block_stored_arrives_after_a_fresh_start(run):
    map_format, poll_first = run % 2 == 1, run // 2 % 2 == 0
    port, messages = first_request_events(seed=1000 + run, map_format=map_format, poll_first=poll_first)
    assert messages, f"run {run}: the first request's KV events were lost"
    topic, seq, (ts, events, *_rank) = messages[0]
    assert topic == f"kv@10.0.0.5:{port}@m1".encode()
    assert seq == 1                                  # nothing was sent (and lost) before it
    stored = [e for _, _, p in messages for e in p[1] if _stored(e)]
    assert len(stored) == 1
    ev = stored[0]
    if map_format:
        assert ev["block_size"] == 16 and ev["parent_block_hash"] is None
        assert len(ev["block_hashes"]) == 2 and ev["token_ids"] == PROMPT[:32]
        assert ev["lora_id"] is None and ev["medium"] == "GPU"
    else:
        assert ev[0] == "BlockStored" and ev[4] == 16
        assert len(ev[1]) == 2 and ev[3] == PROMPT[:32]
        assert ev[6] == "GPU"
