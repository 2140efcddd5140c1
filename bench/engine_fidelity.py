"""Step mode against real vLLM runs: replay the sim-to-real ground truth in virtual time and score
it the way the peer benchmark scores simulators, beside the peers' published figures.

    python bench/engine_fidelity.py                  # the 38-experiment benchmark (main38)
    python bench/engine_fidelity.py --set all        # every experiment (training ones marked)
    python bench/engine_fidelity.py --set trainval --jobs 2 --json out.json

What it does (generation/engine/perf/groundtruth.py): rebuilds each experiment's workload (its
per-request trace where one exists, else its inference-perf stages as its load generator draws
them, seeded: exactly rate x duration requests a stage at exponential gaps, each stage started
once the one before it has finished, over inference-perf's 10 x 10 shared-prefix prompts), replays it through the same scheduler and
step model as the server, buckets requests into stages by arrival, and takes the mean / p90 /
p99 of E2E and TTFT and the mean per-request ITL per stage and overall.  The MAPE against the
measured value is averaged over every (stage, metric) record with equal weight, as the peer
benchmark averages (bench/sim_to_real/README.md).

Prints: the mean MAPE per metric beside each peer simulator's on the same records; MAPE by
experiment, model, GPU and workload; the p90 / p99 errors; and ``itl_mean_counted`` (ITL divided
by the output count inference-perf measured, the way the measurement divides it).  The machine's
load average is printed with the wall time.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from multiprocessing import Pool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from generation.engine.perf import groundtruth as gt          # noqa: E402

PEERS = ("blis-trained-physics", "blis-evolved", "blis-roofline", "aiconfigurator-estimate",
         "llm-optimizer-estimate", "vidur")
SHOWN = ("e2e_mean", "ttft_mean", "itl_mean")


def _run(args):
    name, scale, seed, profile = args
    exp = next(e for e in gt.load_experiments() if e["name"] == name)
    constants = None
    if profile:
        from generation.engine.perf.step_model import load_constants
        constants = load_constants(gt.GPU_NAMES.get(exp["hardware"], exp["hardware"]), profile)[0]
    sim = gt.simulate(exp, constants, seed=seed, duration_scale=scale)
    return name, seed, gt.predicted(exp, sim), sim.wall_s, sim.preemptions


def relative_median(values) -> float:
    """The single figure ``p`` minimizing ``sum |p - y| / y`` over ``values``: the best point
    forecast under a relative (percentage) error, the ``1 / y``-weighted median (Gneiting 2011,
    "Making and evaluating point forecasts"); the plain median where a value is not positive.
    The sum is convex and piecewise linear with its kinks at the values, so ``p`` is one of them."""
    values = list(values)
    if min(values) <= 0:
        return statistics.median(values)
    return min(values, key=lambda p: sum(abs(p - y) / y for y in values))


# --estimator: how the seeds' replays make one predicted figure per record
ESTIMATORS = {"median": statistics.median, "relative-median": relative_median}


def median_prediction(preds: list[dict], estimate=statistics.median) -> dict:
    """{stage: {metric: median over the seeds' predictions}}: the model's typical run.  A p99 of a
    stage near the engine's capacity (or with a MoE compile stall in it) swings with the arrival
    draw; one seed's replay compares one draw with another (the measured run), the median does not.
    ``estimate``: another of :data:`ESTIMATORS` instead of the median."""
    out: dict = {}
    for stage in preds[0]:
        # a seed whose stage had no successful request has only its counts: the others decide
        got = [p[stage] for p in preds if stage in p]
        names = dict.fromkeys(m for g in got for m in g)
        out[stage] = {m: estimate([g[m] for g in got if m in g]) for m in names}
    return out


def select(exps: list[dict], which: str) -> list[dict]:
    """``main38``, ``trainval``, ``default16``, ``train`` (default16 + trainval), ``test``
    (main38 minus train), ``all``, or a comma-separated list of names.  Data whose experiments
    carry no ``groups`` (a user's own runs) is all of it under any set's name."""
    if which == "all" or (which in ("main38", "trainval", "default16", "train", "test")
                          and not any(e.get("groups") for e in exps)):
        return exps                     # a user's own runs, untagged: all of them
    if which == "train":
        return [e for e in exps if {"default16", "trainval"} & set(e["groups"])]
    if which == "test":
        return [e for e in exps if "main38" in e["groups"] and not {"default16", "trainval"} & set(e["groups"])]
    if which in ("main38", "trainval", "default16"):
        return [e for e in exps if which in e["groups"]]
    names = set(which.split(","))
    return [e for e in exps if e["name"] in names]


def peer_records(which_set: str) -> dict:
    """{(simulator, experiment, stage, metric): predicted} from bench/sim_to_real/peer.csv; empty
    for a data folder without one (a user's own runs: README, "Fit a profile")."""
    out = {}
    path = os.path.join(gt.data_dir(), "peer.csv")
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if which_set in ("any", r["set"]):
                out[(r["simulator"], r["experiment"], r["stage"], r["metric"])] = float(r["predicted"])
    return out


def mean(v):
    v = [x for x in v if x == x]
    return sum(v) / len(v) if v else float("nan")


def run(exps: list[dict], *, scale: float = 1.0, seed: int = 0, seeds: int = 1, jobs: int = 1, profile: str = "",
         progress=None, estimate=statistics.median) -> dict:
    """Replay and score ``exps``, each with ``seeds`` seeds from ``seed`` on; the prediction is the
    median over them (:func:`median_prediction`; ``estimate``: another of :data:`ESTIMATORS`):
    {name: {"pred": ..., "records": [...], "seed_records": [[...] per seed], "wall_s": s}}."""
    by_name = {e["name"]: e for e in exps}
    work = [(e["name"], scale, seed + i, profile) for e in exps for i in range(seeds)]
    got: dict = defaultdict(list)
    out = {}

    def collect(item):
        name, _seed, pred, wall, pre = item
        got[name].append(item)
        if len(got[name]) < seeds:
            return
        items = sorted(got.pop(name), key=lambda it: it[1])
        exp = by_name[name]
        window = gt.windowed_actual(exp, scale)      # --scale < 1: a traced run's same requests
        if window:
            exp = dict(exp, actual=window)
        pred = median_prediction([it[2] for it in items], estimate) if seeds > 1 else items[0][2]
        out[name] = {"pred": pred, "records": gt.score(exp, pred),
                     "seed_records": [gt.score(exp, it[2]) for it in items],
                     "wall_s": sum(it[3] for it in items), "preemptions": sum(it[4] for it in items)}
        if progress:
            progress(name, out[name]["wall_s"])

    if jobs > 1:
        with Pool(jobs) as pool:
            for item in pool.imap_unordered(_run, work):
                collect(item)
    else:
        for w in work:
            collect(_run(w))
    return out


BOOTSTRAP_DRAWS = 200


def seed_bootstrap(results: dict, metrics, draws: int = BOOTSTRAP_DRAWS, seed: int = 0,
                   estimate=statistics.median) -> dict:
    """How much the headline figures owe to which seeds were drawn: ``{metric: (10th, 90th
    percentile)}`` of the mean MAPE (%) over ``draws`` resamples, with replacement, of each experiment's
    seeded replays (``results[name]["seed_records"]``), each record's prediction the median of
    the resampled seeds' as in :func:`run`.  A seed without a record (a stage with no successful
    request) is left out of that record's median.  Seeded: the same figures every time."""
    rng = random.Random(seed)
    cells = []                                        # (metric, actual, [each seed's prediction])
    n = None
    for res in results.values():
        seeds = res.get("seed_records") or []
        n = len(seeds) if n is None else min(n, len(seeds))
        by_seed = [{(r["stage"], r["metric"]): r["predicted"] for r in rs} for rs in seeds]
        for r in res["records"]:
            if r["metric"] in metrics:
                key = (r["stage"], r["metric"])
                cells.append((r["metric"], r["actual"], [b.get(key) for b in by_seed]))
    if not n or n < 2:
        return {m: (float("nan"), float("nan")) for m in metrics}
    scores = defaultdict(list)
    for _ in range(draws):
        pick = [rng.randrange(n) for _ in range(n)]
        apes = defaultdict(list)
        for metric, actual, preds in cells:
            got = [preds[i] for i in pick if preds[i] is not None]
            if got:
                apes[metric].append(abs(estimate(got) - actual) / actual * 100)
        for m, v in apes.items():
            scores[m].append(mean(v))
    # percentiles, not the sd: a resample that repeats a seed whose stage overloaded moves the
    # median there and the mean MAPE by tens of points, which an sd would make the whole story
    out = {}
    for m in metrics:
        v = sorted(scores[m])
        out[m] = (v[len(v) // 10], v[(9 * len(v)) // 10]) if v else (float("nan"), float("nan"))
    return out


def report(exps: list[dict], results: dict, which: str, estimator: str = "median") -> dict:
    """Print the tables; returns the summary (mean MAPE per metric, ours and the peers')."""
    by_name = {e["name"]: e for e in exps}
    peer_set = "main38" if which in ("main38", "test") else "any"
    peers = peer_records(peer_set)
    ours: dict = defaultdict(list)
    theirs: dict = defaultdict(lambda: defaultdict(list))
    for name, res in results.items():
        for r in res["records"]:
            ours[r["metric"]].append(r["ape"])
            for sim in PEERS:
                p = peers.get((sim, name, r["stage"], r["metric"]))
                if p is not None:
                    theirs[sim][r["metric"]].append(abs(p - r["actual"]) / r["actual"] * 100)
    metrics = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean", "itl_mean_counted")
    print(f"\nMean MAPE (%) over {len(results)} experiments, {len(ours['e2e_mean'])} stage records each metric")
    print(f"{'simulator':26s}" + "".join(f"{m:>17s}" for m in metrics))
    print(f"{'vllm-sim (this)':26s}" + "".join(f"{mean(ours[m]):17.1f}" for m in metrics))
    for sim in PEERS:
        if theirs[sim]:
            n = len(theirs[sim]["e2e_mean"])
            print(f"{(sim + f' ({n})'):26s}" + "".join(
                f"{mean(theirs[sim][m]):17.1f}" if theirs[sim].get(m) else f"{'-':>17s}" for m in metrics))
    print("(a peer's figure is over the records it covered, in brackets; ours over all)")
    n_seeds = min(len(res.get("seed_records") or [None]) for res in results.values())
    if n_seeds > 1:
        spread = []
        for i in range(n_seeds):
            per: dict = defaultdict(list)
            for res in results.values():
                for r in res["seed_records"][i]:
                    per[r["metric"]].append(r["ape"])
            spread.append(per)
        print(f"ours: the {estimator} of {n_seeds} seeded replays per record; one seed's replay alone scores")
        print(f"{'  (lowest - highest)':26s}" + "".join(
            f"{(f'{min(mean(p[m]) for p in spread):.1f}-{max(mean(p[m]) for p in spread):.1f}'):>17s}" for m in metrics))
        band = seed_bootstrap(results, metrics, estimate=ESTIMATORS[estimator])
        print(f"the {estimator}'s own noise: the mean MAPE over {BOOTSTRAP_DRAWS} resamples of the seeds, with replacement")
        print(f"{'  (10th - 90th percentile)':26s}" + "".join(f"{f'{band[m][0]:.1f}-{band[m][1]:.1f}':>17s}" for m in metrics))

    def table(key, title):
        groups: dict = defaultdict(lambda: defaultdict(list))
        for name, res in results.items():
            e = by_name[name]
            for r in res["records"]:
                groups[key(e)][r["metric"]].append(r["ape"])
        print(f"\nMAPE (%) by {title}")
        print(f"{title:48s}" + "".join(f"{m:>11s}" for m in SHOWN) + f"{'e2e_p90':>11s}{'ttft_p99':>11s}")
        for g in sorted(groups):
            d = groups[g]
            print(f"{str(g)[:48]:48s}" + "".join(f"{mean(d[m]):11.1f}" for m in SHOWN)
                  + f"{mean(d['e2e_p90']):11.1f}{mean(d['ttft_p99']):11.1f}")

    untagged = not any(e.get("groups") for e in exps)       # a user's own runs: all training data
    table(lambda e: e["name"] + ("*" if untagged or {"default16", "trainval"} & set(e["groups"]) else ""),
          "experiment")
    table(lambda e: e["model"].split("/")[-1], "model")
    table(lambda e: e["hardware"], "GPU")
    table(lambda e: e["workload"] or "(not named)", "workload")
    for metric in ("ttft_p99", "e2e_p99"):
        shares = tail_shares(exps, results, metric)
        print(f"\n{metric}: its mean's points by GPU and model, first stages (of runs with more than one) "
              f"and the other records")
        for (gpu, model), (first, rest) in sorted(shares.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {gpu:10s} {model:40s} {first:6.1f} {rest:6.1f}")
        print(f"  {'all':51s} {sum(v[0] for v in shares.values()):6.1f} {sum(v[1] for v in shares.values()):6.1f}")
    worst = max(((abs(r["ape"]), n) for n, res in results.items() for r in res["records"]
                 if r["metric"] == "e2e_mean" and r["stage"] == "-1"), default=(0, ""))
    print(f"\nworst whole-run E2E mean error: {worst[0]:.1f}% ({worst[1]}; the tables average each experiment's "
          f"stage records and the whole run's); * = in the training data")
    return {"ours": {m: mean(ours[m]) for m in metrics},
            "peers": {s: {m: mean(v) for m, v in d.items()} for s, d in theirs.items()}}


def tail_shares(exps: list[dict], results: dict, metric: str) -> dict:
    """Where a metric's mean MAPE comes from: ``{(GPU, model): (points from the first stage of
    runs with more than one stage, points from the other records)}``, each record's error over
    the number of records (the shares sum to the mean).  A MoE model's compile stalls fall in
    its first stage; a later stage's tail is its load."""
    by_name = {e["name"]: e for e in exps}
    n = sum(1 for res in results.values() for r in res["records"] if r["metric"] == metric)
    out: dict = defaultdict(lambda: [0.0, 0.0])
    for name, res in results.items():
        e = by_name[name]
        key = (e["hardware"], e["model"].split("/")[-1])
        for r in res["records"]:
            if r["metric"] == metric:
                out[key][0 if (r["stage"] == "0" and len(e["stages"]) > 1) else 1] += r["ape"] / n
    return {k: tuple(v) for k, v in out.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="main38", help="main38 (default), test, train, trainval, default16, all, or names")
    p.add_argument("--scale", type=float, default=1.0, help="keep this fraction of each stage (quick runs)")
    p.add_argument("--seed", type=int, default=0, help="the first seed of the rebuilt workloads' arrivals")
    # 9: the median of 5 seeds scattered (a TTFT p99 MAPE of 16.0-41.3 over 40 draws of 5 of 18
    # seeds, sd 4.6, mean 18.9 against 16.4 for all 18); of 9, sd 0.7 (README: Fidelity)
    p.add_argument("--seeds", type=int, default=9, help="seeded replays per experiment; each figure is "
                                                        "their median (default 9; 1: one replay)")
    p.add_argument("--estimator", choices=sorted(ESTIMATORS), default="median",
                   help="each record's figure from the seeds: their median (default), or relative-median, the "
                        "best single figure under a relative error (the 1/y-weighted median)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--profile", default="", help="a performance profile JSON for every experiment "
                                                 "(default: each GPU's shipped profile)")
    p.add_argument("--json", help="write the per-experiment predictions and records here")
    p.add_argument("--data", help="a data folder of your own runs (experiments.json, model_configs/, traces; "
                                  "default: SIM_TO_REAL_DATA, else bench/sim_to_real)")
    args = p.parse_args(argv)
    from generation.config.values import error_line
    try:
        return _bench_main(args)
    except (OSError, ValueError, KeyError) as e:         # a user's data folder or profile: one line
        print(error_line(e) if not isinstance(e, KeyError) else f"error: missing field {e}", file=sys.stderr)
        return 2


def _bench_main(args) -> int:
    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    if not 0 < args.scale <= 1:
        raise ValueError(f"--scale must be in (0, 1] (a fraction of each stage), got {args.scale}")
    if args.data:                       # the worker processes read it too
        os.environ["SIM_TO_REAL_DATA"] = os.path.abspath(args.data)
    if args.profile:                    # before the replays: a typo is one line, not a worker's traceback
        from generation.config.values import ConfigError
        from generation.engine.perf.step_model import load_constants
        try:
            load_constants("H100", args.profile)
        except ConfigError as e:
            raise ValueError(f"--profile: {e}") from None
    exps = select(gt.load_experiments(), args.set)
    if not exps:
        print(f"error: no experiment matches --set {args.set}", file=sys.stderr)
        return 2
    t = time.perf_counter()
    done = [0]

    def progress(name, wall):
        done[0] += 1
        print(f"[{done[0]}/{len(exps)}] {name} ({wall:.1f} s)", file=sys.stderr)

    results = run(exps, scale=args.scale, seed=args.seed, seeds=args.seeds, jobs=args.jobs, profile=args.profile,
                  progress=progress, estimate=ESTIMATORS[args.estimator])
    summary = report(exps, results, args.set, args.estimator)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{len(exps)} experiments replayed in {time.perf_counter() - t:.0f} s with {args.jobs} jobs "
          f"(load average {load:.1f})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
