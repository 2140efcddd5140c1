"""Non-streaming chat and completion answers with every field vLLM 0.34 puts in them.

vLLM's routers answer ``JSONResponse(content=response.model_dump())``: every field of
``ChatCompletionResponse`` / ``CompletionResponse`` and of their choices and messages, in the
order the pydantic models declare them, ``null`` where the server has nothing to say
(``service_tier``, ``prompt_text``, ``routed_experts``, a message's ``refusal``, ``audio`` and
``function_call``...).  The exceptions are the models' own serializers: a chat message drops an
empty ``tool_calls`` and a null ``annotations`` (``ChatMessage._serialize``, ``exclude_if``), and
``usage`` a null ``prompt_tokens_details``.  Sources: ``vllm/entrypoints/openai/chat_completion/
protocol.py`` and ``completion/protocol.py`` (0.34.0); the chat, completion and derender routers.

The pooling answers (``/v1/embeddings``, ``/pooling``, ``/classify``, ``/score``) dump a
``UsageInfo`` too, so their usage ends with a null ``completion_tokens_details``
(``vllm/entrypoints/serve/engine/protocol.py``); Cohere's ``/v2/embed`` is dumped with
``exclude_none=True`` (``pooling/embed/serving.py``); a render answer is a ``GenerateRequest``
dumped whole (``scale_out/render/api_router.py``, ``create_json_response``).

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


# ---- pooling (vllm/entrypoints/pooling/*/protocol.py) ----------------------------------------------

def pooling_usage(prompt_tokens: int) -> dict:
    """``UsageInfo`` of a pooling answer (``get_pooling_usage``): no completion, the null
    ``prompt_tokens_details`` excluded (``exclude_if``), ``completion_tokens_details`` null."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
            "completion_tokens_details": None}


def embedding_data(index: int, embedding) -> dict:
    """``EmbeddingResponseData``: ``index``, ``object``, ``embedding`` (floats or base64)."""
    return {"index": index, "object": "embedding", "embedding": embedding}


_COHERE_EMBEDDING_TYPES = ("float", "binary", "ubinary", "base64")


def cohere_embed_response(rid: str, embeddings: dict, texts: list | None, input_tokens: int,
                          image_tokens: int) -> dict:
    """``CohereEmbedResponse`` dumped with ``exclude_none=True``: ``embeddings`` by type in the
    model's field order (``float``, ``binary``, ``ubinary``, ``base64``: the types asked, whatever
    order they were asked in), ``texts`` (the request's, when given), ``meta`` (``api_version``,
    ``billed_units`` with ``input_tokens`` and ``image_tokens``) and ``response_type``."""
    out = {"id": rid, "embeddings": {t: embeddings[t] for t in _COHERE_EMBEDDING_TYPES if t in embeddings}}
    if texts is not None:
        out["texts"] = texts
    out["meta"] = {"api_version": {"version": "2"},
                   "billed_units": {"input_tokens": input_tokens, "image_tokens": image_tokens}}
    out["response_type"] = "embeddings_by_type"
    return out


# ---- render (vllm/entrypoints/scale_out/token_in_token_out/protocol.py) -------------------------------

_GENERATE_REQUEST = dict.fromkeys(("request_id", "token_ids", "token_offsets", "features", "content_parts",
                                   "sampling_params", "model", "reasoning_ended", "reasoning_parser_kwargs",
                                   "return_token_ids", "output_mode", "parse_context", "stream", "stream_options",
                                   "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params"))


def generate_request(**fields) -> dict:
    """``GenerateRequest`` as a render route dumps it: every field, ``output_mode`` ``tokens``,
    ``stream`` false and ``priority`` 0 unless given, null where not given; except ``features``,
    which the project's specification (the seeds' render section) leaves out when there are none
    (vLLM 0.34 sends ``null``)."""
    out = _model(_GENERATE_REQUEST, {"output_mode": "tokens", "stream": False, "priority": 0, **fields})
    if out["features"] is None:
        del out["features"]
    return out


# ---- /inference/v1/generate's text levels (scale_out/token_in_token_out/protocol.py) -------------------

_GENERATE_RESPONSE = dict.fromkeys(("request_id", "model", "created", "usage", "prompt_logprobs",
                                    "prompt_token_id_logprobs", "prompt_token_ids", "mm_placeholders", "metrics",
                                    "kv_transfer_params", "ec_transfer_params", "output_mode", "choices"))
_GENERATE_CHOICE = ("index", "finish_reason", "stop_reason", "token_ids", "routed_experts", "sampling_mask",
                    "weight_versions")
_GENERATE_TEXT_CHOICE = dict.fromkeys(_GENERATE_CHOICE + ("text", "logprobs"))
_GENERATE_DERENDER_CHOICE = dict.fromkeys(_GENERATE_CHOICE + ("message", "logprobs"))


def generate_response(**fields) -> dict:
    """``GenerateTextResponse`` / ``GenerateDerenderResponse`` (``GenerateResponseBase`` then
    ``output_mode`` and ``choices``); ``created`` now, in seconds."""
    return _model(_GENERATE_RESPONSE, {"created": int(time.time()), **fields})


def generate_text_choice(**fields) -> dict:
    """``GenerateTextChoice``: the shared choice fields, ``text``, ``logprobs``."""
    return _model(_GENERATE_TEXT_CHOICE, fields)


def generate_derender_choice(**fields) -> dict:
    """``GenerateDerenderChoice``: the shared choice fields, ``message`` (:func:`chat_message`),
    ``logprobs``."""
    return _model(_GENERATE_DERENDER_CHOICE, fields)
