"""Fleet replay benchmark (issue 29, "Virtual time"): how fast a many-pod fleet replays, and
what prefix-aware routing does on a prefix-heavy load.

    python bench/fleet_replay.py                      # both parts, a 60 s slice of the hour
    python bench/fleet_replay.py --seconds 3600       # the whole hour (minutes)
    python bench/fleet_replay.py --skip-speed --plot bench/fleet_prefix.png

1. **Speed**: ``--rate`` 200 req/s for ``--seconds`` across ``--pods`` 32 H100 pods of
   Llama-3.1-8B (Poisson arrivals; prompts and outputs log-normal, medians ~665 and ~150
   tokens, like Azure's conversation trace), least-queue routing (every pod's state read at
   every arrival).  Prints the replay's wall time, the simulated steps per second, and the time
   a whole hour would take at that pace (a slice measured and extrapolated unless
   ``--seconds 3600``).
2. **Prefix-heavy routing**: ``--prefix-rate`` conversations/s for 60 s on ``--prefix-pods`` 8
   pods, each under one of 200 system prompts of 4,096 tokens (more than one pod's KV cache holds:
   820k tokens of prefixes, 492k per pod), a 256-token question and 128 output tokens.  The
   same trace behind each router; a table of cache hit rate, throughput, TTFT and ITL, and with
   ``--plot`` the bars (the README's figure).

Figures are virtual time (the simulated fleet); the wall times are this machine's, with its
load average printed beside them.
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from generation.engine.replay import TraceRequest  # noqa: E402
from generation.fleet.replay import FleetReplay, pod_factory  # noqa: E402
from generation.fleet.routing import make_router  # noqa: E402
from generation.fleet.traces import prefix_workload  # noqa: E402

SERVER = ["--gpu", "H100", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "16384"]


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def azure_like(rate: float, seconds: float, seed: int = 0) -> list[TraceRequest]:
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(TraceRequest(t, min(8000, int(rng.lognormvariate(6.5, 0.8)) + 1),
                                min(2000, int(rng.lognormvariate(5.0, 0.7)) + 1)))


def speed(args) -> None:
    new_pod, _, _ = pod_factory(SERVER)
    trace = azure_like(args.rate, args.seconds)
    print(f"speed: {len(trace):,} requests ({args.rate:g} req/s for {args.seconds:g} s) on {args.pods} pods, "
          f"router least-queue; {load()}", flush=True)
    gc.disable()            # as the replay's command line: no reference cycles, only the collector's passes
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        res = FleetReplay(new_pod, trace, pods=args.pods, router=make_router("least-queue"), keep_routed=False,
                          compact=True).run()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    finally:
        gc.enable()
    s = res.summary()
    steps = sum(len(p.result.steps) for p in res.pods)
    hour, hour_cpu = wall * 3600 / args.seconds, cpu * 3600 / args.seconds
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  replayed in {wall:.1f} s ({cpu:.1f} s of CPU): {steps:,} engine steps ({steps / cpu:,.0f} steps per CPU "
          f"second), {len(trace) / cpu:,.0f} requests per CPU second; {s['requests']:,} finished, TTFT p99 "
          f"{1000 * s['ttft_s']['p99']:.0f} ms, ITL p50 {1000 * s['itl_s']['p50']:.1f} ms; peak RSS {rss:,.0f} MB")
    print(f"  a 1-hour trace at this pace: {hour:.0f} s wall, {hour_cpu:.0f} s of CPU"
          + ("" if args.seconds >= 3600 else f" (extrapolated from {args.seconds:g} s)") + f"; {load()}")


def prefix(args) -> None:
    new_pod, _, _ = pod_factory(SERVER)
    trace = prefix_workload(args.prefix_rate, 60, groups=200, system_tokens=4096, question_tokens=256,
                            output_tokens=128, seed=0)
    print(f"\nprefix-heavy: {len(trace):,} requests ({args.prefix_rate:g}/s for 60 s, 200 system prompts of 4,096 "
          f"tokens) on {args.prefix_pods} H100 pods of Llama-3.1-8B; {load()}")
    head = f"  {'router':15s} {'hit rate':>8s} {'out tok/s':>10s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p50':>8s} " \
           f"{'E2E p99':>9s} {'wall':>6s}"
    print(head)
    rows = []
    for name in ("round-robin", "least-queue", "prefix-approx", "prefix-precise", "weighted"):
        t0 = time.perf_counter()
        res = FleetReplay(new_pod, trace, pods=args.prefix_pods, router=make_router(name), keep_routed=False).run()
        wall = time.perf_counter() - t0
        s = res.summary()
        rows.append(s)
        ms = lambda v: f"{1000 * v:,.0f} ms"
        print(f"  {name:15s} {100 * s['cache_hit_rate']:>7.1f}% {s['output_tokens_per_s']:>10,.0f} "
              f"{ms(s['ttft_s']['p50']):>9s} {ms(s['ttft_s']['p99']):>9s} {1000 * s['itl_s']['p50']:>5.1f} ms "
              f"{ms(s['e2e_s']['p99']):>9s} {wall:>5.1f}s", flush=True)
    if args.plot:
        from generation.fleet.plot import plot_comparison
        plot_comparison(rows, args.plot, f"{args.prefix_pods} H100 pods, Llama-3.1-8B, 200 x 4k-token system "
                                         f"prompts, {args.prefix_rate:g} req/s")
        print(f"  plot: {args.plot}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="speed: seconds of the 200 req/s trace")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--pods", type=int, default=32)
    p.add_argument("--prefix-rate", type=float, default=150.0)
    p.add_argument("--prefix-pods", type=int, default=8)
    p.add_argument("--plot", help="prefix-heavy: write the bars here (PNG)")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-prefix", action="store_true")
    args = p.parse_args()
    if not args.skip_speed:
        speed(args)
    if not args.skip_prefix:
        prefix(args)


if __name__ == "__main__":
    main()
