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

Beside each it prints the clients' mean TTFT through HTTP against virtual time's, and a last run
of 64 concurrent streams (H100, 512 in / 128 out, a closed loop) compares the server's own TTFT
histogram (``vllm:time_to_first_token_seconds``, sum / count over the run) with the TTFT its
clients measured.  Targets: HTTP within 5% of virtual time on TTFT and TPOT (at load <= 2), the
histogram within 10% of the clients.
"""
from __future__ import annotations

import argparse
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


async def one(port: int, batch: int, prompt_tokens: int, output_tokens: int, salt: int, conns: list) -> tuple:
    """One streamed completions request of ``batch`` prompts (each its own sequence, admitted
    together, as ``vllm bench latency`` submits its batch); distinct token ids: no prefix hits.
    Sent with :func:`raw_stream`'s lean client (its bytes in one write, the server's SSE lines
    read as they come), so that the times are the server's, not a client library's.
    Returns (send time, {choice index: [arrival time of each token]})."""
    prompts = [[1000 + (salt * 7919 + b * 104729 + i) % 100000 for i in range(prompt_tokens)] for b in range(batch)]
    body = json.dumps({"model": MODEL, "prompt": prompts if batch > 1 else prompts[0], "max_tokens": output_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    times: dict = {}

    def on_line(line: bytes, now: float) -> None:
        if line.startswith(b"data: {"):
            for ch in json.loads(line[6:])["choices"]:
                if ch["text"]:
                    times.setdefault(ch["index"], []).append(now)
    t0, _ = await raw_stream(port, body, conns, on_line)
    return t0, times


async def run_case(port: int, batch: int, prompt_tokens: int, output_tokens: int, rounds: int) -> dict:
    conns: list = []
    await one(port, 1, prompt_tokens, 4, 0, conns)          # warm-up
    tpots, batches, ttfts = [], [], []
    for k in range(rounds):
        t0, times = await one(port, batch, prompt_tokens, output_tokens, k + 1, conns)
        batches.append(1000 * (max(ts[-1] for ts in times.values()) - t0))
        for ts in times.values():
            tpots.append(1000 * (ts[-1] - ts[0]) / (len(ts) - 1))
            ttfts.append(1000 * (ts[0] - t0))
    for _, writer in conns:
        writer.close()
    return {"tpot_ms": sum(tpots) / len(tpots), "batch_ms": sum(batches) / len(batches),
            "ttft_ms": sum(ttfts) / len(ttfts)}


def ttft_histogram(port: int) -> tuple[float, float]:
    """(sum, count) of the server's ``vllm:time_to_first_token_seconds``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            total += float(line.split()[-1])
        elif line.startswith("vllm:time_to_first_token_seconds_count"):
            count += float(line.split()[-1])
    return total, count


async def raw_stream(port: int, body: bytes, conns: list, on_line=None) -> tuple[float, float]:
    """One streamed request over a kept-alive raw connection (from ``conns``, or a new one):
    the request's bytes in one write, read to the chunked end; ``on_line(line, time)`` for each
    SSE line when given.  Returns (send time, first data chunk's arrival).  httpx is not used here: with 64 streams in one process its request left
    50-600 ms after the call (the send time measured that, not the server; traced by matching
    the client's monotonic clock with the server's arrival stamps), while this client's bytes
    reach the server 7 ms after its send time on average."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    reader, writer = conns.pop() if conns else await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    writer.write(head + body)
    await writer.drain()
    first, buf, pending = None, b"", b""
    while True:
        data = await reader.read(65536)
        if not data:
            raise ConnectionError("the server closed the stream")
        now = time.perf_counter()
        buf = buf[-8:] + data
        if first is None and b"data: {" in data:
            first = now
        if on_line is not None:          # chunk-size lines are not SSE lines: they never start "data: "
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                on_line(line.rstrip(b"\r"), now)
        if buf.endswith(b"0\r\n\r\n"):
            break
    conns.append((reader, writer))
    return t0, first


async def streams(port: int, concurrency: int, requests: int, prompt_tokens: int, output_tokens: int) -> dict:
    """A closed loop of ``concurrency`` streams (:func:`raw_stream`); the clients' mean TTFT and
    the server's."""
    s0, c0 = ttft_histogram(port)
    ttfts: list = []
    sem = asyncio.Semaphore(concurrency)
    conns: list = []

    async def go(k):
        prompt = [1000 + ((1000 + k) * 7919 + i) % 100000 for i in range(prompt_tokens)]
        body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True,
                           "stream": True}).encode()
        async with sem:
            t0, first = await raw_stream(port, body, conns)
            ttfts.append(1000 * (first - t0))
    await asyncio.gather(*(go(k) for k in range(requests)))
    for _, writer in conns:
        writer.close()
    s1, c1 = ttft_histogram(port)
    return {"clients_ttft_ms": sum(ttfts) / len(ttfts), "server_ttft_ms": 1000 * (s1 - s0) / max(c1 - c0, 1)}


def virtual(gpu: str, batch: int, prompt_tokens: int, output_tokens: int) -> dict:
    from generation.config.cli import load_config
    from generation.engine.replay import TraceRequest, replay, scheduler_for
    from generation.engine.step_config import resolve_step_settings
    cfg = load_config([MODEL, "--latency-calculator", "step", "--gpu", gpu, "--max-model-len", "4096"])
    st = resolve_step_settings(cfg)
    res = replay(scheduler_for(st, cfg.max_model_len), st.step_time,
                 [TraceRequest(0.0, prompt_tokens, output_tokens) for _ in range(batch)])
    tpot = [1000 * (r.finished_at - r.first_token) / (r.num_output - 1) for r in res.requests]
    ttft = [1000 * (res.times(r)[0] - r.arrival) for r in res.requests]
    return {"tpot_ms": sum(tpot) / len(tpot), "batch_ms": 1000 * max(res.times(r)[1] for r in res.requests),
            "ttft_ms": sum(ttft) / len(ttft)}


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
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
        rows.append((name, key, published, live[key], virt[key], live["ttft_ms"], virt["ttft_ms"]))
    port = free_port()
    proc = start("H100", port)
    try:
        many = asyncio.run(streams(port, 64, 256, 512, 128))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"{'measurement':42s} {'published':>10s} {'HTTP':>10s} {'err':>7s} {'virtual':>10s} {'err':>7s} {'HTTP/virt':>9s}"
          f" {'TTFT HTTP':>10s} {'virtual':>8s} {'HTTP/virt':>9s}")
    ok = True
    for name, key, pub, live, virt, t_live, t_virt in rows:
        e1, e2, e3, e4 = live / pub - 1, virt / pub - 1, live / virt - 1, t_live / t_virt - 1
        ok &= abs(e1) <= 0.10 and abs(e2) <= 0.10 and abs(e3) <= 0.05 and abs(e4) <= 0.05
        unit = "ms/token" if key == "tpot_ms" else "ms/batch"
        print(f"{name:42s} {pub:8.1f}   {live:8.1f}   {100 * e1:+5.1f}%  {virt:8.1f}   {100 * e2:+5.1f}%  {100 * e3:+6.1f}%"
              f"  {t_live:8.1f}  {t_virt:8.1f}  {100 * e4:+6.1f}%  ({unit}; TTFT ms)")
    e5 = many["server_ttft_ms"] / many["clients_ttft_ms"] - 1
    ok &= abs(e5) <= 0.10
    print(f"64 streams, H100, 512 in / 128 out: clients' mean TTFT {many['clients_ttft_ms']:.1f} ms, the server's "
          f"histogram {many['server_ttft_ms']:.1f} ms ({100 * e5:+.1f}%)")
    load = os.getloadavg()[0]
    print(f"within 10% of the measurements, 5% of virtual time, the histogram within 10% of the clients: "
          f"{'yes' if ok else 'NO'} (load average {load:.1f})")
    print(json.dumps([dict(zip(("measurement", "unit", "published", "http", "virtual", "ttft_http", "ttft_virtual"), r))
                      for r in rows] + [many]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
