"""Starlette's ``redirect_slashes`` (vLLM 0.34's FastAPI router keeps it on): a path that no
route has, but whose form without its trailing slash one has (for any method), is a 307 to it,
with the query kept and no body; the simulator answered 404."""
from __future__ import annotations

import pytest

CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.mark.parametrize("method,path,to", [
    ("GET", "/v1/models/", "/v1/models"), ("POST", "/v1/chat/completions/?x=1", "/v1/chat/completions?x=1"),
    ("POST", "/tokenize//", "/tokenize"), ("GET", "/v1/chat/completions/", "/v1/chat/completions"),
    ("POST", "/v1/messages/", "/v1/messages")])
def test_a_trailing_slash_redirects_to_the_route(api, method, path, to):
    r = api.request(method, path, json=CHAT if method == "POST" else None, follow_redirects=False)
    assert (r.status_code, r.headers["location"], r.content) == (307, f"http://sim{to}", b"")
    assert "content-type" not in r.headers


def test_a_client_that_follows_it_is_served(api):
    r = api.post("/v1/chat/completions/", json=CHAT, follow_redirects=True)
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"


@pytest.mark.parametrize("path", ["/nope/", "/v1/nope/", "/"])
def test_no_route_without_the_slash_stays_a_404(api, path):
    r = api.get(path, follow_redirects=False)
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
