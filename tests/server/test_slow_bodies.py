"""Slow request bodies are timed out (issue 23 item 4): real servers on loopback.

10,000 connections that sent their headers with ``Content-Length: 1000000`` and then one body
byte a second held every worker connection for as long as they liked.  A body now has
``--timeout-keep-alive`` seconds plus its length at 1 MiB/s (a chunked body counts as the body
limit); past that the request is a 408 in the API's envelope, with ``Connection: close``.
"""
from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

GRACE = 1                      # --timeout-keep-alive in these servers
BODY_LIMIT_MIB = 1             # --max-request-body-size-mb: a chunked body's deadline counts it (1 s, not 4)
FLAGS = ("--timeout-keep-alive", str(GRACE), "--max-request-body-size-mb", str(BODY_LIMIT_MIB))


def server_pid(pool, base: str) -> int:
    return next(proc.pid for proc, b in pool.procs.values() if b == base)


def rss_mb(pid: int) -> float:
    import os
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def open_slow(base: str, path: str, framing: str, first: bytes) -> socket.socket:
    host, port = base.rsplit("//", 1)[1].split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n".encode() + first)
    return s


def read_answer(s: socket.socket, drip: bytes, limit_s: float) -> tuple[bytes, float]:
    """Drip ``drip`` every 0.2 s until the server answers and closes; ``(bytes, seconds)``."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    data = b""
    while time.monotonic() - t0 < limit_s:
        try:
            d = s.recv(65536)
        except socket.timeout:
            try:
                s.sendall(drip)
            except OSError:
                break
            continue
        except OSError:
            break
        if not d:
            break
        data += d
    s.close()
    return data, time.monotonic() - t0


SLOW_CASES = [
    ("/v1/chat/completions", "Content-Length: 1000000\r\n", b"{", b" ", "openai"),
    ("/v1/messages", "Content-Length: 1000\r\n", b"{", b" ", "anthropic"),
    ("/v1/chat/completions", "Transfer-Encoding: chunked\r\n", b"1\r\n{\r\n", b"1\r\n \r\n", "openai"),
    ("/v1/chat/completions", "Transfer-Encoding: chunked\r\n", b"FFFFFFFFFFFFFFFF\r\n{", b" ", "openai"),
    ("/admin/config", "Content-Length: 50\r\n", b"{", b" ", "openai"),
    ("/tokenize", "Content-Length: 50\r\n", b"{", b" ", "openai"),
]


@pytest.fixture(scope="module")
def slow_answers(sim_server):
    """Every case's slow connection at once, each read on its own thread and timed on its own
    clock (the server's deadlines are per connection): the cases' 1-2.8 s of waiting overlap
    instead of adding up to 10 s.  ``({case: thread}, {case: read_answer's (bytes, seconds), or
    the exception it raised})``."""
    base = sim_server(*FLAGS)
    answers: dict = {}

    def run(case):
        path, framing, first, drip, _ = case
        try:
            answers[case] = read_answer(open_slow(base, path, framing, first), drip, 15)
        except Exception as e:          # noqa: BLE001  (raised again by the case's test)
            answers[case] = e
    threads = {case: threading.Thread(target=run, args=(case,), daemon=True) for case in SLOW_CASES}
    for t in threads.values():
        t.start()
    return threads, answers


@pytest.mark.parametrize("path,framing,first,drip,envelope", SLOW_CASES)
def test_a_slow_body_is_a_408_and_the_connection_closes(slow_answers, path, framing, first, drip, envelope):
    threads, answers = slow_answers
    case = (path, framing, first, drip, envelope)
    threads[case].join(20)
    got = answers[case]
    if isinstance(got, Exception):
        raise got
    data, took = got
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"Connection: close" in head
    expected = GRACE + (1000000 / (1 << 20) if "1000000" in framing else
                        BODY_LIMIT_MIB if "chunked" in framing else 0)     # the body limit for chunked bodies
    assert expected - 0.1 <= took <= expected + 3, took
    if envelope == "anthropic":
        assert b'"type":"timeout_error"' in body
    else:
        assert b'"code":408' in body and b'"type":"RequestTimeout"' in body


def test_a_body_that_arrives_in_time_is_served(sim_server):
    base = sim_server(*FLAGS)
    body = b'{"model":"test-model","prompt":"hi","max_tokens":2}'
    s = open_slow(base, "/v1/completions", f"Content-Length: {len(body)}\r\n", body[:10])
    time.sleep(0.5)                                         # within the 1 s grace
    s.sendall(body[10:])
    s.settimeout(5)
    data = s.recv(65536)
    s.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_a_slow_body_flood_leaves_health_answering_and_memory_flat(_pool, sim_server):
    """300 connections trickling bodies: /health answers within 0.5 s throughout, every one of
    them gets its 408 and is closed, and the server's memory comes back."""
    base = sim_server(*FLAGS)
    pid = server_pid(_pool, base)
    httpx.get(base + "/health")
    before = rss_mb(pid)
    socks = [open_slow(base, "/v1/chat/completions", "Content-Length: 100000\r\n", b"{") for _ in range(300)]
    results = []
    threads = [threading.Thread(target=lambda s=s: results.append(read_answer(s, b" ", 10)))
               for s in socks]
    waits = []
    for t in threads:
        t.start()
    t_end = time.monotonic() + GRACE + 1
    with httpx.Client(base_url=base, timeout=5) as c:
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            assert c.get("/health").status_code == 200
            waits.append(time.monotonic() - t0)
            time.sleep(0.1)
    for t in threads:
        t.join(15)
    assert len(results) == 300
    assert all(d.startswith(b"HTTP/1.1 408") for d, _ in results)
    assert max(took for _, took in results) < GRACE + 3
    assert max(waits) < 0.5, max(waits)
    assert rss_mb(pid) - before < 30, (before, rss_mb(pid))


def test_slow_bodies_holding_every_connection_let_go_within_the_grace(sim_server):
    """With every worker connection taken by slow bodies, a new client waits for them to time
    out (about the grace), not for ever."""
    base = sim_server(*FLAGS, "--worker-connections", "40")
    socks = [open_slow(base, "/v1/completions", "Content-Length: 1000\r\n", b"{") for _ in range(40)]
    time.sleep(0.2)
    t0 = time.monotonic()
    r = httpx.get(base + "/health", timeout=10)
    waited = time.monotonic() - t0
    for s in socks:
        s.close()
    assert r.status_code == 200
    assert waited < GRACE + 1.5, waited
