"""The CPU KV tier's events in step mode (``--kv-offloading-size`` with ``--enable-kvcache``),
through the Flask app: vLLM's offloading connector writes every full prompt block through to the
CPU and publishes, after the GPU's events of the step, a ``BlockRemoved`` of medium CPU per store
that evicts and a ``BlockStored`` of medium CPU per block written, with the default placeholder
fields (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/events.py``:
``_placeholder_stored``; generation/engine/block_pool.py).  One batch per engine step."""
from __future__ import annotations

import time

import gevent

from generation.kvcache.events import EventPublisher, pack_batch
from support import metric, scrape, vllm_kv_events

STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--enable-kvcache", "--block-size", "16")
TINY_CPU = "0.0078125"      # GiB: 4 blocks of 16 tokens of the Llama-3.1-8B preset (128 KiB a token)


def listened(app_client, *flags):
    """The app with a socketless publisher whose batches (``(seq, events)``) are kept."""
    c = app_client(*STEP, *flags, env={"POD_IP": "10.0.0.5"})
    pub = EventPublisher("", "t", 16, 0, 10_000, first_seq=0)
    batches = []
    pub.listeners.append(lambda seq, ts, events: batches.append((seq, list(events))))
    c.sim.kv_cache.publisher = pub
    return c, batches


def complete(c, ids, max_tokens=1):
    r = c.post("/v1/completions", json={"prompt": ids, "max_tokens": max_tokens, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def settled(batches, n):
    deadline = time.monotonic() + 5
    while len(batches) < n and time.monotonic() < deadline:
        gevent.sleep(0.01)
    return batches


def test_blocks_are_written_through_and_announced_on_the_cpu_after_the_gpu(app_client):
    c, batches = listened(app_client, "--kv-offloading-size", TINY_CPU, "--max-model-len", "256")
    assert c.sim.engine.scheduler.pool.num_cpu_blocks == 4
    complete(c, list(range(100, 148)))                  # 3 blocks, one step: it ends, the writes with it
    ((_, first),) = settled(batches, 1)
    assert [e[0] for e in first] == ["BlockStored"] * 4
    gpu, *cpu = first
    a = gpu[1]
    assert (gpu[6], len(a)) == ("GPU", 3)
    assert cpu == [["BlockStored", [h], None, [], 0, None, "CPU", None, None] for h in a]
    complete(c, list(range(500, 532)))                  # 2 blocks for 1 free slot: a's tail goes
    (_, second) = settled(batches, 2)[1]
    b = second[0][1]
    assert second == [["BlockStored", b, None, list(range(500, 532)), 16, None, "GPU", None, None],
                      ["BlockRemoved", [a[2]], "CPU"],
                      ["BlockStored", [b[0]], None, [], 0, None, "CPU", None, None],
                      ["BlockStored", [b[1]], None, [], 0, None, "CPU", None, None]]
    assert c.sim.engine.scheduler.pool.num_cpu_cached == 4


def test_the_map_format_is_what_vllms_decoder_reads(app_client):
    c, batches = listened(app_client, "--kv-offloading-size", TINY_CPU, "--max-model-len", "256",
                          "--use-vllm-map-event-format")
    complete(c, list(range(100, 132)))
    ((_, events),) = settled(batches, 1)
    decoded = vllm_kv_events.decoder.decode(pack_batch(1.5, events, 0)).events
    gpu, *cpu = decoded
    assert (gpu.medium, gpu.block_size, gpu.kv_cache_spec_kind) == ("GPU", 16, "full_attention")
    assert cpu == [vllm_kv_events.BlockStored(block_hashes=[h], parent_block_hash=None, token_ids=[], block_size=0,
                                              lora_id=None, medium="CPU", lora_name=None, group_idx=0)
                   for h in gpu.block_hashes]
    # msgspec's omit_defaults: no extra_keys, kv_cache_spec_kind, locality, ... on the wire
    assert set(events[1]) == {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                              "medium", "lora_name", "group_idx"}
    complete(c, list(range(500, 564)))                  # 4 blocks: both of the first request's go
    (_, events) = settled(batches, 2)[1]
    removed = vllm_kv_events.decoder.decode(pack_batch(1.5, events, 0)).events[1]
    assert removed == vllm_kv_events.BlockRemoved(block_hashes=[gpu.block_hashes[1], gpu.block_hashes[0]],
                                                  medium="CPU", group_idx=0)


def test_a_reload_counts_as_the_connectors_hit_and_is_announced_on_the_gpu(app_client):
    # 16 GPU blocks: the second prompt takes them all, so the first one's are only on the CPU
    c, batches = listened(app_client, "--num-gpu-blocks-override", "17", "--max-model-len", "256",
                          "--kv-offloading-size", "0.1")
    before = scrape(c)
    a = list(range(100, 164))
    complete(c, a)
    complete(c, list(range(1000, 1250)))
    complete(c, a)                                      # 3 blocks reloaded (at most 63 tokens), 1 computed
    m = scrape(c)
    assert metric(m, "vllm:external_prefix_cache_hits_total") - metric(before, "vllm:external_prefix_cache_hits_total") == 48
    last = settled(batches, 3)[2][1]
    # the reloaded blocks are cached on the GPU again; the CPU holds them already (nothing new to
    # write past the reload: the CHUNK_LEVEL policy), so only the GPU's events
    assert [(e[0], e[6] if e[0] == "BlockStored" else e[2]) for e in last] == \
        [("BlockRemoved", "GPU"), ("BlockStored", "GPU")]
    assert len(last[1][1]) == 4
