"""Weight-version spans of streams on a real server, where the hub emits a stream's tokens
(server.sse_emitter.HubEmitter) and may render its last chunk ahead: a label set while the
stream runs starts a span there, as in-process (generation.engine.weight_versions)."""
import json
import threading
import time

import httpx
import pytest

DEV = {"VLLM_SERVER_DEV_MODE": "1"}


def _spans(text: str) -> list:
    for block in text.split("\n\n"):
        if block.startswith("data: {") and '"weight_versions":[' in block:
            return json.loads(block[6:])["choices"][0]["weight_versions"]
    raise AssertionError(text[-500:])


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_a_label_set_while_a_stream_runs_starts_a_span(sim_server, route):
    base = sim_server("--inter-token-latency", "50ms", env=DEV)
    body = {"model": "test-model", "max_tokens": 20, "ignore_eos": True, "stream": True, "return_weight_versions": True}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"})
    old = httpx.get(base + "/weight_info").json()["weight_version"]
    got = {}
    job = threading.Thread(target=lambda: got.update(text=httpx.post(base + route, json=body, timeout=30).text))
    job.start()
    time.sleep(0.35)                                   # some of its 20 tokens (50 ms apart) made
    new = old + "+"
    httpx.post(base + "/update_weight_version", json={"new_version": new})
    job.join(30)
    spans = _spans(got["text"])
    assert [s["version"] for s in spans] == [old, new], spans
    assert spans[0]["start"] == 0 and 0 < spans[0]["end"] == spans[1]["start"] < 20 and spans[1]["end"] == 20
