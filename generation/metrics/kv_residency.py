"""``--kv-cache-metrics``: KV-cache block residency, sampled, as vLLM 0.34 measures it
(``vllm/v1/core/kv_cache_metrics.py``: ``KVCacheMetricsCollector``, ``BlockMetricsState``; the
block pool's calls in ``vllm/v1/core/block_pool.py``; the histograms in
``vllm/v1/metrics/loggers.py``).

- **Sampling**: each time a block is handed out (``get_new_blocks``), it is followed with
  probability ``--kv-cache-metrics-sample`` (one draw per block, from a ``random.Random`` of its
  own seeded from ``--seed``, so that the flag changes no other draw): its birth and last access
  are the allocation's time, its access history empty.  A block drawn out is not followed (a
  state it had from before was closed by the eviction that handed it out).
- **Access**: a prefix-cache hit (``BlockPool.touch``) on a followed block records the time: the
  last access, and the history of the last 4 accesses (vLLM's ``deque(maxlen=4)``).
- **Eviction**: a followed block handed out again (vLLM calls ``on_block_evicted`` for every block
  it takes from the free queue when prefix caching is on, cached or not) observes, in seconds,
  its lifetime (now - birth) in ``vllm:kv_block_lifetime_seconds``, its idle time (now - last
  access) in ``vllm:kv_block_idle_before_evict_seconds``, and each gap between consecutive
  recorded accesses (up to 3) in ``vllm:kv_block_reuse_gap_seconds``.
- **Reset** (``/reset_prefix_cache``): every followed block is forgotten.

Times are the engine's clock, in seconds: the caller sets :attr:`KVResidency.now` (the step
scheduler at each step's planning, when its blocks are handed out and touched; in a replay a
virtual time), never ``time.monotonic`` here.  vLLM drains the events into each step's
``SchedulerStats`` and its Prometheus logger observes them; here an eviction observes the
histograms at once (the same observations, seen at the next scrape either way).  Without prefix
caching vLLM's pool never evicts (the state is overwritten at each allocation): the pool gets no
collector then, and the histograms stay empty, as vLLM's.

A leaf module: it imports nothing from the project; the block pool calls it by duck typing.
"""
from __future__ import annotations

import random

HISTORY = 4         # accesses kept per followed block (vLLM's access_history deque(maxlen=4))

# (name, help) of vLLM 0.34's three families, in its registration order
FAMILIES = (
    ("vllm:kv_block_lifetime_seconds", "Histogram of KV cache block lifetime from allocation to eviction. "
     "Sampled metrics (controlled by --kv-cache-metrics-sample)."),
    ("vllm:kv_block_idle_before_evict_seconds", "Histogram of idle time before KV cache block eviction. "
     "Sampled metrics (controlled by --kv-cache-metrics-sample)."),
    ("vllm:kv_block_reuse_gap_seconds", "Histogram of time gaps between consecutive KV cache block accesses. "
     "Only the most recent accesses are recorded (ring buffer). Sampled metrics (controlled by "
     "--kv-cache-metrics-sample)."),
)


class KVResidency:
    """Follows a sample of the KV blocks of one engine (module docstring).  ``sample_rate`` in
    (0, 1]; ``seed`` seeds the draws; ``lifetime``, ``idle``, ``reuse_gap``: objects with
    ``observe(seconds)`` (the three histograms).  ``blocks``: followed block id -> ``[birth,
    last access, accesses]`` (seconds; the accesses a list of at most :data:`HISTORY` times)."""

    __slots__ = ("sample_rate", "now", "blocks", "_random", "lifetime", "idle", "reuse_gap")

    def __init__(self, sample_rate: float, seed, lifetime, idle, reuse_gap):
        if not 0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1.0], got {sample_rate}")
        self.sample_rate = sample_rate
        self.now = 0.0                  # the engine's clock (seconds), set by the caller
        self.blocks: dict = {}
        self._random = random.Random(f"{seed}-kv-cache-metrics").random
        self.lifetime, self.idle, self.reuse_gap = lifetime, idle, reuse_gap

    def allocated(self, blocks) -> None:
        """``blocks`` (ids) were handed out at :attr:`now`: each closes the residency of a followed
        block of that id first (vLLM's ``_maybe_evict_cached_block`` before
        ``on_block_allocated``; a never used block has none), then is drawn."""
        now, rate, draw, followed = self.now, self.sample_rate, self._random, self.blocks
        for b in blocks:
            if followed:
                state = followed.pop(b, None)
                if state is not None:
                    self._evicted(state, now)
            if draw() < rate:
                followed[b] = [now, now, []]

    def accessed(self, blocks) -> None:
        """``blocks`` were found by a prefix lookup and held again at :attr:`now` (``touch``)."""
        followed = self.blocks
        if not followed:
            return
        now = self.now
        for b in blocks:
            state = followed.get(b)
            if state is not None:
                state[1] = now
                history = state[2]
                history.append(now)
                if len(history) > HISTORY:
                    del history[0]

    def _evicted(self, state, now: float) -> None:
        birth, last, history = state
        self.lifetime.observe(now - birth)
        self.idle.observe(now - last)
        observe = self.reuse_gap.observe
        for i in range(1, len(history)):
            observe(history[i] - history[i - 1])

    def reset(self) -> None:
        """The prefix cache was reset: forget every followed block (vLLM's ``reset``)."""
        self.blocks.clear()
