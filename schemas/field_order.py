"""vLLM 0.34's request models' fields in pydantic's order (the order in which pydantic
validates them and so reports their errors), one tuple per model, named after it; a schema
names its model's tuple as ``__order__`` (:meth:`schemas.common.BaseSchema.field_order`).

pydantic's order is a model's annotated fields merged along its MRO, its most basic class
first, a field redefined lower keeping its first place (vLLM's embedding requests are mixins:
``add_special_tokens`` of ``PoolingTokenizeParamsMixin`` comes first).  Files are under
``vllm/entrypoints/``; ``tests/unit/test_field_order.py`` compares every tuple with vLLM's
source."""
from __future__ import annotations


# openai/chat_completion/protocol.py
ChatCompletionRequest = (
    "messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens",
    "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "stream",
    "stream_options", "temperature", "top_p", "tools", "tool_choice", "reasoning_effort",
    "thinking_token_budget", "include_reasoning", "parallel_tool_calls", "user", "use_beam_search", "top_k",
    "min_p", "repetition_penalty", "watermarking", "length_penalty", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "truncation_side", "prompt_logprobs",
    "logprob_token_ids", "allowed_token_ids", "bad_words", "echo", "add_generation_prompt",
    "continue_final_message", "add_special_tokens", "documents", "chat_template", "chat_template_kwargs",
    "media_io_kwargs", "mm_processor_kwargs", "structured_outputs", "priority", "request_id", "session_id",
    "return_tokens_as_token_ids", "return_token_ids", "return_weight_versions", "routed_experts_prompt_start",
    "return_token_offsets", "return_prompt_text", "mm_payload", "return_mm_kwargs", "cache_salt",
    "kv_transfer_params", "ec_transfer_params", "vllm_xargs", "repetition_detection", "stream_interval"
)

# openai/chat_completion/protocol.py
BatchChatCompletionRequest = (
    "messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "logprob_token_ids",
    "max_tokens", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop",
    "temperature", "top_p", "user", "tool_choice", "include_reasoning", "best_of", "use_beam_search", "top_k",
    "min_p", "repetition_penalty", "watermarking", "length_penalty", "early_stopping", "structured_outputs",
    "request_id", "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
    "media_io_kwargs", "mm_processor_kwargs", "priority", "cache_salt", "include_stop_str_in_output",
    "guided_decoding_backend", "echo", "return_tokens_as_token_ids", "return_token_ids"
)

# openai/completion/protocol.py
CompletionRequest = (
    "model", "prompt", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
    "use_beam_search", "top_k", "min_p", "repetition_penalty", "watermarking", "length_penalty",
    "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "truncation_side", "allowed_token_ids",
    "prompt_logprobs", "logprob_token_ids", "bad_words", "prompt_embeds", "add_special_tokens",
    "response_format", "structured_outputs", "priority", "request_id", "session_id",
    "return_tokens_as_token_ids", "return_token_ids", "return_weight_versions", "routed_experts_prompt_start",
    "return_token_offsets", "mm_payload", "return_mm_kwargs", "cache_salt", "kv_transfer_params",
    "ec_transfer_params", "vllm_xargs", "repetition_detection", "thinking_token_budget", "stream_interval"
)

# openai/responses/protocol.py
ResponsesRequest = (
    "background", "include", "input", "instructions", "max_output_tokens", "max_tool_calls", "metadata",
    "model", "logit_bias", "parallel_tool_calls", "previous_response_id", "prompt", "reasoning",
    "include_reasoning", "service_tier", "store", "stream", "temperature", "text", "tool_choice", "tools",
    "top_logprobs", "top_p", "top_k", "min_p", "truncation", "user", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "presence_penalty", "frequency_penalty",
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "safety_identifier", "watermarking",
    "request_id", "session_id", "media_io_kwargs", "mm_processor_kwargs", "priority", "mm_payload",
    "return_mm_kwargs", "cache_salt", "enable_response_messages", "previous_input_messages",
    "structured_outputs", "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos",
    "thinking_token_budget", "vllm_xargs", "kv_transfer_params", "ec_transfer_params", "chat_template_kwargs"
)

# pooling/embed/protocol.py (its mixins: pooling/base/protocol.py)
EmbeddingCompletionRequest = (
    "add_special_tokens", "padding", "encoding_format", "embed_dtype", "endianness", "dimensions",
    "use_activation", "input", "model", "user", "truncate_prompt_tokens", "truncation_side", "request_id",
    "priority", "mm_processor_kwargs", "cache_salt"
)

# pooling/embed/protocol.py (its mixins: pooling/base/protocol.py)
EmbeddingChatRequest = (
    "add_special_tokens", "padding", "encoding_format", "embed_dtype", "endianness", "dimensions",
    "use_activation", "add_generation_prompt", "continue_final_message", "chat_template",
    "chat_template_kwargs", "media_io_kwargs", "messages", "model", "user", "truncate_prompt_tokens",
    "truncation_side", "request_id", "priority", "mm_processor_kwargs", "cache_salt"
)

# serve/tokenize/protocol.py
TokenizeCompletionRequest = (
    "model", "prompt", "add_special_tokens", "return_token_strs"
)

# serve/tokenize/protocol.py
TokenizeChatRequest = (
    "model", "messages", "add_generation_prompt", "return_token_strs", "continue_final_message",
    "add_special_tokens", "chat_template", "chat_template_kwargs", "response_format", "media_io_kwargs",
    "mm_processor_kwargs", "tools"
)

# serve/tokenize/protocol.py
DetokenizeRequest = (
    "model", "tokens"
)

# anthropic/protocol.py
AnthropicMessagesRequest = (
    "model", "messages", "max_tokens", "metadata", "output_config", "thinking", "stop_sequences", "stream",
    "system", "temperature", "tool_choice", "tools", "top_k", "top_p", "mm_payload", "return_mm_kwargs",
    "cache_salt", "watermarking", "min_tokens", "kv_transfer_params", "ec_transfer_params", "vllm_xargs",
    "chat_template_kwargs"
)

# anthropic/protocol.py
AnthropicCountTokensRequest = (
    "model", "messages", "output_config", "system", "thinking", "tool_choice", "tools", "chat_template_kwargs"
)

# generate/base/protocol.py
StreamOptions = (
    "include_usage", "continuous_usage_stats"
)

# pooling/scoring/protocol.py (ScoringRequestMixin's bases: ClassifyRequestMixin's field first)
RerankRequest = (
    "use_activation", "model", "user", "truncate_prompt_tokens", "padding", "truncation_side", "request_id",
    "priority", "mm_processor_kwargs", "cache_salt", "max_tokens_per_query", "max_tokens_per_doc", "instruction",
    "chat_template_kwargs", "query", "documents", "top_n"
)
