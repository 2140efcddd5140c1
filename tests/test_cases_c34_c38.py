"""Cases C34-C38 of ../shared/cases/README.md (C37, TLS, is in tests/test_deploy_security.py:
test_https_with_given_certificate, test_https_with_self_signed_certificate and the pair
validations).  Each is an example of a kind of fault: see the files named per test for the kind.
"""
from __future__ import annotations

import time

import msgspec
import pytest
import zmq

from support import metric_values, named_events, scrape, sse_events

HI = [{"role": "user", "content": "hi"}]


# ---- C34: --enable-force-include-usage (the whole kind: tests/test_vllm_parity.py) ---------------
def test_c34_force_include_usage_without_stream_options(app_client):
    c = app_client("--enable-force-include-usage")
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": HI, "max_tokens": 5,
                                              "stream": True})
    assert r.status_code == 200
    ev = sse_events(r.text)
    assert ev[-1] == "[DONE]"
    last = ev[-2]
    assert last["choices"] == []
    content_tokens = sum(1 for e in ev[:-2] for ch in e["choices"] if ch["delta"].get("content"))
    assert last["usage"]["completion_tokens"] == content_tokens >= 1


# ---- C35: metric families inference-perf scrapes (the whole list: tests/test_metrics_vllm.py) ----
def test_c35_benchmark_metric_families(app_client):
    c = app_client()
    assert c.post("/v1/chat/completions", json={"model": "test-model", "messages": HI,
                                                "max_tokens": 5}).status_code == 200
    samples = scrape(c)
    assert metric_values(samples, "vllm:num_preemptions_total", model_name="test-model") == [0.0]
    for hist in ("vllm:request_params_n", "vllm:iteration_tokens_total"):
        counts = metric_values(samples, hist + "_count", model_name="test-model")
        assert counts and counts[0] >= 1, hist


# ---- C36: Responses stream cut by max_output_tokens (also tests/test_vllm_parity.py) ------------
def test_c36_responses_incomplete_event(app_client):
    c = app_client()
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 4,
                                      "ignore_eos": True, "stream": True})
    ev = named_events(r.text)
    name, data = ev[-1]
    assert name == "response.incomplete"
    assert data["response"]["status"] == "incomplete"
    assert data["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    # "With no cap reached, the last event stays response.completed": a random answer may still
    # reach the cap (then it is incomplete), so the rule is checked per answer, over several.
    ends = []
    for _ in range(5):
        r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 500,
                                          "stream": True})
        name, data = named_events(r.text)[-1]
        capped = data["response"]["usage"]["output_tokens"] == 500
        assert name == ("response.incomplete" if capped else "response.completed")
        ends.append(name)
    assert "response.completed" in ends


# ---- C38: KV events decode with vLLM's own msgspec classes -------------------------------------
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
