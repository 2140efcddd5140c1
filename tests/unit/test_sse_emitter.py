"""server/sse_emitter.py: streams driven from the event loop after their first deadline.
:class:`HubEmitter` over a gevent socket pair with gunicorn's own Response object (no server;
``support.emitter``), and the disconnect watcher on gevent's sockets.  A real server's streams:
tests/server/test_streams_and_disconnects.py.
"""
from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import gevent
import gevent.socket

from generation.engine.request import SeqState
from generation.engine.simulator import ClientDisconnected
from server.sse_emitter import WRITE_KEY, HubEmitter, usable_response
from support.emitter import gunicorn_response, read_all, stream_pair


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
    # the last bytes carry the chunked body's end (one send), and the response's close sends nothing more
    assert read_all(client, b"\r\n0\r\n\r\n") == b"".join(b"9\r\ndata: %d\n\n\r\n" % i for i in range(3)) + b"0\r\n\r\n"
    assert resp.sent == 27 and s.event is None and resp.ended
    resp.close()
    resp.write(b"data: late\n\n")
    client.setblocking(False)
    try:
        assert client.recv(100) == b""
    except BlockingIOError:
        pass


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
    it = iter([b"x" * 1_000_000, b"next", b"after"])
    emitter = HubEmitter(seq(), it, resp, server._sock)
    outcome, (pending, then) = emitter.run(time.monotonic())
    # the item read after the bytes that did not fit (to know whether they were the last) is
    # handed back with them, framed
    assert outcome == "pending" and then is None and bytes(pending).endswith(b"\r\n4\r\nnext\r\n")
    emitter.switch()
    emitter._due()
    assert next(it) == b"after"


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


def held_headers_response():
    """A gunicorn response whose headers are held for the first body bytes (a stream set up in a
    burst: no flush before its first wait), on a socket pair: ``(resp, server, client)``."""
    from gunicorn.http import wsgi

    from server import gunicorn_tuning
    gunicorn_tuning.install()
    server, client = gevent.socket.socketpair()
    req = SimpleNamespace(version=(1, 1), method="POST", should_close=lambda: False)
    cfg = SimpleNamespace(is_ssl=False, protocol="http", header_map="drop", forwarded_allow_ips=[],
                          secure_scheme_headers={})
    resp = wsgi.Response(req, server, cfg)
    write = resp.start_response("200 OK", [("Content-Type", "text/event-stream")])
    assert usable_response({WRITE_KEY: write, "gunicorn.socket": server}) == (resp, server._sock)
    return resp, server, client


def test_held_headers_leave_while_the_stream_waits_on_an_idle_loop():
    """The emitter takes a stream whose headers were held: they go out in the loop's first idle
    turn, before the first token is due, not with it (a burst's first tokens then fall due
    together without the headers' bytes and sends), and the first chunk goes alone."""
    resp, server, client = held_headers_response()
    due = time.monotonic() + 0.25             # margin for a loaded machine: the head goes at once
    got = []

    def read():
        got.append((client.recv(4096), time.monotonic()))
        got.append((read_all(client, b"data: 0\n\n\r\n0\r\n\r\n"), time.monotonic()))
    reader = gevent.spawn(read)
    outcome = HubEmitter(seq(), iter([b"data: 0\n\n"]), resp, server._sock).run(due)
    assert outcome == ("done", None)
    reader.join(timeout=5)
    (head, t_head), (body, t_body) = got
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n") and b"Transfer-Encoding: chunked" in head
    assert t_head < due <= t_body
    assert body == b"9\r\ndata: 0\n\n\r\n0\r\n\r\n" and resp.headers_sent and resp.sent == 9


def test_held_headers_to_a_client_that_left_hand_back_a_disconnect():
    """The idle turn's header send finds the client gone: the greenlet gets a disconnect at once,
    not at the first token's deadline."""
    resp, server, client = held_headers_response()
    client.close()
    t0 = time.monotonic()
    outcome, err = HubEmitter(seq(), iter([b"data: 0\n\n"]), resp, server._sock).run(t0 + 5.0)
    assert outcome == "error" and isinstance(err, ClientDisconnected) and time.monotonic() - t0 < 1.0


def test_held_headers_go_once_before_a_first_token_already_due():
    """A first token already due when the emitter takes the stream: the headers go once, first,
    whether the token's write carries them or the idle turn came first (libev may run the idle
    watcher before a timer that fell due in the same instant)."""
    resp, server, client = held_headers_response()
    writes = []

    class Counted:                          # the OS socket, its sends counted
        def send(self, data):
            writes.append(bytes(data))
            return server._sock.send(data)
    outcome = HubEmitter(seq(), iter([b"data: 0\n\n"]), resp, Counted()).run(time.monotonic())
    assert outcome == ("done", None)
    gevent.sleep(0.01)
    assert 1 <= len(writes) <= 2 and writes[0].startswith(b"HTTP/1.1 200 OK")
    head, body = b"".join(writes).split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding: chunked" in head and b"HTTP/1.1" not in body
    assert body == b"9\r\ndata: 0\n\n\r\n0\r\n\r\n" and resp.headers_sent and resp.sent == 9


def test_step_sends_send_the_chunk_rendered_ahead_in_one_pass():
    """StepSends.presend: the foreseen token's framed chunk goes out at the step's end; the
    stream's tick then counts it (one render per token) and renders the next one ahead."""
    from generation.engine.scheduler import EngineRequest
    from generation.engine.token_schedule import TokenSchedule
    server, client, resp = stream_pair()
    rendered = []

    def render(k):
        rendered.append(k)
        return b"data: %d\n\n" % k
    ereq = EngineRequest(4, 5)
    ereq.state, ereq.num_output, ereq.last_token = EngineRequest.RUNNING, 1, time.monotonic()
    s = SimpleNamespace(state=SeqState.RUNNING, event=None, engine_req=ereq, pieces=["a"] * 5)
    engine = SimpleNamespace(presend=None)
    lags = []
    metrics = SimpleNamespace(token_lag=None, itl=SimpleNamespace(observe=None),
                              lag=SimpleNamespace(observe_n=lambda v, n: lags.append(n)))
    schedule = TokenSchedule.of_engine(s, 1, 5, engine, metrics, SimpleNamespace(config=SimpleNamespace()))
    schedule.render = render
    emitter = HubEmitter(s, iter([]), resp, server._sock)
    emitter.active = True
    emitter._start_schedule(schedule)             # nothing emitted yet: token 1 rendered ahead
    assert rendered == [1] and ereq in emitter.sends.ready and engine.presend == emitter.sends.presend
    ereq.num_output = 2                           # the step emits token 1
    engine.presend([ereq])
    assert read_all(client, b"data: 1\n\n\r\n") == b"9\r\ndata: 1\n\n\r\n"
    emitter._step_tick(ereq)                      # the accounting, and token 2 ahead
    assert schedule.next == 2 and rendered == [1, 2] and lags == [1] and resp.sent == 9
    ereq.num_output = 4                           # two tokens in one step: not foreseen, rendered here
    engine.presend([ereq])
    emitter._step_tick(ereq)
    assert rendered == [1, 2, 3] and schedule.next == 4
    assert read_all(client, b"data: 3\n\n\r\n") == b"12\r\ndata: 2\n\ndata: 3\n\n\r\n"     # one write


def test_step_sends_send_the_last_token_ahead_and_order_the_ticks():
    """The last token's chunk (it carries the finish) is rendered ahead too when the renderer is
    ``pure``, and sent in the step's pass although the request is then done; presend returns the
    step's requests with the streams that had nothing sent first (their bytes wait for their
    ticks), then the ones it sent."""
    from generation.engine.scheduler import EngineRequest
    from generation.engine.token_schedule import TokenSchedule
    server, client, resp = stream_pair()
    rendered = []

    def render(k):
        rendered.append(k)
        return b"data: %d%s\n\n" % (k, b" end" if k == 4 else b"")
    render.pure = True
    ereq = EngineRequest(4, 5)
    ereq.state, ereq.num_output, ereq.last_token = EngineRequest.RUNNING, 4, time.monotonic()
    s = SimpleNamespace(state=SeqState.RUNNING, event=None, engine_req=ereq, pieces=["a"] * 5)
    engine = SimpleNamespace(presend=None)
    lags = []
    metrics = SimpleNamespace(token_lag=None, itl=SimpleNamespace(observe=None),
                              lag=SimpleNamespace(observe_n=lambda v, n: lags.append(n)))
    schedule = TokenSchedule.of_engine(s, 4, 5, engine, metrics, SimpleNamespace(config=SimpleNamespace()))
    schedule.render = render
    emitter = HubEmitter(s, iter([]), resp, server._sock)
    emitter.active = True
    emitter._start_schedule(schedule)             # the last token, rendered ahead
    assert rendered == [4] and emitter.sends.ready[ereq][4] is True
    other, third = EngineRequest(4, 5), EngineRequest(4, 5)
    ereq.state, ereq.num_output = EngineRequest.DONE, 5    # the step emits it and finishes the request
    assert engine.presend([other, ereq, third]) == [other, third, ereq]
    assert read_all(client, b"data: 4 end\n\n\r\n") == b"D\r\ndata: 4 end\n\n\r\n"
    emitter._step_tick(ereq)
    assert schedule.next == 5 and rendered == [4] and lags == [1]
    emitter.active = False
    emitter._stop_timer()
    from server.loop_turns import IdleWork
    IdleWork.of(emitter.loop).discard(emitter._finish)
    # not pure: the last token waits for its tick
    emitter2 = HubEmitter(s, iter([]), resp, server._sock)
    emitter2.active, emitter2.sends = True, emitter.sends
    schedule2 = TokenSchedule.of_engine(s, 4, 5, engine, metrics, SimpleNamespace(config=SimpleNamespace()))
    schedule2.render = lambda k: b"x"
    emitter2._render_ahead(schedule2, ereq)
    assert emitter2.pre is None


def test_a_hand_back_goes_on_with_what_came_after_the_unsent_bytes():
    """sse_body after a slow reader's hand-back: the unsent bytes first, then what the emitter
    had read after them (a deadline to wait for, or an error for the client)."""
    from blueprints.common import sse_body
    from blueprints.streaming import HUB_EMITTER_KEY
    from generation.errors import InvalidParam

    class Sock:
        def fileno(self):
            raise ValueError              # no disconnect watcher

        def sendall(self, data):
            sent.append(bytes(data))

        def send(self, data):
            sent.append(bytes(data))
            return len(data)

        def gettimeout(self):
            return None

        def settimeout(self, t):
            pass

    for then, tail in ((2.0, [b"after"]), (InvalidParam("boom"), [b"error frame"])):
        sent, slept = [], []
        sim = SimpleNamespace(expects_delay=lambda seqs: True, cancel=lambda seqs: None,
                              sleep_until=lambda seq, t: slept.append(t))
        emitter = SimpleNamespace(run=lambda item: ("pending", (memoryview(b"unsent"), then)))

        def body():
            yield 1.0                     # the first deadline: the emitter takes the stream
            yield b"after"
        environ = {"gunicorn.socket": Sock(), HUB_EMITTER_KEY: lambda env, seq, it: emitter}
        out = list(sse_body(body(), sim, ["seq"], lambda err: b"error frame", environ))
        assert sent == [b"unsent"] and out == [b"", *tail]
        assert slept == ([2.0] if then.__class__ is float else [])


def test_a_body_that_never_waits_announces_its_last_bytes():
    """sse_body, nothing to wait for: the runtime hears (END_WITH_KEY) that the next write is the
    body's last just before it is yielded, not earlier; an error after some bytes still comes
    after them."""
    from blueprints.common import sse_body
    from blueprints.streaming import END_WITH_KEY
    from generation.errors import InvalidParam

    sim = SimpleNamespace(expects_delay=lambda seqs: False, cancel=lambda seqs: None)
    events = []

    def end(environ):
        events.append("end")
        return True

    def consume(body):
        for item in sse_body(body, sim, ["seq"], lambda err: b"error frame", {END_WITH_KEY: end}):
            events.append(item)

    consume(iter([b"a", b"b"]))
    assert events == [b"a", "end", b"b"]

    def failing():
        yield b"a"
        raise InvalidParam("boom")
    events.clear()
    consume(failing())
    assert events == [b"a", b"error frame"]
