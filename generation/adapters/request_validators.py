"""vLLM 0.34's request validators (``model_validator(mode="before")``) of the chat and
completions request models, on the raw body, for a body whose fields failed.

pydantic runs a model's before-validators ahead of its fields, the last defined first; vLLM's
raise ``VLLMValidationError``, which is no ``ValueError``, so pydantic lets it through: a body
that trips one is answered with that error alone, whatever its fields hold.  A body whose fields
pass meets the same checks in the adapters (``ChatAdapter.check``, ``CompletionsAdapter.build``),
on its typed values; a body whose fields fail never gets there, so :func:`schemas.common.load`
runs these first (the schemas' ``request_validators``), each raising what the adapter's check
raises for the same value.  Values are judged as vLLM's validators judge them: by Python's
truthiness of the JSON values, before any field is read.

Left out: what cannot refuse a body (the ``return_mm_kwargs`` alias, message normalising, the
system-message warning, dropping forwarded ids), and the cases where vLLM's validator fails with
a TypeError (a 500: ``structured_outputs`` that is not an object, a malformed tool beside a named
``tool_choice``), which the simulator does not reproduce."""
from __future__ import annotations

from generation.errors import InvalidParam, Rejected
from generation.structured.tool_validation import tool_choice_name, invalid_tool_choice
from generation.tokenization.tokenizer import check_generation_prompt

from .base import check_logprobs_sign, check_prompt_logprobs, check_stream_options
from .chat import chat_tools, check_top_logprobs
from .completions import check_logprobs_order
from .fields import (EMPTY_PROMPT, check_beam_logprob_ids, check_cache_salt, check_logprob_number,
                     check_logprob_token_ids, check_prompt_count, check_response_format_schema, check_structured_count)
from .protocol import StreamOptions


class Raw:
    """A raw body read as a typed request is (``b.echo``): a missing key is None."""
    __slots__ = ("data",)

    def __init__(self, data: dict):
        self.data = data

    def __getattr__(self, name):
        return self.data.get(name)


def chat_request_validators(data: dict) -> None:
    """``ChatCompletionRequest``'s (``openai/chat_completion/protocol.py``), in pydantic's order:
    ``check_generation_prompt`` (line 1060), ``check_tool_usage`` (974),
    ``check_structured_outputs_count`` (931), ``check_logprobs`` (873),
    ``validate_stream_options`` (860), ``validate_response_format`` (827),
    ``check_cache_salt_support`` (570)."""
    check_generation_prompt(data.get("continue_final_message"), data.get("add_generation_prompt"))
    _chat_tool_usage(data)
    check_structured_count(data.get("structured_outputs"), data.get("tool_choice"))
    check_beam_logprob_ids(data.get("logprob_token_ids"), data.get("use_beam_search"))
    if not data.get("logprobs"):
        check_logprob_token_ids(data.get("logprob_token_ids"), False)
    for name in ("prompt_logprobs", "top_logprobs"):
        check_logprob_number(data.get(name), name)
    check_prompt_logprobs(data.get("prompt_logprobs"), data.get("stream"))
    check_top_logprobs(data.get("top_logprobs"), data.get("logprobs"))
    _stream_options(data)
    check_response_format_schema(data.get("response_format"))
    check_cache_salt(data.get("cache_salt"))


def _chat_tool_usage(data: dict) -> None:
    """``check_tool_usage``: a ``tool_choice`` other than ``"none"`` needs ``tools`` (``[]``
    counting as none for a string choice); a string one is ``auto`` or ``required``; a named one
    names one of the tools."""
    if "tool_choice" not in data:
        return              # vLLM makes it "auto" when tools are given: nothing to refuse
    tools, choice = chat_tools(data.get("tools"), data["tool_choice"])
    if choice is None or choice in ("none", "auto", "required"):
        return
    if not isinstance(choice, dict):
        raise invalid_tool_choice(choice)
    name = tool_choice_name(choice)
    if not isinstance(tools, list):
        return              # vLLM's lookup fails with a TypeError
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or "name" not in fn or fn["name"] == name:
            return          # found, or vLLM's lookup fails with a TypeError there
    raise Rejected(f"The tool `{name}` specified in `tool_choice` does not match any of the specified `tools`",
                   "tool_choice")


def _stream_options(data: dict) -> None:
    """``validate_stream_options``: a non-empty ``stream_options`` only with ``stream``."""
    check_stream_options(StreamOptions(given=bool(data.get("stream_options"))), bool(data.get("stream")))


def check_prompt_given(data: dict) -> None:
    """``validate_prompt_and_prompt_embeds`` (completion/protocol.py:612): a ``prompt`` or
    ``prompt_embeds``, neither absent, null nor empty (``""`` is empty there too: line 620,
    one VLLMValidationError with ``parameter="prompt"`` for all)."""
    prompt = data.get("prompt")
    if prompt is None or prompt == "":
        embeds = data.get("prompt_embeds")
        if embeds is None or embeds == []:
            raise Rejected(EMPTY_PROMPT, "prompt")


def completion_request_validators(data: dict) -> None:
    """``CompletionRequest``'s (``openai/completion/protocol.py``), in pydantic's order:
    ``validate_prompt_list_length`` (line 633), ``validate_prompt_and_prompt_embeds`` (612),
    ``validate_stream_options`` (599), ``check_logprobs`` (522),
    ``check_structured_outputs_count`` (492), ``validate_response_format`` (459),
    ``check_cache_salt_support`` (443)."""
    prompt = data.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        check_prompt_count(len(prompt))          # vLLM's is_list_of(prompt, int) looks at the first
    check_prompt_given(data)
    _stream_options(data)
    check_logprobs_order(Raw(data))
    if data.get("logprobs") is None:
        check_logprob_token_ids(data.get("logprob_token_ids"), False, "completion")
    for name in ("prompt_logprobs", "logprobs"):
        check_logprob_number(data.get(name), name)
    check_prompt_logprobs(data.get("prompt_logprobs"), data.get("stream"))
    check_logprobs_sign(data.get("logprobs"), "logprobs")
    check_structured_count(data.get("structured_outputs"), api="completion")
    check_response_format_schema(data.get("response_format"))
    check_cache_salt(data.get("cache_salt"))
