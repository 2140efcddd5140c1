"""``POST /v1/embeddings`` request schema (OpenAI embeddings as vLLM serves them).

``input`` takes the four OpenAI wire forms - a string, a list of strings, a list of token
ids, or a list of token-id lists - and is normalised to ``("text", [str, ...])`` or
``("ids", [[int, ...], ...])``.  vLLM's chat-style embedding request (``messages`` instead of
``input``) is accepted too.  ``encoding_format`` is ``float`` (default), ``base64``, ``bytes``
or ``bytes_only``; ``embed_dtype`` and ``endianness`` are vLLM's; ``dimensions`` is an int
whose range the route checks (vLLM's ``PoolingParams``).
"""
from __future__ import annotations

from marshmallow import ValidationError, fields

from . import field_order as order
from .chat import MessagesField
from .common import BaseSchema, Literal, Str, StrictBool, StrictInt, are_token_lists, are_tokens
from .lax import lax_dict, lax_literal

ENCODING_FORMATS = ("float", "base64", "bytes", "bytes_only")
EMBED_DTYPES = ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")      # vLLM's EmbedDType
ENDIANNESS = ("native", "big", "little")
TRUNCATION_SIDES = ("left", "right")

INPUT_FORMS = ("input must be a string, an array of strings, an array of token ids, "
               "or an array of arrays of token ids")
PADDINGS = ("max_length", "do_not_pad")        # vLLM 0.34's PoolingBasicRequestMixin.padding


class EmbeddingInputField(fields.Field):
    """Normalises ``input``; empty forms and empty strings are 400s naming ``input``."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            if value == "":
                raise ValidationError("input cannot be an empty string")
            return ("text", [value])
        if not isinstance(value, list):
            raise ValidationError(INPUT_FORMS)
        if not value:       # no prompt: the route's 400 (vLLM's "You must pass at least one prompt")
            return ("text", [])
        if all(isinstance(v, str) for v in value):
            if any(v == "" for v in value):
                raise ValidationError("input cannot be an empty string")
            return ("text", list(value))
        if are_tokens(value):
            return ("ids", [value])
        if all(isinstance(v, list) for v in value):
            if any(len(v) == 0 for v in value):
                raise ValidationError("input must not contain an empty token-id array")
            if are_token_lists(value):
                return ("ids", value)
        raise ValidationError(INPUT_FORMS)


class PoolingChecks(BaseSchema):
    """Fields of vLLM 0.34's pooling requests (``PoolingBasicRequestMixin``, and the keys its
    ``reject_removed_pooling_parameters`` refuses) that the simulator checks
    (:func:`generation.adapters.pooling.check_request`) and otherwise ignores."""
    cache_salt = fields.Raw()
    mm_processor_kwargs = lax_dict()
    media_io_kwargs = fields.Raw()
    padding = lax_literal(*PADDINGS, nullable=True)
    normalize = fields.Raw()        # removed in vLLM: refused whatever its value
    task = fields.Raw()             # only a removed task is refused where it is not a field


def _bad_truncate():
    raise ValidationError("truncate_prompt_tokens must be -1 (the model's maximum) or a positive integer")


def is_chat_messages(value) -> bool:
    """vLLM 0.34's ``_is_chat_messages`` (pooling/embed/protocol.py l. 61-67): a non-empty list
    of objects each with a string ``role``."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)


def is_batched_chat_messages(value) -> bool:
    """``_is_batched_chat_messages`` (l. 70-75): a non-empty list of such conversations."""
    return isinstance(value, list) and bool(value) and all(is_chat_messages(c) for c in value)


class EmbeddingMessagesField(MessagesField):
    """``messages`` of vLLM 0.34's embedding requests: one conversation (EmbeddingChatRequest)
    or a non-empty list of non-empty conversations (EmbeddingBatchChatRequest, l. 93-110), one
    embedding each.  Loads to ``("one", messages)`` or ``("batch", [messages, ...])``."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, list) and value and all(isinstance(c, list) for c in value):
            for i, conv in enumerate(value):
                if not conv:
                    raise ValidationError({i: ["List should have at least 1 item after validation, not 0"]})
                try:
                    super()._deserialize(conv, attr, data, **kwargs)
                except ValidationError as e:
                    raise ValidationError({i: e.messages}) from None
            return ("batch", value)
        return ("one", super()._deserialize(value, attr, data, **kwargs))


class EmbeddingRequestSchema(PoolingChecks):
    """vLLM 0.34's ``EmbeddingCompletionRequest`` (``input``) or ``EmbeddingChatRequest``
    (``messages``)."""
    model = Str()                   # vLLM's PoolingBasicRequestMixin: str | None = None
    input = EmbeddingInputField()
    messages = EmbeddingMessagesField()
    encoding_format = Literal(*ENCODING_FORMATS, nullable=False)      # vLLM's EncodingRequestMixin: no None
    embed_dtype = Literal(*EMBED_DTYPES, nullable=False)
    endianness = Literal(*ENDIANNESS, nullable=False)
    truncation_side = Literal(*TRUNCATION_SIDES)
    add_generation_prompt = StrictBool()
    continue_final_message = StrictBool()
    chat_template = Str()               # ChatRequestOptionsMixin: refused without --trust-request-chat-template
    chat_template_kwargs = lax_dict()
    dimensions = StrictInt()          # int | None: the range is PoolingParams' check (adapters.pooling)
    user = Str()
    truncate_prompt_tokens = StrictInt(validate=lambda v: v == -1 or v >= 1 or _bad_truncate())
    priority = StrictInt()          # vLLM's PoolingBasicRequestMixin (generation.adapters.pooling.check_priority)
    request_id = fields.String()    # PoolingBasicRequestMixin: the response id's suffix (embd-<id>)


    def field_order(self, body: dict) -> tuple:
        return order.EmbeddingChatRequest if "messages" in body else order.EmbeddingCompletionRequest

    def required_fields(self, body: dict) -> tuple:
        """``messages`` (EmbeddingChatRequest, pooling/base/protocol.py:316) or ``input``
        (EmbeddingCompletionRequest's CompletionRequestMixin, :214)."""
        return ("messages",) if "messages" in body else ("input",)


embedding_request_schema = EmbeddingRequestSchema()
