"""Inter-token latency against the number of requests in flight: each traced real run beside its
replay, so that a step model's growth with the batch can be read off directly (the stage means
the fit scores mix it with queueing and prefill).

    python bench/engine_concurrency.py                     # the traced runs with two load levels
    python bench/engine_concurrency.py --runs NAME,NAME --profile my-h100.json

For every request with more than 20 output tokens: its decode ITL, ``(E2E - TTFT) / (output - 1)``
(ms), and the mean number of requests in flight over its decode (the trace's arrivals and E2Es,
sampled at 8 instants).  The requests are binned by that count (bins of 10) and each bin's median
ITL is printed for the real run (the trace) and for the replay (seed 0, the same arrivals and
lengths), with the requests per bin, then each side's slope (us per extra request in flight,
least squares over the bins both sides fill with 30 or more requests).  Prints the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from generation.engine.perf import groundtruth as gt          # noqa: E402

# the traced runs whose stages reach two load levels (8 then 20 req/s)
DEFAULT_RUNS = ("20260217-231439-llama-2-7b-tp1-general", "20260217-202857-llama-2-70b-tp4-general",
                "20260218-130541-mixtral-8x7b-v0-1-tp2-general", "20260218-150304-codellama-34b-tp2-general")
BIN = 10
MIN_PER_BIN = 30


def itl_by_concurrency(arrival, ttft, e2e, output, *, sample: int = 1500, seed: int = 0):
    """(in-flight counts, decode ITLs in ms) of up to ``sample`` requests with > 20 outputs
    (a seeded sample: the in-flight count costs O(requests) each).  Seconds in, arrays out."""
    a, ttft, e2e, out = (np.asarray(x, float) for x in (arrival, ttft, e2e, output))
    end = a + e2e
    itl = (e2e - ttft) / np.maximum(out - 1, 1) * 1e3
    idx = np.flatnonzero(out > 20)
    if len(idx) > sample:
        idx = np.random.default_rng(seed).choice(idx, sample, replace=False)
    counts = np.empty(len(idx))
    for j, i in enumerate(idx):
        ts = np.linspace(a[i] + ttft[i], end[i], 8)
        counts[j] = np.mean([np.count_nonzero((a <= t) & (end > t)) for t in ts])
    return counts, itl[idx]


def binned(counts, itls) -> dict:
    """{bin start: (median ITL ms, requests)} over bins of :data:`BIN` in-flight requests."""
    out = {}
    for lo in range(0, int(counts.max(initial=0)) + BIN, BIN):
        m = (counts >= lo) & (counts < lo + BIN)
        if m.any():
            out[lo] = (float(np.median(itls[m])), int(m.sum()))
    return out


def slope(bins: dict, keys) -> float:
    """Least-squares slope of median ITL over bin centre, us per request in flight."""
    if len(keys) < 2:
        return float("nan")
    x = np.array([k + BIN / 2 for k in keys])
    y = np.array([bins[k][0] for k in keys])
    return float(np.polyfit(x, y, 1)[0] * 1e3)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="traced experiments, comma-separated")
    p.add_argument("--profile", default="", help="a performance profile JSON (default: the GPU's shipped one)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    exps = {e["name"]: e for e in gt.load_experiments()}
    for name in args.runs.split(","):
        exp = exps[name]
        if not exp.get("trace"):
            print(f"{name}: no per-request trace")
            continue
        constants = None
        if args.profile:
            from generation.engine.perf.step_model import load_constants
            constants = load_constants(gt.GPU_NAMES.get(exp["hardware"], exp["hardware"]), args.profile)[0]
        rows = [r for r in gt.trace_rows(exp) if r["has_error"] == "0"]
        real = binned(*itl_by_concurrency([int(r["arrival_us"]) / 1e6 for r in rows],
                                          [float(r["ttft_s"]) for r in rows], [float(r["e2e_s"]) for r in rows],
                                          [int(r["output_tokens"]) for r in rows]))
        done = [o for o in gt.simulate(exp, constants, seed=0).outcomes if not o.failed]
        sim = binned(*itl_by_concurrency([o.arrival for o in done], [o.ttft for o in done], [o.e2e for o in done],
                                         [o.output_tokens for o in done]))
        print(f"{name}  ({exp['model']}, {exp['hardware']}, TP {exp['tp']})")
        print(f"  {'in flight':>10s} {'real ms':>8s} {'(n)':>6s} {'replay ms':>10s} {'(n)':>6s} {'error':>7s}")
        for lo in sorted(set(real) | set(sim)):
            r, s = real.get(lo, (float("nan"), 0)), sim.get(lo, (float("nan"), 0))
            err = (s[0] / r[0] - 1) * 100 if r[1] and s[1] else float("nan")
            print(f"  {lo:4d}-{lo + BIN:<5d} {r[0]:8.2f} {r[1]:6d} {s[0]:10.2f} {s[1]:6d} {err:+6.1f}%")
        both = [k for k in real if k in sim and real[k][1] >= MIN_PER_BIN and sim[k][1] >= MIN_PER_BIN]
        print(f"  slope over the bins both fill: real {slope(real, both):.1f} us, replay {slope(sim, both):.1f} us "
              f"per request in flight")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.perf_counter() - t0:.0f} s (load average {load:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
