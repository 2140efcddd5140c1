"""A fleet of simulated pods in one process, driven by a router-like client (issue 29, real time).

Starts ``python app.py --fleet-size N`` (step mode, KV events on) and a client that behaves as
llm-d's inference scheduler does, in one gevent process:

* a scraper per pod reads the pod's ``/metrics`` every ``--scrape-interval`` seconds (running,
  waiting, KV usage) and times each scrape;
* a KV-event subscriber (ZMQ SUB, bound here; the pods connect) keeps, per pod topic, the
  token blocks each pod holds (``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``);
* Poisson arrivals at ``--rate`` requests per second per pod; each request belongs to one of
  ``--groups`` prefix groups (a shared system prompt of ``--prefix-tokens``, then a unique
  tail) and goes to the pod with the best score: queue (running + waiting from the last scrape,
  plus requests sent since) minus the share of its prefix blocks the pod holds;
* a prober process sends ``GET /health`` to a random pod every 50 ms (a new connection each
  time, as a kubelet) and times it;
* with ``--scale``, halfway through one pod is added (start-up delay 1 s) and one removed
  (drained); the router follows ``GET /fleet/pods`` and retries a request that finds a
  closed port on another pod.

At the end it checks exact accounting (each pod's ``vllm:request_success_total``,
``prompt_tokens_total``, ``generation_tokens_total`` and KV events against the requests the
client saw it serve) and prints scrape milliseconds per pod, ``/health`` latency, the fleet's
CPU (share of one core, from ``GET /fleet/stats``, and CPU milliseconds per request) and the
machine's load.

    python bench/fleet_realtime.py [--pods 64] [--rate 2] [--duration 30] [--scrape-interval 1]
                                   [--scale] [-- extra server flags]

Targets (issue 29): 64 step-mode pods at a few requests per second each; a scrape in
milliseconds per pod; ``/health`` under 100 ms; exact accounting.
"""
from __future__ import annotations

from gevent import monkey
monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import msgpack  # noqa: E402
import urllib3  # noqa: E402
import zmq.green as zmq  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def free_ports(span: int) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for extra in range(1, span):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", port + extra))
            return port
        except OSError:
            continue


def pct(values: list, q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def gauge(text: str, name: str) -> float:
    i = text.find("\n" + name + "{")
    if i < 0:
        return 0.0
    j = text.find("}", i)
    return float(text[j + 2:text.find("\n", j)])


def total(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets)."""
    out, start = 0.0, 0
    key = "\n" + name + "{"
    while True:
        i = text.find(key, start)
        if i < 0:
            return out
        j = text.find("}", i)
        k = text.find("\n", j)
        out += float(text[j + 2:k])
        start = k


class Pod:
    def __init__(self, name: str, url: str):
        self.name, self.url = name, url
        self.running = self.waiting = self.kv = 0.0
        self.sent_since_scrape = 0
        self.in_flight = 0
        self.blocks: dict = {}            # block hash -> token tuple (from KV events)
        self.held: set = set()            # token tuples of the blocks held
        self.served = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.routed_blocks: set = set()   # token tuples of every full block of prompts sent here
        self.stored_events = 0
        self.foreign_blocks = 0           # stored blocks of prompts never sent here (must be 0)
        self.gone = False                 # not routable (starting, draining or removed)
        self.removed = False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--rate", type=float, default=2.0, help="requests per second per pod")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of traffic")
    ap.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes of one pod")
    ap.add_argument("--groups", type=int, default=16, help="prefix groups (shared system prompts)")
    ap.add_argument("--prefix-tokens", type=int, default=512)
    ap.add_argument("--tail-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--scale", action="store_true", help="add one pod and remove one halfway through")
    ap.add_argument("server_flags", nargs="*", help="extra server flags (after --)")
    args = ap.parse_args()

    port = free_ports(args.pods + 4)
    control = free_ports(1)
    while port <= control < port + args.pods + 4:
        control = free_ports(1)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    zport = sub.bind_to_random_port("tcp://127.0.0.1")
    cmd = [sys.executable, os.path.join(ROOT, "app.py"), "--model", args.model, "--force-dummy-tokenizer",
           "--host", "127.0.0.1", "--port", str(port), "--fleet-size", str(args.pods),
           "--fleet-control-port", str(control), "--latency-calculator", "step", "--enable-kvcache",
           "--zmq-endpoint", f"tcp://127.0.0.1:{zport}", "--disable-log-requests", "--log-level", "warning",
           *args.server_flags]
    load_before = os.getloadavg()
    t_spawn = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "POD_IP": "127.0.0.1", "POD_NAME": "sim"})
    http = urllib3.PoolManager(maxsize=64, retries=False, timeout=urllib3.Timeout(connect=5, read=60))
    ctl = f"http://127.0.0.1:{control}"
    while True:
        if proc.poll() is not None:
            print("server exited at start-up", file=sys.stderr)
            return 1
        try:
            if http.request("GET", ctl + "/health").status == 200:
                break
        except urllib3.exceptions.HTTPError:
            gevent.sleep(0.05)
    startup = time.monotonic() - t_spawn
    try:
        return run(args, proc, http, ctl, sub, startup, load_before)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(args, proc, http, ctl, sub, startup, load_before) -> int:
    rng = random.Random(1)
    pods: dict[str, Pod] = {}
    by_port: dict[int, Pod] = {}

    def refresh_pods():
        listed = json.loads(http.request("GET", ctl + "/fleet/pods").data)["pods"]
        names = set()
        for p in listed:
            names.add(p["name"])
            if p["name"] not in pods:
                pod = pods[p["name"]] = Pod(p["name"], p["url"])
                by_port[p["port"]] = pod
                gevent.spawn(scraper, pod)
            pods[p["name"]].gone = p["state"] != "ready"
        for name, pod in pods.items():
            if name not in names:
                pod.gone = pod.removed = True

    scrape_ms: list = []
    scrape_bytes = [0]
    health_ms: list = []
    stop = [False]

    def scraper(pod: Pod):
        gevent.sleep(rng.random() * args.scrape_interval)          # staggered, as per-pod loops
        while not stop[0] and not pod.removed:
            t = time.perf_counter()
            try:
                r = http.request("GET", pod.url + "/metrics")
            except urllib3.exceptions.HTTPError:
                pod.gone = True
                gevent.sleep(args.scrape_interval)
                continue
            if r.status == 200:
                scrape_ms.append(1000 * (time.perf_counter() - t))
                scrape_bytes[0] += len(r.data)
                text = r.data.decode()
                pod.running = gauge(text, "vllm:num_requests_running")
                pod.waiting = gauge(text, "vllm:num_requests_waiting")
                pod.kv = gauge(text, "vllm:kv_cache_usage_perc")
                pod.sent_since_scrape = 0
            gevent.sleep(args.scrape_interval)

    events = [0]

    def kv_events():
        while True:
            topic, _seq, payload = sub.recv_multipart()
            port = int(topic.decode().split("@")[1].rsplit(":", 1)[1])
            pod = by_port.get(port)
            _ts, evs, _rank = msgpack.unpackb(payload)
            for ev in evs:
                events[0] += 1
                if pod is None:
                    continue
                if ev[0] == "BlockStored":
                    hashes, tokens = ev[1], ev[3]
                    n = len(tokens) // max(len(hashes), 1)
                    pod.stored_events += 1
                    for k, h in enumerate(hashes):
                        block = tuple(tokens[k * n:(k + 1) * n])
                        pod.blocks[h] = block
                        pod.held.add(block)
                        if block not in pod.routed_blocks:
                            pod.foreign_blocks += 1
                elif ev[0] == "BlockRemoved":
                    for h in ev[1]:
                        block = pod.blocks.pop(h, None)
                        if block is not None and block not in pod.blocks.values():
                            pod.held.discard(block)
                elif ev[0] == "AllBlocksCleared":
                    pod.blocks.clear()
                    pod.held.clear()

    block_size = 64                     # vLLM 0.34's default in step mode (--block-size)
    prefixes = [[rng.randrange(1000, 30000) for _ in range(args.prefix_tokens)] for _ in range(args.groups)]
    lost = [0]
    retries = [0]
    latencies: list = []
    prefix_routed = [0, 0]              # requests routed to a pod holding their prefix / all

    def blocks_of(ids):
        return [tuple(ids[i:i + block_size]) for i in range(0, len(ids) - block_size + 1, block_size)]

    def score(pod: Pod, prefix_blocks) -> float:
        queue = pod.running + pod.waiting + pod.sent_since_scrape
        held = sum(1 for b in prefix_blocks if b in pod.held)
        return queue - 4.0 * held / max(len(prefix_blocks), 1) + 0.5 * pod.kv

    def one_request(n: int):
        group = rng.randrange(args.groups)
        ids = prefixes[group] + [rng.randrange(1000, 30000) for _ in range(args.tail_tokens)]
        pblocks = blocks_of(prefixes[group])
        body = json.dumps({"model": args.model, "prompt": ids, "max_tokens": args.max_tokens,
                           "ignore_eos": True}).encode()
        tried = set()
        while True:
            live = [p for p in pods.values() if not p.gone and p.name not in tried]
            if not live:
                lost[0] += 1
                return
            best = min(live, key=lambda p: (score(p, pblocks), rng.random()))
            prefix_routed[1] += 1
            if pblocks and pblocks[0] in best.held:
                prefix_routed[0] += 1
            best.sent_since_scrape += 1
            best.routed_blocks.update(blocks_of(ids))
            best.in_flight += 1
            t = time.perf_counter()
            try:
                r = http.request("POST", best.url + "/v1/completions", body=body,
                                 headers={"Content-Type": "application/json"})
            except urllib3.exceptions.NewConnectionError:      # a pod that was just removed: elsewhere
                best.in_flight -= 1
                best.gone = True
                tried.add(best.name)
                retries[0] += 1
                continue
            except urllib3.exceptions.HTTPError:
                best.in_flight -= 1
                lost[0] += 1
                return
            best.in_flight -= 1
            if r.status == 503:                    # starting: not ready yet
                tried.add(best.name)
                retries[0] += 1
                continue
            if r.status != 200:
                lost[0] += 1
                return
            latencies.append(time.perf_counter() - t)
            pod = pods[r.headers["x-inference-pod"]]
            usage = json.loads(r.data)["usage"]
            pod.served += 1
            pod.prompt_tokens += usage["prompt_tokens"]
            pod.generation_tokens += usage["completion_tokens"]
            return

    prober_src = (
        "import json, random, sys, time, urllib.request\n"
        "urls, until = json.loads(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
        "out = []\n"
        "while time.monotonic() < until:\n"
        "    t = time.perf_counter()\n"
        "    try:\n"
        "        urllib.request.urlopen(random.choice(urls) + '/health', timeout=5).read()\n"
        "        out.append(1000 * (time.perf_counter() - t))\n"
        "    except OSError:\n"
        "        pass\n"
        "    time.sleep(0.05)\n"
        "print(json.dumps(out))\n")

    def prober():
        """/health from another process (a kubelet's probe: a new connection each time), so
        that the client's own event loop is not in the figure."""
        urls = [p.url for p in pods.values() if not p.gone]
        out = subprocess.run([sys.executable, "-c", prober_src, json.dumps(urls), str(args.duration)],
                             capture_output=True, text=True).stdout
        health_ms.extend(json.loads(out or "[]"))

    def watcher():
        while not stop[0]:
            gevent.sleep(0.5)
            refresh_pods()

    scaled = []

    def scale():
        gevent.sleep(args.duration / 2)
        t = time.monotonic()
        r = http.request("POST", ctl + "/fleet/pods", body=json.dumps({"startup_delay": 1.0}).encode(),
                         headers={"Content-Type": "application/json"})
        new = json.loads(r.data)["pods"][0]
        refresh_pods()
        victim = sorted(pods.values(), key=lambda p: -p.in_flight)[0]
        r = http.request("DELETE", f"{ctl}/fleet/pods/{victim.name}?wait=true")
        drained = json.loads(r.data)
        while True:
            s = http.request("GET", new["url"] + "/health").status
            if s == 200:
                break
            gevent.sleep(0.02)
        scaled.append((new["name"], time.monotonic() - t, victim.name, drained))

    refresh_pods()
    gevent.spawn(kv_events)
    gevent.sleep(1.0)                       # every publisher connected and subscribed
    stats0 = json.loads(http.request("GET", ctl + "/fleet/stats").data)
    probing = gevent.spawn(prober)
    gevent.spawn(watcher)
    if args.scale:
        gevent.spawn(scale)
    rate = args.rate * args.pods
    import resource
    client_cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    jobs = []
    next_at = t0
    n = 0
    while next_at - t0 < args.duration:
        next_at += rng.expovariate(rate)
        gevent.sleep(max(0.0, next_at - time.monotonic()))
        jobs.append(gevent.spawn(one_request, n))
        n += 1
    gevent.joinall(jobs + [probing])
    elapsed = time.monotonic() - t0
    client_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (client_cpu1.ru_utime + client_cpu1.ru_stime) - (client_cpu0.ru_utime + client_cpu0.ru_stime)
    stats1 = json.loads(http.request("GET", ctl + "/fleet/stats").data)
    stop[0] = True
    gevent.sleep(0.5)                       # the last KV events

    # exact accounting: every pod still up against what the client saw it serve
    mismatches = []
    refresh_pods()
    for pod in pods.values():
        if pod.removed:
            continue
        text = "\n" + http.request("GET", pod.url + "/metrics").data.decode()
        got = (total(text, "vllm:request_success_total"), total(text, "vllm:prompt_tokens_total"),
               total(text, "vllm:generation_tokens_total"), gauge(text, "vllm:num_requests_running"),
               gauge(text, "vllm:num_requests_waiting"))
        want = (pod.served, pod.prompt_tokens, pod.generation_tokens, 0, 0)
        if tuple(float(x) for x in want) != got or pod.foreign_blocks:
            mismatches.append((pod.name, want, got, pod.foreign_blocks))
    served = sum(p.served for p in pods.values())
    cpu = stats1["cpu_seconds"] - stats0["cpu_seconds"]
    wall = stats1["uptime_s"] - stats0["uptime_s"]
    load_after = os.getloadavg()
    print(f"fleet: {args.pods} step-mode pods ({args.model}) in one process, started in {startup:.2f} s, "
          f"max RSS {stats1['max_rss_mib']:.0f} MiB")
    print(f"load: {n} requests in {elapsed:.1f} s ({n / elapsed:.1f} req/s, {n / elapsed / args.pods:.2f} per pod), "
          f"served {served}, lost {lost[0]}, retried {retries[0]}, latency p50 {1000 * pct(latencies, .5):.0f} ms "
          f"p99 {1000 * pct(latencies, .99):.0f} ms")
    print(f"scrape /metrics: {len(scrape_ms)} scrapes ({len(scrape_ms) / elapsed:.0f}/s, "
          f"{scrape_bytes[0] / max(len(scrape_ms), 1) / 1024:.0f} KiB each): ms per pod p50 {pct(scrape_ms, .5):.2f} "
          f"p99 {pct(scrape_ms, .99):.2f} max {max(scrape_ms, default=float('nan')):.2f}")
    print(f"/health: {len(health_ms)} probes: ms p50 {pct(health_ms, .5):.2f} p99 {pct(health_ms, .99):.2f} "
          f"max {max(health_ms, default=float('nan')):.2f}")
    print(f"fleet CPU: {100 * cpu / max(wall, 1e-9):.0f}% of one core over the run "
          f"({1000 * cpu / max(n, 1):.2f} CPU ms per request, scrapes included); the client: "
          f"{100 * client_cpu / elapsed:.0f}% of one core")
    print(f"KV events: {events[0]} received; routed to a pod holding the prefix: "
          f"{prefix_routed[0]}/{prefix_routed[1]}")
    for name, secs, victim, drained in scaled:
        print(f"scale: {name} healthy {secs:.2f} s after POST (delay 1 s, while {victim} drained: {drained})")
    print(f"exact accounting: {'OK' if not mismatches else 'MISMATCH'} on "
          f"{sum(1 for p in pods.values() if not p.removed)} pods")
    for m in mismatches[:10]:
        print("  ", m)
    print(f"machine load average: before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} CPUs)")
    return 1 if mismatches or lost[0] else 0


if __name__ == "__main__":
    sys.exit(main())
