"""--sse-keep-alive-interval on a real server, where the hub emitter writes the streams from the
event loop (:class:`server.emitter_factory.KeptAliveEmitter`): ``: keep-alive`` every second of
silence after the headers, in both latency modes, and a client that leaves during one is
aborted.  Every expected write sits 0.5 s from a comment, so the counts hold on a loaded machine;
times are the client's, from the headers it received."""
from __future__ import annotations

import socket
import time

import httpx

from support import scrape, value

KA = ": keep-alive"
MSG = [{"role": "user", "content": "hi"}]


def timeline(url: str, body: dict) -> list[tuple[float, str]]:
    """``[(seconds after the headers, ": keep-alive" or "data")]`` of a stream."""
    out = []
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        assert r.status_code == 200
        t0 = time.monotonic()
        buf = ""
        for text in r.iter_text():
            buf += text
            while "\n\n" in buf:
                event, buf = buf.split("\n\n", 1)
                out.append((time.monotonic() - t0, KA if event == KA else "data"))
    return out


def test_prefill_and_token_gaps_are_kept_alive_every_second(sim_server):
    base = sim_server("--time-to-first-token", "2500ms", "--inter-token-latency", "1500ms",
                      "--sse-keep-alive-interval", "1")
    got = timeline(base + "/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 2,
                                                   "ignore_eos": True, "stream": True})
    kinds = [k for _, k in got]
    # 1 s and 2 s after the headers, then the role and first token at 2.5 s; one more 1 s after
    # them, then the second token (with the finish) at 4 s and [DONE]
    assert kinds == [KA, KA, "data", "data", KA, "data", "data"], got
    (k1, _), (k2, _), (first, _), _, (k3, _), (second, _) = got[:6]
    assert 0.9 <= k1 <= 1.4 and k2 - k1 >= 0.95 and k3 - first >= 0.95       # never a whole second early
    assert second - first >= 1.4


def test_step_mode_keeps_a_remote_prefill_alive(sim_server):
    # the KV of 3,815 prompt tokens (128 KiB each) at 0.2 GB/s: 2.5 s before the first token
    base = sim_server("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "8192",
                      "--kv-transfer-bandwidth", "0.2", "--sse-keep-alive-interval", "1",
                      model="meta-llama/Llama-3.1-8B-Instruct")
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
          "remote_host": "h", "remote_port": 1}
    got = timeline(base + "/v1/completions", {"prompt": list(range(100, 3915)), "max_tokens": 3, "ignore_eos": True,
                                              "stream": True, "kv_transfer_params": kv})
    kinds = [k for _, k in got]
    assert kinds[:3] == [KA, KA, "data"] and KA not in kinds[3:], got


def test_a_client_that_leaves_during_a_silence_is_aborted(sim_server):
    base = sim_server("--time-to-first-token", "2500ms", "--inter-token-latency", "1500ms",
                      "--sse-keep-alive-interval", "1")
    host, port = base.removeprefix("http://").split(":")
    body = b'{"model":"test-model","prompt":"hi","max_tokens":2,"stream":true}'
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        t0 = time.monotonic()
        got = b""
        while b": keep-alive" not in got:
            got += s.recv(4096)
        assert value(scrape(base), "vllm:num_requests_running") == 1
    assert time.monotonic() - t0 < 2.0
    while value(scrape(base), "vllm:num_requests_running") and time.monotonic() - t0 < 2.3:
        time.sleep(0.05)
    # aborted at once: its first token was due 2.5 s after it arrived
    assert value(scrape(base), "vllm:num_requests_running") == 0 and time.monotonic() - t0 < 2.3
