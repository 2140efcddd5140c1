"""Request schemas of the tokenization-only endpoints: ``/v1/completions/render``,
``/v1/chat/completions/render`` (api.md 5.8), vLLM's ``/tokenize`` and ``/detokenize``.

The render endpoints type only ``model``, the prompt or messages and vLLM 0.34's multimodal
options (:class:`RenderOptionsSchema`); every other field of a completions / chat body is
read laxly (a chat render checks ChatCompletionRequest's validators and SamplingParams' ranges).  ``/tokenize`` takes vLLM's two request
shapes (``prompt`` or ``messages``), ``/detokenize`` takes ``tokens``.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields

from generation.adapters import protocol as p
from generation.adapters.request_validators import check_prompt_given
from generation.adapters.sampling import EFFORTS

from . import field_order as order
from .chat import MessagesField, chat_validated_body
from .chat_tools import ChatToolsField
from generation.adapters.fields import INT64_MAX
from generation.adapters.validation import MAX_REPORTED_ERRORS

from .common import BaseSchema, Capped, Dict, IntList, List, Literal, Str, StrictBool, are_tokens, first_non_token, refuse
from .completions import PromptField
from .lax import MM_PAYLOADS, DictOfDicts, lax_bool, lax_dict, lax_literal


class TokenIdList(fields.Field):
    """A list of token ids (integers in ``0 .. 2**32-1``); ``[]`` allowed.  Checked in C loops
    (:func:`schemas.common.are_tokens`: 2 M ids in ~50 ms), the decoded list kept as it is."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, list):
            raise ValidationError("Must be an array of token ids.")
        if not are_tokens(value):
            raise ValidationError({first_non_token(value): ["Must be a token id (an integer from 0 to 4294967295)."]})
        return value


class DetokenizeTokens(IntList):
    """``DetokenizeRequest.tokens``: ``list[Annotated[int, Field(ge=0, le=2**63 - 1)]]`` (vLLM 0.34
    serve/tokenize/protocol.py:198), every bad item in pydantic's words (``list_type``,
    ``int_parsing``, ``greater_than_equal``, ...); an id past the simulated vocabulary (2**32 - 1)
    is the simulator's 400 after that, as a real tokenizer fails to decode one past its own."""

    def _deserialize(self, value, attr, data, **kwargs):
        ids = super()._deserialize(value, attr, data, **kwargs)
        bad = Capped()
        for k, v in enumerate(ids):
            if 0 <= v <= INT64_MAX:
                continue
            if len(bad) >= MAX_REPORTED_ERRORS:
                bad.more += 1
            elif v < 0:
                bad.append((str(k), value[k], "greater_than_equal", "Input should be greater than or equal to 0", {"ge": 0}))
            else:
                bad.append((str(k), value[k], "less_than_equal", f"Input should be less than or equal to {INT64_MAX}",
                            {"le": INT64_MAX}))
        if bad:
            raise refuse(*bad, more=bad.more)
        if not are_tokens(ids):
            raise ValidationError({first_non_token(ids): ["Must be a token id (an integer from 0 to 4294967295)."]})
        return ids


class RenderOptionsSchema(BaseSchema):
    """vLLM 0.34's types of ``mm_payload``, ``return_mm_kwargs`` and the chat requests' two
    per-request multimodal kwargs (``schemas.lax``; ``/tokenize`` types them in both its forms)."""
    mm_payload = lax_literal(*MM_PAYLOADS)
    return_mm_kwargs = lax_bool()
    mm_processor_kwargs = lax_dict()
    media_io_kwargs = DictOfDicts()


class CompletionRenderSchema(RenderOptionsSchema):
    __model__ = p.CompletionRenderRequest
    __order__ = order.CompletionRequest
    mm_processor_kwargs = fields.Raw()     # not CompletionRequest fields: untyped extras there
    media_io_kwargs = fields.Raw()
    model = Str()                          # vLLM's CompletionRequest: str | None = None
    prompt = PromptField()                 # absent or null: vLLM's request validator (the blueprint)

    def request_validators(self, body: dict) -> None:
        """vLLM's render reads a CompletionRequest, whose ``validate_prompt_and_prompt_embeds``
        (completion/protocol.py:612) answers a body without a prompt alone, ahead of its fields."""
        check_prompt_given(body)


class ChatRenderSchema(RenderOptionsSchema):
    __model__ = p.ChatRenderRequest
    __order__ = order.ChatCompletionRequest
    model = Str()                          # vLLM's ChatCompletionRequest: str | None = None
    messages = MessagesField(required=True)
    tools = ChatToolsField()       # ChatCompletionRequest's list[ChatCompletionToolsParam] | None
    chat_template = Str(allow_none=True)
    chat_template_kwargs = Dict(allow_none=True)
    add_generation_prompt = StrictBool()
    continue_final_message = StrictBool()
    add_special_tokens = StrictBool()
    reasoning_effort = Literal(*EFFORTS, nullable=True)     # ChatCompletionRequest's ReasoningEffort | None

    def validated_body(self, body: dict) -> dict:
        return chat_validated_body(body)


class TokenizeSchema(RenderOptionsSchema):
    """vLLM 0.34's ``TokenizeCompletionRequest`` (``prompt``) or ``TokenizeChatRequest``
    (``messages``)."""
    __model__ = p.TokenizeRequest
    model = Str()                          # serve/tokenize/protocol.py:25, :51: str | None = None
    prompt = Str()                         # :26: str
    messages = MessagesField()
    add_special_tokens = StrictBool()
    return_token_strs = StrictBool()
    add_generation_prompt = StrictBool()
    continue_final_message = StrictBool()
    tools = List(fields.Dict(), allow_none=True)
    chat_template = Str(allow_none=True)
    chat_template_kwargs = Dict(allow_none=True)

    def field_order(self, body: dict) -> tuple:
        return order.TokenizeChatRequest if "messages" in body else order.TokenizeCompletionRequest

    def required_fields(self, body: dict) -> tuple:
        """``messages`` (TokenizeChatRequest, serve/tokenize/protocol.py:52) or ``prompt``
        (TokenizeCompletionRequest, :26)."""
        return ("messages",) if "messages" in body else ("prompt",)


class DetokenizeSchema(BaseSchema):
    __model__ = p.DetokenizeRequest
    __order__ = order.DetokenizeRequest
    model = Str()                          # serve/tokenize/protocol.py:194: str | None = None
    tokens = DetokenizeTokens(required=True, allow_none=True)


completion_render_schema = CompletionRenderSchema()
chat_render_schema = ChatRenderSchema()
tokenize_schema = TokenizeSchema()
detokenize_schema = DetokenizeSchema()
