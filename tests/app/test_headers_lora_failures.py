"""Request-id and pod headers (C16, C17), LoRA adapters (C10, C24), failure injection (C18),
admin config: all in-process (concurrent requests are greenlets on the engine's hub)."""
from __future__ import annotations

import time

import gevent
import pytest

from support import metric, scrape, sse_events

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def chat(base, model="test-model", headers=None, **kw):
    return base.post(CHAT, json={"model": model, "messages": MSG, "max_tokens": 3, **kw},
                      headers=headers or {}, timeout=30)


# ---- C16 -------------------------------------------------------------------------------------
def test_c16_request_id_propagation(app_client):
    base = app_client("--enable-request-id-headers")
    r = chat(base, headers={"X-Request-Id": "req-abc-123"})
    assert r.headers["X-Request-Id"] == "req-abc-123" and r.json()["id"] == "chatcmpl-req-abc-123"
    r = chat(base, headers={"X-Request-Id": "req-abc-123"}, stream=True)
    assert r.headers["X-Request-Id"] == "req-abc-123"
    assert {c["id"] for c in sse_events(r.text)[:-1]} == {"chatcmpl-req-abc-123"}
    r = base.post("/v1/completions", json={"model": "test-model", "prompt": "x", "max_tokens": 2},
                   headers={"X-Request-Id": "req-abc-123"})
    assert r.json()["id"] == "cmpl-req-abc-123" and r.headers["X-Request-Id"] == "req-abc-123"
    a, b = chat(base), chat(base)
    for r in (a, b):
        assert r.json()["id"] == "chatcmpl-" + r.headers["X-Request-Id"]
    assert a.headers["X-Request-Id"] != b.headers["X-Request-Id"]


def test_c16_no_header_without_flag(api):
    r = chat(api, headers={"X-Request-Id": "req-abc-123"})
    assert "X-Request-Id" not in r.headers


# ---- C17 -------------------------------------------------------------------------------------
def test_c17_pod_headers(app_client):
    port = "18123"           # the port the server would listen on
    base = app_client("--port", port, env={"POD_NAME": "sim-pod-0", "POD_NAMESPACE": "ns1"})
    for stream in (False, True):
        r = chat(base, stream=stream)
        assert r.headers["x-inference-pod"] == "sim-pod-0"
        assert r.headers["x-inference-port"] == port
        assert r.headers["x-inference-namespace"] == "ns1"


def test_c17_no_pod_headers_without_env(api):
    r = chat(api)
    assert not any(h.startswith("x-inference-") for h in r.headers)


# ---- C10 -------------------------------------------------------------------------------------
def test_c10_lora_lifecycle(app_client):
    base = app_client("--model", "base-m", "--lora-modules", '{"name":"lora-a","path":"/adapters/lora-a"}',
                      "--max-loras", "2", model=None)
    models = base.get("/v1/models").json()["data"]
    a = next(m for m in models if m["id"] == "lora-a")
    assert (a["root"], a["parent"], a["object"]) == ("/adapters/lora-a", "base-m", "model")
    r = base.post("/v1/load_lora_adapter", json={"lora_name": "lora-b", "lora_path": "/adapters/lora-b"})
    assert r.status_code == 200
    b = next(m for m in base.get("/v1/models").json()["data"] if m["id"] == "lora-b")
    assert b["root"] == "/adapters/lora-b" and b["parent"] == "base-m"
    r = chat(base, model="lora-b")
    assert r.status_code == 200 and r.json()["model"] == "lora-b"
    assert base.post("/v1/unload_lora_adapter", json={"lora_name": "lora-b"}).status_code == 200
    assert "lora-b" not in [m["id"] for m in base.get("/v1/models").json()["data"]]
    r = chat(base, model="lora-b")
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"


def test_lora_admin_errors(app_client):
    base = app_client("--model", "base-m", "--lora-modules", '{"name":"lora-a","path":"/adapters/lora-a"}',
                      "--max-loras", "2", model=None)
    r = base.post("/v1/load_lora_adapter", json={"lora_name": "lora-a", "lora_path": "/x"})
    assert r.status_code == 400
    r = base.post("/v1/load_lora_adapter", json={"lora_path": "/x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.lora_name"       # pydantic's missing
    r = base.post("/v1/unload_lora_adapter", json={"lora_name": "never-loaded"})
    assert r.status_code == 404


# ---- C24 -------------------------------------------------------------------------------------
def lora_series(base):
    return {dict(k[1])["running_lora_adapters"] + "|" + dict(k[1])["waiting_lora_adapters"]: v
            for k, v in scrape(base).items() if k[0] == "vllm:lora_requests_info"}


def test_c24_lora_requests_info(app_client):
    base = app_client("--lora-modules", '{"name":"lora-a","path":"/a"}', "--max-loras", "2",
                      "--time-to-first-token", "800")
    t = gevent.spawn(chat, base, "lora-a")
    gevent.sleep(0.3)                # mid-request: 0.5 s of margin either side
    during = scrape(base)
    assert metric(during, "vllm:lora_requests_info", max_lora="2", running_lora_adapters="lora-a",
                  waiting_lora_adapters="") > 1e9
    # the case's series exactly: vLLM's three labels, no engine, no model_name
    assert frozenset({("max_lora", "2"), ("running_lora_adapters", "lora-a"), ("waiting_lora_adapters", "")}) in {
        labels for name, labels in during if name == "vllm:lora_requests_info"}
    t.join()
    series = lora_series(base)
    newest = max(series, key=series.get)
    assert newest == "|"


def test_max_loras_limits_concurrent_adapters(app_client):
    base = app_client("--lora-modules", '{"name":"l1","path":"/1"}', '{"name":"l2","path":"/2"}',
                      "--max-loras", "1", "--max-num-seqs", "4", "--time-to-first-token", "500ms")
    threads = []
    for m in ("l1", "l2"):
        threads.append(gevent.spawn(chat, base, m))
        gevent.sleep(0.05)
    gevent.sleep(0.1)                # scraped at ~0.2 s, l1 runs until 0.5 s
    m = scrape(base)
    assert metric(m, "vllm:num_requests_running", model_name="test-model") == 1
    assert metric(m, "vllm:num_requests_waiting", model_name="test-model") == 1
    for t in threads:
        t.join()


# ---- C18 -------------------------------------------------------------------------------------
def test_c18_failure_injection_rate_limit(app_client):
    base = app_client("--failure-injection-rate", "100", "--failure-types", "rate_limit")
    for _ in range(3):
        r = chat(base)
        err = r.json()["error"]
        assert r.status_code == 429 and err["type"] == "RateLimitError" and err["code"] == 429
        assert "test-model" in err["message"]
    r = chat(base, stream=True)
    assert r.status_code == 429 and r.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("value,status,etype", [
    ("503", 503, "InternalServerError"), ("401", 401, "AuthenticationError"), ("abc", 400, "BadRequestError"),
    ("429", 429, "RateLimitError"), ("422", 422, "UnprocessableEntityError"),
])
def test_c18_x_return_error(api, value, status, etype):
    for stream in (False, True):
        r = chat(api, headers={"X-Return-Error": value}, stream=stream)
        assert r.status_code == status and r.headers["content-type"].startswith("application/json")
        err = r.json()["error"]
        assert err["code"] == status and err["type"] == etype


def test_failure_types_each(app_client):
    base = app_client("--failure-injection-rate", "100", "--failure-types", "invalid_api_key", "server_error")
    assert {chat(base).status_code for _ in range(12)} <= {401, 503}


def test_admin_config_runtime_changes(app_client):
    base = app_client("--max-num-seqs", "9")
    assert chat(base).status_code == 200
    r = base.post("/admin/config", json={"failure-injection-rate": 100, "failure-types": ["rate_limit"]})
    assert r.status_code == 200 and r.json()["failure-injection-rate"] == 100
    assert chat(base).status_code == 429
    assert base.post("/admin/config", json={"failure-injection-rate": 0}).status_code == 200
    assert chat(base).status_code == 200
    assert base.post("/admin/config", json={"failure-types": ["bogus"]}).status_code == 400
    assert base.post("/admin/config", json={"port": 9000}).status_code == 400
    r = base.post("/admin/config", json={"time-to-first-token": ""})      # was a 500 (IndexError)
    assert r.status_code == 400 and r.json()["error"]["param"] == "time-to-first-token"
    r = base.post("/admin/config", json={"time-to-first-token": "250ms", "time-factor-under-load": 1.5})
    assert r.status_code == 200
    cfg = base.get("/admin/config").json()
    assert cfg["time-to-first-token"] == "250ms" and cfg["time-factor-under-load"] == 1.5
    bad = base.post("/admin/config", json={"time-to-first-token": "1ms", "time-to-first-token-std-dev": "0.5ms"})
    assert bad.status_code == 400
    assert base.get("/admin/config").json()["time-to-first-token"] == "250ms"
    t0 = time.monotonic()
    chat(base)
    assert time.monotonic() - t0 >= 0.24
    base.post("/admin/config", json={"time-to-first-token": "0s", "time-factor-under-load": 1.0})
