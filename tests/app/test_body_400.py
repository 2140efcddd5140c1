"""The 400s for a body that is wrong as a whole, as vLLM 0.34 answers them on a route whose body
is a request model (``request: ChatCompletionRequest``), whole bodies asserted:

* a Content-Type other than ``application/json``: ``validate_json_request``
  (``serve/utils/api_utils.py:310``) raises ``RequestValidationError(errors=["Unsupported Media
  Type: ..."])``; the validation handler (``serve/exception_handling/handlers/validation.py``)
  counts it, and a str error has no ``loc``: ``param`` null;
* a body ``json.loads`` refuses: FastAPI's ``json_invalid`` (``fastapi/routing.py``
  ``get_request_handler``: ``"loc": ("body", e.pos)``, ``"input": {}``, ``"ctx": {"error":
  e.msg}``), the handler echoing ``{}`` as ``<dict of 0 items>``;
* an empty body: FastAPI leaves it unset and the required body is ``missing`` at ``body``
  (``get_missing_field_error``, ``input`` None);
* a JSON value other than an object: pydantic's ``model_attributes_type`` at ``body`` (every
  before-validator of these models returns a non-dict unchanged), one per model of a union body
  (``EmbeddingRequest``: 5, its tags ``function-wrap[__log_extra_fields__()]`` dropped from the
  loc).

``type`` is "Bad Request" (the handler's status phrase); ``/v1/messages`` answers the same words
in Anthropic's envelope.
"""
from __future__ import annotations

import pytest

JSON = {"Content-Type": "application/json"}
ROUTES = {
    "/v1/chat/completions": ({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 2}, 1),
    "/v1/completions": ({"model": "test-model", "prompt": "hi", "max_tokens": 2}, 1),
    "/v1/embeddings": ({"model": "test-model", "input": "hi"}, 5),
    "/v1/messages": ({"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, 1),
}
NOT_AN_OBJECT = "'msg': 'Input should be a valid dictionary or object to extract fields from'"


def validation_400(path: str, lines: list[str], param) -> dict:
    """The handler's answer to ``lines`` (one per error) on ``path``, in its envelope."""
    label = "error" if len(lines) == 1 else "errors"
    message = f"{len(lines)} validation {label}:\n" + "\n".join(f"  {line}" for line in lines)
    if path == "/v1/messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "Bad Request", "param": param, "code": 400}}


def answer(api, path: str, raw: bytes, headers=JSON) -> dict:
    r = api.post(path, content=raw, headers=headers)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json"
    return r.json()


@pytest.mark.parametrize("path", list(ROUTES))
def test_the_bodies_are_served(api, path):
    """The same bodies, right: each route serves them (so each 400 below is the body's)."""
    body, _ = ROUTES[path]
    assert api.post(path, json=body).status_code == 200


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx", None])
@pytest.mark.parametrize("path", list(ROUTES))
def test_a_wrong_content_type(api, path, ctype):
    import orjson
    headers = {"Content-Type": ctype} if ctype else {}
    expected = validation_400(path, ["Unsupported Media Type: Only 'application/json' is allowed"], None)
    assert answer(api, path, orjson.dumps(ROUTES[path][0]), headers) == expected


@pytest.mark.parametrize("raw,msg,pos", [
    (b"not json", "Expecting value", 0),
    (b" ", "Expecting value", 1),
    (b"{", "Expecting property name enclosed in double quotes", 1),
    (b'{"model": "test-model",}', "Expecting property name enclosed in double quotes", 23),
    (b'{"model": "test-model" "max_tokens": 2}', "Expecting ',' delimiter", 23),
    (b'{"model": }', "Expecting value", 10),
    (b'{"a": 1} x', "Extra data", 9),
    (b"[1, 2", "Expecting ',' delimiter", 5),
])
@pytest.mark.parametrize("path", list(ROUTES))
def test_a_body_that_is_not_json(api, path, raw, msg, pos):
    """Python's ``json`` message and position (what vLLM's ``json.loads`` reports), though the
    simulator parses with orjson."""
    ctx = repr({"error": msg})
    line = (f"{{'type': 'json_invalid', 'loc': 'body.{pos}', 'msg': 'JSON decode error', "
            f"'input': '<dict of 0 items>', 'ctx': {ctx}}}")
    assert answer(api, path, raw) == validation_400(path, [line], f"body.{pos}")


@pytest.mark.parametrize("path", list(ROUTES))
def test_an_empty_body(api, path):
    line = "{'type': 'missing', 'loc': 'body', 'msg': 'Field required', 'input': 'None'}"
    assert answer(api, path, b"") == validation_400(path, [line], "body")


@pytest.mark.parametrize("raw,shown", [(b"[1]", "<list of 1 items>"), (b"[]", "<list of 0 items>"), (b'"x"', "x"),
                                       (b"3", "3"), (b"2.5", "2.5"), (b"false", "False"), (b"null", "None")])
@pytest.mark.parametrize("path", list(ROUTES))
def test_a_body_that_is_not_an_object(api, path, raw, shown):
    members = ROUTES[path][1]
    line = f"{{'type': 'model_attributes_type', 'loc': 'body', {NOT_AN_OBJECT}, 'input': '{shown}'}}"
    assert answer(api, path, raw) == validation_400(path, [line] * members, "body")


def test_orjson_only_refusals_keep_the_simulators_message(api):
    """What ``json.loads`` reads but orjson refuses (``NaN``, ``1e400``, a lone surrogate) is not
    FastAPI's ``json_invalid``: the simulator's own 400 (README, "Robustness limits")."""
    for raw in (b'{"prompt": "hi", "temperature": NaN}', b'{"prompt": "hi", "temperature": 1e400}',
                b'{"prompt": "\\ud800"}'):
        e = answer(api, "/v1/completions", raw)["error"]
        assert e["message"].startswith("Failed to parse the request body as JSON: "), e
        assert (e["type"], e["param"], e["code"]) == ("Bad Request", None, 400)


def test_a_large_body_that_is_not_json_is_not_parsed_twice(api):
    """Python's words need ``json.loads`` on the hub after orjson's refusal: a body over 256 KiB
    (``JSON_WORDS_MAX``) keeps the simulator's message instead (~90 ms of the hub for 4 MiB)."""
    from blueprints.common import JSON_WORDS_MAX
    for size, words in ((JSON_WORDS_MAX, True), (JSON_WORDS_MAX + 1, False)):
        raw = b'{"prompt": "' + b"a" * (size - 14) + b'"x'
        assert len(raw) == size
        e = answer(api, "/v1/completions", raw)["error"]
        assert e["message"].startswith("1 validation error:\n  {'type': 'json_invalid'") is words, e["message"][:80]
        assert e["param"] == (f"body.{size - 1}" if words else None)
