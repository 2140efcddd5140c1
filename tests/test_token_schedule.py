"""Token schedules (generation/engine/token_schedule.py TokenSchedule, server/sse_emitter.py): a stream
with a constant inter-token latency hands its tokens to the server as one schedule instead of a
deadline per token.  The bytes must not change, nor the metrics, nor the timing guarantees
(never early; late tokens go out together; a slow reader or a client that leaves is handled).
"""
from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import gevent
import gevent.socket
import httpx
import pytest

from blueprints import common
from blueprints.common import received_at, scheduled_tokens
from server.sse_emitter import HubEmitter
from support import make_app, metric, scrape, sse_events
from generation.engine.simulator import ClientDisconnected
from generation.engine.token_schedule import TokenSchedule
from generation.engine.request import SeqState
from schemas.common import load
from test_sse_emitter import gunicorn_response, read_all, stream_pair

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def seqs_for(app, endpoint: str, body: dict):
    """Prepared and admitted sequences of ``body`` on ``app``'s ``endpoint`` (its view name)."""
    sim = app.extensions["simulator"]
    schema, adapter_cls = app.view_functions[endpoint].generation
    adapter = adapter_cls(sim, load(schema, body))
    seqs = sim.prepare(adapter.build("test", False))
    sim.admit(seqs)
    return sim, seqs


# ---- the engine ------------------------------------------------------------------------------

def test_a_constant_inter_token_latency_is_one_schedule():
    app = make_app("--time-to-first-token", "5ms", "--inter-token-latency", "2ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    ttft = next(run)
    assert ttft.__class__ is float and ttft == pytest.approx(seq.started_at + 0.005)
    sim.sleep_until(seq, ttft)
    assert next(run) == 0
    sched = next(run)
    assert sched.__class__ is TokenSchedule and (sched.next, sched.stop, sched.itl) == (1, 6, 0.002)
    assert [sched.deadline(k) - ttft for k in range(1, 6)] == pytest.approx([0.002 * k for k in range(1, 5 + 1)])
    sched.render = lambda k: b"<%d>" % k
    assert sched.due(sched.deadline(1) - 1e-6) is None                  # never before its deadline
    assert sched.due(sched.deadline(3)) == b"<1><2><3>"                  # late ones go out together
    assert sched.due(sched.deadline(5) + 1) == b"<4><5>" and sched.due(1e9) is None
    with pytest.raises(StopIteration):
        next(run)
    assert seq.state == SeqState.DONE and sim.running == 0


@pytest.mark.parametrize("flags", [("--inter-token-latency-std-dev", "3ms"), ("--time-factor-under-load", "2")])
def test_a_varying_inter_token_latency_yields_a_deadline_per_token(flags):
    app = make_app("--inter-token-latency", "10ms", *flags)
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True})
    items = []
    for item in sim.run(seq, deadlines=True):
        items.append(item)
        if item.__class__ is float:
            sim.sleep_until(seq, item)
    assert [k for k in items if k.__class__ is int] == [0, 1, 2, 3]
    assert all(k.__class__ in (int, float) for k in items) and any(k.__class__ is float for k in items)


def test_a_sequence_aborted_during_its_schedule_ends_in_client_disconnected():
    app = make_app("--inter-token-latency", "50ms")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 5, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0
    sched = next(run)
    sched.render = lambda k: b"x"
    gevent.spawn_later(0.02, sim.cancel, [seq])
    t0 = time.monotonic()
    with pytest.raises(ClientDisconnected):
        list(scheduled_tokens(sim, sched))
    assert time.monotonic() - t0 < 0.045 and sim.running == 0
    with pytest.raises(ClientDisconnected):
        next(run)


def test_an_admin_latency_change_cuts_the_schedule_and_the_stream_goes_on_per_token():
    """docs/engine.md 3.7: in-flight requests draw from the current latencies."""
    app = make_app("--inter-token-latency", "30ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0
    sched = next(run)
    sched.render = lambda k: b"<%d>" % k
    sim.config.swap(sim.config.updated({"time-to-first-token": "7ms"}))   # not the ITL: goes on
    assert sched.due(sched.deadline(2)) == b"<1><2>"
    sim.config.swap(sim.config.updated({"inter-token-latency": "40ms"}))
    assert sched.due(sched.deadline(5)) is None and sched.next == sched.stop == 3
    items = []
    for item in run:     # token 3 keeps the ITL it was drawn with; 4 and 5 come one new ITL apart
        items.append(item)
        if item.__class__ is float:
            sim.sleep_until(seq, item)
    floats = [x for x in items if x.__class__ is float]
    assert [x for x in items if x.__class__ is int] == [3, 4, 5]
    assert floats[0] == pytest.approx(sched.deadline(3))
    assert all(b - a == pytest.approx(0.04) for a, b in zip(floats, floats[1:]))
    assert seq.state == SeqState.DONE


def test_a_request_admitted_after_its_first_token_was_due_gets_the_next_ones_an_itl_apart():
    app = make_app("--time-to-first-token", "200ms", "--inter-token-latency", "20ms")
    sim = app.extensions["simulator"]
    schema, adapter_cls = app.view_functions["chat.create_chat_completion"].generation
    adapter = adapter_cls(sim, load(schema, {"model": "test-model", "messages": MSG, "max_tokens": 4,
                                             "ignore_eos": True}))
    seqs = sim.prepare(adapter.build("test", False))
    sim.admit(seqs, time.monotonic() - 0.5)          # arrived 0.5 s ago: TTFT long overdue
    seq = seqs[0]
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0                            # no wait for the first token
    sched = next(run)
    assert sched.deadline(1) == pytest.approx(seq.first_token_at + 0.02)
    sched.render = lambda k: b"x"
    assert sched.due(time.monotonic()) is None       # the next token is not overdue
    run.close()


def test_the_greenlet_path_stops_at_once_for_an_aborted_stream():
    app = make_app("--inter-token-latency", "20ms")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    next(run)
    sched = next(run)
    sched.render = lambda k: b"x"
    time.sleep(0.05)                                  # tokens 1-2 overdue
    sim.cancel([seq])
    with pytest.raises(ClientDisconnected):
        next(scheduled_tokens(sim, sched))
    assert sched.next == 1


# ---- the same bytes whatever the timing path ---------------------------------------------------

BODIES = {
    "chat": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "ignore_eos": True}),
    "chat logprobs": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "logprobs": True,
                             "top_logprobs": 2}),
    "chat usage, token ids": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "return_token_ids": True,
                                     "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
    "chat tool call": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 60, "tools": TOOLS,
                              "tool_choice": "required"}),
    "completion": ("/v1/completions", {"model": "test-model", "prompt": "hello there", "max_tokens": 12}),
    "completion logprobs echo": ("/v1/completions", {"model": "test-model", "prompt": "hello there", "max_tokens": 12,
                                                     "logprobs": 2, "echo": True, "return_token_ids": True,
                                                     "stream_options": {"include_usage": True,
                                                                        "continuous_usage_stats": True}}),
}
TIMINGS = {"all at once": (), "schedule": ("--inter-token-latency", "1ms"),
           "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms")}


def normalised_events(path: str, body: dict, flags: tuple) -> list:
    """The SSE events of one stream on a fresh app (same seed: same text), without ids and times."""
    client = httpx.Client(transport=httpx.WSGITransport(app=make_app("--seed", "11", *flags)), base_url="http://sim")
    r = client.post(path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    for e in events:
        if isinstance(e, dict):
            e.pop("id", None)
            e.pop("created", None)
            for c in e.get("choices") or ():
                for tc in (c.get("delta") or {}).get("tool_calls") or ():
                    tc.pop("id", None)
    return events


@pytest.mark.parametrize("name", BODIES)
def test_stream_bytes_do_not_depend_on_the_timing_path(name):
    path, body = BODIES[name]
    runs = {timing: normalised_events(path, body, flags) for timing, flags in TIMINGS.items()}
    assert runs["schedule"] == runs["all at once"]
    assert runs["deadline per token"] == runs["all at once"]
    assert len(runs["schedule"]) > 5


def test_schedule_metrics_count_every_token():
    from support import SimClient, INPROC_URL
    api = SimClient(INPROC_URL, app=make_app("--inter-token-latency", "3ms", "--time-to-first-token", "5ms"))
    before = scrape(api)
    r = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 10, "ignore_eos": True,
                             "stream": True})
    assert r.status_code == 200 and r.text.count('"delta":{"content":') == 10
    after = scrape(api)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)
    assert delta("vllm:inter_token_latency_seconds_count") == 9
    assert delta("vllm_sim:token_emission_lag_seconds_count") == 10
    # last token - first >= 9 ITL - the first token's lag: no token before its deadline
    assert (delta("vllm:inter_token_latency_seconds_sum") + delta("vllm_sim:token_emission_lag_seconds_sum")
            >= 9 * 0.003)
    assert delta("vllm:request_success_total", finished_reason="length") == 1


# ---- the hub emitter ---------------------------------------------------------------------------

def fake_seq():
    return SimpleNamespace(state=SeqState.RUNNING, event=None)


def fake_metrics():
    lags, itls = [], []
    return SimpleNamespace(token_lag=lags.append, itl=SimpleNamespace(observe=itls.append)), lags, itls


def schedule_body(seq, n: int, itl: float, first: float, metrics, tail: bytes = b"data: end\n\n"):
    """A renderer's items for tokens 1..n-1 on a schedule, then ``tail``."""
    latency = SimpleNamespace(config=SimpleNamespace(), constant_itl=lambda: itl)
    sched = TokenSchedule(seq, 1, n, first, itl, first - itl, metrics, latency)
    sched.render = lambda k: b"data: %d\n\n" % k

    def body():
        yield sched
        if seq.state == SeqState.ABORTED:
            raise ClientDisconnected()
        yield tail
    return sched, body()


def test_a_schedule_goes_out_token_by_token_and_never_early():
    server, client, resp = stream_pair()
    metrics, lags, itls = fake_metrics()
    s = fake_seq()
    first = time.monotonic() + 0.01
    sched, it = schedule_body(s, 6, 0.005, first, metrics)
    arrivals = []

    def reader():
        got = b""
        while not got.endswith(b"data: end\n\n\r\n"):
            data = client.recv(65536)
            arrivals.append((time.monotonic(), data))
            got += data
        return got
    r = gevent.spawn(reader)
    assert HubEmitter(s, it, resp, server._sock).run(next(it)) == ("done", None)
    got = r.get(timeout=5)
    # one chunk per token, unless the loop fell behind and tokens fell due together (one write)
    assert dechunk(got) == b"".join(b"data: %d\n\n" % k for k in range(1, 6)) + b"data: end\n\n"
    received, seen = b"", {}
    for t, data in arrivals:
        received += data
        seen.update({k: t for k in range(1, 6) if k not in seen and b"data: %d\n" % k in received})
    assert sorted(seen) == [1, 2, 3, 4, 5]
    assert all(seen[k] >= sched.deadline(k) for k in seen)          # never early
    assert len(lags) == len(itls) == 5 and min(lags) >= 0 and s.event is None


def dechunk(body: bytes) -> bytes:
    """The payload of an HTTP/1.1 chunked body (without its terminating chunk)."""
    out, pos = b"", 0
    while pos < len(body):
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        out += body[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2
    return out


def test_a_schedule_the_loop_fell_behind_on_catches_up_then_keeps_its_deadlines():
    server, client, resp = stream_pair()
    metrics, lags, _ = fake_metrics()
    s = fake_seq()
    itl = 0.04
    first = time.monotonic() + 0.005
    sched, it = schedule_body(s, 12, itl, first, metrics)
    sends = []
    raw = server._sock

    class Recording:                   # the OS socket, with each send's time recorded
        def send(self, data):
            sends.append((time.monotonic(), bytes(data)))
            return raw.send(data)

    def hog():                         # holds the hub past the first three deadlines
        while time.monotonic() < first + 2.5 * itl:
            pass
    gevent.spawn(hog)
    assert HubEmitter(s, it, resp, Recording()).run(next(it)) == ("done", None)
    tokens = [(t, data.count(b"data: ")) for t, data in sends if b"end" not in data]
    assert tokens[0][1] >= 3                                   # the late ones in one write
    assert sum(n for _, n in tokens) == 11
    # After catching up, tokens are on the schedule again: never early, and not shifted by
    # the stall (libev restarts a repeating timer that fell behind from "now").
    k = 1
    for t, n in tokens:
        k += n
        assert t >= sched.deadline(k - 1)
    last_t, _ = tokens[-1]
    assert last_t < sched.deadline(11) + itl / 2
    assert read_all(client, b"data: end\n\n\r\n").count(b"data: ") == 12


def test_a_full_socket_mid_schedule_hands_the_rest_to_the_greenlet():
    server, client, resp = stream_pair(small_buffers=True)
    metrics, _, _ = fake_metrics()
    s = fake_seq()
    sched, it = schedule_body(s, 8, 0.002, time.monotonic(), metrics)
    big = b"x" * 1_000_000
    sched.render = lambda k: big if k == 3 else b"data: %d\n\n" % k
    outcome, (pending, rest) = HubEmitter(s, it, resp, server._sock).run(next(it))
    assert outcome == "pending" and rest is sched and sched.next >= 4 and 0 < len(pending)
    reader = gevent.spawn(read_all, client, b"data: end\n\n\r\n")
    server.sendall(pending)                               # what sse_body does, then:
    sim = SimpleNamespace(sleep_until=lambda seq, t: gevent.sleep(max(0.0, t - time.monotonic())))
    for data in scheduled_tokens(sim, sched):
        resp.write(data)
    for item in it:
        resp.write(item)
    got = reader.get(timeout=10)
    assert got.count(b"data: ") == 6 + 1 and got.index(b"data: 7") < got.index(b"data: end")


def test_cancel_during_a_schedule_wakes_the_stream_at_once():
    server, _client = gevent.socket.socketpair()
    resp, _ = gunicorn_response(server)
    metrics, _, _ = fake_metrics()
    s = fake_seq()
    sched, it = schedule_body(s, 100, 1.0, time.monotonic() + 1.0, metrics)

    def cancel():                       # as Simulator.cancel does
        s.state = SeqState.ABORTED
        gevent.get_hub().loop.run_callback(s.event.switch, None)
    gevent.spawn_later(0.05, cancel)
    t0 = time.monotonic()
    outcome, err = HubEmitter(s, it, resp, server._sock).run(next(it))
    assert outcome == "error" and isinstance(err, ClientDisconnected) and time.monotonic() - t0 < 0.5


def test_a_renderer_error_in_a_schedule_reaches_the_greenlet():
    server, _client = gevent.socket.socketpair()
    resp, _ = gunicorn_response(server)
    metrics, lags, itls = fake_metrics()
    s = fake_seq()
    sched, it = schedule_body(s, 5, 0.001, time.monotonic(), metrics)
    sched.render = lambda k: 1 / 0
    outcome, err = HubEmitter(s, it, resp, server._sock).run(next(it))
    assert outcome == "error" and isinstance(err, ZeroDivisionError)
    assert lags == itls == []                         # nothing sent, nothing recorded


def test_the_end_of_a_stream_waits_for_an_idle_loop_but_not_long():
    """After its last token, a stream's end (its final chunks) runs when the loop has nothing
    due, or after at most one ITL (20 ms at most) when the loop is never idle."""
    server, client, resp = stream_pair()
    metrics, _, _ = fake_metrics()
    s = fake_seq()
    sched, it = schedule_body(s, 3, 0.01, time.monotonic() + 0.01, metrics)
    stop = []

    def busy():                          # keeps a timer due on every loop turn for 0.2 s
        end = time.monotonic() + 0.2
        while time.monotonic() < end and not stop:
            gevent.sleep(0)
    hog = gevent.spawn(busy)
    reader = gevent.spawn(read_all, client, b"data: end\n\n\r\n")
    assert HubEmitter(s, it, resp, server._sock).run(next(it)) == ("done", None)
    t_done = time.monotonic()
    stop.append(1)
    hog.join()
    assert reader.get(timeout=5).endswith(b"data: end\n\n\r\n")
    assert t_done - sched.deadline(2) < 0.01 + 0.05      # not held until the hog ended (0.2 s)


def test_stream_ends_run_in_idle_turns_within_a_budget_each_once():
    from server.sse_emitter import END_BUDGET, EndQueue
    per_turn = []

    class CountingQueue(EndQueue):
        def _turn(self):
            per_turn.append(0)
            super()._turn()
    queue = CountingQueue(gevent.get_hub().loop)

    class FakeEmitter:
        finishing = True

        def _finish(self):
            if not self.finishing:
                return
            self.finishing = False
            per_turn[-1] += 1
            end = time.monotonic() + END_BUDGET / 2         # each end costs half the budget
            while time.monotonic() < end:
                pass
    ends = [FakeEmitter() for _ in range(12)]
    ends[3].finishing = False                               # its own timer ended it already
    for e in ends:
        queue.add(e)
    deadline = time.monotonic() + 2
    while queue.waiting and time.monotonic() < deadline:
        gevent.sleep(0.001)
    assert sum(per_turn) == 11 and not any(e.finishing for e in ends) and queue.idle is None
    assert max(per_turn) <= 3 and len(per_turn) >= 4        # a budget per turn, not the cohort at once


def test_a_schedule_wakes_the_loop_once_per_token():
    """The repeating timer is armed from the real clock: it fires at each deadline, not in a
    loop until the first token is due."""
    server, client, resp = stream_pair()
    metrics, _, _ = fake_metrics()
    s = fake_seq()
    sched, it = schedule_body(s, 11, 0.02, time.monotonic() + 0.02, metrics)
    ticks = []

    class Counting(HubEmitter):
        def _tick(self):
            ticks.append(time.monotonic())
            super()._tick()
    reader = gevent.spawn(read_all, client, b"data: end\n\n\r\n")
    assert Counting(s, it, resp, server._sock).run(next(it)) == ("done", None)
    reader.get(timeout=5)
    assert 10 <= len(ticks) <= 13


# ---- arrival time from the kernel ------------------------------------------------------------

def test_received_at_reads_when_the_request_reached_the_socket(monkeypatch):
    listener = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(listener.getsockname())
    s, _ = listener.accept()
    c.sendall(b"POST / HTTP/1.1\r\n\r\n")
    t_sent = time.monotonic()
    time.sleep(0.12)
    got = received_at({"gunicorn.socket": s})
    if got is None:
        pytest.skip("no TCP_INFO on this platform")
    assert t_sent <= got <= t_sent + 0.03           # never before the bytes came; a tick or so after
    monkeypatch.setattr(common, "MAX_BACKDATE", 0.05)
    assert received_at({"gunicorn.socket": s}) >= time.monotonic() - 0.05 - 0.001
    assert received_at({}) is None
    a, b = socket.socketpair()                       # not TCP: no answer
    assert received_at({"gunicorn.socket": a}) is None
    for x in (listener, c, s, a, b):
        x.close()


@pytest.mark.server
def test_time_to_first_token_counts_from_arrival_not_from_parsing(_pool):
    """The server is stopped (SIGSTOP) for 0.3 s right after the request reaches it, as if it
    were busy parsing a burst: the client still sees the configured TTFT of 0.5 s, not 0.8."""
    import os
    import signal
    base = _pool.start("--time-to-first-token", "500ms")
    pid = next(proc.pid for proc, b in _pool.procs.values() if b == base)    # serves in-process
    host, port = base.rsplit("/", 1)[1].split(":")
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}'
    sock = socket.create_connection((host, int(port)))
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.3)
    finally:
        os.kill(pid, signal.SIGCONT)
    got = b""
    while b'"content":"' not in got.split(b'"role"', 1)[-1]:
        data = sock.recv(65536)
        assert data, got
        got += data
    ttft = time.monotonic() - t0
    sock.close()
    assert 0.5 <= ttft < 0.7
