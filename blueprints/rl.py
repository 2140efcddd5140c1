"""vLLM 0.34's RL routes (``entrypoints/rl/online/api_router.py``), registered with
``VLLM_SERVER_DEV_MODE=1`` only (``register_rl_api_routers``, after the dev routes), as online
RL trainers drive a rollout server between weight updates:

* ``POST /pause?mode=abort|wait|keep&clear_cache=true``: pauses the scheduler.  ``abort``
  (default) aborts the requests in flight (their answers finish with ``finish_reason``
  ``abort``, as :mod:`blueprints.engine_ops` aborts them), ``wait`` answers once the running ones
  have finished, ``keep`` leaves them (vLLM freezes them until ``/resume``: so do step mode and,
  by generation.engine.freeze, the default latency model).  From ``abort`` or ``wait`` until ``/resume`` a
  new generation request is refused as vLLM's paused engine refuses it (503
  ``ServiceUnavailableError``, ``Generation is paused. Please retry after it resumes.``);
  ``keep`` accepts them and queues them until ``/resume`` (PAUSED_ALL).  ``/sleep`` pauses
  through the same :func:`blueprints.engine_ops.pause_scheduler`, without the refusal.  ``clear_cache`` (not with
  ``keep``) empties the prefix cache once drained.  Answers ``{"status": "paused"}``; a
  ``mode`` other than the three is FastAPI's 400 on ``query.mode``.
* ``POST /resume``: ``{"status": "resumed"}``; while a process checkpoint is prepared (or
  preparing) vLLM's engine refuses (``resume_scheduler``), the route's 500 ``{"error":
  "Failed to resume generation: ..."}``.
* ``GET /is_paused``: ``{"is_paused": bool}``: paused by ``/pause``, by ``/sleep`` (vLLM's
  sleep pauses the scheduler first; a level-0 sleep is that pause only, so ``/resume`` ends
  it) or by a checkpoint prepare, until ``/resume``, a full ``/wake_up`` or the restore.
  ``/is_sleeping`` is true while paused too (vLLM 0.34's ``EngineCore.is_sleeping``).
* ``POST /abort_requests``: the body read as vLLM's route reads it (any Content-Type; a body
  ``json.loads`` refuses, an empty one included, is the 400 ``Invalid JSON format``; one that
  is not an object ``Request body must be a JSON object``); ``request_ids`` (a list, or one
  id) aborts those requests, none or an empty list every request in flight.  Answers
  ``{"status": "aborted", "aborted": N}``: N is how many ids were given, or how many requests
  were in flight, as vLLM counts.  It takes the path from the ``--tokens-only`` one, as in
  vLLM, whose RL router is registered first.
* ``GET /get_world_size?include_dp=true``: ``{"world_size": N}``, the tensor-parallel size
  times the pipeline-parallel size times the data-parallel size (every node's; without: TP x PP).

The weight-transfer and weight-version routes (``/init_weight_transfer_engine``,
``/update_weights``, ``/update_weight_version``, ``/weight_info``, ...) are
:mod:`blueprints.rl_weights`'s; ``/weight_checker`` is not served (no weights to checksum).
"""
from __future__ import annotations

import logging

from flask import Blueprint, current_app, request

from generation.errors import APIError

from .common import json_response, simulator
from .vllm_bodies import starlette_json
from .in_flight import _abort, _in_flight, abort_count, external_id, pause_scheduler
from .health import query_bool, query_mode, resume_scheduler

log = logging.getLogger("vllm_sim")


def _checkpoint_state() -> str:
    cp = current_app.extensions.get("checkpoint")
    return "running" if cp is None else cp.state


def paused(sim) -> bool:
    """vLLM's ``is_scheduler_paused``: by ``/pause``, ``/sleep`` (any level) or a checkpoint
    prepare, until ``/resume``, a full ``/wake_up`` or the restore."""
    return sim.scheduler_paused or _checkpoint_state() in ("preparing", "prepared")


def pause():
    mode = query_mode("abort")
    clear_cache = query_bool("clear_cache", True)
    sim = simulator()
    pause_scheduler(sim, mode, reject_new=True)      # vLLM's pause_generation
    if mode != "keep" and clear_cache and sim.kv_cache is not None:
        sim.kv_cache.reset_prefix_cache(False)
    return json_response({"status": "paused"})


def resume_route():
    sim = simulator()
    state = _checkpoint_state()
    if state not in ("running", "restoring"):        # vLLM's CheckpointState.is_restored
        log.error("Failed to resume generation")
        return json_response({"error": "Failed to resume generation: Call to resume_scheduler method failed: "
                                       f"Cannot resume scheduling while the checkpoint state is {state}"}, 500)
    resume_scheduler(sim)
    return json_response({"status": "resumed"})


def is_paused():
    return json_response({"is_paused": paused(simulator())})


def abort_requests():
    body = starlette_json(request.get_data(cache=False), "Invalid JSON format")
    if not isinstance(body, dict):
        raise APIError("Request body must be a JSON object", 400, None, "Bad Request")
    ids = body.get("request_ids")
    sim = simulator()
    engines = sim.dp_peers or (sim,)                 # one API server over DP engines: all of theirs
    if ids:
        if not isinstance(ids, (str, list, dict)):
            # vLLM's engine.abort iterates them and its except answers a 500; a client's mistake
            # is a 400 here (the project's rule), in the same envelope and words
            raise APIError(f"Failed to abort requests: request_ids: '{type(ids).__name__}' object is not iterable",
                           400, "request_ids", "Bad Request")
        wanted = {ids} if isinstance(ids, str) else {i for i in ids if isinstance(i, str)}
        for engine in engines:
            _abort(engine, [s for s in _in_flight(engine) if external_id(s) in wanted])
        count = len(ids)                             # vLLM: len(request_ids), as given
    else:
        # one OutputProcessor over every engine: a parent whose children run on several
        # engines is one parallel-sampling parent, not one per engine
        per_engine = [(engine, _in_flight(engine)) for engine in engines]
        count = abort_count([s for _, in_flight in per_engine for s in in_flight])
        for engine, in_flight in per_engine:
            _abort(engine, in_flight)
    return json_response({"status": "aborted", "aborted": count})


def get_world_size():
    cfg = simulator().config
    size = max(cfg.tensor_parallel_size, 1) * max(getattr(cfg, "pipeline_parallel_size", 1), 1)     # vLLM: TP x PP
    if query_bool("include_dp", True):
        size *= max(getattr(cfg, "data_parallel_size_total", None) or cfg.data_parallel_size, 1)   # every node's
    return json_response({"world_size": size})


def register(app) -> None:
    """The RL router, in vLLM's order (dev mode only: :func:`blueprints.dev.register`)."""
    bp = Blueprint("rl", __name__)
    bp.add_url_rule("/pause", view_func=pause, methods=["POST"])
    bp.add_url_rule("/resume", "resume", view_func=resume_route, methods=["POST"])
    bp.add_url_rule("/abort_requests", view_func=abort_requests, methods=["POST"])
    bp.add_url_rule("/is_paused", view_func=is_paused, methods=["GET"])
    bp.add_url_rule("/get_world_size", view_func=get_world_size, methods=["GET"])
    from . import rl_weights
    rl_weights.register(bp)
    app.register_blueprint(bp)
