"""``POST /inference/v1/generate`` - vLLM's token-in / token-out generation
(:mod:`generation.adapters.generate`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.generate import GenerateAdapter
from schemas.generate import generate_request_schema

from .serving import serve

bp = Blueprint("generate", __name__)


@bp.post("/inference/v1/generate")
def generate():
    return serve(generate_request_schema, GenerateAdapter)
