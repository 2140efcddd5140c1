"""The CPU KV tier of vLLM 0.15.1 (the sim-to-real runs' release) up to 0.20.x: the
``OffloadingConnector`` whose stores complete only when the request that made them finishes.

vLLM 0.21.0 changed that, and 0.23.0 stopped offering generated blocks
(:mod:`generation.config.vllm_versions`); :class:`~generation.engine.block_pool.BlockPool` keeps
0.34's tier.  :func:`cpu_tier_pool` picks this one for ``--vllm-version`` below 0.21.0.  Sources
(0.15.1's wheel): ``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``
(``OffloadingConnectorScheduler``, ``OffloadingConnectorWorker``), ``vllm/v1/kv_offload/
lru_manager.py`` (``LRUOffloadingManager``), ``backend.py`` (``BlockStatus``), ``vllm/v1/core/
sched/scheduler.py`` (the calls into them).

- **Stores** (:meth:`StoreAtFinishPool.store_blocks`): every step a request runs, it offers its
  full blocks from ``_next_stored_block_idx`` to ``(num_computed_tokens + scheduled) //
  block_size``: prompt and generated blocks alike, its GPU prefix hits too on its first step (the
  index starts at 0, or past the blocks it reloaded) (``_get_reqs_to_store``).  ``prepare_store``
  skips the blocks the tier holds (ready or being written), evicts the least recently used
  *ready* blocks when too few slots are free (one ``BlockRemoved``), and stores nothing when too
  few are ready (None: the index stays, the request offers them again).  Before 0.18.0 a block
  the store itself offers may be evicted (no ``protected`` set).  A store of new blocks touches
  the request's blocks ``0..n`` (the most recently used, the first one last).  Here a prefill
  chunk's blocks are offered when its step ends, a decode's full block when the request takes its
  next block (the next step's plan, before admissions, as vLLM's offer precedes that step's
  lookups), and what is left when the request lets its blocks go.
- **Ready only when the request finishes.**  The worker reports a finished request in
  ``finished_sending`` once its store jobs are done (``get_finished``); the scheduler then
  completes all its stores at once (``update_connector_output`` -> ``complete_store``: one
  ``BlockStored`` of their hashes, ``block_size`` the offloaded block size, 0 from 0.20.0) and
  frees its GPU blocks, held until then (``request_finished`` returns True while the request has
  a store entry: ``_free_blocks`` on ``finished_sending``).  Here: at the end of the step after
  its last (its last store job runs in that step), or at once when nothing is left running.  An
  aborted request is finished the same way.  A preempted request's stores complete at once
  (``build_connector_meta``; its GPU blocks are freed as usual).  Until then a block is not
  found, not evictable, and holds its slot.  ``complete_store`` does not move a block in the
  LRU order: it becomes ready where its last use left it.
- **Lookups** (:meth:`lookup_cpu`, ``get_num_new_matched_tokens``): every block of the request
  the tier holds is touched first, ready or not, then the leading ready run past the GPU hits is
  reloaded; the load itself does not touch (``prepare_load``), so :meth:`touch_cpu` does nothing.

Blocks the simulator has no hash for (generated tokens: the server hashes them when the request
lets its blocks go, the replay never) are :class:`Unnamed` in the tier: they take their slots,
age and are evicted as vLLM's do, and are named when their stores complete if the hash is known
by then.

The LRU order is vLLM's ``OrderedDict`` as stamps (higher: more recent).  A block's stamp is the
larger of ``_stamp`` (its store, a lookup's touch) and the last touch of each running request
whose blocks include it: a request's touch of its blocks ``0..n`` is kept as ``(base, n)`` (block
``i`` at ``base + n - i``, :class:`_Offload`) and folded into ``_stamp`` when the request lets
its blocks go, so that a store costs O(1), not O(the request's blocks).  Eviction takes the ready
block of the lowest stamp from a heap with one entry per ready block, filed under a stamp no
later than its own (filed again when it comes up older than it is): blocks being written, which
vLLM's eviction scans past, cost nothing.  Pure logic, no clock; the scheduler
(:mod:`generation.engine.scheduler`) is the one caller.
"""
from __future__ import annotations

from heapq import heappop, heappush, heapreplace

from .block_pool import BlockPool


class Unnamed:
    """A block in the CPU tier whose hash the simulator does not know (module docstring)."""
    __slots__ = ()


class _Offload:
    """One request's state in the connector (``req.offload``): ``keys``, its blocks' names in the
    tier, in token order (hashes, :class:`Unnamed` past them); ``writes``, its stores not yet
    complete (``_reqs_being_stored``; None: it never stored, so its blocks are not held); ``base`` / ``n``, its last touch of blocks ``0..n``
    (block ``i`` at stamp ``base + n - i``; ``n`` 0: none since it last let its blocks go);
    ``named``: how many of ``keys`` are in the pool's ``_runs`` under it; ``hashed``: how many
    lead with hashes (the rest are :class:`Unnamed`)."""
    __slots__ = ("keys", "writes", "base", "n", "named", "hashed")

    def __init__(self):
        self.keys: list = []
        self.writes = None
        self.base = self.n = self.named = self.hashed = 0


class StoreAtFinishPool(BlockPool):
    """A :class:`BlockPool` (the GPU blocks, unchanged) whose CPU tier of ``num_cpu_blocks``
    blocks of ``block_size`` tokens keeps vLLM 0.15.1's semantics (module docstring).
    ``event_block_size``: the ``block_size`` its ``BlockStored`` events carry (default
    ``block_size``; 0 from vLLM 0.20.0); ``protect_offered``: a store never evicts a block it is
    offered (vLLM 0.18.0+).  ``cpu_inflight``: blocks being written plus finished requests whose
    stores have not completed (truthy while the scheduler must call :meth:`end_cpu_step`).
    Events (``cpu_events``): ``("removed", hashes)`` per store that evicts, ``("stored", hashes,
    event_block_size)`` per request whose stores complete (one ``BlockStored`` of them all)."""

    stores_at_finish = True

    __slots__ = ("block_size", "event_block_size", "protect_offered", "_stamp", "_unready", "_heap", "_clock",
                 "_runs", "_finishing", "_sending")

    def __init__(self, num_blocks: int, on_evict=None, num_cpu_blocks: int = 0, *, block_size: int = 16,
                 event_block_size: int | None = None, protect_offered: bool = False):
        super().__init__(num_blocks, on_evict, num_cpu_blocks)
        self.block_size = block_size
        self.event_block_size = block_size if event_block_size is None else event_block_size
        self.protect_offered = protect_offered
        self._stamp: dict = {}           # every block in the tier -> its stamp, running requests' touches aside
        self._unready: set = set()       # of those, being written (vLLM: ref_cnt -1)
        self._heap: list = []            # one (stamp when filed <= its stamp, key) per ready block
        self._clock = 0
        self._runs: dict = {}            # hash -> {_Offload of a running request: the block's index in it}
        self._finishing: list = []       # (request, GPU block ids) finished in this step
        self._sending: list = []         # ... finished in the step before: their stores complete at this one's end

    # ---- state ---------------------------------------------------------------------------
    @property
    def num_cpu_cached(self) -> int:
        """Blocks the CPU tier holds ready (written)."""
        return len(self._stamp) - len(self._unready)

    def _count_inflight(self) -> None:
        self.cpu_inflight = len(self._unready) + len(self._finishing) + len(self._sending)

    def _stamp_of(self, k) -> int:
        """Block ``k``'s stamp: its own, or a running request's later touch."""
        s = self._stamp[k]
        runs = self._runs.get(k)
        if runs:
            for run, i in runs.items():
                if i < run.n and run.base + run.n - i > s:
                    s = run.base + run.n - i
        return s

    # ---- LRUOffloadingManager ------------------------------------------------------------
    def _touch(self, keys) -> None:
        """``touch``: ``keys`` (in token order) the tier holds become the most recently used, the
        first one last."""
        stamp = self._stamp
        if not stamp:
            return
        held = [k for k in reversed(keys) if k in stamp]
        c = self._clock
        stamp.update(zip(held, range(c + 1, c + 1 + len(held))))
        self._clock = c + len(held)

    def lookup_cpu(self, hashes, start: int, max_blocks: int) -> int:
        """``get_num_new_matched_tokens``: touch every block of ``hashes`` (a request's) the tier
        holds, then count the leading ready run of ``hashes[start:]``, at most ``max_blocks``."""
        stamp = self._stamp
        if not stamp:
            return 0
        self._touch(hashes)
        unready = self._unready
        n = 0
        for i in range(start, min(len(hashes), start + max_blocks)):
            h = hashes[i]
            if h not in stamp or h in unready:
                break
            n += 1
        return n

    def touch_cpu(self, hashes) -> None:
        """A reload: nothing (vLLM 0.15.1's ``prepare_load`` does not touch; the lookup did)."""

    def _prepare_store(self, keys: list):
        """``prepare_store``: the keys not in the tier are allocated, not ready, the most recently
        used in order; the least recently used ready blocks are evicted for them when too few
        slots are free.  Returns the new keys, or None (nothing changes) when too few are ready."""
        stamp = self._stamp
        new = [k for k in keys if k not in stamp]
        if not new:
            return new
        need = len(new) - (self.num_cpu_blocks - len(stamp))
        if need > 0:
            evicted = self._evict(need, keys)
            if evicted is None:
                return None
            if self.cpu_events is not None:
                named = [k for k in evicted if type(k) is not Unnamed]
                if named:
                    self.cpu_events.append(("removed", named))
        unready = self._unready
        c = self._clock
        for k in new:
            c += 1
            stamp[k] = c
            unready.add(k)
        self._clock = c
        return new

    def _evict(self, n: int, offered):
        """The ``n`` ready blocks of the lowest stamps, removed (those of ``offered`` kept with
        ``protect_offered``), or None when there are fewer."""
        stamp, unready, heap = self._stamp, self._unready, self._heap
        ready = len(stamp) - len(unready)
        protected = None
        if self.protect_offered:
            protected = set(offered)
            ready -= sum(1 for k in protected if k in stamp and k not in unready)
        if n > ready:
            return None
        out, keep = [], []
        runs = self._runs
        while len(out) < n:
            s, k = heap[0]
            t = stamp.get(k)
            if t is None:                           # renamed
                heappop(heap)
                continue
            if t <= s and k in runs:                 # a running request may have touched it since
                t = self._stamp_of(k)
            if t > s:                               # used since it was filed: filed again
                heapreplace(heap, (t, k))
                continue
            heappop(heap)
            if protected is not None and k in protected:
                keep.append((s, k))
                continue
            del stamp[k]
            out.append(k)
        for e in keep:
            heappush(heap, e)
        return out

    def complete_store(self, keys) -> None:
        """``complete_store``: ``keys`` being written become ready where their last use left them
        (one ``("stored", ...)`` event of those)."""
        unready, heap = self._unready, self._heap
        done = []
        stamp, runs = self._stamp, self._runs
        for k in keys:
            if k in unready:
                unready.discard(k)
                heappush(heap, (self._stamp_of(k) if k in runs else stamp[k], k))
                done.append(k)
        if done and self.cpu_events is not None:
            named = [k for k in done if type(k) is not Unnamed]
            if named:
                self.cpu_events.append(("stored", named, self.event_block_size))
        self._count_inflight()

    def store_cpu(self, hashes) -> bool:
        """Offer ``hashes`` (a run of blocks, in token order, of no request): ``prepare_store``,
        then, if it stored new ones, the run is touched.  False when too few blocks could be
        evicted (nothing stored).  The blocks stay unready until :meth:`complete_store`."""
        hashes = list(hashes)
        new = self._prepare_store(hashes)
        if new is None:
            if self.kv_offload is not None:
                self.kv_offload.refused()
            return False
        if new:
            self._touch(hashes)
            if self.kv_offload is not None:
                self.kv_offload.stored(len(new))
        self._count_inflight()
        return True

    # ---- OffloadingConnectorScheduler -----------------------------------------------------
    def store_blocks(self, req, num_blocks: int) -> None:
        """``_get_reqs_to_store`` for ``req`` (an EngineRequest with block hashes): offer its blocks
        ``[req.cpu_stored, num_blocks)``; on success the index moves to ``num_blocks``, the new
        ones join its writes, and if there are any its blocks ``0..num_blocks`` are touched."""
        start = req.cpu_stored
        hashes = req.block_hashes
        if num_blocks <= start or hashes is None:
            return
        # its blocks past its hashes and the index are not in the tier: too many of them for the
        # free and ready slots, and prepare_store would return None (without scanning the range)
        nh = len(hashes)
        if num_blocks - (start if start > nh else nh) > self.num_cpu_blocks - len(self._unready):
            if self.kv_offload is not None:
                self.kv_offload.refused()
            return
        run = req.offload
        if run is None:
            req.offload = run = _Offload()
        keys = run.keys
        if num_blocks == start + 1 == len(keys) + 1 == run.named + 1 and start >= nh and run.writes is not None:
            self._store_generated(req, run)         # the common store: a decode's one new block
            return
        if len(keys) < num_blocks:                  # named once per block
            if run.hashed == len(keys):
                run.hashed = max(len(keys), min(num_blocks, nh))
            for i in range(len(keys), num_blocks):
                keys.append(hashes[i] if i < nh else Unnamed())
        new = self._prepare_store(keys[start:num_blocks])
        if new is None:
            if self.kv_offload is not None:
                self.kv_offload.refused()
            return                                   # "cannot store": offered again next time
        req.cpu_stored = num_blocks
        if not new:
            return
        if self.kv_offload is not None:              # one store job, counted when accepted (module docstring)
            self.kv_offload.stored(len(new))
        if run.writes is None:
            run.writes = new
        else:
            run.writes += new
        if run.named < num_blocks:                   # the run's touches reach its hashes through _runs
            runs = self._runs
            for i in range(run.named, num_blocks):
                k = keys[i]
                if type(k) is not Unnamed:
                    r = runs.get(k)
                    if r is None:
                        runs[k] = {run: i}
                    else:
                        r[run] = i
            run.named = num_blocks
        run.base, run.n = self._clock, num_blocks   # touch blocks 0..num_blocks: block i at base + n - i
        self._clock += num_blocks
        self.cpu_inflight += len(new)

    def _store_generated(self, req, run: _Offload) -> None:
        """:meth:`store_blocks` of one unnamed block past all the others (a decode's): new in the
        tier, so prepare_store only makes room; nothing to register."""
        stamp = self._stamp
        if len(stamp) >= self.num_cpu_blocks:       # the ready block of the lowest stamp goes (_evict)
            if len(stamp) == len(self._unready):
                if self.kv_offload is not None:
                    self.kv_offload.refused()
                return
            heap, runs = self._heap, self._runs
            while True:
                s, k = heap[0]
                t = stamp.get(k)
                if t is None:
                    heappop(heap)
                    continue
                if t <= s and k in runs:                 # a running request may have touched it since
                    t = self._stamp_of(k)
                if t > s:
                    heapreplace(heap, (t, k))
                    continue
                heappop(heap)
                del stamp[k]
                break
            if self.cpu_events is not None and type(k) is not Unnamed:
                self.cpu_events.append(("removed", [k]))
        k = Unnamed()
        run.keys.append(k)
        c = self._clock + 1
        stamp[k] = c
        self._unready.add(k)
        run.writes.append(k)
        n = req.cpu_stored = run.named = len(run.keys)
        run.base, run.n = c, n                      # the touch of blocks 0..n
        self._clock = c + n
        self.cpu_inflight += 1
        if self.kv_offload is not None:
            self.kv_offload.stored(1)

    def _offer_cpu(self, req, hashes, full: int, block_size: int) -> None:
        """A prefill chunk's step ended: offer every full block computed, named or not."""
        self.store_blocks(req, min(req.num_computed // block_size, req.blocks))

    def _fold(self, run: _Offload) -> None:
        """A request lets its blocks go: its last touch becomes its blocks' own stamps."""
        stamp, runs = self._stamp, self._runs
        top = run.base + run.n
        for i, k in enumerate(run.keys[:run.n]):
            s = stamp.get(k)
            if s is not None and top - i > s:
                stamp[k] = top - i
        for k in run.keys[:run.named]:
            r = runs.get(k)
            if r is not None:
                r.pop(run, None)
                if not r:
                    del runs[k]
        run.n = run.named = 0

    def _complete(self, req) -> None:
        """Complete ``req``'s stores (``complete_store`` of its writes), first naming its
        :class:`Unnamed` blocks whose hashes are known now (its run folded)."""
        run = req.offload
        keys, hashes, writes = run.keys, req.block_hashes, run.writes
        if writes is None:
            return
        last = min(len(keys), len(hashes)) if hashes else 0
        if last > run.hashed:                        # the server hashed its generated blocks since
            stamp, unready = self._stamp, self._unready
            renamed = None
            for i in range(run.hashed, last):
                k = keys[i]
                h = keys[i] = hashes[i]
                s = stamp.pop(k, None)
                if s is None:
                    continue
                ready = k not in unready
                unready.discard(k)
                if h in stamp:                       # the tier holds it already: this copy is dropped
                    continue
                stamp[h] = s
                if ready:
                    heappush(self._heap, (s, h))
                else:
                    unready.add(h)
                if renamed is None:
                    renamed = {}
                renamed[k] = h
            run.hashed = last
            if renamed and writes:
                writes = [renamed.get(k, k) for k in writes]
        if writes:
            self.complete_store(writes)
        run.writes = []

    def end_request(self, req, preempted: bool) -> bool:
        """``req`` lets its GPU blocks go (finished, aborted, or ``preempted``): its last full
        blocks are offered and its touches folded; a preempted request's stores complete now; a
        finished one that ever stored keeps its GPU blocks until its stores complete (True: the
        pool frees them then; vLLM's ``request_finished``)."""
        self.store_blocks(req, min(req.num_computed // self.block_size, req.blocks))
        run = req.offload
        if run is None:
            return False
        self._fold(run)
        if run.writes is None:
            return False                             # never stored: not being stored
        if preempted:
            self._complete(req)
            self._count_inflight()
            return False
        self._finishing.append((req, req.block_ids))
        self._count_inflight()
        return True

    def end_cpu_step(self, idle: bool = False) -> None:
        """An engine step ended: the requests that finished in the step before complete their
        stores and free their GPU blocks (``finished_sending``), this step's wait a step; with
        ``idle`` (nothing left running) those complete now too."""
        if not self._sending and not self._finishing:
            return
        done, self._sending, self._finishing = self._sending, self._finishing, []
        if idle:
            done += self._sending
            self._sending = []
        for req, ids in done:
            self._complete(req)
            self.free(ids)
        self._count_inflight()

    def reset(self, force: bool = False) -> bool:
        """As :meth:`BlockPool.reset`; with ``force`` the GPU blocks finished requests still hold
        are freed too (nobody else will)."""
        if force:
            for req, ids in self._finishing + self._sending:
                self.free(ids)
        elif self._ref:
            return False
        super().reset(force)
        self._stamp.clear()
        self._unready.clear()
        self._runs.clear()
        self._heap = []
        self._finishing, self._sending = [], []
        self.cpu_inflight = 0
        return True


def cpu_tier_pool(num_gpu_blocks: int, num_cpu_blocks: int, block_size: int, vllm_version: str):
    """The block pool for a CPU tier of ``num_cpu_blocks`` under ``--vllm-version``: a
    :class:`StoreAtFinishPool` before vLLM 0.21.0, else None (the scheduler's own
    :class:`BlockPool`, 0.34's tier).  None too without a tier or a version."""
    from generation.config.vllm_versions import (OFFLOAD_EVENT_BLOCK_SIZE_0_FROM, OFFLOAD_PROTECTS_OFFERED_FROM,
                                                 OFFLOAD_STORES_PER_JOB_FROM, parse_version)
    if not num_cpu_blocks or not vllm_version:
        return None
    version = parse_version(vllm_version)
    if version >= OFFLOAD_STORES_PER_JOB_FROM:
        return None
    return StoreAtFinishPool(num_gpu_blocks, num_cpu_blocks=num_cpu_blocks, block_size=block_size,
                             event_block_size=0 if version >= OFFLOAD_EVENT_BLOCK_SIZE_0_FROM else block_size,
                             protect_offered=version >= OFFLOAD_PROTECTS_OFFERED_FROM)
