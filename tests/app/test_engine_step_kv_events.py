"""``--latency-calculator step --enable-kvcache`` through the Flask app: the KV events follow the
engine's block pool (generation/engine/block_pool.py): blocks announced as each prefill chunk
computes them, evictions when a cached free block is handed out again, ``AllBlocksCleared`` on
``/reset_prefix_cache``, and the prefix hit of a repeated prompt.  With ``--kv-offloading-size``
the CPU tier's too: vLLM's offloading connector writes every full prompt block through to the
CPU and publishes, after the GPU's events of the step, a ``BlockRemoved`` of medium CPU per store
that evicts and a ``BlockStored`` of medium CPU per block written, with the default placeholder
fields (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/events.py``:
``_placeholder_stored``), one batch per engine step."""
from __future__ import annotations

import time

import gevent

from generation.kvcache.events import EventPublisher, pack_batch
from support import metric, scrape, vllm_kv_events
from support.kv_events import Recorder

STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--enable-kvcache", "--block-size", "16")
TINY_CPU = "0.0078125"      # GiB: 4 blocks of 16 tokens of the Llama-3.1-8B preset (128 KiB a token)


def recorded(app_client, *flags):
    c = app_client(*STEP, *flags, env={"VLLM_SERVER_DEV_MODE": "1", "POD_IP": "10.0.0.5"})
    rec = Recorder()
    c.sim.kv_cache.publisher = rec
    return c, rec


def listened(app_client, *flags):
    """The app with a socketless publisher whose batches (``(seq, events)``) are kept."""
    c = app_client(*STEP, *flags, env={"POD_IP": "10.0.0.5"})
    pub = EventPublisher("", "t", 16, 0, 10_000, first_seq=0)
    batches = []
    pub.listeners.append(lambda seq, ts, events: batches.append((seq, list(events))))
    c.sim.kv_cache.publisher = pub
    return c, batches


def complete(c, ids, max_tokens=2):
    r = c.post("/v1/completions", json={"prompt": ids, "max_tokens": max_tokens, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_blocks_are_announced_chunk_by_chunk(app_client):
    c, rec = recorded(app_client, "--max-num-batched-tokens", "32", "--max-model-len", "512")
    ids = list(range(1000, 1080))                       # 80 tokens: chunks of 32, 32 and 16
    complete(c, ids)
    stored = [e for e in rec.events if e[0] == "BlockStored"]
    assert [len(e[1]) for e in stored] == [2, 2, 1]
    assert [e[3] for e in stored] == [ids[0:32], ids[32:64], ids[64:80]]
    assert stored[0][2] is None and stored[1][2] == stored[0][1][-1] and stored[2][2] == stored[1][1][-1]
    again = complete(c, ids)                            # 79 tokens at most: 4 blocks hit
    # the last block is computed again into a block of its own, which vLLM caches and announces
    # too (it does not de-duplicate): 6 blocks for 5 hashes, a 4th BlockStored with block 4's hash
    assert c.sim.engine.scheduler.pool.num_cached == 6
    stored = [e for e in rec.events if e[0] == "BlockStored"]
    assert len(stored) == 4 and stored[3][1] == stored[2][1] and stored[3][2] == stored[1][1][-1]
    assert again["usage"]["prompt_tokens"] == 80


def test_a_cached_free_block_handed_out_again_is_announced_removed(app_client):
    # 13 blocks: vLLM's block pool keeps one as its null block, 12 hold tokens
    c, rec = recorded(app_client, "--num-gpu-blocks-override", "13", "--max-model-len", "192")
    complete(c, list(range(2000, 2064)))                # 4 prompt blocks + 1 for its tokens: 5 of 12
    (first,) = [e for e in rec.events if e[0] == "BlockStored"]
    complete(c, list(range(5000, 5160)))                # 10 prompt blocks + 1: 7 fresh, then 4 freed ones
    removed = [h for e in rec.events if e[0] == "BlockRemoved" for h in e[1]]
    # freed tail first, handed out least recently freed first: the unnamed 5th block, then 4th, 3rd, 2nd
    assert removed == [first[1][3], first[1][2], first[1][1]]
    assert c.sim.engine.scheduler.free_blocks == 12


def test_map_format_announces_each_evicted_block_in_a_blockremoved_of_its_own(app_client):
    """vLLM 0.34's ``BlockPool._emit_block_removed_events`` appends one ``BlockRemoved`` per
    evicted hash (``block_hashes`` of one), never one of several."""
    c, rec = recorded(app_client, "--num-gpu-blocks-override", "13", "--max-model-len", "192",
                      "--use-vllm-map-event-format")
    complete(c, list(range(2000, 2064)))
    (first,) = [e for e in rec.events if e["type"] == "BlockStored"]
    complete(c, list(range(5000, 5160)))
    removed = [e for e in rec.events if e["type"] == "BlockRemoved"]
    hashes = first["block_hashes"]
    assert removed == [{"type": "BlockRemoved", "block_hashes": [h], "medium": "GPU", "group_idx": 0}
                       for h in (hashes[3], hashes[2], hashes[1])]


def test_a_lora_requests_blocks_carry_vllms_lora_int_id(app_client):
    """``lora_id`` is the adapter's ``lora_int_id`` (vLLM's ``request.lora_request.adapter_id``):
    OpenAIServingModels numbers the ``--lora-modules`` from 1 in order, then each new adapter
    loaded; the step engine's events had none (``lora_id`` nil beside ``lora_name``)."""
    c, rec = recorded(app_client, "--max-model-len", "256", "--enable-lora", "--max-loras", "1",
                      "--lora-modules", "first=/tmp/first", "second=/tmp/second", "--use-vllm-map-event-format")
    r = c.post("/v1/completions", json={"model": "second", "prompt": list(range(700, 716)), "max_tokens": 1})
    assert r.status_code == 200, r.text
    (stored,) = [e for e in rec.events if e["type"] == "BlockStored"]
    assert (stored["lora_id"], stored["lora_name"]) == (2, "second")


def test_reset_prefix_cache_clears_the_pool(app_client):
    c, rec = recorded(app_client, "--max-model-len", "512")
    complete(c, list(range(3000, 3040)))
    assert c.sim.engine.scheduler.pool.num_cached == 2
    assert c.post("/reset_prefix_cache").status_code == 200
    assert rec.events[-1] == ["AllBlocksCleared"]
    assert c.sim.engine.scheduler.pool.num_cached == 0


def test_generated_tokens_full_blocks_are_cached_when_the_request_ends(app_client):
    c, rec = recorded(app_client, "--max-model-len", "512")
    ids = list(range(4000, 4032))                       # 2 prompt blocks
    out = complete(c, ids, max_tokens=40)               # 32 + 39 tokens computed: 4 full blocks
    stored = [e for e in rec.events if e[0] == "BlockStored"]
    assert [len(e[1]) for e in stored] == [2, 2]
    generated = stored[1][3]
    assert len(generated) == 32 and stored[1][2] == stored[0][1][-1]
    assert out["usage"]["completion_tokens"] == 40
    # the next turn's prompt, the answer included: its blocks are found
    r = c.post("/v1/completions", json={"prompt": ids + generated + [7], "max_tokens": 1})
    assert r.status_code == 200
    assert metric(scrape(c), "vllm:prefix_cache_hits_total") == 64
    assert len([e for e in rec.events if e[0] == "BlockStored"]) == 2      # nothing new to store


# ---- the CPU tier (--kv-offloading-size) -------------------------------------------------------
def settled(batches, n):
    deadline = time.monotonic() + 5
    while len(batches) < n and time.monotonic() < deadline:
        gevent.sleep(0.01)
    return batches


def test_blocks_are_written_through_and_announced_on_the_cpu_after_the_gpu(app_client):
    c, batches = listened(app_client, "--kv-offloading-size", TINY_CPU, "--max-model-len", "256")
    assert c.sim.engine.scheduler.pool.num_cpu_blocks == 4
    complete(c, list(range(100, 148)), 1)                  # 3 blocks, one step: it ends, the writes with it
    ((_, first),) = settled(batches, 1)
    assert [e[0] for e in first] == ["BlockStored"] * 4
    gpu, *cpu = first
    a = gpu[1]
    assert (gpu[6], len(a)) == ("GPU", 3)
    assert cpu == [["BlockStored", [h], None, [], 0, None, "CPU", None, None] for h in a]
    complete(c, list(range(500, 532)), 1)                  # 2 blocks for 1 free slot: a's tail goes
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
    complete(c, list(range(100, 132)), 1)
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
    complete(c, list(range(500, 564)), 1)                  # 4 blocks: both of the first request's go
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
    complete(c, a, 1)
    complete(c, list(range(1000, 1250)), 1)
    complete(c, a, 1)                                      # 3 blocks reloaded (at most 63 tokens), 1 computed
    m = scrape(c)
    assert metric(m, "vllm:external_prefix_cache_hits_total") - metric(before, "vllm:external_prefix_cache_hits_total") == 48
    last = settled(batches, 3)[2][1]
    # the reloaded blocks are cached on the GPU again; the CPU holds them already (nothing new to
    # write past the reload: the CHUNK_LEVEL policy), so only the GPU's events
    assert [(e[0], e[6] if e[0] == "BlockStored" else e[2]) for e in last] == \
        [("BlockRemoved", "GPU"), ("BlockStored", "GPU")]
    assert len(last[1][1]) == 4


def test_vllm_0_15_1_announces_a_requests_writes_as_one_blockstored_when_it_finishes(app_client):
    # vLLM 0.15.1's connector (offloading_connector.py): the generated block is written too, and a
    # request's writes complete when it finishes (here at once: nothing else runs), one BlockStored
    # of all their hashes with the block size (lru_manager.complete_store)
    c, batches = listened(app_client, "--kv-offloading-size", TINY_CPU, "--max-model-len", "256",
                          "--vllm-version", "0.15.1")
    complete(c, list(range(100, 132)), 20)                 # 32 + 19 tokens computed: 3 full blocks
    events = [e for _, batch in settled(batches, 2) for e in batch]
    gpu = [h for e in events if e[0] == "BlockStored" and e[6] == "GPU" for h in e[1]]
    cpu = [e for e in events if e[6 if e[0] == "BlockStored" else 2] == "CPU"]
    assert len(gpu) == 3
    assert cpu == [["BlockStored", gpu, None, [], 16, None, "CPU", None, None]]
    assert events[-1] == cpu[0] and c.sim.engine.scheduler.pool.num_cpu_cached == 3
