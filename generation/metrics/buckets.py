"""Histogram bucket bounds of vLLM's metrics (vLLM 0.34's ``vllm/v1/metrics/buckets.py``), shared by
the real metrics (:mod:`generation.metrics.recorder`) and the fake-metrics option
(:mod:`generation.metrics.fake_metrics_spec`), and ``--custom-histogram-buckets``: its families,
its check (:func:`check_custom_buckets`, vLLM's ``ObservabilityConfig`` validators, with their
messages) and the bounds a family's histograms take (:func:`histogram_buckets`).
A leaf module: it imports nothing from the project."""
from __future__ import annotations

import math
from typing import Any, Mapping

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
# per request (vLLM 0.34's REQUEST_NUM_PREEMPTIONS_BUCKETS: the first bucket holds the
# never-preempted requests with the once-preempted ones)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
KV_CACHE_RESIDENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60,
                              120, 300, 600, 1200, 1800)

# vLLM 0.34's bucket families (BucketFamilyKey) and their static defaults; ``request_tokens`` is
# the 1-2-5 series up to --max-model-len (:func:`buckets_1_2_5`)
STATIC_FAMILY_DEFAULTS: dict[str, tuple] = {
    "request_latency": REQUEST_LATENCY_BUCKETS,
    "time_to_first_token": TTFT_BUCKETS,
    "inter_token_latency": TPOT_BUCKETS,
    "iteration_tokens": ITERATION_TOKEN_BUCKETS,
    "request_params_n": PARAMS_N_BUCKETS,
    "request_num_preemptions": PREEMPTION_BUCKETS,
    "kv_cache_residency": KV_CACHE_RESIDENCY_BUCKETS,
}
BUCKET_FAMILY_KEYS = frozenset(STATIC_FAMILY_DEFAULTS) | {"request_tokens"}


def buckets_1_2_5(max_value: int) -> list[float]:
    """vLLM's 1-2-5 buckets up to ``max_value``: 1, 2, 5, 10, 20, 50, ..."""
    out, e = [], 1
    while True:
        for m in (1, 2, 5):
            v = m * e
            if v > max_value:
                return out
            out.append(float(v))
        e *= 10


def histogram_buckets(family: str, max_model_len: int, overrides: Mapping[str, list] | None = None) -> list:
    """The bounds of family ``family``'s histograms (vLLM 0.34's ``histogram_buckets``): the
    override (``--custom-histogram-buckets``, checked by :func:`check_custom_buckets`) verbatim
    when it names the family, else the defaults."""
    if overrides and overrides.get(family) is not None:
        return list(overrides[family])
    if family == "request_tokens":
        return buckets_1_2_5(max_model_len)
    return list(STATIC_FAMILY_DEFAULTS[family])


def _number(value: Any) -> float:
    """A bound as pydantic's lax ``float`` reads it (a number, or a string of one)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError("Input should be a valid number, unable to parse string as a number") from None
    raise ValueError("Input should be a valid number")


def check_custom_buckets(value: Any) -> dict[str, list[float]] | None:
    """``--custom-histogram-buckets`` (None or the parsed JSON object) checked as vLLM 0.34's
    ``ObservabilityConfig`` checks ``custom_histogram_buckets`` (``vllm/config/observability.py``),
    in its order: booleans first (its ``mode="before"`` validator), then the types
    (``dict[str, list[float]]``, pydantic's lax mode), then per family: a known family, a
    non-empty list, finite bounds above 0, strictly increasing.  Returns the object with float
    bounds; raises ValueError with vLLM's message."""
    if value is None:
        return None
    for family, buckets in value.items():
        if isinstance(buckets, list):
            for bound in buckets:
                if isinstance(bound, bool):
                    raise ValueError(f"custom_histogram_buckets[{family!r}]: bound {bound!r} must be a "
                                     "number, not a boolean")
    out: dict[str, list[float]] = {}
    for family, buckets in value.items():
        if not isinstance(buckets, list):
            raise ValueError(f"custom_histogram_buckets.{family}: Input should be a valid list")
        bounds = []
        for i, bound in enumerate(buckets):
            try:
                bounds.append(_number(bound))
            except ValueError as e:
                raise ValueError(f"custom_histogram_buckets.{family}.{i}: {e}") from None
        out[family] = bounds
    for family, buckets in out.items():
        if family not in BUCKET_FAMILY_KEYS:
            raise ValueError(f"custom_histogram_buckets: unknown bucket family {family!r}; known families: "
                             f"{sorted(BUCKET_FAMILY_KEYS)}")
        if not buckets:
            raise ValueError(f"custom_histogram_buckets[{family!r}]: bucket list must not be empty")
        for bound in buckets:
            if not math.isfinite(bound) or bound <= 0:
                raise ValueError(f"custom_histogram_buckets[{family!r}]: bound {bound!r} must be finite and "
                                 "greater than 0")
        if any(a >= b for a, b in zip(buckets, buckets[1:])):
            raise ValueError(f"custom_histogram_buckets[{family!r}]: bounds {buckets} must be strictly increasing")
    return out
