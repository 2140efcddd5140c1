"""The simulator against a bare Flask + gunicorn gevent app, side by side (issue 13).

Starts both servers itself, captures the simulator's exact response bytes for each workload and
has the bare app return those same bytes (one write), then alternates the two under ``wrk``
(``-t1 -c32``) for ``--rounds`` rounds and prints the median ratio of each workload with its
target:

* non-streaming chat and completions, requests/s (target >= 1.1x bare, issue 32);
* streaming with every token due at once, 16 and 256 tokens, chunks/s (target >= 0.95x bare);
* a 2-token stream on a new connection per request (``Connection: close``), requests/s and the
  server's CPU per request: what a burst of new clients costs (no target: it shows that the
  stack's own accept and parse dominate, see the README's limits);

plus, for the simulator alone:

* seconds from ``python app.py`` to the first ``/health`` 200 (target < 1 s on an idle machine);
* ``--enable-kvcache`` cost: time per request with it over without, repeated 1k-token prompts
  (target < 1.3x);
* ``/metrics`` scrape time (ms, target < 10 ms) on a fresh server and after 2,000 requests over
  100 LoRA adapters.

The machine's load average is printed with every round: figures from a busy machine are not
comparable.  With ``--against DIR`` (another checkout, e.g. ``git worktree add /tmp/base main``)
its simulator runs in the same rounds, alternating with this one and the bare app, and a second
table gives this checkout over that one: throughput and CPU per request (the CPU figure moves
much less with the machine's load; ``paired``, the median over rounds of the two passes' CPU
ratio, each pair measured back to back, drifts least on a machine whose speed changes).  Needs ``wrk`` (Debian package ``wrk``).

    python bench/compare_bare.py [--duration 5] [--rounds 3] [--connections 32] [--against DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import ROOT, cpu_seconds, free_port  # noqa: E402

BARE_APP = r'''
import json, os
from flask import Flask, Response, request
BODIES = json.load(open(os.environ["BARE_BODIES"]))
app = Flask("bare")

def reply(key):
    request.get_data()
    b = BODIES[key]
    return Response(b["body"].encode(), 200, content_type=b["content_type"])

for key in BODIES:
    app.add_url_rule("/" + key, key, (lambda k: lambda: reply(k))(key), methods=["POST"])
'''

MSG = [{"role": "user", "content": "Hello, how are you today?"}]
WORKLOADS = {       # name -> (path, body)
    "chat": ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 10}),
    "completions": ("/v1/completions", {"model": "test-model", "prompt": "Hello there", "max_tokens": 10}),
    "stream16": ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 16,
                                          "ignore_eos": True, "stream": True}),
    "stream256": ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 256,
                                           "ignore_eos": True, "stream": True}),
    "newconn": ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 2,
                                         "ignore_eos": True, "stream": True}),
}
NEW_CONNECTION = {"newconn"}      # workloads sent with "Connection: close"
# No access log: the bare app writes none either (its cost is measured apart, with the extras).
SIM_FLAGS = ["--max-num-seqs", "100000", "--max-waiting-queue-length", "100000", "--seed", "1",
             "--disable-log-requests"]


def wait_health(base: str, proc, timeout: float = 30) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return time.monotonic() - t0
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("server did not start")


def start_sim(extra=(), model="test-model", root: str = ROOT) -> tuple:
    """The simulator of the checkout at ``root``: ``(process, base URL, seconds to /health)``."""
    port = free_port()
    t0 = time.monotonic()
    env = {**os.environ, "POD_IP": os.environ.get("POD_IP", "127.0.0.1")}     # --enable-kvcache needs it
    proc = subprocess.Popen([sys.executable, os.path.join(root, "app.py"), "--model", model, "--port", str(port),
                             "--host", "127.0.0.1", *SIM_FLAGS, *extra], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_health(base, proc)
    return proc, base, time.monotonic() - t0


def start_bare(bodies: dict, tmp: str) -> tuple:
    with open(os.path.join(tmp, "bare_app.py"), "w") as fh:
        fh.write(BARE_APP + '\n@app.get("/health")\ndef health():\n    return ""\n')
    with open(os.path.join(tmp, "bodies.json"), "w") as fh:
        json.dump(bodies, fh)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-k", "gevent", "-w", "1", "--worker-connections",
                             "10000", "--keep-alive", "5", "--backlog", "4096", "--log-level", "warning",
                             "-b", f"127.0.0.1:{port}", "bare_app:app"],
                            cwd=tmp, env={**os.environ, "BARE_BODIES": os.path.join(tmp, "bodies.json")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_health(base, proc)
    return proc, base


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def capture(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return {"body": r.read().decode(), "content_type": r.headers["Content-Type"]}


def lua_script(tmp: str, body: dict | None = None, bodies: list | None = None, close: bool = False) -> str:
    """A wrk script POSTing ``body`` (or cycling through ``bodies``) and reporting non-2xx;
    ``close``: a new connection per request."""
    path = os.path.join(tmp, f"s{time.monotonic_ns()}.lua")
    with open(path, "w") as fh:
        fh.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        if close:
            fh.write('wrk.headers["Connection"] = "close"\n')
        if bodies:
            fh.write("bodies = {" + ",".join(f"[[{json.dumps(b)}]]" for b in bodies) + "}\ni = 0\n"
                     "request = function()\n  i = i % #bodies + 1\n"
                     "  return wrk.format(nil, nil, nil, bodies[i])\nend\n")
        else:
            fh.write(f"wrk.body = [[{json.dumps(body)}]]\n")
        fh.write('done = function(summary, latency, requests)\n'
                 '  io.write(string.format("NON2XX %d\\n", summary.errors.status))\nend\n')
    return path


def wrk(url: str, script: str, duration: float, connections: int, pid: int | None = None):
    """Requests/s, or ``(requests/s, server CPU us per request)`` when ``pid`` is given.  CPU per
    request depends much less on what else the machine runs than requests/s does."""
    c0 = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{int(duration)}s", "-s", script, url],
                         capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"NON2XX (\d+)", out)
    if not m or (bad and int(bad.group(1))):
        raise SystemExit(f"wrk failed on {url}:\n{out}")
    if not pid:
        return float(m.group(1))
    n = int(re.search(r"(\d+) requests in", out).group(1))
    return float(m.group(1)), (cpu_seconds(pid) - c0) / max(n, 1) * 1e6


def scrape_ms(base: str, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        urllib.request.urlopen(base + "/metrics").read()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--only", nargs="*", default=None, help="workloads (default: all)")
    ap.add_argument("--skip-extras", action="store_true", help="only the ratio table")
    ap.add_argument("--against", metavar="DIR", help="another checkout: its simulator alternates with this one")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    print(f"load average at start: {loadavg()}  ({os.cpu_count()} CPUs)", flush=True)
    tmp = tempfile.mkdtemp(prefix="compare_bare_")
    names = args.only or list(WORKLOADS)
    sim, sim_base, _ = start_sim()
    bodies = {n: capture(sim_base, *WORKLOADS[n]) for n in names}
    chunks = {n: 1 if n in NEW_CONNECTION else bodies[n]["body"].count("data: ") or 1 for n in names}
    other = start_sim(root=os.path.abspath(args.against))[:2] if args.against else None
    bare, bare_base = start_bare(bodies, tmp)
    scripts = {n: lua_script(tmp, WORKLOADS[n][1], close=n in NEW_CONNECTION) for n in names}
    who_all = ("sim", "other", "bare") if other else ("sim", "bare")
    rates = {n: {w: [] for w in who_all} for n in names}
    cpu = {n: {w: [] for w in who_all} for n in names}
    try:
        for rnd in range(args.rounds):
            for n in names:
                runs = [("sim", sim_base + WORKLOADS[n][0], sim.pid), ("bare", bare_base + "/" + n, bare.pid)]
                if other:
                    runs.insert(1, ("other", other[1] + WORKLOADS[n][0], other[0].pid))
                if rnd % 2:
                    runs.reverse()      # alternate which goes first: a load that drifts favours neither
                for who, url, pid in runs:
                    rps, us = wrk(url, scripts[n], args.duration, args.connections, pid)
                    rates[n][who].append(rps)
                    cpu[n][who].append(us)
            print(f"round {rnd + 1}/{args.rounds} done, load {loadavg()}: "
                  + ", ".join(f"{n} {rates[n]['sim'][-1] / rates[n]['bare'][-1]:.2f}x bare" for n in names), flush=True)
    finally:
        stop(bare)
        stop(sim)
        if other:
            stop(other[0])
    print(f"\n{'workload':<12}{'sim':>10}{'bare':>10}{'ratio':>7}  target {'unit':<9}"
          f"{'CPU us/req sim':>15}{'bare':>7}{'ratio':>7}   per-round ratios")
    for n in names:
        s, b = statistics.median(rates[n]["sim"]), statistics.median(rates[n]["bare"])
        cs, cb = statistics.median(cpu[n]["sim"]), statistics.median(cpu[n]["bare"])
        unit = "chunks/s" if n.startswith("stream") else "req/s"
        target = "-" if n in NEW_CONNECTION else ">=0.95" if n.startswith("stream") else ">=1.1"
        ratios = [x / y for x, y in zip(rates[n]["sim"], rates[n]["bare"])]
        print(f"{n:<12}{s * chunks[n]:>10.0f}{b * chunks[n]:>10.0f}{s / b:>7.2f}  {target:<7}{unit:<9}"
              f"{cs:>15.0f}{cb:>7.0f}{cb / cs:>7.2f}   {' '.join(f'{r:.2f}' for r in ratios)}")
    if other:
        print(f"\nthis checkout over {args.against} (same rounds, alternating):")
        print(f"{'workload':<12}{'rate ratio':>11}{'CPU us/req':>12}{'other':>7}{'ratio':>7}"
              f"{'best CPU':>10}{'other':>7}{'ratio':>7}{'paired':>8}   per-round rate ratios")
        for n in names:
            s, o = statistics.median(rates[n]["sim"]), statistics.median(rates[n]["other"])
            cs, co = statistics.median(cpu[n]["sim"]), statistics.median(cpu[n]["other"])
            bs, bo = min(cpu[n]["sim"]), min(cpu[n]["other"])      # the quietest pass of each
            # each round's two passes ran back to back: the median of their ratios drifts least
            paired = statistics.median(x / y for x, y in zip(cpu[n]["sim"], cpu[n]["other"]))
            ratios = [x / y for x, y in zip(rates[n]["sim"], rates[n]["other"])]
            print(f"{n:<12}{s / o:>11.2f}{cs:>12.0f}{co:>7.0f}{cs / co:>7.2f}{bs:>10.0f}{bo:>7.0f}{bs / bo:>7.2f}"
                  f"{paired:>8.2f}   {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"load average after the rounds: {loadavg()}")
    if args.skip_extras:
        return

    starts = []                     # seconds from the spawn to the first /health 200
    for _ in range(3):
        proc, base, elapsed = start_sim()
        starts.append(elapsed)
        stop(proc)
    print(f"\n/health after start: {min(starts):.2f} s best, {statistics.median(starts):.2f} s median  (target < 1 s)")

    chat_path, chat_body = WORKLOADS["chat"]
    script = lua_script(tmp, chat_body)
    logged = {}
    for label, flags in (("off", SIM_FLAGS), ("on", [f for f in SIM_FLAGS if f != "--disable-log-requests"])):
        port = free_port()
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "app.py"), "--model", "test-model", "--port",
                                 str(port), "--host", "127.0.0.1", *flags], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        wait_health(base, proc)
        try:
            logged[label] = wrk(base + chat_path, script, args.duration, args.connections, proc.pid)
        finally:
            stop(proc)
    print(f"access log (vLLM's default): chat {logged['on'][0]:.0f} vs {logged['off'][0]:.0f} req/s, "
          f"{logged['on'][1] - logged['off'][1]:+.0f} us CPU per request")

    prompt = " ".join(f"word{i % 50}" for i in range(1000))
    kv_body = {"model": "test-model", "prompt": prompt, "max_tokens": 1}
    script = lua_script(tmp, kv_body)
    per = {}
    for label, extra in (("off", []), ("on", ["--enable-kvcache"])):
        proc, base, _ = start_sim(extra)
        try:
            per[label] = statistics.median(wrk(base + "/v1/completions", script, args.duration, args.connections)
                                           for _ in range(args.rounds))
        finally:
            stop(proc)
    print(f"--enable-kvcache: {per['on']:.0f} vs {per['off']:.0f} req/s, cost {per['off'] / per['on']:.2f}x "
          f"per request (target < 1.3x)")

    loras = [json.dumps({"name": f"lora{i}", "path": f"/lora{i}"}) for i in range(100)]
    proc, base, _ = start_sim(["--max-loras", "4", "--lora-modules", *loras])
    try:
        fresh = scrape_ms(base)
        lora_bodies = [{"model": f"lora{i}", "messages": MSG, "max_tokens": 2} for i in range(100)]
        script = lua_script(tmp, bodies=lora_bodies)
        subprocess.run(["wrk", "-t", "1", "-c", "8", "-d", "3s", "-s", script, base + "/v1/chat/completions"],
                       capture_output=True)
        after = scrape_ms(base)
        series = urllib.request.urlopen(base + "/metrics").read().decode().count("vllm:lora_requests_info{")
    finally:
        stop(proc)
    print(f"/metrics scrape: {fresh:.1f} ms fresh, {after:.1f} ms after LoRA traffic over 100 adapters "
          f"({series} lora_requests_info series)  (target < 10 ms)")
    print(f"load average at end: {loadavg()}")


if __name__ == "__main__":
    main()
