"""SCRIPT_NAME / PATH_INFO request headers from a loopback peer are ignored (gunicorn's forwarder headers off), on a real server."""
from __future__ import annotations

import pytest

from support.sockets import raw_request


@pytest.mark.parametrize("header", ["SCRIPT_NAME: /other", "SCRIPT_NAME: /v1", "PATH_INFO: /metrics",
                                    "SCRIPT-NAME: /x"])
@pytest.mark.parametrize("method,path,body", [
    ("GET", "/health", b""), ("GET", "/v1/models", b""),
    ("POST", "/v1/chat/completions", b'{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'),
    ("POST", "/v1/completions", b'{"model":"test-model","prompt":"hi","max_tokens":2}'),
    ("GET", "/nowhere", b""),
])
def test_forwarder_headers_from_loopback_are_ignored(server, header, method, path, body):
    """gunicorn trusted SCRIPT_NAME / PATH_INFO headers from loopback peers (a sidecar proxy):
    a SCRIPT_NAME the path does not start with was a 500 on every route."""
    req = (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{header}\r\nConnection: close\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    data = raw_request(server, req)
    status = int(data.split(b" ", 2)[1])
    assert status == (404 if path == "/nowhere" else 200), data[:300]
