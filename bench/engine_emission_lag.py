"""Step mode in real time: the server's emission lag with N concurrent streams (issue 32's
target: p99 at most twice the kernel's floor, below, at 256 streams).

    python bench/engine_emission_lag.py [--streams 256] [--tokens 128] [--gpu H100] [--runs 1]
                                        [--against DIR --rounds 2]   # another checkout, alternating

Starts ``python app.py meta-llama/Llama-3.1-8B-Instruct --latency-calculator step`` on a free
port, opens N streaming completions at once with bench/sse_probe.c (an epoll client that keeps
up), and prints, for the last of ``--runs`` measured runs (after one warm-up run):

* the server's ``vllm_sim:token_emission_lag_seconds``: per write of a stream's chunks, the time
  the non-blocking ``send`` returned minus the end of the step that produced the tokens, on the
  engine's timeline (p50 / p99 / p99.9 as the histogram's bucket bounds), and the same
  percentiles exact, from every observation of the run (the server started with
  ``VLLM_SIM_LAG_SAMPLES``, which writes them at exit; the buckets near the target are 1-2.5 ms
  wide);
* ``vllm_sim:engine_step_wait_seconds_total``: how long steps were held past their modelled end
  because the previous step's tokens were still going out (the engine waits for the hub rather
  than run ahead of what the clients receive), per step, and the steps' inter-token latency;
* the client's view, from the probe's arrival times: its inter-token gaps, and, over the steps
  where every stream is decoding, how long after a step's first chunk reached the client each
  stream's chunk of the same step did (the spread of one step's emission, as received);
* the floor: N bare non-blocking ``send`` s of a chunk-sized write, one per socket, to the same
  C client on loopback, the sender and the client pinned as the run's server and client: the
  kernel's share of one step's emission on this machine (and, for comparison, the same sends
  to a Python reader, the floor this bench used to print).

The server and the probe run on a CPU each (``--no-pin``: wherever the OS puts them), as in
``timing_fidelity.py``.  Unpinned, the probe, woken by nearly every ``send``, was often run on
the server's CPU, and one step's pass of 256 sends took 4.1 ms instead of 2.7 ms (issue 32,
fifth round): a lag the floor, measured apart, did not have.
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
from steal import StealSampler, near_steal  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def hist(text: str, name: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            out.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    return out


def scalar(text: str, name: str) -> float:
    """The first sample of ``name`` (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def quantile(buckets: list, q: float) -> float:
    total = buckets[-1][1]
    for le, c in buckets:
        if c >= q * total:
            return le
    return float("inf")


def step_spread(streams: list, tokens: int) -> list:
    """Per chunk of the steps where every stream decodes: its arrival minus the first arrival of
    its step's chunks (seconds).  Within that window each step sends one chunk per stream and
    the next step's chunks go after them (the engine waits for the hub), so the sorted arrivals
    fall into consecutive groups of N."""
    times = [ts[:tokens] for _, ts in streams if len(ts) >= tokens]
    n = len(times)
    lo, hi = max(ts[0] for ts in times), min(ts[-1] for ts in times)
    window = sorted(t for ts in times for t in ts if lo < t < hi)
    out = []
    for i in range(0, len(window) - n + 1, n):
        group = window[i:i + n]
        out += [t - group[0] for t in group]
    return out


def on_cpu(cpus: list | None, i: int):
    """A ``preexec_fn`` that pins a child process to ``cpus[i]`` (None without pinning)."""
    return (lambda: os.sched_setaffinity(0, {cpus[i]})) if cpus else None


def send_floor(n: int, probe: str | None, cpus: list | None, steps: int = 100, size: int = 200) -> float:
    """Median seconds for one ``send`` of a ``size``-byte chunk on each of ``n`` loopback TCP
    sockets (non-blocking, TCP_NODELAY as gunicorn's), one round per 10 ms: the kernel's share
    of one step's emission.  The receiver is the measured run's: ``probe`` (bench/sse_probe.c,
    its sockets opened and read as in the run, the listener with the server's
    ``SO_TIMESTAMPNS``), or with ``probe`` None a Python ``selectors`` reader (the floor this
    bench printed before).  With ``cpus``, the sends run on ``cpus[0]`` and the receiver on
    ``cpus[1]``, where the run puts the server and the probe: a ``send`` on loopback runs the
    receiver's TCP in the sender's system call and wakes the receiver, so where the receiver
    runs is part of the cost."""
    import statistics
    import tempfile
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(n)
    port = ls.getsockname()[1]
    tmp = tempfile.TemporaryDirectory()
    if probe is not None:
        ls.setsockopt(socket.SOL_SOCKET, 35, 1)     # SO_TIMESTAMPNS, as the server's listener (Linux)
        req = Path(tmp.name) / "request"
        req.write_bytes(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        cmd = [probe, "127.0.0.1", str(port), str(n), str(req), str(Path(tmp.name) / "events")]
    else:
        cmd = [sys.executable, "-c", READER, str(port), str(n)]
    reader = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=on_cpu(cpus, 1))
    mine = os.sched_getaffinity(0)
    conns = [ls.accept()[0] for _ in range(n)]
    for c in conns:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.setblocking(False)
    payload = b"%X\r\n" % (size - 8) + b"data: " + b"x" * (size - 16) + b"\r\n"     # a framed SSE chunk
    samples = []
    try:
        if cpus:
            os.sched_setaffinity(0, {cpus[0]})
        time.sleep(0.05)              # the probe's requests are in (left unread: the sends are measured)
        for _ in range(steps):
            t0 = time.perf_counter()
            for c in conns:
                c.send(payload)
            samples.append(time.perf_counter() - t0)
            time.sleep(0.01)
    finally:
        os.sched_setaffinity(0, mine)
        for c in conns:
            c.close()
        ls.close()
        reader.wait(10)
        tmp.cleanup()
    return statistics.median(samples)


READER = """
import selectors, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()
for _ in range(n):
    sel.register(socket.create_connection(("127.0.0.1", port)), selectors.EVENT_READ)
while sel.get_map():
    for key, _ in sel.select():
        if not key.fileobj.recv(65536):
            sel.unregister(key.fileobj)
            key.fileobj.close()
"""


def pct(values: list, q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def read_streams(path: Path) -> list:
    out = []
    for line in path.read_text().splitlines():
        vals = [float(x) for x in line.split()]
        out.append((vals[0], vals[1:]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--runs", type=int, default=1, help="measured runs after the warm-up (the last is printed)")
    ap.add_argument("--no-floor", action="store_true", help="skip the bare-send floor")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the server and the client (and the floor's sender and reader) to "
                         "separate CPUs")
    ap.add_argument("--against", metavar="DIR",
                    help="another checkout: measured too, alternating with this one, --rounds times")
    ap.add_argument("--rounds", type=int, default=1, help="with --against: alternating rounds")
    a = ap.parse_args()
    exe = build_probe()
    if exe is None:
        raise SystemExit("needs a C compiler for bench/sse_probe.c")
    cpus = sorted(os.sched_getaffinity(0))
    a.cpus = cpus[:2] if a.pin and len(cpus) >= 2 else None
    print(f"pinned: server on CPU {cpus[0]}, client on CPU {cpus[1]} (the floor's sender and reader the same)"
          if a.cpus else "not pinned", flush=True)
    a.floor = None if a.no_floor else floors(a, exe)
    if not a.against:
        measure(a, exe, ROOT)
    else:
        for rnd in range(a.rounds):
            for label, root in ((("this", ROOT), ("other", Path(a.against).resolve()))[::1 if rnd % 2 == 0 else -1]):
                print(f"-- round {rnd + 1}: {label} checkout ({root}), load {os.getloadavg()[0]:.2f}", flush=True)
                measure(a, exe, root)
    if a.floor is not None:
        floors(a, exe, "floor again")
    return 0


def floors(a, exe: str, what: str = "floor") -> float:
    """The floor against the run's receiver (the C probe, pinned as the run), printed with the
    one against a Python reader for comparison; returns the first."""
    fair = send_floor(a.streams, exe, a.cpus)
    python_reader = send_floor(a.streams, None, a.cpus)
    print(f"{what}: {a.streams} bare send()s of 200 bytes, one per loopback socket, to the run's C client: "
          f"{1000 * fair:.2f} ms (median; {1e6 * fair / a.streams:.1f} us a send); to a Python reader: "
          f"{1000 * python_reader:.2f} ms; load {os.getloadavg()[0]:.2f}  (issue 32's target: emission lag p99 "
          f"<= 2x the first)", flush=True)
    return fair


def measure(a, exe: str, root: Path) -> None:
    """One server of the checkout at ``root``: a warm-up run and ``a.runs`` measured runs; prints
    the last."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    samples_file = out / f"lag_samples_{port}.txt"      # every lag the server observed (VLLM_SIM_LAG_SAMPLES)
    samples_file.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, str(root / "app.py"), MODEL, "--latency-calculator", "step",
                             "--gpu", a.gpu, "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "4096",
                             "--force-dummy-tokenizer", "--disable-log-requests"],
                            cwd=root, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                           "VLLM_SIM_LAG_SAMPLES": str(samples_file)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    window = None
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        results = []
        if a.cpus:                           # every thread of the server on the first CPU
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                os.sched_setaffinity(int(tid), {a.cpus[0]})
        for k in range(1 + a.runs):          # the first run warms the server up
            body = json.dumps({"model": MODEL, "prompt": [1000 + i for i in range(a.prompt_tokens)],
                               "max_tokens": a.tokens, "ignore_eos": True, "stream": True})
            req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}")
            req_file, out_file = out / "lag_req.txt", out / "lag_out.txt"
            req_file.write_text(req)
            before = httpx.get(base + "/metrics").text
            steal = StealSampler(a.cpus[0] if a.cpus else None, on_cpu=a.cpus[1] if a.cpus else None).start()
            r = subprocess.run([exe, "127.0.0.1", str(port), str(a.streams), str(req_file), str(out_file)],
                               capture_output=True, timeout=300, preexec_fn=on_cpu(a.cpus, 1))
            steal.stop()
            if r.returncode:
                raise SystemExit(f"sse_probe failed: {r.stderr.decode()[-300:]}")
            after = httpx.get(base + "/metrics").text
            results.append((before, after, read_streams(out_file), steal))
        before, after, streams, steal = results[-1]

        def delta_hist(name):
            return [(le, c - c0) for (le, c), (_, c0) in zip(hist(after, name), hist(before, name))]

        def delta(name):
            return scalar(after, name) - scalar(before, name)
        lag = delta_hist("vllm_sim:token_emission_lag_seconds")
        total = hist(before, "vllm_sim:token_emission_lag_seconds")
        window = (int(total[-1][1]) if total else 0, int(lag[-1][1]))     # the last run's observations
        itl = delta_hist("vllm:inter_token_latency_seconds")
        steps = delta("vllm:iteration_tokens_total_count")
        wait = delta("vllm_sim:engine_step_wait_seconds_total")
        itl_mean = delta("vllm:inter_token_latency_seconds_sum") / max(delta("vllm:inter_token_latency_seconds_count"), 1)
        print(f"{a.streams} streams x {a.tokens} tokens, step mode on {a.gpu}: {int(lag[-1][1])} tokens, "
              f"{int(steps)} steps")
        ratio = f" ({quantile(lag, 0.99) / a.floor:.1f}x the floor)" if a.floor else ""
        print(f"  emission lag (server, send returned - step end): p50 <= {1000 * quantile(lag, 0.5):.1f} ms, "
              f"p99 <= {1000 * quantile(lag, 0.99):.1f} ms{ratio}, p99.9 <= {1000 * quantile(lag, 0.999):.1f} ms")
        print(f"  steps held for the hub: {1000 * wait / max(steps, 1):.2f} ms per step ({1000 * wait:.0f} ms in all); "
              f"inter-token latency (the steps): mean {1000 * itl_mean:.2f} ms, p99 <= {1000 * quantile(itl, 0.99):.1f} ms")
        gaps = [b - a_ for _, ts in streams for a_, b in zip(ts[:a.tokens], ts[1:a.tokens])]
        spread = step_spread(streams, a.tokens)
        print(f"  client: inter-token gaps p50 {1000 * pct(gaps, 0.5):.2f} ms, p99 {1000 * pct(gaps, 0.99):.2f} ms; "
              f"chunk after its step's first at the client: p50 {1000 * pct(spread, 0.5):.2f} ms, "
              f"p99 {1000 * pct(spread, 0.99):.2f} ms ({len(spread) // max(a.streams, 1)} full steps)")
        where = f"CPU {a.cpus[0]} (the server's)" if a.cpus else "all CPUs"
        print(f"  load average: {os.getloadavg()[0]:.2f}; the hypervisor's steal on {where} during the run: "
              f"{1000 * steal.total_s:.0f} ms", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    exact = exact_lags(samples_file, *window) if window else None
    if exact:
        ratio = f" ({exact[1] / a.floor:.1f}x the floor)" if a.floor else ""
        print(f"  emission lag, exact (the server's {len(exact[3])} observations of this run, not its buckets): "
              f"p50 {1000 * exact[0]:.2f} ms, p99 {1000 * exact[1]:.2f} ms{ratio}, p99.9 {1000 * exact[2]:.2f} ms",
              flush=True)
        if exact[4] and steal.events:
            clear = sorted(v for v, t in zip(exact[3], exact[4]) if not near_steal(t, v, steal.events))
            if clear:
                at = lambda q: clear[min(len(clear) - 1, int(q * len(clear)))]     # noqa: E731
                ratio = f" ({at(0.99) / a.floor:.1f}x the floor)" if a.floor else ""
                print(f"  the same, the {len(clear)} observations ({100 * len(clear) / len(exact[3]):.0f}%) "
                      f"without steal while they waited: p50 {1000 * at(0.5):.2f} ms, p99 {1000 * at(0.99):.2f} ms"
                      f"{ratio}, p99.9 {1000 * at(0.999):.2f} ms", flush=True)
    samples_file.unlink(missing_ok=True)


def exact_lags(path: Path, skip: int, count: int):
    """``(p50, p99, p99.9, lags, walls)`` of observations ``skip .. skip + count`` of the lags
    the server wrote to ``path`` (``value times [wall clock]`` lines, in order: a checkout
    without ``VLLM_SIM_LAG_SAMPLES`` writes none, then None); ``walls``: each lag's wall clock
    in the order of ``lags`` (empty from a checkout that wrote none)."""
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return None
    pairs, seen = [], 0
    for line in lines:
        if not line:
            continue
        value, times, *wall = line.split()
        n = int(times)
        take = min(seen + n, skip + count) - max(seen, skip)
        if take > 0:
            pairs += [(float(value), float(wall[0]) if wall else None)] * take
        seen += n
    if len(pairs) != count or not pairs:
        return None
    pairs.sort(key=lambda p: p[0])
    lags = [v for v, _ in pairs]
    walls = [w for _, w in pairs] if pairs[0][1] is not None else []
    at = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]     # noqa: E731
    return at(0.5), at(0.99), at(0.999), lags, walls


if __name__ == "__main__":
    sys.exit(main())
