"""``POST /v1/completions`` request schema (OpenAI legacy completions, vLLM subset).

``prompt`` takes the four OpenAI wire forms: a string, a list of strings, a list of token
ids, or a list of token-id lists (api.md 5.2.2); empty forms are rejected with 400.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields

from generation.adapters import protocol as p

from generation.adapters.fields import EMPTY_PROMPT
from generation.adapters.request_validators import completion_request_validators

from . import field_order as order
from .chat import SamplingSchema
from .response_format import ResponseFormatField
from .common import LogprobCount, Str, StrictBool, StrictInt, are_token_lists, are_tokens

PROMPT_FORMS = ("prompt must be a string, an array of strings, an array of token ids, "
                "or an array of arrays of token ids")


class PromptField(fields.Field):
    """Normalises ``prompt`` to ``("text", [str, ...])`` or ``("ids", [[int, ...], ...])``."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            if value == "":
                raise ValidationError(EMPTY_PROMPT)
            return ("text", [value])
        if not isinstance(value, list):
            raise ValidationError(PROMPT_FORMS)
        if not value:
            # pydantic takes [] (list[int]); vLLM 0.34's renderer refuses it later, after the
            # model check: NO_PROMPTS (renderers/base.py:580-583), raised by the adapter
            return ("text", [])
        if all(isinstance(v, str) for v in value):
            if any(v == "" for v in value):
                raise ValidationError("prompt must not contain an empty string")
            return ("text", value)
        if are_tokens(value):
            return ("ids", [value])
        if all(isinstance(v, list) for v in value):
            if any(len(v) == 0 for v in value):
                raise ValidationError("prompt must not contain an empty token-id array")
            if are_token_lists(value):
                return ("ids", value)
        raise ValidationError(PROMPT_FORMS)


class CompletionRequestSchema(SamplingSchema):
    __model__ = p.CompletionRequest
    __order__ = order.CompletionRequest
    prompt = PromptField()          # absent or null: vLLM's message, from the adapter
    max_tokens = StrictInt()
    logprobs = LogprobCount()
    echo = StrictBool()
    suffix = Str()
    add_special_tokens = StrictBool()
    response_format = ResponseFormatField()     # vLLM 0.34: structured outputs, as on chat

    def request_validators(self, body: dict) -> None:
        completion_request_validators(body)


completion_request_schema = CompletionRequestSchema()
