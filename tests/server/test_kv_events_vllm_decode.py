"""Case C38 of ../shared/cases: a real server's KV events (``--use-vllm-map-event-format``)
decode with vLLM's own msgspec event classes."""
from __future__ import annotations

import time

import msgspec
import zmq

# vLLM's definitions (vllm/distributed/kv_events.py, release 0.33), written here as the case asks.
ExternalBlockHash = bytes | int


class KVCacheEvent(msgspec.Struct, array_like=False, omit_defaults=False, tag=True, tag_field="type"):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


def test_c38_vllm_map_events_decode_with_vllms_classes(sim_server):
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    try:
        base = sim_server("--enable-kvcache", "--block-size", "16", "--use-vllm-map-event-format",
                          "--zmq-endpoint", f"tcp://127.0.0.1:{port}", env={"POD_IP": "127.0.0.1"})
        for _ in range(4):          # let the SUB process its subscription before events flow
            sub.poll(50)
        import httpx
        prompt = " ".join(f"w{k}" for k in range(40))
        r = httpx.post(base + "/v1/completions", json={"model": "test-model", "prompt": prompt,
                                                       "max_tokens": 2}, timeout=10)
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 40
        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        stored, deadline = [], time.time() + 5
        while time.time() < deadline and not stored:
            if sub.poll(100):
                frames = sub.recv_multipart()
                batch = decoder.decode(frames[-1])          # raises if a required field is missing
                stored += [e for e in batch.events if isinstance(e, BlockStored)]
        assert stored
        assert all(e.block_size == 16 and e.lora_id is None and e.lora_name is None for e in stored)
        assert sum(len(e.block_hashes) for e in stored) == 40 // 16
    finally:
        sub.close()
        ctx.term()
