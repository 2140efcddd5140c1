"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` request schemas (Anthropic
Messages API subset).

Used: model, messages (role ``user``/``assistant``, and ``system`` as vLLM accepts it: Claude
Code sends one inside ``messages`` for a model it does not know; vLLM also maps Claude Code's
``ctx``/``msg`` roles to ``user``; content a string or blocks ``text``, ``image`` with a
``base64`` or ``url`` source, ``tool_use``, ``tool_result``), system (a string or a list of text
blocks, as Anthropic allows), max_tokens (required on /v1/messages), tools (``{name,
description, input_schema}`` plus vLLM's ``strict`` and ``defer_loading``), tool_choice
(``auto``/``any``/``tool``/``none``), stop_sequences, stream, and the vLLM extensions
ignore_eos, kv_transfer_params and chat_template_kwargs.

Validated, then left to the layers that use them: ``thinking`` (``{"type": "enabled",
"budget_tokens": int}``, ``{"type": "adaptive"}``, ``{"type": "disabled"}`` or vLLM 0.34's
``{"type": "between_tools"}``, read as disabled), ``min_tokens`` (vLLM's extension, 0 to
``max_tokens``),
``output_config`` (vLLM's ``{effort, format: {"type": "json_schema", "schema"}}``) and
``context_management`` (``{"edits": [{"type": ...}, ...]}``).  ``cache_control`` is accepted
wherever Anthropic puts it (system, message and tool_result blocks, tools) and, as in vLLM,
has no effect.  Accepted and ignored: metadata, temperature, top_p, top_k, service_tier.

History blocks a simulator cannot use (``thinking``, ``redacted_thinking``, ``document``,
``tool_reference``, server-tool results) are accepted and contribute no tokens; any other block
type is a 400 naming the block, e.g. ``messages[0].content[1].type``.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, pre_load, validate, validates, validates_schema

from generation.adapters import protocol as p
from generation.adapters.fields import MAX_STOP_STRINGS
from generation.structured.tool_validation import MAX_SCHEMA_DEPTH, json_depth_exceeds

from . import field_order as order
from .common import (BaseSchema, BoundedList, Dict, List, Literal, Str, StrList, StrictBool, StrictFloat, StrictInt,
                     mm_payload_alias, refuse)
from .lax import MM_PAYLOADS, lax_bool, lax_literal, lax_str

# Block types that carry meaning for the simulator, and history blocks accepted but skipped.
USED_BLOCKS = ("text", "image", "tool_use", "tool_result")
SKIPPED_BLOCKS = ("thinking", "redacted_thinking", "document", "search_result", "server_tool_use",
                  "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                  "container_upload", "tool_reference")
# vLLM 0.34's tool changes: in a ``system`` message of ``messages`` only, they add (by reference
# to a declared tool, or by definition) or remove tools (its _resolve_tools)
TOOL_CHANGES = ("tool_addition", "tool_removal")
_KNOWN = USED_BLOCKS + SKIPPED_BLOCKS + TOOL_CHANGES
# a block's fields that vLLM 0.34's AnthropicContentBlock types ``str | None`` (a ``thinking: 5``
# was accepted here and is vLLM's 400)
STRING_FIELDS = ("text", "id", "tool_use_id", "name", "tool_name", "thinking", "signature", "data")
# tool_reference: Claude Code's tool search answers with references to deferred tools.
_TOOL_RESULT_BLOCKS = ("text", "image", "document", "search_result", "tool_reference")

# Roles: Anthropic's two, the inline ``system`` vLLM accepts, and Claude Code's non-standard
# roles that vLLM maps onto ``user`` (``AnthropicMessage.normalize_role``).
ROLES = ("user", "assistant", "system")
ROLE_ALIASES = {"ctx": "user", "msg": "user"}
THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
EFFORTS = ("low", "medium", "high", "xhigh", "max")


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
        for key in STRING_FIELDS:           # vLLM's AnthropicContentBlock: str | None
            if block.get(key) is not None and not isinstance(block[key], str):
                raise _err(i, {key: "Must be a string."})
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
        elif t in TOOL_CHANGES:
            _check_tool_change(i, t, block.get("tool"))
        elif t == "tool_reference":
            if not isinstance(block.get("tool_name", block.get("name")), str):
                raise _err(i, {"tool_name": "Field required (a string)."})
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


def _check_tool_change(i, kind: str, tool) -> None:
    """A ``tool_addition`` / ``tool_removal`` block's ``tool`` (vLLM 0.34's
    ``AnthropicContentBlock.validate_tool_change`` and its ``AnthropicToolChange`` union): a
    ``tool_reference`` (``name``) or, for an addition, a ``tool_definition`` (``definition``, a
    tool as ``tools`` holds them)."""
    if tool is None:
        raise _err(i, f"tool is required for {kind} blocks")
    if not isinstance(tool, dict):
        raise _err(i, {"tool": "Must be an object."})
    t = tool.get("type")
    if t == "tool_reference":
        if not isinstance(tool.get("name"), str):
            raise _err(i, {"tool": {"name": "Field required (a string)."}})
    elif t == "tool_definition":
        if kind == "tool_removal":
            raise _err(i, "tool_removal only accepts a tool_reference")
        definition = tool.get("definition")
        errors = _tool_schema().validate(definition) if isinstance(definition, dict) else {"_schema": [
            "Field required (an object with name and input_schema)."]}
        if errors:
            raise ValidationError({i: {"tool": {"definition": errors}}})
    else:
        raise _err(i, {"tool": {"type": "Must be one of: tool_reference, tool_definition."}})


def _tool_schema():
    schema = _TOOL_SCHEMA.get("schema")
    if schema is None:
        schema = _TOOL_SCHEMA["schema"] = AnthropicToolSchema()
    return schema


_TOOL_SCHEMA: dict = {}


def tool_changes_outside_system(content) -> str | None:
    """vLLM 0.34's ``AnthropicMessage.validate_tool_change_role``: the first tool-change block
    type of a non-system message's ``content`` (refused there), else None."""
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") in TOOL_CHANGES:
                return block["type"]
    return None


def _role_error(kind: str) -> str:
    return f'{kind} blocks are only allowed in messages with role "system"'


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
        kind = tool_changes_outside_system(value)
        if kind is not None:            # vLLM 0.34's validate_system
            raise ValidationError(_role_error(kind))
        check_blocks(value, ("text",))
        return value


class RoleField(fields.String):
    """A message ``role``: one of :data:`ROLES`, Claude Code's ``ctx``/``msg`` read as ``user``."""

    def _deserialize(self, value, attr, data, **kwargs):
        role = ROLE_ALIASES.get(value, value) if isinstance(value, str) else value
        if role not in ROLES:
            raise ValidationError(f"Must be one of: {', '.join(ROLES)}.")
        return role


class AnthropicMessageSchema(BaseSchema):
    __model__ = p.AnthropicMessage
    role = RoleField(required=True)
    content = AnthropicContentField(required=True)

    @validates_schema
    def _not_null(self, data, **kwargs):
        for k in ("role", "content"):
            if data.get(k) is None:
                raise ValidationError({k: ["Field required."]})
        kind = tool_changes_outside_system(data["content"]) if data["role"] != "system" else None
        if kind is not None:
            raise ValidationError({"content": [_role_error(kind)]})


MIN_THINKING_BUDGET = 1024     # tokens: the least thinking budget vLLM 0.34 and Anthropic's API take


class ThinkingField(fields.Field):
    """``thinking``: ``{"type": "enabled", "budget_tokens": N}``, ``{"type": "adaptive"}`` (Claude
    Code's default), ``{"type": "disabled"}`` or ``{"type": "between_tools"}`` (vLLM 0.34: off up
    front, read as disabled); loaded as the validated dict.  vLLM reads none
    of it; its effect on a simulated reasoning model belongs to the reasoning layer."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise ValidationError("Must be an object.")
        if value.get("type") not in THINKING_TYPES:
            raise ValidationError({"type": [f"Must be one of: {', '.join(THINKING_TYPES)}."]})
        budget = value.get("budget_tokens")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValidationError({"budget_tokens": ["Must be a positive integer."]})
        if value["type"] == "enabled":
            # vLLM 0.34's AnthropicThinkingConfigEnabled: budget_tokens: int = Field(ge=1024), as
            # Anthropic's API requires (anthropic/protocol.py l. 224-232)
            if budget is None:
                raise ValidationError({"budget_tokens": ["Field required."]})
            if budget < MIN_THINKING_BUDGET:
                raise ValidationError({"budget_tokens": [f"Input should be greater than or equal to "
                                                         f"{MIN_THINKING_BUDGET}."]})
        if value.get("display") is not None and not isinstance(value["display"], str):
            raise ValidationError({"display": ["Must be a string."]})
        return value


class AnthropicMessagesField(List):
    """``messages``: ``List(Nested(AnthropicMessageSchema))`` with a fast path: a list whose
    messages all have the plain shape (an object, a ``role`` of :data:`ROLES` or an alias, a
    string ``content`` or a list of blocks :func:`check_blocks` takes) becomes its
    :class:`~generation.adapters.protocol.AnthropicMessage` objects in one loop, as the nested
    schema would load them; anything else goes through the schema, which words the error.  The
    nested schema took ~14 us a message: 100,000 messages cost 1.4 s of the validation lane."""

    def __init__(self, **kwargs):
        super().__init__(fields.Nested(AnthropicMessageSchema), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if value.__class__ is list:
            out, message = [], p.AnthropicMessage
            try:
                for m in value:
                    if m.__class__ is not dict:
                        break
                    role, content = m.get("role"), m.get("content")
                    if role.__class__ is not str:
                        break
                    role = ROLE_ALIASES.get(role, role)
                    if role not in ROLES:
                        break
                    if content.__class__ is list:
                        check_blocks(content, _KNOWN)
                        if role != "system" and tool_changes_outside_system(content):
                            break           # the schema words it
                    elif content.__class__ is not str:
                        break
                    out.append(message(role=role, content=content))
                else:
                    return out
            except ValidationError:
                pass                        # the schema words it, at its index
        return super()._deserialize(value, attr, data, **kwargs)


class OutputFormatSchema(BaseSchema):
    """``output_config.format``: vLLM's ``AnthropicJsonOutputFormat`` (``type`` ``json_schema``,
    the JSON schema under ``schema``)."""
    __model__ = p.AnthropicOutputFormat
    type = fields.String(validate=validate.OneOf(("json_schema",)))
    schema = fields.Dict()

    @validates("schema")
    def _depth(self, value, **kwargs):
        if value is not None and json_depth_exceeds(value, MAX_SCHEMA_DEPTH):
            raise ValidationError(f"Nested deeper than {MAX_SCHEMA_DEPTH} levels.")


class OutputConfigSchema(BaseSchema):
    """``output_config``: ``effort`` (vLLM passes it on as ``reasoning_effort``) and ``format``.
    vLLM 0.34's ``AnthropicOutputConfig.effort`` is ``AnthropicEffort | None``
    (``entrypoints/anthropic/protocol.py``: ``low`` to ``max``, not chat's ``none`` / ``minimal``):
    any other value, a non-string too, is pydantic's ``literal_error`` naming
    ``body.output_config.effort``."""
    __model__ = p.AnthropicOutputConfig
    effort = Literal(*EFFORTS)
    format = fields.Nested(OutputFormatSchema)


class ContextManagementField(fields.Field):
    """``context_management``: ``{"edits": [{"type": str, ...}, ...]}`` (Claude Code clears old
    thinking with it).  A server that keeps no conversation has nothing to edit: checked, unused."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise ValidationError("Must be an object.")
        edits = value.get("edits")
        if edits is None:
            return value
        if not isinstance(edits, list):
            raise ValidationError({"edits": ["Must be a list."]})
        for i, edit in enumerate(edits):
            if not isinstance(edit, dict) or not isinstance(edit.get("type"), str):
                raise ValidationError({"edits": {i: {"type": ["Field required (a string)."]}}})
        return value


class AnthropicToolSchema(BaseSchema):
    """A client tool ``{name, description, input_schema}`` (``type`` absent or ``custom``), with
    vLLM's ``strict`` and ``defer_loading`` (Claude Code's tool search defers most tools)."""
    __model__ = p.AnthropicTool
    type = fields.String()
    name = fields.String(required=True)
    description = fields.String()
    input_schema = fields.Dict(required=True)
    cache_control = fields.Dict()
    strict = StrictBool()
    defer_loading = StrictBool()

    @pre_load
    def _client_tools_only(self, data, **kwargs):
        """vLLM 0.34's ``reject_anthropic_defined_tools``: a built-in tool (``web_search_*``,
        ``bash_*``, ``text_editor_*``, ... : a versioned ``type`` and no ``input_schema``) is
        refused by its type before the missing schema is reported."""
        t = data.get("type") if isinstance(data, dict) else None
        if t not in (None, "custom"):
            raise ValidationError({"type": [f"tool type {t!r} is not supported; only custom tools with an "
                                             f"input_schema are supported"]})
        return data

    @validates_schema
    def _shape(self, data, **kwargs):
        if not data.get("name"):
            raise ValidationError({"name": ["Field required (a non-empty string)."]})
        if data.get("input_schema") is None:
            raise ValidationError({"input_schema": ["Field required (a JSON schema object)."]})


class AnthropicToolsField(BoundedList):
    """``fields.List(fields.Nested(AnthropicToolSchema))`` with a fast path: a list whose tools
    all have the plain valid shape (``type`` absent or ``custom``, a non-empty ``name``, an
    ``input_schema`` object, the optional fields of their types) becomes its
    :class:`~generation.adapters.protocol.AnthropicTool` objects in one loop, as the nested
    schema would load them; anything else goes through the schema, which words the error.  The
    nested schema took ~20 us a tool on the hub: 120,000 minimal tools (3.7 MB) held it 2.6 s."""

    def __init__(self, **kwargs):
        super().__init__(fields.Nested(AnthropicToolSchema), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if value.__class__ is list:
            out = []
            tool = p.AnthropicTool
            for t in value:
                if t.__class__ is not dict:
                    break
                get = t.get
                kind, name, desc, schema = get("type"), get("name"), get("description"), get("input_schema")
                cache, strict, defer = get("cache_control"), get("strict"), get("defer_loading")
                if not ((kind is None or kind == "custom") and name and name.__class__ is str
                        and schema.__class__ is dict and (desc is None or desc.__class__ is str)
                        and (cache is None or cache.__class__ is dict)
                        and (strict is None or strict.__class__ is bool)
                        and (defer is None or defer.__class__ is bool)):
                    break
                out.append(tool(type=kind, name=name, description=desc, input_schema=dict(schema),
                                cache_control=None if cache is None else dict(cache), strict=strict,
                                defer_loading=defer))
            else:
                return out
        return super()._deserialize(value, attr, data, **kwargs)


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


def _anthropic_wording(messages):
    """``messages`` (marshmallow's error tree) with its missing-field message in Anthropic's words
    (``max_tokens: Field required``, as its API answers)."""
    if isinstance(messages, dict):
        return {k: _anthropic_wording(v) for k, v in messages.items()}
    if isinstance(messages, list):
        return [_anthropic_wording(v) for v in messages]
    return "Field required." if messages == MISSING else messages


MISSING = fields.Field.default_error_messages["required"]


class ModelField(Str):
    """Anthropic's ``model: str`` (required) with vLLM's ``validate_model``
    (anthropic/protocol.py:362, :494): an empty string is its ``Model is required`` (pydantic's
    ``value_error``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if type(value) is str and value:
            return value
        value = super()._deserialize(value, attr, data, **kwargs)
        raise refuse(("", value, "value_error", "Value error, Model is required",
                      {"error": ValueError("Model is required")}))


class CountTokensRequestSchema(BaseSchema):
    """``POST /v1/messages/count_tokens``: the prompt part of a Messages request.  ``model``,
    ``messages`` (and on /v1/messages ``max_tokens``) are required, as vLLM's pydantic models
    declare them (anthropic/protocol.py:272-274, :477-478): absent, each is pydantic's
    ``missing`` in the list of the body's errors."""
    __model__ = p.CountTokensRequest
    __order__ = order.AnthropicCountTokensRequest
    model = ModelField(required=True)
    messages = AnthropicMessagesField(required=True)
    system = SystemField()
    tools = AnthropicToolsField()
    tool_choice = fields.Nested(AnthropicToolChoiceSchema)
    thinking = ThinkingField()
    context_management = ContextManagementField()
    chat_template_kwargs = Dict()
    output_config = fields.Nested(OutputConfigSchema)       # AnthropicCountTokensRequest's too (its effort)

    @validates("messages")
    def _messages(self, value, **kwargs):
        if value is None:
            raise ValidationError("Field required.")
        if not value:
            raise ValidationError("messages must not be empty.")

    def handle_error(self, error, data, **kwargs):
        raise ValidationError(_anthropic_wording(error.messages), error.field_name, data) from None


class MessagesRequestSchema(CountTokensRequestSchema):
    """``POST /v1/messages``."""
    __model__ = p.MessagesRequest
    __order__ = order.AnthropicMessagesRequest
    max_tokens = StrictInt(required=True)

    def validated_body(self, body: dict) -> dict:
        """After ``apply_return_mm_kwargs_alias`` (anthropic/protocol.py:382)."""
        return mm_payload_alias(body)

    stop_sequences = StrList()
    stream = StrictBool()
    metadata = fields.Dict()
    temperature = StrictFloat()
    top_p = StrictFloat()
    top_k = StrictInt()
    service_tier = fields.String()
    ignore_eos = StrictBool()
    kv_transfer_params = Dict()
    # dict[str, Any] | None / vllm_xargs' value types: checked with the engine's integer range
    # by check_extra_args (to_sampling_params of the chat request vLLM converts to)
    ec_transfer_params = Dict()
    vllm_xargs = fields.Raw()
    min_tokens = StrictInt()
    # vLLM 0.34's AnthropicMessagesRequest extensions (anthropic/protocol.py), checked only:
    # cache_salt has pydantic's length bounds there, not chat's validate_cache_salt
    mm_payload = lax_literal(*MM_PAYLOADS)
    return_mm_kwargs = lax_bool()
    cache_salt = lax_str(min_length=1, max_length=1024)

    @validates("stop_sequences")
    def _stop_sequences(self, value, **kwargs):
        # vLLM 0.34: Annotated[list[str], Field(max_length=envs.VLLM_MAX_STOP_STRINGS)] | None
        # (anthropic/protocol.py:278-280), pydantic's too_long
        if value is not None and len(value) > MAX_STOP_STRINGS:
            raise refuse(("", value, "too_long", f"List should have at most {MAX_STOP_STRINGS} items after "
                          f"validation, not {len(value)}",
                          {"field_type": "List", "max_length": MAX_STOP_STRINGS, "actual_length": len(value)}))

    @validates_schema
    def _thinking_budget(self, data, **kwargs):
        """vLLM 0.34's validate_thinking_budget (anthropic/protocol.py l. 387-398): an enabled
        thinking budget below max_tokens, except on a P/D prefill leg (``do_remote_decode``)."""
        thinking, max_tokens = data.get("thinking"), data.get("max_tokens")
        if not isinstance(thinking, dict) or thinking.get("type") != "enabled" or not isinstance(max_tokens, int):
            return
        kv = data.get("kv_transfer_params")
        if isinstance(kv, dict) and kv.get("do_remote_decode"):
            return
        if thinking.get("budget_tokens", 0) >= max_tokens:
            raise ValidationError({"thinking": {"budget_tokens": ["thinking.budget_tokens must be less than max_tokens"]}})

    @validates("max_tokens")
    def _max_tokens(self, value, **kwargs):
        if value is None:
            raise ValidationError("Field required.")
        if value <= 0:
            # vLLM 0.34's validate_max_tokens (anthropic/protocol.py:369-374), a pydantic value_error
            raise refuse(("", value, "value_error", "Value error, max_tokens must be positive",
                          {"error": ValueError("max_tokens must be positive")}))


messages_request_schema = MessagesRequestSchema()
count_tokens_request_schema = CountTokensRequestSchema()
