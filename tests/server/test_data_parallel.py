"""``--data-parallel-size 2``: by default one endpoint over two engines in one process (vLLM's
API server, :mod:`server.dp_api`); with ``--data-parallel-external-lb`` each rank is a separate
process on its own port, with its own metrics."""
from __future__ import annotations

import time

import httpx

from support import metric_values, scrape

COMPL = "/v1/completions"


def post(base, path, body, **kw):
    return base.post(path, json=body, timeout=30, **kw)


def second_rank(base: httpx.Client) -> httpx.Client:
    """A client of rank 1 (the next port), once it answers ``/health``."""
    port = int(base.url.rsplit(":", 1)[1])
    other = httpx.Client(base_url=f"http://127.0.0.1:{port + 1}", timeout=30)
    for _ in range(50):
        try:
            if other.get("/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    return other


def test_data_parallel_ranks_are_separate_engines(live_client):
    base = live_client("--data-parallel-size", "2", "--data-parallel-external-lb", "--mode", "echo")
    other = second_rank(base)
    post(other, COMPL, {"model": "test-model", "prompt": "x y z"})
    m0, m1 = scrape(base), scrape(other)
    assert 3.0 in metric_values(m1, "vllm:prompt_tokens_total", model_name="test-model")
    assert 3.0 not in metric_values(m0, "vllm:prompt_tokens_total", model_name="test-model")


def test_data_parallel_ranks_each_run_their_own_step_engine(live_client):
    base = live_client("--data-parallel-size", "2", "-dpe", "--latency-calculator", "step", "--max-model-len", "1024")
    other = second_rank(base)
    r = post(other, COMPL, {"model": "test-model", "prompt": "x y z", "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200
    m0, m1 = scrape(base), scrape(other)
    # one prefill step (3 prompt tokens + the first token), then 4 decode steps, on rank 1 only
    assert metric_values(m1, "vllm:iteration_tokens_total_sum", model_name="test-model") == [8.0]
    assert metric_values(m0, "vllm:iteration_tokens_total_sum", model_name="test-model") in ([], [0.0])


def test_one_endpoint_spreads_requests_over_the_engines(live_client):
    base = live_client("--data-parallel-size", "2", "--mode", "echo")
    for _ in range(6):
        assert post(base, COMPL, {"model": "test-model", "prompt": "x y z"}).status_code == 200
    m = scrape(base)
    assert metric_values(m, "vllm:prompt_tokens_total", model_name="test-model", engine="0") == [9.0]
    assert metric_values(m, "vllm:prompt_tokens_total", model_name="test-model", engine="1") == [9.0]
    port = int(base.url.rsplit(":", 1)[1])
    try:
        httpx.get(f"http://127.0.0.1:{port + 1}/health", timeout=2)
        raise AssertionError("rank 1 has no port of its own without --data-parallel-external-lb")
    except httpx.TransportError:
        pass


def test_a_moe_models_ranks_step_together(live_client):
    """A MoE model's DP ranks step in lockstep (vLLM's DPEngineCoreProc): while rank 1 runs
    7,000-token prompts, rank 0's decode steps wait for its prompt chunks (the node's board,
    generation/engine/dp_board.py, shared by the engines of this one process), so the
    inter-token latency rank 0 records for a request is several times what the same request
    had alone.  ``X-data-parallel-rank`` sends each request to its rank."""
    import threading
    model = "Qwen/Qwen3-30B-A3B"
    base = live_client("--data-parallel-size", "2", "--latency-calculator", "step", "--max-model-len", "8192",
                       model=model)
    rank0, rank1 = {"X-data-parallel-rank": "0"}, {"X-data-parallel-rank": "1"}

    def itl():
        m = scrape(base)
        return (metric_values(m, "vllm:inter_token_latency_seconds_sum", model_name=model, engine="0")[0],
                metric_values(m, "vllm:inter_token_latency_seconds_count", model_name=model, engine="0")[0])

    one = {"model": model, "prompt": "hi", "max_tokens": 16, "ignore_eos": True}
    assert post(base, COMPL, one, headers=rank0).status_code == 200
    s0, n0 = itl()
    prompts = [threading.Thread(target=post, args=(base, COMPL, {"model": model, "prompt": [100 + i] * 7000,
                                                                  "max_tokens": 2, "ignore_eos": True}),
                                kwargs={"headers": rank1})
               for i in range(8)]
    for t in prompts:
        t.start()
    time.sleep(0.05)
    assert post(base, COMPL, one, headers=rank0).status_code == 200
    for t in prompts:
        t.join()
    s1, n1 = itl()
    assert n0 == n1 - n0 == 15
    assert (s1 - s0) > 3 * s0, (s0, s1 - s0)
