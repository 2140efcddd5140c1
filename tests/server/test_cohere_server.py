"""``/cohere/v2/chat`` on a real ``python app.py`` (VLLM_ENABLE_COHERE_API=1): the ``cohere``
SDK's ``chat_stream`` over the network, its events paced by the simulated latency, and an error
through the server's front door in Cohere's envelope."""
from __future__ import annotations

import time

import httpx
import pytest

cohere = pytest.importorskip("cohere")


def test_sdk_stream_and_errors_on_a_real_server(sim_server):
    base = sim_server("--mode", "echo", "--time-to-first-token", "300ms", "--inter-token-latency", "50ms",
                      "--api-key", "k1", env={"VLLM_ENABLE_COHERE_API": "1"})
    co = cohere.ClientV2(api_key="k1", base_url=base + "/cohere", timeout=30)
    t0 = time.monotonic()
    seen = []
    for e in co.chat_stream(model="test-model", messages=[{"role": "user", "content": "one two three four"}]):
        seen.append((e.type, time.monotonic() - t0))
    kinds = [k for k, _ in seen]
    assert kinds == ["message-start", "content-start", *["content-delta"] * 4, "content-end", "message-end"]
    assert seen[0][1] >= 0.3 and seen[-1][1] >= 0.45       # lower bounds: TTFT, then three 50 ms gaps
    r = httpx.post(base + "/cohere/v2/chat", json={"model": "test-model", "messages": []},
                   headers={"Authorization": "Bearer k1", "X-Request-Id": "abc"}, timeout=30)
    assert (r.status_code, r.json()) == (400, {"message": "messages must contain at least one message "
                                                          "(parameter=messages)", "id": "abc"})
