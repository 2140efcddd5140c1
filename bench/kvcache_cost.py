"""Cost of ``--enable-kvcache`` per request, for repeated 1k-token prompts (issue 13 target:
< 1.3x a request without it).

Drives the Flask app in-process (no sockets, zero latencies) with the same request N times,
with and without the KV cache, alternating rounds, and prints the CPU time per request and the
ratio.  Two prompt kinds: 1,024 token ids (completions) and a ~1k-token text chat.

    python bench/kvcache_cost.py [--requests 2000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def make_client(kv: bool):
    from app import create_app
    from generation.config.cli import load_config
    flags = ["--model", "m", "--seed", "1", "--max-model-len", "4096"]
    env = {}
    if kv:
        flags += ["--enable-kvcache", "--zmq-endpoint", "", "--kv-cache-size", "4096"]
        env["POD_IP"] = "10.0.0.1"
    return create_app(load_config(flags, env=env)).test_client()


def run(client, body, path, n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        r = client.post(path, json=body)
        assert r.status_code == 200, r.data
    return (time.process_time() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ids_body = {"model": "m", "prompt": list(range(1000, 2024)), "max_tokens": 1}
    words = " ".join(f"word{i}" for i in range(1000))
    chat_body = {"model": "m", "messages": [{"role": "user", "content": words}], "max_tokens": 1}
    clients = {False: make_client(False), True: make_client(True)}
    print(f"load {os.getloadavg()[0]:.2f}; {args.requests} requests x {args.rounds} rounds; CPU us/request (median)")
    print(f"{'prompt':<24}{'no kv':>10}{'kv':>10}{'ratio':>8}  target < 1.30")
    for name, body, path in (("1024 token ids", ids_body, "/v1/completions"),
                             ("~1k-token chat", chat_body, "/v1/chat/completions")):
        times = {False: [], True: []}
        for kv in (False, True):
            run(clients[kv], body, path, 50)                    # warm-up (and the first miss)
        for _ in range(args.rounds):
            for kv in (False, True):
                times[kv].append(run(clients[kv], body, path, args.requests))
        a, b = statistics.median(times[False]), statistics.median(times[True])
        print(f"{name:<24}{a * 1e6:>10.0f}{b * 1e6:>10.0f}{b / a:>8.2f}  {'ok' if b / a < 1.3 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
