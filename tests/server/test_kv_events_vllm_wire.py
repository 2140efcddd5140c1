"""A router's view of a step-mode pod started with vLLM's own ``--kv-events-config``: an
independent consumer (pyzmq + vLLM 0.34's msgspec schema) subscribes during a load with prefix
reuse and checks what llm-d's kv-cache manager relies on: every payload decodes as vLLM's
``KVEventBatch`` and is byte for byte msgspec's encoding of what it decodes to; sequence
numbers start at 0 and go up by one; every ``BlockRemoved`` names a stored, not yet removed
block; every parent hash names a stored block; the replay socket returns the batches again;
the prefix-cache counters and ``kv_cache_usage_perc`` agree with the events."""
from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
import zmq

from support import free_port, vllm_kv_events

pytestmark = pytest.mark.server


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M)
    return float(m.group(1))


def test_step_mode_events_hold_a_routers_invariants(sim_server):
    pub_port, replay_port = free_port(), free_port()
    base = sim_server("--latency-calculator", "step", "--num-gpu-blocks-override", "64", "--block-size", "16",
                      "--max-model-len", "1024", "--kv-events-config",
                      json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{pub_port}",
                                  "replay_endpoint": f"tcp://*:{replay_port}", "topic": "pod-a"}))
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{pub_port}")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{replay_port}")
    try:
        for _ in range(5):
            sub.poll(50)                 # the subscription reaches the publisher first
        prefixes = [" ".join(f"p{j}w{k}" for k in range(200)) for j in range(3)]
        errors = []

        def one(i: int) -> None:
            prompt = prefixes[i % 3] + " " + " ".join(f"u{i}x{k}" for k in range(10 + 7 * i % 60))
            r = httpx.post(base + "/v1/completions", timeout=30,
                           json={"model": "test-model", "prompt": prompt, "max_tokens": 4 + i % 20})
            if r.status_code != 200:
                errors.append(r.text)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        frames = []
        while any(t.is_alive() for t in threads) or sub.poll(300):
            if sub.poll(50):
                frames.append(sub.recv_multipart())
        for t in threads:
            t.join()
        assert not errors

        live: dict = {}                  # hash -> copies stored and not removed
        stored = removed = 0
        for n, (topic, seq, payload) in enumerate(frames):
            assert topic == b"pod-a" and int.from_bytes(seq, "big") == n     # from 0, +1 per batch
            batch = vllm_kv_events.decoder.decode(payload)
            assert batch.data_parallel_rank == 0
            assert vllm_kv_events.encoder.encode(batch) == payload              # msgspec's own bytes
            for e in batch.events:
                if isinstance(e, vllm_kv_events.BlockStored):
                    assert e.parent_block_hash is None or e.parent_block_hash in live
                    assert len(e.token_ids) == e.block_size * len(e.block_hashes) and e.block_size == 16
                    assert e.extra_keys == [None] * len(e.block_hashes) and e.group_idx == 0
                    for h in e.block_hashes:
                        live[h] = live.get(h, 0) + 1
                    stored += len(e.block_hashes)
                elif isinstance(e, vllm_kv_events.BlockRemoved):
                    for h in e.block_hashes:
                        assert live.get(h), f"BlockRemoved {h} was not stored"
                        live[h] -= 1
                        if not live[h]:
                            del live[h]
                    removed += len(e.block_hashes)
        assert stored > 64 and removed > 0            # the 64-block pool overflowed: evictions
        assert sum(live.values()) <= 63               # at most the pool (less its null block)

        dealer.send_multipart([b"", (3).to_bytes(8, "big")])
        replayed = []
        while dealer.poll(3000):
            _, topic, seq, payload = dealer.recv_multipart()
            if topic == b"" and seq == b"\xff" * 8:
                break
            replayed.append([topic, seq, payload])
        assert replayed == [list(f) for f in frames[3:]]

        text = httpx.get(base + "/metrics").text
        assert _metric(text, "vllm:kv_cache_usage_perc") == 0.0              # nothing running
        assert _metric(text, "vllm:num_requests_running") == 0.0
        assert _metric(text, "vllm:num_requests_waiting") == 0.0
        hits, queries = _metric(text, "vllm:prefix_cache_hits_total"), _metric(text, "vllm:prefix_cache_queries_total")
        assert 0 < hits < queries and hits % 16 == 0
    finally:
        sub.close()
        dealer.close()
        ctx.term()
