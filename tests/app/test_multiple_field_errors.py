"""A body with several wrong fields is answered as vLLM 0.34 answers it: pydantic validates the
request model's fields in their declaration order (``vllm/entrypoints/...``; the order of
``schemas.field_order``) and reports every failure, and vLLM's validation handler
(``serve/exception_handling/handlers/validation.py``: ``validation_exception_handler``) words
them: ``N validation errors:``, the first ten, ``...and K more errors``, ``param`` the first
error's cleaned loc.  A request validator (``model_validator(mode="before")``) runs before any
field; one that raises is answered alone (:mod:`generation.adapters.request_validators`)."""
from __future__ import annotations

import time
from typing import Optional

import pydantic
import pytest

from support import pydantic_400

MSG = [{"role": "user", "content": "hi"}]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
FLOAT = ("float_parsing", "Input should be a valid number, unable to parse string as a number")
INT = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
BOOL = ("bool_parsing", "Input should be a valid boolean, unable to interpret input")
FORMATS = "'float', 'base64', 'bytes' or 'bytes_only'"
LITERAL = ("literal_error", f"Input should be {FORMATS}", {"expected": FORMATS})
STR = ("string_type", "Input should be a valid string")


def line(loc: str, error: tuple, value) -> str:
    """One error as the handler prints it: pydantic's error dict, ``loc`` below ``body``."""
    kind, msg, *ctx = error
    return "  " + str({"type": kind, "loc": f"body.{loc}", "msg": msg, "input": value, **({"ctx": ctx[0]} if ctx else {})})


def errors(*lines: str, total: int | None = None) -> str:
    n = total or len(lines)
    more = [f"  ...and {n - 10} more errors"] if n > 10 else []
    return f"{n} validation error{'s' if n != 1 else ''}:\n" + "\n".join([*lines[:10], *more])


def answer(api, path: str, body: dict) -> dict:
    r = api.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400, r.text
    return r.json()["error"]


def assert_pydantic(api, path: str, body: dict, message: str, param: str) -> None:
    assert answer(api, path, body) == {"message": message, "type": "Bad Request", "param": param, "code": 400}


def test_chat_two_fields_in_declaration_order(api):
    """``logprobs`` (chat_completion/protocol.py:244) is declared before ``max_tokens`` (:246),
    so pydantic reports it first and it is the ``param``, whatever the body's key order."""
    assert_pydantic(api, CHAT, {"messages": MSG, "max_tokens": "a", "logprobs": "maybe"},
                    errors(line("logprobs", BOOL, "maybe"), line("max_tokens", INT, "a")), "body.logprobs")


def test_chat_three_fields_in_declaration_order(api):
    """``n`` (chat_completion/protocol.py:252) before ``temperature`` (:259) and ``top_p``
    (:260)."""
    assert_pydantic(api, CHAT, {"messages": MSG, "temperature": "x", "top_p": "y", "n": "z"},
                    errors(line("n", INT, "z"), line("temperature", FLOAT, "x"), line("top_p", FLOAT, "y")), "body.n")


def test_completions_two_and_three_fields_in_declaration_order(api):
    """CompletionRequest (completion/protocol.py) declares ``echo`` (:60), ``n`` (:65),
    ``temperature`` (:72), ``top_p`` (:73): not chat's order (there ``n`` comes before
    ``echo``)."""
    assert_pydantic(api, COMPLETIONS, {"prompt": "hi", "top_p": "y", "echo": "maybe"},
                    errors(line("echo", BOOL, "maybe"), line("top_p", FLOAT, "y")), "body.echo")
    assert_pydantic(api, COMPLETIONS, {"prompt": "hi", "top_p": "y", "n": "z", "echo": "maybe"},
                    errors(line("echo", BOOL, "maybe"), line("n", INT, "z"), line("top_p", FLOAT, "y")), "body.echo")


# chat_completion/protocol.py:242-289, in declaration order: field, wrong value, pydantic's error
THIRTEEN = [("frequency_penalty", "a", FLOAT), ("logprobs", "b", BOOL), ("max_tokens", "c", INT),
            ("max_completion_tokens", "d", INT), ("n", "e", INT), ("presence_penalty", "f", FLOAT), ("seed", "g", INT),
            ("stream", "h", BOOL), ("temperature", "i", FLOAT), ("top_p", "j", FLOAT), ("user", 5, STR),
            ("use_beam_search", "k", BOOL), ("top_k", "l", INT)]


def test_more_than_ten_errors(api):
    """Thirteen wrong fields (chat_completion/protocol.py:242-289): the first ten lines, then
    ``...and 3 more errors``; sent in reverse order, answered in the model's."""
    body = {"messages": MSG, **{name: value for name, value, _ in reversed(THIRTEEN)}}
    assert_pydantic(api, CHAT, body, errors(*[line(n, e, str(v)) for n, v, e in THIRTEEN]), "body.frequency_penalty")


def test_more_than_ten_errors_match_pydantic(api):
    """The same body against a pydantic model of those fields, declared in vLLM's order."""
    types = {float: ["frequency_penalty", "presence_penalty", "temperature", "top_p"],
             bool: ["logprobs", "stream", "use_beam_search"], str: ["user"],
             int: ["max_tokens", "max_completion_tokens", "n", "seed", "top_k"]}
    kind = {name: t for t, names in types.items() for name in names}
    model = pydantic.create_model("Chat", messages=(list, ...),
                                  **{n: (Optional[kind[n]], None) for n, _, _ in THIRTEEN})
    body = {"messages": MSG, **{name: value for name, value, _ in reversed(THIRTEEN)}}
    message, param = pydantic_400(model, body)
    assert_pydantic(api, CHAT, body, message, param)


def test_a_nested_error_with_top_level_ones(api):
    """``stream_options`` (chat_completion/protocol.py:258) reports its own fields in
    StreamOptions' order (generate/base/protocol.py:294 ``include_usage``, :295
    ``continuous_usage_stats``), between ``stream`` (:257) and ``temperature`` (:259); each bad
    item of ``stop_token_ids`` (:294) is an error of its own."""
    body = {"messages": MSG, "stop_token_ids": [1, "a", "b"], "temperature": "x", "stream": True,
            "stream_options": {"continuous_usage_stats": "no way", "include_usage": "maybe"}}
    assert_pydantic(api, CHAT, body, errors(
        line("stream_options.include_usage", BOOL, "maybe"), line("stream_options.continuous_usage_stats", BOOL, "no way"),
        line("temperature", FLOAT, "x"), line("stop_token_ids.1", INT, "a"), line("stop_token_ids.2", INT, "b")),
        "body.stream_options.include_usage")


def test_a_request_validator_is_answered_alone(api):
    """``validate_stream_options`` (chat_completion/protocol.py:860) runs before the fields, on
    the raw body, and its VLLMValidationError escapes pydantic: the wrong fields are not listed."""
    body = {"messages": MSG, "temperature": "x", "n": "z", "stream_options": {"include_usage": True}}
    assert answer(api, CHAT, body) == {"message": "Stream options can only be defined when `stream=True`. "
                                                  "(parameter=stream_options)",
                                       "type": "BadRequestError", "param": "stream_options", "code": 400}


def test_request_validators_run_in_pydantics_order(api):
    """Before-validators run the last defined first: chat's ``check_tool_usage``
    (chat_completion/protocol.py:974) before ``check_logprobs`` (:873), whose type check a
    ``top_logprobs`` string trips; completions' ``validate_prompt_and_prompt_embeds``
    (completion/protocol.py:612) before ``check_logprobs`` (:522)."""
    e = answer(api, CHAT, {"messages": MSG, "temperature": "x", "top_logprobs": "a", "tool_choice": "auto"})
    assert (e["message"], e["param"]) == ("When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
                                          "tool_choice")
    e = answer(api, CHAT, {"messages": MSG, "temperature": "x", "top_logprobs": "a"})
    assert (e["message"], e["param"]) == ("`top_logprobs` must be an integer. (parameter=top_logprobs, value=a)",
                                          "top_logprobs")
    e = answer(api, COMPLETIONS, {"temperature": "x", "logprobs": "a"})
    assert (e["message"], e["param"]) == ("Either prompt or prompt_embeds must be provided and non-empty. "
                                          "(parameter=prompt)", "prompt")
    e = answer(api, COMPLETIONS, {"prompt": "hi", "temperature": "x", "logprobs": "a"})
    assert (e["message"], e["param"]) == ("`logprobs` must be an integer. (parameter=logprobs, value=a)", "logprobs")


def test_the_simulators_own_wording_first_is_answered_alone(api):
    """``messages`` (chat_completion/protocol.py:240) comes first; a message the simulator words
    itself is its 400 alone, as before (it has no pydantic line to list)."""
    e = answer(api, CHAT, {"messages": [{"role": 5}], "temperature": "x"})
    assert (e["message"], e["param"], e["type"]) == ("messages[0].role: Not a valid string.", "messages[0].role",
                                                     "BadRequestError")


def test_a_hostile_list_is_counted_not_listed(api):
    """100,000 bad ids in ``stop_token_ids`` (chat_completion/protocol.py:294) after a bad ``n``
    (:252): all counted, ten lines built, the answer small and quick."""
    body = {"messages": MSG, "n": "z", "stop_token_ids": ["a"] * 100_000}
    start = time.monotonic()
    e = answer(api, CHAT, body)
    assert time.monotonic() - start < 5
    lines = [line("n", INT, "z")] + [line(f"stop_token_ids.{i}", INT, "a") for i in range(9)]
    assert e["message"] == errors(*lines, total=100_001) and e["param"] == "body.n"
    assert len(e["message"]) < 2000


@pytest.mark.parametrize("path,body,expected,param", [
    # responses/protocol.py: max_output_tokens (:274), store (:293), temperature (:295), top_p (:300)
    ("/v1/responses", {"input": "hi", "top_p": "a", "temperature": "b", "store": "c", "max_output_tokens": "d"},
     [("max_output_tokens", INT, "d"), ("store", BOOL, "c"), ("temperature", FLOAT, "b"), ("top_p", FLOAT, "a")],
     "body.max_output_tokens"),
    # EmbeddingCompletionRequest: the mixins' fields first (pooling/base/protocol.py:325
    # encoding_format, :347 dimensions), then PoolingBasicRequestMixin's user (:38)
    ("/v1/embeddings", {"input": "hi", "user": 5, "dimensions": "x", "encoding_format": "nope"},
     [("encoding_format", LITERAL, "nope"), ("dimensions", INT, "x"), ("user", STR, "5")], "body.encoding_format"),
    # TokenizeCompletionRequest (serve/tokenize/protocol.py:28 add_special_tokens, :35 return_token_strs)
    ("/tokenize", {"prompt": "hi", "return_token_strs": "q", "add_special_tokens": "x"},
     [("add_special_tokens", BOOL, "x"), ("return_token_strs", BOOL, "q")], "body.add_special_tokens"),
    # TokenizeChatRequest: return_token_strs (:62) before add_special_tokens (:78)
    ("/tokenize", {"messages": MSG, "add_special_tokens": "x", "return_token_strs": "q"},
     [("return_token_strs", BOOL, "q"), ("add_special_tokens", BOOL, "x")], "body.return_token_strs"),
])
def test_other_routes(api, path, body, expected, param):
    assert_pydantic(api, path, body, errors(*[line(*e) for e in expected]), param)


def test_anthropic_messages_keep_their_envelope(api):
    """AnthropicMessagesRequest (anthropic/protocol.py:281 ``stream``, :283 ``temperature``,
    :286 ``top_k``), in Anthropic's error envelope."""
    r = api.post("/v1/messages", json={"model": "test-model", "messages": MSG, "max_tokens": 4,
                                       "top_k": "x", "temperature": "hot", "stream": "maybe"})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": errors(
        line("stream", BOOL, "maybe"), line("temperature", FLOAT, "hot"), line("top_k", INT, "x"))}}
