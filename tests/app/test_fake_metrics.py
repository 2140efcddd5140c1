"""Fake metrics through the app in-process (reference engine.md 5.4 and 11 items 10, 32-35;
api.md 5.13): ``/metrics`` reports configured values, fixed or generated over time, and
``POST /admin/config`` / ``POST /fake_metrics`` change them partially; parsed with
prometheus_client's own parser.  Generators follow the collector's clock: the app's real one,
and an injected one stepped by the test.  Start-up validation runs ``app.main`` in-process.
"""
from __future__ import annotations

import json
import time

import httpx
import pytest

from support import free_port, metric
from support.fake_metrics import get, samples_of

CHAT = "/v1/chat/completions"
LORAS = [{"running": "lora4,lora2", "waiting": "lora3", "timestamp": 1257894567},
         {"running": "lora4,lora3", "waiting": "", "timestamp": 1257894569}]


def scrape(base: httpx.Client) -> dict:
    r = base.get("/metrics", timeout=10)
    assert r.status_code == 200
    return samples_of(r.text)


def names(samples: dict) -> set:
    return {name for name, _ in samples}


def buckets(samples: dict, name: str) -> dict:
    """``{le: cumulative count}`` of a histogram, le as float."""
    return {float(dict(lbl)["le"]): v for (n, lbl), v in samples.items() if n == name + "_bucket"}


def fake_server(app_client, obj: dict, *flags: str) -> httpx.Client:
    """An in-process simulator started with ``--fake-metrics obj``."""
    return app_client("--fake-metrics", json.dumps(obj), *flags)


def admin(base: httpx.Client, fake: dict) -> httpx.Response:
    return base.post("/admin/config", json={"fake-metrics": fake}, timeout=10)


# ---- engine.md 11 item 32: fixed values ----------------------------------------------------
FIXED = {"running-requests": 10, "waiting-requests": 30, "kv-cache-usage": 0.4, "loras": LORAS,
         "ttft-buckets-values": [1, 2, 3], "tpot-buckets-values": [0, 0, 4],
         "e2erl-buckets-values": [0, 5], "request-prompt-tokens": [10, 20, 30],
         "request-success-total": {"stop": 20, "length": 3},
         "prefix-cache-hits": 40, "prefix-cache-queries": 100}


def test_fixed_values_are_reported(app_client):
    base = fake_server(app_client, FIXED)
    m = scrape(base)
    assert get(m, "vllm:num_requests_running") == 10
    assert get(m, "vllm:num_requests_waiting") == 30
    assert get(m, "vllm:kv_cache_usage_perc") == 0.4
    # per-bucket counts become cumulative buckets
    ttft = buckets(m, "vllm:time_to_first_token_seconds")
    assert (ttft[0.001], ttft[0.005], ttft[0.01], ttft[0.02], ttft[float("inf")]) == (1, 3, 6, 6, 6)
    assert len(ttft) == 23
    assert get(m, "vllm:time_to_first_token_seconds_count") == 6
    assert get(m, "vllm:time_to_first_token_seconds_sum") == pytest.approx(1 * 0.001 + 2 * 0.005 + 3 * 0.01)
    tpot = buckets(m, "vllm:inter_token_latency_seconds")
    assert (tpot[0.025], tpot[0.05], tpot[float("inf")]) == (0, 4, 4)
    # the ITL's old name only for a release that exported it (vLLM 0.34 does not)
    assert not [n for n, _ in m if n.startswith("vllm:time_per_output_token_seconds")]
    e2e = buckets(m, "vllm:e2e_request_latency_seconds")
    assert (e2e[0.3], e2e[0.5], e2e[7680.0], e2e[float("inf")]) == (0, 5, 5, 5)
    prompt = buckets(m, "vllm:request_prompt_tokens")
    assert (prompt[1], prompt[2], prompt[5], prompt[1000], prompt[float("inf")]) == (10, 30, 60, 60, 60)
    assert get(m, "vllm:request_prompt_tokens_sum") == 200
    assert get(m, "vllm:prompt_tokens_total") == 200
    # lora series: one per entry, value = the timestamp
    lora = {(dict(lbl)["running_lora_adapters"], dict(lbl)["waiting_lora_adapters"]): v
            for (n, lbl), v in m.items() if n == "vllm:lora_requests_info"}
    assert lora == {("lora4,lora2", "lora3"): 1257894567.0, ("lora4,lora3", ""): 1257894569.0}
    assert all(dict(lbl)["max_lora"] == "1" for (n, lbl), _ in m.items() if n == "vllm:lora_requests_info")
    # all five finish reasons exist, missing ones 0
    success = {dict(lbl)["finished_reason"]: v for (n, lbl), v in m.items() if n == "vllm:request_success_total"}
    assert success == {"stop": 20, "length": 3, "tool_calls": 0, "remote_decode": 0, "cache_threshold": 0}
    assert get(m, "vllm:prefix_cache_hits_total") == 40
    assert get(m, "vllm:prefix_cache_queries_total") == 100
    # constant info stays; nothing configured -> no series
    assert metric(m, "vllm:cache_config_info", engine="0", block_size="16", num_gpu_blocks="1024",
                  kv_cache_size_tokens="16384", kv_cache_max_concurrency="16.0") == 1
    for absent in ("vllm:request_queue_time_seconds_count", "vllm:generation_tokens_total",
                   "vllm:request_generation_tokens_count", "vllm:request_params_max_tokens_count"):
        assert absent not in names(m)


def test_real_requests_do_not_change_fake_metrics(app_client):
    base = fake_server(app_client, FIXED)
    before = scrape(base)
    for _ in range(2):
        r = base.post(CHAT, json={"model": "test-model", "max_tokens": 5,
                                          "messages": [{"role": "user", "content": "hello there"}]}, timeout=30)
        assert r.status_code == 200
    after = scrape(base)
    # the simulator's own and its process' figures, and the HTTP middleware's (real, never faked)
    moving = ("vllm_sim:", "process_", "python_gc_", "http_")
    assert {k: v for k, v in after.items() if not k[0].startswith(moving)} == \
        {k: v for k, v in before.items() if not k[0].startswith(moving)}


def test_admin_config_shows_fake_metrics(app_client):
    base = fake_server(app_client, FIXED)
    cfg = base.get("/admin/config", timeout=10).json()
    assert cfg["fake-metrics"] == FIXED
    assert cfg["fake-metrics-refresh-interval"] == "100ms"
    assert app_client().get("/admin/config", timeout=10).json()["fake-metrics"] is None


def test_unset_gauges_are_zero_and_default_lora_series(app_client):
    t0 = time.time()
    base = fake_server(app_client, {"e2erl-buckets-values": [1]})
    m = scrape(base)
    assert get(m, "vllm:num_requests_running") == 0
    assert get(m, "vllm:num_requests_waiting") == 0
    assert get(m, "vllm:kv_cache_usage_perc") == 0
    lora = [(dict(lbl), v) for (n, lbl), v in m.items() if n == "vllm:lora_requests_info"]
    assert len(lora) == 1
    labels, ts = lora[0]
    assert labels == {"max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert t0 - 60 <= ts <= time.time()
    assert "vllm:time_to_first_token_seconds_count" not in names(m)
    assert "vllm:prompt_tokens_total" not in names(m)


# ---- engine.md 11 item 33: generators --------------------------------------------------------
def test_generators_through_the_app(app_client):
    base = fake_server(app_client, {"kv-cache-usage": "ramp:0:1:700ms",
                                    "waiting-requests": "squarewave:10:15:400ms",
                                    "running-requests": "oscillate:0:8:1s"})
    # restart the ramp with a period the test can follow on a loaded machine
    assert admin(base, {"kv-cache-usage": "ramp:0:1:3s"}).status_code == 200
    # the app's own clock (monotonic): the ramp rises between two scrapes 100 ms apart
    first = get(scrape(base), "vllm:kv_cache_usage_perc")
    time.sleep(0.1)
    assert first < 0.5
    assert first < get(scrape(base), "vllm:kv_cache_usage_perc")
    # then a clock the test steps (monotonic ns, starting now): 250 ms per scrape, as a
    # client polling the real server would see it, without waiting for it
    now = [time.monotonic_ns()]
    base.sim.metrics.fake.clock = lambda: now[0]
    assert admin(base, {"kv-cache-usage": "ramp:0:1:3s"}).status_code == 200
    kv, waiting, running = [], set(), set()
    t0 = now[0]
    while now[0] - t0 < 6e9:
        m = scrape(base)
        kv.append(get(m, "vllm:kv_cache_usage_perc"))
        waiting.add(get(m, "vllm:num_requests_waiting"))
        running.add(get(m, "vllm:num_requests_running"))
        if kv[-1] == 1 and now[0] - t0 > 3.5e9:
            break
        now[0] += 250_000_000
    assert kv[0] < 0.5
    assert kv[-1] == 1
    rising = [v for v in kv if v < 1]
    assert len(rising) >= 3
    assert all(a < b for a, b in zip(rising, rising[1:])), kv      # strictly increasing until 1
    assert all(v == 1 for v in kv[len(rising):]), kv                # then stays at 1
    assert waiting == {10, 15}
    assert running <= set(range(9)) and len(running) >= 2          # integers in [0, 8]


# ---- engine.md 11 item 34: runtime updates ---------------------------------------------------
def test_admin_partial_updates(app_client):
    base = fake_server(app_client, {"request-prompt-tokens": [1, 2, 3], "total-prompt-tokens": 12345,
                                    "running-requests": 3, "ttft-buckets-values": [5]})
    m = scrape(base)
    assert get(m, "vllm:prompt_tokens_total") == 12345
    assert buckets(m, "vllm:request_prompt_tokens")[5] == 6
    # a new histogram without a total: histogram replaced, counter = derived total 10*1 + 20*2
    r = admin(base, {"request-prompt-tokens": [10, 20]})
    assert r.status_code == 200, r.text
    assert r.json()["fake-metrics"]["request-prompt-tokens"] == [10, 20]
    m = scrape(base)
    assert get(m, "vllm:prompt_tokens_total") == 50
    prompt = buckets(m, "vllm:request_prompt_tokens")
    assert (prompt[1], prompt[2], prompt[float("inf")]) == (10, 30, 30)
    assert get(m, "vllm:num_requests_running") == 3            # absent keys unchanged
    assert buckets(m, "vllm:time_to_first_token_seconds")[0.001] == 5
    # only a total: counter reset to it, histogram kept
    assert admin(base, {"total-prompt-tokens": 58}).status_code == 200
    m = scrape(base)
    assert get(m, "vllm:prompt_tokens_total") == 58
    assert buckets(m, "vllm:request_prompt_tokens")[2] == 30
    # histograms replace (not accumulate); null leaves a key unchanged
    assert admin(base, {"ttft-buckets-values": [0, 2], "running-requests": None}).status_code == 200
    m = scrape(base)
    ttft = buckets(m, "vllm:time_to_first_token_seconds")
    assert (ttft[0.001], ttft[0.005]) == (0, 2)
    assert get(m, "vllm:num_requests_running") == 3
    # [] clears: histogram and derived total disappear
    assert admin(base, {"request-prompt-tokens": []}).status_code == 200
    m = scrape(base)
    assert "vllm:request_prompt_tokens_count" not in names(m)
    assert "vllm:prompt_tokens_total" not in names(m)


def test_admin_rejects_invalid_updates_and_changes_nothing(app_client):
    base = fake_server(app_client, {"kv-cache-usage": 0.3, "request-success-total": {"stop": 1}})
    cases = [({"kv-cache-usage": 2}, "fake metrics KV cache usage must be between 0 and 1"),
             ({"running-requests": -1}, "fake metrics request counters cannot be negative"),
             ({"waiting-requests": "sawtooth:0:1:1s"}, "invalid fake metrics generation function sawtooth"),
             ({"prefix-cache-hits": 5}, "prefix-cache-hits and prefix-cache-queries must be specified together"),
             ({"request-success-total": {"done": 1}}, "invalid finish reason in request-success-total: done"),
             ({"ttft-buckets-values": [1, -1]},
              "time-to-first-token fake metrics should contain only non-negative"),
             ({"ttft-buckets-values": [0] * 24}, "fake time-to-first-token array is too long"),
             ({"e2erl-buckets-values": "1,2"}, "e2erl-buckets-values must be a list of integers"),
             ({"no-such-metric": 1}, "unknown fake metrics field 'no-such-metric'")]
    for fake, message in cases:
        r = base.post("/admin/config", json={"fake-metrics": fake, "time-to-first-token": "1s"},
                       timeout=10)
        assert r.status_code == 400, fake
        assert message in r.json()["error"]["message"], (fake, r.json())
    r = base.post("/admin/config", json={"fake-metrics": [1]}, timeout=10)
    assert r.status_code == 400
    m = scrape(base)
    assert get(m, "vllm:kv_cache_usage_perc") == 0.3
    assert get(m, "vllm:request_success_total", finished_reason="stop") == 1
    cfg = base.get("/admin/config", timeout=10).json()
    assert cfg["time-to-first-token"] == "0s"
    assert cfg["fake-metrics"] == {"kv-cache-usage": 0.3, "request-success-total": {"stop": 1}}
    # success map and prefix counters: replace, {} clears
    assert admin(base, {"request-success-total": {"length": 4}, "prefix-cache-hits": 1,
                        "prefix-cache-queries": 2}).status_code == 200
    m = scrape(base)
    assert get(m, "vllm:request_success_total", finished_reason="stop") == 0
    assert get(m, "vllm:request_success_total", finished_reason="length") == 4
    assert (get(m, "vllm:prefix_cache_hits_total"), get(m, "vllm:prefix_cache_queries_total")) == (1, 2)
    assert admin(base, {"request-success-total": {}, "loras": []}).status_code == 200
    m = scrape(base)
    assert "vllm:request_success_total" not in names(m)
    lora = [dict(lbl)["running_lora_adapters"] for (n, lbl), _ in m.items() if n == "vllm:lora_requests_info"]
    assert lora == [""]


def test_deprecated_fake_metrics_endpoint(app_client):
    base = fake_server(app_client, {"running-requests": 1}, "--max-loras", "2")
    r = base.post("/fake_metrics", json={"running-requests": 4, "loras": LORAS[:1]}, timeout=10)
    assert r.status_code == 204 and r.content == b""
    m = scrape(base)
    assert get(m, "vllm:num_requests_running") == 4
    assert get(m, "vllm:lora_requests_info", model_name=None, max_lora="2", running_lora_adapters="lora4,lora2",
               waiting_lora_adapters="lora3") == 1257894567
    assert base.get("/admin/config", timeout=10).json()["fake-metrics"]["running-requests"] == 4
    r = base.post("/fake_metrics", json={"kv-cache-usage": 7}, timeout=10)
    assert r.status_code == 400          # issue 12: a client mistake (the reference answers 500)
    assert r.json()["error"]["message"] == \
        "Failed to update fake metrics: fake metrics KV cache usage must be between 0 and 1"
    assert get(scrape(base), "vllm:kv_cache_usage_perc") == 0


# ---- engine.md 11 item 35: a real-metrics server refuses updates -----------------------------
def test_real_metrics_server_rejects_updates(api):
    r = admin(api, {"running-requests": 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == \
        "the simulator is reporting real metrics; fake metrics cannot be updated"
    r = api.post("/fake_metrics", json={"running-requests": 1}, timeout=10)
    assert r.status_code == 400          # issue 12: a client mistake (the reference answers 500)
    assert r.json()["error"]["message"] == ("Failed to update fake metrics: the simulator is reporting real "
                                            "metrics; fake metrics cannot be updated")
    assert api.get("/admin/config", timeout=10).json()["fake-metrics"] is None


# ---- engine.md 11 item 10: start-up validation -----------------------------------------------
@pytest.mark.parametrize("fake, message", [
    ({"running-requests": "squarewave:0:8:170"},
     'unknown format in fake metric generation function: time: missing unit in duration "170"'),
    ({"waiting-requests": "rampreset:0:8"},
     "unknown format in fake metric generation function: need func:start:end:period in fake metric generation"),
    ({"kv-cache-usage": "ramp:0:5:10s"}, "fake metrics KV cache usage start and end must be between 0 and 1"),
    ({"prefix-cache-hits": 100},
     "fake metrics prefix-cache-hits and prefix-cache-queries must be specified together"),
])
def test_startup_rejects_invalid_fake_metrics(fake, message, capsys):
    """``app.main`` (what ``python app.py`` runs) refuses to start: non-zero exit code, the
    message on stderr."""
    from app import main
    assert main(["--port", str(free_port()), "--host", "127.0.0.1", "--fake-metrics", json.dumps(fake)]) != 0
    err = capsys.readouterr().err
    assert message in err, err
