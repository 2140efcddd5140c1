"""Issue 23's "done when" for the faults that need real sockets: each flood is refused or held
to its documented bound, a ``/health`` probe on fresh connections answers within 0.5 s while
it runs (times the machine's oversubscription, :func:`support.hub_probe.health_bound`) (a burst of new connections: within its documented figure), and the server's RSS
afterwards is within a stated bound of before.

* fault 4: slow bodies (and slow headers) on every worker connection: the oldest unfinished
  connections are closed to admit new ones (``server/unfinished.py``);
* fault 5: ``SCRIPT_NAME`` / ``PATH_INFO`` request headers from a loopback peer;
* fault 10: a ``FFFFFFFFFFFFFFFF`` chunk size on every connection (a size past 64 bits is a
  400 at once), a burst of new connections, half-open TLS handshakes.
"""
from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from support.hub_probe import ServerHealthProbe, health_bound, rss_mb
from support.sockets import raw_request, self_signed_server

GRACE = 2                       # --timeout-keep-alive of these servers
POOL = 100                      # --worker-connections of the flood servers


def server_pid(pool, base: str) -> int:
    return next(proc.pid for proc, b in pool.procs.values() if b == base)


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def open_many(base: str, head: bytes, n: int) -> list:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port_of(base)), timeout=5)
        s.sendall(head)
        socks.append(s)
    return socks


def answers(socks: list, within: float) -> dict:
    """What each connection got within ``within`` seconds: its status line's code (``408``),
    ``closed`` (no bytes) or ``open``."""
    out: dict = {}
    end = time.monotonic() + within
    for s in socks:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data = s.recv(4096)
            key = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
        except socket.timeout:
            key = "open"
        except OSError:
            key = "closed"
        out[key] = out.get(key, 0) + 1
        s.close()
    return out


@pytest.fixture(scope="module")
def flood_server(_pool, sim_server):
    # a 1 MiB body limit: a chunked body's deadline is the grace plus the limit at 1 MiB/s (3 s,
    # not the default limit's 6 s: the huge-chunk flood waited that out), as in test_slow_bodies
    base = sim_server("--timeout-keep-alive", str(GRACE), "--worker-connections", str(POOL),
                      "--max-request-body-size-mb", "1")
    return base, server_pid(_pool, base)


SLOW_BODY = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")
SLOW_HEADERS = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl"
HUGE_CHUNK = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n{")     # 2**64-1: the most llhttp takes


@pytest.mark.parametrize("name,head", [("fault4_slow_bodies", SLOW_BODY), ("fault4_slow_headers", SLOW_HEADERS),
                                       ("fault10_huge_chunk_size", HUGE_CHUNK)],
                         ids=["fault4_slow_bodies", "fault4_slow_headers", "fault10_huge_chunk_size"])
def test_floods_on_every_worker_connection_leave_room_for_new_clients(flood_server, name, head):
    """Twice ``--worker-connections`` connections that never finish their request: before,
    every new client waited until they timed out (5.5 s at the defaults, for ever before the
    body deadline).  Now /health answers within 0.5 s throughout, each flood connection is
    answered 408 (a body) or closed (headers) within the grace, and memory comes back."""
    base, pid = flood_server
    httpx.get(base + "/health")
    before = rss_mb(pid)
    first = open_many(base, head, POOL)            # every worker connection
    time.sleep(0.3)
    probe = ServerHealthProbe(base)
    more = open_many(base, head, POOL)             # and as many again, while /health is probed
    time.sleep(0.5)
    health = probe.stop()
    got = answers(first + more, GRACE + 4)
    assert set(got) <= {"408", "closed"}, got      # none left open past its deadline
    if head is not SLOW_HEADERS:
        assert got.get("408", 0) >= POOL, got      # bodies get their 408, evicted or timed out
    assert health < health_bound(), (name, health, health_bound())
    time.sleep(0.5)
    assert rss_mb(pid) - before < 20, (before, rss_mb(pid))


def test_fault5_forwarder_headers_are_ignored_under_load(_pool, server):
    """A ``SCRIPT_NAME`` header from a loopback peer was a 500 on every route: 400 such requests
    from 8 threads are all answered as without it."""
    pid = server_pid(_pool, server)
    body = b'{"model":"test-model","prompt":"hi","max_tokens":2}'
    reqs = [f"GET /health HTTP/1.1\r\nHost: x\r\nSCRIPT_NAME: /other\r\nConnection: close\r\n\r\n".encode(),
            (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nSCRIPT_NAME: /v1\r\nPATH_INFO: /metrics\r\n"
             f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body]
    statuses: list = []

    def client():
        for i in range(50):
            statuses.append(int(raw_request(server, reqs[i % 2]).split(b" ", 2)[1]))
    httpx.get(server + "/health")
    before = rss_mb(pid)
    probe = ServerHealthProbe(server)
    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    health = probe.stop()
    assert statuses == [200] * 400 or sorted(set(statuses)) == [200], sorted(set(statuses))
    assert len(statuses) == 400
    assert health < health_bound(), (health, health_bound())
    assert rss_mb(pid) - before < 20, (before, rss_mb(pid))


def test_fault5_an_unknown_transfer_coding_is_a_400(_pool, server):
    """``Transfer-Encoding: xchunked`` got gunicorn's 501: a client's input is never a 5xx, so
    it is uvicorn's 400 (vLLM's server) and the connection closes; 300 of them from 6 threads."""
    pid = server_pid(_pool, server)
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    got: list = []

    def client():
        for _ in range(50):
            got.append(raw_request(server, req))
    httpx.get(server + "/health")
    before = rss_mb(pid)
    probe = ServerHealthProbe(server)
    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    health = probe.stop()
    assert len(got) == 300
    assert set(got) == {b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        b"Content-Length: 30\r\nConnection: close\r\n\r\nInvalid HTTP request received."}, got[0]
    assert health < health_bound(), (health, health_bound())
    assert rss_mb(pid) - before < 20, (before, rss_mb(pid))


UNPARSABLE_HEADS = {
    "a header line without a colon": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    "an unknown HTTP version": b"GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n",
    "200 header lines": b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                        + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
    "obsolete line folding": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  more\r\n\r\n",
    "a bad chunk size": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\nZZ\r\nhello\r\n0\r\n\r\n",
    "a TLS hello on the plain port": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40) + b"\r\n\r\n",
}


def test_every_unparsable_head_gets_uvicorns_400(server):
    """gunicorn answered these with HTML pages (400, or 431 for too many header lines); vLLM's
    uvicorn answers any request it cannot parse with one plain-text 400 and closes."""
    for what, req in UNPARSABLE_HEADS.items():
        assert raw_request(server, req) == (
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: 30\r\nConnection: close\r\n\r\nInvalid HTTP request received."), what
    assert httpx.get(server + "/health").status_code == 200


BURST = 1500
BURST_HEALTH_S = 3.0           # documented: ~0.5-1 ms a connection ahead in the accept queue


def test_fault10_a_burst_of_new_connections_is_served_in_order(_pool, server):
    """1,500 connections at once (within the 4,096 accept backlog, so no SYN is dropped): every
    one is answered, and a probe among them waits for those ahead of it in the kernel's
    accept queue (a documented bound, not 0.5 s: 0.85-2.9 s for 2,000 on the 2-core machine),
    then memory comes back."""
    import selectors
    pid = server_pid(_pool, server)
    httpx.get(server + "/health")
    before = rss_mb(pid)
    probe = ServerHealthProbe(server)
    time.sleep(0.15)
    sel = selectors.DefaultSelector()
    req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    pending = {}
    for _ in range(BURST):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port_of(server)))
        pending[s] = "connect"
        sel.register(s, selectors.EVENT_WRITE)
    ok = 0
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            if pending[s] == "connect":
                s.send(req)
                pending[s] = "read"
                sel.modify(s, selectors.EVENT_READ)
                continue
            data = s.recv(65536)
            ok += data.startswith(b"HTTP/1.1 200")
            sel.unregister(s)
            pending.pop(s)
            s.close()
    for s in pending:
        s.close()
    health = probe.stop()
    assert ok == BURST
    assert health < health_bound(BURST_HEALTH_S), (health, health_bound(BURST_HEALTH_S))
    time.sleep(0.5)
    assert rss_mb(pid) - before < 30, (before, rss_mb(pid))


HELLO = bytes.fromhex("16030100f4010000f00303") + b"\x01" * 32 + b"\x00" * 17    # half a ClientHello


def test_fault10_half_open_tls_handshakes(tmp_path):
    """Half-open handshakes left ~51 KB each in glibc's arenas (58 -> 688 MB after 4 rounds of
    10,000): three rounds of 500, /health (a full TLS handshake each) answering within 0.5 s
    while they are open, RSS back within 12 MB."""
    with self_signed_server() as (proc, base):
        before = rss_mb(proc.pid)

        def trimmed_within(seconds: float) -> float:
            """RSS once it is back within 12 MB of before, or at ``seconds`` (the server trims
            ~0.3 s after a wave of closes: waiting for it, not a fixed 1.5 s, saves seconds)."""
            deadline = time.monotonic() + seconds
            while (rss := rss_mb(proc.pid)) - before >= 12 and time.monotonic() < deadline:
                time.sleep(0.05)
            return rss
        probe = ServerHealthProbe(base, verify=False)
        for round_ in range(3):
            socks = open_many(base, HELLO, 500)
            time.sleep(0.5)
            for s in socks:
                s.close()
            closed = time.monotonic()
            if round_ < 2:
                trimmed_within(1.5)      # closed, then trimmed within a second or two
        health = probe.stop()
        after = trimmed_within(2.5 - (time.monotonic() - closed))     # as before: 1.5 s, then 1 s
        assert health < health_bound(), (health, health_bound())
        assert after - before < 12, (before, after)
