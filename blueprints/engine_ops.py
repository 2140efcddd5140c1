"""vLLM 0.34's engine-operation routes: process checkpoints, fault tolerance and aborting
requests by id.

* ``POST /checkpoint/prepare?mode=wait|abort|keep``, ``POST /checkpoint/restore``, ``GET
  /checkpoint/status`` (registered with ``--enable-sleep-mode`` only, as vLLM's router): the
  checkpoint lifecycle ``running -> preparing -> prepared -> running``.  Preparing drains the
  requests in flight (``abort`` aborts them, ``wait`` and ``keep`` let them finish), then
  releases the KV cache (the cache is emptied and ``is_sleeping`` is true until the restore
  wakes it).  From ``wait`` or ``abort`` until the restore a new generation request is refused
  as vLLM's paused engine refuses it (``EngineCore._reject_add_while_paused``): 503
  ``ServiceUnavailableError`` ``Generation is paused. Please retry after it resumes.``, or
  within a stream that already answered 200 (chat's in-stream error names it
  ``InternalServerError``, as vLLM's chat stream generator does); ``keep`` accepts them (vLLM
  holds them, and the requests in flight, until the restore; the simulator serves them).
  Every answer is ``{"state": S}``; status is 200 once ``prepared``, 503 before,
  500 after a failure; prepare refuses (400, with ``error``) an engine that is asleep, restore
  one that is still ``preparing``.  ``--checkpoint-prepare-on-startup`` starts prepared.
* ``POST /v1/fault_tolerance/apply``, ``GET /v1/fault_tolerance/status`` (with
  ``--enable-fault-tolerance``; vLLM 0.33 served them without ``/v1``): apply checks the body
  (``instruction`` ``retry`` or ``scale_down``, ``params`` an object, ``request_id`` a non-empty
  string) and answers 202; a simulated engine has no fault to recover from, so status always
  reports it healthy: ``{"schema_version": 1, "total_engines": 1, "engines": [{"id": rank,
  "status": "healthy"}]}``.
* ``POST /scale_elastic_ep``, ``POST /is_scaling_elastic_ep`` (``serve/elastic_ep/api_router.py``,
  every generation model): answered as by a vLLM deployment without elastic expert parallelism.
  Scale checks its JSON body in vLLM's words (``new_data_parallel_size`` required and a positive
  integer, ``drain_timeout`` a positive integer, default 120; HTTPExceptions: ``type`` the
  status phrase), then the engine's answer: the data-parallel size it already has is a no-op,
  200 ``{"message": "Scaled to N data parallel engines"}``; any other size fails there
  (``AsyncMPClient.prepare_elastic_ep`` raises NotImplementedError, the DP clients need elastic
  EP / Ray), vLLM's 500 ``Scale failed``.  The status is always idle:
  ``{"is_scaling_elastic_ep": false, "phase": "idle", "epoch": null, "error": null,
  "requested_data_parallel_size": null}``.
* ``POST /inference/v1/abort_requests`` (vLLM's disaggregated-serving route): ``request_ids``
  a string or a list of strings (else vLLM's 400), matched against the external ids vLLM's
  serving layer gives its engine requests (:func:`blueprints.in_flight.external_id`:
  ``chatcmpl-<id>`` for a chat or a Message, ``cmpl-<id>-<i>`` for a completion's prompt ``i``,
  ``generate-tokens-<id>``, ``<response id>_0``; ``<id>`` the ``X-Request-Id`` header or the
  body's ``request_id``); answers 200 with
  an empty body, whatever matched.  ``--tokens-only`` also serves it as ``POST
  /abort_requests``, as vLLM 0.34.

An aborted request (abort_requests, or ``/checkpoint/prepare?mode=abort``) stops generating at
once and its answer finishes as vLLM's, whose ``OutputProcessor.abort_requests`` (and
``EngineCore._send_abort_outputs``) hands each one a final output with no new tokens and
``finish_reason`` ``abort``: a stream (chat, completions, generate) closes each unfinished
choice with a ``finish_reason: "abort"`` chunk, then its usage chunk when asked (counting the
tokens streamed) and ``data: [DONE]``; a non-streamed answer is a 200 with the tokens made so
far and ``finish_reason: "abort"`` (:meth:`Sequence.end_with_abort
<generation.engine.request.Sequence.end_with_abort>`).  Anthropic ``/v1/messages`` finishes the
same way with ``stop_reason`` null (vLLM's ``_to_anthropic_stop_reason`` has none for
``abort``): a stream closes its open block, then ``message_delta`` (the usage of the tokens
streamed) and ``message_stop``; a Cohere v2 chat stream closes its open block, then
``message-end`` (``finish_reason`` ``COMPLETE``, vLLM's map of ``abort``).  A Responses API
stream, foreground or background, closes the item it was streaming (``completed``: vLLM's
``response_item_status`` makes only ``length`` ``incomplete``) and ends with
``response.completed`` (``status`` ``completed``, the usage of the tokens streamed: vLLM's
``responses_full_generator`` with a simple context; a stored one reads the same, not
``failed``); a transcription or translation stream sends, for each cut engine request (30 s
chunk), a chunk with empty text, ``finish_reason`` ``abort`` and ``stop_reason`` null, then its
usage chunk and ``[DONE]`` (vLLM's ``_speech_to_text_stream_generator``).  A non-streamed
answer of any generation route is rendered from what was made (a response ``completed``, as
vLLM's simple context reports it); only ``/v1/audio/speech`` (the reference's, not vLLM's)
still ends as if its client had gone.
"""
from __future__ import annotations

import logging

import orjson
from flask import Blueprint, Response, current_app, request

from generation.engine.engine_state import PAUSED_ALL
from generation.config.values import global_dp_rank
from generation.errors import APIError, InvalidParam, UnsupportedMediaType

from .common import json_response, loads_body, simulator
from .vllm_bodies import bare_response, starlette_json
from .health import query_mode
from .in_flight import _abort, _in_flight, _running, external_id

log = logging.getLogger("vllm_sim")

FT_INSTRUCTIONS = ("retry", "scale_down")


# ---- checkpoint ------------------------------------------------------------------------------------

class Checkpoint:
    """The process-checkpoint state of this engine (``app.extensions["checkpoint"]``): vLLM's
    ``CheckpointState`` values ``running``, ``preparing``, ``prepared``, ``restoring``,
    ``failed``; ``error`` the reason of a failure."""

    def __init__(self):
        self.state = "running"
        self.error: str | None = None

    def refresh(self, sim) -> None:
        """``preparing`` becomes ``prepared`` once the pause is complete (vLLM's ``_pause_complete``:
        nothing running; with ``keep`` at once, the requests frozen): the KV cache is then
        released (emptied, tag ``kv_cache`` asleep).  Queued requests stay queued."""
        if self.state == "preparing" and (sim.pause_state == PAUSED_ALL or not _running(sim)):
            sim.sleeping_tags = set(sim.sleeping_tags) | {"kv_cache"}
            if sim.kv_cache is not None:
                sim.kv_cache.sleep()
            self.state = "prepared"

    def prepare(self, sim, mode: str) -> str | None:
        """Start preparing (a no-op when already preparing or prepared).  Returns why the
        engine cannot prepare, with nothing changed, or None."""
        if self.state in ("preparing", "prepared"):
            return None
        if self.state != "running":
            return f"Cannot prepare while the checkpoint state is {self.state}"
        if sim.sleeping:
            return "Preparing for a checkpoint requires an awake engine"
        self.state = "preparing"
        sim.pause_scheduler(mode)                    # vLLM's pause_generation: the scheduler pauses,
        sim.reject_new_requests = mode != "keep"     # and refuses new requests (keep queues them)
        if mode == "abort":
            _abort(sim, _in_flight(sim))
        self.refresh(sim)
        return None

    def restore(self, sim) -> None:
        """``prepared`` -> ``running``: the KV cache wakes up (cache intact after a restore
        in progress or done: a no-op)."""
        if self.state != "prepared":
            return
        self.state = "restoring"
        if sim.wake_up(["kv_cache"]) and sim.kv_cache is not None:
            sim.kv_cache.wake()
        sim.unpause_scheduler()                      # vLLM's wake_up, fully awake: resume_scheduler
        sim.reject_new_requests = False
        self.state = "running"


def checkpoint_of(app) -> Checkpoint:
    cp = app.extensions.get("checkpoint")
    if cp is None:
        cp = app.extensions["checkpoint"] = Checkpoint()
    return cp


def _state(cp: Checkpoint, status: int) -> Response:
    body = {"state": cp.state}
    if cp.error is not None:
        body["error"] = cp.error
    return json_response(body, status)


def checkpoint_prepare():
    mode = query_mode("wait")          # vLLM: checkpoint_prepare(mode: PauseMode = "wait"), a query parameter
    sim = simulator()
    cp = checkpoint_of(current_app)
    cp.refresh(sim)
    if cp.state == "running":
        refusal = cp.prepare(sim, mode)
        if refusal:
            return json_response({"state": cp.state, "error": refusal}, 400)
    elif cp.state in ("restoring", "failed"):
        return _state(cp, 400)
    return _state(cp, 200)


def checkpoint_restore():
    sim = simulator()
    cp = checkpoint_of(current_app)
    cp.refresh(sim)
    if cp.state in ("preparing", "failed"):
        return _state(cp, 400)
    cp.restore(sim)
    return _state(cp, 200)


def checkpoint_status():
    cp = checkpoint_of(current_app)
    cp.refresh(simulator())
    return _state(cp, {"prepared": 200, "failed": 500}.get(cp.state, 503))


# ---- fault tolerance -------------------------------------------------------------------------------

def _bad_request(message: str) -> APIError:
    """vLLM's ``HTTPException(400, detail)`` as its http_exception_handler answers it."""
    return APIError(message, 400, None, "Bad Request")


def fault_tolerance_apply():
    # vLLM's json.loads of the body: an empty one is "Invalid JSON format" too (it was read as null)
    body = starlette_json(request.get_data(cache=False), "Invalid JSON format")
    if not isinstance(body, dict):
        raise _bad_request("Request body must be a JSON object.")
    instruction = body.get("instruction")
    if not instruction:
        raise _bad_request("'instruction' is required.")
    if instruction not in FT_INSTRUCTIONS:
        raise _bad_request(f"Invalid instruction: '{instruction}'.")
    if not isinstance(body.get("params", {}), dict):
        raise _bad_request("'params' must be an object.")
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise _bad_request("'request_id' must be a non-empty string.")
    log.info("[FT] %s accepted (request %s): the simulated engine is healthy", instruction, request_id)
    return json_response({"message": "Request accepted; poll /v1/fault_tolerance/status for updates.",
                          "request_id": request_id}, 202)


def fault_tolerance_status():
    rank = global_dp_rank(simulator().config)
    return json_response({"schema_version": 1, "total_engines": 1, "engines": [{"id": rank, "status": "healthy"}]})


# ---- elastic expert parallelism ----------------------------------------------------------------------

DRAIN_TIMEOUT = 120          # s: vLLM's default drain_timeout ("Default 2 minutes")
# vllm/distributed/elastic_ep/external_elastic_ep.py ExternalElasticEPScalePhase.IDLE
IDLE = {"is_scaling_elastic_ep": False, "phase": "idle", "epoch": None, "error": None,
        "requested_data_parallel_size": None}


def scale_elastic_ep():
    """vLLM 0.34's ``scale_elastic_ep`` route on a deployment without elastic EP (see the
    module docstring).  Its checks are ``HTTPException``s raised in the route, which vLLM's
    ``http_exception_handler`` answers in its envelope with the status phrase as ``type``; a
    body that is JSON but not an object is a 400 here (vLLM's ``body.get`` fails: a 500)."""
    ctype = request.environ.get("CONTENT_TYPE", "")
    if ctype.split(";", 1)[0].lower() != "application/json":
        raise UnsupportedMediaType()                  # the route's validate_json_request
    try:
        body = loads_body(request.get_data(cache=False))
    except orjson.JSONDecodeError:
        raise _bad_request("Invalid JSON format") from None
    if not isinstance(body, dict):
        raise _bad_request("Request body must be a JSON object.")
    new_size = body.get("new_data_parallel_size")
    drain_timeout = body.get("drain_timeout", DRAIN_TIMEOUT)
    if new_size is None:
        raise _bad_request("new_data_parallel_size is required")
    # isinstance(..., int) as vLLM's: a JSON true passes (and is 1 to the size comparison below)
    if not isinstance(new_size, int) or new_size <= 0:
        raise _bad_request("new_data_parallel_size must be a positive integer")
    if not isinstance(drain_timeout, int) or drain_timeout <= 0:
        raise _bad_request("drain_timeout must be a positive integer")
    size = simulator().config.data_parallel_size
    if new_size == size:                  # AsyncLLM._scale_elastic_ep: "already N, skipping scale"
        return json_response({"message": f"Scaled to {new_size} data parallel engines"})
    log.error("Scale failed: scaling from %d to %s data parallel engines needs elastic EP", size, new_size)
    raise APIError("Scale failed", 500, None, "Internal Server Error")


def is_scaling_elastic_ep():
    """vLLM 0.34's ``is_scaling_elastic_ep``: no external elastic-EP coordinator
    (``get_external_elastic_ep_status`` is None), never scaling: the idle phase."""
    return json_response(IDLE)


# ---- abort_requests --------------------------------------------------------------------------------

def abort_requests():
    """vLLM's ``AbortRequestsRequest``: ``request_ids`` a string or a list of strings.  Any
    Content-Type is accepted, as vLLM's route reads the body itself (``await
    raw_request.json()``: an empty body, or one ``json.loads`` refuses, is its 400 ``JSON decode
    error: ...`` in ``json``'s words; orjson's and a "valid dictionary" 400 before)."""
    body = starlette_json(request.get_data(cache=False))
    if not isinstance(body, dict):
        raise InvalidParam("Input should be a valid dictionary or instance of AbortRequestsRequest.", "body")
    ids = body.get("request_ids")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        # vLLM's RequestValidationError: param from the first error's loc, ("body", "request_ids", "str")
        raise InvalidParam("request_ids: Input should be a valid string or a list of strings.", "body.request_ids")
    wanted = set(ids)
    sim = simulator()
    for engine in sim.dp_peers or (sim,):       # one API server over DP engines: wherever they run
        hit = [s for s in _in_flight(engine) if external_id(s) in wanted]
        if hit:
            _abort(engine, hit)
    return bare_response()


def register_fault_tolerance(app, config) -> None:
    """``--enable-fault-tolerance``: the two routes, for every model (vLLM 0.34's
    ``register_api_routers`` adds them outside its task checks: a pooling model's too)."""
    if not config.enable_fault_tolerance:
        return
    bp = Blueprint("fault_tolerance", __name__)
    bp.add_url_rule("/v1/fault_tolerance/apply", view_func=fault_tolerance_apply, methods=["POST"])
    bp.add_url_rule("/v1/fault_tolerance/status", view_func=fault_tolerance_status, methods=["GET"])
    app.register_blueprint(bp)


def register(app, config) -> None:
    """Register the routes vLLM registers for this configuration: abort_requests and the
    elastic-EP pair always (a generation model's), the checkpoint routes with
    ``--enable-sleep-mode`` (fault tolerance: :func:`register_fault_tolerance`, every model's);
    ``--checkpoint-prepare-on-startup`` prepares at once."""
    bp = Blueprint("engine_ops", __name__)          # one per app: the routes depend on its flags
    bp.add_url_rule("/inference/v1/abort_requests", view_func=abort_requests, methods=["POST"])
    bp.add_url_rule("/scale_elastic_ep", view_func=scale_elastic_ep, methods=["POST"])
    bp.add_url_rule("/is_scaling_elastic_ep", view_func=is_scaling_elastic_ep, methods=["POST"])
    # vLLM 0.34 token_in_token_out/api_router.py: the legacy path too, unless dev mode's RL
    # router registered its own /abort_requests first (blueprints.rl)
    if config.tokens_only and not config.vllm_dev_mode:
        bp.add_url_rule("/abort_requests", "abort_requests_legacy", view_func=abort_requests, methods=["POST"])
    if config.enable_sleep_mode:
        bp.add_url_rule("/checkpoint/prepare", view_func=checkpoint_prepare, methods=["POST"])
        bp.add_url_rule("/checkpoint/restore", view_func=checkpoint_restore, methods=["POST"])
        bp.add_url_rule("/checkpoint/status", view_func=checkpoint_status, methods=["GET"])
    app.register_blueprint(bp)
    if config.checkpoint_prepare_on_startup:
        checkpoint_of(app).prepare(app.extensions["simulator"], "wait")
