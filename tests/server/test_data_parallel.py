"""``--data-parallel-size 2``: each rank is a separate engine on its own port, with its own
metrics."""
from __future__ import annotations

import httpx

from support import metric_values, scrape

COMPL = "/v1/completions"


def post(base, path, body, **kw):
    return base.post(path, json=body, timeout=30, **kw)


def test_data_parallel_ranks_are_separate_engines(live_client):
    base = live_client("--data-parallel-size", "2", "--mode", "echo")
    port = int(base.url.rsplit(":", 1)[1])
    other = httpx.Client(base_url=f"http://127.0.0.1:{port + 1}", timeout=30)
    for _ in range(50):
        try:
            if other.get("/health").status_code == 200:
                break
        except httpx.HTTPError:
            import time
            time.sleep(0.2)
    post(other, COMPL, {"model": "test-model", "prompt": "x y z"})
    m0, m1 = scrape(base), scrape(other)
    assert 3.0 in metric_values(m1, "vllm:prompt_tokens_total", model_name="test-model")
    assert 3.0 not in metric_values(m0, "vllm:prompt_tokens_total", model_name="test-model")
