"""The simulated prefix KV cache and vLLM's KV-cache events over ZMQ (engine.md section 4).

Prompt token ids are cut into full blocks of ``--block-size`` tokens (a trailing partial block
is not cached) and each block is named by a chained hash (:class:`BlockHasher`, the llm-d
router's "chunked token database" recipe: FNV-1a 64 over canonical CBOR), so a block's hash
identifies its whole prefix and the model it belongs to.  The cache holds ``--kv-cache-size``
blocks: blocks referenced by running sequences ("used", with a reference count) and blocks of
finished sequences kept as the prefix cache ("unused", evicted least recently used first).

Every change is announced the way vLLM's ``ZmqEventPublisher`` does, so a KV-aware router
(llm-d's kv-cache manager, vLLM's ``kv_events`` subscriber) can track this pod:
``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` events, batched into msgpack
``[ts, [events], data_parallel_rank]`` payloads sent as ``[topic, seq, payload]`` on a PUB socket
that connects to ``--zmq-endpoint``.

Where this differs from the Go reference (deliberately, to do what vLLM does):
- ``cached_tokens`` counts the leading run of cached blocks (vLLM's prefix hit: a block past a
  miss cannot be reused), where the reference counts every cached block.
- A request that does not fit (all blocks referenced by running sequences) is not failed with
  a 500: the blocks that fit are stored and the rest are simply not cached (vLLM would queue or
  preempt; a simulator has no memory to run out of).
- The legacy array event carries ``parent_block_hash`` nil (not 0) for a sequence's first
  block, as vLLM's ``BlockStored`` does (cases C20/C21).
- When the cached blocks have gaps (a middle block was evicted), one ``BlockStored`` per run of
  new consecutive blocks is sent, so each event's parent chain stays true.
- Events are flushed after a few milliseconds (or as soon as ``--event-batch-size`` are
  pending) instead of the reference's one-second timer, so routers see blocks promptly.
"""
from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections import OrderedDict

import cbor2
import gevent
import msgpack

log = logging.getLogger("vllm_sim.kvcache")

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF
MEDIUM = "GPU"
FLUSH_DELAY = 0.002         # seconds: coalesce events of requests starting together


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


class BlockHasher:
    """Block keys of llm-d's kvblock chunked token database (engine.md 4.2).

    ``seed`` is ``--hash-seed`` (env ``PYTHONHASHSEED``; "" by default).  The root of every
    chain is ``H(FNV(seed), None, model)``, so different models never share blocks."""

    def __init__(self, seed: str):
        self.seed_hash = fnv1a64(seed.encode())
        self._roots: dict[str, int] = {}

    def root(self, model: str) -> int:
        """The init hash of ``model``'s chains."""
        r = self._roots.get(model)
        if r is None:
            r = self._roots[model] = chain_hash(self.seed_hash, None, model)
        return r

    def block_hashes(self, model: str, ids, block_size: int) -> list[int]:
        """Hashes of the full blocks of ``ids`` (``len(ids) // block_size`` uint64 values, in
        prompt order); the trailing partial block gets none."""
        out = []
        parent = self.root(model)
        dumps = cbor2.dumps
        for i in range(0, len(ids) - block_size + 1, block_size):
            parent = fnv1a64(dumps([parent, list(ids[i:i + block_size]), None], canonical=True))
            out.append(parent)
        return out


# ---- events --------------------------------------------------------------------------------
def block_stored(hashes, parent, token_ids, block_size, lora_id, lora_name, map_format: bool):
    """A ``BlockStored`` event in vLLM's legacy array form (9 positions, nil where absent) or,
    with ``map_format``, the map form of vLLM PR #42892 (nil optional keys omitted)."""
    if map_format:
        ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
              "token_ids": token_ids, "block_size": block_size}
        if lora_id is not None:
            ev["lora_id"] = lora_id
        ev["medium"] = MEDIUM
        if lora_name is not None:
            ev["lora_name"] = lora_name
        return ev
    return ["BlockStored", hashes, parent, token_ids, block_size, lora_id, MEDIUM, lora_name, None]


def block_removed(hashes, map_format: bool):
    """A ``BlockRemoved`` event."""
    if map_format:
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": MEDIUM}
    return ["BlockRemoved", hashes, MEDIUM]


def all_blocks_cleared(map_format: bool):
    """An ``AllBlocksCleared`` event."""
    return {"type": "AllBlocksCleared"} if map_format else ["AllBlocksCleared"]


def rank_endpoint(endpoint: str, rank: int) -> str:
    """``endpoint`` with its port offset by the data-parallel ``rank`` (engine.md 8)."""
    if rank <= 0:
        return endpoint
    m = re.match(r"^(.*):(\d+)$", endpoint)
    if not m:
        return endpoint
    return f"{m.group(1)}:{int(m.group(2)) + rank}"


class EventPublisher:
    """Batches KV events and sends them on a ZMQ PUB socket that connects to ``endpoint``.

    Message: ``[topic, seq (8-byte big-endian, from 1, +1 per batch), msgpack([ts, events,
    rank])]`` with ``ts`` in unix seconds (float).  At most ``batch_size`` events per message;
    a batch goes out as soon as it is full, the rest ``FLUSH_DELAY`` after the first pending
    event.  At most ``max_pending`` events wait (more are dropped, as the reference's bounded
    queue does).  The socket is ``zmq.green`` (never blocks the gevent hub; PUB drops when no
    subscriber keeps up); it connects at once (ZMQ retries until the subscriber binds) so the
    subscription is in place before the first request, and again in a forked child."""

    def __init__(self, endpoint: str, topic: str, batch_size: int, rank: int, max_pending: int):
        self.endpoint = endpoint
        self.topic = topic.encode()
        self.batch_size = max(batch_size, 1)
        self.rank = rank
        self.max_pending = max(max_pending, self.batch_size)
        self.pending: list = []
        self.seq = 0
        self._socket = None
        self._pid = 0
        self._timer = None
        self.dropped = 0
        try:        # connect now: the subscription handshake must be done before the first event
            self._connect()
        except Exception:
            log.exception("cannot connect the KV-event publisher to %s", endpoint)

    def publish(self, event) -> None:
        """Queue one event; never blocks."""
        if len(self.pending) >= self.max_pending:
            self.dropped += 1
            return
        self.pending.append(event)
        if len(self.pending) >= self.batch_size:
            self.flush()
        elif self._timer is None:
            self._timer = gevent.spawn_later(FLUSH_DELAY, self._timed_flush)

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Send every pending event now, ``batch_size`` per message."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            sock = self._socket if self._pid == os.getpid() else self._connect()
            bs = self.batch_size
            for i in range(0, len(pending), bs):
                self.seq += 1
                payload = msgpack.packb([time.time(), pending[i:i + bs], self.rank])
                sock.send_multipart([self.topic, struct.pack(">Q", self.seq), payload], copy=True)
        except Exception:     # a broken publisher must never fail requests
            log.exception("failed to publish KV events to %s", self.endpoint)

    def _connect(self):
        import zmq.green as zmq
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)          # pending events are discarded on shutdown
        sock.connect(self.endpoint)
        self._socket = sock
        self._pid = os.getpid()      # a forked child (gunicorn --preload) reconnects
        return sock

    def close(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None
        self.pending = []
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None


# ---- the cache -----------------------------------------------------------------------------
class KVCache:
    """The prefix cache of one simulator (``--enable-kvcache``), engine.md 4.3-4.8.

    ``sim`` provides ``config`` (block_size, kv_cache_size, hash_seed, zmq_endpoint,
    event_batch_size, use_vllm_map_event_format, pod_ip, port, model, data_parallel_rank),
    ``metrics`` (prefix_queries / prefix_hits counters) and ``loras`` (loaded adapters and their
    1-based slots, the events' ``lora_id``).  All methods run in the one gevent thread.
    """

    def __init__(self, sim):
        cfg = sim.config
        self.sim = sim
        self.config = cfg
        self.block_size = cfg.block_size
        self.capacity = cfg.kv_cache_size
        self.hasher = BlockHasher(cfg.hash_seed or "")
        self.map_format = bool(cfg.use_vllm_map_event_format)
        self.enabled = True
        self.epoch = 0                                   # bumped by sleep(): stale references
        self.used: dict[int, int] = {}                   # hash -> reference count
        self.unused: dict[str, OrderedDict] = {}         # model -> {hash: tick}, oldest first
        self.model_of: dict[int, str] = {}               # every cached block -> its model
        self._tick = 0
        self._last = (None, None, None)                  # (prompt, model, hashes): n > 1 reuse
        rank = max(cfg.data_parallel_rank, 0)
        self.publisher = None
        if cfg.zmq_endpoint:
            topic = f"kv@{cfg.pod_ip}:{cfg.port}@{cfg.model}"
            self.publisher = EventPublisher(rank_endpoint(cfg.zmq_endpoint, rank), topic,
                                            cfg.event_batch_size, rank, 10 * max(self.capacity, 1))

    # ---- queries -------------------------------------------------------------------------
    def _hashes(self, seq) -> list[int]:
        hashes = seq.kv_hashes
        if hashes is None:
            prompt, model = seq.prompt, seq.request.model
            last = self._last
            if last[0] is prompt and last[1] == model:
                hashes = last[2]
            else:
                hashes = self.hasher.block_hashes(model, prompt.ids, self.block_size)
                self._last = (prompt, model, hashes)
            seq.kv_hashes = hashes
        return hashes

    def _prefix_blocks(self, hashes) -> int:
        cached = self.model_of
        k = 0
        for h in hashes:
            if h not in cached:
                break
            k += 1
        return k

    def lookup(self, seq) -> int:
        """Prompt tokens of ``seq`` already in the cache: the leading cached full blocks times
        ``block_size`` (0 while asleep).  Stores the block hashes on ``seq.kv_hashes``.  Changes
        nothing: the prefix-cache counters tick when the sequence starts (:meth:`start`)."""
        hashes = self._hashes(seq)
        if not self.enabled:
            return 0
        return self._prefix_blocks(hashes) * self.block_size

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: blocks referenced by running sequences / cache size
        (0..1); idle prefix-cache blocks do not count."""
        return len(self.used) / self.capacity if self.capacity > 0 else 0.0

    # ---- sequence life -------------------------------------------------------------------
    def start(self, seq) -> None:
        """``seq`` starts running: reference its cached blocks, store its new full blocks
        (evicting least recently used idle blocks when full) and announce them; sets
        ``seq.cached_tokens`` to the prefix hit found now and counts the prefix-cache query
        (all prompt tokens) and hits (cached tokens), as vLLM does per scheduled request.

        Blocks that do not fit (every block is referenced) are not cached; the request still
        runs."""
        hashes = self._hashes(seq)
        metrics = self.sim.metrics
        metrics.prefix_queries.inc(seq.prompt_len)
        if not self.enabled:
            seq.cached_tokens = 0
            seq.kv_blocks = None
            return
        bs = self.block_size
        hit = self._prefix_blocks(hashes)
        seq.cached_tokens = hit * bs
        if hit:
            metrics.prefix_hits.inc(hit * bs)
        used, model_of = self.used, self.model_of
        model = seq.request.model
        held = []
        runs = []                                        # [start index, end index) of new blocks
        for i, h in enumerate(hashes):
            if h in model_of:
                self._ref(h)
                held.append(h)
                continue
            if not self._make_room():
                break                                    # full of referenced blocks
            used[h] = 1
            model_of[h] = model
            held.append(h)
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
        seq.kv_blocks = (self.epoch, held)
        if runs and self.publisher is not None:
            lora = seq.lora
            lora_id = self.sim.loras.slots.get(lora) if lora else None
            ids = seq.prompt.ids
            for a, b in runs:
                self.publisher.publish(block_stored(
                    hashes[a:b], hashes[a - 1] if a else None, list(ids[a * bs:b * bs]), bs,
                    lora_id, lora, self.map_format))

    def finish(self, seq) -> None:
        """``seq`` ended (any way): release its references; blocks left unreferenced stay
        cached and become evictable, most recently used last."""
        blocks = seq.kv_blocks
        seq.kv_blocks = None
        if not blocks or blocks[0] != self.epoch:
            return
        used, model_of, unused = self.used, self.model_of, self.unused
        for h in blocks[1]:
            c = used.get(h)
            if c is None:
                continue
            if c > 1:
                used[h] = c - 1
                continue
            del used[h]
            model = model_of[h]
            lru = unused.get(model)
            if lru is None:
                lru = unused[model] = OrderedDict()
            self._tick += 1
            lru[h] = self._tick

    def _ref(self, h: int) -> None:
        used = self.used
        c = used.get(h)
        if c is not None:
            used[h] = c + 1
            return
        self.unused[self.model_of[h]].pop(h)
        used[h] = 1

    def _make_room(self) -> bool:
        """Free one slot if the cache is full, evicting the idle block that became idle first,
        preferring blocks of models no longer loaded (an unloaded LoRA).  False when every
        block is referenced."""
        if len(self.model_of) < self.capacity:
            return True
        loaded = set(self.config.served_names)
        loaded.update(self.sim.loras.loaded)
        victim = best = None
        for model, lru in self.unused.items():
            if not lru:
                continue
            h, tick = next(iter(lru.items()))
            if model not in loaded and (victim is None or tick < victim[2]):
                victim = (model, h, tick)
            if best is None or tick < best[2]:
                best = (model, h, tick)
        victim = victim or best
        if victim is None:
            return False
        model, h, _ = victim
        del self.unused[model][h]
        del self.model_of[h]
        if self.publisher is not None:
            self.publisher.publish(block_removed([h], self.map_format))
        return True

    # ---- sleep mode ----------------------------------------------------------------------
    def sleep(self) -> None:
        """``POST /sleep`` (effective): discard every block, announce ``AllBlocksCleared`` once,
        and stay disabled (lookups 0, nothing stored) until :meth:`wake`."""
        if not self.enabled:
            return
        self.enabled = False
        self._clear()
        if self.publisher is not None:
            self.publisher.publish(all_blocks_cleared(self.map_format))

    def wake(self) -> None:
        """``POST /wake_up`` (no tags or ``kv_cache``): the cache works again, empty."""
        if not self.enabled:
            self._clear()
            self.enabled = True

    def _clear(self) -> None:
        self.epoch += 1
        self.used.clear()
        self.unused.clear()
        self.model_of.clear()
