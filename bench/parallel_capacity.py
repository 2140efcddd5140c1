"""Step mode's capacity under vLLM's parallelism flags: for each deployment, the KV cache a GPU
holds (tokens and blocks, as the server's start-up line says) and a replay's figures at a light
and a heavy load (TTFT and TPOT p50, requests/s), so the layouts of one model can be compared.

    python bench/parallel_capacity.py                 # the README's deployments
    python bench/parallel_capacity.py --quick         # capacity only, no replays

Each row is ``python -m generation.engine.replay`` with the row's flags (one DP rank: give it
that rank's share of the traffic), 1,024 prompt and 256 output tokens, seed 0.  The machine's
load average is printed with the wall time."""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from generation.config.values import ConfigError                      # noqa: E402
from generation.engine.replay import replay, scheduler_for, synthetic_trace   # noqa: E402
from generation.engine.step_config import load_step_config, resolve_step_settings  # noqa: E402

R1, L405, L70, QWEN = ("deepseek-ai/DeepSeek-R1", "meta-llama/Llama-3.1-405B-Instruct",
                       "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen3-30B-A3B")
ROWS = [   # (model, GPU, flags, light rate, heavy rate): rates per DP rank
    (R1, "H200", "-tp 8", 1, 8),
    (R1, "H200", "-tp 8 -dcp 8", 1, 8),
    (R1, "H200", "-dp 8", 0.25, 1),
    (R1, "H200", "-dp 8 -ep", 0.25, 1),
    (R1, "H200", "-dp 8 -ep --all2all-backend deepep_low_latency", 0.25, 1),
    (R1, "H200", "-dp 16 --data-parallel-size-local 8 -ep --all2all-backend deepep_low_latency", 0.25, 1),
    (R1, "H200", "-dp 16 --data-parallel-size-local 8 -ep --all2all-backend deepep_low_latency --enable-dbo", 0.25, 1),
    (R1, "H200", "-dp 16 --data-parallel-size-local 8 -ep --all2all-backend deepep_high_throughput", 0.25, 1),
    (R1, "GB200", "-dp 16 --data-parallel-size-local 8 -ep --all2all-backend deepep_low_latency", 0.25, 1),
    (L405, "H100", "-tp 8", 0.5, 4),
    (L405, "H100", "-tp 8 -pp 2", 0.5, 4),
    (L70, "H100", "-tp 4", 1, 8),
    (L70, "H100", "-tp 2 -pp 2", 1, 8),
    (QWEN, "H100", "", 2, 10),
    (QWEN, "H100", "-dp 2", 2, 10),
    (QWEN, "H100", "-dp 2 -ep --all2all-backend deepep_high_throughput", 2, 10),
]
PROMPT, OUTPUT, REQUESTS = 1024, 256, 200


def row(model: str, gpu: str, flags: str, rates: tuple, quick: bool) -> str:
    """One deployment's line: capacity, then each rate's TTFT / TPOT p50 and requests/s."""
    argv = ["--model", model, "--gpu", gpu, "--max-model-len", "8192", *flags.split()]
    try:
        cfg = load_step_config(argv)
        cfg.seed = 0
        st = resolve_step_settings(cfg)
    except ConfigError as e:
        return "refused: " + str(e).rsplit("), ", 1)[-1]          # the fix it suggests
    out = f"{st.kv_tokens:>10,} tokens ({st.num_gpu_blocks:>6,} x {st.block_size:>3})"
    if quick:
        return out
    for rate in rates:
        trace = synthetic_trace(REQUESTS, PROMPT, OUTPUT, rate, 0)
        s = replay(scheduler_for(st, cfg.max_model_len, seed=0), st.step_time, trace).summary()
        out += (f" | {rate:>5g}/s: TTFT {1e3 * s['ttft_s']['p50']:7.0f} ms TPOT {1e3 * s['tpot_s']['p50']:6.1f} ms "
                f"{s['requests_per_s']:5.2f} req/s")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="capacity only, no replays")
    args = p.parse_args(argv)
    t0 = time.time()
    for model, gpu, flags, light, heavy in ROWS:
        print(f"{model.split('/')[1]:<24} {gpu:<5} {flags or '(TP 1)':<95} "
              + row(model, gpu, flags, (light, heavy), args.quick), flush=True)
    print(f"{time.time() - t0:.0f} s, load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
