"""vLLM 0.33's operations routes that tools call besides the inference APIs.

* ``POST /reset_prefix_cache`` (dev mode: ``VLLM_SERVER_DEV_MODE=1``, else 404 as vLLM does
  not register it): forgets every cached KV block and publishes ``AllBlocksCleared``; refused
  while requests hold blocks unless ``?reset_running_requests=true``.  Answers 200 with
  ``{"success": bool}`` as current vLLM (``false``: refused, the caller may retry; an empty
  200 before, which a caller could not tell from a reset).
* ``GET /server_info`` (dev mode): ``{"vllm_config": <text>}``, or the configuration as an
  object with ``?config_format=json``.
* ``GET /kv_event_sources`` (always registered, as vLLM's router): a bare JSON array with one
  entry per data-parallel rank publishing KV events (``data_parallel_rank``, ``endpoint``,
  ``replay_endpoint``, ``topic``); ``[]`` without ``--enable-kvcache`` / ``--zmq-endpoint``.
* ``POST /invocations`` (SageMaker): dispatched by the body's shape as vLLM's
  ``INVOCATION_TYPES``: ``messages`` -> chat completions, ``prompt`` -> completions, ``input``
  -> embeddings; on a pooling model its pooling types (embeddings or classification, rerank,
  score); anything else a 400.
"""
from __future__ import annotations

import io
import json
import logging

import orjson
from flask import Blueprint, abort, current_app, request

from generation.adapters.chat import ChatAdapter
from generation.adapters.completions import CompletionsAdapter
from generation.adapters.validation import body_unparsable, literal_error
from generation.errors import APIError
from schemas.chat import chat_request_schema
from schemas.completions import completion_request_schema

from generation import SIMULATOR_VERSION, vllm_version

from .common import json_body_bytes, json_response, loads_body, simulator
from .errors import error_response
from .health import query_bool
from .serving import generation_view

bp = Blueprint("dev", __name__)
log = logging.getLogger("vllm_sim")

_chat_view = generation_view(chat_request_schema, ChatAdapter)
_completion_view = generation_view(completion_request_schema, CompletionsAdapter)


def _dev_mode() -> None:
    if not simulator().config.vllm_dev_mode:
        abort(404)


@bp.post("/reset_prefix_cache")
def reset_prefix_cache():
    _dev_mode()
    sim = simulator()
    log.info("Resetting prefix cache...")
    running = query_bool("reset_running_requests", False)
    query_bool("reset_external", False)           # vLLM's: no external (connector) cache here
    success = sim.kv_cache is None or sim.kv_cache.reset_prefix_cache(running)
    if not success:
        log.warning("Failed to reset prefix cache because some blocks are not freed yet")
    return json_response({"success": bool(success)})


@bp.get("/server_info")
def server_info():
    _dev_mode()
    config = simulator().config
    cfg = config.to_public_dict()
    me = {"name": "vllm-sim", "version": SIMULATOR_VERSION, "vllm_version": vllm_version(config)}
    fmt = request.args.get("config_format", "text")
    if fmt not in ("text", "json"):       # vLLM: Annotated[Literal["text", "json"], Query()]
        raise literal_error("config_format", fmt, ("text", "json"), where="query")
    if fmt == "json":
        return json_response({"vllm_config": cfg, "simulator": me})
    text = ", ".join(f"{k}={v}" for k, v in cfg.items())
    return json_response({"vllm_config": text, "simulator": me})


@bp.get("/kv_event_sources")
def kv_event_sources():
    sim = simulator()
    cfg = sim.config
    if sim.kv_cache is None or not cfg.zmq_endpoint:
        return json_response([])
    from generation.kvcache.events import rank_endpoint     # msgpack: only with --enable-kvcache
    rank = max(cfg.data_parallel_rank, 0)
    replay = cfg.kv_events_replay_endpoint
    return json_response([{"data_parallel_rank": rank, "endpoint": rank_endpoint(cfg.zmq_endpoint, rank),
                           "replay_endpoint": rank_endpoint(replay, rank) if replay else None,
                           "topic": cfg.kv_topic()}])


@bp.post("/invocations")
def invocations():
    environ = request.environ
    raw = json_body_bytes(environ, request.max_content_length)
    try:
        body = loads_body(raw)
    except orjson.JSONDecodeError as e:
        # vLLM's route reads the body itself (sagemaker/api_router.py ``invocations``): a body
        # json.loads refuses is its HTTPException(400, f"JSON decode error: {e}"), an empty one
        # included; what only orjson refuses keeps the simulator's message (blueprints.common)
        try:
            json.loads(raw)
        except json.JSONDecodeError as d:
            raise APIError(f"JSON decode error: {d}", 400, None, "Bad Request") from None
        except (ValueError, RecursionError):
            pass
        raise body_unparsable(raw, e) from None
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
