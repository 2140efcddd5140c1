"""Timing, capacity, P/D and Prometheus metrics through the real server (cases C22, C23).

Timing tolerances are wide (a loaded 2-core machine); the simulator's own accuracy is
measured by bench/timing_fidelity.py, not here.
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import sse_events

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def scrape(base: str) -> dict:
    """``{(sample_name, frozenset(labels.items())): value}`` of ``/metrics``."""
    r = httpx.get(base + "/metrics", timeout=10)
    assert r.status_code == 200
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    labels.setdefault("model_name", "test-model")
    labels.setdefault("engine", "0")          # every vllm:* series carries the data-parallel rank
    return samples.get((name, frozenset(labels.items())), 0.0)


def timed_stream(base: str, body: dict) -> tuple[float, list]:
    """(seconds until response headers, [(seconds, chunk)...]) of a streaming request."""
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


def run_concurrently(fn, n: int) -> list:
    results = [None] * n

    def worker(i):
        results[i] = fn(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads, results


def test_ttft_then_itl_chunks_arrive_spread_out(sim_server):
    base = sim_server("--time-to-first-token", "400ms", "--inter-token-latency", "100ms")
    t_headers, chunks = timed_stream(base, {"model": "test-model", "messages": MSG, "max_tokens": 6,
                                            "ignore_eos": True, "stream": True})
    assert t_headers < 0.3                              # headers are not held back until TTFT
    content = [t for t, c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 6
    assert 0.35 <= content[0] <= 0.8
    gaps = [b - a for a, b in zip(content, content[1:])]
    assert all(0.06 <= g <= 0.3 for g in gaps), gaps
    assert 0.85 <= content[-1] <= 1.6


def test_non_stream_takes_the_same_total(sim_server):
    base = sim_server("--time-to-first-token", "400ms", "--inter-token-latency", "100ms")
    t0 = time.monotonic()
    r = httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True},
                   timeout=30)
    assert r.status_code == 200
    assert 0.85 <= time.monotonic() - t0 <= 1.7


def test_per_token_prefill_scales_with_prompt(sim_server):
    base = sim_server("--prefill-overhead", "100ms", "--prefill-time-per-token", "10ms")

    def ttft(n_ids):
        t0 = time.monotonic()
        with httpx.stream("POST", base + "/v1/completions", json={
                "model": "test-model", "prompt": list(range(1, n_ids + 1)), "max_tokens": 1, "stream": True},
                timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"text":""' not in line:
                    return time.monotonic() - t0
    short, long = ttft(10), ttft(60)
    assert 0.18 <= short <= 0.5          # 100ms + 10 * 10ms
    assert 0.65 <= long <= 1.1           # 100ms + 60 * 10ms
    assert long - short >= 0.35


def test_load_factor_slows_concurrent_requests(sim_server):
    base = sim_server("--time-to-first-token", "300ms", "--time-factor-under-load", "3", "--max-num-seqs", "3")

    def one(i):
        time.sleep(0.05 * i)      # arrive in order: running count 1, 2, 3 at their starts
        t0 = time.monotonic()
        httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1}, timeout=30)
        return time.monotonic() - t0

    threads, res = run_concurrently(one, 3)
    for t in threads:
        t.join()
    assert 0.25 <= res[0] <= 0.6      # factor 1
    assert 0.5 <= res[1] <= 0.95      # factor 2
    assert 0.8 <= res[2] <= 1.35      # factor 3


def test_c23_running_and_waiting_gauges(sim_server):
    base = sim_server("--max-num-seqs", "2", "--time-to-first-token", "2000")
    before = scrape(base)
    threads, res = run_concurrently(lambda i: httpx.post(
        base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}, timeout=30).status_code, 5)
    time.sleep(0.5)
    mid = scrape(base)
    assert value(mid, "vllm:num_requests_running") == 2
    assert value(mid, "vllm:num_requests_waiting") == 3
    for t in threads:
        t.join()
    assert res == [200] * 5
    after = scrape(base)
    assert value(after, "vllm:num_requests_running") == 0
    assert value(after, "vllm:num_requests_waiting") == 0
    # queued requests show their queue time, and TTFT includes it
    q = value(after, "vllm:request_queue_time_seconds_sum") - value(before, "vllm:request_queue_time_seconds_sum")
    assert 7.5 <= q <= 9.5            # two waited ~2 s, one ~4 s
    assert value(after, "vllm:time_to_first_token_seconds_bucket", le="7.5") - \
        value(before, "vllm:time_to_first_token_seconds_bucket", le="7.5") == 5
    assert value(after, "vllm:time_to_first_token_seconds_bucket", le="5.0") - \
        value(before, "vllm:time_to_first_token_seconds_bucket", le="5.0") == 4
    assert value(after, "vllm:time_to_first_token_seconds_bucket", le="2.5") - \
        value(before, "vllm:time_to_first_token_seconds_bucket", le="2.5") == 2


def test_429_when_queue_full_also_for_streams(sim_server):
    base = sim_server("--max-num-seqs", "1", "--max-waiting-queue-length", "1", "--time-to-first-token", "1s")

    def one(i):
        time.sleep(0.15 * i)
        r = httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1,
                                          "stream": i == 3}, timeout=30)
        return r.status_code, r.headers["content-type"], r.json() if r.status_code != 200 else None

    threads, res = run_concurrently(one, 4)
    for t in threads:
        t.join()
    assert [r[0] for r in res] == [200, 200, 429, 429]
    for status, ctype, body in res[2:]:
        assert ctype.startswith("application/json")
        assert body["error"]["type"] == "RateLimitError" and body["error"]["code"] == 429
        assert "waiting requests queue is full" in body["error"]["message"]


def test_zero_queue_and_prompt_array_fail_fast(sim_server):
    base = sim_server("--max-num-seqs", "2", "--max-waiting-queue-length", "0", "--time-to-first-token", "300ms")
    r = httpx.post(base + "/v1/completions", json={"model": "test-model", "prompt": ["a", "b", "c"]}, timeout=30)
    assert r.status_code == 429
    assert value(scrape(base), "vllm:num_requests_running") == 0    # nothing was left admitted
    r = httpx.post(base + "/v1/completions", json={"model": "test-model", "prompt": ["a", "b"]}, timeout=30)
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


def test_remote_prefill_uses_kv_transfer_time(sim_server):
    base = sim_server("--kv-cache-transfer-latency", "500ms")
    t0 = time.monotonic()
    httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1}, timeout=30)
    plain = time.monotonic() - t0
    t0 = time.monotonic()
    r = httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1,
                                      "kv_transfer_params": {"do_remote_prefill": True, "remote_engine_id": "e1",
                                                             "remote_block_ids": ["1"], "some_future_key": 3}},
                   timeout=30)
    remote = time.monotonic() - t0
    assert r.status_code == 200 and "kv_transfer_params" not in r.json()
    assert plain < 0.3 and 0.45 <= remote <= 1.0


def test_remote_decode_finish_and_params(server):
    r = httpx.post(server + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5,
                                        "kv_transfer_params": {"do_remote_decode": True}}, timeout=30)
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "remote_decode"
    kv = body["kv_transfer_params"]
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert kv["remote_block_ids"] and kv["remote_engine_id"] and kv["remote_host"] and kv["remote_port"] > 0
    r = httpx.post(server + "/v1/completions", json={"model": "test-model", "prompt": "x", "max_tokens": 2,
                                                     "kv_transfer_params": {"do_remote_decode": True}}, timeout=30)
    assert r.json()["choices"][0]["finish_reason"] == "remote_decode"
    r = httpx.post(server + CHAT, json={"model": "test-model", "messages": MSG, "stream": True,
                                        "kv_transfer_params": {"do_remote_decode": True}}, timeout=30)
    assert r.status_code == 400 and "Prefill does not support streaming" in r.json()["error"]["message"]


def test_disconnect_aborts_and_frees_the_slot(sim_server):
    base = sim_server("--max-num-seqs", "1", "--time-to-first-token", "1500ms", "--inter-token-latency", "10ms")
    before = scrape(base)
    # a stream closed during TTFT, and a queued non-stream request whose client gives up
    with httpx.stream("POST", base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5,
                                                 "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        try:
            httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5}, timeout=0.4)
        except httpx.TimeoutException:
            pass
    time.sleep(0.2)
    mid = scrape(base)
    assert value(mid, "vllm:num_requests_running") == 0
    assert value(mid, "vllm:num_requests_waiting") == 0
    t0 = time.monotonic()
    r = httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}, timeout=30)
    assert r.status_code == 200 and time.monotonic() - t0 < 2.5      # not stuck behind the aborted ones
    after = scrape(base)
    succ = sum(v for (n, _), v in after.items() if n == "vllm:request_success_total") - \
        sum(v for (n, _), v in before.items() if n == "vllm:request_success_total")
    assert succ == 1


def test_disconnect_mid_stream(sim_server):
    base = sim_server("--max-num-seqs", "1", "--inter-token-latency", "100ms")
    with httpx.stream("POST", base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 50,
                                                 "ignore_eos": True, "stream": True}, timeout=30) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                got += 1
                if got == 3:
                    break
    time.sleep(0.3)
    assert value(scrape(base), "vllm:num_requests_running") == 0


def test_c22_metric_names_and_deltas(server):
    r = httpx.get(server + "/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in r.text
    before = scrape(server)
    assert 0 <= value(before, "vllm:kv_cache_usage_perc") <= 1
    prompt_total = 0
    for _ in range(3):
        body = httpx.post(server + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5,
                                               "ignore_eos": True}, timeout=30).json()
        prompt_total += body["usage"]["prompt_tokens"]
    after = scrape(server)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:time_to_first_token_seconds_count") == 3
    assert delta("vllm:e2e_request_latency_seconds_count") == 3
    assert delta("vllm:request_success_total", finished_reason="length") == 3
    assert delta("vllm:generation_tokens_total") == 15
    assert delta("vllm:prompt_tokens_total") == prompt_total
    assert delta("vllm:request_generation_tokens_count") == 3
    assert delta("vllm:request_params_max_tokens_sum") == 15
    assert delta("vllm:inter_token_latency_seconds_count") == 12
    for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_time_per_output_token_seconds", "vllm:request_prompt_tokens",
              "vllm:request_max_num_generation_tokens", "vllm_sim:token_emission_lag_seconds"):
        assert (h + "_bucket", frozenset({"le": "+Inf", "model_name": "test-model", "engine": "0"}.items())) in after, h
        assert (h + "_sum", frozenset({"model_name": "test-model", "engine": "0"}.items())) in after
    assert after[("vllm:cache_config_info", frozenset({"block_size": "16", "num_gpu_blocks": "1024",
                                                       "engine": "0"}.items()))] == 1


def test_metrics_measure_latency(sim_server):
    base = sim_server("--time-to-first-token", "200ms", "--inter-token-latency", "80ms")
    httpx.post(base + CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True},
               timeout=30)
    m = scrape(base)
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.1") == 0
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.25") == 1
    assert value(m, "vllm:inter_token_latency_seconds_bucket", le="0.075") == 0
    assert value(m, "vllm:inter_token_latency_seconds_bucket", le="0.1") == 3
    assert 0.4 <= value(m, "vllm:e2e_request_latency_seconds_sum") <= 0.8


@pytest.mark.server
def test_no_token_leaves_early_under_concurrent_load(sim_server):
    """Issue 8: 100 concurrent streams, TTFT 20 ms, ITL 5 ms.  The server's own TTFT histogram
    has no observation at or below the configured 20 ms, the emission-lag histogram none below 0,
    and no client sees its first token before 20 ms after sending the request."""
    base = sim_server("--time-to-first-token", "20ms", "--inter-token-latency", "5ms", "--max-num-seqs", "200")
    before = scrape(base)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 8, "ignore_eos": True, "stream": True}

    def first_token(i):
        t0 = time.monotonic()
        first = None
        with httpx.stream("POST", base + CHAT, json=body, timeout=60) as r:
            for line in r.iter_lines():
                if first is None and '"content":"' in line and '"content":""' not in line:
                    first = time.monotonic() - t0
        return first

    threads, res = run_concurrently(first_token, 100)
    for t in threads:
        t.join()
    assert None not in res
    assert min(res) >= 0.020, min(res)
    after = scrape(base)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:time_to_first_token_seconds_count") == 100
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.02") == 0
    assert delta("vllm:inter_token_latency_seconds_count") == 700
    assert delta("vllm:inter_token_latency_seconds_bucket", le="+Inf") == 700
