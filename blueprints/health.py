"""Health, readiness, version and sleep-mode endpoints (vLLM dev-mode sleep API).

``/health`` is liveness: 200 while the process serves.  ``/health/ready`` is readiness: 503
during ``--startup-duration`` and from the moment a shutdown starts (SIGTERM, Ctrl-C), so a
load balancer stops sending requests while in-flight ones finish (:mod:`server`)."""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from time import perf_counter

from flask import Blueprint, Response, current_app, request

from generation import SIMULATOR_VERSION, vllm_version
from generation.adapters.validation import Mismatch, literal_error, pydantic_error, read_bool, read_int
from generation.errors import APIError

from .common import json_response, simulator
from .in_flight import _running, pause_scheduler

bp = Blueprint("health", __name__)
PAUSE_MODES = ("abort", "wait", "keep")        # vLLM's PauseMode (v1/engine/__init__.py)


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
    """vLLM's ``/version``: the vLLM release whose API is imitated, ``--vllm-version`` (default
    0.34.0; PEP 440, so ``packaging`` and clients' version gates parse it); the simulator's own
    version is in the ``X-Simulator-Version`` header (and on the dev-mode ``/server_info``)."""
    r = json_response({"version": vllm_version(simulator().config)})
    r.headers["X-Simulator-Version"] = f"vllm-sim/{SIMULATOR_VERSION}"
    return r


@bp.get("/load")
def load():
    """vLLM's ``GET /load``: ``{"server_load": N}``, the inference requests in flight (counted
    with ``--enable-server-load-tracking``; 0 without, as vLLM)."""
    dp = current_app.extensions.get("data_parallel")      # one API server over DP engines: all of them
    return json_response({"server_load": dp.server_load() if dp is not None else simulator().server_load})


def _query(name: str, read, default):
    """A query parameter as FastAPI's pydantic reads its type (``read``:
    :func:`~generation.adapters.validation.read_bool`, ``read_int``); anything else is vLLM's 400
    naming ``query.<name>``."""
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        return read(raw)
    except Mismatch as e:
        raise pydantic_error(name, raw, e.error, where="query") from None


def query_int(name: str, default: int | None = None) -> int | None:
    """A query integer as FastAPI's pydantic reads one (``int | None``)."""
    return _query(name, read_int, default)


def query_bool(name: str, default: bool) -> bool:
    """A query boolean as FastAPI reads one (``true``/``false``, ``1``/``0``, ``yes``/``no``,
    ``on``/``off``, ``t``/``f``, ``y``/``n``, any case)."""
    return _query(name, read_bool, default)


def query_mode(default: str) -> str:
    """``mode`` (vLLM's ``PauseMode``: ``abort`` / ``wait`` / ``keep``) of ``/sleep`` and
    ``/checkpoint/prepare``; another value is pydantic's ``literal_error`` on ``query.mode``."""
    mode = request.args.get("mode", default)
    if mode not in PAUSE_MODES:
        raise literal_error("mode", mode, PAUSE_MODES, where="query")
    return mode


def _sleep_args() -> tuple[int, str, bool]:
    """``level`` (0-2), ``mode`` (abort / wait / keep) and ``reset_connector`` of ``/sleep``, checked
    as vLLM's query parameters (``serve/dev/sleep/api_router.py``: ``level: Annotated[int,
    Query(ge=0, le=2)]``); returns ``(level, mode, reset_connector)``."""
    raw = request.args.get("level", "1")
    level = _query("level", read_int, 1)
    if level < 0:
        raise pydantic_error("level", raw, ("greater_than_equal", "Input should be greater than or equal to 0",
                                            {"ge": 0}), where="query")
    if level > 2:
        raise pydantic_error("level", raw, ("less_than_equal", "Input should be less than or equal to 2", {"le": 2}),
                             where="query")
    mode = query_mode("abort")
    return level, mode, query_bool("reset_connector", True)


def resume_scheduler(sim) -> None:
    """vLLM's ``resume_scheduler`` (``/resume``, a ``/wake_up`` that woke everything): the
    scheduler is no longer paused (:mod:`blueprints.rl`'s ``/pause``, ``/sleep``), the requests
    queued meanwhile are scheduled, and new requests are served again, unless a process
    checkpoint still holds them off."""
    sim.unpause_scheduler()
    cp = current_app.extensions.get("checkpoint")
    if cp is None or cp.state == "running":
        sim.reject_new_requests = False


def _effective(sim) -> bool:
    return sim.config.enable_sleep_mode and sim.config.vllm_dev_mode


def _engine_refuses(method: str, why: str) -> APIError:
    """A RuntimeError of vLLM's engine core in a utility call (``sleep``, ``wake_up``,
    ``release_kv_cache_memory``): the client raises ``Exception("Call to <method> method failed:
    <error>")``, which vLLM's catch-all handler answers as a 500."""
    return APIError(f"Call to {method} method failed: {why}", 500)


def _checkpoint_running() -> None:
    """vLLM refuses to sleep while a process checkpoint is prepared (``EngineCore.sleep``)."""
    cp = current_app.extensions.get("checkpoint")
    if cp is not None and cp.state != "running":
        raise _engine_refuses("sleep", f"Cannot sleep while the checkpoint state is {cp.state}")


@bp.post("/sleep")
def sleep():
    """vLLM's ``/sleep?level=0|1|2&mode=abort|wait|keep&reset_connector=true`` (with
    ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``), as vLLM 0.34's ``EngineCore.sleep``:
    the scheduler is paused first (``pause_scheduler(mode)``: ``abort``, the default, aborts the
    requests in flight, their answers ending as ``/abort_requests``' do; ``wait`` answers once
    the running ones have finished; ``keep`` leaves them, frozen until the wake-up).  New requests
    are not refused (a sleep leaves ``reject_new_requests`` as it was): they wait in the queue
    until a ``/wake_up`` that wakes everything (or ``/resume``).  Level 0 is that pause only;
    1 and 2 also empty the prefix cache (``AllBlocksCleared``) and put the weights and KV cache
    to sleep (``reset_connector`` has no connector to reset).  ``vllm:engine_sleep_state``
    records ``(1, level)``.  Answers ``{"status": "sleeping", "level": L}``; without the flags a
    no-op 200 with no body."""
    sim = simulator()
    if not _effective(sim):
        return Response(b"", 200)
    level, mode, _reset_connector = _sleep_args()
    with _operation(sim, "sleep"):
        _checkpoint_running()
        pause_scheduler(sim, mode, reject_new=False)
        if level >= 1:
            if "weights" not in sim.sleeping_tags:  # Executor.sleep: "already sleeping" does nothing
                sim.sleeping_tags = set(sim.sleeping_tags) | set(sim.SLEEP_TAGS)
            if sim.kv_cache is not None:
                sim.kv_cache.sleep()
        sim.recorded_sleep = (1, level)             # AsyncLLM.sleep: record_sleep_state(1, level)
    return json_response({"status": "sleeping", "level": level})


@contextmanager
def _operation(sim, operation: str):
    """vLLM 0.34's ``sleep_mode_operation_metrics().record(operation)`` around a dev-mode
    sleep-mode operation: its duration observed when it ends, failed or not."""
    started = perf_counter()
    try:
        yield
    finally:
        sim.metrics.sleep_operation(operation, perf_counter() - started)


@bp.post("/release_kv_cache_memory")
def release_kv_cache_memory():
    """vLLM's ``/release_kv_cache_memory?reset_connector=true`` (same conditions as ``/sleep``):
    the KV cache alone is discarded (emptied; tag ``kv_cache`` asleep, so ``is_sleeping`` is
    true until ``/wake_up``); the weights stay.  Answers ``{"status": "kv_cache_released"}``.
    As vLLM 0.34's ``EngineCore.release_kv_cache_memory``, it needs a completed pause (``/pause``
    or ``/sleep?level=0``, nothing running or queued) and nothing asleep, else a 500."""
    sim = simulator()
    if not _effective(sim):
        return Response(b"", 200)
    query_bool("reset_connector", True)
    with _operation(sim, "release_kv_cache_memory"):
        engine = sim.engine
        queued = engine.scheduler.waiting if engine is not None else sim.waiting
        if not sim.scheduler_paused or _running(sim) or queued:
            raise _engine_refuses("release_kv_cache_memory",
                                  "release_kv_cache_memory() requires a completed pause first")
        if sim.sleeping:
            raise _engine_refuses("release_kv_cache_memory",
                                  "release_kv_cache_memory() requires all executor memory to be resident")
        sim.sleeping_tags = set(sim.sleeping_tags) | {"kv_cache"}
        if sim.kv_cache is not None:
            sim.kv_cache.sleep()
        sim.recorded_sleep = (1, 0)
    return json_response({"status": "kv_cache_released"})


@bp.post("/wake_up")
def wake_up():
    """vLLM's ``/wake_up[?tags=weights&tags=kv_cache&tags=scheduling]``: wakes the tags given
    (all without any; ``scheduling`` is no executor tag: vLLM's ``EngineCore.wake_up`` drops it);
    a tag that is not asleep wakes nothing, as vLLM's executor.  Once nothing sleeps (after a
    level-0 sleep at once) the scheduler resumes: the requests queued while asleep run, and
    ``vllm:engine_sleep_state`` records awake; until then ``is_sleeping`` stays true (RL
    frameworks wake the weights first, then the KV cache).  Answers ``{"status": "awake" |
    "sleeping", "tags": [...] | null}``."""
    sim = simulator()
    tags = request.args.getlist("tags")
    with _operation(sim, "wake") if _effective(sim) else nullcontext():
        cp = current_app.extensions.get("checkpoint")
        if _effective(sim) and cp is not None and cp.state not in ("running", "restoring"):
            raise _engine_refuses("wake_up", f"Cannot wake up while the checkpoint state is {cp.state}")
        if sim.wake_up(tags) and sim.kv_cache is not None:
            sim.kv_cache.wake()
    if not _effective(sim):
        return Response(b"", 200)
    fully_awake = not sim.sleeping
    if fully_awake:                  # vLLM's EngineCore.wake_up: fully awake resumes scheduling
        resume_scheduler(sim)
        sim.recorded_sleep = (0, 0)  # AsyncLLM.wake_up: record_sleep_state(0, 0)
    return json_response({"status": "awake" if fully_awake else "sleeping", "tags": tags or None})


@bp.get("/is_sleeping")
def is_sleeping():
    """vLLM 0.34's ``EngineCore.is_sleeping``: the scheduler paused (``/pause``, ``/sleep`` at
    any level, a checkpoint prepare) or the executor asleep (``/sleep`` level 1-2,
    ``/release_kv_cache_memory``, until woken)."""
    sim = simulator()
    cp = current_app.extensions.get("checkpoint")
    checkpoint_paused = cp is not None and cp.state in ("preparing", "prepared")
    return json_response({"is_sleeping": sim.sleeping or sim.scheduler_paused or checkpoint_paused})
