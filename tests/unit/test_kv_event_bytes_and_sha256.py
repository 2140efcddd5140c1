"""The reference's exact KV event bytes (engine.md 4.6), vLLM's sha256_cbor block hashes, and
the KV cache built from plain values (no simulator object)."""
from __future__ import annotations

import hashlib

import cbor2
import msgpack

from generation.engine.request import GenerationRequest, Prompt, Sequence
from generation.kvcache.block_hash import VllmBlockHasher
from generation.kvcache.cache import KVCache, KVCacheSettings
from generation.kvcache.events import block_stored, pack_batch, pack_event
from support.kv_events import Recorder


# ---- exact bytes ------------------------------------------------------------------------------------

def test_legacy_block_stored_bytes_match_the_reference():
    ev = block_stored([1, 2], None, [7, 8], 16, None, None, map_format=False)
    want = ("99ab" + b"BlockStored".hex() + "92" + "cf0000000000000001" + "cf0000000000000002" + "c0"   # no parent: nil (C21)
            + "92" + "ce00000007" + "ce00000008" + "10" + "c0" + "a3" + b"GPU".hex() + "c0" + "c0")
    assert pack_event(ev).hex() == want


def test_map_block_stored_bytes_match_the_reference():
    ev = block_stored([1], None, [7], 16, 1, "lora1", map_format=True)
    want = ("88" + "a4" + b"type".hex() + "ab" + b"BlockStored".hex() + "ac" + b"block_hashes".hex() + "91"
            + "cf0000000000000001" + "b1" + b"parent_block_hash".hex() + "c0" + "a9" + b"token_ids".hex() + "91"
            + "ce00000007" + "aa" + b"block_size".hex() + "10" + "a7" + b"lora_id".hex() + "01" + "a6"
            + b"medium".hex() + "a3" + b"GPU".hex() + "a9" + b"lora_name".hex() + "a5" + b"lora1".hex())
    assert pack_event(ev).hex() == want


def test_batch_bytes_and_decoding():
    assert pack_batch(1.5, [["AllBlocksCleared"]], 0).hex() == \
        "93cb3ff8000000000000" + "91" + "91b0" + b"AllBlocksCleared".hex() + "00"
    ev = block_stored([2 ** 64 - 1], 5, [2 ** 32 - 1], 16, None, None, map_format=False)
    assert msgpack.unpackb(pack_batch(2.0, [ev], 3)) == [2.0, [ev], 3]


# ---- vLLM sha256_cbor ---------------------------------------------------------------------------

def sha(obj) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def test_sha256_cbor_follows_vllm_recipe():
    h = VllmBlockHasher("0")
    ids = list(range(40))
    none = sha("0")                                         # NONE_HASH = sha256_cbor(PYTHONHASHSEED)
    b0 = sha((none, tuple(ids[:16]), None))
    b1 = sha((b0, tuple(ids[16:32]), None))
    low64 = [int.from_bytes(b, "big") & (2 ** 64 - 1) for b in (b0, b1)]
    assert h.block_hashes("m", ids, 16) == low64
    assert h.block_hashes("m", ids, 16) == low64            # memoised: same answer
    assert h.block_hashes("l1", ids, 16, lora="l1")[0] == int.from_bytes(sha((none, tuple(ids[:16]), ("l1",))), "big") \
        & (2 ** 64 - 1)


def test_sha256_cbor_lora_blocks_hash_alike_whether_or_not_the_adapter_is_in_a_slot():
    """The extra key is the sequence's own adapter: a LoRA request's first blocks (adapter not
    yet loaded) and its later ones (loaded) get the same hashes, so its prefix is found."""
    loaded = []
    kv = KVCache(KVCacheSettings(block_size=16, capacity=8, hash_seed="0", hash_algo="sha256_cbor"),
                 loaded_models=lambda: loaded)
    ids = list(range(40))
    none = sha("0")
    want = int.from_bytes(sha((none, tuple(ids[:16]), ("l1",))), "big") & (2 ** 64 - 1)
    hashes = []
    for state in ([], ["l1"]):
        loaded[:] = state
        req = GenerationRequest(request_id="r", model="l1", lora="l1", prompts=[Prompt(ids)])
        hashes.append(kv._hashes(Sequence(req, 0, 0, req.prompts[0])))
        kv._last = (None, None, None)
    assert hashes[0] == hashes[1] and hashes[0][0] == want


def test_kv_cache_from_plain_values_with_sha256_cbor():
    rec = Recorder()
    counts = []
    kv = KVCache(KVCacheSettings(block_size=16, capacity=8, hash_seed="0", hash_algo="sha256_cbor"), publisher=rec,
                 count_prefix=lambda q, h: counts.append((q, h)))
    ids = list(range(40))
    for _ in range(2):
        req = GenerationRequest(request_id="r", model="m", lora=None, prompts=[Prompt(ids)])
        s = Sequence(req, 0, 0, req.prompts[0])
        kv.lookup(s)
        kv.start(s)
        kv.finish(s)
    assert counts == [(40, 0), (40, 32)]
    assert rec.events[0][1] == VllmBlockHasher("0").block_hashes("m", ids, 16) and rec.events[0][2] is None
