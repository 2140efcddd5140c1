"""Throughput benchmark: non-streaming requests/s and streaming SSE chunks/s.

Starts a simulator with zero latency (or uses ``--url`` of a running one) and drives it with
``wrk`` (Debian package ``wrk``), which is fast enough not to be the bottleneck.

    python bench/throughput.py                 # starts its own server on a free port
    python bench/throughput.py --url http://127.0.0.1:8000 --duration 15
    python bench/throughput.py --against /tmp/base --rounds 4   # this checkout and another, alternating

Prints requests/s for small non-streaming chat and completions requests, and chunks/s for
streaming chat requests (each with ``max_tokens`` content chunks, the last carrying the finish
reason, plus the role and [DONE] frames), each with the server's CPU per request (user + system,
access log included) when it started the server.
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


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages, for every printed figure."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def start_server(extra: list[str], root: str = ROOT) -> tuple[subprocess.Popen, str]:
    """The simulator of the checkout at ``root`` on a free port: ``(process, base URL)``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(root, "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             "--max-num-seqs", "100000", "--max-waiting-queue-length", "100000", *extra],
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


def pids_of(pid: int) -> list[int]:
    """``pid`` and its children (``/proc``): the server, or gunicorn's arbiter and its worker."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            pids += [int(p) for p in fh.read().split()]
    except OSError:
        pass
    return pids


def user_sys(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` and its children (``/proc``; a process that is
    gone counts 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    u = s = 0.0
    for p in pids_of(pid):
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        u += int(fields[11]) / tick
        s += int(fields[12]) / tick
    return u, s


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (:func:`user_sys`)."""
    return sum(user_sys(pid))


def wrk(base: str, path: str, body: dict, duration: int, connections: int, pid: int | None = None) -> dict:
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                 f"wrk.body = [[{json.dumps(body)}]]\n"
                 "done = function(summary, latency, requests)\n"
                 '  io.write(string.format("NON2XX %d\\n", summary.errors.status))\nend\n')
    script.close()
    c0 = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s", "-s", script.name,
                          "--latency", base + path], capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - c0 if pid else None
    os.unlink(script.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+\w+)", out).group(1)
    p99 = re.search(r"99%\s+([\d.]+\w+)", out).group(1)
    non2xx = int(re.search(r"NON2XX (\d+)", out).group(1))
    n = int(re.search(r"(\d+) requests in", out).group(1))
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": non2xx,
            "cpu_us": cpu / max(n, 1) * 1e6 if cpu is not None else None}


def _cpu(r: dict) -> str:
    """The server's CPU per request (whole process, access log included), when it is known."""
    return f"  server CPU {r['cpu_us']:5.0f} us/request" if r.get("cpu_us") is not None else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running simulator (default: start one)")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--stream-tokens", type=int, default=100)
    ap.add_argument("--against", metavar="DIR", help="another checkout: run it too, alternating with this one")
    ap.add_argument("--rounds", type=int, default=1, help="with --against: alternating rounds")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    if args.against:
        servers = [("this", *start_server([])), ("other", *start_server([], os.path.abspath(args.against)))]
        try:
            for rnd in range(args.rounds):
                for label, server, base in (servers if rnd % 2 == 0 else servers[::-1]):
                    print(f"-- round {rnd + 1}, {label} checkout ({ROOT if label == 'this' else args.against}), "
                          f"load {loadavg()}", flush=True)
                    run_workloads(base, args, server.pid)
        finally:
            for _, proc, _ in servers:
                proc.terminate()
                proc.wait()
        return
    proc = None
    base = args.url
    if not base:
        proc, base = start_server([])
    try:
        print(f"load {loadavg()}", flush=True)
        run_workloads(base, args, proc.pid if proc else None)
    finally:
        if proc:
            proc.terminate()
            proc.wait()


def run_workloads(base: str, args, pid: int | None = None) -> None:
    msg = [{"role": "user", "content": "Hello, how are you today?"}]
    r = wrk(base, "/v1/chat/completions", {"model": "test-model", "messages": msg, "max_tokens": 10},
            args.duration, args.connections, pid)
    print(f"non-streaming chat:        {r['rps']:9.0f} requests/s   p50 {r['p50']:>8}  p99 {r['p99']:>8}"
          f"  non-2xx {r['non2xx']}{_cpu(r)}")
    r = wrk(base, "/v1/completions", {"model": "test-model", "prompt": "Hello there", "max_tokens": 10},
            args.duration, args.connections, pid)
    print(f"non-streaming completions: {r['rps']:9.0f} requests/s   p50 {r['p50']:>8}  p99 {r['p99']:>8}"
          f"  non-2xx {r['non2xx']}{_cpu(r)}")
    n = args.stream_tokens
    r = wrk(base, "/v1/chat/completions", {"model": "test-model", "messages": msg, "max_tokens": n,
                                           "ignore_eos": True, "stream": True}, args.duration, args.connections, pid)
    chunks = r["rps"] * (n + 2)         # the role chunk, n tokens (the last with the finish), [DONE]
    print(f"streaming chat ({n} tok):  {chunks:9.0f} chunks/s     ({r['rps']:.0f} streams/s, non-2xx {r['non2xx']})"
          f"{_cpu(r)}   load {loadavg()}", flush=True)


if __name__ == "__main__":
    main()
