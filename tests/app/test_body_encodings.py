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


@pytest.mark.parametrize("raw", [
    '{"prompt": "\\ud800", "model": "test-model"}'.encode("utf-16"),          # a lone surrogate, escaped
    "{\"prompt\": \"a\"}".encode("utf-16")[:-1],                                # truncated UTF-16
    b"\xff\xfe\x00\xd8x\x00",                                                    # a lone surrogate, raw
    '{"model": "test-model", "prompt": "a", "temperature": NaN}'.encode("utf-16"),
    b"\xef\xbb\xbf",                                                             # a BOM and nothing else
    b"\xef\xbb\xbf{\"model\": ",
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/messages"])
def test_a_bad_body_in_another_encoding_is_a_400_json(api, raw, path):
    r = api.post(path, content=raw, headers=JSON)
    assert r.status_code == 400, r.text
    if path == "/v1/messages":
        assert r.json()["error"]["type"] == "invalid_request_error"
    else:
        assert r.json()["error"]["type"] == "Bad Request"          # vLLM's validation handler
    assert "Failed to parse the request body as JSON" in r.text
