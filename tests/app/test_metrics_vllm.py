"""``/metrics`` as current vLLM exports it (issue 8), parsed with prometheus_client's text parser,
through the in-process app.  Names, types, labels and buckets follow vLLM's
``vllm/v1/metrics/loggers.py``; the simulator's own choices are listed in generation/metrics/recorder.py.
Case C35 (the families a benchmark client scrapes) is one example of the kind.
"""
from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from support import metric_values, scrape

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def families(client) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def sample(fams: dict, name: str, **labels) -> float:
    """The value of the one sample ``name`` with (at least) ``labels``; engine 0, model test-model."""
    if not name.startswith("vllm:lora_requests_info"):
        labels.setdefault("engine", "0")
    if not name.startswith(("vllm:lora_requests_info", "vllm:cache_config_info")):
        labels.setdefault("model_name", "test-model")
    found = [s.value for f in fams.values() for s in f.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def bounds(fams: dict, name: str) -> list:
    return [float(s.labels["le"]) for s in fams[name].samples if s.name == name + "_bucket"]


# vLLM 0.34's /metrics with the default flags, before any request (vllm/v1/metrics/loggers.py):
# family name (without _total) -> (type, help text); besides, prometheus_client's default
# registry's python_gc_*, python_info and process_* families, and a <name>_created gauge per
# counter and histogram
EXPECTED = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:num_requests_waiting_by_reason": (
        "gauge", "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
        "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
        "Sum of all reasons equals vllm:num_requests_waiting."),
    "vllm:engine_sleep_state": (
        "gauge", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
    "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
    "vllm:external_prefix_cache_queries": (
        "counter", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
        "number of queried tokens."),
    "vllm:external_prefix_cache_hits": (
        "counter", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens."),
    "vllm:mm_cache_queries": ("counter", "Multi-modal cache queries, in terms of number of queried items."),
    "vllm:mm_cache_hits": ("counter", "Multi-modal cache hits, in terms of number of cached items."),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:prompt_tokens_by_source": ("counter", "Number of prompt tokens by source."),
    "vllm:prompt_tokens_cached": ("counter", "Number of cached prompt tokens (local + external)."),
    "vllm:prompt_tokens_cached_by_source": (
        "counter", "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
        "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. "
        "Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:admission_rejections": ("counter", "Number of admission attempts rejected by a queue limit, by reason."),
    "vllm:request_prompt_tokens": ("histogram", "Number of prefill tokens processed."),
    "vllm:request_generation_tokens": ("histogram", "Number of generation tokens processed."),
    "vllm:iteration_tokens_total": ("histogram", "Histogram of number of tokens per engine_step."),
    "vllm:request_max_num_generation_tokens": (
        "histogram", "Histogram of maximum number of requested generation tokens."),
    "vllm:request_params_n": ("histogram", "Histogram of the n request parameter."),
    "vllm:request_params_max_tokens": ("histogram", "Histogram of the max_tokens request parameter."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "vllm:request_time_per_output_token_seconds": (
        "histogram", "Histogram of time_per_output_token_seconds per request."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
    "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
    "vllm:request_inference_time_seconds": ("histogram", "Histogram of time spent in RUNNING phase for request."),
    "vllm:request_prefill_time_seconds": ("histogram", "Histogram of time spent in PREFILL phase for request."),
    "vllm:request_decode_time_seconds": ("histogram", "Histogram of time spent in DECODE phase for request."),
    "vllm:request_num_preemptions": ("histogram", "Histogram of the number of times a request was preempted."),
    "vllm:request_prefill_kv_computed_tokens": (
        "histogram", "Histogram of new KV tokens computed during prefill (excluding cached tokens)."),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
    # vllm/v1/metrics/perf.py's PerfMetricsProm: registered whatever --enable-mfu-metrics says
    "vllm:estimated_flops_per_gpu": (
        "counter", "Estimated number of floating point operations per GPU (for Model Flops Utilization "
        "calculations)."),
    "vllm:estimated_read_bytes_per_gpu": (
        "counter", "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations)."),
    "vllm:estimated_write_bytes_per_gpu": (
        "counter", "Estimated number of bytes written to memory per GPU (for Model Flops Utilization "
        "calculations)."),
    # vLLM 0.34's WebSocketMetricsMiddleware (the realtime route's): no labels at all
    "vllm:websocket_connections_active": ("gauge", "Number of currently active WebSocket connections."),
    "vllm:websocket_connections": ("counter", "Total number of WebSocket connections."),
    "vllm:websocket_connection_duration_seconds": ("histogram", "Duration of WebSocket connections in seconds."),
}
WEBSOCKET = {"vllm:websocket_connections_active", "vllm:websocket_connections",
             "vllm:websocket_connection_duration_seconds"}
DEFAULT_REGISTRY = {"python_gc_objects_collected", "python_gc_objects_uncollectable", "python_gc_collections",
                    "python_info", "process_virtual_memory_bytes", "process_resident_memory_bytes",
                    "process_start_time_seconds", "process_cpu_seconds", "process_open_fds", "process_max_fds"}
SIMULATOR_OWN = {"vllm_sim:engine_step_wait_seconds", "vllm_sim:token_emission_lag_seconds"}
# prometheus-fastapi-instrumentator's families (test_http_metrics.py): before any request only the
# label-less highr histogram has a series (and its _created); the others are HELP and TYPE alone
HTTP = {"http_requests": "counter", "http_request_size_bytes": "summary",
        "http_response_size_bytes": "summary", "http_request_duration_highr_seconds": "histogram",
        "http_request_duration_seconds": "histogram"}

FRONTEND = {"vllm:admission_rejections"}      # vLLM 0.34: labels model_name and reason only


def own(name: str) -> str:
    """The family a ``<name>_created`` gauge family belongs to (the text parser keeps them apart)."""
    return name[:-len("_created")] if name.endswith("_created") else name


def test_names_types_labels_and_buckets_at_start(app_client):
    fams = families(app_client("--max-model-len", "1024"))
    for name, (kind, doc) in EXPECTED.items():
        assert name in fams and (fams[name].type, fams[name].documentation) == (kind, doc), name
    # every counter and histogram series has its <name>_created gauge (vLLM's one API server uses
    # prometheus_client's default registry), the other families none; no LoRA family without LoRA
    created = {f.name[:-len("_created")] for f in fams.values() if f.name.endswith("_created")}
    assert created == {n for n, (k, _) in EXPECTED.items() if k != "gauge"} | SIMULATOR_OWN | \
        {"http_request_duration_highr_seconds"}
    assert {n: fams[n].type for n in HTTP} == HTTP
    assert set(fams) == set(EXPECTED) | DEFAULT_REGISTRY | SIMULATOR_OWN | set(HTTP) | \
        {n + "_created" for n in created}
    for fam in fams.values():
        if own(fam.name) in FRONTEND:                 # vLLM's frontend counts: no engine label
            assert {s.labels["reason"] for s in fam.samples} == {"max_num_queued_reqs", "max_num_queued_tokens"}
            continue
        if own(fam.name) in WEBSOCKET:                # the WebSocket middleware's: no label but le
            assert all(set(s.labels) <= {"le"} for s in fam.samples), fam.name
            continue
        if fam.name.endswith("_created"):
            assert {s.name for s in fam.samples} == {fam.name} and all(s.value > 1.7e9 for s in fam.samples)
        if fam.name.startswith("vllm:"):
            for s in fam.samples:
                assert s.labels.get("engine") == "0", s
                if fam.name not in ("vllm:lora_requests_info", "vllm:cache_config_info"):
                    assert s.labels["model_name"] == "test-model", s
    # finish reasons are vLLM's, each created at 0
    reasons = {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0}
    assert sample(fams, "vllm:num_preemptions_total") == 0
    assert {s.labels["source"] for s in fams["vllm:prompt_tokens_by_source"].samples} == \
        {"local_compute", "local_cache_hit", "external_kv_transfer"}
    assert {s.labels["reason"]: s.value for s in fams["vllm:num_requests_waiting_by_reason"].samples} == \
        {"capacity": 0, "deferred": 0}
    assert {s.labels["sleep_state"]: s.value for s in fams["vllm:engine_sleep_state"].samples} == \
        {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
    inf = float("inf")
    assert bounds(fams, "vllm:iteration_tokens_total") == \
        [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, inf]
    assert bounds(fams, "vllm:request_params_n") == [1, 2, 5, 10, 20, inf]
    assert bounds(fams, "vllm:request_prefill_kv_computed_tokens") == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, inf]
    assert bounds(fams, "vllm:time_to_first_token_seconds") == [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0, inf]
    itl = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0, inf]
    latency = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0, inf]
    tokens = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, inf]
    for name, want in (("vllm:inter_token_latency_seconds", itl), ("vllm:request_time_per_output_token_seconds", itl),
                       ("vllm:e2e_request_latency_seconds", latency), ("vllm:request_queue_time_seconds", latency),
                       ("vllm:request_inference_time_seconds", latency), ("vllm:request_prefill_time_seconds", latency),
                       ("vllm:request_decode_time_seconds", latency), ("vllm:request_prompt_tokens", tokens),
                       ("vllm:request_generation_tokens", tokens), ("vllm:request_max_num_generation_tokens", tokens),
                       ("vllm:request_params_max_tokens", tokens),
                       # vLLM 0.34's REQUEST_NUM_PREEMPTIONS_BUCKETS (vllm/v1/metrics/buckets.py)
                       ("vllm:request_num_preemptions", [1, 2, 3, 4, 5, 10, 20, inf])):
        assert bounds(fams, name) == want, name
    assert {s.labels["source"]: s.value for s in fams["vllm:prompt_tokens_cached_by_source"].samples} == \
        {"device": 0, "host": 0, "p2p": 0, "disk": 0, "external_unspecified": 0}
    assert sample(fams, "vllm:cache_config_info", block_size="16", num_gpu_blocks="1024",
                  kv_cache_size_tokens="16384", kv_cache_max_concurrency="16.0") == 1


def test_request_values(app_client):
    c = app_client("--max-model-len", "1024", "--seed", "7")
    before = families(c)
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5, "ignore_eos": True, "n": 2})
    assert r.status_code == 200
    p1 = r.json()["usage"]["prompt_tokens"]
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG})      # no max_tokens
    assert r.status_code == 200
    p2 = r.json()["usage"]["prompt_tokens"]
    g2 = r.json()["usage"]["completion_tokens"]
    after = families(c)

    def d(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert d("vllm:request_params_n_count") == 2 and d("vllm:request_params_n_sum") == 3
    # max_tokens is recorded for every request: the room left when the request gives none (vLLM)
    assert d("vllm:request_params_max_tokens_count") == 3
    assert d("vllm:request_params_max_tokens_sum") == 5 + 5 + (1024 - p2)
    prompts = 2 * p1 + p2
    assert d("vllm:prompt_tokens_total") == prompts
    assert d("vllm:prompt_tokens_by_source_total", source="local_compute") == prompts
    assert d("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 0
    assert d("vllm:prompt_tokens_cached_total") == 0
    assert d("vllm:request_prefill_kv_computed_tokens_sum") == prompts
    assert d("vllm:request_prefill_kv_computed_tokens_count") == 3
    # one prefill step per sequence (its prompt and its first token, as vLLM counts it), then one
    # 1-token step per further output token
    assert d("vllm:iteration_tokens_total_count") == 3 + 4 + 4 + max(g2 - 1, 0)
    assert d("vllm:iteration_tokens_total_sum") == prompts + 10 + g2
    assert d("vllm:request_success_total", finished_reason="length") == 2
    assert d("vllm:generation_tokens_total") == 10 + g2


def test_params_max_tokens_and_max_generation_tokens_are_vllms(app_client):
    """``request_params_max_tokens`` observes SamplingParams.max_tokens, which vLLM's
    get_max_tokens (entrypoints/serve/utils/api_utils.py) caps to the room the context leaves;
    ``request_max_num_generation_tokens`` and ``request_params_n`` are observed once per prompt
    when its last choice finishes, the former with the most tokens a choice generated
    (ParentRequest.observe_finished_request, vllm/v1/engine/parallel_sampling.py)."""
    c = app_client("--max-model-len", "1024", "--seed", "7")
    before = families(c)
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(100, 110)), "max_tokens": 1020,
                                        "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1014
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(100, 110)), "max_tokens": 6,
                                        "n": 3, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 18
    after = families(c)

    def d(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert d("vllm:request_params_max_tokens_count") == 4
    assert d("vllm:request_params_max_tokens_sum") == (1024 - 10) + 3 * 6
    assert d("vllm:request_params_n_count") == 2 and d("vllm:request_params_n_sum") == 4
    assert d("vllm:request_max_num_generation_tokens_count") == 2
    assert d("vllm:request_max_num_generation_tokens_sum") == 1014 + 6
    assert d("vllm:request_generation_tokens_count") == 4
    assert d("vllm:request_generation_tokens_sum") == 1014 + 18


def test_remote_prefill_tokens_are_not_computed_locally(app_client):
    """A P/D decode leg (``do_remote_prefill``): the prompt's KV came over the network, so
    neither ``iteration_tokens_total`` nor the computed prompt tokens count it (vllm #43346);
    it is ``external_kv_transfer`` and cached."""
    c = app_client()
    before = families(c)
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
          "remote_host": "h", "remote_port": 1, "tp_size": 1}
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(100, 200)), "max_tokens": 5,
                                        "ignore_eos": True, "kv_transfer_params": kv})
    assert r.status_code == 200
    after = families(c)

    def d(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert d("vllm:iteration_tokens_total_sum") == 5 and d("vllm:iteration_tokens_total_count") == 5
    assert d("vllm:prompt_tokens_by_source_total", source="local_compute") == 0
    assert d("vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 100
    assert d("vllm:prompt_tokens_cached_total") == 100
    assert d("vllm:request_prefill_kv_computed_tokens_sum") == 0
    assert d("vllm:prompt_tokens_total") == 100          # vLLM's total keeps every prompt token


def test_tool_call_answer_counts_as_stop(app_client):
    c = app_client()
    before = families(c)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "tools": tools, "tool_choice": "required"})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "tool_calls"
    after = families(c)
    assert sample(after, "vllm:request_success_total", finished_reason="stop") - \
        sample(before, "vllm:request_success_total", finished_reason="stop") == 1
    assert not [s for s in after["vllm:request_success"].samples if s.labels["finished_reason"] == "tool_calls"]


def test_engine_label_is_the_data_parallel_rank(app_client):
    fams = families(app_client("--data-parallel-size", "2", "--data-parallel-rank", "1"))
    assert {"vllm:num_requests_running", "vllm:time_to_first_token_seconds", "vllm:request_success"} <= set(fams)
    for fam in fams.values():
        if fam.name.startswith("vllm:") and own(fam.name) not in FRONTEND | WEBSOCKET:
            assert {s.labels["engine"] for s in fam.samples} == {"1"}, fam.name


def test_state_is_read_at_scrape_time(app_client):
    c = app_client("--max-loras", "1", "--max-num-seqs", "4",
                   "--lora-modules", '{"name":"a","path":"/a"}', '{"name":"b","path":"/b"}')
    sim = c.sim
    sim.running = 3
    sim.loras.acquire("a")
    sim.waiting.extend([SimpleNamespace(lora="b"), SimpleNamespace(lora=None)])
    sim.recorded_sleep = (1, 1)        # what /sleep?level=1 records (vLLM's record_sleep_state)
    try:
        fams = families(c)
        assert sample(fams, "vllm:num_requests_running") == 3
        assert sample(fams, "vllm:num_requests_waiting") == 2
        # b cannot load while a is busy in the only slot: deferred by the LoRA budget
        assert sample(fams, "vllm:num_requests_waiting_by_reason", reason="deferred") == 1
        assert sample(fams, "vllm:num_requests_waiting_by_reason", reason="capacity") == 1
        assert sample(fams, "vllm:engine_sleep_state", sleep_state="awake") == 0
        assert sample(fams, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1
        lora = {(s.labels["running_lora_adapters"], s.labels["waiting_lora_adapters"]): s.value
                for s in fams["vllm:lora_requests_info"].samples}
        assert max(lora, key=lora.get) == ("a", "b")
        assert {s.labels["max_lora"] for s in fams["vllm:lora_requests_info"].samples} == {"1"}
    finally:
        sim.running = 0
        sim.loras.release("a")
        sim.waiting.clear()
        sim.recorded_sleep = (0, 0)


def test_lora_info_keeps_few_series_whatever_the_history(app_client):
    c = app_client("--max-loras", "2", "--max-cpu-loras", "4",
                   "--lora-modules", *[f'{{"name":"l{i}","path":"/l{i}"}}' for i in range(50)])
    sim = c.sim
    for i in range(20):            # 20 different adapter states (5x the cap), one scrape each
        sim.loras.loaded = {f"l{i}": 1}
        fams = families(c)
        series = fams["vllm:lora_requests_info"].samples
        assert len(series) <= 4
    sim.loras.loaded = {}
    fams = families(c)
    series = {s.labels["running_lora_adapters"]: s.value for s in fams["vllm:lora_requests_info"].samples}
    assert len(series) <= 4 and max(series, key=series.get) == ""
    assert "l18" in series and "l0" not in series


def test_fake_metrics_carry_the_engine_label(app_client):
    c = app_client("--fake-metrics", '{"running-requests": 3, "request-success-total": {"stop": 2}}')
    fams = families(c)
    assert sample(fams, "vllm:num_requests_running") == 3
    assert sample(fams, "vllm:request_success_total", finished_reason="stop") == 2
    assert sample(fams, "vllm:cache_config_info", block_size="16", num_gpu_blocks="1024") == 1


def test_fast_render_is_the_same_text_as_generate_latest(app_client):
    from prometheus_client import generate_latest
    c = app_client("--max-model-len", "1024")
    assert c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 3}).status_code == 200
    m = c.sim.metrics
    m.itl.observe_n(0.02, 5000)            # counts past the formatting cache
    m.rendered("completion", 0.003)        # a second render-duration series

    def lines(text: bytes) -> list:        # the process' own figures move between two scrapes (a collection too)
        return sorted(line for line in text.decode().splitlines() if not line.startswith(("process_", "python_gc_")))
    assert lines(m.render()) == lines(generate_latest(m.registry))


# ---- case C35: metric families inference-perf scrapes (the whole list: above) ---------------------
HI = [{"role": "user", "content": "hi"}]


def test_c35_benchmark_metric_families(app_client):
    c = app_client()
    assert c.post("/v1/chat/completions", json={"model": "test-model", "messages": HI,
                                                "max_tokens": 5}).status_code == 200
    samples = scrape(c)
    assert metric_values(samples, "vllm:num_preemptions_total", model_name="test-model") == [0.0]
    for hist in ("vllm:request_params_n", "vllm:iteration_tokens_total"):
        counts = metric_values(samples, hist + "_count", model_name="test-model")
        assert counts and counts[0] >= 1, hist
