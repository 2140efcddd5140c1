"""The ``http_*`` families on a real server (``python app.py``), where a generation request is
answered by the front door (server.wsgi_layers.FrontDoor) and a stream is emitted from the hub
(server.sse_emitter): each request observed once, when gunicorn closes its body, with the
whole stream's duration (vLLM's instrumentator observes after the middleware's ``await`` of the
app, the last chunk sent).  Upper bounds are loose (a loaded 2-core machine)."""
from __future__ import annotations

import httpx

from support import metric, scrape, sse_events

CHAT = "/v1/chat/completions"
BODY = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
        "ignore_eos": True}


def test_streams_and_answers_on_a_real_server(sim_server):
    base = sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "50ms")
    # one keep-alive connection: each request's greenlet is done with the previous one's body
    with httpx.Client(base_url=base, timeout=60) as c:
        before = scrape(c)
        assert metric(before, "http_request_duration_highr_seconds_count") == 0
        with c.stream("POST", CHAT, json={**BODY, "stream": True}) as r:     # ~50 + 7 x 50 ms, from the hub
            assert r.status_code == 200 and "content-length" not in r.headers
            text = r.read().decode()
        assert len(sse_events(text)) >= 8
        r = c.post(CHAT, json=BODY)                                        # ~400 ms, answered whole
        assert r.status_code == 200
        answer = int(r.headers["content-length"])
        assert c.get("/nope").status_code == 404
        assert c.get("/health").status_code == 200                          # excluded
        after = scrape(c)
    assert metric(after, "http_requests_total", method="POST", status="2xx", handler=CHAT) == 2
    assert metric(after, "http_requests_total", method="GET", status="4xx", handler="none") == 1
    assert not [k for k in after if k[0] == "http_requests_total" and ("handler", "/health") in k[1]]
    assert metric(after, "http_response_size_bytes_sum", handler=CHAT) == answer      # the stream: 0
    assert metric(after, "http_request_duration_highr_seconds_count") == 3
    # the two chat requests took their whole ~0.4 s (the stream to its last chunk), the 404 none
    assert metric(after, "http_request_duration_highr_seconds_bucket", le="0.25") == 1
    assert metric(after, "http_request_duration_highr_seconds_bucket", le="+Inf") == 3
    chat = metric(after, "http_request_duration_seconds_sum", method="POST", handler=CHAT)
    assert 2 * 0.3 <= chat <= 2 * 0.4 + 1.0
    assert metric(after, "http_request_duration_seconds_bucket", method="POST", handler=CHAT, le="0.1") == 0
