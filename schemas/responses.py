"""``POST /v1/responses`` request schema (OpenAI Responses API subset, per the seeds).

Used: model, input (a string, or items ``message`` / ``function_call`` (with an optional
``namespace``) / ``function_call_output`` / ``reasoning`` / ``custom_tool_call`` /
``custom_tool_call_output``; message content a string or parts ``input_text``, ``input_image``
(``image_url`` string), ``input_audio`` (``data`` + ``format``, flat as in the seeds or nested
under ``input_audio`` as in OpenAI chat), and ``output_text`` / ``refusal`` in assistant
history), instructions, max_output_tokens, tools, tool_choice (``none``, ``auto``,
``required``, ``{"type":"function","name"}``, and ``allowed_tools`` / ``custom`` / hosted tool
types which are accepted but not enforced), text.format (``text``, ``json_object``,
``json_schema``), include, top_logprobs, stream, and the vLLM extensions ignore_eos and
kv_transfer_params; store and background (with ``VLLM_ENABLE_RESPONSES_API_STORE=1``: a
background request is answered ``queued`` and runs on, ``GET /v1/responses/{id}`` finds it, and a
cancel stops it), previous_response_id (the stored conversation, continued; vLLM's 404 for an id
it has not stored).  Accepted and ignored: reasoning, metadata (a ``dict[str, str]``, echoed),
temperature, top_p, parallel_tool_calls, truncation, user, service_tier,
prompt_cache_key.

Tools are the openai SDK's ``Tool`` union, as vLLM validates them: ``function`` (flat
``{"type":"function","name","description","parameters"}``; the nested chat form is accepted
too), ``namespace`` (``{name, description, tools: [function or custom tools]}``, Codex's
grouping), ``custom``, and the hosted tools (``web_search``, ``file_search``, ``mcp``,
``local_shell``, ``shell``, ``code_interpreter``, ...).  Only function tools, namespaced ones
included, are given to the model (vLLM's ``iter_response_function_tool_dicts``); history items
of hosted tools (``web_search_call``, ``local_shell_call``, ...) are accepted and contribute no
tokens.

Errors follow the reference's wording where it has one (api.md 2.2), prefixed by the path
of the failing field: ``input[1].type: unsupported input item type "reasoning"``.
"""
from __future__ import annotations

import uuid

from marshmallow import ValidationError, fields, validates

from generation.adapters import protocol as p

from . import field_order as order
from .common import BaseSchema, Dict, List, ModelDict, ModelNested, Str, IntList, StrictBool, StrictFloat, StrictInt, StringOrList, mm_payload_alias
from .lax import MM_PAYLOADS, DictOfDicts, StrDict, lax_bool, lax_dict, lax_float, lax_int, lax_literal, lax_str

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


# The openai SDK's ``Tool`` union (what vLLM's ResponsesRequest validates ``tools`` against), with
# the fields each type requires besides ``type``.
TOOL_TYPES = {
    "function": (), "namespace": (), "custom": ("name",),
    "web_search": (), "web_search_2025_08_26": (), "web_search_preview": (),
    "web_search_preview_2025_03_11": (), "file_search": ("vector_store_ids",), "computer": (),
    "computer_use_preview": ("display_height", "display_width", "environment"),
    "mcp": ("server_label",), "code_interpreter": ("container",), "image_generation": (),
    "local_shell": (), "shell": (), "apply_patch": (), "tool_search": (),
    "programmatic_tool_calling": (),
}
# Input items of hosted tools: history a simulator accepts and gives no tokens.
SKIPPED_ITEMS = ("web_search_call", "file_search_call", "computer_call", "computer_call_output",
                 "code_interpreter_call", "image_generation_call", "local_shell_call",
                 "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
                 "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
                 "mcp_approval_response", "mcp_call", "tool_search_call", "tool_search_output",
                 "item_reference", "compaction", "compaction_trigger", "additional_tools",
                 "configuration_update", "program", "program_output")
# a function_call's ``status`` (the SDK's ResponseFunctionToolCall)
CALL_STATUSES = ("in_progress", "completed", "incomplete")
# ``include`` values (the SDK's ``ResponseIncludable``, a Literal in vLLM's request).
# vLLM 0.34's ResponsesRequest.include: list[Literal[...]] | None (responses/protocol.py), in its order
INCLUDABLE = ("code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
              "message.input_image.image_url", p.LOGPROBS_INCLUDE, "reasoning.encrypted_content")


def _check_text_list(i, item, key: str, part_type: str, required: bool) -> None:
    """``summary`` / ``content`` of a reasoning item: a list of ``{"type": part_type, "text"}``."""
    value = item.get(key)
    if value is None:
        if required:
            raise ValidationError({i: {key: ["Field required (a list)."]}})
        return
    if not isinstance(value, list):
        raise ValidationError({i: {key: ["Must be a list."]}})
    for j, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type", part_type) != part_type \
                or not isinstance(part.get("text"), str):
            raise ValidationError({i: {key: {j: [f'Must be {{"type": "{part_type}", "text": <string>}}.']}}})


def _check_reasoning(i, item) -> None:
    """A ``reasoning`` item (an earlier answer's reasoning, sent back by Codex).  vLLM reads its
    ``content`` (else its first ``summary``) and refuses ``encrypted_content``, which only
    OpenAI can decrypt."""
    _check_text_list(i, item, "summary", "summary_text", required=True)
    _check_text_list(i, item, "content", "reasoning_text", required=False)
    enc = item.get("encrypted_content")
    if enc is not None:
        if not isinstance(enc, str):
            raise ValidationError({i: {"encrypted_content": ["Must be a string."]}})
        raise ValidationError({i: {"encrypted_content": ["Encrypted content is not supported."]}})


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
    elif t in ("function_call", "custom_tool_call"):
        for key in ("call_id", "name", "arguments" if t == "function_call" else "input"):
            if not isinstance(item.get(key), str):
                raise ValidationError({i: {key: ["Field required (a string)."]}})
        if item.get("namespace") is not None and not isinstance(item["namespace"], str):
            raise ValidationError({i: {"namespace": ["Must be a string."]}})
        if item.get("status") is not None and item["status"] not in CALL_STATUSES:
            raise ValidationError({i: {"status": ["Must be one of: " + ", ".join(CALL_STATUSES) + "."]}})
    elif t == "item_reference":             # the SDK's ItemReference: id required
        if not isinstance(item.get("id"), str):
            raise ValidationError({i: {"id": ["Field required (a string)."]}})
    elif t == "reasoning":
        _check_reasoning(i, item)
    elif t in SKIPPED_ITEMS:
        pass
    elif t in ("function_call_output", "custom_tool_call_output"):
        # the SDK makes a function_call_output's call_id optional (Codex sends outputs of its
        # own, named by ``name`` / ``namespace``, with none)
        cid = item.get("call_id")
        if not isinstance(cid, str) and (t == "custom_tool_call_output" or cid is not None):
            raise ValidationError({i: {"call_id": ["Field required (a string)."]}})
        for key in ("name", "namespace"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise ValidationError({i: {key: ["Must be a string."]}})
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


def normalize_item(item):
    """vLLM 0.34's ``_normalize_openresponses_input_item``: the OpenResponses spec makes
    ``type``, ``id`` and ``status`` of an assistant message or a reasoning item optional (and
    ``annotations`` of its ``output_text`` parts), where the openai SDK requires them.  A missing
    (or null / empty) one gets its default: ``type`` the one it was read as (``message``),
    ``id`` ``msg_<hex>`` / ``rs_<hex>``, ``status`` ``completed``, a reasoning ``summary`` ``[]``,
    ``annotations`` ``[]``.  Other items, and non-objects, are returned as they are."""
    if not isinstance(item, dict):
        return item
    t = item.get("type", "message")
    if not (t == "reasoning" or (t == "message" and item.get("role") == "assistant")):
        return item
    out = dict(item)
    out["type"] = t
    if out.get("id") in (None, ""):
        out["id"] = ("rs_" if t == "reasoning" else "msg_") + uuid.uuid4().hex
    if out.get("status") in (None, ""):
        out["status"] = "completed"
    if t == "reasoning" and out.get("summary") is None:
        out["summary"] = []
    if t == "message" and isinstance(out.get("content"), list):
        out["content"] = [{**c, "annotations": []} if isinstance(c, dict) and c.get("type") == "output_text"
                          and "annotations" not in c else c for c in out["content"]]
    return out


class ResponsesStop(StringOrList):
    """``stop``: ``str | list[str]`` as on chat, but vLLM 0.34's ``ResponsesRequest.to_sampling_params``
    passes ``self.stop if self.stop else []`` on: an empty string is no stop (not chat's
    ``[""]``, which ``SamplingParams`` refuses)."""

    def _deserialize(self, value, attr, data, **kwargs):
        return [] if value == "" else super()._deserialize(value, attr, data, **kwargs)


class InputField(fields.Field):
    """``input``: a string (one user message) or a list of input items, normalised as the
    OpenResponses spec says (:func:`normalize_item`) before they are checked."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValidationError("input must be a string or array")
        value = [normalize_item(item) for item in value]
        for i, item in enumerate(value):
            _check_item(i, item)
        return value


def _check_function(fn: dict) -> dict | None:
    """Errors of a function tool (flat or the nested chat shape), as ``{field: [msg]}``."""
    if not isinstance(fn.get("name"), str) or not fn.get("name"):
        return {"name": ["tool name is required"]}
    if fn.get("parameters") is not None and not isinstance(fn.get("parameters"), dict):
        return {"parameters": ["Must be a JSON schema object."]}
    if fn.get("description") is not None and not isinstance(fn.get("description"), str):
        return {"description": ["Must be a string."]}
    return None


def _check_custom(tool: dict) -> dict | None:
    if not isinstance(tool.get("name"), str) or not tool.get("name"):
        return {"name": ["tool name is required"]}
    fmt = tool.get("format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar")):
        return {"format": ['Must be {"type": "text"} or {"type": "grammar", "syntax", "definition"}.']}
    return None


def _check_namespace(tool: dict) -> dict | None:
    """``{"type": "namespace", name, description, tools: [function or custom tools]}``."""
    for key in ("name", "description"):
        if not isinstance(tool.get(key), str) or (key == "name" and not tool[key]):
            return {key: ["Field required (a string)."]}
    inner = tool.get("tools")
    if not isinstance(inner, list):
        return {"tools": ["Field required (a list of function or custom tools)."]}
    for j, sub in enumerate(inner):
        st = sub.get("type") if isinstance(sub, dict) else None
        if st not in ("function", "custom"):
            return {"tools": {j: {"type": ['Must be "function" or "custom".']}}}
        err = _check_function(sub) if st == "function" else _check_custom(sub)
        if err:
            return {"tools": {j: err}}
    return None


def check_tool(i, tool) -> None:
    """One entry of ``tools``; raises ValidationError keyed by ``i``."""
    if not isinstance(tool, dict):
        raise ValidationError({i: ["Tool must be an object."]})
    t = tool.get("type")
    if not isinstance(t, str) or t not in TOOL_TYPES:        # a list or object: unhashable, not a type
        raise ValidationError({i: {"type": [f'unsupported tool type "{t if t is not None else ""}"']}})
    if t == "function":
        err = _check_function(tool["function"] if isinstance(tool.get("function"), dict) else tool)
    elif t == "namespace":
        err = _check_namespace(tool)
    elif t == "custom":
        err = _check_custom(tool)
    else:
        missing = [k for k in TOOL_TYPES[t] if tool.get(k) is None]
        err = {missing[0]: ["Field required."]} if missing else None
    if err:
        raise ValidationError({i: err})


class ToolsField(fields.Field):
    """``tools``: see the module docstring (:data:`TOOL_TYPES`)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, list):
            raise ValidationError("tools must be an array")
        for i, tool in enumerate(value):
            check_tool(i, tool)
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
        elif t == "allowed_tools":          # the SDK's ToolChoiceAllowed: mode and tools required
            if value.get("mode") not in ("auto", "required"):
                raise ValidationError({"mode": ["Field required: 'auto' or 'required'."]})
            tools = value.get("tools")
            if not isinstance(tools, list) or not all(isinstance(x, dict) for x in tools):
                raise ValidationError({"tools": ["Field required: a list of tool objects."]})
        elif t not in HOSTED_CHOICES:
            raise ValidationError({"type": [f"unknown ToolChoice type: {t if t is not None else ''}"]})
        return value


# tool_choice objects accepted without being enforced: allowed_tools / custom (seeds) and the
# SDK's hosted-tool choices (``ToolChoiceTypes``, ``ToolChoiceMcp``, shell, apply_patch).
HOSTED_CHOICES = ("allowed_tools", "custom", "file_search", "web_search_preview", "computer",
                  "computer_use_preview", "computer_use", "web_search_preview_2025_03_11",
                  "image_generation", "code_interpreter", "mcp", "shell", "apply_patch")


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
    __order__ = order.ResponsesRequest
    model = Str()                               # vLLM: str | None = None
    input = InputField(required=True, error_messages={"required": "input is required"})
    instructions = Str()
    max_output_tokens = StrictInt()                   # any int, as pydantic: past the context TokenizeParams refuses it
    tools = ToolsField()
    tool_choice = ToolChoiceField()
    parallel_tool_calls = StrictBool()
    text = ModelNested(TextConfigSchema, model_name="ResponseTextConfig", allow_none=True)     # the SDK's model
    include = List(lax_literal(*INCLUDABLE), allow_none=True)   # list[Literal[...]] | None
    top_logprobs = StrictInt()      # any int: checked (and echoed) only with the logprobs include
    stream = StrictBool()
    ignore_eos = StrictBool()
    kv_transfer_params = Dict()
    temperature = StrictFloat()
    top_p = StrictFloat()
    store = StrictBool()
    background = StrictBool()
    request_id = Str()
    metadata = StrDict(allow_none=True)           # the SDK's Metadata: dict[str, str]
    previous_response_id = Str()
    user = Str()
    reasoning = ModelDict(model_name="Reasoning", allow_none=True)       # the SDK's Reasoning
    chat_template_kwargs = Dict(allow_none=True)   # vLLM's; over --default-chat-template-kwargs
    thinking_token_budget = fields.Raw()          # vLLM 0.34: caps the reasoning tokens (-1: no cap; sampling._budget)
    prompt_cache_key = Str()
    priority = StrictInt()
    max_tool_calls = StrictInt(int64=True)     # vLLM 0.34: an int (the simulator makes at most one call anyway)
    # vLLM 0.34 ResponsesRequest fields checked as on chat (generation.adapters.fields)
    cache_salt = fields.Raw()
    seed = StrictInt()
    stop = ResponsesStop()
    logit_bias = Dict()
    stop_token_ids = IntList()
    vllm_xargs = fields.Raw()
    # ... and its types, as pydantic reads them (schemas.lax); top_k, min_p and
    # repetition_penalty then get SamplingParams' range checks (fields.check_sampling_ranges)
    presence_penalty = lax_float(ge=-2.0, le=2.0)
    frequency_penalty = lax_float(ge=-2.0, le=2.0)
    top_k = lax_int()
    min_p = lax_float()
    repetition_penalty = lax_float()
    service_tier = lax_literal("auto", "default", "flex", "scale", "priority")
    truncation = lax_literal("auto", "disabled", nullable=True)
    include_reasoning = lax_bool(nullable=False)
    include_stop_str_in_output = lax_bool(nullable=False)
    skip_special_tokens = lax_bool()
    spaces_between_special_tokens = lax_bool(nullable=False)
    enable_response_messages = lax_bool(nullable=False)
    watermarking = lax_bool()
    session_id = lax_str()
    safety_identifier = lax_str()           # echoed in the response object
    mm_payload = lax_literal(*MM_PAYLOADS)
    return_mm_kwargs = lax_bool()
    ec_transfer_params = lax_dict()
    mm_processor_kwargs = lax_dict()
    media_io_kwargs = DictOfDicts()
    prompt = fields.Raw(allow_none=True)              # vLLM's validate_prompt refuses any
    structured_outputs = fields.Raw(allow_none=True)  # refused beside text.format (extract_structured_outputs)

    def validated_body(self, body: dict) -> dict:
        """After ``apply_return_mm_kwargs_alias`` and ``check_tool_usage``
        (responses/protocol.py:667, :865), which sets ``tool_choice: "none"`` where no tools are
        given and the choice is absent (read as ``"auto"``) or ``"none"``."""
        body = mm_payload_alias(body)
        tools = body.get("tools")
        try:
            has_tools = tools is not None and len(tools) > 0
        except TypeError:
            has_tools = True           # vLLM's len() fails there: no key added
        if "tool_choice" not in body and not has_tools:
            body = {**body, "tool_choice": "none"}
        return body

    @validates("input")
    def _input(self, value, **kwargs):
        if value is None:
            raise ValidationError("input is required")


responses_request_schema = ResponsesRequestSchema()
