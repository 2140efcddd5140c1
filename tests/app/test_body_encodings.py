"""Request bodies in the encodings vLLM reads: FastAPI hands the body's bytes to ``json.loads``,
which detects UTF-8 with a byte order mark and UTF-16 / UTF-32 with or without one (RFC 8259
section 8.1).  Each was a 400 here ("BOM is not supported", "str is not valid UTF-8"); vLLM
served them.  What ``json.loads`` also takes but orjson refuses stays a 400 JSON error (``NaN``,
``Infinity``, numbers past a double, lone surrogates), in the route's envelope; see the README's
"Robustness limits"."""
from __future__ import annotations

import json

import pytest

ENCODINGS = ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]
COMPLETION = {"model": "test-model", "prompt": "héllo", "max_tokens": 2}
CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "héllo"}], "max_tokens": 2}
MESSAGES = {"model": "test-model", "messages": [{"role": "user", "content": "héllo"}], "max_tokens": 2}
JSON = {"content-type": "application/json"}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("path,body", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT),
                                       ("/v1/messages", MESSAGES), ("/tokenize", {"prompt": "héllo"})])
def test_a_body_in_an_encoding_json_loads_detects_is_served(api, encoding, path, body):
    r = api.post(path, content=json.dumps(body, ensure_ascii=False).encode(encoding), headers=JSON)
    assert r.status_code == 200, (encoding, r.text)
    if path == "/tokenize":       # the text arrived intact: the same tokens as from UTF-8
        assert r.json() == api.post(path, json=body).json()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_streamed_request_in_utf16_streams(api, encoding):
    body = json.dumps({**COMPLETION, "stream": True}).encode(encoding)
    r = api.post("/v1/completions", content=body, headers=JSON)
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")


def test_abort_requests_reads_the_same_encodings(api):
    body = json.dumps({"request_ids": ["x"]}).encode("utf-16")
    r = api.post("/inference/v1/abort_requests", content=body, headers=JSON)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("raw,json_error", [
    # what json.loads reads (or refuses other than with a JSONDecodeError) and orjson refuses:
    # the simulator's own message
    ('{"prompt": "\\ud800", "model": "test-model"}'.encode("utf-16"), None),    # a lone surrogate, escaped
    ("{\"prompt\": \"a\"}".encode("utf-16")[:-1], None),                          # truncated UTF-16
    ('{"model": "test-model", "prompt": "a", "temperature": NaN}'.encode("utf-16"), None),
    # what json.loads refuses too: FastAPI's json_invalid with its message and position (in the
    # decoded text: json.loads decodes UTF-16 with "surrogatepass" and drops a UTF-8 BOM)
    (b"\xff\xfe\x00\xd8x\x00", ("Expecting value", 0)),                          # a lone surrogate, raw
    (b"\xef\xbb\xbf", ("Expecting value", 0)),                                     # a BOM and nothing else
    (b"\xef\xbb\xbf{\"model\": ", ("Expecting value", 10)),
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/messages"])
def test_a_bad_body_in_another_encoding_is_a_400_json(api, raw, json_error, path):
    r = api.post(path, content=raw, headers=JSON)
    assert r.status_code == 400, r.text
    if json_error is None:
        message = r.json()["error"]["message"]
        assert message.startswith("Failed to parse the request body as JSON: "), message
    else:
        msg, pos = json_error
        message = (f"1 validation error:\n  {{'type': 'json_invalid', 'loc': 'body.{pos}', 'msg': 'JSON decode error', "
                   f"'input': '<dict of 0 items>', 'ctx': {{'error': '{msg}'}}}}")
        assert r.json()["error"]["message"] == message
    if path == "/v1/messages":
        assert r.json()["error"]["type"] == "invalid_request_error"
    else:
        assert r.json()["error"]["type"] == "Bad Request"          # vLLM's validation handler
        assert r.json()["error"]["param"] == (None if json_error is None else f"body.{json_error[1]}")
