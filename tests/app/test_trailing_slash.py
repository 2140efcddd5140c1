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



@pytest.mark.parametrize("host,location", [
    ("x:99999999999", "http://x:99999999999/v1/chat/completions"),     # a port past 65535
    ("x:abc", "http://x:abc/v1/chat/completions"),                     # a port that is no number
    ("[::1", "http://[::1/v1/chat/completions"),                       # an unclosed IPv6 bracket
    ("a b", "http://a%20b/v1/chat/completions"),                       # what Werkzeug's host check drops
    ("\xe9", "http://%C3%A9/v1/chat/completions")])                   # obs-text, read as latin-1
def test_the_location_is_built_from_the_host_header_as_starlette_does(api, host, location):
    """Starlette's ``URL(scope=...)`` takes the ``Host`` header as it came (latin-1) and
    ``RedirectResponse`` quotes it; the simulator built it from Werkzeug's ``request.host`` and
    let Werkzeug's response re-parse it: a port past 65535 was a 500 with a traceback
    (``iri_to_uri``: "Port out of range"), a host Werkzeug's check refuses became
    ``http:///v1/...``.  (The WSGI app called as is: httpx and Werkzeug's test client parse the
    URL themselves, and refuse these hosts before the app answers.)"""
    from werkzeug.test import EnvironBuilder
    environ = EnvironBuilder("/v1/chat/completions/", method="POST", json=CHAT).get_environ()
    environ["HTTP_HOST"] = host
    got = []
    body = b"".join(api.app(environ, lambda status, headers, exc_info=None: got.append((status, dict(headers)))))
    status, headers = got[0]
    assert (status, headers.get("Location"), body) == ("307 TEMPORARY REDIRECT", location, b"")
