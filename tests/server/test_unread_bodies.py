"""A request body answered before it was read (a 413, a refused media type) is not read on to
its end to keep the connection: past ``server.worker.DRAIN_MAX`` bytes, or mid-way through its
chunks, the connection is closed (gunicorn drained it in Python on the hub: a 9 MB body answered
413 held every other client ~190 ms)."""
from __future__ import annotations

import socket
from types import SimpleNamespace
from urllib.parse import urlparse

from server.worker import DRAIN_MAX, body_left_to_drain

BODY = b'{"model":"test-model","messages":[{"role":"user","content":"%s"}]}'


def _connect(base: str) -> socket.socket:
    u = urlparse(base)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    return s


def _head(s: socket.socket, step: int) -> bytes:
    """Bytes from ``s`` up to a blank line, read ``step`` at a time (1: nothing past the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = s.recv(step)
        if not part:
            break
        data += part
    return data


def _response(s: socket.socket, headers: list | None = None) -> bytes:
    """The status line of the next response on ``s`` (its header lines into ``headers``)."""
    head, _, rest = _head(s, 65536).partition(b"\r\n\r\n")
    length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), 0))
    while len(rest) < length:
        rest += s.recv(65536)
    if headers is not None:
        headers += [ln.lower() for ln in head.split(b"\r\n")[1:]]
    return head.split(b"\r\n")[0]


def _closed(s: socket.socket) -> bool:
    """Whether the server closed the connection (a kept one stays silent: not closed)."""
    s.settimeout(3)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_a_large_body_answered_early_closes_the_connection(sim_server):
    base = sim_server("--max-request-body-size-mb", "1")
    s = _connect(base)
    body = BODY % (b"a" * (3 << 20))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    try:
        s.sendall(body)
    except OSError:
        pass                                   # the server may close before it has all of it
    headers: list = []
    assert _response(s, headers) == b"HTTP/1.1 413 Request Entity Too Large"
    assert b"connection: close" in headers        # it says so: a client does not reuse it and meet the reset
    assert _closed(s)
    s.close()


def test_a_small_body_answered_early_keeps_the_connection(sim_server):
    base = sim_server("--max-request-body-size-mb", "1")
    s = _connect(base)
    body = BODY % b"hi"
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    headers: list = []
    assert _response(s, headers).startswith(b"HTTP/1.1 4")  # the media type's refusal, body unread
    assert b"connection: keep-alive" in headers
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")     # the same connection serves on
    assert _response(s) == b"HTTP/1.1 200 OK"
    s.close()


def test_what_is_left_to_drain():
    def req(reader):
        return SimpleNamespace(body=SimpleNamespace(reader=reader))
    assert not body_left_to_drain(req(SimpleNamespace(length=0)))
    assert not body_left_to_drain(req(SimpleNamespace(length=DRAIN_MAX)))
    assert body_left_to_drain(req(SimpleNamespace(length=DRAIN_MAX + 1)))
    assert body_left_to_drain(req(SimpleNamespace(parser=iter(()))))       # chunks not all read
    assert not body_left_to_drain(req(SimpleNamespace(parser=None)))        # read to the end
    assert not body_left_to_drain(SimpleNamespace())                        # (no body at all)


def _interim_or_final(s: socket.socket) -> bytes:
    """The next status line on ``s``: an interim ``100 Continue`` (its empty head consumed) or
    the final answer's."""
    s.settimeout(10)
    return _head(s, 1).split(b"\r\n")[0]


def test_100_continue_is_sent_when_the_body_is_read_as_uvicorn_sends_it(sim_server):
    """``Expect: 100-continue``: the interim answer goes out when the application first reads
    the body (uvicorn's ``receive()``), so a body refused from the head alone (413 by its
    Content-Length) is never invited: a client that waits (curl past 1 MB) does not send it, and
    the connection closes after the answer since the body may never come.  A body that is read
    gets its ``100 Continue`` first, then its answer, and the connection serves on."""
    base = sim_server("--max-request-body-size-mb", "1")
    s = _connect(base)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (3 << 20))
    headers: list = []
    assert _response(s, headers) == b"HTTP/1.1 413 Request Entity Too Large"   # no 100 before it
    assert b"connection: close" in headers
    assert _closed(s)
    s.close()

    s = _connect(base)
    body = BODY % b"hi"
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    assert _interim_or_final(s) == b"HTTP/1.1 100 Continue"     # invited: then it is sent
    s.sendall(body)
    headers = []
    assert _response(s, headers) == b"HTTP/1.1 200 OK"
    assert b"connection: keep-alive" in headers
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _response(s) == b"HTTP/1.1 200 OK"

    # refused from its head (a media type vLLM does not take), its small body never invited
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    headers = []
    assert _response(s, headers).startswith(b"HTTP/1.1 4")
    assert b"connection: close" in headers
    assert _closed(s)
    s.close()


def test_100_continue_for_a_chunked_body_and_none_for_a_body_sent_at_once(sim_server):
    base = sim_server()
    s = _connect(base)
    body = BODY % b"hi"
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert _interim_or_final(s) == b"HTTP/1.1 100 Continue"
    s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    assert _response(s) == b"HTTP/1.1 200 OK"
    # a client that sends its body without waiting: it is read from the buffer, nothing invited
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    headers: list = []
    assert _response(s, headers) == b"HTTP/1.1 200 OK"
    assert b"connection: keep-alive" in headers
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _response(s) == b"HTTP/1.1 200 OK"
    s.close()
