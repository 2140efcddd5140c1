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

from engine_fidelity import select                           # noqa: E402
from generation.engine.perf import groundtruth as gt          # noqa: E402

GROUP_KEYS = ("model", "hardware", "tp", "precision", "workload")


def best_constant(values: list[float]) -> tuple[float, float]:
    """``(p, cost)``: the single figure ``p`` minimizing ``sum |p - y| / y`` over the measured
    ``values`` (all > 0) and that sum, as a fraction (not per cent).  The sum is convex and
    piecewise linear in ``p`` with its kinks at the values, so the optimum is one of them."""
    best = min(values, key=lambda p: sum(abs(p - y) / y for y in values))
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="main38", help="main38 (default), all, ...: engine_fidelity.py's sets")
    p.add_argument("--same-offload", action="store_true", help="runs with and without a CPU KV tier apart")
    args = p.parse_args(argv)
    exps = select(gt.load_experiments(), args.set)
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
