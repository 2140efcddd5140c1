"""``GET /metrics`` - Prometheus text exposition of the simulator's registry."""
from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from .common import simulator

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics():
    sim = simulator()      # collectors read running / waiting / KV usage / LoRA state now
    return Response(sim.metrics.render(), 200, content_type=CONTENT_TYPE_PLAIN_0_0_4)
