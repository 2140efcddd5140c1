"""The ``http_*`` families of ``/metrics`` (prometheus-fastapi-instrumentator 8.0.2's default
metrics, as vLLM 0.34 adds them: generation/metrics/http.py, server/http_metrics.py) after known
requests, through the in-process app: exact names, help texts, labels, bucket edges and counts.

Which request vLLM's middleware observes, and with which ``handler``: the matched route's path
template; ``"none"`` for a path no route matched and for a method the path's routes do not take
(vLLM's route walk names only a full match); nothing for a handler (or an unmatched path)
containing ``/metrics``, ``/health``, ``/load``, ``/ping``, ``/version`` or ``/server_info``, for
a CORS preflight or an API-key refusal (middleware outside the instrumentator), nor for the
simulator's own control routes."""
from __future__ import annotations

import io
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import sse_events

CHAT = "/v1/chat/completions"
BODY = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
HIGHR = [0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0,
         30.0, 60.0, float("inf")]
DOCS = {
    "http_requests": ("counter", "Total number of requests by method, status and handler."),
    "http_request_size_bytes": ("summary", "Content length of incoming requests by handler. Only value of header "
                                "is respected. Otherwise ignored. No percentile calculated. "),
    "http_response_size_bytes": ("summary", "Content length of outgoing responses by handler. Only value of "
                                 "header is respected. Otherwise ignored. No percentile calculated. "),
    "http_request_duration_highr_seconds": ("histogram", "Latency with many buckets but no API specific labels. "
                                            "Made for more accurate percentile calculations. "),
    "http_request_duration_seconds": ("histogram", "Latency with only few buckets by handler. Made to be only "
                                      "used if aggregation by handler is important. "),
}


def http_families(client) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(r.text) if f.name.startswith("http_")}


def samples(fams: dict, family: str, sample: str) -> dict:
    """``{frozenset(labels): value}`` of one sample name."""
    return {frozenset(s.labels.items()): s.value for s in fams[family].samples if s.name == sample}


def by(family_samples: dict, *keys: str) -> dict:
    return {tuple(dict(lbl)[k] for k in keys): v for lbl, v in family_samples.items()}


def totals(fams: dict) -> dict:
    return by(samples(fams, "http_requests", "http_requests_total"), "method", "status", "handler")


def test_known_requests(app_client):
    c = app_client("--time-to-first-token", "300ms", "--seed", "31")
    start = http_families(c)
    # the parser strips a help text's trailing space, which the text has (the library's help texts end so)
    assert {n: (f.type, f.documentation) for n, f in start.items() if not n.endswith("_created")} == \
        {n: (kind, doc.rstrip()) for n, (kind, doc) in DOCS.items()}
    text = c.get("/metrics").text
    for name, (kind, doc) in DOCS.items():
        name = "http_requests_total" if name == "http_requests" else name
        assert f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" in text
    assert totals(start) == {}
    assert by(samples(start, "http_request_duration_highr_seconds", "http_request_duration_highr_seconds_bucket"),
              "le") == {(repr(b) if b != float("inf") else "+Inf",): 0.0 for b in HIGHR}

    sent = {}
    r = c.post(CHAT, json=BODY)                                              # 200 JSON, ~0.3 s
    assert r.status_code == 200
    sent["chat"] = (int(r.request.headers["content-length"]), int(r.headers["content-length"]))
    r = c.post(CHAT, json={**BODY, "stream": True})                           # 200 stream, no Content-Length
    assert r.status_code == 200 and "content-length" not in r.headers and sse_events(r.text)
    sent["stream"] = (int(r.request.headers["content-length"]), 0)
    r = c.post(CHAT, json={**BODY, "max_tokens": -1})                         # 400 from the route
    assert r.status_code == 400
    sent["bad"] = (int(r.request.headers["content-length"]), int(r.headers["content-length"]))
    r = c.post(CHAT, content=b'{"model": "test-model"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 400                                               # the route's JSON check
    sent["plain"] = (23, int(r.headers["content-length"]))
    r = c.get("/nope")                                                         # the router's 404
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert c.get(CHAT).status_code == 405                                     # the router's 405
    assert c.head("/v1/models").status_code == 405                            # vLLM's GET route: no HEAD
    assert c.get("/v1/models").status_code == 200
    assert c.get("/v1/responses/resp_none").status_code == 404                # the route's own 404
    # not observed: excluded handlers, unmatched paths holding an excluded pattern, a preflight,
    # the simulator's own routes
    for method, path in (("GET", "/health"), ("GET", "/health/"), ("GET", "/healthz"), ("GET", "/metrics"),
                         ("GET", "/metrics/x"), ("GET", "/ping"), ("POST", "/ping"), ("GET", "/version"),
                         ("GET", "/load"), ("GET", "/server_info"), ("POST", "/v1/load_lora_adapter"),
                         ("GET", "/nope/ping"), ("GET", "/admin/config"), ("GET", "/query")):
        assert c.request(method, path).status_code < 500
    assert c.options(CHAT, headers={"Origin": "http://elsewhere", "Access-Control-Request-Method": "POST"}
                     ).status_code == 200

    fams = http_families(c)
    assert totals(fams) == {
        ("POST", "2xx", CHAT): 2.0, ("POST", "4xx", CHAT): 2.0, ("GET", "4xx", "none"): 2.0,
        ("HEAD", "4xx", "none"): 1.0, ("GET", "2xx", "/v1/models"): 1.0,
        ("GET", "4xx", "/v1/responses/{response_id}"): 1.0}
    in_sum = by(samples(fams, "http_request_size_bytes", "http_request_size_bytes_sum"), "handler")
    in_count = by(samples(fams, "http_request_size_bytes", "http_request_size_bytes_count"), "handler")
    out_sum = by(samples(fams, "http_response_size_bytes", "http_response_size_bytes_sum"), "handler")
    assert in_count == {(CHAT,): 4.0, ("none",): 3.0, ("/v1/models",): 1.0, ("/v1/responses/{response_id}",): 1.0}
    assert in_sum == {(CHAT,): sum(a for a, _ in sent.values()), ("none",): 0.0, ("/v1/models",): 0.0,
                      ("/v1/responses/{response_id}",): 0.0}
    assert out_sum[(CHAT,)] == sum(b for _, b in sent.values())
    assert out_sum[("none",)] == 22 + 31 + 31          # {"detail": "Not Found"}, "Method Not Allowed" (HEAD too)
    # durations: the two chat requests waited the 300 ms TTFT, the others none
    highr = by(samples(fams, "http_request_duration_highr_seconds", "http_request_duration_highr_seconds_bucket"),
               "le")
    assert highr[("0.25",)] == 7 and highr[("0.5",)] == highr[("+Inf",)] == 9
    lowr = by(samples(fams, "http_request_duration_seconds", "http_request_duration_seconds_bucket"),
              "method", "handler", "le")
    assert [lowr[("POST", CHAT, le)] for le in ("0.1", "0.5", "1.0", "+Inf")] == [2.0, 4.0, 4.0, 4.0]
    assert [lowr[("GET", "none", le)] for le in ("0.1", "0.5", "1.0", "+Inf")] == [2.0] * 4
    duration = by(samples(fams, "http_request_duration_seconds", "http_request_duration_seconds_sum"),
                  "method", "handler")
    assert 0.6 <= duration[("POST", CHAT)] < 1.0
    assert {k for k in duration} == {("POST", CHAT), ("GET", "none"), ("HEAD", "none"), ("GET", "/v1/models"),
                                     ("GET", "/v1/responses/{response_id}")}
    # every labelled series has its _created gauge, made at its first observation
    created = by(samples(fams, "http_requests_created", "http_requests_created"), "method", "status", "handler")
    assert set(created) == set(totals(fams)) and all(v > 1.7e9 for v in created.values())
    assert set(by(samples(fams, "http_request_duration_seconds_created", "http_request_duration_seconds_created"),
                  "method", "handler")) == set(duration)


def test_label_names_and_order_of_the_text(app_client):
    """The text exposition as prometheus_client writes it: labels sorted, the counter's
    ``_created`` in a gauge family of its own after the series."""
    c = app_client("--seed", "32")
    assert c.get("/v1/models").status_code == 200
    text = c.get("/metrics").text
    assert 'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1.0\n' \
           "# HELP http_requests_created Total number of requests by method, status and handler.\n" \
           "# TYPE http_requests_created gauge\n" \
           'http_requests_created{handler="/v1/models",method="GET",status="2xx"} ' in text
    assert 'http_request_duration_seconds_bucket{handler="/v1/models",le="0.1",method="GET"} 1.0\n' in text
    assert 'http_request_duration_seconds_count{handler="/v1/models",method="GET"} 1.0\n' in text
    assert 'http_request_size_bytes_count{handler="/v1/models"} 1.0\nhttp_request_size_bytes_sum{' \
           'handler="/v1/models"} 0.0\n' in text
    assert "http_request_duration_highr_seconds_count 1.0\n" in text      # a scrape is not observed
    # the mount's other formats carry them too (prometheus_client's collector API)
    om = c.get("/metrics/", headers={"Accept": "application/openmetrics-text"}).text
    assert 'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1.0' in om


def test_api_key_refusals_are_not_observed(app_client):
    """vLLM's AuthenticationMiddleware runs outside the instrumentator: a 401 is never counted."""
    c = app_client("--api-key", "sekrit", "--seed", "33")
    assert c.post(CHAT, json=BODY).status_code == 401
    assert c.get("/v1/models").status_code == 401
    assert totals(http_families(c)) == {}
    assert c.post(CHAT, json=BODY, headers={"Authorization": "Bearer sekrit"}).status_code == 200
    assert totals(http_families(c)) == {("POST", "2xx", CHAT): 1.0}


@pytest.mark.parametrize("flags", [("--enable-server-load-tracking",), ()])
def test_the_slow_path_observes_the_same(app_client, flags):
    """Without the front door (--enable-server-load-tracking) and for a chunked body (no
    Content-Length: its size counts 0, as the header is absent), generation requests go
    through the full stack of layers and are observed there, once."""
    c = app_client(*flags, "--seed", "34")
    before = totals(http_families(c))

    def chunks():
        yield b'{"model": "test-model", "max_tokens": 2, '
        yield b'"messages": [{"role": "user", "content": "hi"}]}'
    r = c.post(CHAT, content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and "content-length" not in r.request.headers
    r = c.post(CHAT, json={**BODY, "stream": True})
    assert r.status_code == 200
    fams = http_families(c)
    got = totals(fams)
    assert got[("POST", "2xx", CHAT)] - before.get(("POST", "2xx", CHAT), 0) == 2
    assert by(samples(fams, "http_request_size_bytes", "http_request_size_bytes_sum"), "handler")[(CHAT,)] == \
        int(r.request.headers["content-length"])


def test_a_stream_is_observed_at_its_end(app_client):
    """A stream counts when its body is done and the server closes it, with the whole stream's
    duration, not when its headers go out."""
    c = app_client("--inter-token-latency", "50ms", "--seed", "35")
    body = json.dumps({**BODY, "max_tokens": 4, "stream": True, "ignore_eos": True}).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": CHAT, "CONTENT_TYPE": "application/json",
               "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body), "SERVER_NAME": "x",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http", "SERVER_PROTOCOL": "HTTP/1.1"}
    status = []
    result = c.app.wsgi_app(environ, lambda line, headers, exc_info=None: status.append(line) or status.append)
    assert status[0].startswith("200")
    http = c.sim.metrics.http
    assert sum(http.highr_counts) == 0                              # started, not finished
    assert b"".join(result).endswith(b"data: [DONE]\n\n")
    assert sum(http.highr_counts) == 0                              # the server has not closed it yet
    result.close()
    assert sum(http.highr_counts) == 1 and 0.15 <= http.highr_sum < 1.0
    assert totals(http_families(c)) == {("POST", "2xx", CHAT): 1.0}
