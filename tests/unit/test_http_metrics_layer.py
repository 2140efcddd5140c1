"""server/http_metrics.py's layer on WSGI apps of its own: what vLLM's instrumentator middleware
records for an app that raises (a 500 with no response size, as its ``finally`` sees it), a
client that left (vLLM's ``with_cancellation`` answers ``Response()``: a 2xx of size 0), a body
with no Content-Length (observed at its close), and the handler of an unmatched path."""
from __future__ import annotations

import pytest

from generation.metrics.http import HTTPMetrics
from server.http_metrics import UNROUTED_KEY, HandlerTable, ObservedHTTP


def layer(app, templates=None):
    http = HTTPMetrics()
    table = HandlerTable(templates if templates is not None else {"/x": "/x", "/health": None})
    return ObservedHTTP(app, http, table), http


def call(wsgi, path="/x", method="GET", **extra):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, **extra}
    seen = []
    body = wsgi(environ, lambda status, headers, exc_info=None: seen.append(status))
    return body, seen


def series(http) -> dict:
    return {t.labels: t.value for t in http._totals}


def answering(status: str, headers: list, body=(b"",), unrouted=False):
    def app(environ, start_response):
        if unrouted:
            environ[UNROUTED_KEY] = True
        start_response(status, headers)
        return body
    return app


def test_a_json_answer_is_observed_at_once():
    wsgi, http = layer(answering("200 OK", [("Content-Length", "7")], [b"abcdefg"]))
    call(wsgi, method="POST", CONTENT_LENGTH="12")
    assert series(http) == {("POST", "2xx", "/x"): 1}
    assert (http._sizes[0].in_sum, http._sizes[0].out_sum) == (12, 7)


def test_a_body_without_length_is_observed_when_closed():
    def stream():
        yield b"data: 1\n\n"
    wsgi, http = layer(answering("200 OK", [("Content-Type", "text/event-stream")], stream()))
    body, _ = call(wsgi)
    assert list(body) == [b"data: 1\n\n"] and series(http) == {}
    body.close()
    body.close()                       # once
    assert series(http) == {("GET", "2xx", "/x"): 1} and http._sizes[0].out_sum == 0


def test_an_app_that_raises_is_a_500_without_size():
    def app(environ, start_response):
        raise RuntimeError("boom")
    wsgi, http = layer(app)
    with pytest.raises(RuntimeError):
        call(wsgi)
    assert series(http) == {("GET", "5xx", "/x"): 1} and http._sizes[0].out_sum == 0


def test_a_client_that_left_counts_as_vllms_empty_200():
    wsgi, http = layer(answering("499 Client Closed Request", [("Content-Length", "0")]))
    call(wsgi, method="POST")
    assert series(http) == {("POST", "2xx", "/x"): 1}


def test_unmatched_paths_are_none_unless_excluded():
    wsgi, http = layer(answering("404 Not Found", [("Content-Length", "22")], unrouted=True))
    for path in ("/nope", "/x", "/healthz", "/a/metrics", "/health"):
        call(wsgi, path)
    assert series(http) == {("GET", "4xx", "none"): 2}       # /nope, and /x once the router refused it
    wsgi, http = layer(answering("200 OK", [("Content-Length", "0")]))
    call(wsgi, "/health")                                     # an excluded route
    call(wsgi, "/elsewhere")                                  # no rule, not marked: still no template
    assert series(http) == {("GET", "2xx", "none"): 1}


def test_a_preflight_is_not_observed():
    wsgi, http = layer(answering("200 OK", [("Content-Length", "2")], [b"OK"]))
    call(wsgi, method="OPTIONS", HTTP_ORIGIN="http://a", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert series(http) == {}
    call(wsgi, method="OPTIONS")                              # not a preflight: the router's
    assert series(http) == {("OPTIONS", "2xx", "/x"): 1}
