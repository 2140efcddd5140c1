"""``POST /v1/chat/completions`` request schema (OpenAI / vLLM ChatCompletionRequest subset).

Accepted and used: model, messages, max_tokens, max_completion_tokens, n, stream,
stream_options, logprobs, top_logprobs, tools, tool_choice, response_format, stop,
ignore_eos, cache_hit_threshold, kv_transfer_params.  Sampling fields (temperature, top_p,
seed, ...) are type-checked and otherwise ignored, as a simulator has no sampler.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validates

from .common import (BaseSchema, StreamOptionsSchema, StrictBool, StrictFloat, StrictInt, StringOrList,
                     validate_content_blocks)


class ContentField(fields.Field):
    """A message ``content``: string, null, or a list of content parts."""

    def _deserialize(self, value, attr, data, **kwargs):
        validate_content_blocks(value)
        return value


class ToolCallFunctionSchema(BaseSchema):
    name = fields.String()
    arguments = fields.String()


class ToolCallSchema(BaseSchema):
    id = fields.String()
    type = fields.String()
    function = fields.Nested(ToolCallFunctionSchema)


class MessageSchema(BaseSchema):
    role = fields.String(required=True)
    content = ContentField()
    name = fields.String()
    tool_calls = fields.List(fields.Nested(ToolCallSchema))
    tool_call_id = fields.String()


class SamplingSchema(BaseSchema):
    """Fields shared by chat and completions."""
    model = fields.Raw()
    n = StrictInt()
    stream = StrictBool()
    stream_options = fields.Nested(StreamOptionsSchema)
    ignore_eos = StrictBool()
    stop = StringOrList()
    temperature = StrictFloat()
    top_p = StrictFloat()
    top_k = StrictInt()
    min_p = StrictFloat()
    seed = StrictInt()
    presence_penalty = StrictFloat()
    frequency_penalty = StrictFloat()
    repetition_penalty = StrictFloat()
    user = fields.String()
    cache_hit_threshold = StrictFloat()
    kv_transfer_params = fields.Dict()
    min_tokens = StrictInt()


class ChatCompletionRequestSchema(SamplingSchema):
    messages = fields.List(fields.Nested(MessageSchema), required=True)
    max_tokens = StrictInt()
    max_completion_tokens = StrictInt()
    logprobs = StrictBool()
    top_logprobs = StrictInt()
    tools = fields.List(fields.Dict())
    tool_choice = fields.Raw()
    parallel_tool_calls = StrictBool()
    response_format = fields.Dict()

    @validates("tool_choice")
    def _tool_choice(self, value, **kwargs):
        if value is None or isinstance(value, str):
            if isinstance(value, str) and value not in ("none", "auto", "required"):
                raise ValidationError("Must be 'none', 'auto', 'required' or a named function object.")
            return
        if not isinstance(value, dict):
            raise ValidationError("Must be a string or an object.")


chat_request_schema = ChatCompletionRequestSchema()
