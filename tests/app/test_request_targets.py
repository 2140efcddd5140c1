"""Request targets are matched as sent, as vLLM's Starlette router matches them: a doubled slash
is a 404 JSON (Werkzeug merged slashes: ``//v1/models`` was served and ``/v1//models`` a 308
redirect to an HTML page, so a client that joins its base URL with an extra slash worked here
and failed against vLLM).  Over a real server (gunicorn's target parsing):
tests/server/test_wire_hostile.py."""
from __future__ import annotations

import pytest

BODY = {"model": "test-model", "prompt": "hi", "max_tokens": 2}


@pytest.mark.parametrize("method,path", [
    ("GET", "//v1/models"), ("GET", "///v1/models"), ("GET", "/v1//models"), ("GET", "//health"),
    ("GET", "/health//ready"), ("POST", "//v1/completions"), ("POST", "/v1//completions"),
    ("POST", "//v1/chat/completions"),
])
def test_a_doubled_slash_is_not_found(api, method, path):
    # PATH_INFO set as gunicorn sets it for such a target (an http client would normalise it)
    r = api.app.test_client().open("/x", method=method, json=BODY if method == "POST" else None,
                                   environ_overrides={"PATH_INFO": path})
    assert r.status_code == 404, (path, r.status_code, r.data[:200])
    assert r.get_json() == {"detail": "Not Found"}


def test_the_single_slash_routes_still_match(api):
    client = api.app.test_client()
    assert client.get("/v1/models").status_code == 200
    assert client.get("/health/ready").status_code == 200
    assert client.post("/v1/completions", json=BODY).status_code == 200
