"""``--latency-calculator step --enable-kvcache`` through the Flask app: the KV events follow the
engine's block pool (generation/engine/block_pool.py): blocks announced as each prefill chunk
computes them, evictions when a cached free block is handed out again, ``AllBlocksCleared`` on
``/reset_prefix_cache``, and the prefix hit of a repeated prompt."""
from __future__ import annotations

from support import metric, scrape
from support.kv_events import Recorder

STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--enable-kvcache", "--block-size", "16")


def recorded(app_client, *flags):
    c = app_client(*STEP, *flags, env={"VLLM_SERVER_DEV_MODE": "1", "POD_IP": "10.0.0.5"})
    rec = Recorder()
    c.sim.kv_cache.publisher = rec
    return c, rec


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
