"""``POST /cohere/v2/chat`` request schema: vLLM 0.34's ``CohereChatV2Request``
(``vllm/entrypoints/cohere/protocol.py``), whose field types are the ``cohere`` SDK's
(``cohere.types``, 7.3.1: ``ChatMessageV2``, ``ToolV2``, ``Document``, ...), read as pydantic
reads them (:mod:`schemas.pydantic_model`) without the SDK.

Fields, in the model's order (pydantic validates them in it): ``model`` (required), ``messages``
(required; ``role`` user / assistant / system / tool, ``content`` a string or typed parts),
``stream``, ``tools``, ``strict_tools``, ``tool_choice`` (``REQUIRED`` / ``NONE``), ``documents``,
``citation_options``, ``response_format``, ``safety_mode``, ``max_tokens``, ``stop_sequences``
(at most ``VLLM_MAX_STOP_STRINGS``), ``temperature``, ``seed``, ``frequency_penalty``,
``presence_penalty``, ``k``, ``p``, ``logprobs``, ``thinking``, ``priority`` and vLLM's
extensions ``watermarking``, ``kv_transfer_params``, ``chat_template_kwargs``.  Other keys
are ignored.

Errors are vLLM's: pydantic's type errors in its validation handler's 400 (every failing field,
every member of a message union), or the model's own validators (``VLLMValidationError``, which
is no ``ValueError``: it escapes pydantic at once, whatever else failed): ``model is required``,
``messages must contain at least one message``, ``max_tokens must be non-negative``,
``tool_choice="REQUIRED" requires at least one tool in tools.``  A ``developer`` message (any
case) is read as ``system`` first (``_normalize_message_roles``).
"""
from __future__ import annotations

from marshmallow import EXCLUDE, Schema, fields, post_load, pre_load

from generation.adapters.fields import MAX_STOP_STRINGS
from generation.adapters.validation import read_bool, read_dict, read_float, read_int, read_str
from generation.errors import Rejected

from .common import INT64
from .pydantic_model import REQUIRED, Anything, Errors, FAIL, ListOf, Literal, Model, Optional, Parsed, Scalar, Union

STR, INT, FLOAT, BOOL, DICT = (Scalar(r) for r in (read_str, read_int, read_float, read_bool, read_dict))
ANY = Anything()         # the SDK's open enums: Union[Literal[...], Any]


def _opt(t):
    return (Optional(t), None)


def _text_item(name: str) -> Model:
    return Model(name, {"type": (Literal("text"), "text"), "text": (STR, REQUIRED)}, tag="type")


def _content(*items: Model) -> Union:
    """The SDK's ``Union[str, List[...]]`` message contents."""
    return Union(STR, ListOf(items[0] if len(items) == 1 else Union(*items)))


DOCUMENT = Model("Document", {"data": (DICT, REQUIRED), "id": _opt(STR)})
IMAGE_URL = Model("ImageUrl", {"url": (STR, REQUIRED), "detail": _opt(ANY)})
USER_CONTENT = _content(_text_item("TextContent"),
                        Model("ImageUrlContent", {"type": (Literal("image_url"), "image_url"),
                                                  "image_url": (IMAGE_URL, REQUIRED)}, tag="type"))
ASSISTANT_CONTENT = _content(_text_item("TextAssistantMessageV2ContentOneItem"),
                             Model("ThinkingAssistantMessageV2ContentOneItem",
                                   {"type": (Literal("thinking"), "thinking"), "thinking": (STR, REQUIRED)},
                                   tag="type"))
SYSTEM_CONTENT = _content(_text_item("TextSystemMessageV2ContentOneItem"))
TOOL_CONTENT = _content(_text_item("TextToolContent"),
                        Model("DocumentToolContent", {"type": (Literal("document"), "document"),
                                                      "document": (DOCUMENT, REQUIRED)}, tag="type"))
TOOL_CALL = Model("ToolCallV2", {
    "id": (STR, REQUIRED), "type": (Literal("function"), "function"),
    "function": _opt(Model("ToolCallV2Function", {"name": _opt(STR), "arguments": _opt(STR)}))})


def _source(name: str, kind: str, payload: str) -> Model:
    return Model(name, {"type": (Literal(kind), kind), "id": _opt(STR), payload: _opt(DICT)}, tag="type")


CITATION = Model("Citation", {
    "start": _opt(INT), "end": _opt(INT), "text": _opt(STR),
    "sources": _opt(ListOf(Union(_source("ToolSource", "tool", "tool_output"),
                                 _source("DocumentSource", "document", "document")))),
    "content_index": _opt(INT), "type": _opt(ANY)})


def _message(role: str, **fields_) -> Model:
    return Model(f"{role.capitalize()}ChatMessageV2", {"role": (Literal(role), role), **fields_}, tag="role")


CHAT_MESSAGE = Union(
    _message("user", content=(USER_CONTENT, REQUIRED)),
    _message("assistant", tool_calls=_opt(ListOf(TOOL_CALL)), tool_plan=_opt(STR),
             content=_opt(ASSISTANT_CONTENT), citations=_opt(ListOf(CITATION))),
    _message("system", content=(SYSTEM_CONTENT, REQUIRED)),
    _message("tool", tool_call_id=(STR, REQUIRED), content=(TOOL_CONTENT, REQUIRED)))
TOOL = Model("ToolV2", {"type": (Literal("function"), "function"), "function": _opt(Model("ToolV2Function", {
    "name": (STR, REQUIRED), "description": _opt(STR), "parameters": (DICT, REQUIRED)}))})
RESPONSE_FORMAT = Union(Model("TextResponseFormatV2", {"type": (Literal("text"), "text")}, tag="type"),
                        Model("JsonObjectResponseFormatV2", {"type": (Literal("json_object"), "json_object"),
                                                             "json_schema": _opt(DICT)}, tag="type"))

# CohereChatV2Request's fields in its order: (type, default); the SDK's ``Optional`` ones null-able
REQUEST_FIELDS = {
    "model": (STR, REQUIRED),
    "messages": (ListOf(CHAT_MESSAGE), REQUIRED),
    "stream": (Optional(BOOL), False),
    "tools": _opt(ListOf(TOOL)),
    "strict_tools": _opt(BOOL),
    "tool_choice": _opt(Literal("REQUIRED", "NONE")),
    "documents": _opt(ListOf(Union(STR, DOCUMENT))),
    "citation_options": _opt(Model("CitationOptions", {"mode": _opt(ANY)})),
    "response_format": _opt(RESPONSE_FORMAT),
    "safety_mode": _opt(ANY),
    "max_tokens": _opt(INT),
    "stop_sequences": _opt(ListOf(STR, MAX_STOP_STRINGS)),
    "temperature": _opt(FLOAT),
    "seed": _opt(INT),
    "frequency_penalty": _opt(FLOAT),
    "presence_penalty": _opt(FLOAT),
    "k": _opt(INT),
    "p": _opt(FLOAT),
    "logprobs": _opt(BOOL),
    "thinking": _opt(Model("Thinking", {"type": (ANY, REQUIRED), "token_budget": _opt(INT)})),
    "priority": _opt(Scalar(read_int, ge=-INT64, le=INT64 - 1)),
    "watermarking": _opt(BOOL),
    "kv_transfer_params": _opt(DICT),
    "chat_template_kwargs": _opt(DICT),
}


def _developer_as_system(messages):
    """``_normalize_message_roles`` (mode ``before``): a ``developer`` role, any case, is
    ``system``; a list it cannot walk is left to the type's errors."""
    try:
        return [{**m, "role": "system"} if m.get("role", "").lower() == "developer" else m for m in messages]
    except (AttributeError, TypeError):
        return messages


def _after(name: str, value) -> None:
    """The model's field validators (mode ``after``: on a value its type took)."""
    if name == "model" and not value:
        raise Rejected("model is required", "model")
    if name == "messages" and not value:
        raise Rejected("messages must contain at least one message", "messages")
    if name == "max_tokens" and value is not None and value < 0:
        raise Rejected("max_tokens must be non-negative", "max_tokens", value)


def read_request(body: dict):
    """The validated request (a :class:`~schemas.pydantic_model.Parsed` of the fields above,
    messages and parts as the SDK's models, ``model_name`` their class) of a JSON object.
    Raises RequestInvalid (pydantic's errors) or Rejected (the model's validators)."""
    errs, out = Errors(), {}
    for name, (t, default) in REQUEST_FIELDS.items():
        if name not in body:
            if default is REQUIRED:
                errs.add((name,), body, "missing", "Field required")
            out[name] = None if default is REQUIRED else default
            continue
        value = _developer_as_system(body[name]) if name == "messages" else body[name]
        r = t.read(value, (name,), errs)
        if r is not FAIL:
            _after(name, r)
        out[name] = r
    if errs.count:
        errs.raise_400()
    if out["tool_choice"] == "REQUIRED" and not out["tools"]:
        raise Rejected('tool_choice="REQUIRED" requires at least one tool in tools.', "tool_choice", "REQUIRED")
    return Parsed("CohereChatV2Request", 0, {}, out)


class CohereChatRequestSchema(Schema):
    """The request (:func:`read_request`) through the marshmallow pipeline of
    :func:`schemas.common.load`: read whole before marshmallow, whose one field only carries it
    (required, so that the field subset :func:`~schemas.common.load` takes keeps it; no request
    field of its own, so not a :class:`~schemas.common.BaseSchema`)."""

    class Meta:
        unknown = EXCLUDE

    request = fields.Raw(required=True)

    @pre_load
    def _read(self, data, **kwargs):
        return {"request": read_request(data)}

    @post_load
    def _typed(self, data, **kwargs):
        return data["request"]


cohere_chat_request_schema = CohereChatRequestSchema()
