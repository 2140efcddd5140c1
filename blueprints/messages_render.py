"""vLLM 0.34's ``POST /v1/messages/render`` (``entrypoints/scale_out/render/api_router.py``
``render_messages``): an Anthropic Messages request rendered as the chat request it converts to.

Its own blueprint, without the Messages API's error handlers: vLLM's render router answers
every error in its own envelope ``{"error": {"message", "type", "param", "code"}}`` -- a
request validation error through the app's ``validation_exception_handler``, an
``ErrorResponse`` from ``ServingRender.render_messages_request`` (unknown model, a render
failure, ``SamplingParams``' checks) through ``create_json_response``, anything raised through
the app's exception handlers -- never the Anthropic envelope ``/v1/messages`` answers in
(``entrypoints/anthropic/api_router.py``'s ``translate_error_response`` is not on this route).
"""
from __future__ import annotations

from time import perf_counter

from flask import Blueprint

from generation.adapters import messages as anthropic
from generation.adapters.response_bodies import generate_request
from generation.adapters.sampling import anthropic_effort, anthropic_kwargs
from generation.errors import InvalidParam
from schemas.common import load
from schemas.messages import messages_request_schema

from .common import json_response, parse_json_body, request_id, response_headers, simulator
from .render import check_render_sampling
from .render_fields import chat_parse_fields, generate_fields

bp = Blueprint("messages_render", __name__)


@bp.post("/v1/messages/render")
def render_message():
    """vLLM's ``POST /v1/messages/render``: the Anthropic request's prompt as token ids, with
    the ``GenerateRequest`` fields a vLLM render client reads (``request_id``, ``model``,
    ``sampling_params`` from ``max_tokens``, ``stop_sequences``, ``temperature``, ``top_p``,
    ``top_k``; ``stream``).  Nothing is generated; the body is read as a Messages request (vLLM's
    route takes an ``AnthropicMessagesRequest``: ``max_tokens`` required, its validators run).
    vLLM 0.34's ``ServingRender.render_messages_request`` converts the request to chat
    (``to_chat_completion_request``: the effort of ``output_config`` / ``thinking``, the
    converted tools and tool choice) and answers ``render_chat_request``'s fields for it:
    ``reasoning_ended``, ``reasoning_parser_kwargs``, ``parse_context`` (:func:`.render_fields.
    chat_parse_fields`) and ``structured_outputs`` from ``output_config.format``."""
    sim = simulator()
    raw = parse_json_body()
    body = load(messages_request_schema, raw)
    model, lora = sim.resolve_model(body.model)
    if lora is not None:
        raise InvalidParam(f"The model `{model}` is a LoRA adapter and is not supported by the render endpoints.",
                           "model")
    started = perf_counter()
    declared = anthropic.resolved_tools(body)
    tools = anthropic.to_chat_tools(declared)
    messages = anthropic.to_chat_messages(body, anthropic.merge_inline_system(sim))
    ids, _ = sim.tokenize_messages(messages, tools=tools, chat_template_kwargs=anthropic_kwargs(sim, body))
    sim.metrics.rendered("chat", perf_counter() - started)      # vLLM renders its chat completion request
    sampling = {k: raw[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "min_tokens", "cache_salt",
                                    "kv_transfer_params", "ec_transfer_params") if k in raw}
    if isinstance(raw.get("stop_sequences"), list):
        sampling["stop"] = raw["stop_sequences"]
    stream = raw.get("stream") is True
    if stream:          # _handle_streaming_options: the converted request's stream options
        sampling["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    # render_chat_request's request id: "chatcmpl-" and the X-Request-Id header or a new id
    rid = request_id()
    fields = generate_fields(sim, {**sampling, "stream": stream}, f"chatcmpl-{rid}", model, len(ids), False)
    # render_chat_request's SamplingParams of the converted request: top_k, min_tokens, ... as
    # /v1/messages refuses them (a named tool_choice missing from tools is not refused here: vLLM's
    # converter sets tool_choice after building the chat request, past its validators)
    check_render_sampling(sampling, fields["sampling_params"]["max_tokens"], sampling.get("stop"))
    # the chat request vLLM's converter builds (_convert_tool_choice, _convert_tools,
    # _handle_output_config / _handle_thinking): no tool_choice is null, "auto" with tools
    choice = body.tool_choice
    named = anthropic.to_chat_tool_choice(choice)
    if isinstance(named, dict):         # ChatCompletionNamedToolChoiceParam's field order
        named = {"function": named["function"], "type": "function"}
    chat = {"chat_template_kwargs": body.chat_template_kwargs,
            "reasoning_effort": anthropic_effort(sim, body.thinking, body.output_config),
            "tools": _dumped_tools(declared, tools),
            "tool_choice": named or ("auto" if declared is not None else None),
            "parallel_tool_calls": not (choice is not None and choice.disable_parallel_tool_use)}
    fmt = body.output_config.format if body.output_config is not None else None
    if fmt is not None and fmt.schema:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt.schema}}
    extra = chat_parse_fields(sim, chat, messages)
    so = extra.pop("structured_outputs", None)
    if so is not None:
        fields["sampling_params"]["structured_outputs"] = so
    return json_response(generate_request(token_ids=ids, **fields, **extra),     # render_chat_request's GenerateRequest
                         headers=response_headers(rid))


def _dumped_tools(declared, tools) -> list | None:
    """The converted tools as vLLM dumps ``ChatCompletionToolsParam``: the function's ``name``,
    ``description`` (null included), ``parameters`` (``input_schema``, its ``type`` defaulted),
    then ``strict`` / ``defer_loading`` when set; None without ``tools`` (``[]`` stays ``[]``)."""
    if declared is None:
        return None
    out = []
    for t, chat in zip(declared, tools or ()):
        fn = {"name": t.name, "description": t.description, "parameters": chat["function"]["parameters"]}
        for key in ("strict", "defer_loading"):
            if getattr(t, key, None) is not None:
                fn[key] = getattr(t, key)
        out.append({"type": "function", "function": fn})
    return out
