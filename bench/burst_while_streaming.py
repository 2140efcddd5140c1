"""A burst of requests while other streams run: do the running streams keep their pace?

Starts the simulator (TTFT 200 ms, ITL 20 ms) pinned to one CPU and, with bench/sse_probe.c on
the other:

* A: ``--running`` streams of ``--running-tokens`` tokens (5 s at the default 250), opened at
  once;
* B, 0.5 s later: ``--burst`` streams of 20 tokens run twice on the same keep-alive
  connections, the second wave sent at once when every first-wave stream has ended (a
  fixed-length benchmark at a fixed concurrency, sharing the server with A).

It prints the gaps between A's tokens that end in the 0.4 s after B's second wave was sent
(p99 and max: what the burst did to the running streams; 20 ms when it did nothing), A's ITL
p99 overall, and B's second-wave TTFT.  Issue 13: requests on open keep-alive connections take
turns with due tokens (server/arrivals.py).

    python bench/burst_while_streaming.py [--running 300] [--burst 300]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import start_server  # noqa: E402
from timing_fidelity import build_probe, percentile, probe_streams  # noqa: E402


def chat_body(tokens: int) -> bytes:
    return json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": tokens, "ignore_eos": True, "stream": True}).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--running", type=int, default=300, help="streams already running (A)")
    ap.add_argument("--running-tokens", type=int, default=250)
    ap.add_argument("--burst", type=int, default=300, help="keep-alive streams arriving at once (B)")
    args = ap.parse_args()
    probe = build_probe()
    if probe is None:
        sys.exit("needs a C compiler to build bench/sse_probe.c")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("needs 2 CPUs: the server on one, the client on the other")
    proc, base = start_server(["--time-to-first-token", "200ms", "--inter-token-latency", "20ms",
                               "--worker-connections", "20000", "--max-model-len", "8192"])
    try:
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            os.sched_setaffinity(int(tid), {cpus[0]})
        host, port = "127.0.0.1", int(base.rsplit(":", 1)[1])
        out = {}
        running = threading.Thread(target=lambda: out.__setitem__(
            "A", probe_streams(probe, host, port, args.running, chat_body(args.running_tokens), cpus[1])))
        running.start()
        time.sleep(0.5)
        out["B"] = probe_streams(probe, host, port, args.burst, chat_body(20), cpus[1], 0, 2)
        running.join()
    finally:
        proc.terminate()
        proc.wait()
    sent = min(t for t, _ in out["B"])
    gaps = [b - a for _, ev in out["A"] for a, b in zip(ev[1:], ev[2:])]
    window = [b - a for _, ev in out["A"] for a, b in zip(ev[1:], ev[2:]) if sent <= b <= sent + 0.4]
    ttft = [ev[1] - t for t, ev in out["B"] if len(ev) > 1]
    print(f"A ({args.running} running streams), gaps ending in the 0.4 s after B's second wave: "
          f"p99 {percentile(window, 0.99) * 1e3:.1f} ms, max {max(window, default=0) * 1e3:.1f} ms "
          f"(ITL 20 ms) | A ITL p99 overall {percentile(gaps, 0.99) * 1e3:.1f} ms | "
          f"B ({args.burst} keep-alive requests at once) TTFT p50 {percentile(ttft, 0.5) * 1e3:.1f} "
          f"p99 {percentile(ttft, 0.99) * 1e3:.1f} ms (TTFT 200 ms) | load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
