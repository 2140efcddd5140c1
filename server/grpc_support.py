"""Parts of the gRPC ``VllmEngine`` servicer (:mod:`server.grpc_engine`) that are not RPC
handlers: the running generations by request id, the scheduler state ``GetLoads`` reports, the KV-event relay behind
``SubscribeKvEvents`` and the tokenizer bundle behind ``GetTokenizer``."""
from __future__ import annotations

import hashlib
import io
import os
import zipfile

from generation.engine.admission import queue_counts
from generation.metrics.scrape import kv_cache_usage

TOKENIZER_CHUNK = 64 * 1024      # bytes per GetTokenizerChunk, as smg-grpc-servicer's CHUNK_SIZE
KV_SUBSCRIBER_QUEUE = 4096       # batches buffered per SubscribeKvEvents stream
# the files smg-grpc-servicer's tokenizer bundle takes (tokenizer_bundle.TOKENIZER_FILES / _GLOBS)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model",
                   "chat_template.json", "preprocessor_config.json", "processor_config.json",
                   "video_preprocessor_config.json")
TOKENIZER_SUFFIXES = (".tiktoken", ".jinja", ".model")


def _pb():
    from smg_grpc_proto.generated import common_pb2
    return common_pb2


class RunningIds:
    """Request id -> the sequences of each of its generations still running.  An id in use is
    no refusal (vLLM 0.34's InputProcessor.assign_request_id suffixes every request's id with 8
    random characters, so two requests with one id both run, and OutputProcessor.abort_requests
    aborts every request under an external id); a generation leaves when it ends, not when its
    client has read it (OutputProcessor.process_outputs -> _finish_request frees a request as it
    finishes), so a client that stops reading holds nothing here."""

    def __init__(self):
        self._ids: dict[str, dict] = {}       # id -> {id(seqs): seqs}: O(1) each way, many under one id too

    def add(self, rid: str, seqs) -> None:
        self._ids.setdefault(rid, {})[id(seqs)] = seqs

    def discard(self, rid: str, seqs) -> None:
        """``seqs``' generation is over (idempotent)."""
        gens = self._ids.get(rid)
        if gens is None:
            return
        gens.pop(id(seqs), None)
        if not gens:
            del self._ids[rid]

    def get(self, rid: str) -> list:
        return list(self._ids.get(rid, {}).values())

    def all(self) -> list:
        return [seqs for gens in self._ids.values() for seqs in gens.values()]

    def __contains__(self, rid: str) -> bool:
        return rid in self._ids


def signed64(h: int) -> int:
    """A 64-bit block hash as the proto's ``int64`` (two's complement, as the servicer's
    ``to_int64``)."""
    h &= (1 << 64) - 1
    return h - (1 << 64) if h >= 1 << 63 else h


# ---- scheduler state ---------------------------------------------------------------------------

def scheduler_state(sim) -> tuple[int, int, float, int]:
    """``(running, waiting, kv_usage, waiting_uncached_tokens)`` as ``/metrics`` reports them
    (``vllm:num_requests_running`` / ``_waiting``, ``vllm:kv_cache_usage_perc``): the step
    engine's scheduler when there is one (``--latency-calculator step``), else the simulator's
    slots and queue.  ``kv_usage`` is a fraction in [0, 1]."""
    waiting, running = queue_counts(sim)
    engine = getattr(sim, "engine", None)
    if engine is not None:
        # the requests in their frontend delay count as waiting, their prompts as uncached tokens
        sched = engine.scheduler
        uncached = sum(max(r.prompt_len - r.num_computed, 0) for r in sched.waiting) + engine.pending_tokens
    else:
        uncached = sum(s.prompt_len - s.cached_tokens for s in list(sim.waiting))
    return running, waiting, kv_cache_usage(sim), uncached


# ---- KV events ---------------------------------------------------------------------------------

class KvEventRelay:
    """``SubscribeKvEvents``: each batch the KV cache's :class:`~generation.kvcache.events.
    EventPublisher` sends on ZMQ, as a ``KvEventBatch`` with the ZMQ sequence number, timestamp
    and data-parallel rank (the servicer relays the publisher's batches so), to every
    subscribed stream's queue.  Event ids count the events relayed from 1."""

    def __init__(self, publisher, block_size: int, rank: int):
        self.publisher = publisher
        self.block_size = block_size
        self.rank = rank
        self.subscribers: list = []      # gevent queues
        self.event_id = 0

    def subscribe(self, q) -> None:
        if not self.subscribers:
            self.publisher.listeners.append(self.relay)
        self.subscribers.append(q)

    def unsubscribe(self, q) -> None:
        if q in self.subscribers:
            self.subscribers.remove(q)
        if not self.subscribers and self.relay in self.publisher.listeners:
            self.publisher.listeners.remove(self.relay)

    def relay(self, seq: int, ts: float, events: list) -> None:
        common_pb2 = _pb()
        converted = []
        for ev in events:
            self.event_id += 1
            converted.append(self.convert(common_pb2, ev, self.event_id))
        batch = common_pb2.KvEventBatch(sequence_number=seq, timestamp=ts, events=converted, dp_rank=self.rank)
        for q in list(self.subscribers):
            if q.qsize() < KV_SUBSCRIBER_QUEUE:
                q.put(batch)

    def convert(self, common_pb2, event, event_id: int):
        """One ZMQ event (the array or the map form) as a ``KvCacheEvent``: blocks on the
        device (``tier``, ``medium`` GPU, ``cache_level`` 0) or, with ``medium`` CPU (the CPU
        tier's), on the host (``cache_level`` 1, the proto's mapping), local, with their token ids."""
        if isinstance(event, dict):
            kind = event["type"]
            hashes = event.get("block_hashes") or []
            parent, tokens = event.get("parent_block_hash"), event.get("token_ids") or []
            lora_id, medium, lora = event.get("lora_id"), event.get("medium"), event.get("lora_name")
        else:
            kind = event[0]
            hashes = event[1] if len(event) > 1 else []
            stored_ = kind == "BlockStored"
            parent = event[2] if stored_ else None
            tokens = event[3] if stored_ else []
            lora_id = event[5] if stored_ else None
            medium = (event[6] if stored_ else event[2]) if len(event) > 2 else None
            lora = event[7] if stored_ else None
        host = medium == "CPU"
        device = common_pb2.KV_CACHE_TIER_HOST if host else common_pb2.KV_CACHE_TIER_DEVICE
        level = 1 if host else 0
        local = common_pb2.KV_CACHE_LOCALITY_LOCAL
        if kind == "BlockStored":
            bs = self.block_size
            blocks = []
            for i, h in enumerate(hashes):
                b = common_pb2.KvBlock(block_hash=signed64(h), token_ids=tokens[i * bs:(i + 1) * bs], block_size=bs,
                                       cache_level=level)
                if lora_id is not None:
                    b.lora_id = lora_id
                blocks.append(b)
            stored = common_pb2.KvBlocksStored(blocks=blocks, tier=device, locality=local)
            if medium:
                stored.medium = medium
            if parent is not None:
                stored.parent_block_hash = signed64(parent)
            if lora:
                stored.lora_name = lora
            return common_pb2.KvCacheEvent(event_id=event_id, stored=stored)
        if kind == "BlockRemoved":
            removed = common_pb2.KvBlocksRemoved(block_hashes=[signed64(h) for h in hashes], tier=device,
                                                 locality=local, cache_level=level)
            if medium:
                removed.medium = medium
            return common_pb2.KvCacheEvent(event_id=event_id, removed=removed)
        return common_pb2.KvCacheEvent(event_id=event_id, cleared=common_pb2.KvCacheCleared())


# ---- tokenizer ---------------------------------------------------------------------------------

def tokenizer_dir(cfg) -> str | None:
    """The directory holding the loaded tokenizer's files: ``--tokenizer`` or ``--model`` when
    it is a directory, else the Hugging Face cache snapshot of that hub name (read only, offline);
    None when there is none (a bare tokenizer.json, or not in the cache)."""
    name = cfg.tokenizer or cfg.model
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        return path
    if os.path.exists(path) or name.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
        for f in ("tokenizer_config.json", "tokenizer.json"):
            found = try_to_load_from_cache(name, f, cache_dir=getattr(cfg, "tokenizers_cache_dir", "") or None)
            if isinstance(found, str):
                return os.path.dirname(found)
    except Exception:            # noqa: BLE001 - no cache, no hub library: no files to send
        return None
    return None


def build_tokenizer_zip(path: str) -> tuple[bytes, str]:
    """The deflated zip of the tokenizer files in ``path`` (the servicer's file list and
    suffixes) and its SHA-256 hex digest.  Raises FileNotFoundError when there is none."""
    names = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(path, n))]
    names += sorted(n for n in os.listdir(path) if n.endswith(TOKENIZER_SUFFIXES) and n not in names
                    and os.path.isfile(os.path.join(path, n)))
    if not names:
        raise FileNotFoundError(f"No tokenizer files found in {path}")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n in names:
            z.write(os.path.join(path, n), n)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def tokenizer_chunks(data: bytes, digest: str):
    """``GetTokenizerChunk`` messages of at most :data:`TOKENIZER_CHUNK` bytes, the digest on
    the last one only."""
    common_pb2 = _pb()
    for off in range(0, len(data), TOKENIZER_CHUNK):
        last = off + TOKENIZER_CHUNK >= len(data)
        yield common_pb2.GetTokenizerChunk(data=data[off:off + TOKENIZER_CHUNK], sha256=digest if last else "")
