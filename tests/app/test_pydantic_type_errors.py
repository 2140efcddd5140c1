"""A wrong JSON type on a request field is refused in vLLM 0.34's words: pydantic's error (lax
mode) through its validation handler (``serve/exception_handling/handlers/validation.py``:
``validation_exception_handler``), ``N validation error(s):`` with the error's type, cleaned
``loc``, msg and input, ``type`` "Bad Request" and ``param`` the cleaned loc; Anthropic's
envelope carries the same message on ``/v1/messages``.  The field annotations are
``chat_completion/protocol.py``'s, ``completion/protocol.py``'s, ``responses/protocol.py``'s,
``anthropic/protocol.py``'s and ``serve/tokenize/protocol.py``'s; the comparison replicates
them as small pydantic models (:func:`support.pydantic_400`)."""
from __future__ import annotations

import random
from typing import Optional

import pydantic
import pytest

from support import ROUTE_BODIES, pydantic_400

MSG = [{"role": "user", "content": "hi"}]
BASE = {route: ROUTE_BODIES[route] for route in ("/v1/chat/completions", "/v1/completions", "/v1/responses",
                                                 "/v1/messages", "/v1/embeddings", "/tokenize")}
NUMBER = "Input should be a valid number"
INTEGER = "Input should be a valid integer"


def one(kind, loc, msg, value) -> str:
    return f"1 validation error:\n  {{'type': '{kind}', 'loc': 'body.{loc}', 'msg': '{msg}', 'input': {value!r}}}"


CASES = [
    ("/v1/chat/completions", "temperature", "hot",
     one("float_parsing", "temperature", f"{NUMBER}, unable to parse string as a number", "hot")),
    ("/v1/chat/completions", "temperature", [1], one("float_type", "temperature", NUMBER, "<list of 1 items>")),
    ("/v1/chat/completions", "max_tokens", 1.5,
     one("int_from_float", "max_tokens", f"{INTEGER}, got a number with a fractional part", "1.5")),
    ("/v1/chat/completions", "max_tokens", "abc",
     one("int_parsing", "max_tokens", f"{INTEGER}, unable to parse string as an integer", "abc")),
    ("/v1/chat/completions", "n", "two", one("int_parsing", "n", f"{INTEGER}, unable to parse string as an integer", "two")),
    ("/v1/chat/completions", "n", {"a": 1}, one("int_type", "n", INTEGER, "<dict of 1 items>")),
    ("/v1/chat/completions", "messages", "hi", one("list_type", "messages", "Input should be a valid list", "hi")),
    ("/v1/chat/completions", "stream", "maybe",
     one("bool_parsing", "stream", "Input should be a valid boolean, unable to interpret input", "maybe")),
    ("/v1/chat/completions", "stream", 1.5, one("bool_type", "stream", "Input should be a valid boolean", "1.5")),
    ("/v1/chat/completions", "user", 1, one("string_type", "user", "Input should be a valid string", "1")),
    ("/v1/chat/completions", "stop_token_ids", "x", one("list_type", "stop_token_ids", "Input should be a valid list", "x")),
    ("/v1/chat/completions", "stream_options", {"include_usage": "maybe"},
     one("bool_parsing", "stream_options.include_usage", "Input should be a valid boolean, unable to interpret input",
         "maybe")),
    ("/v1/completions", "seed", 2.5, one("int_from_float", "seed", f"{INTEGER}, got a number with a fractional part", "2.5")),
    ("/v1/completions", "echo", "x", one("bool_parsing", "echo", "Input should be a valid boolean, unable to interpret input",
                                         "x")),
    ("/v1/completions", "top_p", "x", one("float_parsing", "top_p", f"{NUMBER}, unable to parse string as a number", "x")),
    ("/v1/completions", "stop", 5,
     "2 validation errors:\n  {'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', "
     "'input': '5'}\n  {'type': 'list_type', 'loc': 'body.stop', 'msg': 'Input should be a valid list', 'input': '5'}"),
    ("/v1/responses", "max_output_tokens", "x",
     one("int_parsing", "max_output_tokens", f"{INTEGER}, unable to parse string as an integer", "x")),
    ("/v1/responses", "store", 2, one("bool_parsing", "store", "Input should be a valid boolean, unable to interpret input",
                                      "2")),
    ("/v1/responses", "instructions", 5, one("string_type", "instructions", "Input should be a valid string", "5")),
    ("/v1/embeddings", "dimensions", "x",
     one("int_parsing", "dimensions", f"{INTEGER}, unable to parse string as an integer", "x")),
    ("/v1/embeddings", "user", [], one("string_type", "user", "Input should be a valid string", "<list of 0 items>")),
    ("/tokenize", "add_special_tokens", "x",
     one("bool_parsing", "add_special_tokens", "Input should be a valid boolean, unable to interpret input", "x")),
    ("/v1/messages", "temperature", "hot",
     one("float_parsing", "temperature", f"{NUMBER}, unable to parse string as a number", "hot")),
    ("/v1/messages", "max_tokens", "x", one("int_parsing", "max_tokens", f"{INTEGER}, unable to parse string as an integer",
                                            "x")),
    ("/v1/messages", "stop_sequences", [1], one("string_type", "stop_sequences.0", "Input should be a valid string", "1")),
]


# what a field needs beside it to reach pydantic: a non-empty stream_options without ``stream``
# is refused first by vLLM's request validator (chat_completion/protocol.py:860
# validate_stream_options, mode="before"), whatever its keys hold
WITH = {"stream_options": {"stream": True}}


@pytest.mark.parametrize("route,field,value,message", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]!r}" for c in CASES])
def test_a_wrong_type_is_pydantics_400(api, route, field, value, message):
    r = api.post(route, json={**BASE[route], **WITH.get(field, {}), field: value})
    assert r.status_code == 400, r.text
    if route == "/v1/messages":
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        param = message.split("'loc': '")[1].split("'")[0]
        assert r.json() == {"error": {"message": message, "type": "Bad Request", "param": param, "code": 400}}


@pytest.mark.parametrize("field,value", [("max_tokens", "3"), ("max_tokens", 3.0), ("stream", "true"),
                                         ("stream", 0), ("temperature", "0.5"), ("n", True), ("stop_token_ids", ["7"])])
def test_what_lax_mode_takes_is_taken(api, field, value):
    """pydantic's lax mode: ``"3"`` and ``3.0`` are integers, ``"true"`` and ``0`` booleans."""
    assert api.post("/v1/chat/completions", json={**BASE["/v1/chat/completions"], field: value}).status_code == 200


class Chat(pydantic.BaseModel):
    """chat_completion/protocol.py's ChatCompletionRequest: the fields typed here."""
    messages: list
    max_tokens: Optional[int] = None
    n: Optional[int] = 1
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    presence_penalty: Optional[float] = 0.0
    stream: Optional[bool] = False
    echo: bool = False
    ignore_eos: bool = False
    user: Optional[str] = None
    request_id: Optional[str] = None
    stop: Optional[str | list[str]] = []
    stop_token_ids: Optional[list[int]] = []
    kv_transfer_params: Optional[dict] = None


WRONG = ["", "x", "1.5", "yes", " 2 ", "nan", 1.5, -3.25, 2, 0, True, [], [1], ["a"], [1.5, "q"], {}, {"a": 1}]


def test_wrong_types_match_pydantic_on_random_bodies(api):
    """Random wrong values of one to three fields: the answer is pydantic's, or a 200 where pydantic
    takes them (those values are in the simulator's ranges: n and max_tokens kept positive)."""
    rng = random.Random(34)
    fields = [f for f in Chat.model_fields if f != "messages"]
    for _ in range(300):
        body = {"messages": MSG}
        field = rng.choice(fields)
        body[field] = rng.choice(WRONG)
        expected = pydantic_400(Chat, body)
        r = api.post("/v1/chat/completions", json={"model": "test-model", **body})
        if expected is None:
            assert r.status_code in (200, 400), (body, r.text)
            assert r.status_code == 200 or "validation error" not in r.text, (body, r.text)
            continue
        assert r.status_code == 400, (body, r.text)
        e = r.json()["error"]
        assert (e["message"], e["param"], e["type"]) == (*expected, "Bad Request"), body
