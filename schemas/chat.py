"""``POST /v1/chat/completions`` request schema (OpenAI / vLLM ChatCompletionRequest subset).

Accepted and used: model, messages, max_tokens, max_completion_tokens, n, stream,
stream_options, logprobs, top_logprobs, tools, tool_choice, response_format, stop,
ignore_eos, cache_hit_threshold, kv_transfer_params, and vLLM's return_token_ids, prompt_logprobs
and request_id.  Sampling fields (temperature, top_p,
seed, ...) are type-checked and otherwise ignored, as a simulator has no sampler.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, pre_load, validates

from generation.adapters import protocol as p
from generation.adapters.chat_batch import check_batch_mode
from generation.adapters.request_validators import chat_request_validators
from generation.adapters.sampling import EFFORTS
from generation.adapters.validation import read_list

from . import field_order as order
from .common import (Dict, IntList, List, Literal, Refused, Str, mm_payload_alias, read_as_pydantic, refuse, LaxBool, LogprobCount, SamplingKnobsSchema, StreamOptionsSchema, ModelNested, StrictBool, StrictFloat, StrictInt, StringOrList,
                     validate_content_blocks)
from .chat_tools import ChatToolsField
from .response_format import ResponseFormatField
from .lax import (MM_PAYLOADS, DictOfDicts, ListOfStrDicts, RepetitionDetection, lax_bool, lax_dict, lax_float,
                  lax_literal, lax_str)


class ContentField(fields.Field):
    """A message ``content``: string, null, or a list of content parts."""

    def _deserialize(self, value, attr, data, **kwargs):
        validate_content_blocks(value)
        return value


def _check_message(m) -> dict | None:
    """Errors of one chat message as a marshmallow error dict, or None.  A message is an object
    with a string ``role``; ``content`` a string, null or content parts; ``name`` and
    ``tool_call_id`` strings; ``tool_calls`` a list of ``{"function": {"name", "arguments"}}``
    (strings).  The only check of a chat message (chat, render and tokenize use it)."""
    if not isinstance(m, dict):
        return {"_schema": ["Invalid input type."]}
    role = m.get("role")
    if role is None:
        return {"role": ["Missing data for required field."]}
    if not isinstance(role, str):
        return {"role": ["Not a valid string."]}
    try:
        validate_content_blocks(m.get("content"))
    except ValidationError as e:
        return {"content": e.messages}
    for key in ("name", "tool_call_id"):
        v = m.get(key)
        if v is not None and not isinstance(v, str):
            return {key: ["Not a valid string."]}
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            return {"tool_calls": ["Not a valid list."]}
        for j, tc in enumerate(calls):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict):
                return {"tool_calls": {j: {"function": ["Missing data for required field."]}}}
            for key in ("name", "arguments"):
                if fn.get(key) is not None and not isinstance(fn[key], str):
                    return {"tool_calls": {j: {"function": {key: ["Not a valid string."]}}}}
    return None


class MessagesField(fields.Field):
    """``messages``: a list of chat messages (see :func:`_check_message`).  Checked in one pass
    rather than with a nested schema per message, which cost more than the rest of the
    request's validation together."""

    def _deserialize(self, value, attr, data, **kwargs):
        read_as_pydantic(read_list, value)
        for i, m in enumerate(value):
            err = _check_message(m)
            if err:
                raise ValidationError({i: err})
        return value


def chat_validated_body(body: dict) -> dict:
    """A chat body as ChatCompletionRequest's fields are read from it: after its
    ``apply_return_mm_kwargs_alias`` and ``check_tool_usage`` (chat_completion/protocol.py:565,
    :974), which adds ``tool_choice: "auto"`` beside ``tools`` without one."""
    body = mm_payload_alias(body)
    if "tool_choice" not in body and body.get("tools"):
        body = {**body, "tool_choice": "auto"}
    return body


class SamplingSchema(SamplingKnobsSchema):
    """Fields shared by chat and completions."""
    __model__ = p.OpenAISampling
    model = Str()                            # vLLM: str | None = None (null: the first served model)
    n = StrictInt()
    stream = StrictBool()
    stream_options = ModelNested(StreamOptionsSchema, model_name="StreamOptions", allow_none=True)
    ignore_eos = StrictBool()
    stop = StringOrList()
    user = Str()
    cache_hit_threshold = StrictFloat()
    kv_transfer_params = Dict()
    return_token_ids = StrictBool()
    prompt_logprobs = LogprobCount()
    request_id = Str()
    logit_bias = Dict()
    stop_token_ids = IntList()
    cache_salt = fields.Raw()
    logprob_token_ids = IntList()
    allowed_token_ids = IntList()
    return_tokens_as_token_ids = StrictBool()
    truncate_prompt_tokens = StrictInt()
    truncation_side = Literal("left", "right")
    include_stop_str_in_output = StrictBool()
    structured_outputs = fields.Dict()
    thinking_token_budget = fields.Raw()     # vLLM's own message for any bad value (sampling._budget)
    priority = StrictInt()
    bad_words = fields.Raw()                 # the fields below: generation.adapters.fields
    vllm_xargs = fields.Raw()
    stream_interval = fields.Raw()           # read by --vllm-version (fields.request_stream_interval)
    routed_experts_prompt_start = StrictInt()
    # vLLM 0.34's ChatCompletionRequest / CompletionRequest types, as pydantic reads them (schemas.lax)
    length_penalty = lax_float(nullable=False)          # float = 1.0: null is pydantic's float_type
    session_id = lax_str()
    mm_payload = lax_literal(*MM_PAYLOADS)
    return_mm_kwargs = lax_bool()
    repetition_detection = RepetitionDetection()
    skip_special_tokens = lax_bool()
    spaces_between_special_tokens = lax_bool(nullable=False)
    watermarking = lax_bool()
    return_weight_versions = lax_bool(nullable=False)
    return_token_offsets = lax_bool()
    ec_transfer_params = lax_dict()
    mm_processor_kwargs = fields.Raw()       # not a CompletionRequest field: any value (an extra attribute)
    media_io_kwargs = fields.Raw()


class ChatCompletionRequestSchema(SamplingSchema):
    __model__ = p.ChatCompletionRequest
    __order__ = order.ChatCompletionRequest
    messages = MessagesField(required=True)
    max_tokens = StrictInt()
    max_completion_tokens = StrictInt()
    logprobs = LaxBool()
    top_logprobs = LogprobCount()
    tools = ChatToolsField()                       # pydantic's list[ChatCompletionToolsParam] | None
    tool_choice = fields.Raw()
    parallel_tool_calls = StrictBool()
    response_format = ResponseFormatField()        # pydantic's AnyResponseFormat | None
    # vLLM chat-template options (generation.tokenization.tokenizer.tokenize_chat)
    chat_template = Str(allow_none=True)
    chat_template_kwargs = Dict(allow_none=True)
    add_generation_prompt = StrictBool()
    continue_final_message = StrictBool()
    add_special_tokens = StrictBool()
    include_reasoning = StrictBool()
    reasoning_effort = Literal(*EFFORTS, nullable=True)     # vLLM 0.34: ReasoningEffort | None (renderers/params.py)
    echo = StrictBool()
    return_prompt_text = lax_bool()
    documents = ListOfStrDicts()
    mm_processor_kwargs = lax_dict()
    media_io_kwargs = DictOfDicts()

    def request_validators(self, body: dict) -> None:
        chat_request_validators(body)

    def validated_body(self, body: dict) -> dict:
        return chat_validated_body(body)

    def filled_body(self, body: dict) -> dict:
        """The body loaded: with vLLM 0.34's ``check_tool_usage`` default (``tool_choice: "auto"``
        beside tools without one), so that a loaded ``tool_choice`` of None beside tools is an
        explicit ``null``, which vLLM parses as auto but returns no calls for
        (:meth:`generation.adapters.chat.ChatAdapter.request`)."""
        if "tool_choice" not in body and body.get("tools"):
            return {**body, "tool_choice": "auto"}
        return body

    @validates("tool_choice")
    def _tool_choice(self, value, **kwargs):
        if value is None or isinstance(value, str):
            return          # an unknown string: vLLM's message after the tools check (parse_tool_choice)
        if not isinstance(value, dict):
            raise ValidationError("Must be a string or an object.")


chat_request_schema = ChatCompletionRequestSchema()


LIST_TYPE = ("list_type", "Input should be a valid list")


def _too_short(value: list) -> tuple:
    """pydantic's ``too_short`` of a list under ``Field(min_length=1)``."""
    return ("too_short", f"List should have at least 1 item after validation, not {len(value)}",
            {"field_type": "List", "min_length": 1, "actual_length": len(value)})


class ConversationsField(fields.Field):
    """The batch's ``messages``: vLLM 0.34's ``list[Annotated[list[ChatCompletionMessageParam],
    Field(min_length=1)]] = Field(..., min_length=1)``.  Not a list, or an empty one (of
    conversations or of messages), is pydantic's error at ``body.messages`` /
    ``body.messages.<i>``; each message is checked as chat's (:func:`_check_message`, named
    ``messages[i][j]``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, list):
            raise refuse(("", value, *LIST_TYPE))
        if not value:
            raise refuse(("", value, *_too_short(value)))
        errors = []          # in pydantic's order: each conversation's, the first bad message's
        checked = True
        for i, conversation in enumerate(value):
            if not isinstance(conversation, list):
                errors.append(Refused((str(i), conversation, *LIST_TYPE)))
            elif not conversation:
                errors.append(Refused((str(i), conversation, *_too_short(conversation))))
            elif checked:
                for j, m in enumerate(conversation):
                    err = _check_message(m)
                    if err:
                        errors.append({i: {j: err}})
                        checked = False
                        break
        if errors:
            raise ValidationError(errors)
        return value


class BatchChatCompletionRequestSchema(ChatCompletionRequestSchema):
    """``POST /v1/chat/completions/batch`` (vLLM 0.34's ``BatchChatCompletionRequest``,
    :mod:`generation.adapters.chat_batch`): chat's fields, ``messages`` a list of conversations,
    ``tool_choice`` only ``"none"`` (or null).  Its ``check_batch_mode`` runs on the raw body
    first, as vLLM's ``mode="before"`` validator does.  Loads into a ChatCompletionRequest whose
    ``messages`` holds the conversations."""
    __order__ = order.BatchChatCompletionRequest
    messages = ConversationsField(required=True)
    tool_choice = lax_literal("none", nullable=True)

    def request_validators(self, body: dict) -> None:
        """None besides ``check_batch_mode`` (run on every body, :meth:`_batch_mode`)."""

    def validated_body(self, body: dict) -> dict:
        """As sent (``check_batch_mode`` adds no key)."""
        return body

    def filled_body(self, body: dict) -> dict:
        """As sent: vLLM's batch model has no ``check_tool_usage``."""
        return body

    @pre_load
    def _batch_mode(self, data, **kwargs):
        check_batch_mode(data)
        return data


batch_chat_request_schema = BatchChatCompletionRequestSchema()
