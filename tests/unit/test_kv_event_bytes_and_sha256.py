"""The reference's exact KV event bytes (engine.md 4.6), vLLM's sha256_cbor block hashes, and
the KV cache built from plain values (no simulator object)."""
from __future__ import annotations

import hashlib

import cbor2
import msgpack

from generation.engine.request import GenerationRequest, Prompt, Sequence
from generation.kvcache.block_hash import VllmBlockHasher
from generation.kvcache.cache import KVCache, KVCacheSettings
from generation.kvcache.events import all_blocks_cleared, block_removed, block_stored, pack_batch, pack_event
from support import vllm_kv_events
from support.kv_events import Recorder


# ---- exact bytes ------------------------------------------------------------------------------------

def test_legacy_block_stored_bytes_match_the_reference():
    ev = block_stored([1, 2], None, [7, 8], 16, None, None, map_format=False)
    want = ("99ab" + b"BlockStored".hex() + "92" + "cf0000000000000001" + "cf0000000000000002" + "c0"   # no parent: nil (C21)
            + "92" + "ce00000007" + "ce00000008" + "10" + "c0" + "a3" + b"GPU".hex() + "c0" + "c0")
    assert pack_event(ev).hex() == want


def test_map_events_are_vllm_034s_msgspec_bytes():
    """The map form is byte for byte what vLLM 0.34's msgspec encoder writes for the same
    events (integers in their shortest form, the optional fields vLLM's BlockPool sets), and
    decodes with its schema; the reference widened every hash to 0xcf + 8 bytes and wrote
    neither ``extra_keys`` nor ``group_idx``."""
    evs = [block_stored([1, 2 ** 64 - 1], None, [7, 8], 1, 1, "lora1", map_format=True,
                        extra_keys=[("lora1", "salt"), ("lora1",)]),
           block_stored([3], 2 ** 40, [9], 1, None, None, map_format=True),
           block_removed([1, 2 ** 63], True), all_blocks_cleared(True)]
    payload = pack_batch(1.5, evs, 2)
    batch = vllm_kv_events.decoder.decode(payload)
    want = vllm_kv_events.KVEventBatch(ts=1.5, data_parallel_rank=2, events=[
        vllm_kv_events.BlockStored(block_hashes=[1, 2 ** 64 - 1], parent_block_hash=None, token_ids=[7, 8],
                                   block_size=1, lora_id=1, medium="GPU", lora_name="lora1",
                                   extra_keys=[("lora1", "salt"), ("lora1",)], group_idx=0,
                                   kv_cache_spec_kind="full_attention"),
        vllm_kv_events.BlockStored(block_hashes=[3], parent_block_hash=2 ** 40, token_ids=[9], block_size=1,
                                   lora_id=None, medium="GPU", lora_name=None, extra_keys=[None], group_idx=0,
                                   kv_cache_spec_kind="full_attention"),
        vllm_kv_events.BlockRemoved(block_hashes=[1, 2 ** 63], medium="GPU", group_idx=0),
        vllm_kv_events.AllBlocksCleared()])
    assert batch == want
    assert payload == vllm_kv_events.encoder.encode(want)
    assert pack_event(evs[2]).hex() == ("84" + "a4" + b"type".hex() + "ac" + b"BlockRemoved".hex() + "ac"
                                        + b"block_hashes".hex() + "92" + "01" + "cf8000000000000000" + "a6"
                                        + b"medium".hex() + "a3" + b"GPU".hex() + "a9" + b"group_idx".hex() + "00")


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
    # vLLM 0.34's LoRA key is tagged and names the adapter's path too (_gen_lora_extra_hash_keys)
    lora_key = (("lora", "l1", "/a/l1"),)
    assert h.block_hashes("l1", ids, 16, lora="l1", lora_path="/a/l1")[0] == \
        int.from_bytes(sha((none, tuple(ids[:16]), lora_key)), "big") & (2 ** 64 - 1)


def test_vllm_hashes_without_a_seed_are_reproducible():
    """vLLM 0.34 derives NONE_HASH from the fixed seed "vllm-none-hash" when PYTHONHASHSEED is
    unset (kv_cache_utils.resolve_none_hash_seed, for sha256 and sha256_cbor), so two pods hash
    alike; the simulator drew a random NONE_HASH per process, as vLLM before 0.34."""
    ids = list(range(32))
    none = sha("vllm-none-hash")
    want = int.from_bytes(sha((none, tuple(ids[:16]), None)), "big") & (2 ** 64 - 1)
    assert VllmBlockHasher("").block_hashes("m", ids, 16)[0] == want
    assert VllmBlockHasher("").block_hashes("m", ids, 16) == VllmBlockHasher("").block_hashes("m", ids, 16)


def test_sha256_is_vllms_pickle_hash():
    """``--prefix-caching-hash-algo sha256``, vLLM's default: SHA-256 of the pickled key."""
    import pickle
    ids = list(range(32))

    def sha_p(obj):
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    b0 = sha_p((sha_p("7"), tuple(ids[:16]), None))
    b1 = sha_p((b0, tuple(ids[16:]), None))
    assert VllmBlockHasher("7", "sha256").block_hashes("m", ids, 16) == \
        [int.from_bytes(b, "big") & (2 ** 64 - 1) for b in (b0, b1)]


def test_cache_salt_is_the_first_blocks_extra_key():
    """vLLM: ``("cache_salt", salt)`` joins the first block's extra keys, so a salted prompt
    shares no block with the unsalted one (and the salt shows in the event's extra_keys)."""
    ids = list(range(32))
    none = sha("0")
    b0 = sha((none, tuple(ids[:16]), (("cache_salt", "s"),)))
    b1 = sha((b0, tuple(ids[16:]), None))
    h = VllmBlockHasher("0")
    assert h.block_hashes("m", ids, 16, salt="s") == [int.from_bytes(b, "big") & (2 ** 64 - 1) for b in (b0, b1)]
    assert h.event_extra_keys("l1", "s", True) == ("l1", "s") and h.event_extra_keys(None, "s", False) is None
    rec = Recorder()
    kv = KVCache(KVCacheSettings(block_size=16, capacity=8, hash_seed="0", hash_algo="sha256_cbor", map_format=True),
                 publisher=rec)
    for salt, hit in ((None, 0), ("s", 0), ("s", 16), (None, 16)):
        req = GenerationRequest(request_id="r", model="m", prompts=[Prompt(ids)], cache_salt=salt)
        s = Sequence(req, 0, 0, req.prompts[0])
        assert kv.lookup(s) == hit, salt
        kv.start(s)
        kv.finish(s)
    assert [e["extra_keys"] for e in rec.events] == [[None, None], [("s",), None]]


def test_sha256_cbor_lora_blocks_hash_alike_whether_or_not_the_adapter_is_in_a_slot():
    """The extra key is the sequence's own adapter: a LoRA request's first blocks (adapter not
    yet loaded) and its later ones (loaded) get the same hashes, so its prefix is found."""
    loaded = []
    kv = KVCache(KVCacheSettings(block_size=16, capacity=8, hash_seed="0", hash_algo="sha256_cbor"),
                 loaded_models=lambda: loaded, lora_path={"l1": "/p"}.get)
    ids = list(range(40))
    none = sha("0")
    want = int.from_bytes(sha((none, tuple(ids[:16]), (("lora", "l1", "/p"),))), "big") & (2 ** 64 - 1)
    hashes = []
    for state in ([], ["l1"]):
        loaded[:] = state
        req = GenerationRequest(request_id="r", model="l1", lora="l1", prompts=[Prompt(ids)])
        hashes.append(kv._hashes(Sequence(req, 0, 0, req.prompts[0])))
        kv._last = (None, None, None, None)
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
