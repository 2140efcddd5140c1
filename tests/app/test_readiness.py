"""``/health/ready`` answers 503 while the server drains; ``/health`` (liveness) does not."""
from __future__ import annotations


def test_readiness_is_503_while_draining(app_client):
    c = app_client("--served-model-name", "drain-test")
    assert c.get("/health/ready").status_code == 200
    c.app.extensions["lifecycle"].draining = True
    try:
        assert c.get("/health/ready").status_code == 503
        assert c.get("/health").status_code == 200          # liveness is unaffected
    finally:
        c.app.extensions["lifecycle"].draining = False
