"""Fit a GPU's performance profile to real vLLM runs and write it: the step model's constants
come from here, not from hand tuning.

    python -m generation.engine.perf.fit --gpu H100            # refit the shipped H100 profile
    python -m generation.engine.perf.fit --gpu H100 --data DIR --out my-h100.json

``--data DIR`` holds measurements in the harness's format (``bench/sim_to_real/``, the default:
``experiments.json`` with each run's settings, workload and measured E2E / TTFT / ITL per stage,
``model_configs/``, optional per-request ``traces/``), so a user fits a profile to their own
runs with the same script, then serves with ``--step-time-profile my-h100.json``.

Method: every training run of the GPU (``--set``, default the 16 traced runs and the 13 the
BLIS project trained on, less the runs whose server was overloaded past the client's timeout)
is replayed in virtual time (:func:`~.groundtruth.simulate`, the first ``--scale`` of each
stage); the residuals are ``log(predicted / measured)`` of each stage's E2E mean and p90, TTFT
mean and p90, and ITL mean (measured as the data measured it, ``itl_mean_counted``; with
``--window`` a traced run's measured over the same requests, :func:`~.groundtruth.windowed_actual`:
a stage's first minutes hold its MoE compile stalls, so they are not the whole stage's average);
``scipy.optimize.least_squares`` (trust-region, soft-L1 loss) moves the free constants in log
space.  The fit prints the constants, the residuals' RMS before and after, and each run's
errors, and writes the profile as JSON with the data it was fitted on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from multiprocessing import Pool

from . import groundtruth as gt
from .published import PUBLISHED_STEPS, published_value, write_profile  # noqa: F401 (the fit's interface)
from .step_model import BASIS_GPU, GENERIC_PROFILE, PROFILE_DIR, PerfConstants, load_constants

# The constants a fit moves (the rest keep their priors: the frontend's CPU costs, the eager and
# prefill-attention terms cannot be separated from the others at these loads and settings).
# cpu_overlap, the shipped form of async scheduling (a profile with it 0 uses cpu_hidden: free
# that one with --free to fit the earlier form)
FREE = ("eta_w", "eta_kv", "eta_f", "eta_moe", "overlap", "m_half", "cpu_overlap", "t0", "t_seq", "t_vocab", "t_layer",
        "t_moe", "t_fp8", "t_ar", "fe_in")
RESIDUAL_METRICS = ("e2e_mean", "e2e_p90", "ttft_mean", "ttft_p90", "itl_mean_counted")
OVERLOADED = "reasoning"        # default16's 4 rps reasoning runs: queues grew past the 300 s timeout


def training_runs(exps: list[dict], gpu: str, which: str = "train") -> list[dict]:
    """The runs of ``gpu`` in the training set: ``default16`` and ``trainval`` less the
    overloaded default16 reasoning runs (``train``), or every run of the GPU (``all``; a
    user's data whose experiments carry no ``groups`` is all training)."""
    if not any(e.get("groups") for e in exps):
        which = "all"
    out = []
    for e in exps:
        if gt.GPU_NAMES.get(e["hardware"], e["hardware"]).lower() != gpu.lower():
            continue
        groups = set(e["groups"])
        if which == "all":
            out.append(e)
        elif groups & {"default16", "trainval"}:
            if "default16" in groups and e["workload"] == OVERLOADED and "trainval" not in groups:
                continue
            out.append(e)
    return out


_CACHE: dict = {}


def _residuals_one(args):
    name, values, scale, path, windowed = args
    exps = _CACHE.get(path)
    if exps is None:
        exps = _CACHE[path] = {e["name"]: e for e in gt.load_experiments(path)}
    exp = exps[name]
    window = _CACHE.get((path, name, scale), False) if windowed else None
    if window is False:         # --window: a partial replay scored against the same requests' measurements
        window = _CACHE[(path, name, scale)] = gt.windowed_actual(exp, scale, path)
    if window:
        exp = dict(exp, actual=window)
    c = replace(PerfConstants(), **values)
    sim = gt.simulate(exp, c, duration_scale=scale, path=path)
    recs = {(r["stage"], r["metric"]): r for r in gt.score(exp, gt.predicted(exp, sim))}
    out = []
    # one residual per measured (stage, metric), always: a stage whose every request timed out
    # has no prediction and takes the penalty (the least-squares vector keeps its length)
    for stage, act in exp["actual"].items():
        for m in RESIDUAL_METRICS:
            if (act.get("itl_mean") if m == "itl_mean_counted" else act.get(m)) is None:
                continue
            r = recs.get((stage, m))
            p = r["predicted"] if r else float("nan")
            out.append((name, stage, m, math.log(max(p, 1e-9) / r["actual"]) if p == p else 5.0))
    return out


_POOLS: list = []                      # the Objective's worker pools, terminated on the way out


class Objective:
    """Residual vector of the free constants (log space) over the training runs."""

    def __init__(self, runs, base: PerfConstants, scale: float, path, jobs: int, windowed: bool = False):
        self.runs, self.base, self.scale, self.path, self.windowed = runs, base, scale, path, windowed
        self.pool = Pool(jobs) if jobs > 1 else None
        if self.pool is not None:
            _POOLS.append(self.pool)        # closed by main(), also when a run's replay fails
        self.calls = 0
        self.last = []
        self.best = (float("inf"), None)

    def values(self, x) -> dict:
        v = {k: getattr(self.base, k) for k in PerfConstants.__dataclass_fields__}
        for k, xi in zip(FREE, x):
            v[k] = math.exp(xi)
        v["fe_out"] = v["fe_in"] * self.base.fe_out / self.base.fe_in      # the split is kept
        return v

    def __call__(self, x):
        import numpy as np
        values = self.values(x)
        work = [(e["name"], values, self.scale, self.path, self.windowed) for e in self.runs]
        parts = (self.pool.map(_residuals_one, work) if self.pool else [_residuals_one(w) for w in work])
        self.last = [r for p in parts for r in p]
        self.calls += 1
        res = np.array([r[3] for r in self.last])
        rms = float(np.sqrt(np.mean(res ** 2)))
        if rms < self.best[0]:
            self.best = (rms, list(x))
        print(f"  evaluation {self.calls}: RMS {rms:.4f}", file=sys.stderr, flush=True)
        return res


# A published point with the default batch limits (docs/engine-model.md §2): Llama-3.1-8B in BF16 on
# an 80 GB card, max_num_batched_tokens 8192, max_num_seqs 1024: about 415-440k tokens (the middle
# taken, 26,700 blocks of 16).
PUBLISHED_KV = [{"name": "engine-model.md §2 Llama-3.1-8B", "model_config": "llama-3.1-8b-instruct",
                 "hardware": "H100", "tp": 1, "max_num_batched_tokens": 8192, "max_num_seqs": 1024,
                 "gpu_mem_util": 0.9, "precision": "BF16", "kv_blocks": 26700}]


def fit_memory(path: str | None = None) -> dict:
    """Least squares of vLLM's start-up memory profile besides the weights (the GiB the logged
    KV block counts leave: ``memory x utilization - weights - blocks x block bytes``) on
    ``[1, tp > 1, max_num_batched_tokens x hidden, max_num_seqs x vocab / tp]`` over every run
    with a logged count (FP8 runs left out: their checkpoints keep parts in BF16 that the
    weight count does not see) and the published point above.  Prints the fit; returns the
    constants of :func:`generation.engine.hardware.profile_overhead`."""
    import numpy as np
    from .hardware import GiB, gpu_by_name, kv_bytes_per_token, weight_bytes
    from .model_arch import load_hf_config
    rows, seen = [], set()
    for e in gt.load_experiments(path) + PUBLISHED_KV:
        if not e.get("kv_blocks") or e.get("precision") == "FP8":
            continue
        key = (e["model_config"], e["tp"], e["max_num_batched_tokens"], e["max_num_seqs"])
        if key in seen:
            continue
        seen.add(key)
        arch = load_hf_config(gt.model_config_path(e, path))
        gpu = gpu_by_name(gt.GPU_NAMES.get(e["hardware"], e["hardware"]))
        util = e.get("gpu_mem_util") or 0.9
        other = (gpu.memory * util - weight_bytes(arch) / e["tp"]
                 - e["kv_blocks"] * 16 * kv_bytes_per_token(arch, "auto", e["tp"]))
        rows.append((e["name"], [GiB, GiB * (e["tp"] > 1), e["max_num_batched_tokens"] * arch.hidden_size,
                                 e["max_num_seqs"] * arch.vocab_size / e["tp"]], other))
    x = np.array([r[1] for r in rows], float)
    y = np.array([r[2] for r in rows], float)
    scale = x.max(axis=0)
    if len(rows) < x.shape[1] or not scale.all():
        # a folder of TP-1 runs left the TP column all zero: NaNs, LAPACK's "DLASCL parameter
        # number 4 had an illegal value" lines and "SVD did not converge"
        raise ValueError(f"--memory: {len(rows)} runs with a logged kv_blocks (BF16, the published point "
                         f"included) cannot fit the 4 constants: it needs at least 4, some at TP > 1")
    coef = np.linalg.lstsq(x / scale, y, rcond=None)[0] / scale
    pred = x @ coef
    print(f"memory profile fit on {len(rows)} runs: RMS error {np.sqrt(np.mean((pred - y) ** 2)) / GiB:.3f} GiB")
    for (name, _, other), p in zip(rows, pred):
        print(f"  {name[:56]:56s} measured {other / GiB:6.2f} GiB  model {p / GiB:6.2f} GiB")
    out = {"NON_TORCH_TP1": coef[0], "NON_TORCH_TP_EXTRA": coef[1], "ACTIVATION_BYTES": coef[2],
           "LOGITS_BYTES": coef[3]}
    print("  " + ", ".join(f"{k} = {v:.4g}" + (" GiB" if k.startswith("NON") else " B") for k, v in out.items()))
    return out


# GPUs whose profile is the A100-40GB's (the same chip; only the HBM differs, a peak of its own)
SAME_CHIP = {"A100-40GB": ("A100-80GB",)}


def with_fa2_share(base: PerfConstants) -> PerfConstants:
    """``base`` with ``eta_kv_fa2`` from the H200's kernel table (:func:`.fit_kernels.fa2_decode_share`:
    FlashAttention 2's decode against cuDNN's, which stands in for the FlashAttention 3 of the
    H100 runs the constants were fitted on).  It applies on GPUs where vLLM runs FA2 (A100, L40S).
    Prints it."""
    from . import fit_kernels
    path = fit_kernels.table_path("H200", "kernels")
    share, n = fit_kernels.fa2_decode_share(fit_kernels.read_table(path))
    print(f"eta_kv_fa2 = {share:.4g}: FlashAttention 2's decode attention against cuDNN's over the {n} shapes "
          f"of {os.path.basename(path)} timed both ways (on GPUs where vLLM runs FA2)")
    return replace(base, eta_kv_fa2=float(f"{share:.6g}"))


def fit_published(gpu: str, base: PerfConstants) -> PerfConstants:
    """The profile of a GPU without training runs: the H100's constants, with the weight-read
    efficiency ``eta_w`` solved (Brent) so that the replay reproduces the GPU's published
    measurement exactly (decode is bound by reading the weights: the one constant such a
    measurement pins down), after :func:`with_fa2_share`.  Prints the fit."""
    from scipy.optimize import brentq
    base = with_fa2_share(base)
    row = next(r for r in PUBLISHED_STEPS if r[0].lower() == gpu.lower())
    _, batch, prompt, output, what, value = row
    eta = brentq(lambda e: published_value(row, replace(base, eta_w=e)) - value, 0.3, 1.5, xtol=1e-5)
    print(f"{row[0]}: eta_w {base.eta_w:.4g} -> {eta:.4g} reproduces the published {value} ms ({what}, batch "
          f"{batch}, {prompt} in / {output} out); the other constants are the H100's")
    return replace(base, eta_w=float(f"{eta:.6g}"))


def fit_generic() -> PerfConstants:
    """The profile of a GPU with neither training runs nor a published point (L40S, B200, MI300X,
    ...): the H100's constants with ``eta_w`` the median of the GPUs whose profile was fitted to
    measurements of their own (H100, the A100 chip, H200; the A100-80GB shares the A100-40GB's
    value and counts once).  A GPU never measured then sits in the middle of the measured ones,
    not at the most efficient.  Prints the values it took the median of."""
    import statistics
    base = load_constants(BASIS_GPU)[0]
    etas = {}
    for gpu in (BASIS_GPU, *(r[0] for r in PUBLISHED_STEPS)):
        etas[gpu] = load_constants(gpu)[0].eta_w
    eta = statistics.median(etas.values())
    print("generic profile: eta_w = median of " + ", ".join(f"{g} {v:.4g}" for g, v in etas.items())
          + f" = {eta:.4g}; the other constants are the {BASIS_GPU}'s")
    return with_fa2_share(replace(base, eta_w=eta))


JIT_GRID = tuple(round(0.5 + 0.05 * i, 2) for i in range(21))     # t_jit candidates, s: 0.5 .. 1.5
# Replays per run and candidate, each with its own seed (the prompts' order, hence which steps
# run which token counts and kernel variants): one replay's first-100 mean jumps from one grid
# value to the next (0.0184 at 0.95 s, 0.1739 at 1.0, 0.0153 at 1.05); their mean is smoother.
JIT_SEEDS = 5


JIT_OBJECTIVES = ("first-ttft", "stall-gaps", "stall-total")
STALL_WINDOW_S = 20.0             # stall-gaps: the run's first seconds, where the compiles fall
STALL_MIN_GAP_S = 0.6             # stall-gaps: a pause between token events this long is a compile


def stall_gaps(rows) -> list[float]:
    """The pauses (s) longer than :data:`STALL_MIN_GAP_S` between consecutive token events (every
    request's first and last token, the trace's only per-token times) in the first
    :data:`STALL_WINDOW_S` seconds of ``rows``, ``(arrival, ttft, e2e)`` seconds from the run's
    start: on a MoE server these are its compile stalls, each a kernel variant's compile plus the
    step it held."""
    ev = sorted(t for a, ttft, e2e in rows if a < STALL_WINDOW_S for t in (a + ttft, a + e2e))
    ev = [t for t in ev if t < STALL_WINDOW_S]
    return [b - a for a, b in zip(ev, ev[1:]) if b - a > STALL_MIN_GAP_S]


def fit_jit(gpu: str, base: PerfConstants, path: str | None = None, grid=JIT_GRID, exclude=(),
            objective: str = "first-ttft", seeds: int = JIT_SEEDS) -> PerfConstants:
    """``t_jit``, the stall of compiling a fused-MoE kernel variant at first use
    (:class:`~.step_model.MoeJit`), by a grid search on the GPU's traced MoE training runs, whose
    first seconds (the first cycle of prompts: cold, their prefills run eagerly) is where the
    compiles fall.  ``objective``:

    - ``first-ttft``: the mean TTFT of a run's first ``PROMPT_GROUPS x PROMPTS_PER_GROUP``
      requests, which the stalls' count and length together set;
    - ``stall-gaps``: the median length of the stalls themselves (:func:`stall_gaps`), the
      compile's own duration, whatever the count the compile rule gives;
    - ``stall-total``: their sum, the time the first seconds lose to compiles, whatever the
      count and length that make it up: it sets how many arrivals the stalls hold, and so
      whether a first stage's p99 lands among them.

    The grid value with the least sum of squared log ratios (the mean over ``seeds``, default
    :data:`JIT_SEEDS`, seeded replays / the measured value) wins: a stall queues arrivals into
    larger steps that may select yet another variant, so the response to ``t_jit`` is not smooth
    enough for a gradient.  Raises ValueError for another objective.  Prints the table."""
    if objective not in JIT_OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(JIT_OBJECTIVES)}, not {objective!r}")
    exps = gt.load_experiments(path)
    runs = [e for e in training_runs(exps, gpu) if e.get("trace") and "default16" in e["groups"]
            and e["name"] not in set(exclude)]
    first = gt.PROMPT_GROUPS * gt.PROMPTS_PER_GROUP
    measured = {}
    for e in runs:
        _, _, model = gt.build(e, base, path)
        if not model.moe_layers:
            continue
        if objective == "first-ttft":
            rows = gt.trace_rows(e, path, first)
            measured[e["name"]] = sum(float(r["ttft_s"]) for r in rows) / len(rows)
        else:
            gaps = stall_gaps([r[1:4] for r in gt.trace_times(e, path)])
            if gaps:
                measured[e["name"]] = statistics.median(gaps) if objective == "stall-gaps" else sum(gaps)
    if not measured:
        print(f"no traced MoE training run of {gpu}: t_jit kept at {base.t_jit}")
        return base
    best = (float("inf"), base.t_jit)
    print(f"t_jit on {len(measured)} traced MoE runs, " + (
        f"mean TTFT of the first {first} requests (ms):" if objective == "first-ttft" else
        f"{'median' if objective == 'stall-gaps' else 'total'} stall in the first {STALL_WINDOW_S:.0f} s "
        f"(pauses over {1000 * STALL_MIN_GAP_S:.0f} ms between token events, ms):"))
    for tj in grid:
        c = replace(base, t_jit=tj)
        loss, cells = 0.0, []
        for name, real in measured.items():
            e = next(x for x in exps if x["name"] == name)
            if objective == "first-ttft":
                scale = min(1.0, 1.5 * first / e["stages"][0]["rate"] / e["stages"][0]["duration"])
            else:
                scale = min(1.0, 1.5 * STALL_WINDOW_S / e["stages"][0]["duration"])
            values = []
            for seed in range(seeds):
                sim = gt.simulate(e, c, seed=seed, duration_scale=scale, path=path)
                o = sorted(sim.outcomes, key=lambda x: x.arrival)
                if objective == "first-ttft":
                    o = o[:first]
                    values.append(sum(x.ttft for x in o) / len(o))
                else:
                    gaps = stall_gaps([(x.arrival - o[0].arrival, x.ttft, x.e2e) for x in o if not x.failed])
                    if gaps:
                        values.append(statistics.median(gaps) if objective == "stall-gaps" else sum(gaps))
            if not values:                   # no stall at all in the replays: as bad as can be
                loss, cells = float("inf"), cells + [f"    -/{1000 * real:.0f}"]
                continue
            pred = sum(values) / len(values)
            loss += math.log(pred / real) ** 2
            cells.append(f"{1000 * pred:5.0f}/{1000 * real:.0f}")
        print(f"  t_jit {tj:5.2f} s: " + "  ".join(cells) + f"   sum of squared log ratios {loss:.4f}")
        if loss < best[0]:
            best = (loss, tj)
    print(f"t_jit {base.t_jit} -> {best[1]} s")
    return replace(base, t_jit=best[1])


PAUSE_RATES = (0.05, 0.1, 0.2, 0.3)          # pauses per second (EnginePauses)
PAUSE_LENGTHS = (0.015, 0.025, 0.035)        # seconds each
PAUSE_SEEDS = 3                              # seeded replays per run and candidate (their median)


def _p99s_one(args):
    """One seeded full replay of a run: its stages' TTFT p99 (ms)."""
    e, c, seed, path = args
    pred = gt.predicted(e, gt.simulate(e, c, seed=seed, path=path))
    return {k: v.get("ttft_p99") for k, v in pred.items() if k != "-1"}


def fit_pauses(gpu: str, base: PerfConstants, path: str | None = None, rates=PAUSE_RATES,
               lengths=PAUSE_LENGTHS, exclude=(), jobs: int = 1) -> PerfConstants:
    """``pause_rate`` and ``t_pause``, the engine's pauses (:class:`~.step_model.EnginePauses`),
    by a grid search on the GPU's traced training runs (whose own arrivals leave the pauses as the
    one difference in the tail): each stage's TTFT p99, the median of
    :data:`PAUSE_SEEDS` seeded full replays, against the measured one; the candidate (no pauses
    included) with the least sum of squared log ratios wins.  A p99 is a stage's top 1%, and
    whether pauses reach that many requests is a knife edge, so the response is not smooth
    enough for a gradient; the means hardly move (the engine pauses well under 1% of the time).
    On every training run instead (the untraced ones against one draw of their arrivals, with
    other tails in them: Llama-4-Scout's first stages) the loss keeps falling toward fewer and
    longer pauses past the grid's edge (0.1 / s x 60 ms), which the per-request traces do not
    show (their late first tokens are 17-44 ms late on average).
    Prints the table."""
    from multiprocessing import Pool
    exps = gt.load_experiments(path)
    runs = [e for e in training_runs(exps, gpu) if e.get("trace") and "default16" in e["groups"]
            and e["name"] not in set(exclude)]
    if not runs:
        print(f"no traced training run of {gpu}: the pauses kept at {base.pause_rate} / s, {base.t_pause} s")
        return base
    cands = [(0.0, 0.0)] + [(r, t) for r in rates for t in lengths]
    tasks = [(e, replace(base, pause_rate=r, t_pause=t), seed, path)
             for r, t in cands for e in runs for seed in range(PAUSE_SEEDS)]
    with Pool(max(1, jobs)) as pool:
        got = pool.map(_p99s_one, tasks, chunksize=1)
    print(f"pauses on {len(runs)} traced runs, each stage's TTFT p99 (median of {PAUSE_SEEDS} replays), "
          f"sum of squared log ratios to the measured:")
    best, i = (float("inf"), 0.0, 0.0), 0
    for r, t in cands:
        loss = 0.0
        for e in runs:
            sims, i = got[i:i + PAUSE_SEEDS], i + PAUSE_SEEDS
            for stage, act in e["actual"].items():
                vals = [s.get(stage) for s in sims if s.get(stage)]
                if stage != "-1" and vals and act.get("ttft_p99"):
                    loss += math.log(statistics.median(vals) / act["ttft_p99"]) ** 2
        print(f"  {r:4.2f} / s x {1000 * t:3.0f} ms: {loss:.4f}")
        if loss < best[0]:
            best = (loss, r, t)
    print(f"pause_rate {base.pause_rate} -> {best[1]} / s, t_pause {base.t_pause} -> {best[2]} s")
    return replace(base, pause_rate=best[1], t_pause=best[2])


def main(argv=None) -> int:
    """The command line (module docstring).  Exit status 0, or 2 with one ``error:`` line for a
    bad flag, data folder or profile."""
    from generation.config.values import error_line
    try:
        return _main(argv)
    except (OSError, ValueError, KeyError) as e:         # ConfigError is a ValueError
        print(error_line(e) if not isinstance(e, KeyError) else f"error: missing field {e}", file=sys.stderr)
        return 2
    finally:
        # a pool left to the interpreter's shutdown printed "Exception ignored in Pool.__del__ ...
        # OSError: [Errno 9] Bad file descriptor" after the error line, now and then
        while _POOLS:
            pool = _POOLS.pop()
            pool.terminate()
            pool.join()


def _main(argv=None) -> int:
    global FREE
    p = argparse.ArgumentParser(prog="python -m generation.engine.perf.fit", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", default="H100")
    p.add_argument("--data", default=None, help="measurements folder (default: bench/sim_to_real)")
    p.add_argument("--set", default="train", choices=("train", "all"))
    p.add_argument("--exclude", default="", help="comma-separated run names left out (cross-validation)")
    p.add_argument("--only", default="", help="fit on the runs whose name holds this text (e.g. a model family)")
    p.add_argument("--free", default=",".join(FREE), help="the constants to move (default: all of them)")
    p.add_argument("--scale", type=float, default=0.35, help="fraction of each stage replayed per evaluation")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--iterations", type=int, default=6,
                   help="least-squares iterations (each costs an evaluation per free constant for the Jacobian, "
                        "plus one or more trial steps)")
    p.add_argument("--out", default=None, help="profile to write (default: the shipped profiles/<gpu>.json)")
    p.add_argument("--start", default=None, help="profile to start from (default: the GPU's current one)")
    p.add_argument("--window", action="store_true",
                   help="score a traced run's partial replay against the same requests' measurements (not the "
                        "whole stage's); the shipped H100 profile's last fits used it (its method list; README: "
                        "Fidelity)")
    p.add_argument("--memory", action="store_true", help="fit the memory profile's constants instead")
    p.add_argument("--jit", action="store_true",
                   help="fit t_jit alone (MoE kernels' compile stalls) on the GPU's traced MoE runs, keep the rest")
    p.add_argument("--pauses", action="store_true",
                   help="fit pause_rate and t_pause alone (the engine's pauses) on the GPU's traced runs' "
                        "TTFT p99, keep the rest")
    p.add_argument("--jit-objective", default="first-ttft", choices=JIT_OBJECTIVES,
                   help="with --jit: what the replays match, the mean TTFT of the first cycle of prompts "
                        "(first-ttft) or the median length of the stalls themselves (stall-gaps)")
    p.add_argument("--generic", action="store_true",
                   help="write the profile of GPUs without one of their own (profiles/generic.json)")
    args = p.parse_args(argv)
    if not 0 < args.scale <= 1:
        raise ValueError(f"--scale must be in (0, 1] (a fraction of each stage), got {args.scale}")
    if args.iterations < 1:
        raise ValueError(f"--iterations must be at least 1, got {args.iterations}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.memory:
        fit_memory(args.data)
        return 0
    if args.jit or args.pauses:
        shipped = os.path.join(PROFILE_DIR, f"{args.gpu.lower()}.json")
        out = args.out or shipped
        start = args.start or (out if os.path.isfile(out) else shipped)     # its history goes on
        doc = {}
        if os.path.isfile(start):
            with open(start, encoding="utf-8") as fh:
                doc = json.load(fh)
        base = load_constants(args.gpu, start if os.path.isfile(start) else None)[0]
        exclude = list(filter(None, args.exclude.split(",")))
        c = (fit_jit(args.gpu, base, args.data, exclude=exclude, objective=args.jit_objective) if args.jit
             else fit_pauses(args.gpu, base, args.data, exclude=exclude, jobs=args.jobs))
        doc.update(gpu=args.gpu, method=[*doc.get("method", []), "python -m generation.engine.perf.fit "
                                        + " ".join(argv if argv is not None else sys.argv[1:])],
                   constants={k: float(f"{v:.6g}") for k, v in c.to_dict().items()})
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"wrote {out}")
        return 0
    if args.generic:
        write_profile(args.out or os.path.join(PROFILE_DIR, f"{GENERIC_PROFILE}.json"), GENERIC_PROFILE, fit_generic(),
                      method="python -m generation.engine.perf.fit --generic",
                      basis=f"{BASIS_GPU} profile; eta_w the median of the fitted GPUs'")
        return 0
    from . import fit_kernels
    own = args.data is not None and training_runs(gt.load_experiments(args.data), args.gpu, "all")
    kernel_table = os.path.isfile(fit_kernels.table_path(args.gpu, "compiled"))
    published = any(r[0].lower() == args.gpu.lower() for r in PUBLISHED_STEPS)
    if args.data is not None and not (own or kernel_table or published):
        same = next((k for k, sibs in SAME_CHIP.items() if args.gpu.lower() in (x.lower() for x in sibs)), None)
        raise ValueError(f"--gpu {args.gpu}: no run of it in {gt.data_dir(args.data)} (its experiments' hardware)"
                         + (f"; its profile is the {same}'s: --gpu {same}" if same else ""))
    # the user's own runs of the GPU go to the least-squares fit below; else its kernel table or
    # its published point
    if not own and kernel_table:
        if args.data is not None:
            print(f"note: --data has no run of {args.gpu}: its efficiencies come from its kernel table", file=sys.stderr)
        return fit_kernels.main(["--gpu", args.gpu] + (["--out", args.out] if args.out else []))
    if not own and published:
        if args.data is not None:
            print(f"note: --data has no run of {args.gpu}: its profile comes from its published point",
                  file=sys.stderr)
        base = load_constants("H100")[0]
        c = fit_published(args.gpu, base)
        method = "python -m generation.engine.perf.fit --gpu " + args.gpu
        # the shipped profiles of the same chip too, unless --out names the one file to write
        for name in (args.gpu,) + (() if args.out else SAME_CHIP.get(args.gpu, ())):
            out = args.out if (args.out and name == args.gpu) else os.path.join(PROFILE_DIR, f"{name.lower()}.json")
            write_profile(out, name, c, method=method, basis="H100 profile; eta_w from docs/engine-model.md §4")
        return 0
    import numpy as np
    from scipy.optimize import least_squares
    exps = gt.load_experiments(args.data)
    skip = set(filter(None, args.exclude.split(",")))
    runs = [e for e in training_runs(exps, args.gpu, args.set) if e["name"] not in skip and args.only in e["name"]]
    FREE = tuple(k for k in args.free.split(",") if k)
    if not FREE:
        raise ValueError("--free names no constant to move")
    absent = skip - {e["name"] for e in exps}
    if absent:                          # a typo left nothing out, silently
        raise ValueError(f"--exclude: no run named {', '.join(sorted(absent))}")
    unknown = set(FREE) - set(PerfConstants.__dataclass_fields__)
    if unknown:
        print(f"error: --free: unknown constants {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if not runs:
        print(f"error: no training runs for --gpu {args.gpu} in {gt.data_dir(args.data)}", file=sys.stderr)
        return 2
    if args.start:                      # its flag named, not the server's --step-time-profile
        from generation.config.values import ConfigError
        try:
            load_constants(args.gpu, args.start)
        except ConfigError as e:
            raise ValueError(f"--start: {e}") from None
    base = load_constants(args.gpu, args.start)[0] if args.start or os.path.isfile(
        os.path.join(PROFILE_DIR, f"{args.gpu.lower()}.json")) else PerfConstants()
    obj = Objective(runs, base, args.scale, args.data, args.jobs, args.window)
    x0 = np.array([math.log(max(getattr(base, k), 16.0) if k == "m_half" else max(getattr(base, k), 0.5)
                            if k == "cpu_hidden" else (getattr(base, k) or 3.0) if k == "cpu_overlap"
                            else getattr(base, k)) for k in FREE])     # cpu_overlap 0 (off) starts at 3
    t = time.perf_counter()
    print(f"{len(runs)} runs", flush=True)
    r0 = obj(x0)
    print(f"{len(runs)} runs, {len(r0)} residuals; start RMS {float(np.sqrt(np.mean(r0 ** 2))):.4f}", flush=True)
    lo = np.array([math.log(0.2 if k.startswith("eta") else 1.0 if k in ("overlap", "m_half", "cpu_overlap") else 0.01 if k == "cpu_hidden" else
                            1e-14 if k == "t_vocab" else 1e-7) for k in FREE])
    hi = np.array([math.log(1.0 if k.startswith("eta") or k == "cpu_hidden" else 50.0 if k in ("overlap", "cpu_overlap") else 4096.0 if k == "m_half" else
                            1e-8 if k == "t_vocab" else 0.05) for k in FREE])
    x0 = np.clip(x0, lo + 1e-6, hi - 1e-6)
    least_squares(obj, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=0.03,
                  max_nfev=args.iterations, x_scale=1.0)
    best = np.array(obj.best[1])
    r1 = obj(best)
    values = obj.values(best)
    rms0, rms1 = float(np.sqrt(np.mean(r0 ** 2))), float(np.sqrt(np.mean(r1 ** 2)))
    print(f"fit: {obj.calls} evaluations in {time.perf_counter() - t:.0f} s; residual RMS {rms0:.4f} -> {rms1:.4f} "
          f"(log ratio; 0.05 is ~5%)")
    for k in FREE:
        print(f"  {k:16s} {getattr(base, k):12.6g} -> {values[k]:12.6g}")
    per_run: dict = {}
    for name, stage, metric, res in obj.last:
        per_run.setdefault(name, []).append(abs(math.exp(res) - 1) * 100)
    for name in sorted(per_run):
        v = per_run[name]
        print(f"  {name[:56]:56s} mean |error| {sum(v) / len(v):6.1f}%  max {max(v):6.1f}%")
    out = args.out or os.path.join(PROFILE_DIR, f"{args.gpu.lower()}.json")
    previous = {}
    if args.out and os.path.isfile(args.out):
        with open(args.out, encoding="utf-8") as fh:
            previous = json.load(fh)
    fitted_on = sorted(set(previous.get("fitted_on", [])) | {e["name"] for e in runs}) if args.only else \
        sorted(e["name"] for e in runs)
    doc = {"gpu": args.gpu, "fitted_on": fitted_on,
           "method": ([previous["method"]] if args.only and isinstance(previous.get("method"), str) else
                      previous.get("method", []) if args.only else [])
                     + ["python -m generation.engine.perf.fit " + " ".join(argv if argv is not None else sys.argv[1:])],
           "residual_rms": {"before": round(rms0, 4), "after": round(rms1, 4)},
           "constants": {k: float(f"{v:.6g}") for k, v in values.items()}}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
