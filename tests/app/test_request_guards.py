"""Rules every route shares (issue 23 items 5 and 10): forwarder headers, JSON-only state
changes, OPTIONS as vLLM answers it, the ``logprobs: -1`` message.

In-process, except the forwarder headers, which gunicorn itself maps (a real server).
"""
from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
# vLLM 0.34's validate_json_request (serve/utils/api_utils.py:310) raises a RequestValidationError
# whose one error is a str: the validation handler counts it, and there is no loc (param null)
NOT_JSON = {"message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            "type": "Bad Request", "param": None, "code": 400}


@pytest.mark.parametrize("path", ["/sleep", "/wake_up", "/admin/config", "/fake_metrics", "/v1/load_lora_adapter",
                                  "/v1/unload_lora_adapter", "/v1/embeddings", "/detokenize", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                   None])
def test_a_post_that_is_not_json_changes_nothing(app_client, path, ctype):
    c = app_client("--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})
    headers = {"content-type": ctype} if ctype else {}
    r = c.post(path, content=b'{"failure-injection-rate": 100}', headers=headers)
    assert r.status_code == 400, (path, ctype, r.text)
    if path.startswith("/v1/messages"):
        assert r.json()["error"] == {"type": "invalid_request_error", "message": NOT_JSON["message"]}
    else:
        assert r.json()["error"] == NOT_JSON
    assert c.sim.sleeping is False
    assert c.sim.config.failure_injection_rate == 0


def test_a_bodyless_post_still_works(app_client):
    c = app_client("--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})
    assert c.post("/sleep?level=1").status_code == 200 and c.sim.sleeping is True
    assert c.post("/wake_up").status_code == 200 and c.sim.sleeping is False
    assert c.post("/ping", content=b"x", headers={"content-type": "text/plain"}).status_code == 200


@pytest.mark.parametrize("flags", [(), ("--api-key", "k")])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/health", "/no/such/route", "/admin/config"])
def test_a_cors_preflight_is_answered_for_any_path(app_client, flags, path):
    """vLLM's CORSMiddleware (origins, methods and headers ``*``) answers every preflight."""
    r = app_client(*flags).options(path, headers={"Origin": "https://example.com",
                                                  "Access-Control-Request-Method": "POST",
                                                  "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 200 and r.text == "OK"
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-methods"] == "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    assert r.headers["access-control-allow-headers"] == "authorization, content-type"
    assert r.headers["access-control-max-age"] == "600"


@pytest.mark.parametrize("flags", [(), ("--api-key", "k")])
def test_a_plain_options_gets_the_routers_answer(app_client, flags):
    """As in vLLM (its auth lets OPTIONS through, Starlette's router answers it)."""
    c = app_client(*flags)
    r = c.options("/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert c.options("/no/such/route").status_code == 404


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "a", "logprobs": -1}, "logprobs"),
    # chat's top_logprobs is SamplingParams.logprobs, the parameter vLLM's cap check names
    ("/v1/chat/completions", {"messages": USER, "logprobs": True, "top_logprobs": -1}, "logprobs"),
])
def test_logprobs_of_minus_one_names_the_whole_vocabulary(api, path, body, param):
    r = api.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param
    assert "4294967296" not in err["message"]
    assert "of -1 (the whole vocabulary), which is greater than max allowed: 20" in err["message"]


@pytest.mark.parametrize("ctype,status", [
    ("application/json", 200), ("Application/JSON; charset=UTF-8", 200), ("application/json;charset=utf-8", 200),
    ("application/json ; charset=utf-8", 400),        # vLLM strips nothing before the ";"
    ("application/json\t;charset=utf-8", 400),
])
@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
def test_the_media_type_is_read_as_vllm_reads_it(api, ctype, status, path):
    """vLLM's ``validate_json_request``: the Content-Type lower-cased, the text before ``;``
    compared as it is; a space before the ``;`` was accepted here, a 400 in vLLM."""
    r = api.post(path, content=b'{"model": "test-model", "prompt": "hi", "max_tokens": 1}',
                 headers={"content-type": ctype})
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"] == NOT_JSON


VLLM_GET = ["/health", "/health/", "/ping", "/version", "/load", "/is_sleeping", "/v1/models", "/v1/models/test-model",
            "/server_info", "/kv_event_sources", "/tokenizer_info", "/v1/responses/resp_1", "/checkpoint/status"]


@pytest.mark.parametrize("path", VLLM_GET)
def test_head_on_a_vllm_get_route_is_405(app_client, path):
    """vLLM's GET routes are FastAPI ``APIRoute``s, which take no HEAD (Starlette's plain
    ``Route`` adds it, ``APIRoute`` does not): Starlette's 405, answered by FastAPI's default
    handler (``{"detail": "Method Not Allowed"}``, 31 bytes, no body on the wire) with ``allow:
    GET`` (``/ping``'s GET route is registered before its POST one).  Flask added HEAD to every
    GET rule, so these answered 200.  GET is unchanged."""
    c = app_client("--enable-sleep-mode", "--enable-tokenizer-info-endpoint", env={"VLLM_SERVER_DEV_MODE": "1"})
    r = c.head(path)
    assert r.status_code == 405, (path, r.status_code)
    assert r.headers["allow"] == "GET"
    assert r.headers["content-type"] == "application/json"
    assert r.headers["content-length"] == str(len(b'{"detail":"Method Not Allowed"}'))
    assert r.content == b""
    assert c.get(path).status_code != 405      # served (a 404 for no such response, 503 before a checkpoint)


@pytest.mark.parametrize("path", ["/metrics", "/health/ready", "/admin/config"])
def test_head_elsewhere_is_unchanged(api, path):
    """``/metrics`` is prometheus' ASGI app in vLLM (any method is a 200); ``/health/ready``
    and ``/admin/config`` are the simulator's own routes, which keep Flask's HEAD."""
    r = api.head(path)
    assert r.status_code == 200 and r.content == b""


def test_head_on_a_post_route_or_no_route_is_fastapis_answer(api):
    r = api.head("/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.headers["content-length"] == str(len(b'{"detail":"Method Not Allowed"}'))
    r = api.head("/no/such/route")
    assert r.status_code == 404 and r.headers["content-length"] == str(len(b'{"detail":"Not Found"}'))
