"""``POST /v1/chat/completions`` - OpenAI chat completions as vLLM serves them
(:mod:`generation.adapters.chat`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.chat import ChatAdapter
from schemas.chat import chat_request_schema

from .serving import generation_view

bp = Blueprint("chat", __name__)
bp.add_url_rule("/v1/chat/completions", "create_chat_completion", generation_view(chat_request_schema, ChatAdapter),
                 methods=["POST"])
