"""Server CPU per stream set-up: a burst of N streaming chat requests, as timing_fidelity.py's.

Starts a simulator with a first token far off (``--ttft``, default 3 s), sends N streaming chat
requests at once with ``bench/sse_probe.c`` (each on a new connection, as
``timing_fidelity.py --levels N``), and reads the server's CPU time (``/proc/PID/task/*/schedstat``,
nanoseconds; and user / system from ``/proc/PID/stat``) before the burst and once the burst is set
up and the server idles until the first tokens are due (halfway to them).  What it prints is the
server's CPU per request for accepting, parsing, validating and setting up a stream, with none
of the stream's tokens in it (the issue-32 budget: 1,000 set-ups within a 200 ms TTFT).

    python bench/setup_cost.py [--streams 1000] [--rounds 3] [--against DIR]

With ``--against DIR`` (another checkout) both servers run, alternating which goes first each
round; each line carries the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import loadavg, pids_of, start_server, user_sys     # noqa: E402
from timing_fidelity import build_probe, request_file        # noqa: E402


def run_ns(pid: int) -> int:
    """Nanoseconds on a CPU, every thread of ``pid`` and its children."""
    total = 0
    for p in pids_of(pid):
        for tid in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
            except OSError:
                pass
    return total


def burst(probe: str, pid: int, port: int, n: int, ttft: float, body: bytes, cpus) -> tuple[float, float, float]:
    """(CPU us, user us, system us) per request of one burst's set-up."""
    with tempfile.TemporaryDirectory() as tmp:
        req_file, out_file = request_file(tmp, "127.0.0.1", body)
        ns0, (u0, s0) = run_ns(pid), user_sys(pid)
        client = subprocess.Popen([probe, "127.0.0.1", str(port), str(n), req_file, out_file, "0", "1"],
                                  preexec_fn=(lambda: os.sched_setaffinity(0, {cpus[1]})) if cpus else None)
        time.sleep(ttft / 2)
        ns1, (u1, s1) = run_ns(pid), user_sys(pid)
        client.wait()
    return (ns1 - ns0) / n / 1e3, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ttft", type=float, default=3.0, help="seconds (the burst must be set up in half of it)")
    ap.add_argument("--against", metavar="DIR", help="another checkout, alternating with this one")
    ap.add_argument("--no-pin", dest="pin", action="store_false")
    args = ap.parse_args()
    probe = build_probe()
    if probe is None:
        raise SystemExit("needs a C compiler for bench/sse_probe.c")
    flags = ["--time-to-first-token", f"{args.ttft * 1000:.0f}ms", "--inter-token-latency", "20ms",
             "--worker-connections", "20000"]
    servers = [("this", *start_server(flags))]
    if args.against:
        servers.append(("other", *start_server(flags, os.path.abspath(args.against))))
    cpus = sorted(os.sched_getaffinity(0))[:2] if args.pin and len(os.sched_getaffinity(0)) >= 2 else None
    if cpus:
        for _, proc, _ in servers:
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                os.sched_setaffinity(int(tid), {cpus[0]})
    body = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2, "ignore_eos": True, "stream": True}).encode()
    per: dict = {label: [] for label, _, _ in servers}
    try:
        for _, proc, base in servers:        # warm-up: first-request imports and caches
            burst(probe, proc.pid, int(base.rsplit(":", 1)[1]), min(args.streams, 200), args.ttft, body, cpus)
        for rnd in range(args.rounds):
            for label, proc, base in (servers if rnd % 2 == 0 else servers[::-1]):
                cpu, user, system = burst(probe, proc.pid, int(base.rsplit(":", 1)[1]), args.streams, args.ttft,
                                          body, cpus)
                per[label].append(cpu)
                print(f"round {rnd + 1} {label:5s}: {cpu:6.1f} us CPU per set-up (user {user:5.0f}, system "
                      f"{system:4.0f}; {args.streams} streams)  load {loadavg()}", flush=True)
    finally:
        for _, proc, _ in servers:
            proc.terminate()
            proc.wait()
    for label, xs in per.items():
        print(f"{label}: median {statistics.median(xs):.1f} us, best {min(xs):.1f} us per set-up")
    if args.against:
        paired = statistics.median(a / b for a, b in zip(per["this"], per["other"]))
        print(f"this over other: {statistics.median(per['this']) / statistics.median(per['other']):.3f} "
              f"(paired {paired:.3f})")


if __name__ == "__main__":
    main()
