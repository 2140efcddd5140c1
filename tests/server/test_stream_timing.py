"""Wall-clock timing as a network client sees it (cases C22, C23, issue 8): chunks spread out,
headers before TTFT, prefill per prompt token, no early token under 100 concurrent streams,
``/inference/v1/generate`` timed by the engine, and TTFT counted from the request's arrival.

One real server serves most tests (``timed``); its latencies are set per test through
``POST /admin/config``.  Tolerances hold on a loaded 2-core machine: lower bounds sit just under
the configured time, upper bounds at least 0.2 s above it.  The simulator's own accuracy is
measured by bench/timing_fidelity.py, not here.
"""
from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from support import scrape, sse_events, value
from support.hub_probe import StallWitness

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


# ---- real server: timing as a network client sees it ------------------------------------------
LATENCY_KEYS = ("time-to-first-token", "inter-token-latency", "prefill-overhead", "prefill-time-per-token")


@pytest.fixture(scope="module")
def timed(sim_server):
    """One real server for every wall-clock test; ``timed(**latencies)`` sets its latencies
    (``time_to_first_token="400ms"``; the others back to 0) and returns its base URL."""
    base = sim_server("--max-num-seqs", "200")

    def configure(**latencies) -> str:
        update = {k: "0s" for k in LATENCY_KEYS}
        update.update({k.replace("_", "-"): v for k, v in latencies.items()})
        r = httpx.post(base + "/admin/config", json=update, timeout=10)
        assert r.status_code == 200, r.text
        return base
    return configure


def timed_stream(base: str, body: dict) -> tuple[float, list]:
    """(seconds until response headers, [(seconds, chunk)...]) of a streaming request, taken
    again (three tries) while a separate process saw the machine stall over 0.1 s: a stall
    delays one gap and bunches the chunks behind it, as on CI once (gaps 0.1 / 0.95 / 0.00 s)."""
    for _ in range(3):
        witness = StallWitness()
        got = _timed_stream(base, body)
        if witness.stop() <= 0.1:
            break
    return got


def _timed_stream(base: str, body: dict) -> tuple[float, list]:
    t0 = time.monotonic()
    out = []
    with httpx.stream("POST", base + CHAT, json=body, timeout=60) as r:
        assert r.status_code == 200
        t_headers = time.monotonic() - t0
        buf = ""
        for text in r.iter_text():
            buf += text
            while "\n\n" in buf:
                event, buf = buf.split("\n\n", 1)
                if event.startswith("data: ") and event != "data: [DONE]":
                    out.append((time.monotonic() - t0, sse_events(event + "\n\n")[0]))
    return t_headers, out


def test_ttft_then_itl_chunks_arrive_spread_out(timed):
    base = timed(time_to_first_token="400ms", inter_token_latency="100ms")
    t_headers, chunks = timed_stream(base, {"model": "test-model", "messages": MSG, "max_tokens": 6,
                                            "ignore_eos": True, "stream": True})
    content = [t for t, c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 6
    # headers are not held back until TTFT (400 ms): they lead the first token by most of it,
    # however late a loaded machine starts the request (absolute 0.3 s: 0.74 s with two suites
    # running beside it)
    assert t_headers < content[0] - 0.2, (t_headers, content[0])
    assert 0.35 <= content[0] <= 0.8
    gaps = [b - a for a, b in zip(content, content[1:])]
    assert all(0.06 <= g <= 0.3 for g in gaps), gaps
    assert 0.85 <= content[-1] <= 1.6


def test_non_stream_takes_the_same_total(timed):
    base = timed(time_to_first_token="400ms", inter_token_latency="100ms")
    t0 = time.monotonic()
    r = httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True},
                   timeout=30)
    assert r.status_code == 200
    assert 0.85 <= time.monotonic() - t0 <= 1.7


def test_per_token_prefill_scales_with_prompt(timed):
    base = timed(prefill_overhead="100ms", prefill_time_per_token="10ms")

    def ttft(n_ids):
        t0 = time.monotonic()
        with httpx.stream("POST", base + "/v1/completions", json={
                "model": "test-model", "prompt": list(range(1, n_ids + 1)), "max_tokens": 1, "stream": True},
                timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"text":""' not in line:
                    return time.monotonic() - t0
    short, long = ttft(10), ttft(60)
    assert 0.18 <= short <= 0.5           # 100ms + 10 * 10ms
    assert 0.65 <= long <= 1.1            # 100ms + 60 * 10ms
    assert long - short >= 0.35


def test_no_token_leaves_early_under_concurrent_load(timed):
    """Issue 8: 100 concurrent streams, TTFT 20 ms, ITL 5 ms.  The server's own TTFT histogram
    has no observation at or below the configured 20 ms, and no client sees its first token
    before 20 ms after sending the request."""
    base = timed(time_to_first_token="20ms", inter_token_latency="5ms")
    before = scrape(base)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 8, "ignore_eos": True, "stream": True}

    async def first_token(client):
        t0 = time.monotonic()
        first = None
        async with client.stream("POST", base + CHAT, json=body) as r:
            async for line in r.aiter_lines():
                if first is None and '"content":"' in line and '"content":""' not in line:
                    first = time.monotonic() - t0
        return first

    async def main():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=110)) as client:
            return await asyncio.gather(*[first_token(client) for _ in range(100)])

    res = asyncio.run(main())
    assert None not in res
    assert min(res) >= 0.020, min(res)
    after = scrape(base)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:time_to_first_token_seconds_count") == 100
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.02") == 0
    assert delta("vllm:inter_token_latency_seconds_count") == 700
    assert delta("vllm:inter_token_latency_seconds_bucket", le="+Inf") == 700


# ---- /inference/v1/generate: timed by the engine -------------------------------------------------
URL = "/inference/v1/generate"


def post(base, body, **kw):
    return base.post(URL, json=body, timeout=60, **kw)


def test_timing_goes_through_the_engine(live_client):
    base = live_client("--time-to-first-token", "300ms", "--inter-token-latency", "100ms")
    body = {"model": "test-model", "token_ids": [1, 2], "sampling_params": {"max_tokens": 5}, "ignore_eos": True}
    t0 = time.monotonic()
    with base.stream("POST", URL, json=dict(body, stream=True), timeout=60) as r:
        arrivals = []
        for line in r.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic() - t0)
    assert len(arrivals) == 5
    assert arrivals[0] >= 0.25                      # TTFT
    assert arrivals[-1] - arrivals[0] >= 0.35       # 4 inter-token gaps of 100 ms
    t0 = time.monotonic()
    assert post(base, body).status_code == 200
    assert time.monotonic() - t0 >= 0.6


# ---- TTFT counts from the request's arrival (the kernel's receive time) --------------------------
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
    assert 0.499 <= ttft < 0.7       # the kernel's stamp is CLOCK_REALTIME: NTP slews it up to 0.5 ms/s
