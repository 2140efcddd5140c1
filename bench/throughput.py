"""Throughput benchmark: non-streaming requests/s and streaming SSE chunks/s.

Starts a simulator with zero latency (or uses ``--url`` of a running one) and drives it with
``wrk`` (Debian package ``wrk``), which is fast enough not to be the bottleneck.

    python bench/throughput.py                 # starts its own server on a free port
    python bench/throughput.py --url http://127.0.0.1:8000 --duration 15

Prints requests/s for small non-streaming chat and completions requests, and chunks/s for
streaming chat requests (each with ``max_tokens`` content chunks plus role, finish and
[DONE] frames).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             "--max-num-seqs", "100000", "--max-waiting-queue-length", "100000", *extra],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


def wrk(base: str, path: str, body: dict, duration: int, connections: int) -> dict:
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                 f"wrk.body = [[{json.dumps(body)}]]\n"
                 "done = function(summary, latency, requests)\n"
                 '  io.write(string.format("NON2XX %d\\n", summary.errors.status))\nend\n')
    script.close()
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s", "-s", script.name,
                          "--latency", base + path], capture_output=True, text=True).stdout
    os.unlink(script.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+\w+)", out).group(1)
    p99 = re.search(r"99%\s+([\d.]+\w+)", out).group(1)
    non2xx = int(re.search(r"NON2XX (\d+)", out).group(1))
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": non2xx}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running simulator (default: start one)")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--stream-tokens", type=int, default=100)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    proc = None
    base = args.url
    if not base:
        proc, base = start_server([])
    try:
        msg = [{"role": "user", "content": "Hello, how are you today?"}]
        r = wrk(base, "/v1/chat/completions", {"model": "test-model", "messages": msg, "max_tokens": 10},
                args.duration, args.connections)
        print(f"non-streaming chat:        {r['rps']:9.0f} requests/s   p50 {r['p50']:>8}  p99 {r['p99']:>8}"
              f"  non-2xx {r['non2xx']}")
        r = wrk(base, "/v1/completions", {"model": "test-model", "prompt": "Hello there", "max_tokens": 10},
                args.duration, args.connections)
        print(f"non-streaming completions: {r['rps']:9.0f} requests/s   p50 {r['p50']:>8}  p99 {r['p99']:>8}"
              f"  non-2xx {r['non2xx']}")
        n = args.stream_tokens
        r = wrk(base, "/v1/chat/completions", {"model": "test-model", "messages": msg, "max_tokens": n,
                                               "ignore_eos": True, "stream": True}, args.duration, args.connections)
        chunks = r["rps"] * (n + 3)
        print(f"streaming chat ({n} tok):  {chunks:9.0f} chunks/s     ({r['rps']:.0f} streams/s, non-2xx {r['non2xx']})")
    finally:
        if proc:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
