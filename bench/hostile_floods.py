"""Re-run issue 23's floods against a simulator on loopback and print the longest /health wait.

    python bench/hostile_floods.py [--app DIR] [--floods slow-body,burst,replay,tls,refused-items]
                                   [--connections N] [--seconds S]

Each flood starts its own simulator (``python DIR/app.py`` on a free loopback port; DIR
defaults to this checkout, so an older checkout can be measured the same way), probes
``/health`` at 10 Hz from a thread (timeout 10 s: a probe that times out counts as 10 s) and
prints, per flood: the longest and median probe wait, probes that failed, what the flood
received, and the server's RSS before and after (``/proc/PID/statm``).

* ``slow-body``: N connections send their headers with ``Content-Length: 1000000`` and then one
  body byte a second for S seconds, to a server with ``--worker-connections N``, so that they
  take every connection as the issue's 10,000 did (50 s);
* ``burst``: N connections opened at once, each sending ``GET /health`` (the accept backlog);
* ``replay``: 8 DEALER clients send 300 KV-event replay requests each at once (needs pyzmq);
* ``tls``: with ``--self-signed-certs``, 4 rounds of N connections that open TCP and send half
  a TLS ClientHello, then wait for the server to close them (RSS after each round);
* ``refused-items``: one client sends, one at a time, 2-4 MB bodies of a million refused list
  items (or large valid lists) to the chat, Messages, Responses, completions, embeddings and
  tokenize routes, and prints each one's status, time and the longest ``/health`` wait beside
  it (a probe every 10 ms for this flood).

Loopback only; every loop is bounded by N and S.
"""
from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


class Server:
    def __init__(self, app_dir: Path, *flags: str, env: dict | None = None, tls: bool = False):
        self.port = free_port()
        self.scheme = "https" if tls else "http"
        args = [sys.executable, str(app_dir / "app.py"), "--model", "test-model", "--host", "127.0.0.1",
                "--port", str(self.port), "--disable-log-requests", *flags]
        self.proc = subprocess.Popen(args, cwd=app_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
        self.base = f"{self.scheme}://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/health", timeout=1, verify=False).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Probe:
    """GET /health every ``every`` seconds (0.1) on a fresh connection; records each wait."""

    def __init__(self, base: str, every: float = 0.1):
        self.base, self.every = base, every
        self.waits: list[float] = []
        self.starts: list[float] = []
        self.failed = 0
        self.stop_flag = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_flag:
            t0 = time.monotonic()
            try:
                httpx.get(self.base + "/health", timeout=10, verify=False)
            except httpx.HTTPError:
                self.failed += 1
            self.waits.append(time.monotonic() - t0)
            self.starts.append(t0)
            time.sleep(max(0.0, self.every - (time.monotonic() - t0)))

    def stop(self) -> dict:
        self.stop_flag = True
        self.thread.join(15)
        w = self.waits or [0.0]
        t0 = self.starts[0] if self.starts else 0.0
        worst = sorted(zip(self.waits, self.starts), reverse=True)[:3]
        return {"probes": len(w), "longest_s": round(max(w), 3), "median_s": round(statistics.median(w), 4),
                "failed": self.failed, "worst_at": [(round(a, 2), round(b - t0, 1)) for a, b in worst]}


def slow_body(server: Server, n: int, seconds: float) -> dict:
    sel = selectors.DefaultSelector()
    socks = []
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n{")
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(head)
            s.setblocking(False)
            socks.append(s)
            sel.register(s, selectors.EVENT_READ)
        except OSError:
            break
    answered = {}
    end = time.monotonic() + seconds
    next_drip = time.monotonic() + 1
    while time.monotonic() < end and len(answered) < len(socks):
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            answered.setdefault(s, data[:12])
            sel.unregister(s)
        if time.monotonic() >= next_drip:
            next_drip += 1
            for s in socks:
                if s not in answered:
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
    for s in socks:
        s.close()
    codes = {}
    for v in answered.values():
        codes[v.decode("latin-1", "replace") or "closed"] = codes.get(v.decode("latin-1", "replace") or "closed", 0) + 1
    return {"connections": len(socks), "answered": len(answered), "answers": codes}


def burst(server: Server, n: int) -> dict:
    sel = selectors.DefaultSelector()
    req = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    t0 = time.monotonic()
    pending = {}
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect_ex(("127.0.0.1", server.port))
        except OSError:
            s.close()
            break
        pending[s] = "connect"
        sel.register(s, selectors.EVENT_WRITE)
    done, slowest = 0, 0.0
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        for key, ev in sel.select(timeout=0.5):
            s = key.fileobj
            if pending.get(s) == "connect":
                try:
                    s.send(req)
                    pending[s] = "read"
                    sel.modify(s, selectors.EVENT_READ)
                except OSError:
                    sel.unregister(s)
                    pending.pop(s)
                    s.close()
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data or b"\r\n\r\n" in data:
                done += data.startswith(b"HTTP/1.1 200")
                slowest = max(slowest, time.monotonic() - t0)
                sel.unregister(s)
                pending.pop(s)
                s.close()
    for s in pending:
        s.close()
    return {"connections": n, "ok": done, "last_answer_s": round(slowest, 2)}


def replay(server: Server, endpoint: str, clients: int = 8, requests: int = 300) -> dict:
    import zmq
    for _ in range(20):            # some KV events to replay
        httpx.post(server.base + "/v1/completions", json={"model": "test-model", "prompt": "hello " * 40,
                                                          "max_tokens": 2}, timeout=10)
    ctx = zmq.Context()
    got = [0] * clients

    def one(i):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(endpoint)
        for _ in range(requests):
            d.send_multipart([b"", struct.pack(">Q", 0)])
        end = time.monotonic() + 5
        while time.monotonic() < end:
            if d.poll(100):
                d.recv_multipart()
                got[i] += 1
        d.close(0)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ctx.term()
    return {"clients": clients, "requests": clients * requests, "replies": sum(got)}


def tls_rounds(server: Server, n: int, rounds: int = 4) -> dict:
    # the first 60 bytes of a ClientHello: the handshake never completes
    hello = bytes.fromhex("16030100f4010000f00303") + os.urandom(32) + b"\x00" * 17
    out = []
    for _ in range(rounds):
        socks = []
        for _ in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                s.sendall(hello)
                socks.append(s)
            except OSError:
                break
        time.sleep(1)
        peak = rss_mb(server.proc.pid)
        for s in socks:
            s.close()
        time.sleep(3)
        out.append((round(peak, 1), round(rss_mb(server.proc.pid), 1)))
    return {"connections_per_round": n, "rss_peak_then_after_mb": out}


def _refused_bodies() -> list:
    """``(name, route, body)`` of the ``refused-items`` flood: a million bad items where a list
    holds them, a quarter million for ``logit_bias``'s keys."""
    m, n = "test-model", 1_000_000
    chat = {"model": m, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    tool = {"type": "function", "function": {"name": "f"}}
    return [
        ("chat allowed_token_ids strings", "/v1/chat/completions", {**chat, "allowed_token_ids": ["a"] * n}),
        ("chat stop ints", "/v1/chat/completions", {**chat, "stop": [1] * n}),
        ("chat stop_token_ids strings", "/v1/chat/completions", {**chat, "stop_token_ids": ["a"] * n}),
        ("chat logit_bias strings", "/v1/chat/completions", {**chat, "logit_bias": {str(i): "x" for i in range(n // 4)}}),
        ("chat response_format triggers", "/v1/chat/completions",
         {**chat, "response_format": {"type": "structural_tag", "structures": [], "triggers": [1] * n}}),
        ("chat messages ints", "/v1/chat/completions", {**chat, "messages": [1] * n}),
        ("chat tools ints", "/v1/chat/completions", {**chat, "tools": [1] * n}),
        ("chat bad_words ints", "/v1/chat/completions", {**chat, "bad_words": [1] * n}),
        ("chat 90k valid tools", "/v1/chat/completions", {**chat, "tools": [tool] * 90_000}),
        ("chat 100k messages", "/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": "h"}] * 100_000}),
        ("messages 60k valid tools", "/v1/messages",
         {**chat, "tools": [{"name": "f", "input_schema": {"type": "object"}}] * 60_000}),
        ("messages 100k messages", "/v1/messages", {**chat, "messages": [{"role": "user", "content": "h"},
                                                                          {"role": "assistant", "content": "h"}] * 50_000}),
        ("messages tools ints", "/v1/messages", {**chat, "tools": [1] * n}),
        ("messages stop_sequences ints", "/v1/messages", {**chat, "stop_sequences": [1] * n}),
        ("responses input ints", "/v1/responses", {"model": m, "input": [1] * n}),
        ("responses tools ints", "/v1/responses", {"model": m, "input": "hi", "tools": [1] * n}),
        ("completions prompt strings", "/v1/completions", {"model": m, "prompt": ["a"] * n}),
        ("embeddings mixed input", "/v1/embeddings", {"model": m, "input": [[1, "a"]] * 300_000}),
        ("tokenize messages ints", "/tokenize", {"model": m, "messages": [1] * n}),
    ]


def refused_items(server: Server) -> dict:
    """The ``refused-items`` flood (module docstring); prints a line per body, returns the
    longest wait over all of them."""
    import orjson
    worst = 0.0
    with httpx.Client(timeout=300) as client:
        for name, route, body in _refused_bodies():
            raw = orjson.dumps(body)
            probe = Probe(server.base, every=0.01)
            time.sleep(0.05)
            t0 = time.monotonic()
            r = client.post(server.base + route, content=raw, headers={"Content-Type": "application/json"})
            took = time.monotonic() - t0
            health = probe.stop()
            worst = max(worst, health["longest_s"])
            print(f"  {name:32s} {len(raw) / 1e6:4.1f} MB  {r.status_code}  {took:6.2f} s  "
                  f"/health longest {health['longest_s']:.3f} s  RSS {rss_mb(server.proc.pid):.0f} MB", flush=True)
    return {"longest_s": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", type=Path, default=ROOT, help="checkout whose app.py to run")
    ap.add_argument("--floods", default="slow-body,burst,replay,tls")
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=15.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections * 2 + 256)), hard))
    print(f"app {a.app}  load {os.getloadavg()[0]:.2f}  connections {a.connections}  seconds {a.seconds}")
    for flood in a.floods.split(","):
        env, flags, tls = {}, [], False
        if flood == "replay":
            rport = free_port()
            flags = ["--enable-kvcache", "--zmq-endpoint", f"tcp://127.0.0.1:{free_port()}",
                     "--kv-events-replay-endpoint", f"tcp://127.0.0.1:{rport}", "--event-batch-size", "1"]
            env = {"POD_IP": "127.0.0.1"}
        if flood == "tls":
            flags, tls = ["--self-signed-certs"], True
        if flood == "slow-body":       # the flood takes every worker connection, as 10,000 did
            flags = ["--worker-connections", str(a.connections)]
        server = Server(a.app, *flags, env=env, tls=tls)
        try:
            before = rss_mb(server.proc.pid)
            probe = Probe(server.base)
            time.sleep(0.3)
            if flood == "slow-body":
                result = slow_body(server, a.connections, a.seconds)
            elif flood == "burst":
                result = burst(server, a.connections * 5)
            elif flood == "replay":
                result = replay(server, f"tcp://127.0.0.1:{rport}")
            elif flood == "tls":
                result = tls_rounds(server, a.connections)
            elif flood == "refused-items":
                result = refused_items(server)
            else:
                raise SystemExit(f"unknown flood {flood!r}")
            time.sleep(0.5)
            health = probe.stop()
            after = rss_mb(server.proc.pid)
        finally:
            server.stop()
        print(f"{flood:10s} /health longest {health['longest_s']:.3f} s, median {health['median_s']:.4f} s, "
              f"{health['failed']} failed of {health['probes']} (worst wait, at s: {health['worst_at']}); RSS {before:.0f} -> {after:.0f} MB; {result}")


if __name__ == "__main__":
    main()
