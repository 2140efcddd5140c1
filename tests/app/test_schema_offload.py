"""Tool schemas are checked against their metaschema in a worker thread (generation/tool_validation.py):
a large schema no longer holds the gevent hub, and a malformed ``$schema`` is a 400, not a 500."""
from __future__ import annotations

import time

import gevent
import pytest

MSG = [{"role": "user", "content": "hi"}]


def tool(parameters: dict) -> list:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@pytest.mark.parametrize("named", [5, ["x"], {"a": 1}])
def test_a_schema_key_that_is_not_a_string_is_a_400_naming_the_field(api, named):
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": MSG, "max_tokens": 2,
                                               "tools": tool({"$schema": named, "type": "object"})})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools[0].function.parameters" and "$schema" in err["message"]


def test_a_large_schema_is_checked_without_holding_the_hub(api):
    """About 150 KB of properties: seconds of jsonschema work.  A greenlet ticking every 10 ms
    keeps ticking meanwhile (before, it stood still for the whole check)."""
    params = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 10}
                                               for i in range(2000)}}
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)
    g = gevent.spawn(ticker)
    gevent.sleep(0.05)
    t0 = time.monotonic()
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": MSG, "max_tokens": 2,
                                               "tools": tool(params)})
    took = time.monotonic() - t0
    g.kill()
    assert r.status_code == 200, r.text
    during = [t for t in ticks if t0 <= t <= t0 + took]
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert took > 0.3 and len(during) >= 5
    assert max(gaps) < took / 2, (max(gaps), took)


@pytest.mark.parametrize("extra", [{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
                                   {"chat_template_kwargs": {"chat_template": "{{ 1 }}"}}])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize", "/v1/chat/completions/render"])
def test_a_request_chat_template_needs_trust_request_chat_template(app_client, path, extra):
    """vLLM refuses a template sent with a request (Jinja runs arbitrary loops on the server)
    unless --trust-request-chat-template."""
    body = {"model": "test-model", "messages": MSG, "max_tokens": 2, **extra}
    r = app_client().post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "chat_template" and "--trust-request-chat-template" in r.json()["error"]["message"]
    assert app_client("--trust-request-chat-template").post(path, json=body).status_code == 200
