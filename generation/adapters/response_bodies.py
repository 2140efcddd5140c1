"""Non-streaming chat and completion answers with every field vLLM 0.34 puts in them.

vLLM's routers answer ``JSONResponse(content=response.model_dump())``: every field of
``ChatCompletionResponse`` / ``CompletionResponse`` and of their choices and messages, in the
order the pydantic models declare them, ``null`` where the server has nothing to say
(``service_tier``, ``prompt_text``, ``routed_experts``, a message's ``refusal``, ``audio`` and
``function_call``...).  The exceptions are the models' own serializers: a chat message drops an
empty ``tool_calls`` and a null ``annotations`` (``ChatMessage._serialize``, ``exclude_if``), and
``usage`` a null ``prompt_tokens_details``.  Sources: ``vllm/entrypoints/openai/chat_completion/
protocol.py`` and ``completion/protocol.py`` (0.34.0); the chat, completion and derender routers.

Each builder takes the fields a caller sets as keywords; a name the model does not have is a
programming error (KeyError), so a new field cannot drift out of vLLM's order unnoticed.
"""
from __future__ import annotations

import time

# ChatMessage's fields the simulator never fills, between ``content`` and ``tool_calls``
_MESSAGE_NULLS = (("refusal", None), ("audio", None), ("function_call", None))

# each model's fields in its order, null: the layout a dump of an instance gives
_CHAT_CHOICE = dict.fromkeys(("index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
                              "routed_experts", "weight_versions"))
_CHAT_RESPONSE = dict.fromkeys(("id", "object", "created", "model", "choices", "service_tier", "system_fingerprint",
                                "usage", "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params",
                                "ec_transfer_params", "metrics"))
_COMPLETION_CHOICE = dict.fromkeys(("index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
                                    "prompt_logprobs", "prompt_token_ids", "routed_experts", "weight_versions"))
_COMPLETION_RESPONSE = dict.fromkeys(("id", "object", "created", "model", "choices", "service_tier",
                                      "system_fingerprint", "usage", "kv_transfer_params", "ec_transfer_params",
                                      "metrics"))


def _model(fields: dict, given: dict) -> dict:
    """``given`` laid out as the model ``fields`` dumps: each in its place, null when not given.
    Raises KeyError naming a field the model does not have."""
    out = fields.copy()
    out.update(given)
    if len(out) != len(fields):             # a key the model lacks was appended
        raise KeyError(f"not a field of the vLLM model: {sorted(given.keys() - fields.keys())}")
    return out


def chat_message(role: str, content, reasoning=None, tool_calls: list | None = None) -> dict:
    """vLLM 0.34's ``ChatMessage`` as dumped: ``tool_calls`` only when there are some."""
    out = {"role": role, "content": content, **dict(_MESSAGE_NULLS)}
    if tool_calls:
        out["tool_calls"] = tool_calls
    out["reasoning"] = reasoning
    return out


def chat_choice(**fields) -> dict:
    """``ChatCompletionResponseChoice`` (``index``, ``message``, ``logprobs``, ``finish_reason``,
    ``stop_reason``, ``token_ids``, ...)."""
    return _model(_CHAT_CHOICE, fields)


def chat_response(**fields) -> dict:
    """``ChatCompletionResponse``: ``object`` and ``created`` (now, seconds) filled in."""
    return _model(_CHAT_RESPONSE, {"object": "chat.completion", "created": int(time.time()), **fields})


def completion_choice(**fields) -> dict:
    """``CompletionResponseChoice`` (``index``, ``text``, ``logprobs``, ``finish_reason``,
    ``stop_reason``, ``token_ids``, ``prompt_logprobs``, ``prompt_token_ids``, ...)."""
    return _model(_COMPLETION_CHOICE, fields)


def completion_response(**fields) -> dict:
    """``CompletionResponse``: ``object`` and ``created`` (now, seconds) filled in."""
    return _model(_COMPLETION_RESPONSE, {"object": "text_completion", "created": int(time.time()), **fields})
