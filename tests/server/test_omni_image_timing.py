"""--omni on a real server: the stream waits the image time before the image chunk."""
from __future__ import annotations
import json
import time



USER = [{"role": "user", "content": "hello"}]


CHAT = {"messages": USER, "max_tokens": 5}


IMG = {"X-Send-Image": "true"}


def test_real_server_stream_waits_the_image_time_before_the_image_chunk(live_client):
    c = live_client("--omni", "--time-to-first-token", "20ms", "--inter-token-latency", "10ms",
                    "--time-to-generate-image", "300ms")
    arrivals = []
    t0 = time.monotonic()
    with c.stream("POST", "/v1/chat/completions", headers=IMG,
                  json={**CHAT, "max_tokens": 4, "ignore_eos": True, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                arrivals.append((time.monotonic() - t0, "image" if d.get("modality") else "other", d))
    kinds = [k for _, k, _ in arrivals]
    assert kinds.count("image") == 1
    i = kinds.index("image")
    tokens = [a for a in arrivals[:i] if isinstance(a[2]["choices"][0]["delta"].get("content"), list)]
    assert len(tokens) == 4 and all(a[2]["choices"][0]["delta"]["content"][0]["type"] == "text" for a in tokens)
    assert arrivals[i][0] - tokens[-1][0] >= 0.29          # the image time, after the last token
    assert arrivals[i + 1][2]["choices"][0]["finish_reason"] == "length"
