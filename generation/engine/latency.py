"""Latency model: time to first token and inter-token latency (reference engine.md section 3).

All values are seconds.  Every draw is Normal(mean, std) clamped to ``[0.3*mean, 1.7*mean]``
(the reference's rule; unlike the reference the value is not truncated to whole
milliseconds, since vLLM's latencies are not quantised).

Calculators (``--latency-calculator``):

* ``constant``: TTFT = time-to-first-token * LF; remote prefill = kv-cache-transfer-latency.
* ``per-token``: TTFT = (prefill-overhead + (P - cached) * prefill-time-per-token) * LF;
  remote prefill = P * kv-cache-transfer-time-per-token.
* ``""`` (legacy): per-token when time-to-first-token and its std-dev are both 0, else constant
  (decided separately for remote prefill from the kv-cache-transfer-latency pair).

ITL = inter-token-latency * LF for every calculator.  LF, the load factor, is
``1 + (time-factor-under-load - 1) * (running - 1) / (max-num-seqs - 1)``.
"""
from __future__ import annotations

import random


def normal_clamped(rng: random.Random, mean: float, std: float) -> float:
    """One delay draw in seconds: ``mean`` when ``std`` is 0, else Normal clamped to +-70%."""
    if std <= 0 or mean <= 0:
        return max(mean, 0.0)
    v = rng.gauss(mean, std)
    lo, hi = 0.3 * mean, 1.7 * mean
    return lo if v < lo else hi if v > hi else v


class LatencyModel:
    """Draws TTFT and ITL for one simulator from its (live, admin-updatable) config."""

    def __init__(self, config, rng: random.Random) -> None:
        self.config = config
        self.rng = rng

    def load_factor(self, running: int) -> float:
        c = self.config
        if c.max_num_seqs <= 1 or c.time_factor_under_load == 1.0:
            return 1.0
        running = max(running, 1)
        return 1.0 + (c.time_factor_under_load - 1.0) * (running - 1) / (c.max_num_seqs - 1)

    def ttft(self, prompt_tokens: int, cached_tokens: int, running: int,
             remote_prefill: bool = False) -> float:
        """Time to first token in seconds for a sequence that starts running now."""
        c = self.config
        calc = c.latency_calculator
        if remote_prefill:
            constant = calc == "constant" or (calc == "" and (c.kv_cache_transfer_latency > 0 or
                                                              c.kv_cache_transfer_latency_std_dev > 0))
            if constant:
                return normal_clamped(self.rng, c.kv_cache_transfer_latency, c.kv_cache_transfer_latency_std_dev)
            return normal_clamped(self.rng, prompt_tokens * c.kv_cache_transfer_time_per_token,
                                  c.kv_cache_transfer_time_std_dev)
        lf = self.load_factor(running)
        constant = calc == "constant" or (calc == "" and (c.time_to_first_token > 0 or
                                                          c.time_to_first_token_std_dev > 0))
        if constant:
            return normal_clamped(self.rng, c.time_to_first_token * lf, c.time_to_first_token_std_dev)
        uncached = max(prompt_tokens - cached_tokens, 0)
        return normal_clamped(self.rng, (c.prefill_overhead + uncached * c.prefill_time_per_token) * lf,
                              c.prefill_time_std_dev)

    def constant_itl(self) -> float | None:
        """The inter-token latency in seconds when every draw gives the same value (no standard
        deviation, no load factor), else None."""
        c = self.config
        if c.inter_token_latency_std_dev > 0 or c.time_factor_under_load != 1.0:
            return None
        return c.inter_token_latency

    def itl(self, running: int) -> float:
        """One inter-token latency in seconds."""
        c = self.config
        mean = c.inter_token_latency
        if mean <= 0:
            return 0.0
        if c.time_factor_under_load != 1.0:
            mean *= self.load_factor(running)
        std = c.inter_token_latency_std_dev
        if std <= 0:
            return mean
        return normal_clamped(self.rng, mean, std)

    def image_time(self) -> float:
        c = self.config
        return normal_clamped(self.rng, c.time_to_generate_image, c.time_to_generate_image_std_dev)
