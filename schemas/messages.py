"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` request schemas (Anthropic
Messages API subset).

Used: model, messages (role user/assistant; content a string or blocks ``text``, ``image``
with a ``base64`` or ``url`` source, ``tool_use``, ``tool_result``), system (a string or a
list of text blocks, as Anthropic allows), max_tokens (required on /v1/messages), tools
(``{name, description, input_schema}``), tool_choice (``auto``/``any``/``tool``/``none``),
stop_sequences, stream, and the vLLM extensions ignore_eos and kv_transfer_params.
Accepted and ignored: metadata, temperature, top_p, top_k, thinking, service_tier.
History blocks a simulator cannot use (``thinking``, ``redacted_thinking``, ``document``,
server-tool results) are accepted and contribute no tokens; any other block type is a 400
naming the block, e.g. ``messages[0].content[1].type``.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validate, validates, validates_schema

from generation.adapters import protocol as p
from generation.structured.tool_validation import MAX_SCHEMA_DEPTH, json_depth_exceeds

from .common import BaseSchema, StrictBool, StrictFloat, StrictInt

# Block types that carry meaning for the simulator, and history blocks accepted but skipped.
USED_BLOCKS = ("text", "image", "tool_use", "tool_result")
SKIPPED_BLOCKS = ("thinking", "redacted_thinking", "document", "search_result", "server_tool_use",
                  "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                  "container_upload")
_KNOWN = USED_BLOCKS + SKIPPED_BLOCKS
_TOOL_RESULT_BLOCKS = ("text", "image", "document", "search_result")


def _err(i, path: dict | str):
    """A marshmallow error for block ``i``: ``path`` is ``{"field": "msg"}`` or a message."""
    if isinstance(path, str):
        return ValidationError({i: [path]})
    key, msg = next(iter(path.items()))
    if isinstance(msg, dict):
        sub, m = next(iter(msg.items()))
        return ValidationError({i: {key: {sub: [m]}}})
    return ValidationError({i: {key: [msg]}})


def _check_image(i, block: dict) -> None:
    src = block.get("source")
    if not isinstance(src, dict):
        raise _err(i, {"source": "Field required: an object with type 'base64' or 'url'."})
    st = src.get("type")
    if st == "base64":
        if not isinstance(src.get("data"), str):
            raise _err(i, {"source": {"data": "Field required (a base64 string)."}})
        if not isinstance(src.get("media_type"), str):
            raise _err(i, {"source": {"media_type": "Field required (a string such as 'image/png')."}})
    elif st == "url":
        if not isinstance(src.get("url"), str):
            raise _err(i, {"source": {"url": "Field required (a string)."}})
    else:
        raise _err(i, {"source": {"type": f"Unsupported image source type {st!r}; expected 'base64' or 'url'."}})


def check_blocks(value, allowed: tuple) -> None:
    """Validate a list of Anthropic content blocks.  Raises ValidationError keyed by index."""
    if not isinstance(value, list):
        raise ValidationError("Input should be a string or a list of content blocks.")
    for i, block in enumerate(value):
        if not isinstance(block, dict):
            raise _err(i, "Content block must be an object.")
        t = block.get("type")
        if not isinstance(t, str):
            raise _err(i, {"type": "Field required (a string)."})
        if t not in allowed:
            raise _err(i, {"type": f"Unsupported content block type {t!r}; expected one of: "
                                   f"{', '.join(allowed)}."})
        if t == "text":
            if not isinstance(block.get("text"), str):
                raise _err(i, {"text": "Field required (a string)."})
        elif t == "image":
            _check_image(i, block)
        elif t == "tool_use":
            if not isinstance(block.get("id"), str):
                raise _err(i, {"id": "Field required (a string)."})
            if not isinstance(block.get("name"), str):
                raise _err(i, {"name": "Field required (a string)."})
            if block.get("input") is not None and not isinstance(block.get("input"), dict):
                raise _err(i, {"input": "Must be an object."})
            # The translation re-serialises ``input`` (recursively): bound its depth as tool schemas are.
            if block.get("input") and json_depth_exceeds(block["input"], MAX_SCHEMA_DEPTH):
                raise _err(i, {"input": f"Nested deeper than {MAX_SCHEMA_DEPTH} levels."})
        elif t == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise _err(i, {"tool_use_id": "Field required (a string)."})
            content = block.get("content")
            if content is not None and not isinstance(content, str):
                try:
                    check_blocks(content, _TOOL_RESULT_BLOCKS)
                except ValidationError as e:
                    raise ValidationError({i: {"content": e.messages}}) from None
            if block.get("is_error") is not None and not isinstance(block.get("is_error"), bool):
                raise _err(i, {"is_error": "Must be a boolean."})


class AnthropicContentField(fields.Field):
    """A message ``content``: a string or a list of content blocks."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            return value
        check_blocks(value, _KNOWN)
        return value


class SystemField(fields.Field):
    """``system``: a string or a list of ``text`` blocks (Anthropic accepts both)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            return value
        check_blocks(value, ("text",))
        return value


class AnthropicMessageSchema(BaseSchema):
    __model__ = p.AnthropicMessage
    role = fields.String(required=True, validate=validate.OneOf(("user", "assistant")))
    content = AnthropicContentField(required=True)

    @validates_schema
    def _not_null(self, data, **kwargs):
        for k in ("role", "content"):
            if data.get(k) is None:
                raise ValidationError({k: ["Field required."]})


class AnthropicToolSchema(BaseSchema):
    """A client tool ``{name, description, input_schema}`` (``type`` absent or ``custom``)."""
    __model__ = p.AnthropicTool
    type = fields.String()
    name = fields.String(required=True)
    description = fields.String()
    input_schema = fields.Dict(required=True)
    cache_control = fields.Dict()

    @validates_schema
    def _shape(self, data, **kwargs):
        t = data.get("type")
        if t not in (None, "custom"):
            raise ValidationError({"type": [f"Unsupported tool type {t!r}: only client tools "
                                             f"(name, description, input_schema) are supported."]})
        if not data.get("name"):
            raise ValidationError({"name": ["Field required (a non-empty string)."]})
        if data.get("input_schema") is None:
            raise ValidationError({"input_schema": ["Field required (a JSON schema object)."]})


class AnthropicToolChoiceSchema(BaseSchema):
    __model__ = p.AnthropicToolChoice
    type = fields.String(required=True, validate=validate.OneOf(("auto", "any", "tool", "none")))
    name = fields.String()
    disable_parallel_tool_use = StrictBool()

    @validates_schema
    def _named(self, data, **kwargs):
        if data.get("type") is None:
            raise ValidationError({"type": ["Field required: one of auto, any, tool, none."]})
        if data["type"] == "tool" and not data.get("name"):
            raise ValidationError({"name": ["tool_choice of type 'tool' requires a non-empty 'name'."]})


class CountTokensRequestSchema(BaseSchema):
    """``POST /v1/messages/count_tokens``: the prompt part of a Messages request."""
    __model__ = p.CountTokensRequest
    model = fields.Raw()
    messages = fields.List(fields.Nested(AnthropicMessageSchema), required=True)
    system = SystemField()
    tools = fields.List(fields.Nested(AnthropicToolSchema))
    tool_choice = fields.Nested(AnthropicToolChoiceSchema)
    thinking = fields.Dict()

    @validates("messages")
    def _messages(self, value, **kwargs):
        if value is None:
            raise ValidationError("Field required.")
        if not value:
            raise ValidationError("messages must not be empty.")


class MessagesRequestSchema(CountTokensRequestSchema):
    """``POST /v1/messages``."""
    __model__ = p.MessagesRequest
    max_tokens = StrictInt(required=True)
    stop_sequences = fields.List(fields.String())
    stream = StrictBool()
    metadata = fields.Dict()
    temperature = StrictFloat()
    top_p = StrictFloat()
    top_k = StrictInt()
    service_tier = fields.String()
    ignore_eos = StrictBool()
    kv_transfer_params = fields.Dict()
    output_config = fields.Dict()

    @validates("max_tokens")
    def _max_tokens(self, value, **kwargs):
        if value is None:
            raise ValidationError("Field required.")


messages_request_schema = MessagesRequestSchema()
count_tokens_request_schema = CountTokensRequestSchema()
