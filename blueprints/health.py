"""Health, readiness, version and sleep-mode endpoints (vLLM dev-mode sleep API).

``/health`` is liveness: 200 while the process serves.  ``/health/ready`` is readiness: 503
during ``--startup-duration`` and from the moment a shutdown starts (SIGTERM, Ctrl-C), so a
load balancer stops sending requests while in-flight ones finish (:mod:`server`)."""
from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, request

from generation import SIMULATOR_VERSION, VLLM_VERSION

from .common import json_response, simulator

bp = Blueprint("health", __name__)


class Lifecycle:
    """Process state the probes report; ``app.extensions["lifecycle"]``."""

    def __init__(self):
        self.draining = False


@bp.get("/health")
@bp.get("/health/")
def health():
    return Response(b"", 200, mimetype="application/json")


@bp.get("/health/ready")
def ready():
    sim = simulator()
    lifecycle = current_app.extensions.get("lifecycle")
    if (lifecycle is not None and lifecycle.draining) or \
            time.monotonic() - sim.started < sim.config.startup_duration:
        return Response(b"", 503, mimetype="application/json")
    return Response(b"", 200, mimetype="application/json")


@bp.route("/ping", methods=["GET", "POST"])
def ping():
    return Response(b"", 200, mimetype="application/json")


@bp.get("/version")
def version():
    """vLLM's ``/version``: the vLLM release whose API is imitated (PEP 440, so ``packaging``
    and clients' version gates parse it); the simulator's own version is in the
    ``X-Simulator-Version`` header (and on the dev-mode ``/server_info``)."""
    r = json_response({"version": VLLM_VERSION})
    r.headers["X-Simulator-Version"] = f"vllm-sim/{SIMULATOR_VERSION}"
    return r


@bp.get("/load")
def load():
    """vLLM's ``GET /load``: ``{"server_load": N}``, the inference requests in flight (counted
    with ``--enable-server-load-tracking``; 0 without, as vLLM)."""
    return json_response({"server_load": simulator().server_load})


@bp.post("/sleep")
def sleep():
    """vLLM's ``/sleep?level=1|2`` (with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``):
    weights and KV cache both asleep; the simulated KV cache is emptied."""
    sim = simulator()
    if sim.config.enable_sleep_mode and sim.config.vllm_dev_mode:
        level = request.args.get("level", "1")
        sim.sleep_level = 2 if level == "2" else 1
        sim.sleeping = True
        if sim.kv_cache is not None:
            sim.kv_cache.sleep()
    return Response(b"", 200)


@bp.post("/wake_up")
def wake_up():
    """vLLM's ``/wake_up[?tags=weights&tags=kv_cache]``: wakes the tags given (all without
    any); ``is_sleeping`` stays true until both are awake (RL frameworks wake the weights
    first, then the KV cache).  A tag that is not asleep wakes nothing, as vLLM's executor."""
    sim = simulator()
    if sim.wake_up(request.args.getlist("tags")) and sim.kv_cache is not None:
        sim.kv_cache.wake()
    return Response(b"", 200)


@bp.get("/is_sleeping")
def is_sleeping():
    return json_response({"is_sleeping": simulator().sleeping})
