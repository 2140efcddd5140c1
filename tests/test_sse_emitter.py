"""server/sse_emitter.py: streams driven from the event loop after their first deadline.

Unit tests drive :class:`HubEmitter` over a gevent socket pair with gunicorn's own Response
object (no server); the ``server`` tests check a real server's streams end to end: timing,
bytes, client disconnects.
"""
from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import gevent
import gevent.socket
import httpx
import pytest
from gunicorn.http import wsgi

from server import gunicorn_tuning
from server.sse_emitter import WRITE_KEY, HubEmitter, usable_response
from support import scrape
from generation.engine.simulator import ClientDisconnected
from generation.engine.request import SeqState

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def gunicorn_response(sock, version=(1, 1)):
    """gunicorn's Response for a POST on ``sock``, headers sent (as when a stream first waits)."""
    gunicorn_tuning.install()
    req = SimpleNamespace(version=version, method="POST", should_close=lambda: False)
    cfg = SimpleNamespace(is_ssl=False, protocol="http", header_map="drop", forwarded_allow_ips=[],
                          secure_scheme_headers={})
    resp = wsgi.Response(req, sock, cfg)
    write = resp.start_response("200 OK", [("Content-Type", "text/event-stream")])
    write(b"")                                   # the flush before the first wait
    return resp, write


def stream_pair(version=(1, 1), small_buffers: bool = False):
    """``(server socket, client socket, gunicorn Response)``: a gevent socket pair whose server
    side has sent a stream's headers and whose client side has read them.  ``small_buffers``:
    4 KB socket buffers, so that a large write fills them at once."""
    server, client = gevent.socket.socketpair()
    if small_buffers:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    resp, _ = gunicorn_response(server, version)
    client.recv(65536)                           # the headers
    return server, client, resp


def read_all(sock, until: bytes) -> bytes:
    out = b""
    while not out.endswith(until):
        data = sock.recv(65536)
        if not data:
            break
        out += data
    return out


def seq():
    return SimpleNamespace(state=SeqState.RUNNING, event=None)


def test_items_go_out_framed_and_never_before_their_deadline():
    server, client, resp = stream_pair()
    s = seq()
    t0 = time.monotonic()
    seen = []

    def body():
        for i, delay in enumerate((0.02, 0.04, 0.06)):
            yield t0 + delay
            seen.append((time.monotonic(), t0 + delay))
            if s.state == SeqState.ABORTED:
                raise ClientDisconnected()
            yield b"data: %d\n\n" % i
    it = body()
    first = next(it)
    outcome = HubEmitter(s, it, resp, server._sock).run(first)
    assert outcome == ("done", None)
    assert all(now >= due for now, due in seen)
    assert read_all(client, b"data: 2\n\n\r\n") == b"".join(b"9\r\ndata: %d\n\n\r\n" % i for i in range(3))
    assert resp.sent == 27 and s.event is None


def test_http_1_0_bodies_are_not_chunk_framed():
    server, client, resp = stream_pair(version=(1, 0))
    it = iter([b"data: x\n\n"])
    assert HubEmitter(seq(), it, resp, server._sock).run(time.monotonic()) == ("done", None)
    assert client.recv(100) == b"data: x\n\n"


def test_a_full_socket_hands_the_rest_back_to_the_greenlet():
    server, client, resp = stream_pair(small_buffers=True)
    big = b"x" * 1_000_000
    after = iter([b"data: after\n\n"])

    def body():
        yield big
        yield from after
    it = body()
    outcome, (pending, schedule) = HubEmitter(seq(), it, resp, server._sock).run(time.monotonic())
    assert outcome == "pending" and 0 < len(pending) < len(big) and schedule is None
    reader = gevent.spawn(read_all, client, b"data: after\n\n\r\n")
    server.sendall(pending)                      # what sse_body does, then it drives the rest
    write = resp.write
    for item in it:
        write(item)
    got = reader.get(timeout=10)
    assert got == b"%X\r\n" % len(big) + big + b"\r\nD\r\ndata: after\n\n\r\n"


def test_a_late_wake_up_after_the_hand_back_does_nothing():
    """A cancel queued while the emitter was handing the stream back must not advance the
    generator the greenlet now drives."""
    server, client = gevent.socket.socketpair()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    resp, _ = gunicorn_response(server)
    it = iter([b"x" * 1_000_000, b"next"])
    emitter = HubEmitter(seq(), it, resp, server._sock)
    outcome, _ = emitter.run(time.monotonic())
    assert outcome == "pending"
    emitter.switch()
    emitter._due()
    assert next(it) == b"next"


def test_cancel_wakes_the_stream_at_once():
    server, client = gevent.socket.socketpair()
    resp, _ = gunicorn_response(server)
    s = seq()

    def body():
        yield time.monotonic() + 30
        if s.state == SeqState.ABORTED:
            raise ClientDisconnected()
        yield b"never"
    it = body()
    first = next(it)

    def cancel():                                # as Simulator.cancel does
        s.state = SeqState.ABORTED
        gevent.get_hub().loop.run_callback(s.event.switch, None)
    gevent.spawn_later(0.05, cancel)
    t0 = time.monotonic()
    outcome, err = HubEmitter(s, it, resp, server._sock).run(first)
    assert outcome == "error" and isinstance(err, ClientDisconnected)
    assert time.monotonic() - t0 < 1


def test_a_closed_client_is_a_disconnect():
    server, client = gevent.socket.socketpair()
    resp, _ = gunicorn_response(server)
    client.close()
    it = iter([b"a" * 100_000] * 50)
    outcome, err = HubEmitter(seq(), it, resp, server._sock).run(time.monotonic())
    assert outcome == "error" and isinstance(err, ClientDisconnected)


def test_only_gunicorn_responses_on_plain_tcp_with_headers_out_are_taken():
    server, _ = gevent.socket.socketpair()
    resp, write = gunicorn_response(server)
    environ = {WRITE_KEY: write, "gunicorn.socket": server, "wsgi.url_scheme": "http"}
    assert usable_response(environ) == (resp, server._sock)
    # X-Forwarded-Proto from a TLS-terminating proxy: still plain TCP here
    assert usable_response({**environ, "wsgi.url_scheme": "https"}) == (resp, server._sock)
    tls_sock = SimpleNamespace(do_handshake=lambda: None, _sock=server._sock)      # an SSL socket

    class TLSResponse:
        sock, headers_sent, chunked, sent = tls_sock, True, True, 0

        def write(self, data):
            pass
    tls_env = {**environ, "gunicorn.socket": tls_sock, WRITE_KEY: TLSResponse().write}
    assert usable_response(tls_env) is None
    plain = SimpleNamespace(_sock=server._sock)                                # the same, plain
    TLSResponse.sock = plain
    assert usable_response({**tls_env, "gunicorn.socket": plain})[1] is server._sock
    assert usable_response({**environ, WRITE_KEY: lambda data: None}) is None      # another server
    assert usable_response({k: v for k, v in environ.items() if k != "gunicorn.socket"}) is None
    held, held_write = gunicorn_response(server)
    held.__dict__["_held_headers"] = b"HTTP/1.1 200 OK\r\n\r\n"                     # nothing sent yet
    assert usable_response({**environ, WRITE_KEY: held_write}) is None


# ---- a real server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def realtime(sim_server):
    return sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "10ms", "--max-num-seqs", "50")


def test_real_time_streams_arrive_whole_and_on_time(realtime):
    before = scrape(realtime)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 20, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    r = httpx.post(realtime + CHAT, json=body, timeout=30)
    events = [e for e in r.text.split("\n\n") if e]
    assert r.status_code == 200 and events[-1] == "data: [DONE]" and len(events) == 1 + 20 + 1 + 1 + 1
    after = scrape(realtime)

    def delta(name, **labels):
        key = (name, frozenset({"model_name": "test-model", "engine": "0", **labels}.items()))
        return after[key] - before[key]          # KeyError if the series does not exist
    assert delta("vllm:time_to_first_token_seconds_count") == 1
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.04") == 0       # never early
    assert delta("vllm:inter_token_latency_seconds_count") == 19
    # the last token never leaves before TTFT + 19 ITL (a late token may shorten the next gap)
    assert delta("vllm:e2e_request_latency_seconds_sum") >= 0.05 + 19 * 0.01


def test_a_client_leaving_mid_stream_frees_its_slot_at_once(realtime):
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500, ' \
           b'"ignore_eos": true, "stream": true}'
    host, port = realtime.rsplit("/", 1)[1].split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b'"content":"') < 4:
        got += s.recv(65536)
    s.close()                                    # 500 tokens x 10 ms: 5 s if nobody noticed
    deadline = time.monotonic() + 2
    while True:
        running = scrape(realtime).get(("vllm:num_requests_running",
                                        frozenset({"model_name": "test-model", "engine": "0"}.items())))
        if running == 0:
            break
        assert time.monotonic() < deadline, "slot still held"
        time.sleep(0.02)


# ---- the disconnect watcher on gevent's own sockets ---------------------------------------------

def test_disconnect_watcher_sees_a_closed_gevent_socket():
    """The watcher's callback peeks at the OS socket under gevent's socket (the server's kind)."""
    from blueprints.common import DisconnectWatcher
    server, client = gevent.socket.socketpair()
    cancelled = []
    sim = SimpleNamespace(expects_delay=lambda seqs: True, cancel=cancelled.append)
    with DisconnectWatcher(sim, ["seq"], {"gunicorn.socket": server}) as w:
        assert w.watcher is not None
        client.close()
        deadline = time.monotonic() + 2
        while not cancelled and time.monotonic() < deadline:
            gevent.sleep(0.01)
    assert cancelled == [["seq"]]


@pytest.mark.parametrize("stream", [True, False])
def test_leaving_during_ttft_or_in_the_queue_frees_everything_at_once(sim_server, stream):
    """TTFT 3 s, 2 slots, 3 requests (one queued); all clients leave after 0.3 s: running and
    waiting drop to 0 at once, and nothing counts as a success."""
    base = sim_server("--time-to-first-token", "3s", "--max-num-seqs", "2")
    host, port = base.rsplit("/", 1)[1].split(":")
    key = lambda name: (name, frozenset({"model_name": "test-model", "engine": "0"}.items()))  # noqa: E731

    def successes(m):
        return sum(v for (n, _), v in m.items() if n == "vllm:request_success_total")
    before = successes(scrape(base))
    body = (b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, '
            b'"stream": %s}' % (b"true" if stream else b"false"))
    socks = []
    for _ in range(3):
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        socks.append(s)
    deadline = time.monotonic() + 2
    while scrape(base).get(key("vllm:num_requests_waiting")) != 1:
        assert time.monotonic() < deadline, "third request not queued"
        time.sleep(0.02)
    time.sleep(0.3)
    for s in socks:
        s.close()
    t0 = time.monotonic()
    while True:
        m = scrape(base)
        if m.get(key("vllm:num_requests_running")) == 0 and m.get(key("vllm:num_requests_waiting")) == 0:
            break
        assert time.monotonic() - t0 < 1.5, "slots still held after the clients left"
        time.sleep(0.02)
    time.sleep(0.1)
    assert successes(scrape(base)) == before


def test_a_client_that_half_closes_gets_no_response(sim_server):
    """``nc -N``: the request is sent, then the client's side is shut.  As with vLLM's uvicorn
    the request is aborted and the connection dropped: no status line (the 499 is only logged)."""
    base = sim_server("--time-to-first-token", "3s", "--max-num-seqs", "2")
    host, port = base.rsplit("/", 1)[1].split(":")
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.2)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(2)
    t0 = time.monotonic()
    got = b""
    while True:
        data = s.recv(65536)
        if not data:
            break
        got += data
    s.close()
    assert got == b"" and time.monotonic() - t0 < 1.5
    assert httpx.get(base + "/health", timeout=5).status_code == 200
