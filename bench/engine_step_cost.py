"""CPU cost of the step engine's own work per step (scheduling, block accounting, step time,
completion; no sends), at N running sequences in steady decode.

    python bench/engine_step_cost.py [N ...]        # default: 256 1024

Prints microseconds per step (median of 2000 steps) for Llama-3.1-8B on an H100: the live
engine's (every request through every step), and the replay's with its decoding requests advanced
as a group (:meth:`Scheduler.decode_in_groups`), per step and per token; the machine's load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generation.config.cli import load_config                     # noqa: E402
from generation.engine.replay import scheduler_for                 # noqa: E402
from generation.engine.scheduler import EngineRequest               # noqa: E402
from generation.engine.step_config import resolve_step_settings    # noqa: E402


def cost(n: int, steps: int = 2000, group: bool = False) -> float:
    cfg = load_config(["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--max-model-len", "8192",
                       "--max-num-seqs", str(max(n, 1)), "--num-gpu-blocks-override", "400000"])
    st = resolve_step_settings(cfg)
    sched = scheduler_for(st, cfg.max_model_len)
    if group:
        sched.decode_in_groups()
    for _ in range(n):
        sched.add(EngineRequest(256, 10**6), 0.0)
    t = 0.0
    while len(sched.running) < n or any(r.num_output == 0 for r in sched.running):    # past the prefills
        plan = sched.schedule(t)
        t += 0.01
        sched.complete(plan, t)
    f = st.step_time.step_time
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        plan = sched.schedule(t)
        dt = f(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens, plan.prefill_pairs,
               plan.prefill_context)
        t += dt
        sched.complete(plan, t)
        samples.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(samples)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("running", nargs="*", type=int, default=[256, 1024],
                    help="running sequences per measurement (default: 256 1024)")
    for n in ap.parse_args().running:
        live, group = cost(n), cost(n, group=True)
        print(f"{n:5d} running sequences: {live:7.1f} us of engine CPU per step; the replay's group step "
              f"{group:6.1f} us ({group / n:.3f} us per token)")
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
