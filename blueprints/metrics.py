"""``/metrics`` - Prometheus exposition of the simulator's registry, routed as vLLM 0.34 routes it
(``vllm/entrypoints/serve/instrumentator/metrics.py`` ``attach_router``):

* ``GET /metrics`` is prometheus-fastapi-instrumentator's ``expose`` route: the text format
  0.0.4, never compressed, the whole registry (:func:`metrics`);
* every other method on ``/metrics``, and any method on a path that merely starts with it
  (``/metrics/``, ``/metrics.txt``: vLLM's ``Mount`` has the path regex ``^/metrics(?P<path>.*)$``
  to avoid Starlette's 307), reach prometheus_client's ASGI app (``make_asgi_app``), which picks
  the format from ``Accept`` (OpenMetrics or text), keeps only the samples named by ``name[]``
  query parameters, and gzips when ``Accept-Encoding`` allows (:func:`metrics_app`).
"""
from __future__ import annotations

import gzip
import re

from flask import Blueprint, Response, current_app, request
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from werkzeug.routing import BaseConverter

from .common import simulator

bp = Blueprint("metrics", __name__)

# Starlette's Mount takes any method; these are the ones a Werkzeug rule can name.
MOUNT_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


class AnyTail(BaseConverter):
    """The rest of the path after ``/metrics``, slashes included, possibly empty."""
    regex = ".*"
    part_isolating = False


bp.record_once(lambda state: state.app.url_map.converters.setdefault("tail", AnyTail))


@bp.get("/metrics")
def metrics():
    dp = current_app.extensions.get("data_parallel")      # one API server over DP engines: every rank's
    body = dp.render_metrics() if dp is not None else simulator().metrics.render()   # state read now
    return Response(body, 200, content_type=CONTENT_TYPE_PLAIN_0_0_4)


class OnlyNamed:
    """A collector of ``registry``'s families cut to the samples whose names are in ``names``
    (families left empty are dropped): prometheus_client's ``restricted_registry`` result,
    which finds collectors through their ``describe``; the simulator's scrape-time collectors
    have none, so the names are matched on the collected samples instead."""

    def __init__(self, registry, names):
        self.registry = registry
        self.names = frozenset(names)

    def collect(self):
        names = self.names
        for family in self.registry.collect():
            samples = [s for s in family.samples if s.name in names]
            if samples:
                cut = Metric(family.name, family.documentation, family.type, family.unit)
                cut.samples = samples
                yield cut


@bp.route("/metrics", methods=[m for m in MOUNT_METHODS if m not in ("GET", "HEAD")], endpoint="metrics_app")
@bp.route("/metrics<tail:rest>", methods=MOUNT_METHODS, endpoint="metrics_app")
def metrics_app(rest: str = ""):
    """prometheus_client's ``make_asgi_app`` (``exposition._bake_output``): ``Accept`` picks the
    encoder, ``name[]`` restricts the samples, ``Accept-Encoding: gzip`` compresses; 200 always."""
    dp = current_app.extensions.get("data_parallel")
    registry = dp.registry() if dp is not None else simulator().metrics.registry
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    names = request.args.getlist("name[]")
    body = encoder(OnlyNamed(registry, names) if names else registry)
    headers = {"Content-Type": content_type}
    if gzip_accepted(request.headers.get("Accept-Encoding", "")):
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return Response(body, 200, headers=headers)


# The simulator's own routes (no vLLM has them): not observed in the http_* families, which a
# real pod's traffic alone makes (the test harness's control calls would show up there).
OWN_ROUTES = frozenset({"/admin/config", "/fake_metrics", "/query"})
_PARAM = re.compile(r"<(?:(\w+)(?:\([^>]*\))?:)?(\w+)>")


def fastapi_path(rule: str) -> str:
    """A Werkzeug rule as FastAPI spells the route's path, its ``route.path`` that the
    instrumentator labels a request with: ``/v1/responses/<response_id>`` is
    ``/v1/responses/{response_id}``, a ``path`` parameter keeps its convertor
    (``/v1/models/{model:path}``)."""
    return _PARAM.sub(lambda m: f"{{{m.group(2)}:path}}" if m.group(1) in ("path", "tail")
                      else f"{{{m.group(2)}}}", rule)


def handler_templates(app, excluded) -> dict:
    """``{Werkzeug rule: its handler label}`` for every rule of ``app``, the label None where
    the instrumentator skips the route (``excluded(template)``, and :data:`OWN_ROUTES`)."""
    out = {}
    for rule in app.url_map.iter_rules():
        template = fastapi_path(rule.rule)
        out[rule.rule] = None if rule.rule in OWN_ROUTES or excluded(template) else template
    return out


def rule_of(app, environ) -> str | None:
    """The rule a request's path and method match in ``app``'s URL map (Werkzeug's matcher),
    or None."""
    from werkzeug.exceptions import HTTPException
    try:
        rule, _ = app.url_map.bind_to_environ(environ).match(method=environ.get("REQUEST_METHOD") or "GET",
                                                            return_rule=True)
    except HTTPException:
        return None
    return rule.rule
