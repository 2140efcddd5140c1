"""``POST /admin/config`` swaps in a validated copy of the configuration (issue 11): absurd,
non-finite and unknown values are 400s that change nothing, the body must be JSON, and the
deprecated ``/fake_metrics`` route answers 400 for client errors.  In-process, with an API key.
"""
from __future__ import annotations

import math

import pytest

from generation.config.cli import load_config
from support import SimClient


# ---- /admin/config: a validated copy swapped in ------------------------------------------------
@pytest.fixture(scope="module")
def admin_client():
    from app import create_app
    app = create_app(load_config(["--model", "m", "--api-key", "secret"], env={}))
    with SimClient("http://sim", app=app, headers={"Authorization": "Bearer secret"}) as c:
        yield c


def test_admin_post_swaps_in_a_validated_copy(admin_client):
    sim = admin_client.sim
    live = sim.config
    r = admin_client.post("/admin/config", json={"time-to-first-token": "250ms", "time-factor-under-load": 1.5})
    assert r.status_code == 200, r.text
    assert r.json()["time-to-first-token"] == "250ms" and r.json()["api-key"] == "***"
    assert sim.config is live and live.time_to_first_token == 0.25 and live.time_factor_under_load == 1.5
    admin_client.post("/admin/config", json={"time-to-first-token": "0s", "time-factor-under-load": 1.0})


@pytest.mark.parametrize("body,param", [
    ({"time-factor-under-load": "inf"}, "time-factor-under-load"),
    ({"time-factor-under-load": "NaN"}, "time-factor-under-load"),
    ({"time-factor-under-load": 1e6}, "time-factor-under-load"),
    ({"time-to-first-token": "2h"}, "time-to-first-token"),
    ({"inter-token-latency": 10 ** 30}, "inter-token-latency"),            # nanoseconds: 3e13 years
    ({"prefill-time-per-token": "9" * 400 + "s"}, "prefill-time-per-token"),
    ({"failure-injection-rate": 1e308}, "failure-injection-rate"),
    ({"failure-injection-rate": 5, "failure-types": ["nope"]}, "failure-types"),
    ({"port": 1}, "port"),
    ({"time-to-first-token": True}, "time-to-first-token"),
])
def test_admin_rejects_non_finite_absurd_and_unknown_values(admin_client, body, param):
    before = admin_client.get("/admin/config").json()
    r = admin_client.post("/admin/config", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert admin_client.get("/admin/config").json() == before
    assert math.isfinite(admin_client.sim.config.time_factor_under_load)


def test_admin_needs_a_json_content_type(admin_client):
    r = admin_client.post("/admin/config", content=b'{"failure-injection-rate": 100}',
                          headers={"Content-Type": "text/plain"})
    assert r.status_code == 400            # vLLM's validate_json_request answers 400 (blueprints/errors.py)
    assert r.json()["error"] == {"message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' "
                                            "is allowed", "type": "Bad Request", "param": None, "code": 400}
    assert admin_client.sim.config.failure_injection_rate == 0


def test_deprecated_fake_metrics_route_answers_400_for_client_errors(admin_client):
    r = admin_client.post("/fake_metrics", json={"running-requests": 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("Failed to update fake metrics: ")
    r = admin_client.post("/fake_metrics", content=b"not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400


def test_underscore_keys_are_the_flags_too(app_client):
    """``time_to_first_token`` is the flag's other spelling, as on the command line and in YAML (it
    was "not admin-configurable"); an unknown key is still refused under its own name."""
    c = app_client("--seed", "3")
    r = c.post("/admin/config", json={"time_to_first_token": "100ms"})
    assert r.status_code == 200 and r.json()["time-to-first-token"] == "100ms"
    r = c.post("/admin/config", json={"port_x": 1})
    assert r.status_code == 400 and r.json()["error"]["message"] == "field 'port_x' is not admin-configurable"
