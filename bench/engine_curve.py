"""TTFT and ITL against concurrency for one GPU and model, from the virtual-clock replay (no
server, a few seconds of CPU): the curve a capacity planner reads.

    python bench/engine_curve.py [--gpu H100] [--model meta-llama/Llama-3.1-8B-Instruct]
                                 [--prompt-tokens 1024] [--output-tokens 256] [--plot FILE.png]

Closed loop: C requests in flight, each of P prompt and O output tokens (distinct prompts, no
prefix hits), 8 x C requests per point; the first C (the wave that starts together) are left
out of the figures, which are the steady state.  Prints p50 / p99 TTFT and ITL, output throughput and
preemptions per concurrency, and draws them (default bench/engine_curve.png).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generation.config.cli import load_config                     # noqa: E402
from generation.engine.replay import TraceRequest, replay, scheduler_for   # noqa: E402
from generation.engine.step_config import resolve_step_settings    # noqa: E402

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gpu", default="H100")
    p.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--plot", default=str(ROOT / "bench" / "engine_curve.png"),
                   help="the figure's file (the default is the README's, overwritten)")
    a = p.parse_args()
    cfg = load_config([a.model, "--latency-calculator", "step", "--gpu", a.gpu, "--max-model-len", "8192"])
    st = resolve_step_settings(cfg)
    rows = []
    print(f"{st.gpu.name} {st.arch.name}: {a.prompt_tokens} in / {a.output_tokens} out, closed loop")
    print(f"{'C':>5s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p50':>8s} {'ITL p99':>8s} {'tok/s':>8s} {'preempt':>8s}"
          "   (times in ms)")
    for c in CONCURRENCY:
        trace = [TraceRequest(0.0, a.prompt_tokens, a.output_tokens) for _ in range(8 * c)]
        res = replay(scheduler_for(st, cfg.max_model_len), st.step_time, trace, concurrency=c)
        throughput = res.summary()["output_tokens_per_s"]
        first_wave = set(id(r) for r in sorted(res.requests, key=lambda r: r.arrival)[:c])
        res.requests = [r for r in res.requests if id(r) not in first_wave]
        s = res.summary()
        s["output_tokens_per_s"] = throughput
        row = (c, s["ttft_s"]["p50"], s["ttft_s"]["p99"], s["itl_s"]["p50"], s["itl_s"]["p99"],
               s["output_tokens_per_s"], s["preemptions"])
        rows.append(row)
        print(f"{c:5d} {1000 * row[1]:9.1f} {1000 * row[2]:9.1f} {1000 * row[3]:8.2f} {1000 * row[4]:8.2f} "
              f"{row[5]:8.0f} {row[6]:8d}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    cs = [r[0] for r in rows]
    ax[0].plot(cs, [1000 * r[1] for r in rows], "o-", label="TTFT p50")
    ax[0].plot(cs, [1000 * r[2] for r in rows], "o--", label="TTFT p99")
    ax[0].plot(cs, [1000 * r[3] for r in rows], "s-", label="ITL p50")
    ax[0].plot(cs, [1000 * r[4] for r in rows], "s--", label="ITL p99")
    ax[0].set_xscale("log", base=2)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("concurrent requests")
    ax[0].set_ylabel("ms")
    ax[0].legend()
    ax[0].set_title(f"{st.gpu.name}, {st.arch.name.split('/')[-1]}, {a.prompt_tokens}/{a.output_tokens}")
    ax[1].plot(cs, [r[5] for r in rows], "o-")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("concurrent requests")
    ax[1].set_ylabel("output tokens/s")
    ax[1].set_title("throughput (virtual-clock replay)")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=100)
    print("plot:", a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
