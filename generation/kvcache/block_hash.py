"""Block hashes: a block of ``--block-size`` prompt tokens is named by a chained hash of its
whole prefix (FNV-1a 64 over canonical CBOR, or vLLM's ``sha256`` / ``sha256_cbor``).
"""
from __future__ import annotations

import hashlib
import logging
import pickle

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

    def event_extra_keys(self, lora: str | None, salt: str | None, first: bool):
        """One block's ``extra_keys`` entry in a ``BlockStored`` event: the untagged keys its
        hash used (here the first block's salt), or None."""
        return (salt,) if first and salt else None

    def _block(self, parent: int, tokens: list, extra=None) -> int:
        return fnv1a64(cbor2.dumps([parent, tokens, extra], canonical=True))

    def block_hashes(self, model: str, ids, block_size: int, lora: str | None = None,
                     lora_path: str | None = None, salt: str | None = None) -> list[int]:
        """Hashes of the full blocks of ``ids`` (``len(ids) // block_size`` uint64 values, in
        prompt order); the trailing partial block gets none.  The reference's FNV recipe keys
        blocks by ``model`` (its root) and has no LoRA extra key: ``lora`` and ``lora_path``
        are unused here; a ``salt`` (vLLM's ``cache_salt``) is the first block's extra key, so
        salted prompts share no block with unsalted ones (vLLM's isolation)."""
        out = []
        parent = self.root(model)
        memo = self._memo
        for i in range(0, len(ids) - block_size + 1, block_size):
            block = tuple(ids[i:i + block_size])
            extra = [salt] if salt and i == 0 else None
            key = (parent, block, extra and salt)
            h = memo.get(key)
            if h is None:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                h = memo[key] = self._block(parent, list(block), extra)
            parent = h
            out.append(h)
        return out


DEFAULT_NONE_HASH_SEED = "vllm-none-hash"     # vLLM 0.34's seed when PYTHONHASHSEED is unset


def sha256_pickle(obj) -> bytes:
    """vLLM's ``sha256`` (``vllm/utils/hashing.py``): SHA-256 of the object pickled with the
    highest protocol (deterministic for the bytes / int tuples / str / None a block key holds)."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj) -> bytes:
    """vLLM's ``sha256_cbor``: SHA-256 of the object's canonical CBOR."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


class VllmBlockHasher(BlockHasher):
    """vLLM 0.34's prefix-caching block hash (``--prefix-caching-hash-algo sha256`` or
    ``sha256_cbor``; ``vllm/v1/core/kv_cache_utils.py``): ``H((parent, tokens, extra_keys))``
    with the 32-byte parent digest and, for the first block, ``NONE_HASH = H(seed)``: the seed
    is ``PYTHONHASHSEED`` (``--hash-seed``) when set, else the fixed ``"vllm-none-hash"`` (0.34
    made cryptographic hashes reproducible across processes by default: ``resolve_none_hash_seed``).
    ``extra_keys`` (``generate_block_hash_extra_keys``): ``("lora", name, path)`` on every block
    of a LoRA request, then ``("cache_salt", salt)`` on the first block of a salted one; nil
    when there are none.  Events carry the low 64 bits as an integer
    (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by default).  The keys come from the
    sequence's own LoRA, so a prompt hashes the same whether or not its adapter is in a slot."""

    def __init__(self, seed: str, algo: str = "sha256_cbor"):
        super().__init__(seed)
        self.hash_fn = sha256_pickle if algo == "sha256" else sha256_cbor
        self.none_hash = self.hash_fn(seed or DEFAULT_NONE_HASH_SEED)
        self._digests: dict[int, bytes] = {}       # 64-bit key -> full digest (the next parent)

    @staticmethod
    def sha256_cbor(obj) -> bytes:
        return sha256_cbor(obj)

    @staticmethod
    def extra_keys(lora: str | None, lora_path: str | None, salt: str | None, first: bool):
        """The tagged extra keys of one block (what is hashed), or None."""
        keys = []
        if lora:
            keys.append(("lora", lora, lora_path or ""))
        if first and salt:
            keys.append(("cache_salt", salt))
        return tuple(keys) if keys else None

    def event_extra_keys(self, lora: str | None, salt: str | None, first: bool):
        """vLLM's ``to_event_extra_keys`` of one block: its keys untagged (the LoRA name, the
        salt), or None."""
        keys = ((lora,) if lora else ()) + ((salt,) if first and salt else ())
        return keys or None

    def block_hashes(self, model: str, ids, block_size: int, lora: str | None = None,
                     lora_path: str | None = None, salt: str | None = None) -> list[int]:
        out = []
        parent = self.none_hash
        memo, digests, fn = self._memo, self._digests, self.hash_fn
        for i in range(0, len(ids) - block_size + 1, block_size):
            block = tuple(ids[i:i + block_size])
            extra = self.extra_keys(lora, lora_path, salt, i == 0)
            key = (parent, block, extra)
            h = memo.get(key)
            if h is None:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                    digests.clear()
                d = fn((parent, block, extra))
                h = memo[key] = int.from_bytes(d, "big") & MASK64
                digests[h] = d
                parent = d
            else:
                parent = digests[h]
            out.append(h)
        return out
