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
  miss cannot be reused), whole blocks of at most the prompt minus one token (vLLM computes the
  last prompt token again), where the reference counts every cached block.
- A request that does not fit (all blocks referenced by running sequences) is not failed with
  a 500: the blocks that fit are stored and the rest are simply not cached (vLLM would queue or
  preempt; a simulator has no memory to run out of).
- Events are encoded byte for byte (:func:`pack_batch`) as the Go reference does in the array
  form (hashes as ``0xcf`` + 8 bytes, token ids as ``0xce`` + 4 bytes) and as vLLM 0.34's
  msgspec encoder does in the map form (``--use-vllm-map-event-format``, implied by
  ``--kv-events-config``); a run with no parent has parent nil in both forms (case C21;
  engine.md 4.6's ``0`` is the reference's old fault).
- Block hashes are memoised per (parent, block tokens): a repeated prompt costs a dict lookup
  per block instead of CBOR + FNV (issue 13: ``--enable-kvcache`` < 1.3x the cost without it).
- ``--prefix-caching-hash-algo sha256_cbor`` / ``sha256`` hash blocks with vLLM 0.34's recipe
  instead (:class:`VllmBlockHasher`: LoRA and ``cache_salt`` extra keys), so events can be
  compared with a real vLLM's.
- ``--kv-events-replay-endpoint``: a ROUTER socket returns published batches again from a
  sequence number (engine.md 4.9, :mod:`generation.kvcache.replay`).
- When the cached blocks have gaps (a middle block was evicted), one ``BlockStored`` per run of
  new consecutive blocks is sent, so each event's parent chain stays true.
- Events are flushed after a few milliseconds (or as soon as ``--event-batch-size`` are
  pending) instead of the reference's one-second timer, so routers see blocks promptly.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable

from .block_hash import BlockHasher, VllmBlockHasher
from .events import (MEDIUM_CPU, EventPublisher, all_blocks_cleared, block_removed, block_stored, cpu_block_stored,
                     cpu_blocks_stored, rank_endpoint)

log = logging.getLogger("vllm_sim.kvcache")

# ---- the cache -----------------------------------------------------------------------------
@dataclass
class KVCacheSettings:
    """The configuration values the cache uses (from ``--block-size`` etc.)."""
    block_size: int = 16
    capacity: int = 1024                  # --kv-cache-size, blocks
    hash_seed: str = ""
    map_format: bool = False              # --use-vllm-map-event-format
    hash_algo: str = "fnv64a_cbor"       # or sha256 / sha256_cbor (--prefix-caching-hash-algo)

    @classmethod
    def from_config(cls, cfg) -> "KVCacheSettings":
        algo = getattr(cfg, "prefix_caching_hash_algo", "") or "fnv64a_cbor"
        # step mode with DCP: a block spans --block-size x DCP tokens (step_config's kv_block_span)
        return cls(getattr(cfg, "kv_block_span", cfg.block_size), cfg.kv_cache_size, cfg.hash_seed or "",
                   bool(cfg.use_vllm_map_event_format), algo)


class PrefixCounter:
    """Counts prefix-cache queries and hits, in tokens (``vllm:prefix_cache_queries`` /
    ``_hits``); the default does nothing."""

    def __call__(self, queried: int, hit: int) -> None:
        pass


def build_kv_cache(cfg, metrics, loras, publish: bool = True) -> "KVCache":
    """The app's cache: ``cfg`` the :class:`generation.config.sim_config.SimConfig`, ``metrics`` with
    ``prefix_queries`` / ``prefix_hits`` counters, ``loras`` the LoRA registry (``slots``:
    name -> 1-based slot, ``loaded``: names).  Starts the event publisher (``--zmq-endpoint``)
    and the replay socket (``--kv-events-replay-endpoint``) when configured and ``publish``
    (step mode without ``--enable-kvcache`` keeps a prefix cache that publishes nothing)."""
    settings = KVCacheSettings.from_config(cfg)
    rank = max(cfg.data_parallel_rank, 0)

    def count(queried: int, hit: int) -> None:
        metrics.prefix_queries.inc(queried)
        if hit:
            metrics.prefix_hits.inc(hit)

    def loaded_models():
        return [*cfg.served_names, *loras.loaded]

    publisher = None
    if publish and cfg.zmq_endpoint:
        topic = cfg.kv_topic()
        on_sent = None
        replay_endpoint = getattr(cfg, "kv_events_replay_endpoint", "") or ""
        if replay_endpoint:
            from .replay import ReplayServer
            replay = ReplayServer(rank_endpoint(replay_endpoint, rank), topic,
                                  getattr(cfg, "kv_events_replay_queue_size", 1024) or 1024)
            replay.start()
            on_sent = replay.record
        # vLLM's own --kv-events-config: its publisher's numbering (from 0); else the reference's
        first_seq = 0 if getattr(cfg, "kv_events_topic", None) is not None else 1
        publisher = EventPublisher(rank_endpoint(cfg.zmq_endpoint, rank), topic,
                                   cfg.event_batch_size, rank + (getattr(cfg, "data_parallel_start_rank", None) or 0),
                                   10 * max(settings.capacity, 1), on_sent,
                                   first_seq=first_seq)
    return KVCache(settings, publisher=publisher, count_prefix=count,
                   lora_slot=loras.ids.get, loaded_models=loaded_models, lora_path=loras.paths.get)


def event_socket_problem(kv) -> str | None:
    """Why ``kv``'s (a :class:`KVCache` or None) KV-event publisher or replay socket is not
    bound (an endpoint in use), else None: vLLM's engine does not start without them."""
    publisher = getattr(kv, "publisher", None) if kv is not None else None
    replay = getattr(getattr(publisher, "on_sent", None), "__self__", None)
    return getattr(publisher, "bind_error", None) or getattr(replay, "bind_error", None)


class KVCache:
    """The prefix cache of one simulator (``--enable-kvcache``), engine.md 4.3-4.8.

    It is given only what it uses: ``settings`` (:class:`KVCacheSettings`), the event
    ``publisher`` (anything with ``publish(event)``; None = events discarded),
    ``count_prefix(queried_tokens, hit_tokens)`` (the prefix-cache counters),
    ``lora_slot(name) -> int | None`` (the events' ``lora_id``), ``lora_path(name) -> str |
    None`` (an adapter's path: vLLM hashes it with the name), ``loaded_models() -> names``
    (served names and loaded adapters: blocks of other models are evicted first).  All methods run in
    the one gevent thread.
    """

    def __init__(self, settings: KVCacheSettings, publisher=None,
                 count_prefix: Callable[[int, int], None] = PrefixCounter(),
                 lora_slot: Callable[[str], int | None] = lambda name: None,
                 loaded_models: Callable[[], Iterable[str]] = lambda: (),
                 lora_path: Callable[[str], str | None] = lambda name: None):
        self.block_size = settings.block_size
        self.capacity = settings.capacity
        if settings.hash_algo in ("sha256", "sha256_cbor"):
            self.hasher = VllmBlockHasher(settings.hash_seed, settings.hash_algo)
        else:
            self.hasher = BlockHasher(settings.hash_seed)
        self.map_format = settings.map_format
        self.publisher = publisher
        self.count_prefix = count_prefix
        self.lora_slot = lora_slot
        self.lora_path = lora_path
        self.loaded_models = loaded_models
        self.enabled = True
        self.epoch = 0                                   # bumped by sleep(): stale references
        self.used: dict[int, int] = {}                   # hash -> reference count
        self.unused: dict[str, OrderedDict] = {}         # model -> {hash: tick}, oldest first
        self.model_of: dict[int, str] = {}               # every cached block -> its model
        self._tick = 0
        self._last = (None, None, None, None)            # (prompt, model, salt, hashes): n > 1 reuse

    # ---- queries -------------------------------------------------------------------------
    def _hashes(self, seq) -> list[int]:
        hashes = seq.kv_hashes
        if hashes is None:
            prompt, model, salt = seq.prompt, seq.request.model, seq.request.cache_salt
            last = self._last
            if last[0] is prompt and last[1] == model and last[2] == salt:
                hashes = last[3]
            else:
                hashes = self._hash(seq, prompt.ids)
                self._last = (prompt, model, salt, hashes)
            seq.kv_hashes = hashes
        return hashes

    def _hash(self, seq, ids) -> list[int]:
        lora = seq.lora
        return self.hasher.block_hashes(seq.request.model, ids, self.block_size, lora,
                                        self.lora_path(lora) if lora else None, seq.request.cache_salt)

    def block_hashes(self, seq) -> list[int]:
        """The chained hashes of ``seq``'s full prompt blocks (memoised on ``seq.kv_hashes``);
        the step engine's block pool names its blocks by them."""
        return self._hashes(seq)

    def token_block_hashes(self, seq, ids) -> list[int]:
        """The chained hashes of the full blocks of ``ids`` (``seq``'s prompt and generated
        tokens), with ``seq``'s model and LoRA."""
        return self._hash(seq, ids)

    def announce_stored(self, seq, hashes, start: int, end: int) -> None:
        """Publish ``BlockStored`` for ``seq``'s blocks ``[start, end)`` (named by ``hashes``;
        past the prompt, blocks of its generated tokens), one run with its parent, its token ids
        and its LoRA."""
        if self.publisher is None:
            return
        bs = self.block_size
        lora = seq.lora
        ids = seq.prompt.ids
        if end * bs > len(ids):
            ids = [*ids, *seq.ids[:end * bs - len(ids)]]
        extra = None
        if self.map_format:
            keys, salt = self.hasher.event_extra_keys, seq.request.cache_salt
            extra = [keys(lora, salt, i == 0) for i in range(start, end)]
        self.publisher.publish(block_stored(
            hashes[start:end], hashes[start - 1] if start else None, list(ids[start * bs:end * bs]), bs,
            self.lora_slot(lora) if lora else None, lora, self.map_format, extra))

    def announce_removed(self, hashes) -> None:
        """Publish ``BlockRemoved`` for evicted blocks: vLLM 0.34's map format one event per
        block (``BlockPool._emit_block_removed_events``: ``block_hashes`` of one hash each), the
        reference's array format one event of them all."""
        publisher = self.publisher
        if publisher is None:
            return
        if self.map_format:
            for h in hashes:
                publisher.publish(block_removed([h], True))
        else:
            publisher.publish(block_removed(list(hashes), False))

    def announce_offloaded(self, events) -> None:
        """Publish the CPU tier's events (step mode's :class:`~generation.engine.block_pool.
        BlockPool`: ``("removed", hashes)`` / ``("stored", hashes)``, in order): a ``BlockRemoved``
        with ``medium`` CPU per eviction, a ``BlockStored`` per block written; vLLM 0.15.1's tier
        (:mod:`generation.engine.cpu_tier_v015`) gives ``("stored", hashes, block_size)``: one
        ``BlockStored`` of them all."""
        publisher = self.publisher
        if publisher is None:
            return
        map_format = self.map_format
        for kind, hashes, *size in events:
            if kind == "removed":
                publisher.publish(block_removed(list(hashes), map_format, MEDIUM_CPU))
            elif size:
                publisher.publish(cpu_blocks_stored(hashes, size[0], map_format))
            else:
                for h in hashes:
                    publisher.publish(cpu_block_stored(h, map_format))

    def announce_cleared(self) -> None:
        """Publish ``AllBlocksCleared``."""
        if self.publisher is not None:
            self.publisher.publish(all_blocks_cleared(self.map_format))

    def _prefix_blocks(self, hashes, prompt_len: int) -> int:
        """The leading cached blocks of a prompt of ``prompt_len`` tokens, at most
        ``(prompt_len - 1) // block_size``: vLLM's ``get_computed_blocks`` keeps the last prompt
        token to compute (its logits are needed), so an exact repeat of a block-aligned prompt
        hits one block less."""
        cached = self.model_of
        limit = max((prompt_len - 1) // self.block_size, 0)
        k = 0
        for h in hashes:
            if k >= limit or h not in cached:
                break
            k += 1
        return k

    def lookup(self, seq) -> int:
        """Prompt tokens of ``seq`` already in the cache: the leading cached full blocks times
        ``block_size``, whole blocks of at most ``prompt_len - 1`` tokens (0 while asleep).  Stores the block hashes on ``seq.kv_hashes``.  Changes
        nothing: the prefix-cache counters tick when the sequence starts (:meth:`start`)."""
        hashes = self._hashes(seq)
        if not self.enabled:
            return 0
        return self._prefix_blocks(hashes, seq.prompt_len) * self.block_size

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: blocks referenced by running sequences / cache size
        (0..1); idle prefix-cache blocks do not count."""
        return len(self.used) / self.capacity if self.capacity > 0 else 0.0

    # ---- sequence life -------------------------------------------------------------------
    def start(self, seq, hit_tokens: int | None = None) -> None:
        """``seq`` starts running: reference its cached blocks, store its new full blocks
        (evicting least recently used idle blocks when full) and announce them; sets
        ``seq.cached_tokens`` to the prefix hit found now and counts the prefix-cache query
        (all prompt tokens) and hits (cached tokens), as vLLM does per scheduled request.

        Blocks that do not fit (every block is referenced) are not cached; the request still
        runs.  ``hit_tokens``: the hit the step engine's scheduler used (at most the prompt
        minus one token, as vLLM), counted instead of the blocks found."""
        hashes = self._hashes(seq)
        if not self.enabled:
            self.count_prefix(seq.prompt_len, 0)
            seq.cached_tokens = 0
            seq.kv_blocks = None
            return
        bs = self.block_size
        hit = self._prefix_blocks(hashes, seq.prompt_len)
        seq.cached_tokens = hit * bs if hit_tokens is None else hit_tokens
        self.count_prefix(seq.prompt_len, seq.cached_tokens)
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
            for a, b in runs:
                self.announce_stored(seq, hashes, a, b)

    def finish(self, seq) -> None:
        """``seq`` ended (any way): release its references; blocks left unreferenced stay
        cached and become evictable, most recently used last, its last block first (vLLM's
        ``free_blocks(reversed(...))``: a prefix's tail goes before its root, which more
        requests share)."""
        blocks = seq.kv_blocks
        seq.kv_blocks = None
        if not blocks or blocks[0] != self.epoch:
            return
        used, model_of, unused = self.used, self.model_of, self.unused
        for h in reversed(blocks[1]):
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
        self.announce_removed((h,))
        return True

    # ---- sleep mode ----------------------------------------------------------------------
    def sleep(self) -> None:
        """``POST /sleep`` (effective): discard every block, announce ``AllBlocksCleared`` once,
        and stay disabled (lookups 0, nothing stored) until :meth:`wake`."""
        if not self.enabled:
            return
        self.enabled = False
        self._clear()
        self.announce_cleared()

    def reset_prefix_cache(self, reset_running: bool = False) -> bool:
        """``POST /reset_prefix_cache`` (vLLM's ``BlockPool.reset_prefix_cache``): forget every
        cached block and announce ``AllBlocksCleared``.  While running requests hold blocks it
        refuses (returns False, nothing changes), as vLLM does, unless ``reset_running``
        (vLLM's ``reset_running_requests``): then their blocks are forgotten too."""
        if self.used and not reset_running:
            return False
        self._clear()
        self.announce_cleared()
        return True

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
