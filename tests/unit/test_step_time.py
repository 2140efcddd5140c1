"""Step time: the roofline of docs/engine-model.md §3, its calibration against §4, profiles,
measured tables and jitter (issue 20).  Unit tier, virtual time only."""
from __future__ import annotations

import json
import random
import time

import pytest

from generation.config.values import ConfigError
from generation.engine.hardware import gpu_by_name, preset
from generation.engine.step_time import (T0_CUDA_GRAPHS, RooflineStepTime, StepConstants, StepTable,
                                         TableStepTime, bench_latency, build_step_time, jittered,
                                         load_profile)

LLAMA8 = preset("meta-llama/Llama-3.1-8B-Instruct")
DOC = StepConstants(t0=0.7e-3)           # the constants of docs/engine-model.md §3's table


def roof(gpu="H100", arch=LLAMA8, constants=DOC, **kw):
    return RooflineStepTime(gpu_by_name(gpu), arch, constants=constants, **kw)


def decode(model, batch, context=1024):
    return model.step_time(batch, batch * context, 0, 0, 0.0, 0)


def prefill(model, n, p=0, decodes=0, context=1024):
    return model.step_time(decodes, decodes * context, 1, n, n * (p + n / 2), p)


# -- docs/engine-model.md §3 --------------------------------------------------------------------
@pytest.mark.parametrize("batch,ms", [(1, 6.5), (8, 6.9), (32, 8.1), (64, 9.7), (128, 12.8), (256, 19.9)])
def test_decode_steps_at_1k_context_are_the_docs_table(batch, ms):
    assert abs(decode(roof(), batch) * 1e3 - ms) < 0.1


def test_prefill_and_the_stall_it_causes():
    m = roof()
    assert abs(prefill(m, 1024) * 1e3 - 25) < 1                       # 25.3 ms
    assert abs(prefill(m, 2048, decodes=64) * 1e3 - 54) < 1           # 53.7 ms
    assert abs(decode(m, 64) * 1e3 - 9.7) < 0.1


def test_batch_1_decode_is_the_formula_exactly():
    h = gpu_by_name("H100")
    w = (LLAMA8.n_lin + LLAMA8.n_head) * 2 / (0.775 * h.bandwidth)
    kv = 131072 * (1024 + 1) / (0.90 * h.bandwidth)
    assert decode(roof(), 1) == pytest.approx(0.7e-3 + 5e-6 + w + kv, rel=1e-12)


def test_compute_bound_prefill_is_the_formula_exactly():
    h = gpu_by_name("H100")
    n, p = 4096, 1000
    f = (2 * LLAMA8.n_lin * n + 2 * LLAMA8.n_head * 1) / (0.60 * h.flops)
    attn = 4 * 32 * 32 * 128 * n * (p + n / 2) / (0.50 * h.flops)
    assert prefill(roof(), n, p=p) == pytest.approx(0.7e-3 + 5e-6 + f + attn, rel=1e-12)
    t = roof().terms(0, 0, 1, n, n * (p + n / 2), p)
    assert t["gemm_flops"] > t["weights"] and t["attn_flops"] > t["kv_read"] and t["tp_comm"] == 0


def test_empty_step_takes_no_time():
    assert roof().step_time(0, 0, 0, 0, 0.0, 0) == 0.0


def test_frontend_time_and_defaults():
    c = StepConstants()
    assert (c.eta_w, c.eta_f, c.eta_a, c.eta_kv, c.t_seq, c.tp_sync, c.jitter) == (0.775, 0.60, 0.50, 0.90,
                                                                                  5e-6, 8e-6, 0.0)
    assert c.t0 == 1.85e-3 and T0_CUDA_GRAPHS == 0.7e-3
    assert roof(constants=c).frontend_time() == 7e-3


# -- docs/engine-model.md §4: calibration -------------------------------------------------------
def calibration_errors(constants):
    a100 = bench_latency(roof("A100-40GB", constants=constants), 1, 1024, 128)[1] / 13.3e-3 - 1
    h100 = bench_latency(roof("H100", constants=constants), 8, 32, 128)[0] / 0.9975 - 1
    h200 = bench_latency(roof("H200", constants=constants), 8, 32, 128)[0] / 0.833 - 1
    return a100, h100, h200


def test_the_three_published_measurements_within_10_percent_by_default():
    errors = calibration_errors(StepConstants())
    assert [round(e * 100, 1) for e in errors] == [8.4, -1.1, -8.4]
    assert all(abs(e) < 0.10 for e in errors)


def test_t0_of_recent_vllm_misses_the_h100_and_h200_benches():
    a100, h100, h200 = calibration_errors(DOC)
    assert abs(a100) < 0.01 and -0.17 < h100 < -0.15 and -0.27 < h200 < -0.25


def test_bench_latency_walks_the_steps():
    m = roof()
    total, per_step = bench_latency(m, 8, 32, 128)
    first = m.step_time(0, 0, 8, 256, 8 * 32 * 16.0, 0)
    steps = [m.step_time(8, 8 * (32 + k - 1), 0, 0, 0.0, 0) for k in range(1, 128)]
    assert total == pytest.approx(first + sum(steps)) and per_step == pytest.approx(sum(steps) / 127)


# -- extensions: tensor parallel, FP8, MoE --------------------------------------------------------
def test_tensor_parallel_divides_the_model_and_adds_all_reduces():
    seventy = preset("meta-llama/Llama-3.1-70B-Instruct")
    h = gpu_by_name("H100")
    m = roof(arch=seventy, tp=4)
    t = m.terms(64, 64 * 1024, 0, 0, 0.0, 0)
    assert t["weights"] == pytest.approx((seventy.n_lin + seventy.n_head) / 4 * 2 / (0.775 * h.bandwidth))
    assert t["tp_comm"] == pytest.approx(2 * 80 * (64 * 8192 * 2 * 2 * 3 / 4 / 450e9 + 8e-6))
    assert m.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2
    assert t["kv_read"] == pytest.approx(m.kv_bytes_per_token * (64 * 1024 + 64) / (0.9 * h.bandwidth))
    two = roof(tp=2).terms(1, 1024, 0, 0, 0.0, 0)
    assert two["weights"] == pytest.approx(roof().terms(1, 1024, 0, 0, 0.0, 0)["weights"] / 2)
    with pytest.raises(ConfigError, match="tensor parallel size"):
        roof(tp=3)


def test_fp8_weights_halve_the_bytes_and_double_the_flops_where_supported():
    h, a = gpu_by_name("H100"), gpu_by_name("A100-80GB")
    t = roof(quantization="fp8").terms(256, 256 * 1024, 0, 0, 0.0, 0)
    assert t["weights"] == pytest.approx((LLAMA8.n_lin + 2 * LLAMA8.n_head) / (0.775 * h.bandwidth))
    assert t["gemm_flops"] == pytest.approx((LLAMA8.n_lin / 2 + LLAMA8.n_head) * 2 * 256 / (0.6 * h.flops))
    ta = roof("A100-80GB", quantization="fp8").terms(256, 256 * 1024, 0, 0, 0.0, 0)   # weight-only
    assert ta["gemm_flops"] == pytest.approx((LLAMA8.n_lin + LLAMA8.n_head) * 2 * 256 / (0.6 * a.flops))


def test_fp8_kv_cache_halves_the_kv_reads():
    assert roof(kv_cache_dtype="fp8").kv_bytes_per_token == 65536
    full = roof().terms(256, 256 * 4096, 0, 0, 0.0, 0)["kv_read"]
    half = roof(kv_cache_dtype="fp8").terms(256, 256 * 4096, 0, 0, 0.0, 0)["kv_read"]
    assert half == pytest.approx(full / 2)


def test_moe_reads_the_experts_its_tokens_touch():
    q = preset("Qwen/Qwen3-30B-A3B")
    h = gpu_by_name("H100")
    m = roof(arch=q)
    experts = 48 * 128 * q.expert_params * 2
    dense = (q.n_lin_total * 2 - experts + q.n_head * 2)
    one = m.terms(1, 1024, 0, 0, 0.0, 0)["weights"]
    assert one == pytest.approx((dense + experts * 8 / 128) / (0.775 * h.bandwidth))
    many = m.terms(1024, 1024 * 1024, 0, 0, 0.0, 0)["weights"]
    assert many == pytest.approx((dense + experts) / (0.775 * h.bandwidth), rel=1e-9)
    assert decode(m, 1) < decode(roof(), 1) < decode(m, 64)


# -- jitter -------------------------------------------------------------------------------------
def test_jitter_is_seeded_and_clamped():
    m = roof()
    f = m.step_time
    assert jittered(f, random.Random(1), 0) is f
    a = jittered(m.step_time, random.Random(7), 0.1)
    b = jittered(m.step_time, random.Random(7), 0.1)
    base = decode(m, 8)
    xs = [a(8, 8 * 1024, 0, 0, 0.0, 0) for _ in range(5000)]
    assert xs[:50] == [b(8, 8 * 1024, 0, 0, 0.0, 0) for _ in range(50)]
    assert min(xs) >= base * 0.7 - 1e-15 and max(xs) <= base * 1.3 + 1e-15
    assert abs(sum(xs) / len(xs) / base - 1) < 0.01 and len(set(xs)) > 4000
    wide = jittered(m.step_time, random.Random(3), 0.5)
    assert min(wide(8, 8 * 1024, 0, 0, 0.0, 0) for _ in range(2000)) >= base * 0.05


# -- profiles -----------------------------------------------------------------------------------
def test_profile_overrides_constants(tmp_path):
    p = tmp_path / "profile.yaml"
    p.write_text("t0: 2ms\neta_w: 0.8\nt_seq: 4.4e-6\njitter: 0.02\n")
    constants, table = load_profile(str(p))
    assert table is None
    assert (constants.t0, constants.eta_w, constants.t_seq, constants.jitter) == (0.002, 0.8, 4.4e-6, 0.02)
    assert constants.eta_f == 0.60 and constants.t_frontend == 7e-3
    j = tmp_path / "profile.json"
    j.write_text(json.dumps({"t_frontend": "6ms", "eta_kv": 1}))
    assert load_profile(str(j)).constants.t_frontend == 0.006
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_profile(str(empty)).constants == StepConstants()


@pytest.mark.parametrize("text,match", [
    ("t0: 1ms\ntee0: 2\n", "unknown keys tee0"),
    ("eta_w: -1\n", "eta_w must be a positive number"),
    ("eta_f: fast\n", "eta_f: a number"),
    ("t0: 2 parsecs\n", "t0: time: invalid duration"),
    ("jitter: 1.5\n", "jitter must be in"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("t0: [\n", "cannot parse"),
    ("step_table: 3\n", "expected a mapping with 'points'"),
    ("step_table: {points: [[1, 2, 3]]}\n", "must be 4 numbers"),
    ("step_table: {points: [[1, 0, 0, 1]], shape: x}\n", "unknown keys shape"),
    ("step_table: {points: [[1, 0, 0, 1]], extrapolate: cubic}\n", "extrapolate must be"),
    ("step_table: {points: [[1, 0, 0, 1], [1, 0, 0, 2]]}\n", "appears twice"),
    ("step_table: {points: [[1, 0, 0, 0]]}\n", "ms > 0"),
    ("step_table: {points: [[1, 0, 0, 1], [2, 0, 0, 2], [1, 5, 0, 3]]}\n",
     "full grid.*1 missing.*\\(2, 5, 0\\)"),
    ("step_table: {points: [{decode_seqs: 1, ms: 2, batch: 3}]}\n", "keys are"),
])
def test_bad_profiles_name_the_file_and_key(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        load_profile(str(p))
    assert str(p) in str(e.value) and e.value.param == "step-time-profile"


def test_missing_profile_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_profile(str(tmp_path / "nope.yaml"))


GRID = [(d, c, n, 5 + 0.1 * d + 0.01 * n + 0.001 * c + 0.0001 * d * c)
        for d in (1, 8, 64) for c in (1000, 4000) for n in (0, 1000)]


def test_table_interpolates_multilinearly_and_extrapolates_above():
    t = StepTable(GRID)
    exact = lambda d, c, n: (5 + 0.1 * d + 0.01 * n + 0.001 * c + 0.0001 * d * c) / 1000
    assert t.lookup(8, 4000, 1000) == pytest.approx(exact(8, 4000, 1000))      # a grid point
    assert t.lookup(20, 2500, 300) == pytest.approx(exact(20, 2500, 300))      # inside: exact for this
    assert t.lookup(128, 8000, 3000) == pytest.approx(exact(128, 8000, 3000))  # linear above the grid
    assert t.lookup(0, 10, 0) == pytest.approx(exact(1, 1000, 0))              # clamped below
    c = StepTable(GRID, extrapolate="clamp")
    assert c.lookup(128, 8000, 3000) == pytest.approx(exact(64, 4000, 1000))


def test_table_with_single_valued_axes():
    t = StepTable([(1, 0, 0, 6), (64, 0, 0, 10)])
    assert t.lookup(32.5, 5000, 4096) == pytest.approx(0.008)
    assert StepTable([(1, 0, 0, 6)]).lookup(300, 1, 1) == pytest.approx(0.006)


def test_profile_table_replaces_the_roofline(tmp_path):
    p = tmp_path / "measured.yaml"
    p.write_text("t_frontend: 5ms\nstep_table:\n  points:\n" + "".join(
        f"    - {{decode_seqs: {d}, context_tokens: {c}, prefill_tokens: {n}, ms: {ms}}}\n"
        for d, c, n, ms in GRID))
    m = build_step_time(gpu_by_name("H100"), LLAMA8, profile_path=str(p), kv_cache_dtype="fp8")
    assert isinstance(m, TableStepTime) and m.kv_bytes_per_token == 65536 and m.frontend_time() == 0.005
    assert m.step_time(8, 8 * 4000, 0, 0, 0.0, 0) == pytest.approx(
        (5 + 0.8 + 4 + 3.2) / 1000)               # mean context 4000
    assert m.step_time(0, 0, 1, 1000, 5e5, 0) == pytest.approx((5 + 0.1 + 10 + 1 + 0.1) / 1000)
    assert m.step_time(0, 0, 0, 0, 0.0, 0) == 0.0


def test_build_without_a_profile_is_the_roofline(tmp_path):
    m = build_step_time(gpu_by_name("H100"), LLAMA8)
    assert isinstance(m, RooflineStepTime) and m.constants == StepConstants()
    p = tmp_path / "c.yaml"
    p.write_text("t0: 0.7ms\n")
    m = build_step_time(gpu_by_name("H100"), LLAMA8, profile_path=str(p))
    assert isinstance(m, RooflineStepTime) and decode(m, 1) == pytest.approx(decode(roof(), 1))


def test_bad_constants_are_refused():
    with pytest.raises(ConfigError, match="t0 must be a duration"):
        roof(constants=StepConstants(t0=-1))


# -- speed ----------------------------------------------------------------------------------------
def test_step_time_costs_microseconds():
    """The scheduler calls it once per step: a few us (measured ~1.7 dense, ~2.2 MoE, ~5 table)."""
    models = [roof(), roof(arch=preset("Qwen/Qwen3-30B-A3B"), tp=2), TableStepTime(StepTable(GRID))]
    for m in models:
        f = m.step_time
        n = 20000
        start = time.perf_counter()
        for _ in range(n):
            f(1024, 1536000, 2, 4096, 1.2e7, 2000)
        per_call = (time.perf_counter() - start) / n
        assert per_call < 50e-6            # generous: the machine is shared
