"""``--data-parallel-size N`` behind one endpoint (:mod:`server.dp_api`), as vLLM's API server
fronts its DP engines: the balancer's choice (vLLM 0.34's score), the ``X-data-parallel-rank``
header, one ``/metrics`` with every engine's series, operations sent to every rank once, and
what the one API server holds for all (Responses store, request ids, readiness)."""
from __future__ import annotations

import httpx
import orjson
import pytest

from support import _clean_env, metric, metric_values, scrape

COMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


def build(*flags, env=None):
    from app import create_app
    from generation.config.cli import load_config
    from server.dp_api import build_data_parallel_api
    config = load_config(["--model", "test-model", "--seed", "7", *flags], env=_clean_env(env or {}))
    config.data_parallel_rank = 0
    api = build_data_parallel_api(config, create_app)
    return api, httpx.Client(base_url="http://127.0.0.1:8000", transport=httpx.WSGITransport(app=api), timeout=30)


@pytest.fixture(scope="module")
def dp():
    api, client = build("-dp", "2", "--mode", "echo", "--enable-lora", env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
                                                           "VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    yield api, client
    client.close()


def completion(client, prompt="x y z", **headers):
    r = client.post(COMPL, json={"prompt": prompt, "max_tokens": 8}, headers=headers)
    assert r.status_code == 200, r.text
    return r


def served(client) -> list:
    m = scrape(client)
    return [metric(m, "vllm:request_success_total", engine=str(e), finished_reason="length") +
            metric(m, "vllm:request_success_total", engine=str(e), finished_reason="stop") for e in (0, 1)]


def test_idle_engines_take_requests_in_turn_and_the_header_picks_one(dp):
    api, client = dp
    before = served(client)
    for _ in range(4):
        completion(client)
    completion(client, **{"X-data-parallel-rank": "1"})
    completion(client, **{"X-data-parallel-rank": "1"})
    completion(client, **{"X-data-parallel-rank": "one"})       # not an integer: vLLM ignores it
    after = served(client)
    assert sum(after) - sum(before) == 7
    assert after[1] - before[1] >= 4 and after[0] - before[0] >= 2
    assert api.balancer.in_flight == [0, 0]


def test_the_header_places_an_invocation_as_it_checks_it(dp):
    """/invocations hands a chat or completions body to those handlers, which read the header:
    a rank out of range is refused (400), so one in range must place the request there."""
    api, client = dp
    before = served(client)
    for _ in range(4):
        r = client.post("/invocations", json={"prompt": "x y z", "max_tokens": 8},
                        headers={"X-data-parallel-rank": "1"})
        assert r.status_code == 200, r.text
    after = served(client)
    assert after[1] - before[1] == 4 and after[0] == before[0]
    r = client.post("/invocations", json={"prompt": "x", "max_tokens": 2}, headers={"X-data-parallel-rank": "2"})
    assert r.status_code == 400 and "out of range" in r.json()["error"]["message"]
    assert api.balancer.in_flight == [0, 0]


def test_one_metrics_page_carries_every_engines_series_once_per_family(dp):
    api, client = dp
    text = client.get("/metrics").text
    for family in ("vllm:num_requests_running", "vllm:prompt_tokens_total", "http_requests_total", "process_cpu_seconds_total"):
        assert text.count(f"# HELP {family} ") == 1, family
    m = scrape(client)
    assert len(metric_values(m, "vllm:num_requests_running")) == 2
    assert {dict(k[1]).get("engine") for k in m if k[0] == "vllm:cache_config_info"} == {"0", "1"}
    assert len(metric_values(m, "process_cpu_seconds_total")) == 1
    import time
    stamps = metric_values(m, "vllm:lora_requests_info")
    assert stamps and all(time.time() - 600 < t <= time.time() for t in stamps)     # a time, not a sum of them
    # the API server's http_* count each request once, whichever engine served it
    n = metric(m, "http_requests_total", handler=COMPL, method="POST", status="2xx")
    completion(client)
    completion(client)
    assert metric(scrape(client), "http_requests_total", handler=COMPL, method="POST", status="2xx") == n + 2
    # prometheus_client's own exposition (OpenMetrics, name[] filter) merges the same way
    om = client.get("/metrics/", headers={"Accept": "application/openmetrics-text"},
                    params={"name[]": "vllm:num_requests_running"}).text
    assert om.count('num_requests_running{engine="') == 2 and om.rstrip().endswith("# EOF")


def test_an_operation_on_the_engines_reaches_every_rank_once(dp):
    api, client = dp
    r = client.post("/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "org/sql-lora"})
    assert r.status_code == 200, r.text
    assert all("sql" in sim.loras.paths for sim in api.sims)
    for rank in ("0", "1"):
        r = client.post(COMPL, json={"model": "sql", "prompt": "a b", "max_tokens": 4},
                        headers={"X-data-parallel-rank": rank})
        assert r.status_code == 200, r.text
    # a refused operation goes no further than rank 0
    assert client.post("/v1/unload_lora_adapter", json={"lora_name": "nope"}).status_code == 404
    assert all("sql" in sim.loras.paths for sim in api.sims)
    before = scrape(client)
    assert client.post("/v1/unload_lora_adapter", json={"lora_name": "sql"}).status_code == 200
    assert not any("sql" in sim.loras.paths for sim in api.sims)
    # the API server counts the operation once (the instrumentator skips /v1/load_lora_adapter:
    # its pattern "/load" is found in it)
    key = dict(handler="/v1/unload_lora_adapter", method="POST", status="2xx")
    assert metric(scrape(client), "http_requests_total", **key) == (metric_values(before, "http_requests_total", **key)
                                                                    or [0.0])[0] + 1


def test_a_response_stored_by_one_engine_is_found_through_any(dp):
    api, client = dp
    r = client.post("/v1/responses", json={"input": "hello there", "max_output_tokens": 8, "store": True},
                    headers={"X-data-parallel-rank": "1"})
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    got = client.get(f"/v1/responses/{rid}")
    assert got.status_code == 200 and got.json()["id"] == rid


def test_request_ids_differ_between_engines(dp):
    api, client = dp
    ids = {completion(client).json()["id"] for _ in range(8)}
    assert len(ids) == 8
    assert len({sim.new_request_id() for sim in api.sims}) == 2


def test_the_balancer_scores_as_vllm_0_34():
    from server.dp_api import DataParallelBalancer
    now = [0.0]
    counts = [[0, 4, 0.2], [0, 1, 0.2], [3, 1, 0.9]]
    b = DataParallelBalancer(3, lambda: counts, clock=lambda: now[0])
    assert b.choose() == 1                   # fewest waiting + running
    assert b.choose() == 1                   # its waiting count went up by one (2), still the lowest
    # engine 2: 3 + 1 = 4 plus 3 waiting x 6 x (0.9 - 0.5) = 11.2; engine 1 now 3
    assert b.choose() == 1
    assert b.choose() == 0                   # 4 against 4: the scan starts at a turning index
    counts[:] = [[0, 9, 0.2], [0, 9, 0.2], [0, 0, 0.0]]
    assert b.choose() == 1                   # the snapshot holds for 100 ms
    now[0] = 0.1
    assert b.choose() == 2                   # refreshed
    assert b.in_flight == [1, 4, 1]
    for rank in (1, 1, 1, 1, 0, 2):
        b.done(rank)
    assert b.in_flight == [0, 0, 0]
    # in flight here floors a snapshot that has not seen the requests yet: a burst spreads
    idle = DataParallelBalancer(2, lambda: [[0, 0, 0.0], [0, 0, 0.0]], clock=lambda: 0.0)
    assert [idle.choose() for _ in range(4)] == [0, 1, 0, 1]


def test_merged_exposition_sums_the_api_servers_series_and_keeps_the_process_once():
    from generation.metrics.merge import merge_exposition
    a = ("# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 2.5\n"
         "# HELP vllm:x X.\n# TYPE vllm:x gauge\nvllm:x{engine=\"0\",model_name=\"m\"} 1.0\n"
         "# HELP http_requests_total R.\n# TYPE http_requests_total counter\nhttp_requests_total{handler=\"/a\"} 2.0\n"
         "# HELP http_requests_created R.\n# TYPE http_requests_created gauge\nhttp_requests_created{handler=\"/a\"} 100.0\n")
    b = a.replace('engine="0"', 'engine="1"').replace("} 1.0", "} 5.0").replace("2.5", "2.5").replace(
        "} 2.0", "} 3.0").replace("100.0", "200.0")
    out = merge_exposition([a, b])
    assert out.count("# HELP") == 4
    assert "process_cpu_seconds_total 2.5\n" in out
    assert 'vllm:x{engine="0",model_name="m"} 1.0\nvllm:x{engine="1",model_name="m"} 5.0\n' in out
    assert 'http_requests_total{handler="/a"} 5.0\n' in out
    assert 'http_requests_created{handler="/a"} 100.0\n' in out
    lora = ('# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n'
            'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} %s\n')
    assert merge_exposition([lora % "1.7e+09", lora % "1.8e+09"]) == lora % "1.8e+09"


def test_a_rank_outside_the_engines_is_vllms_400(dp, app_client):
    api, client = dp
    r = client.post(COMPL, json={"prompt": "x", "max_tokens": 4}, headers={"X-data-parallel-rank": "2"})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "data_parallel_rank 2 is out of range [0, 2).", "type": "BadRequestError",
                                 "param": None, "code": 400}
    assert api.balancer.in_flight == [0, 0]
    one = app_client("--mode", "echo")        # one engine: only rank 0 exists
    r = one.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True},
                 headers={"X-data-parallel-rank": "1"})
    # vLLM checks the rank in AsyncLLM.add_request, which a stream's generator reaches after its 200
    assert r.status_code == 200
    assert r.text == ('data: {"error":{"message":"data_parallel_rank 1 is out of range [0, 1).","type":"BadRequestError",'
                      '"param":null,"code":400}}\n\ndata: [DONE]\n\n')
    r = client.post(COMPL, json={"prompt": "x", "max_tokens": 4, "stream": True}, headers={"X-data-parallel-rank": "-1"})
    assert r.status_code == 200 and "data_parallel_rank -1 is out of range [0, 2)." in r.text
    assert api.balancer.in_flight == [0, 0]
    assert one.post(COMPL, json={"prompt": "x", "max_tokens": 4}, headers={"X-data-parallel-rank": " 0 "}).status_code == 200


def test_sleep_and_wake_up_reach_every_engine_together():
    api, client = build("-dp", "2", "--mode", "echo", "--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})
    assert client.post("/sleep", params={"level": "1"}).status_code == 200
    assert all(sim.sleeping_tags for sim in api.sims)
    assert client.get("/is_sleeping").json() == {"is_sleeping": True}
    m = scrape(client)
    for engine in ("0", "1"):
        assert metric(m, "vllm:engine_sleep_state", engine=engine, sleep_state="weights_offloaded") == 1.0
    assert client.post("/wake_up").status_code == 200
    assert not any(sim.sleeping_tags for sim in api.sims)
    assert client.post("/sleep", params={"level": "7"}).status_code == 400      # refused on every rank
    assert not any(sim.sleeping_tags for sim in api.sims)
    # the API server's operation histogram counts the one call, not one per engine
    m = scrape(client)
    assert metric(m, "vllm:sleep_mode_operation_duration_seconds_count", operation="sleep") == 1.0


def test_wsgi_py_serves_the_engines_behind_one_app(monkeypatch):
    import importlib
    import sys
    monkeypatch.setenv("SIM_ARGS", "--data-parallel-size 2 --mode echo")
    monkeypatch.delenv("SIM_CONFIG", raising=False)
    sys.modules.pop("wsgi", None)
    try:
        wsgi = importlib.import_module("wsgi")
        assert [s.config.data_parallel_rank for s in wsgi.app.sims] == [0, 1]
        client = httpx.Client(base_url="http://sim", transport=httpx.WSGITransport(app=wsgi.app))
        assert [completion(client).status_code for _ in range(2)] == [200, 200]
        m = scrape(client)
        assert [metric(m, "vllm:prompt_tokens_total", engine=e) for e in ("0", "1")] == [3.0, 3.0]
    finally:
        sys.modules.pop("wsgi", None)


def test_an_operation_without_the_api_key_reaches_no_engine():
    api, client = build("-dp", "2", "--mode", "echo", "--enable-sleep-mode", "--api-key", "k",
                        env={"VLLM_SERVER_DEV_MODE": "1"})
    for path in ("/sleep", "/pause"):
        assert client.post(path, params={"level": "1"}).status_code == 401
    assert not any(s.sleeping_tags or s.reject_new_requests for s in api.sims)
    assert client.post("/sleep", params={"level": "1"}, headers={"Authorization": "Bearer k"}).status_code == 200
    assert all(s.sleeping_tags for s in api.sims)


def test_three_engines_merge_a_family_rank_0_has_no_sample_of():
    """http_* families are empty on an engine that served nothing: the family is told by the first
    engine with a sample, and summed there (a scrape with a series twice is refused by Prometheus)."""
    from prometheus_client.parser import text_string_to_metric_families
    api, client = build("-dp", "3", "--mode", "echo")
    for rank in ("1", "2"):
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                        headers={"X-data-parallel-rank": rank})
        assert r.status_code == 200
    text = client.get("/metrics").text
    seen = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in seen, key
            seen.add(key)
    m = scrape(client)
    assert metric(m, "http_requests_total", handler="/v1/chat/completions", method="POST", status="2xx") == 2.0


def test_cancelling_a_background_response_aborts_it_on_its_engine():
    import time
    api, client = build("-dp", "2", "--inter-token-latency", "100ms", env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    r = client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 50, "background": True,
                                            "store": True}, headers={"X-data-parallel-rank": "1"})
    assert r.status_code == 200, r.text
    import gevent
    gevent.sleep(0.3)
    assert [engine_counts_running(s) for s in api.sims] == [0, 1]
    assert client.post(f"/v1/responses/{r.json()['id']}/cancel").status_code == 200
    deadline = time.monotonic() + 5
    while any(engine_counts_running(s) for s in api.sims) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    assert [engine_counts_running(s) for s in api.sims] == [0, 0]


def engine_counts_running(sim) -> int:
    from server.dp_api import engine_counts
    return engine_counts(sim)[1]


def test_admission_limits_count_every_engine_and_abort_reaches_every_engine():
    """vLLM's check_admission counts the API server's unfinished requests over all its engines;
    /abort_requests {} aborts (and counts) every engine's."""
    import gevent
    api, client = build("-dp", "2", "--inter-token-latency", "100ms", "--max-num-queued-reqs", "2",
                        env={"VLLM_SERVER_DEV_MODE": "1"})
    body = {"prompt": "x", "max_tokens": 30, "ignore_eos": True}
    jobs = [gevent.spawn(client.post, COMPL, json=body, headers={"X-data-parallel-rank": rank}) for rank in ("0", "1")]
    gevent.sleep(0.3)
    r = client.post(COMPL, json=body)           # two in flight over the two engines: the server's limit
    assert r.status_code == 503, r.text
    r = client.post("/abort_requests", json={})
    assert r.json() == {"status": "aborted", "aborted": 2}
    assert [j.get(timeout=5).json()["choices"][0]["finish_reason"] for j in jobs] == ["abort", "abort"]


def test_an_operation_with_a_body_reaches_every_one_of_three_engines():
    api, client = build("-dp", "3", "--mode", "echo", "--enable-lora", "--max-loras", "4",
                        env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})
    assert client.post("/admin/config", json={"time-to-first-token": "1s"}).status_code == 200
    assert [s.config.time_to_first_token for s in api.sims] == [1.0, 1.0, 1.0]
    assert client.post("/v1/load_lora_adapter", json={"lora_name": "lx", "lora_path": "org/lx"}).status_code == 200
    assert all("lx" in s.loras.paths for s in api.sims)


def test_an_engine_that_refuses_what_rank_0_took_is_logged(caplog):
    api, client = build("-dp", "3", "--mode", "echo", "--enable-lora", "--max-loras", "4",
                        env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})
    body = {"lora_name": "lx", "lora_path": "org/lx"}
    inner = httpx.Client(base_url="http://sim", transport=httpx.WSGITransport(app=api.apps[2]))
    assert inner.post("/v1/load_lora_adapter", json=body).status_code == 200        # rank 2 alone
    with caplog.at_level("WARNING", logger="vllm_sim"):
        assert client.post("/v1/load_lora_adapter", json=body).status_code == 200
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].startswith("data-parallel rank 2 refused POST /v1/load_lora_adapter "
                                                        "that rank 0 took: 400")


def test_a_refused_request_leaves_no_trace_on_the_balancer(dp):
    """vLLM validates a request before it picks an engine: a 400 adds nothing to the waiting
    count its balancer keeps between the coordinator's snapshots."""
    api, client = dp
    b = api.balancer
    clock, b.clock = b.clock, (lambda: 1e9)            # one snapshot for the whole test
    try:
        assert client.post(COMPL, json={"prompt": "x", "max_tokens": 4}).status_code == 200
        before = [row[0] for row in b.snapshot]
        for _ in range(5):
            assert client.post(COMPL, json={"prompt": "x", "max_tokens": -1}).status_code == 400
        assert [row[0] for row in b.snapshot] == before and b.in_flight == [0, 0]
        assert client.post(COMPL, json={"prompt": "x", "max_tokens": 4}).status_code == 200
        assert sum(row[0] for row in b.snapshot) == sum(before) + 1
    finally:
        b.clock, b.taken_at = clock, float("-inf")


def test_an_operation_answers_for_every_engine_as_vllms_dp_client():
    """vLLM's DP client combines the engines' answers (``core_client.py``): ``reset_prefix_cache``
    is ``all(...)``, and an engine's failure fails the call (``asyncio.gather`` raises), so a
    refusal on rank 1 is the endpoint's answer even when rank 0 took the operation."""
    api, client = build("-dp", "2", "--enable-kvcache", "--enable-sleep-mode",
                        env={"VLLM_SERVER_DEV_MODE": "1"})
    api.sims[1].kv_cache.reset_prefix_cache = lambda running: False       # rank 1 still holds blocks
    assert client.post("/reset_prefix_cache").json() == {"success": False}
    api.sims[1].kv_cache.reset_prefix_cache = lambda running: True
    assert client.post("/reset_prefix_cache").json() == {"success": True}

    def failing(environ, start_response):            # rank 1's engine refuses the operation
        body = b'{"error":{"message":"Call to release_kv_cache_memory method failed: x","code":500}}'
        start_response("500 INTERNAL SERVER ERROR", [("Content-Type", "application/json"),
                                                     ("Content-Length", str(len(body)))])
        return [body]
    real, api.apps[1].extensions["engine_wsgi"] = api.apps[1].extensions["engine_wsgi"], failing
    assert client.post("/pause").status_code == 500
    api.apps[1].extensions["engine_wsgi"] = real


@pytest.mark.parametrize("flags", [("--inter-token-latency", "5ms"), ("--latency-calculator", "step", "--force-dummy-tokenizer")])
def test_each_engine_request_of_a_request_is_placed_on_its_own(flags):
    """vLLM places every engine request: each choice of ``n`` > 1 (``AsyncLLM.add_request``'s
    children) and each prompt of a list (``generate`` per prompt), each through
    ``DPLBAsyncMPClient``; a request whose header names a rank keeps all of them there."""
    import gevent
    api, client = build("-dp", "2", *flags)

    def engines() -> list:
        m = scrape(client)
        return [sum(metric_values(m, "vllm:request_success_total", engine=str(e))) for e in (0, 1)]
    msgs = [{"role": "user", "content": "hi"}]
    for path, body in ((CHAT, {"messages": msgs, "n": 4}), (COMPL, {"prompt": ["a", "b", "c", "d"]}),
                       (CHAT, {"messages": msgs, "n": 4, "stream": True}),
                       (COMPL, {"prompt": ["a", "b"], "n": 2, "stream": True})):
        before = engines()
        r = client.post(path, json={**body, "max_tokens": 3})
        assert r.status_code == 200, r.text
        after = engines()
        assert [a - b for a, b in zip(after, before)] == [2, 2], (path, body)
        assert api.balancer.in_flight == [0, 0]
    before = engines()
    assert client.post(CHAT, json={"messages": msgs, "n": 4, "max_tokens": 3},
                       headers={"X-data-parallel-rank": "1"}).status_code == 200
    assert [a - b for a, b in zip(engines(), before)] == [0, 4]
    # a client that leaves takes every engine's share with it; an abort finds each where it runs
    job = gevent.spawn(client.post, COMPL, json={"prompt": ["a", "b"], "n": 2, "max_tokens": 2000,
                                                 "ignore_eos": True}, headers={"X-Request-Id": "spread"})
    gevent.sleep(0.3)
    m = scrape(client)
    assert [metric(m, "vllm:num_requests_running", engine=str(e)) for e in (0, 1)] == [2, 2]
    assert client.post("/inference/v1/abort_requests", json={"request_ids": ["cmpl-spread-0", "cmpl-spread-1"]}).status_code == 200
    job.join(5)
    assert [c["finish_reason"] for c in job.value.json()["choices"]] == ["abort"] * 4
    m = scrape(client)
    assert [metric(m, "vllm:num_requests_running", engine=str(e)) for e in (0, 1)] == [0, 0]
    assert api.balancer.in_flight == [0, 0]
    client.close()


def test_an_abort_all_counts_a_parent_once_whose_children_run_on_two_engines():
    """vLLM's one OutputProcessor over the DP engines counts a parallel-sampling parent once
    (``request_states`` + ``parent_requests``), wherever its children were placed: ``n=2`` spread
    over two engines is 3, not 2 + a parent per engine."""
    import gevent
    api, client = build("-dp", "2", "--inter-token-latency", "20ms", env={"VLLM_SERVER_DEV_MODE": "1"})
    job = gevent.spawn(client.post, CHAT, json={"messages": [{"role": "user", "content": "hi"}], "n": 2,
                                                "max_tokens": 500, "ignore_eos": True})
    gevent.sleep(0.2)
    m = scrape(client)
    assert [metric(m, "vllm:num_requests_running", engine=str(e)) for e in (0, 1)] == [1, 1]
    assert client.post("/abort_requests", json={}).json() == {"status": "aborted", "aborted": 3}
    job.join(5)
    assert [c["finish_reason"] for c in job.value.json()["choices"]] == ["abort"] * 2
    client.close()


def test_a_request_too_big_for_one_engine_fits_on_the_endpoint():
    """-dp 2 --max-num-seqs 1 --max-waiting-queue-length 1: n=4 fits two idle engines (each
    choice placed on its own), n=5 fits none (the 429 before anything is tokenized)."""
    api, client = build("-dp", "2", "--max-num-seqs", "1", "--max-waiting-queue-length", "1")
    msgs = [{"role": "user", "content": "hi"}]
    r = client.post(CHAT, json={"messages": msgs, "n": 4, "max_tokens": 2})
    assert r.status_code == 200 and len(r.json()["choices"]) == 4
    assert client.post(CHAT, json={"messages": msgs, "n": 5, "max_tokens": 2}).status_code == 429
    assert api.balancer.in_flight == [0, 0]
    client.close()


def test_a_repeated_rank_header_is_read_as_starlette_reads_it(dp):
    """Two ``X-data-parallel-rank`` headers reach WSGI joined (gunicorn: ``1,0``); vLLM's
    Starlette ``get`` reads the first."""
    import io
    from wsgiref.util import setup_testing_defaults
    api, client = dp

    def post(rank_header: str, stream: bool) -> bytes:
        body = orjson.dumps({"prompt": "x", "max_tokens": 2, "stream": stream})
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": COMPL, "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
                   "HTTP_X_DATA_PARALLEL_RANK": rank_header}
        setup_testing_defaults(environ)
        out = api(environ, lambda status, headers, exc_info=None: None)
        try:
            return b"".join(out)
        finally:
            getattr(out, "close", lambda: None)()
    before = served(client)
    post("1,0", False)
    assert [a - b for a, b in zip(served(client), before)] == [0, 1]
    assert b"data_parallel_rank 7 is out of range [0, 2)." in post("7,0", True)
