"""The H200's kernel tables and their fit (generation/engine/perf/fit_kernels.py, issue 28): the
tables timed on the GPU are shipped whole, the step model's GPU time fits them, and the shipped
H200 profile is what the fit writes.  Unit tier: the tables are data, no GPU is needed."""
from __future__ import annotations

import collections
import json

import pytest

from generation.engine.hardware import gpu_by_name
from generation.engine.perf import fit_kernels as fk
from generation.engine.perf.step_model import PROFILE_DIR, load_constants

H200 = gpu_by_name("H200")


@pytest.fixture(scope="module")
def step_fit():
    fit = fk.StepTableFit(fk.read_table(fk.table_path("H200", "compiled")), H200, load_constants("H100")[0])
    return fit, fit.fit()


def test_the_tables_hold_every_section_timed_on_the_h200():
    kernels = fk.read_table(fk.table_path("H200", "kernels"))
    kinds = collections.Counter(r["kind"] for r in kernels)
    assert kinds["gemm"] == 1059 and kinds["attn_decode"] == 705 and kinds["attn_prefill"] == 119
    assert kinds["moe"] == 28 and kinds["gemm_fp8"] == 30 and kinds["sample"] == 15
    env = next(r for r in kernels if r["kind"] == "env")
    assert env["gpu"] == "NVIDIA H200" and env["sms"] == 132
    for which, count, models in (("compiled", 470, 10), ("eager", 287, 7)):
        steps = [r for r in fk.read_table(fk.table_path("H200", which)) if r["kind"] == "step"]
        assert len(steps) == count and len({r["model"] for r in steps}) == models
        assert all(r["us"] > 0 for r in steps)
    triton = [r for r in fk.read_table(fk.table_path("H200", "moe_triton")) if r["kind"] == "step"]
    assert len(triton) == 47 and {(r["model"], r["moe"]) for r in triton} == {("mixtral-8x7b-v0.1", "triton")}
    compiled = [r for r in fk.read_table(fk.table_path("H200", "compiled")) if r["kind"] == "step"]
    assert sum(1 for r in compiled if r["P"]) == 60          # chunks after a cached prefix


def test_the_kernel_summary_reads_the_peaks_off_the_table():
    lines = fk.kernel_summary(fk.read_table(fk.table_path("H200", "kernels")), H200)
    assert lines[0].startswith("NVIDIA H200, torch 2.11.0+cu130")
    assert "8192^3 BF16 GEMM: 794 TFLOP/s (0.80 of the peak)" in lines[1]
    assert any("decode attention, cudnn" in line and "(0.90)" in line for line in lines)


def test_the_step_model_fits_the_measured_steps(step_fit):
    """The step model's form (roofline terms with a soft maximum, fixed per-layer costs) fits
    whole forward passes timed on the GPU to a few percent: no dense model's mean error over
    3.5%.  Mixtral's steps are scored, not fitted (torch's MoE kernels, not vLLM's)."""
    fit, (c, rms0, rms1) = step_fit
    assert rms0 == pytest.approx(0.1588, abs=1e-4) and rms1 < 0.032
    assert sum(1 for r in fit.rows if fit.dense(r)) == 369            # 9 dense models x 41 shapes
    errors = fit.errors(c, keep=lambda r: not r["P"])
    assert len(errors) == 10
    for model, (n, mean, worst) in errors.items():
        assert n == 41 and (mean < 3.0 or model == "mixtral-8x7b-v0.1"), model


def test_the_h200_profile_decodes_faster_than_the_h100s():
    """The same chip with 1.43x the bandwidth: every decode step of a dense or MoE model is
    faster on the H200's profile (fitted to the H200's MoE kernels in torch, Mixtral ran 40%
    slower at batch 1: those constants are the H100's now)."""
    from generation.engine.hardware import preset
    from generation.engine.perf.step_model import StepModel
    for name, tp in (("meta-llama/Llama-3.1-8B-Instruct", 1), ("meta-llama/Llama-3.1-70B-Instruct", 4),
                     ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2), ("Qwen/Qwen3-30B-A3B", 1)):
        h100, h200 = (StepModel(gpu_by_name(g), preset(name), tp=tp, constants=load_constants(g)[0])
                      for g in ("H100", "H200"))
        for b in (1, 8, 64, 256):
            assert h200.step_time(b, b * 1024, 0, 0, 0, 0) < h100.step_time(b, b * 1024, 0, 0, 0, 0), (name, b)


def test_the_shipped_h200_profile_is_what_the_fit_writes(step_fit):
    """GPU constants from the table, t_layer solved on the published batch latency, every
    host-side constant the H100's."""
    _, (c, _, _) = step_fit
    with open(f"{PROFILE_DIR}/h200.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    shipped, h100 = load_constants("H200")[0], load_constants("H100")[0]
    for k in fk.FREE:
        if k != "t_layer":
            assert getattr(shipped, k) == pytest.approx(getattr(c, k), rel=1e-4), k
    assert doc["kernel_t_layer"] == pytest.approx(c.t_layer, rel=1e-4)
    host = set(shipped.to_dict()) - set(fk.FREE)
    assert {k: getattr(shipped, k) for k in host} == {k: getattr(h100, k) for k in host}
    solved, overhead = fk.with_step_overhead(shipped, "H200")
    assert solved.t_layer == pytest.approx(shipped.t_layer, rel=1e-5)
    assert overhead == pytest.approx(0.0, abs=1e-9)


def test_a_table_of_your_own_gpu_fits_to_a_profile_the_server_loads(tmp_path, capsys):
    """``--steps`` takes a user's table (plain JSON lines); a GPU without a published
    measurement takes the H200's measured overhead per layer outside the kernels; the profile
    written loads as --step-time-profile does."""
    from generation.engine.perf.step_model import build_step_model
    from generation.engine.hardware import preset
    rows = fk.read_table(fk.table_path("H200", "compiled"))
    own = tmp_path / "steps.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in rows if r.get("model") == "llama-3.1-8b-instruct"))
    out = tmp_path / "b200.json"
    assert fk.main(["--gpu", "B200", "--steps", str(own), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "47 steps of 1 models" in printed and "no published B200 measurement" in printed
    doc = json.loads(out.read_text())
    assert doc["gpu"] == "B200" and "plus the H200's" in doc["basis"]
    assert doc["constants"]["t_layer"] == pytest.approx(doc["kernel_t_layer"] + fk.measured_overhead_per_layer(),
                                                        rel=1e-5)
    m = build_step_model(gpu_by_name("B200"), preset("meta-llama/Llama-3.1-8B-Instruct"), profile_path=str(out))
    assert m.constants.t_layer == doc["constants"]["t_layer"]


def test_an_unreadable_or_empty_table_is_an_error_naming_the_file(tmp_path, capsys):
    assert fk.main(["--gpu", "B200", "--steps", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: cannot read the table" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"kind": "env"}\n')
    assert fk.main(["--gpu", "B200", "--steps", str(empty)]) == 2
    assert "empty.jsonl: no step rows" in capsys.readouterr().err


@pytest.mark.parametrize("line,message", [
    ("[1, 2]", "row 1 is not a JSON object"),
    ('{"kind": "step", "model": "llama-2-7b-hf", "tp": 1, "B": 1, "C": 1, "n": 0, "us": 5}', "step row 1 lacks layers"),
    ('{"kind": "step", "model": "llama-2-7b-hf", "tp": 1, "layers": 32, "B": 1, "C": 1, "n": 0, "us": 0}',
     "step row 1 has no positive time"),
    ('{"kind": "step", "model": "nope", "tp": 1, "layers": 32, "B": 1, "C": 1, "n": 0, "us": 5}',
     "model 'nope': its config is not in the table and it is not one of bench/sim_to_real/model_configs/"),
    ('{"kind": "step", "model": "llama-2-7b-hf", "tp": 1, "layers": 2, "B": 1, "C": 1, "n": 0, "us": 5}',
     "timed with 2 layers, its config has 32 (a --dry-run table"),
])
def test_a_malformed_step_table_is_an_error_naming_the_row(tmp_path, capsys, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n")
    assert fk.main(["--gpu", "B200", "--steps", str(bad), "--dry"]) == 2
    assert message in capsys.readouterr().err


def test_a_gpu_alias_and_a_gpu_without_a_shipped_table(tmp_path, capsys):
    """The GPU's resolved name picks the shipped table and the published point; a GPU with no
    shipped table asks for --steps."""
    assert fk.main(["--gpu", "h200-sxm", "--dry"]) == 0
    assert "the published H200 measurement pins" in capsys.readouterr().out
    assert fk.main(["--gpu", "B200", "--dry"]) == 2
    assert "no step table of the B200 is shipped" in capsys.readouterr().err
    assert fk.main(["--gpu", "B200", "--steps", fk.table_path("H200", "compiled"), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}" in capsys.readouterr().err


def test_a_model_of_your_own_travels_in_the_table(tmp_path, capsys):
    """gpu_step_table.py writes each model's config.json into the table (``kind: "model"``), so
    a model outside bench/sim_to_real fits as well; a broken config is an error naming it."""
    cfg = json.loads(open(f"{fk.MODEL_CONFIGS}/llama-3.1-8b-instruct/config.json").read())
    rows = [dict(r, model="my-llama") for r in fk.read_table(fk.table_path("H200", "compiled"))
            if r.get("model") == "llama-3.1-8b-instruct"]
    own = tmp_path / "steps.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in
                           [{"kind": "model", "model": "my-llama", "tp": 1, "config": cfg}, *rows]))
    assert fk.main(["--gpu", "B200", "--steps", str(own), "--dry"]) == 0
    assert "my-llama" in capsys.readouterr().out
    own.write_text("".join(json.dumps(r) + "\n" for r in
                           [{"kind": "model", "model": "my-llama", "tp": 1, "config": {"hidden_size": 8}}, *rows]))
    assert fk.main(["--gpu", "B200", "--steps", str(own), "--dry"]) == 2
    assert "model 'my-llama': " in capsys.readouterr().err


def test_a_dry_run_table_is_refused(tmp_path, capsys):
    """The GPU scripts' --dry-run (the CPU at 1/16 of the sizes) marks its env row; neither
    table of such a run is taken for a measurement."""
    dry = tmp_path / "dry.jsonl"
    dry.write_text('{"kind": "env", "dry_run": true}\n')
    assert fk.main(["--gpu", "B200", "--steps", str(dry), "--dry"]) == 2
    assert "a --dry-run table" in capsys.readouterr().err
    assert fk.main(["--gpu", "B200", "--steps", fk.table_path("H200", "compiled"), "--kernels", str(dry), "--dry"]) == 2
    assert "dry.jsonl: a --dry-run table" in capsys.readouterr().err
