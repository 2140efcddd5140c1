"""Block hashes: a block of ``--block-size`` prompt tokens is named by a chained hash of its
whole prefix (FNV-1a 64 over canonical CBOR, or vLLM's ``sha256_cbor``).
"""
from __future__ import annotations

import hashlib
import logging
import os

import cbor2

log = logging.getLogger("vllm_sim.kvcache")

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF

def fnv1a64(data: bytes) -> int:
    """FNV-1a 64-bit hash of ``data`` (Go's ``hash/fnv.New64a``)."""
    h = FNV_OFFSET
    p, m = FNV_PRIME, MASK64
    for b in data:
        h = ((h ^ b) * p) & m
    return h


def chain_hash(parent: int, tokens, extra=None) -> int:
    """``FNV1a64(canonical CBOR([parent, tokens, extra]))``: the hash of one block given its
    parent's hash (uint64), its token ids (list of uint32, or None) and its extra keys (None for
    text-only blocks, the model name for the root)."""
    return fnv1a64(cbor2.dumps([parent, tokens, extra], canonical=True))


MEMO_SIZE = 200_000          # memoised blocks (~200 bytes each); cleared when full


class BlockHasher:
    """Block keys of llm-d's kvblock chunked token database (engine.md 4.2).

    ``seed`` is ``--hash-seed`` (env ``PYTHONHASHSEED``; "" by default).  The root of every
    chain is ``H(FNV(seed), None, model)``, so different models never share blocks.  Hashes are
    memoised per ``(parent, block tokens)``: the chain makes that pair identify the block."""

    def __init__(self, seed: str):
        self.seed_hash = fnv1a64(seed.encode())
        self._roots: dict[str, int] = {}
        self._memo: dict[tuple, int] = {}

    def root(self, model: str) -> int:
        """The init hash of ``model``'s chains."""
        r = self._roots.get(model)
        if r is None:
            r = self._roots[model] = chain_hash(self.seed_hash, None, model)
        return r

    def _block(self, parent: int, tokens: list) -> int:
        return fnv1a64(cbor2.dumps([parent, tokens, None], canonical=True))

    def block_hashes(self, model: str, ids, block_size: int, lora: str | None = None) -> list[int]:
        """Hashes of the full blocks of ``ids`` (``len(ids) // block_size`` uint64 values, in
        prompt order); the trailing partial block gets none.  The reference's FNV recipe keys
        blocks by ``model`` (its root) and has no LoRA extra key: ``lora`` is unused here."""
        out = []
        parent = self.root(model)
        memo = self._memo
        for i in range(0, len(ids) - block_size + 1, block_size):
            block = tuple(ids[i:i + block_size])
            key = (parent, block)
            h = memo.get(key)
            if h is None:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                h = memo[key] = self._block(parent, list(block))
            parent = h
            out.append(h)
        return out


class VllmBlockHasher(BlockHasher):
    """vLLM's ``sha256_cbor`` prefix-caching hash (``--prefix-caching-hash-algo sha256_cbor``):
    ``sha256(canonical CBOR([parent, tokens, extra_keys]))`` with the 32-byte parent digest,
    the first block's parent ``NONE_HASH = sha256_cbor(PYTHONHASHSEED)`` (random when no seed
    is set, as vLLM), ``extra_keys`` ``[lora_name]`` for LoRA requests else nil (vLLM
    ``kv_cache_utils.hash_block_tokens``).  Events carry the low 64 bits as an integer, as vLLM
    does with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``.  The extra key comes from the
    sequence's own LoRA (``lora``), so a prompt hashes the same whether or not its adapter is
    in a slot yet."""

    def __init__(self, seed: str):
        super().__init__(seed)
        if seed:
            self.none_hash = self.sha256_cbor(seed)
        else:
            log.warning("PYTHONHASHSEED / --hash-seed is not set: sha256_cbor block hashes are "
                        "not reproducible (vLLM behaves the same)")
            self.none_hash = os.urandom(32)
        self._digests: dict[int, bytes] = {}       # 64-bit key -> full digest (the next parent)

    @staticmethod
    def sha256_cbor(obj) -> bytes:
        return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()

    def block_hashes(self, model: str, ids, block_size: int, lora: str | None = None) -> list[int]:
        extra = (lora,) if lora else None
        out = []
        parent = self.none_hash
        memo, digests = self._memo, self._digests
        for i in range(0, len(ids) - block_size + 1, block_size):
            block = tuple(ids[i:i + block_size])
            key = (parent, block, extra)
            h = memo.get(key)
            if h is None:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                    digests.clear()
                d = self.sha256_cbor((parent, block, extra))
                h = memo[key] = int.from_bytes(d, "big") & MASK64
                digests[h] = d
                parent = d
            else:
                parent = digests[h]
            out.append(h)
        return out


