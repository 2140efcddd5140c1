"""``POST /v1/responses`` - the OpenAI Responses API, translated onto the engine's request
(:mod:`generation.adapters.responses`).  Errors use the OpenAI envelope."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.responses import ResponsesAdapter
from schemas.responses import responses_request_schema

from .serving import generation_view

bp = Blueprint("responses", __name__)
bp.add_url_rule("/v1/responses", "create_response", generation_view(responses_request_schema, ResponsesAdapter),
                 methods=["POST"])
