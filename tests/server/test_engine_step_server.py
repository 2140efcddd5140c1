"""Step mode on a real server (``python app.py ... --latency-calculator step``): tokens leave at
the engine's step ends, never before, with the streams of one step emitted together, and the
server's histograms are the steps' times."""
from __future__ import annotations

import threading
import time

import httpx

from support import metric, scrape

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FLAGS = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "4096")


def stream_times(base: str, prompt_tokens: int, max_tokens: int, out: list, start=None) -> None:
    """One stream's token arrival times; ``start`` (a Barrier): its connection is made first, so
    that the streams of a loaded machine's threads begin together (their steps are shared)."""
    body = {"prompt": list(range(500, 500 + prompt_tokens)), "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True}
    with httpx.Client(base_url=base, timeout=30) as client:
        client.get("/health")
        if start is not None:
            start.wait()
        t0 = time.monotonic()
        times = []
        with client.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"text":""' not in line:
                    times.append(time.monotonic())
    out.append((t0, times))


def test_streams_follow_the_steps_and_are_never_early(sim_server):
    base = sim_server(*FLAGS, model=LLAMA)
    from generation.config.cli import load_config
    from generation.engine.step_config import resolve_step_settings
    st = resolve_step_settings(load_config([LLAMA, *FLAGS])).step_time
    results: list = []
    start = threading.Barrier(2)
    threads = [threading.Thread(target=stream_times, args=(base, 64, 40, results, start)) for _ in range(2)]
    before = scrape(base)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = scrape(base)
    assert len(results) == 2 and all(len(ts) == 40 for _, ts in results)
    # never early: the frontend, a prefill and 39 decode steps, each at least a batch of one's
    floor = st.frontend_time() + st.step_time(0, 0, 1, 64, 64 * 32.0, 0) + 39 * st.step_time(1, 64, 0, 0, 0.0, 0)
    for t0, ts in results:
        assert ts[-1] - t0 >= floor
    itl_n = metric(after, "vllm:inter_token_latency_seconds_count") - metric(before, "vllm:inter_token_latency_seconds_count")
    itl_s = metric(after, "vllm:inter_token_latency_seconds_sum") - metric(before, "vllm:inter_token_latency_seconds_sum")
    assert itl_n == 78
    mean = itl_s / itl_n
    assert st.step_time(1, 64, 0, 0, 0.0, 0) * 0.99 <= mean <= st.step_time(2, 210, 0, 0, 0.0, 0) * 1.6
    steps = metric(after, "vllm:iteration_tokens_total_count") - metric(before, "vllm:iteration_tokens_total_count")
    assert steps < 2 * 40                       # the two streams shared steps
    lag = metric(after, "vllm_sim:token_emission_lag_seconds_count") - \
        metric(before, "vllm_sim:token_emission_lag_seconds_count")
    assert lag == 80                            # every token's lag observed once


def test_step_mode_start_up_logs_the_kv_cache(tmp_path):
    import subprocess
    import sys
    from support import ROOT
    # 50 blocks of 64 tokens (0.34.0) hold 3,200 tokens: one 4,096-token sequence does not fit
    r = subprocess.run([sys.executable, str(ROOT / "app.py"), LLAMA, *FLAGS, "--num-gpu-blocks-override", "50"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert "max-model-len" in r.stderr or "KV cache" in r.stderr
