"""How far apart real vLLM runs at the same load land: the floor run-to-run variation puts
under any simulator's score on the sim-to-real benchmark.

    python bench/engine_replicates.py                 # main38's replicate groups
    python bench/engine_replicates.py --same-offload  # groups that also share the CPU KV tier

No replay: this reads the measurements alone (bench/sim_to_real/experiments.json).  Runs of the
same model, GPU, tensor-parallel size, precision, workload and stage rates form a group; within
it they differ only in flags that barely move the load (``max_num_batched_tokens``,
``gpu_memory_utilization``, the CPU KV tier).  A deterministic simulator gives one figure per
group record, and no single figure is near all of the group's measurements when they disagree.
For each (stage, metric) record the floor is the error of the best single figure under the peer
benchmark's score, the absolute percentage error: the ``1 / y``-weighted median of the measured
values ``y`` (Gneiting 2011, "Making and evaluating point forecasts": the optimal point forecast
under a relative error).  The floor on the benchmark's mean MAPE per metric is those errors summed
over every group record, divided by the number of records of that metric in the set.  It is a
floor only if the differing flags do not matter; where they do (a CPU KV tier, ``--same-offload``),
a simulator can do better.

Prints each group's measured values for the TTFT p99 (the record the spread is widest on) and the
floor per metric.

    python bench/engine_replicates.py --simulated [--seeds 10] [--jobs 2]   # ~5 minutes

``--simulated`` measures the same thing on the model's own runs, for every experiment that has
no per-request trace (the 28 of main38 that were run once as well): each is replayed with
``--seeds`` draws of its workload (arrivals and prompt lengths), and each draw in turn is scored
as if it were the measured run against the median of the others (engine_fidelity.py's
prediction).  That is what a simulator whose runs vary exactly as ours do would score against
one run of each experiment: the share of the error that one finite run's arrival draw puts
there.  The real server varies more (its compile stalls, its pauses, its other flags), so it is
a lower bound.  A traced experiment's replay uses the trace's own arrivals and lengths: no draw
to vary, and its records count as 0 here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BENCH, ".."))
sys.path.insert(0, BENCH)

from engine_fidelity import relative_median, select          # noqa: E402
from generation.engine.perf import groundtruth as gt          # noqa: E402

GROUP_KEYS = ("model", "hardware", "tp", "precision", "workload")


def best_constant(values: list[float]) -> tuple[float, float]:
    """``(p, cost)``: the single figure ``p`` minimizing ``sum |p - y| / y`` over the measured
    ``values`` (all > 0) and that sum, as a fraction (not per cent).  The sum is convex and
    piecewise linear in ``p`` with its kinks at the values, so the optimum is one of them."""
    best = relative_median(values)
    return best, sum(abs(best - y) / y for y in values)


def group_key(exp: dict, same_offload: bool = False) -> str:
    key = {k: exp[k] for k in GROUP_KEYS}
    key["rates"] = [float(s["rate"]) for s in exp["stages"]]
    if same_offload:
        key["cpu_offload"] = bool(exp.get("cpu_offload"))
    return json.dumps(key, sort_keys=True)


def replicate_floor(exps: list[dict], same_offload: bool = False) -> tuple[dict, list]:
    """``({metric: floor in per cent}, groups)``: the floor on the mean MAPE of ``exps`` (module
    docstring), and each group of two or more runs as ``(names, {(stage, metric): (values, best,
    cost)})``."""
    groups: dict = defaultdict(list)
    for e in exps:
        groups[group_key(e, same_offload)].append(e)
    records: dict = defaultdict(int)          # records of each metric in the whole set
    for e in exps:
        for act in e["actual"].values():
            for m in gt.METRICS:
                if act.get(m):
                    records[m] += 1
    cost: dict = defaultdict(float)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        per = {}
        for stage in members[0]["actual"]:
            for m in gt.METRICS:
                values = [e["actual"].get(stage, {}).get(m) for e in members]
                if any(not v for v in values):
                    continue
                best, c = best_constant(values)
                per[(stage, m)] = (values, best, c)
                cost[m] += c
        out.append(([e["name"] for e in members], per))
    return {m: 100.0 * cost[m] / n for m, n in records.items()}, out


def simulated_floor(exps: list[dict], seeds: int = 10, jobs: int = 1, scale: float = 1.0) -> tuple[dict, list]:
    """``({metric: floor in per cent}, [(experiment, stage, metric, mean APE %)])``: the
    ``--simulated`` floor (module docstring) over ``exps``; each untraced experiment replayed
    ``seeds`` (>= 3) times in ``jobs`` processes (``scale`` < 1: the first part of each stage,
    for tests).  Raises ValueError for fewer than 3 seeds."""
    from engine_fidelity import _run, median_prediction
    if seeds < 3:
        raise ValueError("--seeds: at least 3 (one draw against the median of the others)")
    records: dict = defaultdict(int)
    for e in exps:
        for act in e["actual"].values():
            for m in gt.METRICS:
                if act.get(m):
                    records[m] += 1
    work = [(e["name"], scale, i, "") for e in exps if not e.get("trace") for i in range(seeds)]
    preds: dict = defaultdict(dict)
    if jobs > 1:
        from multiprocessing import Pool
        with Pool(jobs) as pool:
            for name, seed, pred, _, _ in pool.imap_unordered(_run, work):
                preds[name][seed] = pred
    else:
        for w in work:
            name, seed, pred, _, _ = _run(w)
            preds[name][seed] = pred
    cost: dict = defaultdict(float)
    rows = []
    by_name = {e["name"]: e for e in exps}
    for name, got in preds.items():
        exp = by_name[name]
        draws = [got[i] for i in sorted(got)]
        per: dict = defaultdict(list)
        for j, truth in enumerate(draws):
            pred = median_prediction(draws[:j] + draws[j + 1:])
            # the draw stands for the measured run, on the records the experiment measured
            actual = {st: {m: truth.get(st, {}).get(m) for m in act if truth.get(st, {}).get(m)}
                      for st, act in exp["actual"].items()}
            for r in gt.score(dict(exp, actual=actual), pred):
                if r["metric"] in gt.METRICS:
                    per[(r["stage"], r["metric"])].append(r["ape"])
        for (stage, m), apes in per.items():
            ape = sum(apes) / len(apes)
            cost[m] += ape / 100.0
            rows.append((name, stage, m, ape))
    return {m: 100.0 * cost[m] / n for m, n in records.items()}, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="main38", help="main38 (default), all, ...: engine_fidelity.py's sets")
    p.add_argument("--same-offload", action="store_true", help="runs with and without a CPU KV tier apart")
    p.add_argument("--simulated", action="store_true",
                   help="the floor one run's arrival draw puts under the score, from the model's own runs")
    p.add_argument("--seeds", type=int, default=10, help="--simulated: draws per experiment (>= 3; the "
                   "default 10 scores each against the median of 9, engine_fidelity.py's default)")
    p.add_argument("--jobs", type=int, default=1, help="--simulated: replay processes")
    args = p.parse_args(argv)
    exps = select(gt.load_experiments(), args.set)
    if args.simulated:
        import time
        t = time.perf_counter()
        floor, rows = simulated_floor(exps, args.seeds, args.jobs)
        print(f"TTFT p99 records that one draw scores furthest from the others' median (mean APE %):")
        for name, stage, m, ape in sorted((r for r in rows if r[2] == "ttft_p99"), key=lambda r: -r[3])[:12]:
            print(f"  {name:44s} stage {stage:>2s} {ape:6.1f}")
        print(f"\nfloor on the mean MAPE (%) of {len(exps)} experiments from the model's own spread "
              f"({sum(1 for e in exps if not e.get('trace'))} untraced, {args.seeds} draws each, "
              f"{time.perf_counter() - t:.0f} s)")
        print("".join(f"{m:>11s}" for m in gt.METRICS))
        print("".join(f"{floor.get(m, 0.0):11.1f}" for m in gt.METRICS))
        return 0
    floor, groups = replicate_floor(exps, args.same_offload)
    for names, per in groups:
        print(f"\n{len(names)} runs: " + ", ".join(names))
        for (stage, m), (values, best, c) in sorted(per.items()):
            if m == "ttft_p99":
                print(f"  stage {stage:>2s} TTFT p99 (ms): " + " ".join(f"{v:.0f}" for v in values)
                      + f"  best single figure {best:.0f}: mean error {100 * c / len(values):.1f}%")
    print(f"\nfloor on the mean MAPE (%) of {len(exps)} experiments from these groups alone")
    print("".join(f"{m:>11s}" for m in gt.METRICS))
    print("".join(f"{floor.get(m, 0.0):11.1f}" for m in gt.METRICS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
