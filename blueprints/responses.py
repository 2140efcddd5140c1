"""``POST /v1/responses`` - the OpenAI Responses API, translated onto the engine's request
(:mod:`generation.adapters.responses`); ``GET /v1/responses/{id}`` and ``POST
/v1/responses/{id}/cancel`` for stored responses.  Errors use the OpenAI envelope."""
from __future__ import annotations

from flask import Blueprint, Response

from generation.adapters.response_store import not_found
from generation.adapters.responses import ResponsesAdapter
from schemas.responses import responses_request_schema

from generation.errors import APIError

from .common import json_response, simulator
from .errors import error_response
from .health import query_int, query_bool
from .serving import generation_view

bp = Blueprint("responses", __name__)
bp.add_url_rule("/v1/responses", "create_response", generation_view(responses_request_schema, ResponsesAdapter),
                 methods=["POST"])


def _not_found(response_id: str):
    return error_response(not_found(response_id))


@bp.get("/v1/responses/<response_id>")
def retrieve_response(response_id: str):
    """A stored response (``VLLM_ENABLE_RESPONSES_API_STORE=1``), else 404 as vLLM answers.
    vLLM's query parameters (``starting_after: int | None``, ``stream: bool | None``) are checked
    first, as FastAPI checks them before the route runs (a 400 at ``query.<name>``; a 404 before).
    ``stream=true`` replays a background stream's events after ``starting_after`` as SSE and
    follows it to its end (:meth:`~generation.adapters.response_store.ResponseStore.replay`)."""
    starting_after = query_int("starting_after")
    stream = query_bool("stream", False)
    store = simulator().response_store
    found = store.get(response_id) if store is not None else None
    if found is None:
        return _not_found(response_id)
    if stream:
        try:
            events = store.replay(response_id, starting_after)
        except APIError as e:
            return error_response(e)
        return Response(events, 200, [("Content-Type", "text/event-stream; charset=utf-8")])
    return json_response(found)


@bp.post("/v1/responses/<response_id>/cancel")
def cancel_response(response_id: str):
    """A running background response is cancelled (its object, ``status`` ``cancelled``); any
    other stored one gets vLLM's 400 ``Cannot cancel a synchronous response.``"""
    sim = simulator()
    store = sim.response_store
    if store is None or store.get(response_id) is None:
        return _not_found(response_id)
    cancelled = store.cancel(sim, response_id)
    if cancelled is None:
        return error_response(APIError("Cannot cancel a synchronous response.", 400, "response_id",
                                       "invalid_request_error"))
    return json_response(cancelled)
