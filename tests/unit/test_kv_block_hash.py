"""The KV block hash recipe against engine.md 4.2's test vectors (verified with the Go libs),
and the event encodings against 4.6's examples (decoded, since the byte widths of integers
are an encoder detail any msgpack reader accepts)."""
from __future__ import annotations

import cbor2
import msgpack
import pytest

from generation.kvcache.block_hash import BlockHasher, chain_hash, fnv1a64
from generation.kvcache.events import all_blocks_cleared, block_removed, block_stored, pack_event, rank_endpoint


def test_fnv1a64_of_empty_seed_is_the_offset_basis():
    assert fnv1a64(b"") == 0xCBF29CE484222325 == 14695981039346656037


def test_fnv1a64_of_seed_42():
    assert fnv1a64(b"42") == 571532774284038691


def test_canonical_cbor_of_root_triple():
    assert cbor2.dumps([0xCBF29CE484222325, None, "testmodel"], canonical=True).hex() == \
        "831bcbf29ce484222325f669746573746d6f64656c"


def test_canonical_cbor_of_multimodal_extra():
    assert cbor2.dumps([5, [1, 2], [{"Hash": "abc"}]], canonical=True).hex() == \
        "830582010281a1644861736863616263"


def test_canonical_cbor_sorts_map_keys_length_first():
    assert cbor2.dumps({"bb": 1, "a": 2, "c": 3}, canonical=True) == \
        bytes.fromhex("a3") + b"\x61a\x02" + b"\x61c\x03" + b"\x62bb\x01"


def test_root_hash_with_empty_seed():
    assert BlockHasher("").root("testmodel") == 14134231071176785998


def test_block0_cbor_payload():
    root = BlockHasher("").root("testmodel")
    assert cbor2.dumps([root, list(range(1, 17)), None], canonical=True).hex() == \
        "831bc426e045dac8004e90" + "".join(f"{i:02x}" for i in range(1, 17)) + "f6"


def test_block_keys_empty_seed():
    assert BlockHasher("").block_hashes("testmodel", list(range(1, 41)), 16) == \
        [16213904221320957624, 15354827318752259859]


def test_block_keys_seed_42():
    assert BlockHasher("42").block_hashes("testmodel", list(range(1, 41)), 16) == \
        [12404379209620774239, 11464917070091514477]


def test_chain_hash_matches_block_hashes():
    h = BlockHasher("")
    root = h.root("testmodel")
    b0 = chain_hash(root, list(range(1, 17)))
    b1 = chain_hash(b0, list(range(17, 33)))
    assert h.block_hashes("testmodel", list(range(1, 33)), 16) == [b0, b1]


@pytest.mark.parametrize("n, blocks", [(0, 0), (15, 0), (16, 1), (31, 1), (32, 2), (40, 2), (48, 3)])
def test_partial_block_is_dropped(n, blocks):
    assert len(BlockHasher("").block_hashes("m", list(range(n)), 16)) == blocks


def test_models_never_share_blocks():
    ids = list(range(32))
    h = BlockHasher("")
    assert set(h.block_hashes("a", ids, 16)).isdisjoint(h.block_hashes("b", ids, 16))


def test_prefix_shares_hashes():
    h = BlockHasher("")
    a = h.block_hashes("m", list(range(32)), 16)
    b = h.block_hashes("m", list(range(32)) + list(range(200, 216)), 16)
    assert b[:2] == a and len(b) == 3


def test_legacy_block_stored_encoding():
    ev = block_stored([1, 2], None, [7, 8], 16, None, None, map_format=False)
    # parent nil for a sequence's first block, as vLLM (case C21), not the reference's 0
    assert ev == ["BlockStored", [1, 2], None, [7, 8], 16, None, "GPU", None, None]
    assert msgpack.unpackb(msgpack.packb(ev)) == ev


def test_map_block_stored_with_lora_key_order():
    ev = block_stored([1], None, [7], 16, 1, "lora1", map_format=True, extra_keys=[("lora1",)])
    assert list(ev) == ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                        "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"]
    packed = msgpack.packb(ev)
    assert pack_event(ev)[:3] == b"\xde\x00\x0b"      # map16 of 11 entries, as msgspec sizes it
    assert msgpack.unpackb(packed) == {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
                                       "token_ids": [7], "block_size": 16, "lora_id": 1, "medium": "GPU",
                                       "lora_name": "lora1", "extra_keys": [["lora1"]], "group_idx": 0,
                                       "kv_cache_spec_kind": "full_attention"}


def test_map_block_stored_writes_nil_lora_fields():
    # vLLM's msgspec BlockStored requires every field (C38): nil, not omitted; extra_keys one
    # entry per block, nil ones included, as vLLM 0.34's BlockPool writes them
    ev = block_stored([1, 2], 5, [7, 8], 1, None, None, map_format=True)
    assert ev == {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": 5, "token_ids": [7, 8],
                  "block_size": 1, "lora_id": None, "medium": "GPU", "lora_name": None,
                  "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}


def test_removed_and_cleared_encodings():
    assert block_removed([3], False) == ["BlockRemoved", [3], "GPU"]
    assert block_removed([3], True) == {"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU", "group_idx": 0}
    assert all_blocks_cleared(False) == ["AllBlocksCleared"]
    assert all_blocks_cleared(True) == {"type": "AllBlocksCleared"}


def test_batch_bytes_match_reference_example():
    assert msgpack.packb([1.5, [all_blocks_cleared(False)], 0]).hex() == \
        "93cb3ff8000000000000" + "91" + "91b0" + b"AllBlocksCleared".hex() + "00"


def test_rank_endpoint_offsets_port():
    assert rank_endpoint("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert rank_endpoint("tcp://127.0.0.1:5557", 2) == "tcp://127.0.0.1:5559"
    assert rank_endpoint("tcp://*:5600", 1) == "tcp://*:5601"
