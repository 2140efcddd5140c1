"""Step mode against the published measurements (docs/engine-model.md section 4), through HTTP and
in virtual time.

    python bench/engine_calibration.py            # starts its own servers on free ports

For each measurement it starts ``python app.py meta-llama/Llama-3.1-8B-Instruct
--latency-calculator step --gpu G`` (offline: the model's preset architecture, the simulated
tokenizer), runs the same closed-loop benchmark as the measurement through the completions API
(prompts as token ids, so that the prompt is exactly P tokens; ``ignore_eos`` for exactly O
output tokens), and prints the simulated figure next to the published one, then the same run in
virtual time (:mod:`generation.engine.replay`):

* A100-40GB, one request at a time, 1024 in / 128 out: about 13.3 ms per output token;
* H100 and H200, ``vllm bench latency`` batch 8, 32 in / 128 out: 997.5 and 833 ms per batch.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

CASES = [  # (name, gpu, batch, prompt tokens, output tokens, what is compared, published value)
    ("A100-40GB, 1 request, 1024 in / 128 out", "A100-40GB", 1, 1024, 128, "tpot_ms", 13.3),
    ("H100, batch 8, 32 in / 128 out", "H100", 8, 32, 128, "batch_ms", 997.5),
    ("H200, batch 8, 32 in / 128 out", "H200", 8, 32, 128, "batch_ms", 833.0),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(gpu: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), MODEL, "--latency-calculator", "step", "--gpu", gpu,
                             "--port", str(port), "--max-model-len", "4096", "--force-dummy-tokenizer",
                             "--disable-log-requests"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server for {gpu} did not start: {proc.stderr.read().decode()[-500:]}")


async def one(client: httpx.AsyncClient, port: int, batch: int, prompt_tokens: int, output_tokens: int,
              salt: int) -> tuple:
    """One streamed completions request of ``batch`` prompts (each its own sequence, admitted
    together, as ``vllm bench latency`` submits its batch); distinct token ids: no prefix hits.
    Returns (send time, {choice index: [arrival time of each token]})."""
    prompts = [[1000 + (salt * 7919 + b * 104729 + i) % 100000 for i in range(prompt_tokens)] for b in range(batch)]
    body = {"model": MODEL, "prompt": prompts if batch > 1 else prompts[0], "max_tokens": output_tokens,
            "ignore_eos": True, "stream": True}
    t0 = time.perf_counter()
    times: dict = {}
    async with client.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                now = time.perf_counter()
                for ch in json.loads(line[6:])["choices"]:
                    if ch["text"]:
                        times.setdefault(ch["index"], []).append(now)
    return t0, times


async def run_case(port: int, batch: int, prompt_tokens: int, output_tokens: int, rounds: int) -> dict:
    async with httpx.AsyncClient(timeout=120) as client:
        await one(client, port, 1, prompt_tokens, 4, salt=0)          # warm-up
        tpots, batches = [], []
        for k in range(rounds):
            t0, times = await one(client, port, batch, prompt_tokens, output_tokens, salt=k + 1)
            batches.append(1000 * (max(ts[-1] for ts in times.values()) - t0))
            for ts in times.values():
                tpots.append(1000 * (ts[-1] - ts[0]) / (len(ts) - 1))
    return {"tpot_ms": sum(tpots) / len(tpots), "batch_ms": sum(batches) / len(batches)}


def virtual(gpu: str, batch: int, prompt_tokens: int, output_tokens: int) -> dict:
    from generation.config.cli import load_config
    from generation.engine.replay import TraceRequest, replay, scheduler_for
    from generation.engine.step_config import resolve_step_settings
    cfg = load_config([MODEL, "--latency-calculator", "step", "--gpu", gpu, "--max-model-len", "4096"])
    st = resolve_step_settings(cfg)
    res = replay(scheduler_for(st, cfg.max_model_len), st.step_time,
                 [TraceRequest(0.0, prompt_tokens, output_tokens) for _ in range(batch)])
    tpot = [1000 * (r.finished_at - r.first_token) / (r.num_output - 1) for r in res.requests]
    return {"tpot_ms": sum(tpot) / len(tpot), "batch_ms": 1000 * res.duration}


def main() -> int:
    rows = []
    for name, gpu, batch, p, o, key, published in CASES:
        port = free_port()
        proc = start(gpu, port)
        try:
            live = asyncio.run(run_case(port, batch, p, o, rounds=3))
        finally:
            proc.terminate()
            proc.wait(10)
        virt = virtual(gpu, batch, p, o)
        rows.append((name, key, published, live[key], virt[key]))
    print(f"{'measurement':42s} {'published':>10s} {'HTTP':>10s} {'err':>7s} {'virtual':>10s} {'err':>7s} {'HTTP/virt':>9s}")
    ok = True
    for name, key, pub, live, virt in rows:
        e1, e2, e3 = live / pub - 1, virt / pub - 1, live / virt - 1
        ok &= abs(e1) <= 0.10 and abs(e2) <= 0.10 and abs(e3) <= 0.05
        unit = "ms/token" if key == "tpot_ms" else "ms/batch"
        print(f"{name:42s} {pub:8.1f}   {live:8.1f}   {100 * e1:+5.1f}%  {virt:8.1f}   {100 * e2:+5.1f}%  {100 * e3:+6.1f}%"
              f"  ({unit})")
    print("within 10% of the measurements and 5% of virtual time:", "yes" if ok else "NO")
    print(json.dumps([dict(zip(("measurement", "unit", "published", "http", "virtual"), r)) for r in rows]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
