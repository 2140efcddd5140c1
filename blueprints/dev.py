"""vLLM 0.34's operations routes that tools call besides the inference APIs.

Dev mode (``VLLM_SERVER_DEV_MODE=1``; registered by :func:`register` only then, as vLLM's
``register_vllm_dev_api_routers``: without it every method of these paths is a 404):

* ``POST /reset_prefix_cache``: forgets every cached KV block and publishes
  ``AllBlocksCleared``; refused while requests hold blocks unless
  ``?reset_running_requests=true``.  Answers 200 with ``{"success": bool}`` as current vLLM
  (``false``: refused, the caller may retry; an empty 200 before, which a caller could not tell
  from a reset).
* ``POST /reset_mm_cache``, ``POST /reset_encoder_cache``: 200 with no body, as vLLM's
  (``serve/dev/cache/api_router.py``): the simulator keeps no multi-modal or encoder cache, so
  there is nothing to clear.
* ``POST /collective_rpc`` (``serve/dev/rpc/api_router.py``): the body read as vLLM reads it
  (any Content-Type; ``JSON decode error: ...``, ``Request body must be a JSON object``,
  ``Missing 'method' in request body``: 400s with the status phrase as ``type``), then the call:
  a method of vLLM 0.34's GPU worker (:data:`WORKER_METHODS`) is answered as by workers whose
  method returns nothing, ``{"results": [null, ...]}``, one per worker of this rank
  (tensor-parallel size); any other name is the worker's ``run_method`` ``NotImplementedError``
  (``v1/serial_utils.py``), which the engine core's utility call reports as failed and the
  route's ``Exception`` answers 500 ``InternalServerError`` (:func:`generation.errors.rpc_failure`).
* ``GET /server_info``: ``{"vllm_config": <text>}``, or the configuration as an object with
  ``?config_format=json``.
* the RL routes (:mod:`blueprints.rl`: ``/pause``, ``/resume``, ``/is_paused``,
  ``/abort_requests``, ``/get_world_size``).

Always:

* ``GET /kv_event_sources`` (as vLLM's router): a bare JSON array with one
  entry per data-parallel rank publishing KV events (``data_parallel_rank``, ``endpoint``,
  ``replay_endpoint``, ``topic``); ``[]`` without ``--enable-kvcache`` / ``--zmq-endpoint``.
* ``POST /invocations`` (SageMaker): dispatched by the body's shape as vLLM's
  ``INVOCATION_TYPES``: ``messages`` -> chat completions, ``prompt`` -> completions, ``input``
  -> embeddings; on a pooling model its pooling types (embeddings or classification, rerank,
  score); anything else a 400.
"""
from __future__ import annotations

import io
import logging

import orjson
from flask import Blueprint, current_app, request

from generation.adapters.chat import ChatAdapter
from generation.adapters.completions import CompletionsAdapter
from generation.adapters.validation import literal_error
from generation.errors import APIError, rpc_failure
from schemas.chat import chat_request_schema
from schemas.completions import completion_request_schema

from generation import SIMULATOR_VERSION, vllm_version

from .common import json_body_bytes, json_response, simulator
from .vllm_bodies import bare_response, starlette_json
from .errors import error_response
from .health import query_bool
from .serving import generation_view

bp = Blueprint("dev", __name__)
log = logging.getLogger("vllm_sim")

_chat_view = generation_view(chat_request_schema, ChatAdapter)
_completion_view = generation_view(completion_request_schema, CompletionsAdapter)


def reset_prefix_cache():
    sim = simulator()
    log.info("Resetting prefix cache...")
    running = query_bool("reset_running_requests", False)
    query_bool("reset_external", False)           # vLLM's: no external (connector) cache here
    success = sim.kv_cache is None or sim.kv_cache.reset_prefix_cache(running)
    if not success:
        log.warning("Failed to reset prefix cache because some blocks are not freed yet")
    return json_response({"success": bool(success)})


def reset_mm_cache():
    """vLLM's ``reset_mm_cache``: ``Response(status_code=200)``, no body."""
    log.info("Resetting multi-modal cache...")
    return bare_response()


def reset_encoder_cache():
    """vLLM's ``reset_encoder_cache``: ``Response(status_code=200)``, no body."""
    log.info("Resetting encoder cache...")
    return bare_response()


def collective_rpc():
    """vLLM's ``collective_rpc`` (see the module docstring)."""
    body = starlette_json(request.get_data(cache=False))
    if not isinstance(body, dict):
        raise APIError("Request body must be a JSON object", 400, None, "Bad Request")
    method = body.get("method")
    if method is None:
        raise APIError("Missing 'method' in request body", 400, None, "Bad Request")
    config = simulator().config
    if not isinstance(method, str):     # run_method: partial(method, worker)
        raise rpc_failure(config, "the first argument must be callable")
    if method not in WORKER_METHODS:
        raise rpc_failure(config, f"Method {method!r} is not implemented.")
    workers = max(config.tensor_parallel_size, 1)
    return json_response({"results": [None] * workers})


# The public methods of vLLM 0.34's GPU worker, which its WorkerWrapperBase resolves a method
# name on (getattr, then __getattr__ to the worker): v1/worker/gpu_worker.py Worker,
# v1/worker/worker_base.py WorkerBase and WorkerWrapperBase
WORKER_METHODS = frozenset((
    "sleep", "wake_up", "discard", "checkpoint_prepare", "checkpoint_restore", "compute_weight_checksums",
    "reset_weights", "init_device", "handle_ft_command", "load_model", "update_config", "reload_weights",
    "set_kv_cache_reclaimable", "determine_available_memory", "get_kv_connector_handshake_metadata",
    "get_kv_cache_spec", "update_max_model_len", "initialize_from_config", "get_simple_cpu_offload_num_cpu_blocks",
    "extensible_kv_cache_unsupported_reason", "disable_extensible_kv_cache", "extend_kv_cache",
    "compile_or_warm_up_model", "reset_mm_cache", "reset_encoder_cache", "get_model", "get_draft_model",
    "supports_draft_weight_updates", "get_supported_tasks", "get_compilation_match_table",
    "get_encoder_timing_stats", "annotate_profile", "sample_tokens", "execute_model", "take_draft_token_ids",
    "profile", "execute_dummy_batch", "add_lora", "remove_lora", "list_loras", "pin_lora", "check_health",
    "save_sharded_state", "save_tensorized_model", "init_weight_transfer_engine", "shutdown_weight_transfer_engine",
    "has_incomplete_weight_update", "start_weight_update", "start_draft_weight_update", "update_weights",
    "finish_weight_update", "shutdown", "elastic_ep_execute", "get_supported_kv_cache_layouts",
    "set_kv_cache_layout", "synchronize_device", "release_late_interaction_query_cache", "apply_model",
    "get_model_inspection", "update_environment_variables", "init_worker"))


def server_info():
    config = simulator().config
    cfg = config.to_public_dict()
    me = {"name": "vllm-sim", "version": SIMULATOR_VERSION, "vllm_version": vllm_version(config)}
    fmt = request.args.get("config_format", "text")
    if fmt not in ("text", "json"):       # vLLM: Annotated[Literal["text", "json"], Query()]
        raise literal_error("config_format", fmt, ("text", "json"), where="query")
    vllm_config = cfg if fmt == "json" else ", ".join(f"{k}={v}" for k, v in cfg.items())
    return json_response({"vllm_config": vllm_config, "vllm_env": _vllm_env(config), "system_env": _system_env(config),
                          "simulator": me})


# vLLM 0.34's collect_env.SystemEnv fields (its /server_info "system_env"), in order
SYSTEM_ENV_FIELDS = (
    "torch_version", "is_debug_build", "cuda_compiled_version", "gcc_version", "clang_version", "cmake_version", "os",
    "libc_version", "python_version", "python_platform", "is_cuda_available", "cuda_runtime_version",
    "cuda_module_loading", "nvidia_driver_version", "nvidia_gpu_models", "cudnn_version", "xpu_available",
    "xpu_runtime_version", "intel_graphics_compiler_version", "intel_gpu_models", "oneapi_compiler_version",
    "level_zero_loader_version", "level_zero_driver_version", "oneccl_version", "libigdgmm_version",
    "vllm_xpu_kernels_version", "sycl_version", "pip_version", "pip_packages", "conda_packages",
    "hip_compiled_version", "hip_runtime_version", "miopen_runtime_version", "caching_allocator_config",
    "is_xnnpack_available", "cpu_info", "rocm_version", "vllm_version", "vllm_build_flags", "gpu_topo", "env_vars")


def _vllm_env(config) -> dict:
    """vLLM's ``vllm_env``: the ``VLLM_*`` variables, those whose name holds ``KEY`` left out
    (``VLLM_API_KEY``).  vLLM lists every variable it knows with its parsed value or default;
    the simulator those set in its environment, as text (``SimConfig.vllm_env``)."""
    return dict(getattr(config, "vllm_env", None) or {})


def _system_env(config) -> dict:
    """vLLM's ``system_env`` (``collect_env.get_env_info()._asdict()``): its fields, this
    process's where the simulator has them (OS, Python, the vLLM version it imitates), no GPU
    (``is_cuda_available`` false), the rest null."""
    import platform
    out = dict.fromkeys(SYSTEM_ENV_FIELDS)
    out.update(os=platform.platform(), python_version=f"{platform.python_version()} ({platform.architecture()[0]} "
                                                      "runtime)",
               python_platform=platform.platform(), is_cuda_available=False, xpu_available=False,
               cpu_info=platform.processor() or platform.machine(), vllm_version=vllm_version(config))
    return out


@bp.get("/kv_event_sources")
def kv_event_sources():
    dp = current_app.extensions.get("data_parallel")     # one API server over DP engines: every rank's
    sims = dp.sims if dp is not None else [simulator()]
    out = []
    for sim in sims:
        cfg = sim.config
        if sim.kv_cache is None or not cfg.zmq_endpoint:
            continue
        from generation.kvcache.events import rank_endpoint     # msgpack: only with --enable-kvcache
        rank = max(cfg.data_parallel_rank, 0)
        replay = cfg.kv_events_replay_endpoint
        out.append({"data_parallel_rank": rank, "endpoint": rank_endpoint(cfg.zmq_endpoint, rank),
                    "replay_endpoint": rank_endpoint(replay, rank) if replay else None, "topic": cfg.kv_topic()})
    return json_response(out)


@bp.post("/invocations")
def invocations():
    environ = request.environ
    raw = json_body_bytes(environ, request.max_content_length)
    # vLLM's route reads the body itself (sagemaker/api_router.py ``invocations``): a body
    # json.loads refuses is its HTTPException(400, f"JSON decode error: {e}"), an empty one included
    body = starlette_json(raw)
    if not isinstance(body, dict):           # no request model validates it: the no-handler 400
        return error_response(NO_HANDLER)
    try:
        raw = orjson.dumps(body)
    except TypeError:      # nested past orjson's 255 levels (it parses 1,024): a 500 before; the bytes as read
        pass
    environ["wsgi.input"] = io.BytesIO(raw)                  # the handler reads the body again
    environ["CONTENT_LENGTH"] = str(len(raw))
    kind = current_app.extensions["simulator"].config.pooling_kind
    if kind:
        return _pooling_invocation(kind, body)
    if "messages" in body:
        return _chat_view()
    if "prompt" in body:
        return _completion_view()
    if "input" in body:
        from .embeddings import create_embeddings
        return create_embeddings()
    return error_response(NO_HANDLER)


def _pooling_invocation(kind: str, body: dict):
    """A pooling model's ``INVOCATION_TYPES`` (vLLM 0.34 pooling/factories.py l. 236-287, in
    their order): an embedding (``embed``) or classification (``classify`` / ``score``) request
    (``input`` or ``messages``), then, where the model scores (``pooling.serves_scores``), a
    rerank (``query`` and ``documents``) and a score request (``queries`` / ``documents`` or
    ``items``, ``data_1`` / ``data_2``, ``text_1`` / ``text_2``); a chat or completions body is
    none of them."""
    from generation.adapters.pooling import serves_scores

    from . import pooling as routes
    if "input" in body or "messages" in body:
        if kind == "embed":
            from .embeddings import create_embeddings
            return create_embeddings()
        return routes.create_classify()
    if serves_scores(kind):
        if "query" in body and "documents" in body:
            return routes.create_rerank()
        if any(a in body and b in body for a, b in (("queries", "documents"), ("queries", "items"),
                                                   ("data_1", "data_2"), ("text_1", "text_2"))):
            return routes.create_score()
    kinds = ["embeddings (input)" if kind == "embed" else "classification (input)"]
    if serves_scores(kind):
        kinds += ["rerank (query)", "score (queries)"]
    return error_response(APIError(f"Cannot find suitable handler for request. Expected one of: {', '.join(kinds)}.",
                                   400))


NO_HANDLER = APIError("Cannot find suitable handler for request. Expected one of: chat completions (messages), "
                      "completions (prompt), embeddings (input).", 400)


def register(app, config) -> None:
    """``VLLM_SERVER_DEV_MODE=1``: the dev routes (vLLM's ``register_vllm_dev_api_routers``:
    serve/dev/cache, rpc, server_info; the sleep routes are :mod:`blueprints.health`'s), then
    the RL router (``register_rl_api_routers``), in vLLM's order; nothing without it."""
    if not config.vllm_dev_mode:
        return
    dev = Blueprint("dev_mode", __name__)          # one per app: registered in dev mode only
    dev.add_url_rule("/reset_prefix_cache", view_func=reset_prefix_cache, methods=["POST"])
    dev.add_url_rule("/reset_mm_cache", view_func=reset_mm_cache, methods=["POST"])
    dev.add_url_rule("/reset_encoder_cache", view_func=reset_encoder_cache, methods=["POST"])
    dev.add_url_rule("/collective_rpc", view_func=collective_rpc, methods=["POST"])
    dev.add_url_rule("/server_info", view_func=server_info, methods=["GET"])
    app.register_blueprint(dev)
    from . import rl
    rl.register(app)
