"""The prefix cache in step mode, as the rest of the simulator sees it: the scheduler's
:class:`~generation.engine.block_pool.BlockPool` *is* the cache (vLLM's ``KVCacheManager``), and the
:class:`~generation.kvcache.cache.KVCache` given to it only names blocks (its block hasher), counts
prefix-cache queries and publishes the KV events.

It answers what the routes and the metrics ask of a cache (``lookup``, ``usage``, ``sleep``,
``wake``, ``reset_prefix_cache``, and ``start`` / ``finish`` for answers that never reach the
engine), so that ``Simulator.kv_cache`` means one thing in every mode.
"""
from __future__ import annotations


class StepPrefixCache:
    """``scheduler`` the engine's :class:`~generation.engine.scheduler.Scheduler`; ``kv`` a
    KVCache (``block_hashes``, ``announce_*``, ``count_prefix``).  Wires itself into the
    scheduler: blocks are announced as each prefill chunk computes them, evictions as the pool
    hands cached blocks out again, and the CPU tier's stores and evictions (``--kv-offloading-size``)
    at the step's end, after the GPU's, as vLLM appends its offloading connector's events."""

    def __init__(self, scheduler, kv):
        self.scheduler = scheduler
        self.pool = scheduler.pool
        self.kv = kv
        self.block_size = scheduler.block_size
        self.enabled = True
        scheduler.on_cached = self._cached
        scheduler.on_prefix = self._prefix
        scheduler.on_release = self._release
        self.pool.on_evict = kv.announce_removed
        self.stepping = lambda: False     # the engine's: a step is running (its events wait for its end)
        self._hold(getattr(kv, "publisher", None))

    def _hold(self, publisher) -> None:
        if publisher is not None and hasattr(publisher, "step_end"):
            publisher.hold = lambda: self.stepping()
        if self.pool.num_cpu_blocks:         # the CPU tier's events: collected only for a publisher
            self.pool.cpu_events = [] if publisher is not None else None

    def step_end(self) -> None:
        """A step ended: publish its events as one batch (vLLM's one ``KVEventBatch`` per step),
        the CPU tier's last."""
        events = self.pool.cpu_events
        if events:
            self.kv.announce_offloaded(events)
            events.clear()
        publisher = getattr(self.kv, "publisher", None)
        if publisher is not None and hasattr(publisher, "step_end"):
            publisher.step_end()

    # ---- the engine's side -------------------------------------------------------------
    def block_hashes(self, seq):
        """The hashes that name ``seq``'s prompt blocks, or None while asleep or without prefix
        caching (``--no-enable-prefix-caching``: nothing cached, nothing hashed)."""
        return self.kv.block_hashes(seq) if self.enabled and self.scheduler.enable_prefix_caching else None

    def _cached(self, req, start: int, end: int) -> None:
        if req.seq is not None:
            self.kv.announce_stored(req.seq, req.block_hashes, start, end)

    def _release(self, req) -> None:
        """Name the full blocks of ``req``'s generated tokens too (vLLM caches every full block
        of a request), hashed once, when it lets its blocks go rather than per decode step."""
        seq = req.seq
        full = req.num_computed // self.block_size
        if seq is None or full <= len(req.block_hashes):
            return
        generated = req.num_computed - seq.prompt_len
        req.block_hashes = self.kv.token_block_hashes(seq, [*seq.prompt.ids, *seq.ids[:generated]])

    def _prefix(self, req, hit_tokens: int) -> None:
        if req.block_hashes is not None:
            self.kv.count_prefix(req.prompt_len, hit_tokens)
            if req.prefix_hit is not None and req.seq is not None:
                req.seq.cached_tokens = hit_tokens   # a remote prefill: its local hits, the rest transferred

    # ---- the cache interface -----------------------------------------------------------
    @property
    def capacity(self) -> int:
        """The cache's size in blocks (the engine's KV blocks)."""
        return self.pool.num_blocks

    @property
    def publisher(self):
        """The KV-event publisher (the KVCache's; the gRPC service tees it)."""
        return self.kv.publisher

    @publisher.setter
    def publisher(self, publisher) -> None:
        self.kv.publisher = publisher
        self._hold(publisher)

    def lookup(self, seq) -> int:
        """Prompt tokens of ``seq`` whose blocks are cached now (leading full blocks); changes
        nothing."""
        if not self.enabled or not self.scheduler.enable_prefix_caching:
            return 0
        hashes = self.kv.block_hashes(seq)
        return len(self.pool.lookup(hashes, len(hashes))) * self.block_size

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: blocks held over all blocks (0..1)."""
        return self.pool.usage()

    def start(self, seq, hit_tokens: int | None = None) -> None:
        """An answer that never runs on the engine (the reference's ``cache_threshold``): its
        prefix-cache query is counted (none without prefix caching); nothing is computed, so
        nothing is stored."""
        if not self.scheduler.enable_prefix_caching:
            seq.cached_tokens = 0
            return
        hit = self.lookup(seq) if hit_tokens is None else hit_tokens
        seq.cached_tokens = hit
        self.kv.count_prefix(seq.prompt_len, hit)

    def finish(self, seq) -> None:
        """Nothing to release: the engine's requests hold the blocks."""

    def sleep(self) -> None:
        """``POST /sleep``: every cached block is forgotten (``AllBlocksCleared`` once) and
        nothing is cached until :meth:`wake`."""
        if self.enabled:
            self.enabled = False
            self.pool.reset(force=True)
            self.kv.announce_cleared()

    def wake(self) -> None:
        """``POST /wake_up`` (no tags or ``kv_cache``): caching resumes, from empty."""
        self.enabled = True

    def reset_prefix_cache(self, reset_running: bool = False) -> bool:
        """``POST /reset_prefix_cache``: forget every cached block and announce
        ``AllBlocksCleared``; refused (False) while requests hold blocks, unless
        ``reset_running``, as vLLM's ``BlockPool.reset_prefix_cache``."""
        if not self.pool.reset(force=reset_running):
            return False
        self.kv.announce_cleared()
        return True
