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
- Events are encoded as the Go reference does, byte for byte (:func:`pack_batch`): hashes as
  ``0xcf`` + 8 bytes, token ids as ``0xce`` + 4 bytes; a run with no parent has parent nil in both forms (case C21; engine.md
  4.6's ``0`` is the reference's old fault).
- Block hashes are memoised per (parent, block tokens): a repeated prompt costs a dict lookup
  per block instead of CBOR + FNV (issue 13: ``--enable-kvcache`` < 1.3x the cost without it).
- ``--prefix-caching-hash-algo sha256_cbor`` hashes blocks with vLLM's recipe instead
  (:class:`VllmBlockHasher`), so events can be compared with a real vLLM's.
- ``--kv-events-replay-endpoint``: a ROUTER socket returns published batches again from a
  sequence number (engine.md 4.9, :mod:`generation.kv_replay`).
- When the cached blocks have gaps (a middle block was evicted), one ``BlockStored`` per run of
  new consecutive blocks is sent, so each event's parent chain stays true.
- Events are flushed after a few milliseconds (or as soon as ``--event-batch-size`` are
  pending) instead of the reference's one-second timer, so routers see blocks promptly.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable

import cbor2
import gevent
import msgpack

log = logging.getLogger("vllm_sim.kvcache")

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF
MEDIUM = "GPU"
FLUSH_DELAY = 0.002         # seconds: coalesce events of requests starting together
SUBSCRIBER_WAIT = 2.0       # seconds events wait for a first subscriber (EventPublisher)


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


# ---- events --------------------------------------------------------------------------------
def block_stored(hashes, parent, token_ids, block_size, lora_id, lora_name, map_format: bool):
    """A ``BlockStored`` event in the legacy array form (9 positions, nil where absent, parent
    nil when there is none, as vLLM and case C21: engine.md 4.6 says the reference sends ``0``,
    the fault llm-d-inference-sim PR #570 fixed) or, with ``map_format``, the map form of current
    vLLM (``vllm/distributed/kv_events.py``): every field of its ``BlockStored`` struct is
    written, nil when unset, since vLLM's own msgspec decoder requires them all (case C38; the
    reference omits nil keys, which that decoder rejects)."""
    if map_format:
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                "token_ids": token_ids, "block_size": block_size, "lora_id": lora_id,
                "medium": MEDIUM, "lora_name": lora_name}
    return ["BlockStored", hashes, parent, token_ids, block_size, lora_id,
            MEDIUM, lora_name, None]


def block_removed(hashes, map_format: bool):
    """A ``BlockRemoved`` event."""
    if map_format:
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": MEDIUM}
    return ["BlockRemoved", hashes, MEDIUM]


def all_blocks_cleared(map_format: bool):
    """An ``AllBlocksCleared`` event."""
    return {"type": "AllBlocksCleared"} if map_format else ["AllBlocksCleared"]


_U64, _U32 = struct.Struct(">BQ"), struct.Struct(">BI")
_HASH_KEYS = ("block_hashes", "parent_block_hash")


def _u64s(values) -> bytes:
    return _array_head(len(values)) + b"".join(_U64.pack(0xCF, v) for v in values)


def _u32s(values) -> bytes:
    return _array_head(len(values)) + b"".join(_U32.pack(0xCE, v) for v in values)


def _array_head(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else (b"\xdc" + struct.pack(">H", n) if n < 65536
                                             else b"\xdd" + struct.pack(">I", n))


def pack_event(ev) -> bytes:
    """msgpack of one event, as the Go reference encodes it (engine.md 4.6): block hashes and
    the parent as ``0xcf`` + 8 bytes, token ids as ``0xce`` + 4 bytes, the rest compact."""
    packb = msgpack.packb
    if isinstance(ev, dict):
        out = [bytes([0x80 | len(ev)])]
        for k, v in ev.items():
            out.append(packb(k))
            if k == "block_hashes":
                out.append(_u64s(v))
            elif k == "parent_block_hash" and v is not None:
                out.append(_U64.pack(0xCF, v))
            elif k == "token_ids":
                out.append(_u32s(v))
            else:
                out.append(packb(v))
        return b"".join(out)
    out = [_array_head(len(ev)), packb(ev[0])]
    if ev[0] in ("BlockStored", "BlockRemoved"):
        out.append(_u64s(ev[1]))
        rest = ev[2:]
        if ev[0] == "BlockStored":
            out.append(_U64.pack(0xCF, rest[0]) if rest[0] is not None else b"\xc0")
            out.append(_u32s(rest[1]))
            rest = rest[2:]
        out.extend(packb(v) for v in rest)
    else:
        out.extend(packb(v) for v in ev[1:])
    return b"".join(out)


def pack_batch(ts: float, events: list, rank: int) -> bytes:
    """The payload ``[ts, [events], rank]`` (``ts`` as float64)."""
    return (b"\x93" + struct.pack(">Bd", 0xCB, ts) + _array_head(len(events))
            + b"".join(pack_event(e) for e in events) + msgpack.packb(rank))


def rank_endpoint(endpoint: str, rank: int) -> str:
    """``endpoint`` with its port offset by the data-parallel ``rank`` (engine.md 8)."""
    if rank <= 0:
        return endpoint
    m = re.match(r"^(.*):(\d+)$", endpoint)
    if not m:
        return endpoint
    return f"{m.group(1)}:{int(m.group(2)) + rank}"


class EventPublisher:
    """Batches KV events and sends them on a ZMQ XPUB socket that connects to ``endpoint``.

    Message: ``[topic, seq (8-byte big-endian, from 1, +1 per batch), msgpack([ts, events,
    rank])]`` with ``ts`` in unix seconds (float).  At most ``batch_size`` events per message;
    a batch goes out as soon as it is full, the rest ``FLUSH_DELAY`` after the first pending
    event.  At most ``max_pending`` events wait (more are dropped, as the reference's bounded
    queue does).  The socket is ``zmq.green`` (never blocks the gevent hub) and connects at
    construction (ZMQ retries until the consumer binds), and again in a forked child.

    Slow joiner: a PUB socket silently drops what it sends before the consumer's subscription
    has reached it, and a bound SUB sends its subscription only once it polls, so the first
    request's events after start-up were lost in about half of fresh starts.  XPUB is PUB on the
    wire (same frames) but hands the subscriptions to the application: a greenlet reads them,
    and while no subscription matching ``topic`` is known, events are held (still at most
    ``max_pending``) until one arrives or ``SUBSCRIBER_WAIT`` seconds after the first held
    event, then sent as usual (numbered, and given to ``on_sent`` for replay).  When the last
    matching subscriber leaves, the next events wait for a new one the same way."""

    def __init__(self, endpoint: str, topic: str, batch_size: int, rank: int, max_pending: int,
                 on_sent: Callable[[bytes, bytes], None] | None = None):
        self.endpoint = endpoint
        self.on_sent = on_sent          # (seq frame, payload) of every batch sent: replay
        self.topic = topic.encode()
        self.batch_size = max(batch_size, 1)
        self.rank = rank
        self.max_pending = max(max_pending, self.batch_size)
        self.pending: list = []
        self.seq = 0
        self._socket = None
        self._reader = None             # greenlet reading the XPUB's (un)subscriptions
        self._pid = 0
        self._timer = None
        self._subscriptions: set[bytes] = set()   # prefixes some subscriber has subscribed to
        self.subscribed = False         # one of them matches ``topic``: sends reach someone
        self._held_since = None         # monotonic time of the first event held for a subscriber
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
        """Send every pending event now, ``batch_size`` per message, unless they are being held
        for a first subscriber (then a timer sends them when the wait is over)."""
        if not self.pending:
            return
        try:
            sock = self._socket if self._pid == os.getpid() else self._connect()
        except Exception:     # a broken publisher must never fail requests
            log.exception("failed to connect the KV-event publisher to %s", self.endpoint)
            self.pending = []
            return
        if not self.subscribed:
            now = time.monotonic()
            if self._held_since is None:
                self._held_since = now
            wait = self._held_since + SUBSCRIBER_WAIT - now
            if wait > 0:
                if self._timer is None:
                    self._timer = gevent.spawn_later(wait, self._timed_flush)
                return
        self._held_since = None
        pending, self.pending = self.pending, []
        try:
            bs = self.batch_size
            for i in range(0, len(pending), bs):
                self.seq += 1
                payload = pack_batch(time.time(), pending[i:i + bs], self.rank)
                seq = struct.pack(">Q", self.seq)
                sock.send_multipart([self.topic, seq, payload], copy=True)
                if self.on_sent is not None:
                    self.on_sent(seq, payload)
        except Exception:     # a broken publisher must never fail requests
            log.exception("failed to publish KV events to %s", self.endpoint)

    def _connect(self):
        import zmq.green as zmq
        if self._reader is not None:
            self._reader.kill(block=False)
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.XPUB)
        sock.setsockopt(zmq.LINGER, 0)          # pending events are discarded on shutdown
        sock.connect(self.endpoint)
        self._socket = sock
        self._pid = os.getpid()      # a forked child (gunicorn --preload) reconnects
        self._subscriptions = set()
        self.subscribed = False
        self._reader = gevent.spawn(self._read_subscriptions, sock, self._pid)
        return sock

    def _read_subscriptions(self, sock, pid: int) -> None:
        """XPUB hands over ``b"\\x01" + prefix`` when a prefix gets its first subscriber and
        ``b"\\x00" + prefix`` when its last one leaves (a closed connection included)."""
        while True:
            if sock is not self._socket or os.getpid() != pid:
                return                       # replaced, closed, or a forked copy
            try:
                msg = sock.recv()
            except Exception:                # socket closed
                return
            if not msg or msg[0] not in (0, 1):
                continue
            if msg[0] == 1:
                self._subscriptions.add(msg[1:])
            else:
                self._subscriptions.discard(msg[1:])
            self.subscribed = any(self.topic.startswith(p) for p in self._subscriptions)
            if self.subscribed and self.pending:
                if self._timer is not None:
                    self._timer.kill(block=False)
                    self._timer = None
                self.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None
        if self._reader is not None:
            self._reader.kill(block=False)
            self._reader = None
        self.pending = []
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None


# ---- the cache -----------------------------------------------------------------------------
@dataclass
class KVCacheSettings:
    """The configuration values the cache uses (from ``--block-size`` etc.)."""
    block_size: int = 16
    capacity: int = 1024                  # --kv-cache-size, blocks
    hash_seed: str = ""
    map_format: bool = False              # --use-vllm-map-event-format
    hash_algo: str = "fnv64a_cbor"       # or sha256_cbor (--prefix-caching-hash-algo)

    @classmethod
    def from_config(cls, cfg) -> "KVCacheSettings":
        algo = getattr(cfg, "prefix_caching_hash_algo", "") or "fnv64a_cbor"
        return cls(cfg.block_size, cfg.kv_cache_size, cfg.hash_seed or "",
                   bool(cfg.use_vllm_map_event_format), algo)


class PrefixCounter:
    """Counts prefix-cache queries and hits, in tokens (``vllm:prefix_cache_queries`` /
    ``_hits``); the default does nothing."""

    def __call__(self, queried: int, hit: int) -> None:
        pass


def build_kv_cache(cfg, metrics, loras) -> "KVCache":
    """The app's cache: ``cfg`` the :class:`generation.config.SimConfig`, ``metrics`` with
    ``prefix_queries`` / ``prefix_hits`` counters, ``loras`` the LoRA registry (``slots``:
    name -> 1-based slot, ``loaded``: names).  Starts the event publisher (``--zmq-endpoint``)
    and the replay socket (``--kv-events-replay-endpoint``) when configured."""
    settings = KVCacheSettings.from_config(cfg)
    rank = max(cfg.data_parallel_rank, 0)

    def count(queried: int, hit: int) -> None:
        metrics.prefix_queries.inc(queried)
        if hit:
            metrics.prefix_hits.inc(hit)

    def loaded_models():
        return [*cfg.served_names, *loras.loaded]

    publisher = None
    if cfg.zmq_endpoint:
        topic = f"kv@{cfg.pod_ip}:{cfg.port}@{cfg.model}"
        on_sent = None
        replay_endpoint = getattr(cfg, "kv_events_replay_endpoint", "") or ""
        if replay_endpoint:
            from .kv_replay import ReplayServer
            replay = ReplayServer(rank_endpoint(replay_endpoint, rank), topic,
                                  getattr(cfg, "kv_events_replay_queue_size", 1024) or 1024)
            replay.start()
            on_sent = replay.record
        publisher = EventPublisher(rank_endpoint(cfg.zmq_endpoint, rank), topic,
                                   cfg.event_batch_size, rank, 10 * max(settings.capacity, 1), on_sent)
    return KVCache(settings, publisher=publisher, count_prefix=count,
                   lora_slot=loras.slots.get, loaded_models=loaded_models)


class KVCache:
    """The prefix cache of one simulator (``--enable-kvcache``), engine.md 4.3-4.8.

    It is given only what it uses: ``settings`` (:class:`KVCacheSettings`), the event
    ``publisher`` (anything with ``publish(event)``; None = events discarded),
    ``count_prefix(queried_tokens, hit_tokens)`` (the prefix-cache counters),
    ``lora_slot(name) -> int | None`` (the events' ``lora_id``), ``loaded_models() -> names``
    (served names and loaded adapters: blocks of other models are evicted first).  All methods run in
    the one gevent thread.
    """

    def __init__(self, settings: KVCacheSettings, publisher=None,
                 count_prefix: Callable[[int, int], None] = PrefixCounter(),
                 lora_slot: Callable[[str], int | None] = lambda name: None,
                 loaded_models: Callable[[], Iterable[str]] = lambda: ()):
        self.block_size = settings.block_size
        self.capacity = settings.capacity
        if settings.hash_algo == "sha256_cbor":
            self.hasher = VllmBlockHasher(settings.hash_seed)
        else:
            self.hasher = BlockHasher(settings.hash_seed)
        self.map_format = settings.map_format
        self.publisher = publisher
        self.count_prefix = count_prefix
        self.lora_slot = lora_slot
        self.loaded_models = loaded_models
        self.enabled = True
        self.epoch = 0                                   # bumped by sleep(): stale references
        self.used: dict[int, int] = {}                   # hash -> reference count
        self.unused: dict[str, OrderedDict] = {}         # model -> {hash: tick}, oldest first
        self.model_of: dict[int, str] = {}               # every cached block -> its model
        self._tick = 0
        self._last = (None, None, None)                  # (prompt, model, hashes): n > 1 reuse

    # ---- queries -------------------------------------------------------------------------
    def _hashes(self, seq) -> list[int]:
        hashes = seq.kv_hashes
        if hashes is None:
            prompt, model = seq.prompt, seq.request.model
            last = self._last
            if last[0] is prompt and last[1] == model:
                hashes = last[2]
            else:
                hashes = self.hasher.block_hashes(model, prompt.ids, self.block_size, seq.lora)
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
        if not self.enabled:
            self.count_prefix(seq.prompt_len, 0)
            seq.cached_tokens = 0
            seq.kv_blocks = None
            return
        bs = self.block_size
        hit = self._prefix_blocks(hashes)
        seq.cached_tokens = hit * bs
        self.count_prefix(seq.prompt_len, hit * bs)
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
            lora_id = self.lora_slot(lora) if lora else None
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
        loaded = set(self.loaded_models())
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
