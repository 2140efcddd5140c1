"""Latency draws: the clamped normal and the load factor with its calculators."""
from __future__ import annotations

import random

import pytest

from generation.config.cli import load_config
from generation.engine.latency import LatencyModel, normal_clamped


# ---- latency ---------------------------------------------------------------------------------
def test_normal_clamped_bounds_and_exact_mean():
    rng = random.Random(3)
    assert normal_clamped(rng, 0.2, 0) == 0.2
    vals = [normal_clamped(rng, 1.0, 0.8) for _ in range(5000)]
    assert min(vals) >= 0.3 and max(vals) <= 1.7


def _model(**kw):
    cfg = load_config(["--model", "m"] + [x for k, v in kw.items() for x in (f"--{k}", str(v))], env={})
    return LatencyModel(cfg, random.Random(0))


def test_load_factor_and_calculators():
    m = _model(**{"time-to-first-token": "42ms", "time-factor-under-load": 1.5, "max-num-seqs": 70})
    assert m.ttft(10, 0, running=70) == pytest.approx(0.063)
    assert m.ttft(10, 0, running=1) == pytest.approx(0.042)
    assert 0.042 < m.ttft(10, 0, running=35) < 0.063
    m = _model(**{"prefill-overhead": "100ms", "prefill-time-per-token": "10ms"})
    assert m.ttft(20, 0, running=1) == pytest.approx(0.3)
    assert m.ttft(20, 16, running=1) == pytest.approx(0.14)        # cached tokens skip prefill
    m = _model(**{"kv-cache-transfer-latency": "200ms", "kv-cache-transfer-time-per-token": "100ms"})
    assert m.ttft(128, 0, 1, remote_prefill=True) == pytest.approx(0.2)
    m = _model(**{"kv-cache-transfer-time-per-token": "100ms"})
    assert m.ttft(128, 0, 1, remote_prefill=True) == pytest.approx(12.8)
    m = _model(**{"latency-calculator": "constant", "prefill-overhead": "500ms"})
    assert m.ttft(10, 0, 1) == 0.0
    m = _model(**{"inter-token-latency": "20ms"})
    assert m.itl(1) == pytest.approx(0.02)
    assert m.constant_itl() == pytest.approx(0.02)
    assert _model(**{"inter-token-latency": "20ms", "inter-token-latency-std-dev": "2ms"}).constant_itl() is None
    assert _model(**{"inter-token-latency": "20ms", "time-factor-under-load": 2}).constant_itl() is None
