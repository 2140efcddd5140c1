"""How fast the virtual-time replay runs (issue 32, item 4): times real time, memory and CPU per
output token, with the machine's load next to the figures.

    python bench/replay_speed.py                     # the 1-hour trace and the per-token cost
    python bench/replay_speed.py --requests 7200      # a shorter trace (6 minutes at 20 req/s)
    python bench/replay_speed.py --compare /work/main --runs 3     # alternating runs, two checkouts

1. **The hour** (and the same hour with a 512-token prefix shared by each of 8 groups, which
   the prefix cache finds): Poisson arrivals at 20 requests/s, 1,024 prompt / 256 output tokens, for an hour
   (72,000 requests), Llama-3.1-8B on an H100, ``--max-model-len 8192``, seed 0: what
   ``python -m generation.engine.replay --rate 20 --num-requests 72000 --prompt-tokens 1024
   --output-tokens 256 --max-model-len 8192`` runs.  Prints the simulated seconds over the
   replay's wall seconds (x real time; the trace's generation and the imports are printed apart),
   the process's peak RSS, and the CPU per output token.
2. **Per token at 1,024 running sequences**: 1,024 requests decode together (a closed loop of
   1,024, 1,024 in / 256 out: arrivals, prefills and finishes every step), and a steady batch of
   1,024 long decodes (128 in / 3,000 out: no event but block boundaries); CPU microseconds per
   output token (the prefills included); a KV cache of 400,000 blocks, so that nothing is preempted.

``--compare PATH`` runs the same bench on the checkout at PATH and on this one, alternately
(``--runs`` each), in fresh processes, and prints each run's line: a regression shows before it
lands.  Every line carries ``os.getloadavg()``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _setup(root: str, *flags):
    if root not in sys.path:
        sys.path.insert(0, root)
    from generation.config.cli import load_config
    from generation.engine.step_config import resolve_step_settings
    cfg = load_config(["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--gpu", "H100",
                       "--max-model-len", "8192", "--seed", "0", *flags])
    return cfg, resolve_step_settings(cfg)


def _replay(cfg, st, trace, **kw):
    import random
    from generation.engine.replay import replay, scheduler_for
    sched = scheduler_for(st, cfg.max_model_len, cfg.max_loras, cfg.scheduling_policy)
    gc.disable()
    c0, w0 = time.process_time(), time.perf_counter()
    res = replay(sched, st.step_time, trace, rng=random.Random("0-steps"), **kw)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    gc.enable()
    tokens = sum(r.num_output for r in res.requests) + sum(r.num_output for r in res.timed_out)
    return res, cpu, wall, tokens


def run(root: str, requests: int, per_token: bool) -> dict:
    t0 = time.perf_counter()
    cfg, st = _setup(root)
    from generation.engine.replay import TraceRequest, synthetic_trace
    t1 = time.perf_counter()
    trace = synthetic_trace(requests, 1024, 256, 20.0, seed=0)
    t2 = time.perf_counter()
    res, cpu, wall, tokens = _replay(cfg, st, trace)
    out = {"root": root, "requests": len(res.requests), "simulated_s": res.duration, "replay_wall_s": wall,
           "replay_cpu_s": cpu, "x_real_time": res.duration / wall, "imports_s": t1 - t0, "trace_s": t2 - t1,
           "x_real_time_with_setup": res.duration / (wall + t2 - t0), "output_tokens": tokens,
           "us_per_token": 1e6 * cpu / tokens, "steps": len(res.steps),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    del res
    # the same hour, each request sharing a 512-token prefix with its group (8 groups): the block
    # pool names, finds and evicts blocks (no counting)
    shared = [TraceRequest(t.arrival, t.prompt_tokens, t.output_tokens, f"g{i % 8}", 512)
              for i, t in enumerate(trace)]
    del trace
    res, cpu, wall, tokens = _replay(cfg, st, shared)
    out.update(prefix_x_real_time=res.duration / wall, prefix_cpu_s=cpu, prefix_us_per_token=1e6 * cpu / tokens)
    del res, shared
    if per_token:           # KV blocks for 1,024 sequences of 1,280 tokens (as engine_step_cost.py)
        cfg, st = _setup(root, "--num-gpu-blocks-override", "400000")
        loop = [TraceRequest(0.0, 1024, 256) for _ in range(4 * 1024)]
        res, cpu, _, tokens = _replay(cfg, st, loop, concurrency=1024)
        out["closed_1024_us_per_token"] = 1e6 * cpu / tokens
        out["closed_1024_running_max"] = max(res.steps.running if hasattr(res.steps, "running")
                                             else [s[2] for s in res.steps])
        steady = [TraceRequest(0.0, 128, 3000) for _ in range(1024)]
        res, cpu, _, tokens = _replay(cfg, st, steady)
        out["steady_1024_us_per_token"] = 1e6 * cpu / tokens
    out["load"] = os.getloadavg()
    return out


def line(r: dict) -> str:
    s = (f"{r['root']}: {r['requests']:,} requests, {r['simulated_s']:,.0f} s simulated in {r['replay_wall_s']:.2f} s "
         f"(CPU {r['replay_cpu_s']:.2f} s): {r['x_real_time']:,.0f}x real time "
         f"({r['x_real_time_with_setup']:,.0f}x with imports {r['imports_s']:.2f} s and trace {r['trace_s']:.2f} s), "
         f"{r['us_per_token']:.3f} us/token, peak RSS {r['peak_rss_mb']:.0f} MB")
    if "prefix_x_real_time" in r:
        s += (f"; with shared prefixes {r['prefix_x_real_time']:,.0f}x real time (CPU {r['prefix_cpu_s']:.2f} s, "
              f"{r['prefix_us_per_token']:.3f} us/token)")
    if "closed_1024_us_per_token" in r:
        s += (f"; at 1,024 running: {r['closed_1024_us_per_token']:.3f} us/token (closed loop), "
              f"{r['steady_1024_us_per_token']:.3f} us/token (steady decode)")
    return s + f"; load {' '.join(f'{x:.2f}' for x in r['load'])}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=72000, help="requests at 20/s (72,000: one hour)")
    p.add_argument("--no-per-token", action="store_true", help="skip the 1,024-sequence runs")
    p.add_argument("--compare", metavar="PATH", help="another checkout: alternate runs with it")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--root", default=str(HERE), help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.json:
        print(json.dumps(run(a.root, a.requests, not a.no_per_token)))
        return
    roots = [str(HERE)] + ([os.path.abspath(a.compare)] if a.compare else [])
    if len(roots) == 1 and a.runs == 1:
        print(line(run(roots[0], a.requests, not a.no_per_token)))
        return
    for i in range(a.runs):
        for root in (roots if i % 2 == 0 else roots[::-1]):
            cmd = [sys.executable, __file__, "--root", root, "--requests", str(a.requests), "--json"]
            if a.no_per_token:
                cmd.append("--no-per-token")
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
            if out.returncode:
                print(f"{root}: failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            print(line(json.loads(out.stdout)), flush=True)


if __name__ == "__main__":
    main()
