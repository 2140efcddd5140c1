"""``POST /v1/chat/completions`` - OpenAI chat completions as vLLM serves them
(:mod:`generation.adapters.chat`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.chat import ChatAdapter
from schemas.chat import chat_request_schema

from .serving import serve

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
def create_chat_completion():
    return serve(chat_request_schema, ChatAdapter)
