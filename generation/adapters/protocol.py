"""Typed requests: what each API's schema (:mod:`schemas`) loads a body into (marshmallow
``@post_load``), so code below the schema reads attributes, never ``data.get(...)``.

Every field is optional here (``None`` = absent or ``null``): the schemas decide what is
required.  Message lists, content blocks and input items stay the validated JSON they are
(``list[dict]``): they are content, handed to the tokenizer or translated block by block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Responses API: content part types that carry text, and the ``include`` value asking for logprobs.
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
LOGPROBS_INCLUDE = "message.output_text.logprobs"


@dataclass
class StreamOptions:
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None
    # the request's object had keys (vLLM refuses those without a stream); not part of its value
    given: bool = field(default=False, compare=False)


@dataclass
class SamplingKnobs:
    """vLLM sampling parameters a simulator type-checks and otherwise ignores."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    use_beam_search: bool | None = None


@dataclass
class OpenAISampling(SamplingKnobs):
    """Fields chat and completions share."""
    model: Any = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = None
    stop: list | None = None
    user: str | None = None
    cache_hit_threshold: float | None = None
    kv_transfer_params: dict | None = None
    return_token_ids: bool | None = None
    return_weight_versions: bool | None = None   # each choice's weight_versions (generation.engine.weight_versions)
    prompt_logprobs: int | None = None
    request_id: str | None = None        # vLLM: names the body id (chatcmpl-<id>, cmpl-<id>)
    # vLLM fields checked as vLLM checks them (generation.adapters.fields)
    logit_bias: dict | None = None
    stop_token_ids: list | None = None
    cache_salt: str | None = None
    logprob_token_ids: list | None = None
    allowed_token_ids: list | None = None        # vLLM: sampling draws only these ids
    return_tokens_as_token_ids: bool | None = None
    truncate_prompt_tokens: int | None = None
    truncation_side: str | None = None
    include_stop_str_in_output: bool | None = None
    structured_outputs: dict | None = None       # vLLM 0.33 StructuredOutputsParams (json, regex, ...)
    thinking_token_budget: int | None = None
    priority: int | None = None                  # --scheduling-policy priority: lower runs first
    # vLLM 0.34 fields checked as vLLM checks them and otherwise ignored (generation.adapters.fields)
    bad_words: Any = None
    vllm_xargs: Any = None
    ec_transfer_params: dict | None = None     # vLLM: into SamplingParams.extra_args beside vllm_xargs
    stream_interval: Any = None                  # an int once read (fields.request_stream_interval)
    routed_experts_prompt_start: int | None = None
    # vLLM 0.34: refused without --trust-request-mm-kwargs (fields.check_mm_kwargs); the schema's
    # other vLLM 0.34 fields (length_penalty, session_id, ...) are checked only (schemas.lax)
    mm_processor_kwargs: Any = None
    media_io_kwargs: Any = None


@dataclass
class ChatTemplateOptions:
    """vLLM's chat-template request fields (chat, chat render, ``/tokenize``), read by
    :func:`generation.tokenization.tokenizer.chat_options`."""
    chat_template: str | None = None
    chat_template_kwargs: dict | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    add_special_tokens: bool | None = None


@dataclass
class ChatCompletionRequest(ChatTemplateOptions, OpenAISampling):
    messages: list | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict | None = None
    include_reasoning: bool | None = None
    reasoning_effort: str | None = None
    echo: bool | None = None              # vLLM: prepend the last message when it is the assistant's


@dataclass
class CompletionRequest(OpenAISampling):
    prompt: tuple | None = None          # ("text", [str, ...]) or ("ids", [[int, ...], ...])
    max_tokens: int | None = None
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    add_special_tokens: bool | None = None      # vLLM: default True (BOS etc. of a text prompt)
    response_format: dict | None = None         # vLLM 0.34: structured outputs (json_object, json_schema, ...)


@dataclass
class ExtraArgs:
    kv_transfer_params: dict | None = None


@dataclass
class SamplingParams(SamplingKnobs):
    """``/inference/v1/generate`` ``sampling_params`` (vLLM's SamplingParams subset)."""
    max_tokens: int | None = None
    n: int | None = None
    ignore_eos: bool | None = None
    stop: list | None = None
    stop_token_ids: list | None = None
    logprobs: int | None = None
    detokenize: bool | None = None
    skip_special_tokens: bool | None = None
    extra_args: ExtraArgs | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: Any = None     # [num_rows][num_ids] ids, -1 pads (generation.adapters.prompt_scores)
    prompt_logprob_start: int | None = None
    structured_outputs: dict | None = None   # from a chat render's response_format
    bad_words: Any = None                    # checked as chat's (generation.adapters.fields)
    stream_interval: Any = None              # vLLM 0.27+: read by generation.adapters.fields.request_stream_interval
    repetition_detection: dict | None = None


@dataclass
class Features:
    mm_hashes: dict | None = None
    mm_placeholders: Any = None
    kwargs_data: Any = None


@dataclass
class GenerateRequest:
    model: Any = None
    request_id: str | None = None
    token_ids: list | None = None
    sampling_params: SamplingParams | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = None
    kv_transfer_params: dict | None = None
    features: Features | None = None
    cache_salt: str | None = None
    priority: int | None = None
    output_mode: str | None = None        # tokens (default) / text / derender
    parse_context: dict | None = None     # /render's chat context (derender reads return_tokens_as_token_ids)
    reasoning_ended: bool | None = None   # /render's: True = no reasoning before the answer (its constraint)
    reasoning_parser_kwargs: dict | None = None   # /render's {"chat_template_kwargs": {...}}


@dataclass
class AnthropicMessage:
    role: str | None = None
    content: Any = None                   # a string or a list of content blocks (dicts)


@dataclass
class AnthropicTool:
    type: str | None = None
    name: str | None = None
    description: str | None = None
    input_schema: dict | None = None
    cache_control: dict | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


@dataclass
class AnthropicToolChoice:
    type: str | None = None
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


@dataclass
class AnthropicOutputFormat:
    type: str | None = None               # json_schema
    schema: dict | None = None


@dataclass
class AnthropicOutputConfig:
    effort: str | None = None             # low / medium / high / xhigh / max
    format: AnthropicOutputFormat | None = None


@dataclass
class CountTokensRequest:
    model: Any = None
    messages: list | None = None          # list[AnthropicMessage]
    system: Any = None                    # a string or a list of text blocks
    tools: list | None = None             # list[AnthropicTool]
    tool_choice: AnthropicToolChoice | None = None
    thinking: dict | None = None          # {"type": enabled/disabled/adaptive/between_tools, "budget_tokens"?}
    context_management: dict | None = None
    chat_template_kwargs: dict | None = None
    output_config: AnthropicOutputConfig | None = None     # vLLM 0.34's AnthropicCountTokensRequest has it too


@dataclass
class MessagesRequest(CountTokensRequest):
    vllm_xargs: Any = None                    # vLLM 0.34: into the chat request's SamplingParams.extra_args
    ec_transfer_params: dict | None = None
    max_tokens: int | None = None
    stop_sequences: list | None = None
    stream: bool | None = None
    metadata: dict | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    service_tier: str | None = None
    ignore_eos: bool | None = None
    kv_transfer_params: dict | None = None
    min_tokens: int | None = None         # vLLM's extension (0.34)


@dataclass
class TextFormat:
    type: str | None = None
    name: str | None = None
    schema: dict | None = None
    description: str | None = None
    strict: bool | None = None


@dataclass
class TextConfig:
    format: TextFormat | None = None
    verbosity: str | None = None


@dataclass
class ResponsesRequest:
    model: Any = None
    input: Any = None                     # a string or a list of input items (dicts)
    instructions: str | None = None
    max_output_tokens: int | None = None
    tools: list | None = None             # function tools, flat or nested (dicts)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    include: list | None = None
    top_logprobs: int | None = None
    stream: bool | None = None
    ignore_eos: bool | None = None
    kv_transfer_params: dict | None = None
    temperature: float | None = None
    top_p: float | None = None
    store: bool | None = None
    background: bool | None = None
    request_id: str | None = None                # vLLM's: the response's id when given
    metadata: dict | None = None
    previous_response_id: str | None = None
    user: str | None = None
    truncation: str | None = None
    service_tier: str | None = None
    reasoning: dict | None = None
    chat_template_kwargs: dict | None = None
    thinking_token_budget: int | None = None     # vLLM 0.34
    prompt_cache_key: str | None = None
    priority: int | None = None                  # vLLM's extra field (--scheduling-policy priority)
    max_tool_calls: int | None = None            # vLLM 0.34: checked, not enforced (one call at most here)
    cache_salt: Any = None                       # checked as on chat (generation.adapters.fields)
    seed: int | None = None
    stop: list | None = None
    logit_bias: dict | None = None
    stop_token_ids: list | None = None
    include_stop_str_in_output: bool | None = None   # with stop and stop_token_ids: the engine's (to_sampling_params)
    vllm_xargs: Any = None
    ec_transfer_params: dict | None = None     # vLLM: into SamplingParams.extra_args beside vllm_xargs
    # vLLM 0.34: range-checked as SamplingParams checks them (fields.check_sampling_ranges), and
    # the multimodal kwargs as chat's; the schema's other vLLM fields are checked only (schemas.lax)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    mm_processor_kwargs: dict | None = None
    media_io_kwargs: dict | None = None
    # echoed in the response object (vLLM's ResponsesResponse.from_request)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    safety_identifier: str | None = None
    # vLLM 0.34: refused (``validate_prompt``; ``structured_outputs`` only beside ``text.format``)
    prompt: Any = None
    structured_outputs: Any = None


@dataclass
class RenderOptions:
    """vLLM 0.34's per-request multimodal kwargs of the render and tokenize routes (refused
    without ``--trust-request-mm-kwargs``)."""
    mm_processor_kwargs: Any = None
    media_io_kwargs: Any = None


@dataclass
class CompletionRenderRequest(RenderOptions):
    model: Any = None
    prompt: tuple | None = None


@dataclass
class ChatRenderRequest(ChatTemplateOptions, RenderOptions):
    model: Any = None
    messages: list | None = None
    tools: list | None = None
    reasoning_effort: str | None = None


@dataclass
class TokenizeRequest(ChatTemplateOptions, RenderOptions):
    model: Any = None
    prompt: str | None = None
    messages: list | None = None
    return_token_strs: bool | None = None
    tools: list | None = None


@dataclass
class DetokenizeRequest:
    model: Any = None
    tokens: list | None = None
