"""vLLM 0.34's RL weight routes (``entrypoints/rl/online/api_router.py``), registered with the
other RL routes (:mod:`blueprints.rl`, ``VLLM_SERVER_DEV_MODE=1`` only), as an online RL trainer
drives them around a weight update:

* ``POST /init_weight_transfer_engine`` ``{"init_info": {...}}``, ``POST
  /shutdown_weight_transfer_engine``, ``POST /start_weight_update``, ``POST
  /start_draft_weight_update``, ``POST /update_weights`` ``{"update_info": {...} | [{...}]}``,
  ``POST /finish_weight_update`` ``{"weight_version": "..."}`` (optional): each a
  ``collective_rpc`` to the workers (``AsyncLLM``), answered ``{"message": "..."}``.  The
  workers' rules (``v1/worker/gpu_worker.py``) hold: without ``--weight-transfer-config``
  every one but the shutdown fails ``Weight transfer not configured. ...``; ``start`` while an
  update is active, ``update_weights`` or ``finish`` without one, a shutdown during one, and a
  draft update without a speculative draft model fail too.  A worker's failure is the route's
  500 (:func:`generation.errors.rpc_failure`: ``Call to collective_rpc method failed: ...``).  No
  weights move: the backend's own handshake (an NCCL group, CUDA IPC handles) is not joined and
  ``init_info`` / ``update_info`` are taken unread, so a trainer that waits on its side of an
  NCCL group waits for ever.  ``finish`` with a ``weight_version`` sets the label.
* ``POST /update_weight_version`` ``{"new_version": "..."}``: ``{"success": true,
  "new_version": ...}``; ``GET /weight_info``: ``{"weight_version": ...}`` (``"default"`` at
  start).  The label reaches each answer's ``weight_versions``
  (:mod:`generation.engine.weight_versions`).

Bodies are read as FastAPI reads ``Body(embed=True)`` parameters: JSON only under a JSON
``Content-Type`` (anything else, or a JSON value that is not an object, has no fields: ``Field
required``), pydantic's errors as vLLM's validation handler answers them (``body.<field>``).
The operations' ``vllm:rl_weight_update_operation_duration_seconds`` and ``_in_flight``
families appear on ``/metrics`` from the first operation (``weight_operation_metrics``: lazy;
:meth:`~generation.metrics.frontend.FrontendMetrics.weight_operation`).
``/weight_checker`` is not served: its checksums are of weights the simulator does not have.
"""
from __future__ import annotations

from contextlib import contextmanager
from time import perf_counter

import orjson
from flask import Blueprint, current_app, request

from generation.adapters.validation import Mismatch, body_unparsable, read_dict, read_fields, read_str
from generation.adapters.wide_ints import hold
from generation.engine.weight_versions import set_weight_version
from generation.config.values import global_dp_rank
from generation.errors import rpc_failure

from .common import json_response, simulator
from .in_flight import _in_flight

NOT_CONFIGURED = "Weight transfer not configured. Please set weight_transfer_config to enable weight transfer."


class WeightTransfer:
    """A rank's weight-transfer state (``Worker.weight_transfer_engine`` and its
    ``_weight_update_active``): ``configured`` by ``--weight-transfer-config``."""

    def __init__(self, configured: bool):
        self.configured = configured
        self.active = False

    def check(self) -> None:
        if not self.configured:
            raise RuntimeError(NOT_CONFIGURED)


def _state() -> WeightTransfer:
    ext = current_app.extensions
    state = ext.get("weight_transfer")
    if state is None:
        state = ext["weight_transfer"] = WeightTransfer("weight-transfer-config" in simulator().config.ignored_flags)
    return state


@contextmanager
def _operation(name: str):
    """``weight_operation_metrics().record(name)``: the operation's time observed
    (``MetricsRecorder.weight_operation``); a worker's RuntimeError becomes the route's 500."""
    started = perf_counter()
    try:
        yield
    except RuntimeError as e:
        raise rpc_failure(simulator().config, str(e)) from None
    finally:
        simulator().metrics.weight_operation(name, perf_counter() - started)


def _body(fields) -> dict:
    """The embedded body fields ``fields`` (``(name, reader, default)``; no default: required)
    as FastAPI reads them (module docstring)."""
    raw = request.get_data(cache=False)
    ctype = request.mimetype or ""
    body = None
    if raw and (ctype == "application/json" or ctype.endswith("+json")):
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise body_unparsable(raw, e) from None
        if isinstance(body, dict):
            hold((body, raw))            # an integer past 64 bits echoed digit for digit, as json.loads reads it
    return read_fields(body if isinstance(body, dict) else {}, fields, missing_input=None)


def _update_info(v):
    """``dict[str, Any] | list[dict[str, Any]]``: pydantic tries both members."""
    if isinstance(v, dict) or (isinstance(v, list) and all(isinstance(item, dict) for item in v)):
        return v
    raise Mismatch("dict_type", "Input should be a valid dictionary")


def init_weight_transfer_engine():
    _body((("init_info", read_dict),))
    state = _state()
    with _operation("init"):
        state.check()
    return json_response({"message": "Weight transfer initialized"})


def shutdown_weight_transfer_engine():
    state = _state()
    with _operation("shutdown"):
        if state.active:
            raise RuntimeError("Cannot release a trainer connection during a weight update")
    return json_response({"message": "Weight transfer shut down"})


def _start(draft: bool) -> None:
    state = _state()
    state.check()
    if draft:                     # no speculative draft model is served (a target-model engine)
        raise RuntimeError("Draft model weight update requested, but no draft model is configured.")
    if state.active:
        raise RuntimeError("start_weight_update called while a weight update is already active. "
                           "Call finish_weight_update first.")
    state.active = True


def start_weight_update():
    with _operation("start"):
        _start(False)
    return json_response({"message": "Weight update started"})


def start_draft_weight_update():
    with _operation("start_draft"):
        _start(True)
    return json_response({"message": "Draft weight update started"})


def update_weights():
    info = _body((("update_info", _update_info),))["update_info"]
    state = _state()
    with _operation("update"):
        state.check()
        if not state.active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        cfg = simulator().config
        tp = max(cfg.tensor_parallel_size, 1)
        if isinstance(info, list) and len(info) < (global_dp_rank(cfg) + 1) * tp:
            # each worker takes update_info[data_parallel_index * world_size + rank]: a list too
            # short is an IndexError in the last ones, which end the update (_end_weight_update)
            state.active = False
            raise RuntimeError("list index out of range")
    return json_response({"message": "Weights updated"})


def finish_weight_update():
    version = _body((("weight_version", read_str, None),))["weight_version"]
    state = _state()
    with _operation("finish"):
        state.check()
        if not state.active:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update.")
        state.active = False
    if version is not None:
        _set_version(version)
    return json_response({"message": "Weight update finished"})


def _set_version(version: str) -> None:
    sim = simulator()
    set_weight_version(sim, version, _in_flight(sim))


def update_weight_version():
    version = _body((("new_version", read_str),))["new_version"]
    _set_version(version)
    return json_response({"success": True, "new_version": version})


def weight_info():
    return json_response({"weight_version": simulator().weight_version})


def register(bp: Blueprint) -> None:
    """The weight routes on the RL router ``bp``, in vLLM's order."""
    for view in (init_weight_transfer_engine, shutdown_weight_transfer_engine, start_weight_update,
                 start_draft_weight_update, update_weights, finish_weight_update, update_weight_version):
        bp.add_url_rule("/" + view.__name__, view_func=view, methods=["POST"])
    bp.add_url_rule("/weight_info", view_func=weight_info, methods=["GET"])
