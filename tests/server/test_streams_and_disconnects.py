"""A real server's streams end to end (server/sse_emitter.py): real-time streams arrive whole and
on time, and a client that leaves mid-stream, during TTFT, in the queue or by half-closing
frees its slot at once."""
from __future__ import annotations

import socket
import time

import httpx
import pytest

from support import scrape
from support.sockets import raw_request

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


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
    assert r.status_code == 200 and events[-1] == "data: [DONE]" and len(events) == 1 + 20 + 1 + 1     # role, tokens, usage, [DONE]
    after = scrape(realtime)

    def delta(name, **labels):
        key = (name, frozenset({"model_name": "test-model", "engine": "0", **labels}.items()))
        return after[key] - before[key]          # KeyError if the series does not exist
    assert delta("vllm:time_to_first_token_seconds_count") == 1
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.04") == 0       # never early
    assert delta("vllm:inter_token_latency_seconds_count") == 19
    # the last token never leaves before TTFT + 19 ITL (a late token may shorten the next gap)
    assert delta("vllm:e2e_request_latency_seconds_sum") >= 0.05 + 19 * 0.01


def test_answers_carry_the_headers_a_vllm_pod_sends(realtime):
    """uvicorn's ``server: uvicorn`` on every answer, and a stream's headers as starlette's
    ``StreamingResponse(media_type="text/event-stream")`` sends them (vLLM's
    ``serving/chat_completion`` routes): no ``Cache-Control``, no ``X-Accel-Buffering``."""
    body = {"model": "test-model", "messages": MSG, "max_tokens": 2}
    plain = httpx.post(realtime + CHAT, json=body, timeout=30)
    streamed = httpx.post(realtime + CHAT, json={**body, "stream": True}, timeout=30)
    for r in (plain, streamed, httpx.get(realtime + "/v1/models", timeout=30)):
        assert r.status_code == 200 and r.headers["server"] == "uvicorn"
    assert streamed.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert "cache-control" not in streamed.headers and "x-accel-buffering" not in streamed.headers


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


@pytest.mark.parametrize("stream", [True, False])
def test_leaving_during_ttft_or_in_the_queue_frees_everything_at_once(sim_server, stream):
    """TTFT 3 s, 2 slots, 3 requests (one queued); all clients leave after 0.3 s: running and
    waiting drop to 0 at once, and each counts as an abort (issue 31 item 7), with no token:
    none got past its prefill."""
    base = sim_server("--time-to-first-token", "3s", "--max-num-seqs", "2")
    host, port = base.rsplit("/", 1)[1].split(":")
    key = lambda name: (name, frozenset({"model_name": "test-model", "engine": "0"}.items()))  # noqa: E731

    def successes(m, reason=None):
        return sum(v for (n, labels), v in m.items() if n == "vllm:request_success_total"
                   and (reason is None or ("finished_reason", reason) in labels))
    first = scrape(base)
    before = successes(first)
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
    last = scrape(base)
    assert successes(last) == before + 3
    assert successes(last, "abort") == successes(first, "abort") + 3
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert last[key(name)] == first[key(name)], name


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


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("flags", [(), ("--latency-calculator", "step")], ids=["default", "step"])
def test_a_body_cut_short_by_the_connections_end_is_not_answered(sim_server, flags, route):
    """A body shorter than its Content-Length, then the client's side shut: uvicorn hands vLLM's
    route ``http.disconnect`` and nothing is answered, where the server had parsed the part that
    came (a 200 when it happened to be valid JSON).  Both the front door's fast path and Flask's."""
    base = sim_server(*flags)
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'
    if route == "/tokenize":
        body = b'{"model": "test-model", "prompt": "hi"}'
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    assert raw_request(base, head % (route.encode(), len(body) + 20) + body, half_close=True) == b""
    assert httpx.get(base + "/health", timeout=5).status_code == 200


@pytest.mark.parametrize("when", ["during TTFT", "mid-stream"])
def test_a_stream_whose_client_half_closes_is_cut_not_ended(sim_server, when):
    """A streaming client that half-closes is gone as in vLLM (uvicorn drops the connection): the
    stream is aborted and the connection dropped without the chunked body's end.  The end
    (``0\\r\\n\\r\\n``) went out here, so the client read a complete 200 stream with no
    ``[DONE]``: an empty answer that looked like a success."""
    base = sim_server("--time-to-first-token", "1s", "--inter-token-latency", "20ms", "--max-num-seqs", "4")
    host, port = base.rsplit("/", 1)[1].split(":")
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500, ' \
           b'"ignore_eos": true, "stream": true}'
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    s.settimeout(5)
    got = s.recv(65536)
    if when == "mid-stream":
        while got.count(b'"content":"') < 3:
            got += s.recv(65536)
    s.shutdown(socket.SHUT_WR)
    t0 = time.monotonic()
    while data := s.recv(65536):
        got += data
    s.close()
    assert time.monotonic() - t0 < 1.5
    assert got.startswith(b"HTTP/1.1 200")         # the headers went out before the first token
    assert not got.endswith(b"0\r\n\r\n") and b"[DONE]" not in got, got[-200:]
    deadline = time.monotonic() + 2
    while scrape(base).get(("vllm:num_requests_running",
                            frozenset({"model_name": "test-model", "engine": "0"}.items()))) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
