"""``POST /inference/v1/generate`` - vLLM's token-in / token-out generation
(:mod:`generation.adapters.generate`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.generate import GenerateAdapter
from schemas.generate import generate_request_schema

from .serving import generation_view

bp = Blueprint("generate", __name__)
bp.add_url_rule("/inference/v1/generate", "generate", generation_view(generate_request_schema, GenerateAdapter),
                 methods=["POST"])
