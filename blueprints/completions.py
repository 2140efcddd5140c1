"""``POST /v1/completions`` - OpenAI legacy completions as vLLM serves them
(:mod:`generation.adapters.completions`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.completions import CompletionsAdapter
from schemas.completions import completion_request_schema

from .serving import generation_view

bp = Blueprint("completions", __name__)
bp.add_url_rule("/v1/completions", "create_completion", generation_view(completion_request_schema, CompletionsAdapter),
                 methods=["POST"])
