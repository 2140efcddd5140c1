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


# ---- the Responses API (vllm/entrypoints/openai/responses/protocol.py; the openai SDK's types) --------

# ResponsesResponse (protocol.py l. 905-986), dumped whole (api_router.py l. 75, 101:
# ``model_dump(mode="json", by_alias=True)``); ``metrics`` is left out while null (its exclude_if)
_RESPONSES_RESPONSE = dict.fromkeys((
    "id", "created_at", "incomplete_details", "instructions", "metadata", "model", "object", "output",
    "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p", "background", "max_output_tokens",
    "max_tool_calls", "previous_response_id", "prompt", "prompt_cache_options", "prompt_cache_key",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "status", "text", "top_logprobs",
    "truncation", "usage", "user", "metrics", "presence_penalty", "frequency_penalty", "kv_transfer_params",
    "ec_transfer_params", "input_messages", "output_messages"))
# the openai SDK's output items (openai/types/responses/*.py), pydantic dumping every field in order
_OUTPUT_MESSAGE = dict.fromkeys(("id", "content", "role", "status", "type", "phase"))
_REASONING_ITEM = dict.fromkeys(("id", "summary", "type", "content", "encrypted_content", "status"))
_FUNCTION_CALL = dict.fromkeys(("arguments", "call_id", "name", "type", "id", "async", "caller", "namespace",
                                "status"))
# FunctionTool (function_tool.py), NamespaceTool's ToolFunction (namespace_tool.py), Reasoning
# (shared/reasoning.py), ResponseTextConfig and its json_schema format
_FUNCTION_TOOL = dict.fromkeys(("name", "parameters", "strict", "type", "allowed_callers", "async",
                                "defer_loading", "description", "output_schema"))
_NAMESPACED_FUNCTION = dict.fromkeys(("name", "type", "allowed_callers", "async", "defer_loading", "description",
                                      "output_schema", "parameters", "strict"))
_CUSTOM_TOOL = dict.fromkeys(("name", "type", "allowed_callers", "async", "defer_loading", "description", "format"))
_WEB_SEARCH = dict.fromkeys(("type", "external_web_access", "filters", "search_context_size", "user_location"))
_WEB_SEARCH_PREVIEW = dict.fromkeys(("type", "search_content_types", "search_context_size", "user_location"))
_NAMESPACE = dict.fromkeys(("description", "name", "tools", "type"))
_TOOLS = {"function": _FUNCTION_TOOL, "custom": _CUSTOM_TOOL, "web_search": _WEB_SEARCH,
          "web_search_2025_08_26": _WEB_SEARCH, "web_search_preview": _WEB_SEARCH_PREVIEW,
          "web_search_preview_2025_03_11": _WEB_SEARCH_PREVIEW}
_NAMESPACE_TOOLS = {"function": _NAMESPACED_FUNCTION, "custom": _CUSTOM_TOOL}
_REASONING = dict.fromkeys(("context", "effort", "generate_summary", "mode", "summary"))
_JSON_SCHEMA_FORMAT = dict.fromkeys(("name", "schema", "type", "description", "strict"))


def responses_response(**fields) -> dict:
    """vLLM's ``ResponsesResponse`` (``from_request``, protocol.py l. 1001-1066): ``object``
    ``response``; ``metrics`` left out when null."""
    out = _model(_RESPONSES_RESPONSE, {"object": "response", **fields})
    if out["metrics"] is None:
        del out["metrics"]
    return out


def output_message(**fields) -> dict:
    """The SDK's ``ResponseOutputMessage``: ``id``, ``content``, ``role``, ``status``,
    ``type`` (``message``), ``phase`` (null)."""
    return _model(_OUTPUT_MESSAGE, {"role": "assistant", "type": "message", **fields})


def output_text(text: str, logprobs=...) -> dict:
    """The SDK's ``ResponseOutputText``: ``annotations``, ``text``, ``type``, ``logprobs``;
    ``logprobs`` left out when not given (the project's specification: only with ``include``
    ``message.output_text.logprobs``; vLLM dumps null)."""
    part = {"annotations": [], "text": text, "type": "output_text"}
    if logprobs is not ...:
        part["logprobs"] = logprobs
    return part


def output_text_logprob(entry: dict) -> dict:
    """A chat logprob entry (token, logprob, bytes, top_logprobs) as the SDK's
    ``response_output_text.Logprob`` orders it: ``token``, ``bytes``, ``logprob``,
    ``top_logprobs`` (each ``token``, ``bytes``, ``logprob``)."""
    return {"token": entry["token"], "bytes": entry["bytes"], "logprob": entry["logprob"],
            "top_logprobs": [{"token": t["token"], "bytes": t["bytes"], "logprob": t["logprob"]}
                             for t in entry["top_logprobs"]]}


def reasoning_item(**fields) -> dict:
    """The SDK's ``ResponseReasoningItem``: ``id``, ``summary`` ([]), ``type`` (``reasoning``),
    ``content``, ``encrypted_content``, ``status``."""
    return _model(_REASONING_ITEM, {"summary": [], "type": "reasoning", **fields})


def function_call_item(**fields) -> dict:
    """The SDK's ``ResponseFunctionToolCall`` dumped by alias: ``arguments``, ``call_id``,
    ``name``, ``type`` (``function_call``), ``id``, ``async``, ``caller``, ``namespace``,
    ``status``."""
    return _model(_FUNCTION_CALL, {"type": "function_call", **fields})


def responses_usage(input_tokens: int, output_tokens: int, cached: int, cache_write: int, reasoning: int) -> dict:
    """vLLM's own ``ResponseUsage`` (protocol.py l. 99-118) as ``responses_full_generator``
    fills it (serving.py l. 896-919): a simple context keeps no per-turn metrics, so the
    ``*_per_turn`` lists are empty, and ``tool_output_tokens`` is 0."""
    return {"input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [], "tool_output_tokens_per_turn": []},
            "total_tokens": input_tokens + output_tokens}


def _sdk_fields(layout: dict, given: dict) -> dict:
    """``given`` (a request's object) laid out as the SDK model ``layout``: its fields in order,
    null where not given, then keys the model does not have (its ``extra="allow"``)."""
    out = {k: given.get(k) for k in layout}
    out.update((k, v) for k, v in given.items() if k not in layout)
    return out


def responses_tool(tool: dict) -> dict:
    """A request's tool as the response echoes it (``tools=request.tools``, the SDK's ``Tool``
    union dumped): ``function`` as ``FunctionTool`` (a chat-style nested one flattened), ``custom``
    as ``CustomTool``, the web search tools as theirs (their nested objects as sent), a
    ``namespace`` as ``NamespaceTool`` (``description``, ``name``, ``tools``, ``type``) with its
    tools as ``ToolFunction`` / ``CustomTool``; other types as sent."""
    t = tool.get("type")
    if t == "function" and isinstance(tool.get("function"), dict):
        tool = {**tool["function"], "type": "function"}
    layout = _TOOLS.get(t)
    if layout is not None:
        return _sdk_fields(layout, tool)
    if t == "namespace":
        subs = [_sdk_fields(_NAMESPACE_TOOLS[s.get("type")], s) if s.get("type") in _NAMESPACE_TOOLS else s
                for s in tool.get("tools") or ()]
        return _sdk_fields(_NAMESPACE, {**tool, "tools": subs})
    return tool


def responses_reasoning(reasoning) -> dict | None:
    """``request.reasoning`` as the SDK's ``Reasoning`` dumps it (null when not given)."""
    return _sdk_fields(_REASONING, reasoning) if isinstance(reasoning, dict) else None


def responses_text_format(fmt: dict) -> dict:
    """A ``text.format`` as the SDK's format models dump it: ``{"type"}`` for ``text`` and
    ``json_object``; ``name``, ``schema``, ``type``, ``description``, ``strict`` for
    ``json_schema``."""
    if fmt.get("type") == "json_schema":
        return {k: fmt.get(k) for k in _JSON_SCHEMA_FORMAT}
    return {"type": fmt.get("type")}
