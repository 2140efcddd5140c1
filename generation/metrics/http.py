"""The ``http_*`` families of a vLLM pod's ``/metrics``: prometheus-fastapi-instrumentator's
default metrics, which vLLM 0.34 adds with ``Instrumentator(excluded_handlers=[...],
registry=registry).add().instrument(app)`` (``vllm/entrypoints/serve/instrumentator/metrics.py``;
``.add()`` without a function means ``metrics.default()``).  vLLM requires the library at
``>= 8.0.0`` and its lock files pin 8.0.2; 8.1.0's ``metrics.default`` is the same.

    http_requests_total                   counter    method, status, handler
    http_request_size_bytes               summary    handler   (the request's Content-Length header, else 0)
    http_response_size_bytes              summary    handler   (the response's Content-Length header, else 0)
    http_request_duration_highr_seconds   histogram  no labels (:data:`HIGHR_BUCKETS`)
    http_request_duration_seconds         histogram  method, handler (:data:`LOWR_BUCKETS`)

One observation per request, when the middleware's ``await self.app(...)`` returns: after the
whole body went out, a stream's included, its duration from the middleware's entry
(``timeit.default_timer``, ``time.perf_counter``), floored at 0.  ``status`` is grouped
(``"2xx"``: the first digit), ``handler`` is the route's path template, ``"none"`` for a request
no route matched (``should_group_untemplated``), and a request whose template (or, unmatched,
whose path) contains one of :data:`EXCLUDED_HANDLERS` (regular expressions, searched) is not
observed at all.  Each labelled series appears at its first observation, with its ``_created``
gauge (the time it was made), as prometheus_client's ``labels()`` makes it; the highr histogram
has no labels and is there from the start.

Which request gets which handler, and when it ends, is the WSGI layers' business
(:mod:`server.http_metrics`); here are the series and their exposition.  The hot path is
:meth:`HTTPMetrics.observe`: one ``bisect`` over the highr bounds (the lowr bucket is read off the
same index: its bounds are some of the highr ones), a dict lookup for the status's counter and
a few additions, on a :class:`RouteSeries` looked up once per route.
"""
from __future__ import annotations

import time
from bisect import bisect_left

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, SummaryMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from .series import _escape, _fmt_count

# vLLM 0.34's Instrumentator(excluded_handlers=...)
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
UNTEMPLATED = "none"              # the handler of a request no route matched (should_group_untemplated)
HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10,
                 30, 60)
LOWR_BUCKETS = (0.1, 0.5, 1)

TOTAL = "http_requests_total"
TOTAL_DOC = "Total number of requests by method, status and handler."
IN_SIZE = "http_request_size_bytes"
IN_SIZE_DOC = ("Content length of incoming requests by handler. Only value of header is respected. "
               "Otherwise ignored. No percentile calculated. ")
OUT_SIZE = "http_response_size_bytes"
OUT_SIZE_DOC = ("Content length of outgoing responses by handler. Only value of header is respected. "
                "Otherwise ignored. No percentile calculated. ")
HIGHR = "http_request_duration_highr_seconds"
HIGHR_DOC = "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. "
LOWR = "http_request_duration_seconds"
LOWR_DOC = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "

_HIGHR_BOUNDS = [float(b) for b in HIGHR_BUCKETS]
_LOWR_BOUNDS = [float(b) for b in LOWR_BUCKETS]
# the lowr bucket of a duration from its highr bucket: every lowr bound is a highr bound
_LOWR_OF = tuple(bisect_left(_LOWR_BOUNDS, b) for b in _HIGHR_BOUNDS) + (len(_LOWR_BOUNDS),)
assert set(_LOWR_BOUNDS) <= set(_HIGHR_BOUNDS)
_SIZE_FAMILIES = ((IN_SIZE, IN_SIZE_DOC, "in_count", "in_sum"), (OUT_SIZE, OUT_SIZE_DOC, "out_count", "out_sum"))


def excluded(handler: str) -> bool:
    """Whether the middleware skips a request with this handler (a template, or the path of a
    request no route matched): an excluded pattern found anywhere in it (``re.search``;
    vLLM's patterns hold no special character, so a substring test)."""
    return any(p in handler for p in EXCLUDED_HANDLERS)


def _labels(**values) -> str:
    """prometheus_client's label text: sorted by name, values escaped."""
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(values.items()))


def _head(name: str, doc: str, kind: str) -> str:
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class _Total:
    """One ``http_requests_total`` series (a method, a status group, a handler)."""
    __slots__ = ("value", "line", "created_line", "labels", "created")

    def __init__(self, method: str, status: str, handler: str, created: float):
        self.value = 0
        self.labels = (method, status, handler)
        self.created = created
        text = _labels(method=method, status=status, handler=handler)
        self.line = f"{TOTAL}{{{text}}} "
        self.created_line = f"http_requests_created{{{text}}} {floatToGoString(created)}\n"


class _Sizes:
    """One handler's two size summaries (their ``_count`` and ``_sum``)."""
    __slots__ = ("handler", "in_count", "in_sum", "out_count", "out_sum", "created", "live", "text")

    def __init__(self, handler: str):
        self.handler = handler
        self.in_count = self.in_sum = self.out_count = self.out_sum = 0
        self.created = 0.0
        self.live = False
        self.text = _labels(handler=handler)


class RouteSeries:
    """What one (method, handler) observes into: its ``http_request_duration_seconds`` series,
    its ``http_requests_total`` series by status group (made at their first use) and its
    handler's size summaries (:class:`_Sizes`, shared by the handler's methods)."""
    __slots__ = ("method", "handler", "sizes", "totals", "lowr_counts", "lowr_sum", "created", "prefixes")

    def __init__(self, method: str, handler: str, sizes: _Sizes):
        self.method = method
        self.handler = handler
        self.sizes = sizes
        self.totals: dict = {}             # status // 100 -> _Total
        self.lowr_counts = [0] * (len(_LOWR_BOUNDS) + 1)
        self.lowr_sum = 0.0
        self.created = None                # set at the first observation, when the series appear
        self.prefixes = None


class HTTPMetrics:
    """The instrumentator's five families for one server (a pod of a fleet has its own)."""

    def __init__(self, created: float | None = None):
        self.created = time.time() if created is None else created     # the highr histogram's
        self.highr_counts = [0] * (len(_HIGHR_BOUNDS) + 1)
        self.highr_sum = 0.0
        self._routes: dict = {}            # (method, handler) -> RouteSeries
        self._handlers: dict = {}          # handler -> _Sizes
        # exposition order: each family's series in the order they were made, as prometheus_client's
        self._totals: list = []
        self._sizes: list = []
        self._lowr: list = []
        self._highr_prefixes = self._histogram_prefixes(HIGHR, _HIGHR_BOUNDS, {}, self.created)

    # ---- the hot path ------------------------------------------------------------------------
    def route(self, method: str, handler: str) -> RouteSeries:
        """The series a request of ``method`` on ``handler`` observes into (look it up once per
        route where the route is fixed); nothing is exported before its first observation."""
        series = self._routes.get((method, handler))
        if series is None:
            sizes = self._handlers.get(handler)
            if sizes is None:
                sizes = self._handlers[handler] = _Sizes(handler)
            series = self._routes[(method, handler)] = RouteSeries(method, handler, sizes)
        return series

    def observe(self, series: RouteSeries, status: int, request_bytes: int, response_bytes: int,
                seconds: float) -> None:
        """One finished request: ``status`` its HTTP status code, the two sizes the
        Content-Length headers said (0 without one), ``seconds`` its duration."""
        if seconds < 0.0:
            seconds = 0.0
        i = bisect_left(_HIGHR_BOUNDS, seconds)
        self.highr_counts[i] += 1
        self.highr_sum += seconds
        if series.created is None:
            self._first(series)
        total = series.totals.get(status // 100)
        if total is None:
            total = self._new_total(series, status)
        total.value += 1
        sizes = series.sizes
        sizes.in_count += 1
        sizes.in_sum += request_bytes
        sizes.out_count += 1
        sizes.out_sum += response_bytes
        series.lowr_counts[_LOWR_OF[i]] += 1
        series.lowr_sum += seconds

    def _first(self, series: RouteSeries) -> None:
        now = time.time()
        series.created = now
        series.prefixes = self._histogram_prefixes(
            LOWR, _LOWR_BOUNDS, {"method": series.method, "handler": series.handler}, now)
        self._lowr.append(series)
        sizes = series.sizes
        if not sizes.live:
            sizes.live, sizes.created = True, now
            self._sizes.append(sizes)

    def _new_total(self, series: RouteSeries, status: int) -> _Total:
        total = series.totals[status // 100] = _Total(series.method, str(status)[0] + "xx", series.handler,
                                                     time.time())
        self._totals.append(total)
        return total

    # ---- exposition --------------------------------------------------------------------------
    @staticmethod
    def _histogram_prefixes(name: str, bounds: list, labels: dict, created: float) -> tuple:
        """``(bucket prefixes, count prefix, sum prefix, created line)`` of one histogram series
        with ``labels`` (possibly none)."""
        plain = f"{{{_labels(**labels)}}}" if labels else ""
        buckets = [f"{name}_bucket{{{_labels(**labels, le=floatToGoString(b))}}} " for b in bounds + [float("inf")]]
        return (buckets, f"{name}_count{plain} ", f"{name}_sum{plain} ",
                f"{name}_created{plain} {floatToGoString(created)}\n")

    def render_into(self, out: list) -> None:
        """Append the five families' text exposition (what ``generate_latest`` prints for
        :meth:`collect`) to ``out``: series and sizes from label text built when each series was
        made."""
        out.append(_head(TOTAL, TOTAL_DOC, "counter"))
        totals = self._totals
        for t in totals:
            out.append(t.line + _fmt_count(t.value))
        if totals:
            out.append(_head("http_requests_created", TOTAL_DOC, "gauge"))
            out.extend(t.created_line for t in totals)
        sizes = self._sizes
        for name, doc, count, total in _SIZE_FAMILIES:
            out.append(_head(name, doc, "summary"))
            for s in sizes:
                out.append(f"{name}_count{{{s.text}}} {_fmt_count(getattr(s, count))}")
                out.append(f"{name}_sum{{{s.text}}} {floatToGoString(float(getattr(s, total)))}\n")
            if sizes:
                out.append(_head(name + "_created", doc, "gauge"))
                out.extend(f"{name}_created{{{s.text}}} {floatToGoString(s.created)}\n" for s in sizes)
        out.append(_head(HIGHR, HIGHR_DOC, "histogram"))
        self._render_histogram(out, self._highr_prefixes, self.highr_counts, self.highr_sum)
        out.append(_head(HIGHR + "_created", HIGHR_DOC, "gauge"))
        out.append(self._highr_prefixes[3])
        out.append(_head(LOWR, LOWR_DOC, "histogram"))
        lowr = self._lowr
        for r in lowr:
            self._render_histogram(out, r.prefixes, r.lowr_counts, r.lowr_sum)
        if lowr:
            out.append(_head(LOWR + "_created", LOWR_DOC, "gauge"))
            out.extend(r.prefixes[3] for r in lowr)

    @staticmethod
    def _render_histogram(out: list, prefixes: tuple, counts: list, total: float) -> None:
        buckets, count_prefix, sum_prefix, _ = prefixes
        acc = 0
        for prefix, c in zip(buckets, counts):
            acc += c
            out.append(prefix + _fmt_count(acc))
        out.append(count_prefix + _fmt_count(acc))
        out.append(sum_prefix + floatToGoString(total) + "\n")

    def render(self) -> str:
        out: list = []
        self.render_into(out)
        return "".join(out)

    def collect(self):
        """The five families through prometheus_client's collector API (the ``/metrics`` mount's
        other formats, ``--fake-metrics``): each series' samples together, its ``_created`` last."""
        fam = CounterMetricFamily(TOTAL, TOTAL_DOC, labels=["method", "status", "handler"])
        for t in self._totals:
            fam.add_metric(list(t.labels), t.value, t.created)
        yield fam
        for name, doc, count, total in _SIZE_FAMILIES:
            fam = SummaryMetricFamily(name, doc, labels=["handler"])
            for s in self._sizes:
                fam.add_metric([s.handler], getattr(s, count), float(getattr(s, total)))
                fam.samples.append(Sample(name + "_created", {"handler": s.handler}, s.created))
            yield fam
        fam = HistogramMetricFamily(HIGHR, HIGHR_DOC)
        fam.add_metric([], self._cumulative(self.highr_counts, _HIGHR_BOUNDS), self.highr_sum)
        fam.samples.append(Sample(HIGHR + "_created", {}, self.created))
        yield fam
        fam = HistogramMetricFamily(LOWR, LOWR_DOC, labels=["method", "handler"])
        for r in self._lowr:
            fam.add_metric([r.method, r.handler], self._cumulative(r.lowr_counts, _LOWR_BOUNDS), r.lowr_sum)
            fam.samples.append(Sample(LOWR + "_created", {"method": r.method, "handler": r.handler}, r.created))
        yield fam

    @staticmethod
    def _cumulative(counts: list, bounds: list) -> list:
        out, acc = [], 0
        for b, c in zip(bounds + [float("inf")], counts):
            acc += c
            out.append((floatToGoString(b), acc))
        return out
