"""vLLM 0.34's KV-event wire schema as msgspec types, for decoding (and re-encoding) what the
simulator publishes exactly as vLLM's own consumers do (``vllm/distributed/kv_events.py`` of
0.34.0: the batch is an ``array_like`` struct ``[ts, events, data_parallel_rank]``; each event
a tagged struct (``"type"``) encoded as a map with ``omit_defaults``: required fields always
written, optional ones only when not nil).  Field names, types and order are the wire format."""
from __future__ import annotations

import msgspec

Hash = bytes | int      # vLLM's ExternalBlockHash


class Batch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class Event(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(Event):
    block_hashes: list[Hash]
    parent_block_hash: Hash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(Event):
    block_hashes: list[Hash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(Event):
    pass


class KVEventBatch(Batch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
encoder = msgspec.msgpack.Encoder()
