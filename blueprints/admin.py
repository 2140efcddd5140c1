"""Simulator-specific admin API: ``GET/POST /admin/config`` (reference api.md 5.13), the
deprecated ``POST /fake_metrics`` and ``GET /query`` (Mooncake bootstrap emulation).

POST takes a partial JSON object of admin-configurable keys (latencies, failure injection,
image emission, fake metrics); durations are Go strings or integer nanoseconds.  The merged
configuration is validated with the start-up rules; on any error nothing changes and the answer
is a 400.  ``fake-metrics`` is a partial object too (engine.md 5.4) and is accepted only when
fake metrics were configured at start-up.
"""
from __future__ import annotations

import copy
import uuid

from flask import Blueprint, Response

from generation.config import ConfigError, OPTIONS, coerce, parse_duration
from generation.errors import APIError
from generation.fake_metrics import merge_fake_metrics, parse_fake_metrics

from .common import json_response, parse_json_body, simulator

bp = Blueprint("admin", __name__)

ADMIN_KEYS = ("failure-injection-rate", "failure-types", "image-emission-rate", "time-to-first-token",
              "time-to-first-token-std-dev", "inter-token-latency", "inter-token-latency-std-dev",
              "kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev", "prefill-overhead",
              "prefill-time-per-token", "prefill-time-std-dev", "kv-cache-transfer-time-per-token",
              "kv-cache-transfer-time-std-dev", "time-to-generate-image", "time-to-generate-image-std-dev",
              "time-factor-under-load", "latency-calculator", "fake-metrics")


@bp.get("/admin/config")
def get_config():
    return json_response(simulator().config.to_public_dict())


@bp.post("/admin/config")
def update_config():
    sim = simulator()
    body = parse_json_body()
    trial = copy.copy(sim.config)
    fake_update = None
    for key, value in body.items():
        if key not in ADMIN_KEYS:
            raise APIError(f"field '{key}' is not admin-configurable", 400, key)
        if key == "fake-metrics":
            fake_update = _check_fake_metrics(sim, trial, value)
            continue
        try:
            if OPTIONS[key].kind == "duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
                v = value / 1e9            # JSON integers are nanoseconds
            elif OPTIONS[key].kind == "duration":
                v = parse_duration(value)
            else:
                v = coerce(key, value)
        except ConfigError as e:
            raise APIError(f'field "{key}": {e}', 400, key) from None
        setattr(trial, key.replace("-", "_"), v)
    try:
        trial.validate_latencies()
        trial.validate_failures()
        if not 0 <= trial.image_emission_rate <= 100:
            raise ConfigError("image emission rate should be between 0 and 100")
    except ConfigError as e:
        raise APIError(str(e), 400) from None
    for key in body:
        attr = key.replace("-", "_")
        setattr(sim.config, attr, getattr(trial, attr))
    if fake_update:
        sim.metrics.fake.update(fake_update)
    return json_response(sim.config.to_public_dict())


def _check_fake_metrics(sim, trial, value) -> dict | None:
    """Validate a ``fake-metrics`` partial update against the merged object; set the merged
    object on ``trial`` and return the parsed update (None for null: nothing changes).
    Raises APIError 400 (engine.md 5.4 messages)."""
    if value is None:
        return None
    if sim.config.fake_metrics is None or sim.metrics.fake is None:
        raise APIError("the simulator is reporting real metrics; fake metrics cannot be updated", 400,
                       "fake-metrics")
    if not isinstance(value, dict):
        raise APIError('field "fake-metrics": must be a JSON object', 400, "fake-metrics")
    try:
        update = parse_fake_metrics(value, trial.max_model_len, partial=True)
        merged = merge_fake_metrics(sim.config.fake_metrics, value)
        parse_fake_metrics(merged, trial.max_model_len)
    except ConfigError as e:
        raise APIError(str(e), 400, "fake-metrics") from None
    trial.fake_metrics = merged
    return update


@bp.post("/fake_metrics")
def update_fake_metrics():
    """Deprecated (reference, removal planned in its v0.12.0): the bare fake-metrics partial
    object.  204 on success; 500 ``Failed to update fake metrics: <detail>`` on any error, as
    the reference answers."""
    sim = simulator()
    try:
        body = parse_json_body()
        update = _check_fake_metrics(sim, copy.copy(sim.config), body)
    except APIError as e:
        raise APIError(f"Failed to update fake metrics: {e.message}", 500) from None
    if update is not None:
        sim.config.fake_metrics = merge_fake_metrics(sim.config.fake_metrics, body)
        sim.metrics.fake.update(update)
    return Response(status=204)


_ENGINE_IDS: dict = {}


@bp.get("/query")
def query():
    sim = simulator()
    if not _ENGINE_IDS:
        for r in range(sim.config.data_parallel_size):
            _ENGINE_IDS[str(r)] = {"engine_id": str(uuid.uuid5(uuid.NAMESPACE_URL, sim.new_request_id()))}
    return json_response(_ENGINE_IDS)
