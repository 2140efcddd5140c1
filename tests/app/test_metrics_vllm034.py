"""``/metrics`` families beyond the engine's (vLLM 0.34's ``vllm/renderers/metrics.py``,
``vllm/parser/metrics.py``, ``vllm/entrypoints/serve/dev/sleep/metrics.py``), the families that
follow ``--vllm-version``, and the per-request values vLLM 0.34 records that the engine's
test module does not cover, through the in-process app.  Exact names, help texts, labels,
buckets and values after known requests."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import sse_events

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
RENDER = "vllm:request_render_duration_seconds"
PARSER = "vllm:tool_call_parser_invocations"


def families(client) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def values(fams: dict, family: str, sample: str, *keys: str) -> dict:
    """``{(label values of keys): value}`` of the ``sample`` samples of ``family``."""
    return {tuple(s.labels[k] for k in keys): s.value for s in fams[family].samples if s.name == sample}


def delta(before: dict, after: dict, family: str, sample: str, *keys: str) -> dict:
    """The changed values of ``sample`` between two scrapes (a series new in ``after`` counts from 0)."""
    old = values(before, family, sample, *keys) if family in before else {}
    new = values(after, family, sample, *keys)
    return {k: v - old.get(k, 0) for k, v in new.items() if v != old.get(k, 0)}


# ---- families that follow --vllm-version ----------------------------------------------------------
@pytest.mark.parametrize("version, present, absent", [
    ("0.19.0", {"vllm:prompt_tokens_recomputed"},
     {"vllm:num_requests_waiting_by_reason", "vllm:admission_rejections", "vllm:prompt_tokens_cached_by_source",
      "vllm:request_num_preemptions", "vllm:time_per_output_token_seconds"}),
    ("0.20.0", {"vllm:num_requests_waiting_by_reason"},
     {"vllm:prompt_tokens_recomputed", "vllm:request_num_preemptions", "vllm:admission_rejections"}),
    ("0.31.0", {"vllm:request_num_preemptions"}, {"vllm:admission_rejections", "vllm:prompt_tokens_cached_by_source"}),
    ("0.34.0", {"vllm:admission_rejections", "vllm:prompt_tokens_cached_by_source", "vllm:request_num_preemptions"},
     {"vllm:prompt_tokens_recomputed", "vllm:time_per_output_token_seconds"}),
])
def test_families_follow_the_release(app_client, version, present, absent):
    fams = families(app_client("--vllm-version", version))
    assert present <= set(fams) and not absent & set(fams), sorted(fams)
    if version == "0.19.0":
        assert fams["vllm:prompt_tokens_recomputed"].documentation == \
            "Number of cached tokens recomputed for forward pass."
        assert values(fams, "vllm:prompt_tokens_recomputed", "vllm:prompt_tokens_recomputed_total",
                      "model_name", "engine") == {("test-model", "0"): 0}


@pytest.mark.parametrize("flags, help_text", [
    (("--vllm-version", "0.10.1"), "Histogram of time per output token in seconds."),
    (("--vllm-version", "0.11.0"),
     "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead."),
    (("--vllm-version", "0.13.0", "--show-hidden-metrics-for-version", "0.12"),
     "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead."),
    (("--vllm-version", "0.13.0"), None),
    (("--vllm-version", "0.17.0", "--show-hidden-metrics-for-version", "0.16"), None),
])
def test_time_per_output_token_follows_the_release(app_client, flags, help_text):
    """The ITL's old name: shown up to 0.11, behind --show-hidden-metrics-for-version in 0.12
    and 0.13, gone after (vllm#32661), with the same observations as the ITL."""
    c = app_client(*flags)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True}
    assert c.post(CHAT, json=body).status_code == 200
    fams = families(c)
    name = "vllm:time_per_output_token_seconds"
    if help_text is None:
        assert name not in fams
        return
    assert fams[name].documentation == help_text
    assert values(fams, name, name + "_count", "engine") == {("0",): 3}
    if flags[1] < "0.10.2":
        assert "vllm:inter_token_latency_seconds" not in fams       # vllm#24110 renamed it in 0.10.2
    else:
        assert values(fams, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count",
                      "engine") == {("0",): 3}


def test_fake_itl_keeps_the_old_name_only_for_old_releases(app_client):
    fake = ("--fake-metrics", '{"tpot-buckets-values": [1, 2]}')
    old = families(app_client(*fake, "--vllm-version", "0.11.0"))
    assert values(old, "vllm:time_per_output_token_seconds", "vllm:time_per_output_token_seconds_count",
                  "engine") == {("0",): 3}
    new = families(app_client(*fake))
    assert "vllm:time_per_output_token_seconds" not in new
    assert values(new, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count",
                  "engine") == {("0",): 3}


# ---- per-request values ---------------------------------------------------------------------------
def test_one_token_answer_observes_a_zero_time_per_output_token(app_client):
    """vLLM's mean time per output token is 0 for an answer of one token, and observed."""
    c = app_client()
    before = families(c)
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1
    after = families(c)
    name = "vllm:request_time_per_output_token_seconds"
    assert delta(before, after, name, name + "_count", "engine") == {("0",): 1}
    assert delta(before, after, name, name + "_sum", "engine") == {}
    le = delta(before, after, name, name + "_bucket", "le")
    assert le == {k: 1 for k in values(after, name, name + "_bucket", "le")}    # 0: every bucket


def test_prompt_tokens_cached_by_source_are_the_prefix_cache_hits(app_client):
    c = app_client("--enable-kvcache", "--block-size", "16")
    prompt = list(range(100, 164))
    for _ in range(2):
        assert c.post("/v1/completions", json={"model": "test-model", "prompt": prompt, "max_tokens": 2}).status_code == 200
    fams = families(c)
    hits = values(fams, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total", "engine")[("0",)]
    assert hits == 48                     # the second request's first 3 blocks (the last token is computed)
    assert values(fams, "vllm:prompt_tokens_cached_by_source", "vllm:prompt_tokens_cached_by_source_total",
                  "source") == {("device",): 48, ("host",): 0, ("p2p",): 0, ("disk",): 0, ("external_unspecified",): 0}


def test_lora_requests_info_only_with_lora(app_client):
    assert "vllm:lora_requests_info" not in families(app_client())
    fams = families(app_client("--enable-lora", "--max-loras", "2"))
    fam = fams["vllm:lora_requests_info"]
    assert (fam.type, fam.documentation) == ("gauge", "Running stats on lora requests.")
    assert [(s.labels, s.value > 1.7e9) for s in fam.samples] == [
        ({"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}, True)]
    assert "vllm:lora_requests_info_created" not in fams


# ---- vllm:request_render_duration_seconds ---------------------------------------------------------
RENDER_BOUNDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                 10.0, float("inf")]


def test_render_duration_appears_with_the_first_render(app_client):
    c = app_client("--max-model-len", "1024")
    assert RENDER not in families(c)                       # vLLM registers it at its first observation
    assert c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).status_code == 200
    fams = families(c)
    fam = fams[RENDER]
    assert (fam.type, fam.documentation) == (
        "histogram", "Time spent rendering a request, including chat templating, tokenization, and multimodal "
                     "preprocessing.")
    assert {s.name for s in fam.samples} == {RENDER + "_bucket", RENDER + "_count", RENDER + "_sum"}
    assert all(set(s.labels) - {"le"} == {"model_name", "request_type"} for s in fam.samples)   # no engine
    assert [float(s.labels["le"]) for s in fam.samples if s.name == RENDER + "_bucket"] == RENDER_BOUNDS
    assert values(fams, RENDER, RENDER + "_count", "model_name", "request_type") == {("test-model", "chat"): 1}
    assert 0 < values(fams, RENDER, RENDER + "_sum", "request_type")[("chat",)] < 0.5     # the simulator's own
    (created,) = fams[RENDER + "_created"].samples
    assert created.labels == {"model_name": "test-model", "request_type": "chat"} and created.value > 1.7e9


def test_render_duration_counts_the_renders_vllm_observes(app_client):
    """One observation per request whose render succeeds, by vLLM's ``OnlineRenderer``: chat
    (chat completions with any ``n``, Anthropic messages, count_tokens and the render routes)
    and completion (one per request, whatever its prompts); not the Responses API, the batch
    chat, generate, nor a request refused before (a 400) or by (context length) its render."""
    c = app_client("--max-model-len", "64")
    before = families(c)
    chat = {"model": "test-model", "messages": MSG, "max_tokens": 2}
    for path, body in (
            (CHAT, {**chat, "n": 2}),
            (CHAT, {**chat, "stream": True}),
            ("/v1/messages", {"model": "test-model", "messages": MSG, "max_tokens": 2}),
            ("/v1/messages/count_tokens", {"model": "test-model", "messages": MSG}),
            ("/v1/messages/render", {"model": "test-model", "messages": MSG, "max_tokens": 2}),
            ("/v1/chat/completions/render", {"model": "test-model", "messages": MSG}),
            ("/v1/completions", {"model": "test-model", "prompt": ["a b", "c d", "e"], "max_tokens": 2}),
            ("/v1/completions/render", {"model": "test-model", "prompt": "hello"}),
            ("/v1/responses", {"model": "test-model", "input": "hi", "max_output_tokens": 2}),
            ("/v1/chat/completions/batch", {"model": "test-model", "messages": [MSG, MSG], "max_tokens": 2}),
            ("/inference/v1/generate", {"model": "test-model", "token_ids": [1, 2, 3],
                                        "sampling_params": {"max_tokens": 2}})):
        r = c.post(path, json=body)
        assert r.status_code == 200, (path, r.text)
    assert c.post(CHAT, json={**chat, "max_tokens": -1}).status_code == 400                  # before the render
    assert c.post(CHAT, json={**chat, "messages": [{"role": "user", "content": "word " * 200}]}).status_code == 400
    after = families(c)
    assert delta(before, after, RENDER, RENDER + "_count", "request_type") == {("chat",): 6, ("completion",): 2}


def test_render_duration_in_step_mode_is_the_modelled_frontend(app_client):
    """With ``--latency-calculator step`` the request's timeline models vLLM's frontend: the
    render observed is that model's CPU for the request, ``fe_request + fe_prompt_token x
    prompt``, the part of its TTFT the frontend spends preparing it."""
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "1024",
                   model="meta-llama/Llama-3.1-8B-Instruct")
    r = c.post("/v1/completions", json={"model": "meta-llama/Llama-3.1-8B-Instruct",
                                        "prompt": list(range(100, 200)), "max_tokens": 2})
    assert r.status_code == 200
    fe = c.sim.engine.fe.c
    fams = families(c)
    assert values(fams, RENDER, RENDER + "_sum", "request_type") == {
        ("completion",): pytest.approx(fe.fe_request + 100 * fe.fe_prompt_token)}


# ---- vllm:tool_call_parser_invocations ----------------------------------------------------------
PARSER_KEYS = ("model_name", "mode", "outcome", "request_type")


def parser_client(app_client, *flags):
    return app_client("--tool-call-parser", "hermes", "--enable-auto-tool-choice", *flags)


def test_tool_parser_counter_only_with_a_tool_call_parser(app_client):
    assert not any(n.startswith(PARSER) for n in families(app_client()))
    fams = families(parser_client(app_client))
    fam = fams[PARSER]
    assert (fam.type, fam.documentation) == (
        "counter", "Total number of ToolParser invocations. Non-streaming increments once per choice; streaming "
                   "increments once per delta.")
    # every combination made at 0 at start-up, labels in vLLM's order and no engine label
    assert values(fams, PARSER, PARSER + "_total", *PARSER_KEYS) == {
        ("test-model", m, o, t): 0 for m in ("streaming", "non_streaming") for o in ("tool_call", "no_tool_call")
        for t in ("chat_completions", "responses", "other")}
    assert all(set(s.labels) == set(PARSER_KEYS) for s in fam.samples)
    assert len(fams[PARSER + "_created"].samples) == 12


def test_tool_parser_counts_non_streaming_choices(app_client):
    c = parser_client(app_client, "--tool-call-extra-call-probability", "100")
    before = families(c)
    body = {"model": "test-model", "messages": MSG, "tools": TOOLS, "max_tokens": 50}
    r = c.post(CHAT, json={**body, "n": 2})                                    # tool_choice absent: auto
    assert r.status_code == 200 and [ch["finish_reason"] for ch in r.json()["choices"]] == ["tool_calls"] * 2
    assert c.post(CHAT, json={**body, "tool_choice": "auto"}).status_code == 200
    # required, a named tool and none: vLLM's parser is not called (JSON or plain text)
    assert c.post(CHAT, json={**body, "tool_choice": "required"}).status_code == 200
    assert c.post(CHAT, json={**body, "tool_choice": {"type": "function",
                                                      "function": {"name": "get_weather"}}}).status_code == 200
    assert c.post(CHAT, json={**body, "tool_choice": "none"}).status_code == 200
    assert c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 5}).status_code == 200
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 50,
                                      "tools": [{"type": "function", "name": "get_weather",
                                                 "parameters": TOOLS[0]["function"]["parameters"]}]})
    assert r.status_code == 200
    r = c.post("/v1/messages", json={"model": "test-model", "messages": MSG, "max_tokens": 50, "tools": [
        {"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]})
    assert r.status_code == 200 and r.json()["stop_reason"] == "tool_use"
    after = families(c)
    assert delta(before, after, PARSER, PARSER + "_total", "mode", "outcome", "request_type") == {
        ("non_streaming", "tool_call", "chat_completions"): 4, ("non_streaming", "tool_call", "responses"): 1}


def test_tool_parser_counts_an_answer_without_calls_as_no_tool_call(app_client):
    c = parser_client(app_client, "--tool-call-extra-call-probability", "0")
    before = families(c)
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "tools": TOOLS, "max_tokens": 5})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] != "tool_calls"
    assert delta(before, families(c), PARSER, PARSER + "_total", "mode", "outcome", "request_type") == {
        ("non_streaming", "no_tool_call", "chat_completions"): 1}


def test_tool_parser_without_auto_tool_choice_parses_streams_only(app_client):
    """vLLM's non-streaming ``parse`` extracts tool calls only with ``--enable-auto-tool-choice``;
    its stream's ``parse_delta`` runs the parser for any tool choice but none, required and named."""
    c = app_client("--tool-call-parser", "hermes", "--tool-call-extra-call-probability", "0")
    before = families(c)
    body = {"model": "test-model", "messages": MSG, "tools": TOOLS, "max_tokens": 5, "ignore_eos": True}
    assert c.post(CHAT, json=body).status_code == 200
    r = c.post(CHAT, json={**body, "stream": True})
    assert r.status_code == 200
    assert delta(before, families(c), PARSER, PARSER + "_total", "mode", "outcome", "request_type") == {
        ("streaming", "no_tool_call", "chat_completions"): 5}


def test_tool_parser_counts_each_streamed_output(app_client):
    """Streaming, once per output the stream sends (one per token; with a stream interval, the
    first token alone then groups), each a tool call's delta when the answer calls tools."""
    c = parser_client(app_client, "--tool-call-extra-call-probability", "100")
    before = families(c)
    body = {"model": "test-model", "messages": MSG, "tools": TOOLS, "max_tokens": 200, "stream": True,
            "stream_options": {"include_usage": True}}
    r = c.post(CHAT, json=body)
    assert r.status_code == 200
    events = [e for e in sse_events(r.text) if e != "[DONE]"]
    tokens = events[-1]["usage"]["completion_tokens"]
    assert any(e["choices"] and e["choices"][0]["delta"].get("tool_calls") for e in events)
    r = c.post(CHAT, json={**body, "stream_interval": 4})
    assert r.status_code == 200
    tokens2 = [e for e in sse_events(r.text) if e != "[DONE]"][-1]["usage"]["completion_tokens"]
    outputs2 = 1 + -(-(tokens2 - 1) // 4)
    assert delta(before, families(c), PARSER, PARSER + "_total", "mode", "outcome", "request_type") == {
        ("streaming", "tool_call", "chat_completions"): tokens + outputs2}


def test_tool_parser_streams_count_from_the_end_of_reasoning(app_client):
    """With a reasoning parser, vLLM's stream reaches the tool parser from the output that ends
    the reasoning (its end marker) on."""
    c = parser_client(app_client, "--reasoning-parser", "qwen3", "--tool-call-extra-call-probability", "0")
    before = families(c)
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "tools": TOOLS, "max_tokens": 20,
                           "ignore_eos": True, "stream": True})
    assert r.status_code == 200
    reasoning = sum(1 for e in sse_events(r.text) if e != "[DONE]" and e["choices"]
                    and e["choices"][0]["delta"].get("reasoning"))
    # 20 tokens: "<think>", the reasoning, "</think>", the content; the parser sees "</think>" and after
    assert delta(before, families(c), PARSER, PARSER + "_total", "mode", "outcome", "request_type") == {
        ("streaming", "no_tool_call", "chat_completions"): 20 - 1 - reasoning}


def test_render_duration_and_tool_parser_follow_the_release(app_client):
    c = app_client("--vllm-version", "0.27.0", "--tool-call-parser", "hermes")
    assert c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).status_code == 200
    fams = families(c)
    assert RENDER not in fams and PARSER in fams               # the parser's counter is 0.24's
    assert PARSER not in families(app_client("--vllm-version", "0.23.0", "--tool-call-parser", "hermes"))


# ---- sleep-mode operations (dev mode) -------------------------------------------------------------
def test_sleep_mode_operations_are_timed(app_client):
    c = app_client("--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})
    assert not any(n.startswith("vllm:sleep_mode") for n in families(c))
    assert c.post("/sleep", params={"level": "1"}).status_code == 200
    assert c.post("/wake_up").status_code == 200
    assert c.post("/sleep", params={"level": "0"}).status_code == 200      # a release needs a completed pause
    assert c.post("/release_kv_cache_memory").status_code == 200
    assert c.post("/wake_up").status_code == 200
    fams = families(c)
    name = "vllm:sleep_mode_operation_duration_seconds"
    assert (fams[name].type, fams[name].documentation) == ("histogram", "Duration of one sleep-mode operation.")
    assert values(fams, name, name + "_count", "operation") == {
        ("sleep",): 2, ("wake",): 2, ("release_kv_cache_memory",): 1}
    assert [float(s.labels["le"]) for s in fams[name].samples
            if s.name == name + "_bucket" and s.labels["operation"] == "sleep"] == \
        [0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, float("inf")]
    assert all(set(s.labels) <= {"operation", "le"} for s in fams[name].samples)    # no model_name, no engine
    gauge = "vllm:sleep_mode_operations_in_flight"
    assert (fams[gauge].type, fams[gauge].documentation) == ("gauge", "Sleep-mode operations currently awaited.")
    assert values(fams, gauge, gauge, "operation") == {("sleep",): 0, ("wake",): 0, ("release_kv_cache_memory",): 0}


# ---- --disable-log-stats: vLLM builds no stat loggers ----------------------------------------------
def test_disable_log_stats_leaves_only_the_api_servers_families(app_client):
    """vLLM's AsyncLLM makes no StatLoggerManager without stats: no engine family is registered,
    while the API server's own (render duration, tool-parser invocations) and http_* are; the
    same text from GET and from the mount's other methods."""
    client = parser_client(app_client, "--disable-log-stats")
    r = client.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 3, "tools": TOOLS})
    assert r.status_code == 200, r.text
    fams = families(client)
    vllm = {n for n in fams if n.startswith("vllm") and not n.endswith("_created")}
    # (and the realtime route's WebSocket middleware's, an API server family)
    assert vllm == {RENDER, PARSER, "vllm_sim:token_emission_lag_seconds", "vllm:websocket_connections_active",
                    "vllm:websocket_connections", "vllm:websocket_connection_duration_seconds"}
    assert "http_requests" in fams and any(n.startswith("process_") for n in fams)
    posted = {f.name for f in text_string_to_metric_families(client.post("/metrics").text)}
    assert posted == set(fams)
    # without the flag the engine's families are there
    assert {"vllm:num_requests_running", "vllm:cache_config_info", "vllm:e2e_request_latency_seconds"} <= \
        set(families(parser_client(app_client)))


def test_disable_log_stats_with_per_request_metrics_is_refused():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError, match="requires engine statistics logging"):
        load_config(["--disable-log-stats", "--enable-per-request-metrics"], env={})
