"""Leave-one-model-out cross-validation of the H100 profile's fit: how well the step model
generalises to a model it was not fitted on.

    python bench/engine_fidelity_cv.py                     # every model of the training runs
    python bench/engine_fidelity_cv.py --models Llama-2-7b-hf,Mixtral-8x7B-v0.1 --iterations 3

For each model: refit the H100 profile (``python -m generation.engine.perf.fit``, started from
the model's defaults, not the shipped profile, with ``t_jit`` from ``fit --jit`` on the other
models' traced MoE runs, ``--iterations`` least-squares iterations: about
10 minutes a model on 2 cores) on the training runs of every *other* model,
then replay the held-out model's runs (training runs and any main38 runs of that model) in full
with that profile and print their MAPE next to the same runs under the shipped profile (fitted
with them).  The fits run one after another; each prints its own figures to stderr.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from generation.engine.perf import groundtruth as gt          # noqa: E402
from generation.engine.perf.fit import training_runs          # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_fidelity as bench                               # noqa: E402

SHOWN = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p90", "ttft_p99")


def mape(results: dict) -> dict:
    by: dict = defaultdict(list)
    for res in results.values():
        for r in res["records"]:
            by[r["metric"]].append(r["ape"])
    return {m: bench.mean(by[m]) for m in SHOWN}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="comma-separated model names (the part after the slash)")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--window", action="store_true", help="fit as the shipped H100 profile was last fitted: "
                   "a traced run's partial replay against the same requests' measurements (fit --window)")
    args = p.parse_args(argv)
    exps = gt.load_experiments()
    train = training_runs(exps, "H100")
    models = sorted({e["model"].split("/")[-1] for e in train})
    if args.models:
        models = [m for m in models if m in set(args.models.split(","))]
    rows = []
    for model in models:
        held = [e for e in exps if e["model"].split("/")[-1] == model and e["hardware"] == "H100"
                and (e in train or "main38" in e["groups"])]
        out = os.path.join(tempfile.gettempdir(), f"cv-{model}.json")
        start = os.path.join(tempfile.gettempdir(), "cv-start.json")
        with open(start, "w", encoding="utf-8") as fh:
            fh.write('{"constants": {}}')
        exclude = ",".join(e["name"] for e in train if e["model"].split("/")[-1] == model)
        # the MoE compile stall first, on the other models' traced MoE runs (none: it stays 0)
        subprocess.run([sys.executable, "-m", "generation.engine.perf.fit", "--gpu", "H100", "--jit", "--exclude",
                        exclude, "--start", start, "--out", start], cwd=ROOT, check=True, stdout=sys.stderr)
        cmd = [sys.executable, "-m", "generation.engine.perf.fit", "--gpu", "H100", "--exclude", exclude,
               "--iterations", str(args.iterations), "--start", start, "--scale", str(args.scale), "--jobs", str(args.jobs), "--out", out]
        if args.window:
            cmd.append("--window")
        print(f"== {model}: fitting without its {len(exclude.split(','))} runs", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
        unseen = mape(bench.run(held, jobs=args.jobs, profile=out))
        seen = mape(bench.run(held, jobs=args.jobs))
        rows.append((model, len(held), unseen, seen))
    print(f"\nLeave-one-model-out, H100 (mean MAPE %, the held-out model's runs; fitted without / with it)")
    print(f"{'model':34s}{'runs':>5s}" + "".join(f"{m:>20s}" for m in SHOWN))
    for model, n, unseen, seen in rows:
        print(f"{model[:34]:34s}{n:5d}" + "".join(f"{unseen[m]:9.1f} / {seen[m]:6.1f}   " for m in SHOWN))
    allu = {m: bench.mean([r[2][m] for r in rows]) for m in SHOWN}
    alls = {m: bench.mean([r[3][m] for r in rows]) for m in SHOWN}
    print(f"{'mean over models':39s}" + "".join(f"{allu[m]:9.1f} / {alls[m]:6.1f}   " for m in SHOWN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
