"""The KV blocks of one engine, shared and cached as vLLM V1's ``BlockPool`` keeps them
(``vllm/v1/core/block_pool.py``; docs/engine-model.md sections 1-2).

- A block is held by every running request whose prefix it stores (a reference count): a prefix
  shared by two running requests takes its blocks once, in the capacity and in
  ``kv_cache_usage_perc`` (``1 - free / total``).
- A block nobody holds is free, and keeps its content (its hash) until it is handed out again:
  free blocks are the prefix cache.  Blocks are handed out least recently freed first, and a
  request frees its blocks tail first, so a prompt's last blocks go before its first ones.  Never
  used blocks go first, in id order, as in vLLM's initial free queue.
- A full block is named by its hash once its tokens are computed (:meth:`BlockPool.cache`); a
  later request whose leading block hashes are known finds those blocks (:meth:`lookup`) and
  holds them again instead of computing them.

With ``num_cpu_blocks`` > 0 (``--kv-offloading-size``), a CPU tier of that many blocks, as vLLM's
native offloading keeps it (the ``OffloadingConnector`` with its default CPU manager and LRU
policy; vLLM 0.34: ``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``,
``v1/kv_offload/cpu/manager.py``, ``cpu/policies/lru.py``): a write-through copy, not a victim
cache.  (vLLM 0.15.1's, up to 0.20.x, writes generated blocks too and completes a request's writes
when it finishes: :class:`~generation.engine.cpu_tier_v015.StoreAtFinishPool`, a subclass.)

- **Stores** (:meth:`BlockPool.cache_requests` -> :meth:`BlockPool.store_cpu`): every full prompt
  block a request computes is offered to the tier in the step that computes it, its prefix-cache
  hits too on its first step (``_build_store_jobs``: ``next_stored_chunk_idx`` from 0; not the
  GPU hits of a request that reloaded from the tier, the CHUNK_LEVEL policy; not its generated
  blocks: ``offload_prompt_only``, on by default).  Blocks the tier holds are not stored again,
  only used again; new ones take free slots, else the least recently used ready blocks are evicted
  (``CPUOffloadingManager.prepare_store``; none of the offered blocks).  When the tier has too few
  it stores none of them, and the request offers them again with its next chunk
  (``prepare_store`` returns None; vLLM offers them again every step the request runs).
- A stored block is written while the next step runs (the worker defers a store job to the next
  step's start, ``OffloadingConnectorWorker.prepare_store_kv``) and **ready** at that step's end
  (``complete_store``, on the worker's report): before, a lookup does not find it and it cannot
  be evicted (vLLM 0.34's lookup says ``HIT_PENDING`` and the request waits a step; here it is a
  miss).  An engine with nothing left to run finishes its writes at once (vLLM steps on while
  store jobs are pending: ``has_pending_push_work``).
- **Lookups** (:meth:`lookup_cpu`): the leading run right after a request's GPU hits
  (``get_num_new_matched_tokens``); a reload makes its blocks the most recently used
  (``prepare_load``).  Within a request the blocks nearest its start are kept longest (the LRU
  policy's ranks ``(request, -position)``).
- **Events**: with an event sink (``cpu_events``, a list), each eviction is
  ``("removed", hashes)`` (one per store that evicts) and each completed write ``("stored",
  hashes)``; the step's end publishes them after the GPU's events, as vLLM's scheduler appends
  the connector's events (``OffloadingConnector.take_events``) to the block pool's.
- **Metrics**: with ``kv_offload`` (``vllm:kv_offload_*``, :mod:`generation.metrics.kv_offload`)
  each completed write of a store is one store job, each reload (:meth:`reload_cpu`) one load job,
  each refused store one allocation failure.

Memory and time are O(blocks ever used), not O(cache size): a 1M-block cache costs nothing until
it is used.  Pure logic, no clock; the scheduler (:mod:`generation.engine.scheduler`) is the one
caller.
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import islice


class BlockPool:
    """``num_blocks`` KV blocks.  ``on_evict(hashes)`` is told the hashes of cached blocks that
    were handed out again (vLLM's ``BlockRemoved`` events), once per allocation that evicts.
    ``num_cpu_blocks``: the CPU tier's size in blocks (0: none); ``cpu_events``: None, or the
    list its events go to (module docstring); ``cpu_inflight``: blocks being written to it."""

    __slots__ = ("num_blocks", "num_free", "_fresh", "_recycled", "_ref", "_hash_of", "_cached", "_dups", "on_evict",
                 "num_cpu_blocks", "_cpu", "_writing", "_offered", "_written", "cpu_inflight", "cpu_events",
                 "kv_metrics", "kv_offload")
    stores_at_finish = False            # vLLM 0.15.1's tier (generation.engine.cpu_tier_v015) says True

    def __init__(self, num_blocks: int, on_evict=None, num_cpu_blocks: int = 0):
        self.num_blocks = num_blocks
        self.num_free = num_blocks                      # never used + recycled
        self._fresh = 0                                 # ids below this were handed out once
        self._recycled: OrderedDict = OrderedDict()     # free, used before: least recently freed first
        self._ref: dict = {}                            # held block -> reference count
        self._hash_of: dict = {}                        # cached block -> its hash
        self._cached: dict = {}                         # hash -> cached block (the first copy)
        self._dups: dict = {}                           # hash -> later copies, oldest first (rare)
        self.on_evict = on_evict
        self.num_cpu_blocks = num_cpu_blocks
        self._cpu: OrderedDict = OrderedDict()          # ready hashes in the CPU tier, least recently used first
        self._writing: dict = {}                        # hashes being written to it (not ready)
        self._offered: list = []                        # runs of them stored in this step, start first
        self._written: list = []                        # runs stored in the step before: ready at this one's end
        self.cpu_inflight = 0                           # len(self._writing)
        self.cpu_events = None                          # None, or where the CPU tier's events go
        # --kv-cache-metrics: None, or the residency collector told of each block handed out and
        # touched (generation.metrics.kv_residency.KVResidency; vLLM's metrics_collector)
        self.kv_metrics = None
        # None, or the vllm:kv_offload_* families told of each CPU-tier job: a store's blocks when
        # written, a reload's when admitted, a refused store (generation.metrics.kv_offload)
        self.kv_offload = None

    # ---- state ---------------------------------------------------------------------------
    @property
    def num_held(self) -> int:
        """Blocks held by at least one request."""
        return self.num_blocks - self.num_free

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc`` (0..1): held blocks over all blocks."""
        return (self.num_blocks - self.num_free) / self.num_blocks if self.num_blocks else 0.0

    @property
    def num_cached(self) -> int:
        """Blocks with a hash (held or free), copies of one hash each counted."""
        return len(self._hash_of)

    def is_cached(self, block_hash) -> bool:
        return block_hash in self._cached

    # ---- prefix lookups --------------------------------------------------------------------
    def lookup(self, hashes, max_blocks: int) -> list[int]:
        """The blocks of the leading run of ``hashes`` that are cached, at most ``max_blocks``
        (a block past a miss cannot be reused)."""
        cached = self._cached
        found = []
        for h in hashes:
            if len(found) >= max_blocks:
                break
            b = cached.get(h)
            if b is None:
                break
            found.append(b)
        return found

    def count_free(self, blocks) -> int:
        """How many of ``blocks`` nobody holds: holding them takes them out of the free ones."""
        ref = self._ref
        return sum(1 for b in blocks if b not in ref)

    def touch(self, blocks) -> None:
        """Hold ``blocks`` (cached ones found by :meth:`lookup`) once more."""
        ref = self._ref
        recycled = self._recycled
        for b in blocks:
            c = ref.get(b)
            if c is None:
                del recycled[b]
                self.num_free -= 1
                ref[b] = 1
            else:
                ref[b] = c + 1
        if self.kv_metrics is not None:
            self.kv_metrics.accessed(blocks)

    # ---- the CPU tier ----------------------------------------------------------------------
    @property
    def num_cpu_cached(self) -> int:
        """Blocks the CPU tier holds ready (written)."""
        return len(self._cpu)

    def lookup_cpu(self, hashes, start: int, max_blocks: int) -> int:
        """How many of ``hashes[start:]`` are ready in the CPU tier, in a leading run, at most
        ``max_blocks`` (0 without a CPU tier): blocks a request reloads after its GPU hits."""
        cpu = self._cpu
        if not cpu:
            return 0
        n = 0
        for i in range(start, min(len(hashes), start + max_blocks)):
            if hashes[i] not in cpu:
                break
            n += 1
        return n

    def touch_cpu(self, hashes) -> None:
        """``hashes`` (a request's, in token order) were reloaded or offered again: the most
        recently used, the first one last (vLLM's LRU ranks a request's blocks ``-position``)."""
        move = self._cpu.move_to_end
        for h in reversed(hashes):
            move(h)

    def reload_cpu(self, hashes) -> None:
        """A request reloads ``hashes`` from the CPU tier (one load job): :meth:`touch_cpu`, and
        the job told to ``kv_offload``."""
        self.touch_cpu(hashes)
        if self.kv_offload is not None:
            self.kv_offload.loaded(len(hashes))

    def store_cpu(self, hashes) -> bool:
        """Offer ``hashes`` (a request's full prompt blocks, in token order) to the CPU tier
        (vLLM's ``CPUOffloadingManager.prepare_store``): those it holds ready are used again
        (:meth:`touch_cpu`), those being written are left alone, the others start their write,
        evicting the least recently used ready blocks when no slot is free (one ``("removed",
        hashes)`` event).  False when too few can be evicted: none is written (the blocks used
        again stay used, as vLLM records the access first), and the caller offers them later."""
        cpu, writing = self._cpu, self._writing
        move = cpu.move_to_end
        new = None
        used = 0
        for h in reversed(hashes):                      # touch_cpu's order: the first one last
            if h in cpu:
                move(h)
                used += 1
            elif h not in writing:
                if new is None:
                    new = [h]
                else:
                    new.append(h)
        if new is None:
            return True
        new.reverse()
        need = len(new) - (self.num_cpu_blocks - len(cpu) - len(writing))
        if need > 0:
            if need > len(cpu) - used:                  # the offered blocks are never evicted
                if self.kv_offload is not None:
                    self.kv_offload.refused()
                return False
            pop = cpu.popitem
            evicted = [pop(last=False)[0] for _ in range(need)]
            if self.cpu_events is not None:
                self.cpu_events.append(("removed", evicted))
        writing.update(dict.fromkeys(new))
        self._offered.append(new)
        self.cpu_inflight = len(writing)
        return True

    def end_cpu_step(self, idle: bool = False) -> None:
        """An engine step ended: the writes of the step before are done (ready, one ``("stored",
        hashes)`` event each: vLLM's ``complete_store``), this step's go on; with ``idle`` (nothing
        left to run) this step's are done too."""
        done, self._written, self._offered = self._written, self._offered, []
        if idle:
            done += self._written
            self._written = []
        cpu, writing, events, jobs = self._cpu, self._writing, self.cpu_events, self.kv_offload
        for run in done:
            for h in reversed(run):                     # the run's first block the most recently used
                del writing[h]
                cpu[h] = None
            if events is not None:
                events.append(("stored", run))
            if jobs is not None:                        # one store job written
                jobs.stored(len(run))
        self.cpu_inflight = len(writing)

    def cache_requests(self, reqs, block_size: int, on_cached=None) -> None:
        """Name the full blocks ``reqs``' (EngineRequests) step computed by their hashes, and
        offer their full prompt blocks to the CPU tier (vLLM's ``cache_blocks`` and the
        connector's store jobs after each step); ``on_cached(req, start, end)`` hears of each run
        of newly named blocks ``[start, end)``."""
        cache, cpu = self.cache, self.num_cpu_blocks
        for req in reqs:
            hashes = req.block_hashes
            if hashes is None or req.state == "aborted" or req.state == "waiting":
                continue
            full = min(req.num_computed // block_size, len(hashes), req.blocks)
            if cpu:
                self._offer_cpu(req, hashes, full, block_size)
            start = req.num_cached_blocks
            if full <= start:
                continue
            ids = req.block_ids
            a = None
            for i in range(start, full):
                if cache(ids[i], hashes[i]):
                    if a is None:
                        a = i
                elif a is not None:
                    if on_cached is not None:
                        on_cached(req, a, i)
                    a = None
            if a is not None and on_cached is not None:
                on_cached(req, a, full)
            req.num_cached_blocks = full

    def _offer_cpu(self, req, hashes, full: int, block_size: int) -> None:
        """Offer ``req``'s full prompt blocks computed so far (the first ``full`` of ``hashes``) to
        the CPU tier past those it offered (``req.cpu_stored``; ``offload_prompt_only``)."""
        end = min(full, req.prompt_len // block_size)      # offload_prompt_only
        if end > req.cpu_stored and self.store_cpu(hashes[req.cpu_stored:end]):
            req.cpu_stored = end

    # ---- allocation ------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """Hand out ``n`` free blocks (the caller checked ``num_free``), each held once; cached
        ones lose their hash (``on_evict``).  Raises ValueError when fewer are free."""
        if n > self.num_free:
            raise ValueError(f"{n} blocks asked, {self.num_free} free")
        self.num_free -= n
        ref = self._ref
        out = []
        fresh = min(n, self.num_blocks - self._fresh)
        if fresh > 0:
            start = self._fresh
            self._fresh = start + fresh
            out.extend(range(start, start + fresh))
            for b in out:
                ref[b] = 1
            n -= fresh
        if n:
            evicted = None
            recycled = self._recycled                   # least recently freed first
            if n == 1:
                got = [recycled.popitem(last=False)[0]]
                ref[got[0]] = 1
            else:
                got = list(islice(recycled, n))
                for _ in map(recycled.pop, got):        # C loops: a block costs no bytecode
                    pass
                ref.update(dict.fromkeys(got, 1))
            hash_of = self._hash_of
            if hash_of:                                 # cached blocks lose their hash
                cached, dups = self._cached, self._dups
                for b in got:
                    h = hash_of.pop(b, None)
                    if h is not None:
                        if dups and h in dups:
                            self._drop_copy(h, b)
                        else:
                            del cached[h]
                        if evicted is None:
                            evicted = []
                        evicted.append(h)       # vLLM: a BlockRemoved per evicted copy
            out += got
            if evicted and self.on_evict is not None:
                self.on_evict(evicted)
        if self.kv_metrics is not None:
            self.kv_metrics.allocated(out)
        return out

    def free(self, blocks) -> None:
        """Release one hold on each of ``blocks`` (a request's, in order); blocks nobody holds
        become free, tail first, keeping their hashes."""
        ref = self._ref
        pop = ref.pop
        recycled = self._recycled
        freed = 0
        for b in reversed(blocks):
            c = pop(b)
            if c > 1:
                ref[b] = c - 1
            else:
                recycled[b] = None
                freed += 1
        self.num_free += freed

    def cache(self, block: int, block_hash) -> bool:
        """Name the full, computed ``block`` by ``block_hash``; False (nothing changes) when the
        block has a hash already.  Another block may hold the same hash (two requests computed
        the same prefix at once, or a block-aligned prompt recomputed its last block): vLLM does
        not de-duplicate (``BlockHashToBlockMap`` keeps every copy, each stored and evicted with
        its own event); a lookup finds the oldest copy, and the hash stays cached until its last
        copy is evicted."""
        if block in self._hash_of:
            return False
        cached = self._cached
        if block_hash in cached:
            self._dups.setdefault(block_hash, []).append(block)
        else:
            cached[block_hash] = block
        self._hash_of[block] = block_hash
        return True

    def _drop_copy(self, block_hash, block: int) -> None:
        """``block``, one of several copies of ``block_hash``, is evicted: the next oldest copy
        is the one found, if it was the first."""
        copies = self._dups[block_hash]
        if self._cached[block_hash] == block:
            self._cached[block_hash] = copies.pop(0)
        else:
            copies.remove(block)
        if not copies:
            del self._dups[block_hash]

    def reset(self, force: bool = False) -> bool:
        """Forget every hash, the CPU tier's too, writes included (``/reset_prefix_cache``).
        Refused (False) while requests hold blocks, as vLLM refuses, unless ``force`` (the holders
        are being reset too)."""
        if self._ref and not force:
            return False
        self._cached.clear()
        self._dups.clear()
        self._hash_of.clear()
        self._cpu.clear()
        self._writing.clear()
        self._offered, self._written, self.cpu_inflight = [], [], 0
        if self.kv_metrics is not None:
            self.kv_metrics.reset()
        return True


class CountingPool:
    """A :class:`BlockPool` for a replay in which no block is ever named by a hash (no request
    carries block hashes: no shared prefixes, or prefix caching off): which blocks a request
    holds then changes nothing (nothing is cached, so nothing is found or evicted), only how many
    are free.  It counts: :meth:`allocate` hands out ``n`` placeholder ids (0), :meth:`free`
    gives back as many.  :func:`generation.engine.replay.replay` swaps it in while no request with
    block hashes has been submitted, and brings the pool back (:meth:`restore`) when the first
    one is, or at the end: the same results at a fraction of the cost (a block cost about a third
    of a long replay's CPU)."""

    __slots__ = ("num_blocks", "num_free", "on_evict", "num_cpu_blocks", "pool")
    cpu_inflight = 0                    # nothing is written to a CPU tier
    stores_at_finish = False
    kv_metrics = None                   # no residency followed (a replay's, without hashes)
    kv_offload = None                   # no CPU-tier job observed

    def __init__(self, pool: BlockPool):
        self.pool = pool
        self.num_blocks = pool.num_blocks
        self.num_free = pool.num_free
        self.on_evict = pool.on_evict
        self.num_cpu_blocks = pool.num_cpu_blocks

    @staticmethod
    def usable(pool) -> bool:
        """Whether ``pool`` can be counted: a :class:`BlockPool` that holds no block and knows no
        hash (nothing in it can be found again)."""
        return (type(pool) is BlockPool and not pool._ref and not pool._cached and not pool._cpu
                and not pool.cpu_inflight)

    num_held = BlockPool.num_held       # the same counts: num_blocks and num_free alone
    usage = BlockPool.usage

    @property
    def num_cached(self) -> int:
        return 0

    def is_cached(self, block_hash) -> bool:
        return False

    def lookup(self, hashes, max_blocks: int) -> list:
        return []

    def count_free(self, blocks) -> int:
        return 0

    def lookup_cpu(self, hashes, start: int, max_blocks: int) -> int:
        return 0

    def allocate(self, n: int) -> list:
        if n > self.num_free:
            raise ValueError(f"{n} blocks asked, {self.num_free} free")
        self.num_free -= n
        return [0] * n

    def free(self, blocks) -> None:
        self.num_free += len(blocks)

    def cache(self, block: int, block_hash) -> bool:
        raise RuntimeError("a counting pool names no block: the trace has block hashes")

    def cache_requests(self, reqs, block_size: int, on_cached=None) -> None:
        """Nothing to name: no request has block hashes."""

    def touch(self, blocks) -> None:
        raise RuntimeError("a counting pool holds no cached block")

    def touch_cpu(self, hashes) -> None:
        raise RuntimeError("a counting pool has no CPU tier in use")

    reload_cpu = touch_cpu

    def reset(self, force: bool = False) -> bool:
        return self.num_free == self.num_blocks or force

    def restore(self, holders) -> BlockPool:
        """The :class:`BlockPool` again, with real ids handed to ``holders`` (requests that still
        hold blocks: ``block_ids`` replaced by as many ids of the pool)."""
        pool = self.pool
        for req in holders:
            if req.block_ids:
                req.block_ids = pool.allocate(len(req.block_ids))
        return pool
