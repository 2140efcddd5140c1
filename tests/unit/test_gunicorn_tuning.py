"""gunicorn_tuning: headers leave with the first body bytes, and every byte still goes out in
order (unit tests on gunicorn's Response with a recording socket)."""
from __future__ import annotations

import errno
from types import SimpleNamespace

import pytest
from gunicorn.http import wsgi

from server import gunicorn_tuning
from server.gunicorn_tuning import uvicorn_status_line


class Sock:
    def __init__(self):
        self.sends = []

    def sendall(self, data):
        self.sends.append(bytes(data))

    def send(self, data):
        self.sends.append(bytes(data))
        return len(data)

    def gettimeout(self):
        return None

    def settimeout(self, value):
        pass

    def fileno(self):
        return -1


def response(status="200 OK", headers=(("Content-Type", "application/json"),), method="POST"):
    req = SimpleNamespace(version=(1, 1), method=method, should_close=lambda: False)
    cfg = SimpleNamespace(is_ssl=False, protocol="http", header_map="drop", forwarded_allow_ips=[],
                          secure_scheme_headers={})
    sock = Sock()
    resp = wsgi.Response(req, sock, cfg)
    resp.start_response(status, list(headers))
    return resp, sock


@pytest.fixture(autouse=True, scope="module")
def installed():
    gunicorn_tuning.install()
    gunicorn_tuning.install()          # idempotent


def test_sized_body_is_one_send():
    resp, sock = response(headers=(("Content-Type", "application/json"), ("Content-Length", "2")))
    resp.write(b"{}")
    resp.close()
    assert len(sock.sends) == 1
    head, body = sock.sends[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 2" in head and body == b"{}"


def test_chunked_stream_headers_ride_with_the_first_chunk_and_the_end_is_framed():
    resp, sock = response(headers=(("Content-Type", "text/event-stream"),))
    resp.write(b"data: 1\n\n")
    resp.write(b"data: 2\n\n")
    resp.close()
    assert len(sock.sends) == 3
    assert sock.sends[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")
    assert b"Transfer-Encoding: chunked" in sock.sends[0]
    assert sock.sends[1:] == [b"9\r\ndata: 2\n\n\r\n", b"0\r\n\r\n"]


def test_a_stream_told_its_last_write_ends_in_that_send():
    resp, sock = response(headers=(("Content-Type", "text/event-stream"),))
    resp.write(b"data: 1\n\n")
    assert gunicorn_tuning.end_with_next_write(resp)
    resp.write(b"")                    # an empty write sends nothing and keeps the end for the next
    resp.write(b"data: 2\n\n")
    resp.write(b"data: late\n\n")     # nothing may follow the end
    resp.close()
    assert sock.sends[1:] == [b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"]
    assert not gunicorn_tuning.end_with_next_write(resp)
    http10, _ = response(headers=(("Content-Type", "text/event-stream"),))
    http10.chunked = False             # an HTTP/1.0 body ends with the connection
    assert not gunicorn_tuning.end_with_next_write(http10)


def test_an_empty_write_flushes_the_headers_at_once():
    resp, sock = response(headers=(("Content-Type", "text/event-stream"),))
    resp.write(b"")                    # a stream's flush before its first token
    assert len(sock.sends) == 1 and sock.sends[0].startswith(b"HTTP/1.1 200 OK") \
        and sock.sends[0].endswith(b"\r\n\r\n")
    resp.close()
    assert sock.sends[1] == b"0\r\n\r\n"


def test_no_body_response_still_sends_its_headers():
    resp, sock = response(status="204 No Content", headers=())
    resp.close()
    assert len(sock.sends) == 1 and sock.sends[0].startswith(b"HTTP/1.1 204 No Content")


class ShortSock(Sock):
    """A socket whose ``send`` takes 3 bytes at most (a full kernel buffer)."""

    def send(self, data):
        self.sends.append(bytes(data[:3]))
        return min(3, len(data))


def test_a_partial_send_is_completed_in_order():
    sock = ShortSock()
    gunicorn_tuning.send_all(sock, b"0123456789")
    assert b"".join(sock.sends) == b"0123456789" and sock.sends[0] == b"012"
    n = len(sock.sends)
    gunicorn_tuning.send_all(sock, b"")
    assert len(sock.sends) == n


class FullSock(Sock):
    """A socket whose buffer stays full: ``send`` times out as gevent's does under a timeout."""

    def __init__(self):
        super().__init__()
        self.timeout = None

    def send(self, data):
        if self.timeout is None:
            raise AssertionError("waited for good")
        raise TimeoutError("timed out")

    def gettimeout(self):
        return self.timeout

    def settimeout(self, value):
        self.timeout = value


def test_a_client_that_takes_nothing_is_a_stalled_reader(monkeypatch):
    from blueprints import streaming
    monkeypatch.setattr(streaming, "WRITE_STALL_S", 0.5)
    sock = FullSock()
    with pytest.raises(streaming.StalledReader) as err:
        streaming.send_all_or_stall(sock, b"0123456789")
    assert err.value.errno == errno.EPIPE and sock.timeout is None      # quiet in gunicorn; restored
    with pytest.raises(streaming.StalledReader):      # a response's first send too (a TLS send blocks)
        gunicorn_tuning.send_all(FullSock(), b"0123456789")


def test_date_header_is_gunicorns_to_the_second(monkeypatch):
    from email.utils import formatdate

    from gunicorn import util
    for _ in range(3):
        before = formatdate(None, localtime=False, usegmt=True)
        got = util.http_date()
        after = formatdate(None, localtime=False, usegmt=True)
        assert got in (before, after)
    assert util.http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    ticks = iter([1000.2, 1000.9, 1001.1])
    monkeypatch.setattr(gunicorn_tuning.time, "time", lambda: next(ticks))
    assert util.http_date() == util.http_date(1000) == "Thu, 01 Jan 1970 00:16:40 GMT"
    assert util.http_date() == "Thu, 01 Jan 1970 00:16:40 GMT"
    assert util.http_date() == "Thu, 01 Jan 1970 00:16:41 GMT"


def test_forwarded_allow_list_answer_is_gunicorns():
    import ipaddress

    from gunicorn.http import message
    allow = ["127.0.0.1", "10.0.0.0/8"]
    nets = [ipaddress.ip_network(a) for a in allow]
    for ip, want in (("127.0.0.1", True), ("10.1.2.3", True), ("192.168.0.1", False), ("not-an-ip", False),
                     ("127.0.0.1", True), ("192.168.0.1", False)):
        assert message._ip_in_allow_list(ip, allow, nets) is want


def test_one_wsgi_errors_stream_per_config():
    cfg = SimpleNamespace(errorlog="-")
    assert wsgi.WSGIErrorsWrapper(cfg) is wsgi.WSGIErrorsWrapper(cfg)


def test_script_name_is_the_environments_read_once():
    import os
    assert wsgi.os.environ.get("SCRIPT_NAME", "") == os.environ.get("SCRIPT_NAME", "")
    assert wsgi.os.lseek is os.lseek and wsgi.os.SEEK_SET == os.SEEK_SET     # the rest is os itself


def test_pre_request_hook_is_skipped_unless_debug():
    from gunicorn.config import Config

    from server.serve import apply_server_settings
    for level, quiet in (("info", True), ("debug", False)):
        cfg = Config()
        config = SimpleNamespace(worker_connections=10, timeout_keep_alive=5, log_level=level,
                                 disable_log_requests=True)
        apply_server_settings(cfg.set, config, None)
        assert (cfg.pre_request is gunicorn_tuning.no_pre_request) is quiet


def test_frozen_config_reads_gunicorns_values_and_forgets_on_set():
    from gunicorn.config import Config
    cfg = Config()
    gunicorn_tuning.freeze_config(cfg)
    gunicorn_tuning.freeze_config(cfg)          # idempotent
    assert cfg.limit_request_line == Config().limit_request_line == 4094
    assert "limit_request_line" in vars(cfg)    # the second read is a plain attribute
    cfg.set("keepalive", 7)
    assert cfg.keepalive == 7
    cfg.set("keepalive", 9)
    assert cfg.keepalive == 9


class RecvSock:
    def __init__(self, data: bytes):
        self.data = data

    def recv(self, n):
        out, self.data = self.data[:n], self.data[n:]
        return out


@pytest.mark.parametrize("pipelined", [b"", b"POST /v1/completions HTTP/1.1\r\n"])
def test_front_door_takes_a_buffered_body_as_gunicorn_reads_it(pipelined):
    """FrontDoor._buffered: the bytes gunicorn's Body.read(n) returns, the reader left at the
    body's end, and what follows the body (a pipelined request) left in the buffer."""
    from gunicorn.http.body import Body, LengthReader
    from gunicorn.http.unreader import SocketUnreader

    from server.wsgi_layers import FrontDoor
    body = b'{"prompt": "hi"}'
    door = FrontDoor.__new__(FrontDoor)
    door._body_cls, door._length_cls = (Body,), LengthReader

    def body_reader(sock_data: bytes, buffered: bytes):
        un = SocketUnreader(RecvSock(sock_data))
        un.buf.write(buffered)
        return Body(LengthReader(un, len(body))), un

    inp, un = body_reader(b"", body + pipelined)
    assert door._buffered(inp, len(body)) == body
    assert inp.read(100) == b""                      # nothing left of this body
    assert un.read() == pipelined or (not pipelined and un.buf.getvalue() == b"")
    ref, _ = body_reader(b"", body + pipelined)
    assert ref.read(len(body)) == body                # gunicorn's own answer
    partial, _ = body_reader(body[5:], body[:5])       # not all buffered: left to the timed read
    assert door._buffered(partial, len(body)) is None
    assert partial.read(len(body)) == body


HEADS = [
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}",
    b"GET /v1/models?x=1&y=%20 HTTP/1.0\r\nHost: h\r\nAccept: a\r\naccept: b\r\nX-Request-Id: r1\r\n\r\n",
    b"GET /a%2Fb/%7e HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET /caf%C3%A9?q=%ZZ HTTP/1.1\r\nHost: h\r\n\r\n",
    b"HEAD /health HTTP/1.1\r\nCookie: a=1\r\nCookie: b=2\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
    b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
]


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("client, server", [(("127.0.0.1", 4321), "127.0.0.1:8000"),
                                            (("::1", 4321, 0, 0), "[::1]:8000"),
                                            (("10.0.0.1", 1), "/tmp/sock"),
                                            (("127.0.0.1", 4321), ("127.0.0.1", 8000)),    # getsockname()
                                            (("::1", 4321, 0, 0), ("::1", 8000, 0, 0))])
def test_lean_create_gives_gunicorns_environ(head, client, server):
    """The lean ``wsgi.create`` builds the same environ (keys, values, order) and response as
    gunicorn's own, for plain heads and for the ones it hands to gunicorn."""
    from gunicorn.config import Config
    from gunicorn.http.unreader import IterUnreader

    from server.request_head import LeanRequest
    cfg = Config()
    cfg.set("forwarder_headers", "")
    original = wsgi.create.original
    assert getattr(wsgi.create, "_lean", False) and not getattr(original, "_lean", False)
    got = []
    for fn in (wsgi.create, original):
        req = LeanRequest(cfg, IterUnreader([head]), client, 1)
        sock = Sock()
        resp, env = fn(req, sock, client, server, cfg)
        hints = env.pop("wsgi.early_hints")
        assert [c.cell_contents for c in hints.__closure__] == [req, resp, sock]
        assert type(resp) is wsgi.Response and resp.req is req and resp.sock is sock and resp.cfg is cfg
        env["wsgi.input"] = type(env["wsgi.input"])
        env["gunicorn.socket"] = env["gunicorn.socket"] is sock
        got.append((list(env.items()), sock.sends))
    assert got[0] == got[1]


@pytest.mark.parametrize("status, headers, method", [
    ("200 OK", [("Content-Type", "application/json"), ("Content-Length", " 12 ")], "POST"),
    ("200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("Connection", "close"),
                ("X-Request-Id", "a\tb ")], "POST"),
    ("200 OK", [("Content-Type", "application/json")], "HEAD"),
    ("204 No Content", [("Content-Length", "0")], "POST"),
    ("404 NOT FOUND", [("X-Bad", "a\r\nInjected: 1")], "GET"),
    ("200 OK", [("Bad Name", "x")], "GET"),
    ("200 OK", [(b"Content-Type", "x")], "GET"),
    ("200 OK", [("Content-Type", b"x")], "GET"),
    ("2000 WHAT", [], "GET"),
    (b"200 OK", [], "GET"),
])
def test_remembered_start_response_is_gunicorns(status, headers, method):
    """The same state (status, code, headers, length, chunking) or the same error as
    gunicorn's ``start_response``, the first time (gunicorn's code) and once remembered."""
    def run(fn):
        req = SimpleNamespace(version=(1, 1), method=method, should_close=lambda: False)
        cfg = SimpleNamespace(is_ssl=False, protocol="http")
        resp = wsgi.Response(req, Sock(), cfg)
        try:
            fn(resp, status, list(headers))
        except Exception as e:      # noqa: BLE001 - compared below
            return type(e), str(e), resp.headers
        return (resp.status, resp.status_code, resp.headers, resp.response_length, resp.chunked,
                resp._omits_body, resp.upgrade)
    want = run(lambda resp, status, headers: wsgi.Response.start_response.original(
        resp, uvicorn_status_line(status) if isinstance(status, str) else status, headers))
    for _ in range(3):                    # the first call fills the memo, the next ones use it
        assert run(wsgi.Response.start_response) == want



@pytest.mark.parametrize("status, line", [
    ("400 BAD REQUEST", "400 Bad Request"), ("408 REQUEST TIMEOUT", "408 Request Timeout"),
    ("404 NOT FOUND", "404 Not Found"), ("200 OK", "200 OK"), ("429 TOO MANY REQUESTS", "429 Too Many Requests"),
    ("499 CLIENT CLOSED REQUEST", "499 CLIENT CLOSED REQUEST"), ("2000 WHAT", "2000 WHAT"), ("OK", "OK"),
])
def test_status_lines_are_spelled_as_uvicorn_spells_them(status, line):
    """uvicorn writes ``http.HTTPStatus``'s phrase; werkzeug (Flask's routes) upper-cases it."""
    assert uvicorn_status_line(status) == line
    resp = wsgi.Response(SimpleNamespace(version=(1, 1), method="GET", should_close=lambda: False), Sock(),
                         SimpleNamespace(is_ssl=False, protocol="http"))
    if status.partition(" ")[0].isdigit() and len(status.partition(" ")[0]) == 3:
        resp.start_response(status, [("Content-Length", "0")])
        assert resp.status == line
