"""Where vLLM 0.34's ``PrometheusInstrumentatorMiddleware`` sits, which request it observes, with
which handler, and when the request ends (the series: :mod:`generation.metrics.http`).

vLLM adds the instrumentator first of its middleware, so it runs inside every other one: the
API key's 401s, the CORS preflights and the Cohere error rewrite happen outside it (unobserved,
or observed as the route answered before the rewrite), the router's 404 / 405 and every route's
answer inside.  Here :class:`ObservedHTTP` wraps the layers from :class:`~server.wsgi_layers.RequestGuard`
inwards (a preflight, which the guard answers, is passed through unobserved), and
:class:`~server.wsgi_layers.FrontDoor` observes the generation requests it answers itself with
the same :meth:`~generation.metrics.http.HTTPMetrics.observe`.

A request is observed when its body is complete: a body whose response has a Content-Length
(every JSON answer) when the layers below return it; any other (a stream) when the server
closes it (:class:`ObservedBody`: no layer per chunk; the server iterates the body's own
iterator).  Its duration runs from this layer's entry, as the middleware's from its own.
"""
from __future__ import annotations

from time import perf_counter

from generation.metrics.http import UNTEMPLATED, excluded

UNROUTED_KEY = "vllm_sim.unrouted"   # environ: set by the app's routing-error handler (a 404 / 405 of the router)
EXCLUDED = object()                  # a handler table's mark of an excluded route
# A client that left before its answer: the simulator answers nobody (the access log says 499);
# vLLM's with_cancellation gives the gone client Response(), a 200 without a body, which the
# middleware records as such.
GONE = 499


def content_length(headers) -> int | None:
    """The ``Content-Length`` a WSGI header list says, None without one (a stream: the
    middleware then records 0).  The simulator's answers put it last."""
    if headers:
        name, value = headers[-1]
        if name == "Content-Length":
            return int(value) if value.isdigit() else 0
        for name, value in headers:
            if name.lower() == "content-length":
                return int(value) if value.isdigit() else 0
    return None


def request_length(environ) -> int:
    """The request's ``Content-Length`` header, 0 without one (a chunked body)."""
    length = environ.get("CONTENT_LENGTH")
    return int(length) if length and length.isdigit() else 0


class HandlerTable:
    """The ``handler`` label of a finished request: the matched route's path as FastAPI names it
    (``templates``: ``{Werkzeug rule: template}``, None for a route the middleware skips), or
    ``"none"`` for a request no route matched, which the route layer marks with
    :data:`UNROUTED_KEY` (a view that answers as if its route were absent does too).
    ``resolve(environ)``: the Werkzeug rule a request's path and method match, or None, asked
    only for a request that never reached Flask on a path that is not a rule's own (a route with
    a path parameter whose body the layers refused)."""

    def __init__(self, templates: dict, resolve=None):
        self.templates = {rule: EXCLUDED if t is None else t for rule, t in templates.items()}
        templates = self.templates
        # rules without parameters: their path is the rule itself
        self.exact = {rule: t for rule, t in templates.items() if "<" not in rule}
        self.resolve = resolve

    def handler(self, environ) -> object:
        """The request's handler, or :data:`EXCLUDED` when the middleware would skip it."""
        if UNROUTED_KEY in environ:
            template = None
        else:
            # Flask's request, once Flask routed it (a werkzeug client's own request has no rule)
            rule = getattr(environ.get("werkzeug.request"), "url_rule", False)
            if rule is not False:
                template = None if rule is None else self.templates.get(rule.rule)
            else:
                template = self.exact.get(environ.get("PATH_INFO", ""))
                if template is None and self.resolve is not None:
                    rule = self.resolve(environ)
                    template = None if rule is None else self.templates.get(rule)
        if template is None:          # untemplated: the path decides the exclusion
            return EXCLUDED if excluded(environ.get("PATH_INFO", "")) else UNTEMPLATED
        return template


class ObservedHTTP:
    """WSGI layer: every request the layers below answer (a CORS preflight aside) is observed
    once, into ``http`` (:class:`~generation.metrics.http.HTTPMetrics`), with its handler from
    ``table`` (:class:`HandlerTable`)."""

    def __init__(self, wsgi_app, http, table: HandlerTable):
        self.wsgi_app = wsgi_app
        self.http = http
        self.table = table

    def __call__(self, environ, start_response):
        start = perf_counter()
        if (environ.get("REQUEST_METHOD") == "OPTIONS" and environ.get("HTTP_ORIGIN") is not None
                and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in environ):
            return self.wsgi_app(environ, start_response)    # vLLM's CORSMiddleware, outside the instrumentator
        length = request_length(environ)    # as sent (ChunkedBodyLimit sets one for a chunked body it read)
        sent = []

        def observed_start(status, headers, exc_info=None):
            sent[:] = (status, headers)
            return start_response(status, headers, exc_info)
        try:
            body = self.wsgi_app(environ, observed_start)
        except BaseException:
            self.finish(environ, sent, length, start)      # the middleware's finally: a 500 unless a status went out
            raise
        if sent and content_length(sent[1]) is not None:      # the whole body is in hand
            self.finish(environ, sent, length, start)
            return body
        return ObservedBody(body, self, environ, sent, length, start)

    def finish(self, environ, sent, length: int, start: float) -> None:
        seconds = perf_counter() - start
        handler = self.table.handler(environ)
        if handler is EXCLUDED:
            return
        if sent:
            status, headers = sent
            code = int(status[:3]) if status[:3].isdigit() else 500
            out = content_length(headers) or 0
        else:
            code, out = 500, 0
        if code == GONE:
            code = 200
        http = self.http
        http.observe(http.route(environ.get("REQUEST_METHOD", ""), handler), code, length, out, seconds)


class ObservedBody:
    """A response body observed when the server closes it (a stream's end, after its last
    bytes): iterating it iterates the body itself."""
    __slots__ = ("body", "layer", "environ", "sent", "length", "start")

    def __init__(self, body, layer, environ, sent, length: int, start: float):
        self.body, self.layer, self.environ, self.sent, self.length, self.start = \
            body, layer, environ, sent, length, start

    def __iter__(self):
        return iter(self.body)

    def close(self):
        layer = self.layer
        if layer is not None:
            self.layer = None
            try:
                layer.finish(self.environ, self.sent, self.length, self.start)
            finally:
                close = getattr(self.body, "close", None)
                if close is not None:
                    close()


class ObservedStream:
    """:class:`ObservedBody` for :class:`~server.wsgi_layers.FrontDoor`'s streams, whose series,
    status and sizes are known when the response starts."""
    __slots__ = ("body", "http", "series", "status", "length", "out", "start")

    def __init__(self, body, http, series, status: int, length: int, out: int, start: float):
        self.body, self.http, self.series, self.status, self.length, self.out, self.start = \
            body, http, series, status, length, out, start

    def __iter__(self):
        return iter(self.body)

    def close(self):
        http = self.http
        if http is not None:
            self.http = None
            try:
                http.observe(self.series, self.status, self.length, self.out, perf_counter() - self.start)
            finally:
                close = getattr(self.body, "close", None)
                if close is not None:
                    close()
