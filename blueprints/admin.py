"""Simulator-specific admin API: ``GET/POST /admin/config`` (reference api.md 5.13) and
``GET /query`` (Mooncake bootstrap emulation).

POST takes a partial JSON object of admin-configurable keys (latencies, failure injection,
image emission); durations are Go strings or integer nanoseconds.  The merged configuration
is validated with the start-up rules; on any error nothing changes and the answer is a 400.
"""
from __future__ import annotations

import copy
import uuid

from flask import Blueprint

from generation.config import ConfigError, OPTIONS, coerce, parse_duration
from generation.errors import APIError

from .common import json_response, parse_json_body, simulator

bp = Blueprint("admin", __name__)

ADMIN_KEYS = ("failure-injection-rate", "failure-types", "image-emission-rate", "time-to-first-token",
              "time-to-first-token-std-dev", "inter-token-latency", "inter-token-latency-std-dev",
              "kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev", "prefill-overhead",
              "prefill-time-per-token", "prefill-time-std-dev", "kv-cache-transfer-time-per-token",
              "kv-cache-transfer-time-std-dev", "time-to-generate-image", "time-to-generate-image-std-dev",
              "time-factor-under-load", "latency-calculator")


@bp.get("/admin/config")
def get_config():
    return json_response(simulator().config.to_public_dict())


@bp.post("/admin/config")
def update_config():
    sim = simulator()
    body = parse_json_body()
    trial = copy.copy(sim.config)
    for key, value in body.items():
        if key not in ADMIN_KEYS:
            raise APIError(f"field '{key}' is not admin-configurable", 400, key)
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
    return json_response(sim.config.to_public_dict())


_ENGINE_IDS: dict = {}


@bp.get("/query")
def query():
    sim = simulator()
    if not _ENGINE_IDS:
        for r in range(sim.config.data_parallel_size):
            _ENGINE_IDS[str(r)] = {"engine_id": str(uuid.uuid5(uuid.NAMESPACE_URL, sim.new_request_id()))}
    return json_response(_ENGINE_IDS)
