"""``POST /v1/responses`` - the OpenAI Responses API, translated onto the engine's request
(:mod:`generation.adapters.responses`).  Errors use the OpenAI envelope."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.responses import ResponsesAdapter
from schemas.responses import responses_request_schema

from .serving import serve

bp = Blueprint("responses", __name__)


@bp.post("/v1/responses")
def create_response():
    """A ``response`` object, or its SSE event stream when ``stream`` is true."""
    return serve(responses_request_schema, ResponsesAdapter)
