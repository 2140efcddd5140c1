"""The ``http_*`` series (generation/metrics/http.py) against prometheus_client's own classes
built as prometheus-fastapi-instrumentator 8.0.2's ``metrics.default`` builds them (vLLM 0.34's
lock): the same observations give the same text exposition, sample for sample, in the same
order (the ``_created`` timestamps aside), through the prebuilt text and the collector API."""
from __future__ import annotations

import random
import re

from prometheus_client import CollectorRegistry, Counter, Histogram, Summary, generate_latest
from prometheus_client import disable_created_metrics, enable_created_metrics
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from generation.metrics import http as H
from generation.metrics.http import HTTPMetrics


def masked(text: str) -> str:
    return re.sub(r"(?m)^(\S+_created(\{.*\})?) \S+$", r"\1 T", text)


class Registered:
    def __init__(self, fn):
        self.collect = fn


def reference():
    """prometheus_client's metrics as the instrumentator declares them (names, help, label
    names and order, buckets: ``metrics.default``'s defaults, +Inf appended)."""
    r = CollectorRegistry()
    total = Counter("http_requests_total", "Total number of requests by method, status and handler.",
                    ("method", "status", "handler"), registry=r)
    doc = ("Content length of {} by handler. Only value of header is respected. Otherwise ignored. "
           "No percentile calculated. ")
    in_size = Summary("http_request_size_bytes", doc.format("incoming requests"), ("handler",), registry=r)
    out_size = Summary("http_response_size_bytes", doc.format("outgoing responses"), ("handler",), registry=r)
    highr = Histogram("http_request_duration_highr_seconds",
                      "Latency with many buckets but no API specific labels. Made for more accurate percentile "
                      "calculations. ",
                      buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5,
                               7.5, 10, 30, 60, float("inf")], registry=r)
    lowr = Histogram("http_request_duration_seconds",
                     "Latency with only few buckets by handler. Made to be only used if aggregation by handler is "
                     "important. ", ("method", "handler"), buckets=[0.1, 0.5, 1, float("inf")], registry=r)

    def observe(method, status, handler, request_bytes, response_bytes, seconds):
        total.labels(method, str(status)[0] + "xx", handler).inc()
        in_size.labels(handler).observe(request_bytes)
        out_size.labels(handler).observe(response_bytes)
        seconds = max(seconds, 0.0)
        highr.observe(seconds)
        lowr.labels(method, handler).observe(seconds)
    return r, observe


def test_the_exposition_is_prometheus_clients():
    enable_created_metrics()          # generation.metrics.recorder turns them off process-wide
    try:
        reg, observe = reference()
        ours = HTTPMetrics()
        same_empty = masked(generate_latest(reg).decode()) == masked(ours.render())
        rng = random.Random(7)
        for _ in range(2000):
            method = rng.choice(["GET", "POST", "HEAD", "DELETE"])
            handler = rng.choice(["/v1/chat/completions", "none", "/v1/models/{model:path}", 'odd"\\\nname'])
            status = rng.choice([200, 204, 307, 400, 404, 405, 413, 500, 503])
            seconds = rng.choice([0.0, 0.01, 0.1, 0.5, 1.0, 60.0, 61.0, -0.5, rng.random(), rng.random() * 70])
            a, b = rng.randrange(0, 1 << 20), rng.randrange(0, 1 << 22)
            observe(method, status, handler, a, b, seconds)
            ours.observe(ours.route(method, handler), status, a, b, seconds)
        expected = masked(generate_latest(reg).decode())
        text = ours.render()
    finally:
        disable_created_metrics()
    assert same_empty
    assert masked(text) == expected
    assert masked(generate_latest(Registered(ours.collect)).decode()) == expected
    # OpenMetrics (the /metrics mount's Accept): each series' samples together
    om = openmetrics(Registered(ours.collect)).decode()
    assert om.endswith("# EOF\n") and "http_requests_total{" in om and "http_request_size_bytes_created{" in om


def test_bucket_edges_and_grouping():
    m = HTTPMetrics(created=1.0)
    chat = m.route("POST", "/v1/chat/completions")
    for seconds in (0.01, 0.0100001, 0.1, 0.5, 1.0, 1.0000001, 60.0, 600.0, -1.0):
        m.observe(chat, 200, 10, 20, seconds)
    m.observe(chat, 404, 0, 22, 0.2)
    text = m.render()
    highr = dict(re.findall(r'http_request_duration_highr_seconds_bucket\{le="([^"]+)"\} (\S+)', text))
    assert list(highr) == ["0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1.0", "1.5", "2.0",
                           "2.5", "3.0", "3.5", "4.0", "4.5", "5.0", "7.5", "10.0", "30.0", "60.0", "+Inf"]
    # a bound holds the durations equal to it (le); a negative duration counts as 0
    assert (highr["0.01"], highr["0.025"], highr["0.1"], highr["0.25"], highr["0.5"], highr["1.0"],
            highr["1.5"], highr["60.0"], highr["+Inf"]) == ("2.0", "3.0", "4.0", "5.0", "6.0", "7.0", "8.0",
                                                               "9.0", "10.0")
    lowr = re.findall(r'http_request_duration_seconds_bucket\{handler="/v1/chat/completions",le="([^"]+)",'
                      r'method="POST"\} (\S+)', text)
    assert lowr == [("0.1", "4.0"), ("0.5", "6.0"), ("1.0", "7.0"), ("+Inf", "10.0")]
    assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 9.0' in text
    assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"} 1.0' in text
    assert 'http_request_size_bytes_sum{handler="/v1/chat/completions"} 90.0' in text
    assert 'http_response_size_bytes_sum{handler="/v1/chat/completions"} 202.0' in text
    assert "http_request_duration_highr_seconds_created 1.0\n" in text


def test_nothing_but_the_highr_histogram_before_a_request():
    text = HTTPMetrics().render()
    samples = [line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")]
    assert set(samples) == {"http_request_duration_highr_seconds_bucket", "http_request_duration_highr_seconds_count",
                            "http_request_duration_highr_seconds_sum", "http_request_duration_highr_seconds_created"}
    assert text.count("# HELP ") == 6       # the five families and the highr histogram's _created


def test_excluded_handlers_are_searched():
    assert H.EXCLUDED_HANDLERS == ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
    for handler in ("/metrics", "/metrics/x", "/health/ready", "/healthz", "/v1/load_lora_adapter", "/load",
                    "/x/ping", "/version", "/server_info"):
        assert H.excluded(handler), handler
    for handler in ("/v1/unload_lora_adapter", "/v1/models", "none", "/tokenize", "/is_sleeping"):
        assert not H.excluded(handler), handler
