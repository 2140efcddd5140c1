"""``POST /v1/completions`` - OpenAI legacy completions as vLLM serves them
(:mod:`generation.adapters.completions`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.completions import CompletionsAdapter
from schemas.completions import completion_request_schema

from .serving import serve

bp = Blueprint("completions", __name__)


@bp.post("/v1/completions")
def create_completion():
    return serve(completion_request_schema, CompletionsAdapter)
