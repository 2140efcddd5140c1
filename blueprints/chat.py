"""``POST /v1/chat/completions`` - OpenAI chat completions as vLLM serves them
(:mod:`generation.adapters.chat`) - and vLLM 0.34's ``POST /v1/chat/completions/batch``, one
choice per conversation (:mod:`generation.adapters.chat_batch`)."""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.chat import ChatAdapter
from generation.adapters.chat_batch import BatchChatAdapter
from schemas.chat import batch_chat_request_schema, chat_request_schema

from .serving import generation_view

bp = Blueprint("chat", __name__)
bp.add_url_rule("/v1/chat/completions", "create_chat_completion", generation_view(chat_request_schema, ChatAdapter),
                 methods=["POST"])
bp.add_url_rule("/v1/chat/completions/batch", "create_batch_chat_completion",
                generation_view(batch_chat_request_schema, BatchChatAdapter), methods=["POST"])
