"""Fit a GPU's efficiencies to kernels timed on that GPU, and write its profile.

    python -m generation.engine.perf.fit_kernels               # rewrites the shipped H200 profile
    python -m generation.engine.perf.fit_kernels --cv          # + leave-one-model-out
    python -m generation.engine.perf.fit_kernels --table eager # the steps without Inductor's fusion
    python -m generation.engine.perf.fit_kernels --gpu B200 --steps steps.jsonl --out b200.json
                                                               # your own GPU's table

The tables (``gpu_tables/``) were timed on one H200 with random weights from the sim-to-real
models' config.json files (``bench/gpu_kernel_table.py``, ``bench/gpu_step_table.py``; README:
Fidelity says how and when):

* ``<gpu>_steps_compiled.jsonl.gz``: whole forward passes, every layer's kernels in one CUDA
  graph, elementwise ops fused by Inductor as vLLM V1 compiles its model; 10 models, 47 step
  shapes each (decode batches 1-256 at 256-4,096 tokens of context, prefill chunks of 64-8,192
  tokens, chunks after a cached prefix of 512-16,384 tokens, mixed steps).  The fit's data.
* ``<gpu>_steps.jsonl.gz``: an earlier run's 7 models and 41 shapes with torch's unfused
  elementwise ops.
* ``<gpu>_kernels.jsonl.gz``: single kernels (every linear layer's GEMM at 1-8,192 rows, decode
  and prefill attention per backend, grouped expert GEMMs, FP8 GEMMs, sampling); printed here
  as what the kernels reach against the datasheet, not fitted.

Method: :class:`~.step_model.StepModel`'s GPU time (its ``fixed + gemm + attn`` terms; the
table has neither the host's per-step CPU nor all-reduces, so ``t0``, ``t_seq`` and the
all-reduce terms are held at 0) is fitted to the dense models' steps without a cached prefix
by ``scipy.optimize.least_squares`` on ``log(predicted / measured)``, moving ``eta_w, eta_f,
eta_kv, eta_a, overlap, m_half, t_layer, t_vocab`` in log space.  Scored, not fitted: a MoE
model's steps (the table's expert kernels are torch's, not vLLM's fused MoE) and the chunks
after a cached prefix (torch runs their lower-right causal mask on FlashAttention 2, at half
the rate of cuDNN's attention, which the other steps use, and of vLLM's FlashAttention 3).  The profile
written takes the fitted constants and every other from the H100's profile, fitted on real
vLLM runs: the MoE kernels' (:data:`MOE_FROM_HOST`), the CPU per step, async scheduling's
overlap, the frontend, the engine's pauses, the MoE compile stalls, all-reduce, FP8 and eager
costs (the same vLLM on the same class of host).

A real step adds work outside its layers' kernels; one published measurement of the GPU
(docs/engine-model.md §4, ``vllm bench latency`` batch 8 on the H200) pins it as ``t_layer``
(:func:`with_step_overhead`).  A GPU without one (your own table, ``--steps``) takes the H200's
measured overhead per layer.  The H100's published measurement is the held-out check.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import sys
from dataclasses import replace

from .groundtruth import DATA_DIR
from .step_model import PROFILE_DIR, PerfConstants, StepModel, load_constants

TABLE_DIR = os.path.join(os.path.dirname(__file__), "gpu_tables")
MODEL_CONFIGS = os.path.join(DATA_DIR, "model_configs")
FREE = ("eta_w", "eta_f", "eta_kv", "eta_a", "overlap", "m_half", "t_layer", "t_vocab")
# A MoE model's expert kernels in the table are torch's (grouped GEMMs, a router, sort and gather
# in plain ops), not vLLM's fused MoE: fitted to them, an H200 ran Mixtral 40% slower than the
# H100's profile at batch 1.  Its steps are scored, not fitted, and these stay the H100's.
MOE_FROM_HOST = ("eta_moe", "t_moe")
HOST_BASIS = "H100"          # the profile the host-side constants come from
# bounds of the free constants (efficiencies as fractions of the datasheet's peaks; seconds)
BOUNDS = {"eta_w": (0.2, 1.0), "eta_f": (0.2, 1.0), "eta_kv": (0.2, 1.0), "eta_a": (0.05, 1.0),
          "overlap": (1.0, 50.0), "m_half": (1.0, 4096.0), "t_layer": (1e-7, 1e-3), "t_vocab": (1e-14, 1e-8)}


def table_path(gpu: str, which: str) -> str:
    """``which``: "compiled" (the fit's steps), "eager" (unfused steps), "kernels", or
    "moe_triton" (Mixtral's steps with ``bench/gpu_moe.py``'s fused Triton experts)."""
    name = {"compiled": "steps_compiled", "eager": "steps", "kernels": "kernels",
            "moe_triton": "steps_moe_triton"}[which]
    return os.path.join(TABLE_DIR, f"{gpu.lower()}_{name}.jsonl.gz")


def read_table(path: str) -> list[dict]:
    """The rows of a JSON-lines table (one dict per line), gzipped when the name ends in .gz.
    Raises ConfigError naming the file when it cannot be read."""
    from generation.config.values import ConfigError
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz")
              else open(path, encoding="utf-8")) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the table ({e})") from None
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise ConfigError(f"{path}: row {i} is not a JSON object")
    return rows


class StepTableFit:
    """The step rows of one table against :class:`StepModel`'s GPU time.

    ``rows``: the table's rows; its ``kind: "step"`` rows are fitted (``model`` named by a
    ``kind: "model"`` row that carries its ``config``, or a folder under
    ``bench/sim_to_real/model_configs``; ``tp``, ``B`` decodes at context ``C`` each, a prefill
    chunk of ``n`` tokens after ``P`` cached ones (0 when absent), ``us``); ``gpu`` a
    :class:`~generation.engine.hardware.GPU`."""

    def __init__(self, rows: list[dict], gpu, base: PerfConstants, source: str = "step table"):
        from generation.config.values import ConfigError
        from .model_arch import ModelArch, load_hf_config
        self.rows = [r for r in rows if r.get("kind") == "step"]
        # the models' config.json as the GPU script wrote them into the table (a model of your
        # own); else the sim-to-real folder of that name
        configs = {r["model"]: r["config"] for r in rows
                   if r.get("kind") == "model" and isinstance(r.get("config"), dict) and "model" in r}
        self.failed = sum(1 for r in rows if r.get("kind") == "error")      # shapes the GPU script could not time
        self.base = replace(base, t0=0.0, t_seq=0.0, cpu_overlap=0.0, cpu_hidden=0.0)
        self.models = {}
        for i, r in enumerate(self.rows, 1):
            bad = [k for k in ("model", "tp", "layers", "B", "C", "n", "us") if k not in r]
            if bad or not isinstance(r.get("us"), (int, float)) or r["us"] <= 0:
                raise ConfigError(f"{source}: step row {i} lacks {', '.join(bad)}" if bad else
                                  f"{source}: step row {i} has no positive time (us)")
            key = (r["model"], r["tp"])
            if key not in self.models:
                try:
                    arch = (ModelArch.from_hf_config(configs[r["model"]], name=r["model"], source=source)
                            if r["model"] in configs else
                            load_hf_config(os.path.join(MODEL_CONFIGS, r["model"]), name=r["model"]))
                except ConfigError as e:
                    raise ConfigError(f"{source}: model {r['model']!r}: its config is not in the table and it is not "
                                      f"one of bench/sim_to_real/model_configs/" if r["model"] not in configs else
                                      f"{source}: model {r['model']!r}: {e}")
                if r["layers"] != arch.num_layers:
                    raise ConfigError(f"{source}: {r['model']} was timed with {r['layers']} layers, its config has "
                                      f"{arch.num_layers} (a --dry-run table checks the script only)")
                sm = StepModel(gpu, arch, tp=r["tp"], constants=self.base, async_scheduling=False)
                sm.all_reduces, sm.ar_per_token = 0, 0.0        # one GPU: no all-reduce in the table
                self.models[key] = sm

    def dense(self, r: dict) -> bool:
        """Whether the fit uses the row: a model with no MoE layers (:data:`MOE_FROM_HOST`) and
        no cached prefix before its chunk (torch runs the lower-right causal mask on
        FlashAttention 2, at half of cuDNN's and vLLM's FlashAttention 3's rate)."""
        return not self.models[(r["model"], r["tp"])].moe_layers and not r.get("P", 0)

    def constants(self, x) -> PerfConstants:
        return replace(self.base, **{k: float(math.exp(v)) for k, v in zip(FREE, x)})

    def predict(self, c: PerfConstants) -> list[float]:
        """Seconds per row under ``c``."""
        for sm in self.models.values():
            sm._set_constants(c)
        out = []
        for r in self.rows:
            b, ctx, n, pre = r["B"], r["C"], r["n"], r.get("P", 0)
            out.append(self.models[(r["model"], r["tp"])].step_time(
                b, b * ctx, 1 if n else 0, n, n * (pre + n / 2.0), pre))
        return out

    def residuals(self, x, keep=None) -> list[float]:
        pred = self.predict(self.constants(x))
        return [math.log(p / (r["us"] * 1e-6)) for p, r in zip(pred, self.rows)
                if keep is None or keep(r)]

    def fit(self, keep=None):
        """Least squares over the dense models' rows that ``keep`` accepts; returns (constants,
        RMS before, RMS after) of the log ratios on those rows."""
        import numpy as np
        from scipy.optimize import least_squares
        user_keep = keep
        keep = (lambda r: self.dense(r) and user_keep(r)) if user_keep else self.dense
        lo = np.log([BOUNDS[k][0] for k in FREE])
        hi = np.log([BOUNDS[k][1] for k in FREE])
        x0 = np.clip(np.log([max(getattr(self.base, k), BOUNDS[k][0]) for k in FREE]), lo + 1e-9, hi - 1e-9)
        r0 = np.array(self.residuals(x0, keep))
        res = least_squares(lambda x: self.residuals(x, keep), x0, bounds=(lo, hi), x_scale=1.0,
                            diff_step=1e-3, max_nfev=400)
        r1 = np.array(self.residuals(res.x, keep))
        return (self.constants(res.x), float(np.sqrt(np.mean(r0 ** 2))), float(np.sqrt(np.mean(r1 ** 2))))

    def errors(self, c: PerfConstants, keep=None) -> dict:
        """Per model: (rows, mean |error| %, max |error| %)."""
        pred = self.predict(c)
        per: dict = {}
        for p, r in zip(pred, self.rows):
            if keep is None or keep(r):
                per.setdefault(r["model"], []).append(abs(p / (r["us"] * 1e-6) - 1) * 100)
        return {m: (len(v), sum(v) / len(v), max(v)) for m, v in per.items()}


def kernel_summary(rows: list[dict], gpu) -> list[str]:
    """What the single kernels reach, as fractions of ``gpu``'s datasheet peaks."""
    out = []
    env = next((r for r in rows if r.get("kind") == "env"), {})
    out.append(f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, "
               f"cuDNN {env.get('cudnn', '?')}; datasheet {gpu.bandwidth / 1e12:.2f} TB/s, "
               f"{gpu.flops / 1e12:.0f} TFLOP/s BF16")
    med = statistics.median
    for r in rows:
        if r.get("kind") == "peak" and r.get("what") == "gemm_bf16":
            out.append(f"  {r.get('m', '?')}^3 BF16 GEMM: {r['flops_per_s'] / 1e12:.0f} TFLOP/s "
                       f"({r['flops_per_s'] / gpu.flops:.2f} of the peak)")
    gemm = [r for r in rows if r.get("kind") == "gemm"]
    big = [2 * r["K"] * r["N"] / (r["us"] * 1e-6) for r in gemm if r["M"] == 1 and 2 * r["K"] * r["N"] >= 200e6]
    small = [2 * r["K"] * r["N"] / (r["us"] * 1e-6) for r in gemm if r["M"] == 1 and 2 * r["K"] * r["N"] < 60e6]
    flops = [2 * r["M"] * r["K"] * r["N"] / (r["us"] * 1e-6) for r in gemm if r["M"] == 8192]
    if big:
        out.append(f"  GEMM at 1 row, weights >= 200 MB ({len(big)} shapes): median {med(big) / 1e12:.2f}"
                   f" TB/s ({med(big) / gpu.bandwidth:.2f})")
    if small:
        out.append(f"  GEMM at 1 row, weights under 60 MB ({len(small)} shapes): median {med(small) / 1e12:.2f} TB/s "
                   f"(a few us of start-up per GEMM)")
    if flops:
        out.append(f"  GEMM at 8,192 rows ({len(flops)} shapes): median {med(flops) / 1e12:.0f} TFLOP/s "
                   f"({med(flops) / gpu.flops:.2f}), range {min(flops) / 1e12:.0f}-{max(flops) / 1e12:.0f}")
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
        dec = [r for r in rows if r.get("kind") == "attn_decode" and r["backend"] == backend]
        bw = [r["B"] * r["C"] * r["kv_heads"] * r["head_dim"] * 4 / (r["us"] * 1e-6) for r in dec
              if r["B"] * r["C"] >= 131072]
        if bw:
            out.append(f"  decode attention, {backend.split('_')[0].lower()}, >= 131,072 cached tokens: median "
                       f"{med(bw) / 1e12:.2f} TB/s of KV ({med(bw) / gpu.bandwidth:.2f})")
        pre = [r for r in rows if r.get("kind") == "attn_prefill" and r["backend"] == backend]
        if pre:
            def tf(n):
                v = [4 * r["B"] * r["heads"] * r["head_dim"] * r["n"] ** 2 / 2 / (r["us"] * 1e-6) for r in pre if r["n"] == n]
                return med(v) / gpu.flops if v else float("nan")
            out.append(f"  causal prefill attention, {backend.split('_')[0].lower()}: "
                       + ", ".join(f"{n} tokens {tf(n):.2f}" for n in (128, 512, 2048, 8192)) + " of the peak")
    try:
        share, n = fa2_decode_share(rows)
        out.append(f"  decode attention, FlashAttention 2 against cuDNN over the {n} shapes timed both ways: "
                   f"{share:.3f} of the rate (geometric mean; eta_kv_fa2)")
    except ValueError:
        pass
    return out


def fa2_decode_share(rows: list[dict]) -> tuple[float, int]:
    """``(share, shapes)``: FlashAttention 2's decode attention against cuDNN's on the same shapes
    of a kernel table (``kind`` "attn_decode", timed with both backends), the least-squares factor
    on ``log(time)``: the geometric mean of ``t_cudnn / t_fa2`` over the shapes timed both ways.
    cuDNN's kernel stands in for FlashAttention 3, which vLLM runs on Hopper and which the H100's
    training runs saw; on SM 8.x GPUs (A100, L40S) vLLM runs FlashAttention 2
    (``fa_utils.get_flash_attn_version``), whose decode reads the KV cache at this share of the
    rate (the step model's ``eta_kv_fa2``).  Raises ValueError when no shape has both."""
    by: dict = {}
    for r in rows:
        if r.get("kind") == "attn_decode" and r.get("us"):
            key = (r["heads"], r["kv_heads"], r["head_dim"], r["B"], r["C"])
            by.setdefault(key, {})[r["backend"]] = r["us"]
    ratios = [t["CUDNN_ATTENTION"] / t["FLASH_ATTENTION"] for t in by.values()
              if "CUDNN_ATTENTION" in t and "FLASH_ATTENTION" in t]
    if not ratios:
        raise ValueError("no decode shape timed with both FlashAttention and cuDNN")
    return math.exp(statistics.fmean(math.log(x) for x in ratios)), len(ratios)


def with_step_overhead(constants: PerfConstants, gpu: str) -> tuple[PerfConstants, float]:
    """``constants`` with ``t_layer`` solved (Brent) so that the GPU's published batch latency
    (:data:`~.published.PUBLISHED_STEPS`) replays exactly, and the seconds a step of Llama-3.1-8B
    (32 layers) gains by it.  The kernel table has the layers' kernels alone; a real step adds
    what is not in them (the rotary embedding, the input preparation and the sampler's kernels,
    the gaps between graphs, the host's part that async scheduling does not hide), and the one
    published measurement pins that one constant, as it pinned ``eta_w`` before."""
    from scipy.optimize import brentq
    from .published import PUBLISHED_STEPS, published_value
    row = next(r for r in PUBLISHED_STEPS if r[0].lower() == gpu.lower())
    t = brentq(lambda v: published_value(row, replace(constants, t_layer=v)) - row[5], 1e-7, 1e-3, xtol=1e-9)
    t = float(f"{t:.6g}")
    return replace(constants, t_layer=t), 32 * (t - constants.t_layer)


def refuse_dry_run(rows: list[dict], path: str) -> None:
    """Raises ConfigError when the table's env row says the GPU script ran with --dry-run (the
    CPU at 1/16 of the sizes: a check of the script, not a measurement)."""
    from generation.config.values import ConfigError
    if any(r.get("kind") == "env" and r.get("dry_run") for r in rows):
        raise ConfigError(f"{path}: a --dry-run table (the CPU at 1/16 of the sizes) checks the script only")


def measured_overhead_per_layer(gpu: str = "H200") -> float:
    """Seconds a layer of a real step adds to its kernels, as the shipped profile of ``gpu``
    found it (its ``t_layer`` less the kernels' own ``kernel_t_layer``): what a GPU without a
    published measurement takes (the same vLLM on the same class of host)."""
    with open(os.path.join(PROFILE_DIR, f"{gpu.lower()}.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    return doc["constants"]["t_layer"] - doc["kernel_t_layer"]


def held_out(constants: PerfConstants) -> list[str]:
    """The H100's published batch latency (docs/engine-model.md §4; not fitted on) replayed with
    ``constants`` at the H100's peaks, and the GPU's own (fitted on) for comparison."""
    from .published import PUBLISHED_STEPS, published_value
    rows = [r for r in PUBLISHED_STEPS if r[0] == "H200"] + [("H100", 8, 32, 128, "batch", 997.5)]
    out = []
    for row in rows:
        v = published_value(row, constants)
        out.append(f"  {row[0]}, batch {row[1]}, {row[2]} in / {row[3]} out: {v:.1f} ms against the published "
                   f"{row[5]} ({(v / row[5] - 1) * 100:+.1f}%)")
    return out


def main(argv=None) -> int:
    from .hardware import GPUS
    p = argparse.ArgumentParser(prog="python -m generation.engine.perf.fit_kernels",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gpu", default="H200", help=f"the GPU the tables were timed on, whose datasheet peaks the "
                                                 f"fit divides by: {', '.join(GPUS)}")
    p.add_argument("--steps", default=None,
                   help="a step table of your own (bench/gpu_step_table.py --compile's output, .jsonl or .jsonl.gz; "
                        "default: the shipped table of --gpu)")
    p.add_argument("--kernels", default=None, help="a kernel table of your own (bench/gpu_kernel_table.py), printed")
    p.add_argument("--table", default="compiled", choices=("compiled", "eager"),
                   help="which shipped step table (without --steps)")
    p.add_argument("--cv", action="store_true", help="also leave each model out in turn")
    p.add_argument("--out", default=None, help="profile to write (default: the shipped profiles/<gpu>.json, "
                                               "overwritten; --dry writes nothing)")
    p.add_argument("--dry", action="store_true", help="print the fit, write nothing")
    args = p.parse_args(argv)
    from generation.config.values import ConfigError
    from .hardware import gpu_by_name
    from .published import PUBLISHED_STEPS
    try:
        gpu = gpu_by_name(args.gpu)
        kpath = args.kernels or table_path(gpu.name, "kernels")
        if args.kernels or os.path.isfile(kpath):
            krows = read_table(kpath)
            refuse_dry_run(krows, kpath)
            print("\n".join(kernel_summary(krows, gpu)))
        spath = args.steps or table_path(gpu.name, args.table)
        if not args.steps and not os.path.isfile(spath):
            raise ConfigError(f"no step table of the {gpu.name} is shipped: time one on the GPU "
                              f"(bench/gpu_step_table.py --compile) and pass it with --steps")
        host = load_constants(HOST_BASIS)[0]
        srows = read_table(spath)
        refuse_dry_run(srows, spath)
        fit = StepTableFit(srows, gpu, host, source=spath)
        if not fit.rows:
            raise ConfigError(f"{spath}: no step rows (bench/gpu_step_table.py writes them)")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c, rms0, rms1 = fit.fit()
    # a constant left on a bound was not told apart by the table (m_half's floor 1 is "no
    # small-batch penalty", what the H200's GEMMs show, not a failure)
    pinned = [k for k in FREE if k != "m_half"
              and any(math.isclose(getattr(c, k), b, rel_tol=1e-3) for b in BOUNDS[k])]
    print(f"\nstep table ({os.path.basename(spath)}, {len(fit.rows)} steps of {len(fit.models)} models"
          + (f"; {fit.failed} shapes the GPU script could not time" if fit.failed else "")
          + f"): RMS of log(predicted / measured) {rms0:.4f} with the {HOST_BASIS}'s GPU constants -> {rms1:.4f}")
    for k in FREE:
        print(f"  {k:10s} {getattr(host, k):12.6g} -> {getattr(c, k):12.6g}")
    for k in pinned:
        print(f"  warning: {k} ended on its bound {getattr(c, k):.6g}: the table cannot tell it from the others "
              f"(fewer models or shapes than it needs); the shipped H200 fit used 9 dense models")
    moe = {r["model"] for r in fit.rows if fit.models[(r["model"], r["tp"])].moe_layers}
    prefixed = [r for r in fit.rows if r.get("P", 0) and r["model"] not in moe]
    if prefixed:
        pred = fit.predict(c)
        err = [p / (r["us"] * 1e-6) - 1 for p, r in zip(pred, fit.rows) if r.get("P", 0) and r["model"] not in moe]
        print(f"  chunks after a cached prefix ({len(err)} steps, not fitted: torch's FlashAttention 2 under a "
              f"lower-right mask): the profile {100 * statistics.mean(err):+.1f}% on average "
              f"({100 * min(err):+.1f} to {100 * max(err):+.1f}%)")
    for m, (n, mean, mx) in fit.errors(c, keep=lambda r: not r.get("P", 0)).items():
        print(f"  {m:32s} {n:3d} steps: mean |error| {mean:5.1f}%, max {mx:5.1f}%"
              + (f" (not fitted: {', '.join(MOE_FROM_HOST)} the {HOST_BASIS}'s)" if m in moe else ""))
    tpath = table_path(gpu.name, "moe_triton")
    if not args.steps and os.path.isfile(tpath):
        tri = StepTableFit(read_table(tpath), gpu, host, source=tpath)
        ratio = [(p / (r["us"] * 1e-6) - 1, r) for p, r in zip(tri.predict(c), tri.rows)]
        err = [e for e, r in ratio if not r.get("P", 0)]
        dec = [e for e, r in ratio if not r["n"]]
        print(f"  the same MoE steps with fused Triton experts ({len(err)} steps, {os.path.basename(tpath)}): the "
              f"profile {100 * statistics.mean(err):+.1f}% on average, decode {100 * min(dec):+.1f} to "
              f"{100 * max(dec):+.1f}%")
    if args.cv:
        print("\nleave-one-model-out (fitted on the other dense models, scored on the one left out):")
        for m in sorted({r["model"] for r in fit.rows} - moe):
            cm, _, _ = fit.fit(keep=lambda r, m=m: r["model"] != m)
            n, mean, mx = fit.errors(cm, keep=lambda r, m=m: r["model"] == m and not r.get("P", 0))[m]
            print(f"  {m:32s} mean |error| {mean:5.1f}%, max {mx:5.1f}%")
    kernels_only = replace(host, **{k: getattr(c, k) for k in FREE})
    if any(r[0] == gpu.name for r in PUBLISHED_STEPS):
        profile, overhead = with_step_overhead(kernels_only, gpu.name)
        how = "solved on the published measurement"
        print(f"\nthe published {gpu.name} measurement pins what a real step adds to its kernels: t_layer "
              f"{c.t_layer * 1e6:.1f} -> {profile.t_layer * 1e6:.1f} us, {overhead * 1e3:.2f} ms a step of "
              f"Llama-3.1-8B's 32 layers (the {HOST_BASIS}'s profile, fitted on real runs, has "
              f"{host.t_layer * 1e6:.1f} us)")
    else:
        per_layer = measured_overhead_per_layer()
        profile = replace(kernels_only, t_layer=float(f"{c.t_layer + per_layer:.6g}"))
        how = f"plus the H200's {per_layer * 1e6:.1f} us a layer outside the kernels"
        print(f"\nno published {gpu.name} measurement fitted on: t_layer {c.t_layer * 1e6:.1f} us of kernels {how} "
              f"-> {profile.t_layer * 1e6:.1f} us")
    if gpu.name == "H200":
        print("held out, the H100's published measurement, replayed with the profile at the H100's peaks:")
        print("\n".join(held_out(profile)))
    if args.dry:
        return 0
    from .published import write_profile
    out = args.out or os.path.join(PROFILE_DIR, f"{gpu.name.lower()}.json")
    try:
        write_profile(out, gpu.name, profile,
                      method=("python -m generation.engine.perf.fit_kernels "
                              + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
                      basis=f"{', '.join(FREE)} fitted to {os.path.basename(spath)} (kernels timed on the GPU); "
                            f"t_layer then {how} (the step's work outside the kernels); the host-side "
                            f"constants the {HOST_BASIS} profile's",
                      residual_rms={"before": round(rms0, 4), "after": round(rms1, 4)},
                      kernel_t_layer=float(f"{c.t_layer:.6g}"))
    except OSError as e:
        print(f"error: --out {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    if args.out:
        print(f"serve with: python app.py MODEL --latency-calculator step --gpu {gpu.name} --step-time-profile {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
