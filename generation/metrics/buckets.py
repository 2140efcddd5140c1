"""Histogram bucket bounds of vLLM's metrics (``vllm/v1/metrics/loggers.py``), shared by the real
metrics (:mod:`generation.metrics.recorder`) and the fake-metrics option (:mod:`generation.metrics.fake_metrics_spec`).
A leaf module: it imports nothing from the project."""
from __future__ import annotations

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


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
