"""``POST /v1/responses`` request schema (OpenAI Responses API subset, per the seeds).

Used: model, input (a string, or items ``message`` / ``function_call`` /
``function_call_output``; message content a string or parts ``input_text``, ``input_image``
(``image_url`` string), ``input_audio`` (``data`` + ``format``, flat as in the seeds or nested
under ``input_audio`` as in OpenAI chat), and ``output_text`` / ``refusal`` in assistant
history), instructions, max_output_tokens, tools (flat ``{"type":"function","name",
"description","parameters"}``; the nested chat form is accepted too), tool_choice (``none``,
``auto``, ``required``, ``{"type":"function","name"}``, and ``allowed_tools`` / ``custom``
which are accepted but not enforced), text.format (``text``, ``json_object``,
``json_schema``), include, top_logprobs, stream, and the vLLM extensions ignore_eos and
kv_transfer_params.  Accepted and ignored: previous_response_id, store, reasoning,
temperature, top_p, metadata, parallel_tool_calls, truncation, user, service_tier.

Errors follow the reference's wording where it has one (api.md 2.2), prefixed by the path
of the failing field: ``input[1].type: unsupported input item type "reasoning"``.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validates

from generation.adapters import protocol as p

from .common import BaseSchema, StrictBool, StrictFloat, StrictInt

TEXT_PARTS = p.TEXT_PARTS


def _part_error(i, key: str | None, msg: str) -> ValidationError:
    return ValidationError({i: {key: [msg]}} if key else {i: [msg]})


def check_parts(content) -> None:
    """Validate a message item's ``content``: a string or a list of typed parts."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ValidationError("Input should be a string or a list of content parts.")
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise _part_error(i, None, "Content part must be an object.")
        t = part.get("type")
        if t is None and "text" in part:
            t = "input_text"
        if t in TEXT_PARTS:
            key = "refusal" if t == "refusal" else "text"
            if not isinstance(part.get(key), str):
                raise _part_error(i, key, "Field required (a string).")
        elif t == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):                 # tolerate the chat shape {"url": ...}
                url = url.get("url")
            if not isinstance(url, str):
                raise _part_error(i, "image_url", "Field required (a URL string; file_id images are not supported).")
        elif t == "input_audio":
            audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else part
            if not isinstance(audio.get("data"), str):
                raise _part_error(i, "data", "Field required (base64-encoded audio).")
            if audio.get("format") is not None and not isinstance(audio.get("format"), str):
                raise _part_error(i, "format", "Must be a string such as 'wav' or 'mp3'.")
        else:
            raise _part_error(i, "type", f'unsupported input content type "{t if t is not None else ""}"')


def _check_item(i, item) -> None:
    if not isinstance(item, dict):
        raise ValidationError({i: ["Input item must be an object."]})
    t = item.get("type")
    if t is None or t == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise ValidationError({i: {"role": ["Field required: one of user, assistant, system, developer."]}})
        if "content" not in item or item["content"] is None:
            raise ValidationError({i: {"content": ["Field required."]}})
        try:
            check_parts(item["content"])
        except ValidationError as e:
            raise ValidationError({i: {"content": e.messages}}) from None
    elif t == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise ValidationError({i: {key: ["Field required (a string)."]}})
    elif t == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise ValidationError({i: {"call_id": ["Field required (a string)."]}})
        out = item.get("output")
        if not isinstance(out, str):
            if out is None:
                raise ValidationError({i: {"output": ["Field required (a string)."]}})
            try:
                check_parts(out)
            except ValidationError as e:
                raise ValidationError({i: {"output": e.messages}}) from None
    else:
        raise ValidationError({i: {"type": [f'unsupported input item type "{t}"']}})


class InputField(fields.Field):
    """``input``: a string (one user message) or a list of input items."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValidationError("input must be a string or array")
        for i, item in enumerate(value):
            _check_item(i, item)
        return value


class ToolsField(fields.Field):
    """``tools``: function tools, flat (Responses) or nested (chat) shape."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, list):
            raise ValidationError("tools must be an array")
        for i, tool in enumerate(value):
            if not isinstance(tool, dict):
                raise ValidationError({i: ["Tool must be an object."]})
            t = tool.get("type")
            if t != "function":
                raise ValidationError({i: {"type": [f'unsupported tool type "{t if t is not None else ""}"']}})
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if not isinstance(fn.get("name"), str) or not fn.get("name"):
                raise ValidationError({i: {"name": ["tool name is required"]}})
            for key in ("parameters",):
                if fn.get(key) is not None and not isinstance(fn.get(key), dict):
                    raise ValidationError({i: {key: ["Must be a JSON schema object."]}})
            if fn.get("description") is not None and not isinstance(fn.get("description"), str):
                raise ValidationError({i: {"description": ["Must be a string."]}})
        return value


class ToolChoiceField(fields.Field):
    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            if value not in ("none", "auto", "required"):
                raise ValidationError("Must be 'none', 'auto', 'required' or a tool choice object.")
            return value
        if not isinstance(value, dict):
            raise ValidationError("Must be a string or an object.")
        t = value.get("type")
        if t == "function":
            name = value.get("name")
            if name is None and isinstance(value.get("function"), dict):
                name = value["function"].get("name")
            if not isinstance(name, str) or not name:
                raise ValidationError({"name": ["tool_choice function requires a name"]})
        elif t not in ("allowed_tools", "custom"):
            raise ValidationError({"type": [f"unknown ToolChoice type: {t if t is not None else ''}"]})
        return value


class TextFormatSchema(BaseSchema):
    __model__ = p.TextFormat
    type = fields.String(required=True)
    name = fields.String()
    schema = fields.Dict()
    description = fields.String()
    strict = StrictBool()

    @validates("type")
    def _type(self, value, **kwargs):
        if value not in ("text", "json_object", "json_schema"):
            raise ValidationError("Must be one of: text, json_object, json_schema.")


class TextConfigSchema(BaseSchema):
    __model__ = p.TextConfig
    format = fields.Nested(TextFormatSchema)
    verbosity = fields.String()


class ResponsesRequestSchema(BaseSchema):
    __model__ = p.ResponsesRequest
    model = fields.Raw()
    input = InputField(required=True, error_messages={"required": "input is required"})
    instructions = fields.String()
    max_output_tokens = StrictInt()
    tools = ToolsField()
    tool_choice = ToolChoiceField()
    parallel_tool_calls = StrictBool()
    text = fields.Nested(TextConfigSchema)
    include = fields.List(fields.String())
    top_logprobs = StrictInt()
    stream = StrictBool()
    ignore_eos = StrictBool()
    kv_transfer_params = fields.Dict()
    temperature = StrictFloat()
    top_p = StrictFloat()
    store = StrictBool()
    metadata = fields.Dict()
    previous_response_id = fields.String()
    user = fields.String()
    truncation = fields.String()
    service_tier = fields.String()
    reasoning = fields.Dict()

    @validates("input")
    def _input(self, value, **kwargs):
        if value is None:
            raise ValidationError("input is required")

    @validates("top_logprobs")
    def _top(self, value, **kwargs):
        if value is not None and not 0 <= value <= 20:
            raise ValidationError("Must be between 0 and 20.")


responses_request_schema = ResponsesRequestSchema()
