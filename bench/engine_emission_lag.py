"""Step mode in real time: the server's emission lag with N concurrent streams (issue 20's
target: p99 under 2 ms at 256 streams).

    python bench/engine_emission_lag.py [--streams 256] [--tokens 128] [--gpu H100]

Starts ``python app.py meta-llama/Llama-3.1-8B-Instruct --latency-calculator step`` on a free
port, opens N streaming completions at once with bench/sse_probe.c (an epoll client that keeps
up), and prints the server's own ``vllm_sim:token_emission_lag_seconds`` (how late each token
left after its step ended) as p50 / p99 / max bucket, the steps' inter-token latency, and the
engine's step count, read from ``/metrics``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from timing_fidelity import build_probe     # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def hist(text: str, name: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            out.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    return out


def quantile(buckets: list, q: float) -> float:
    total = buckets[-1][1]
    for le, c in buckets:
        if c >= q * total:
            return le
    return float("inf")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gpu", default="H100")
    a = ap.parse_args()
    exe = build_probe()
    if exe is None:
        raise SystemExit("needs a C compiler for bench/sse_probe.c")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), MODEL, "--latency-calculator", "step",
                             "--gpu", a.gpu, "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "4096",
                             "--force-dummy-tokenizer", "--disable-log-requests"],
                            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        out = ROOT / "bench" / "out"
        out.mkdir(exist_ok=True)
        results = []
        for k in range(2):                   # the first run warms the server up
            body = json.dumps({"model": MODEL, "prompt": [1000 + i for i in range(a.prompt_tokens)],
                               "max_tokens": a.tokens, "ignore_eos": True, "stream": True})
            req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}")
            req_file, out_file = out / "lag_req.txt", out / "lag_out.txt"
            req_file.write_text(req)
            before = httpx.get(base + "/metrics").text
            r = subprocess.run([exe, "127.0.0.1", str(port), str(a.streams), str(req_file), str(out_file)],
                               capture_output=True, timeout=300)
            if r.returncode:
                raise SystemExit(f"sse_probe failed: {r.stderr.decode()[-300:]}")
            after = httpx.get(base + "/metrics").text
            results.append((before, after))
        before, after = results[-1]
        lag = [(le, c - c0) for (le, c), (_, c0) in zip(hist(after, "vllm_sim:token_emission_lag_seconds"),
                                                      hist(before, "vllm_sim:token_emission_lag_seconds"))]
        itl = [(le, c - c0) for (le, c), (_, c0) in zip(hist(after, "vllm:inter_token_latency_seconds"),
                                                      hist(before, "vllm:inter_token_latency_seconds"))]
        print(f"{a.streams} streams x {a.tokens} tokens, step mode on {a.gpu}: {int(lag[-1][1])} tokens")
        print(f"  emission lag (server): p50 <= {1000 * quantile(lag, 0.5):.1f} ms, "
              f"p99 <= {1000 * quantile(lag, 0.99):.1f} ms, p99.9 <= {1000 * quantile(lag, 0.999):.1f} ms")
        print(f"  inter-token latency (the steps): p50 <= {1000 * quantile(itl, 0.5):.1f} ms, "
              f"p99 <= {1000 * quantile(itl, 0.99):.1f} ms")
        print(f"  load average: {os.getloadavg()[0]:.2f}")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
