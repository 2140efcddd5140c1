"""A client that stops reading its stream (its socket buffers full) is gone after
``--timeout-keep-alive`` seconds without taking a byte (``blueprints.streaming.send_all_or_stall``):
its slot is freed and the others are served.  Before, the stream's write waited for good, so
``--max-num-seqs`` clients that never read held every seat while their sockets stayed open and
every other request waited behind them.  A slow reader that keeps reading is not cut, although
the kernel wakes a writer only once a third of its send buffer is free."""
from __future__ import annotations

import socket
import time

import httpx
import pytest

from support import metric, scrape

# 16,000 tokens (32 s) with 20 logprobs each: ~10 MB of SSE, past any socket buffers on loopback
BIG = b'{"model": "test-model", "prompt": "hi", "max_tokens": 16000, "ignore_eos": true, ' \
      b'"stream": true, "logprobs": 20}'


@pytest.fixture(scope="module")
def base(sim_server):
    return sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "2ms", "--max-num-seqs", "2",
                      "--max-model-len", "16384", "--timeout-keep-alive", "1", "--disable-log-requests")


def open_stream(base: str) -> socket.socket:
    host, port = base.rsplit("/", 1)[1].split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)      # a tiny window: buffers fill fast
    s.connect((host, int(port)))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(BIG) + BIG)
    return s


def running(base: str) -> float:
    return metric(scrape(base), "vllm:num_requests_running", model_name="test-model")


def test_clients_that_never_read_free_their_seats(base):
    stalled = [open_stream(base) for _ in range(2)]            # every seat of --max-num-seqs 2
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        r = httpx.post(base + "/v1/completions", timeout=40,
                       json={"model": "test-model", "prompt": "hi", "max_tokens": 2})
        took = time.monotonic() - t0
        assert r.status_code == 200
        assert took < 16, took         # the streams last 32 s; stalled ones are cut 1-2 s after the buffers fill
        deadline = time.monotonic() + 5
        while running(base) != 0:      # freed while the stalled sockets are still open
            assert time.monotonic() < deadline, "a stalled stream still holds its seat"
            time.sleep(0.05)
    finally:
        for s in stalled:
            s.close()


def test_a_slow_reader_that_keeps_reading_is_not_cut(base):
    s = open_stream(base)
    try:
        s.settimeout(5)
        got, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 5:          # ~200 KB/s: far slower than the stream is made
            data = s.recv(4096)
            assert data, "the stream was cut"
            got += len(data)
            time.sleep(0.02)
        assert running(base) == 1                 # still generating, many keep-alives later
    finally:
        s.close()
    deadline = time.monotonic() + 5
    while running(base) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
