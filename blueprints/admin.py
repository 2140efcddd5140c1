"""Simulator-specific admin API: ``GET/POST /admin/config`` (reference api.md 5.13), the
deprecated ``POST /fake_metrics`` and ``GET /query`` (Mooncake bootstrap emulation).

POST takes a partial JSON object of admin-settable keys (``Option.admin`` in
:mod:`generation.config`: latencies, failure injection, image emission, fake metrics);
durations are Go strings or JSON numbers of nanoseconds.  The update is applied to a COPY of the
configuration, the copy is validated with the start-up rules plus bounds (finite numbers,
latencies at most 1 hour, time factor at most 1000), and only then swapped in whole
(:meth:`SimConfig.swap`); on any error nothing changes and the answer is a 400 naming the field.
``fake-metrics`` is a partial object too (engine.md 5.4) and is accepted only when fake metrics
were configured at start-up.
"""
from __future__ import annotations

import uuid

from flask import Blueprint, Response, current_app

from generation.config.values import ConfigError
from generation.errors import InvalidParam
from generation.metrics.fake_metrics_spec import merge_fake_metrics, parse_fake_metrics

from .common import json_response, parse_json_body, simulator

bp = Blueprint("admin", __name__)


@bp.get("/admin/config")
def get_config():
    return json_response(simulator().config.to_public_dict())


@bp.post("/admin/config")
def update_config():
    sim = simulator()
    body = parse_json_body()
    changes = dict(body)
    fake = changes.pop("fake-metrics", None) if "fake-metrics" in changes else None
    fake_update = _check_fake_metrics(sim, fake) if "fake-metrics" in body else None
    if fake_update is not None:
        changes["fake-metrics"] = merge_fake_metrics(sim.config.fake_metrics, fake)
    try:
        new = sim.config.updated(changes)
    except ConfigError as e:
        raise InvalidParam(str(e), e.param) from None
    sim.config.swap(new)
    if fake_update:
        sim.metrics.fake.update(fake_update)
    return json_response(sim.config.to_public_dict())


def _check_fake_metrics(sim, value) -> dict | None:
    """Validate a ``fake-metrics`` partial update against the merged object and return the
    parsed update (None for null: nothing changes).  Raises InvalidParam (a 400; engine.md 5.4
    messages)."""
    if value is None:
        return None
    if sim.config.fake_metrics is None or sim.metrics.fake is None:
        raise InvalidParam("the simulator is reporting real metrics; fake metrics cannot be updated",
                           "fake-metrics")
    if not isinstance(value, dict):
        raise InvalidParam('field "fake-metrics": must be a JSON object', "fake-metrics")
    try:
        buckets = sim.config.custom_histogram_buckets
        update = parse_fake_metrics(value, sim.config.max_model_len, partial=True, overrides=buckets)
        parse_fake_metrics(merge_fake_metrics(sim.config.fake_metrics, value), sim.config.max_model_len,
                           overrides=buckets)
    except ConfigError as e:
        raise InvalidParam(str(e), "fake-metrics") from None
    return update


@bp.post("/fake_metrics")
def update_fake_metrics():
    """Deprecated (reference, removal planned in its v0.12.0): the bare fake-metrics partial
    object.  204 on success; a client error is a 400 ``Failed to update fake metrics: <detail>``
    (the reference answers 500: a server status for a client mistake)."""
    sim = simulator()
    try:
        body = parse_json_body()
        update = _check_fake_metrics(sim, body)
    except InvalidParam as e:
        raise InvalidParam(f"Failed to update fake metrics: {e.message}", e.param) from None
    if update is not None:
        new = sim.config.copy()
        new.fake_metrics = merge_fake_metrics(sim.config.fake_metrics, body)
        sim.config.swap(new)
        sim.metrics.fake.update(update)
    return Response(status=204)


@bp.get("/query")
def query():
    sim = simulator()
    ids = current_app.extensions.setdefault("engine_ids", {})     # per app: a fleet's pods differ
    if not ids:
        for r in range(sim.config.data_parallel_size):
            ids[str(r)] = {"engine_id": str(uuid.uuid5(uuid.NAMESPACE_URL, sim.new_request_id()))}
    return json_response(ids)
