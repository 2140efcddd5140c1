"""server.request_head: a plain head read in one pass gives what gunicorn's parser gives, and
every other head (hostile ones included) is gunicorn's to answer, with the same result."""
from __future__ import annotations

import pytest
from gunicorn.config import Config
from gunicorn.http.message import Request
from gunicorn.http.unreader import IterUnreader

from server.request_head import LeanRequest

BODY = b'{"model": "m", "prompt": "hi"}'
PLAIN = [
    b"POST /v1/completions HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    b"GET /health HTTP/1.1\r\n\r\n",
    b"GET /v1/models?x=1&y=a?b HTTP/1.0\r\nAccept: */*\r\nUser-Agent: curl/8.5 \t\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nAuthorization: Bearer k\r\n"
    b"Expect: 100-continue\r\nX-Empty:\r\nConnection: close\r\n\r\n{}",
    b"POST /a:b/c;d HTTP/1.1\r\nContent-Length: 0\r\nX-Forwarded-Proto: https\r\n\r\n",
]
HOSTILE = [
    b"\r\nGET / HTTP/1.1\r\n\r\n",                                  # one leading empty line
    b"get / HTTP/1.1\r\n\r\n",
    b"G@T / HTTP/1.1\r\n\r\n",
    b"GET //evil/path HTTP/1.1\r\n\r\n",
    b"GET /a#frag HTTP/1.1\r\n\r\n",
    b"GET http://h/x HTTP/1.1\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n\r\n",
    b"GET /x HTTP/1.2\r\n\r\n",
    b"GET /x HTTP/2.0\r\n\r\n",
    b"GET /x  HTTP/1.1\r\n\r\n",
    b"GET /\x7f HTTP/1.1\r\n\r\n",
    b"GET /\xe9 HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"GET / HTTP/1.1\r\nX_Forwarded_For: 1.2.3.4\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-A : 1\r\n\r\n",
    b"GET / HTTP/1.1\r\n: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-A: \x01\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-A: caf\xe9\r\n\r\n",
    b"GET / HTTP/1.1\nX-A: 1\n\n",
    b"GET / HTTP/1.1\r\nX-A: 1\nX-B: 2\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n",
    b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n",                    # past limit_request_line
    b"GET / HTTP/1.1\r\nX-A: " + b"v" * 9000 + b"\r\n\r\n",           # past limit_request_field_size
    b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 150 + b"\r\n",            # past limit_request_fields
    b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 100 + b"\r\n",            # exactly the limit
    b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 99 + b"\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n",                                  # head never ends
    b"",
]


def outcome(cls, data: bytes, chunks: int = 1, **settings):
    cfg = Config()
    for key, value in settings.items():
        cfg.set(key, value)
    step = max(1, -(-len(data) // chunks))
    unreader = IterUnreader([data[i:i + step] for i in range(0, len(data), step)])
    try:
        req = cls(cfg, unreader, ("127.0.0.1", 5000))
    except StopIteration:
        return "stop"
    except Exception as e:        # noqa: BLE001 - the outcome compared is the exception itself
        return (type(e).__name__, str(e))
    body = req.body.read()
    state = {k: v for k, v in vars(req).items() if k not in ("unreader", "body", "cfg")}
    return (state, req.method, req.uri, req.path, req.query, req.fragment, req.version, req.headers, req.scheme,
            req._expected_100_continue, req.should_close(), type(req.body.reader).__name__, body,
            unreader.read())


@pytest.mark.parametrize("data", PLAIN + HOSTILE)
@pytest.mark.parametrize("chunks", [1, 3])
def test_same_outcome_as_gunicorn(data, chunks):
    assert outcome(LeanRequest, data, chunks) == outcome(Request, data, chunks)


@pytest.mark.parametrize("data", PLAIN)
def test_same_outcome_with_other_settings(data):
    for settings in ({"forwarded_allow_ips": "*"}, {"limit_request_line": 20},
                     {"limit_request_fields": 3}, {"limit_request_field_size": 20},
                     {"casefold_http_method": True}, {"header_map": "drop"}):
        assert outcome(LeanRequest, data, **settings) == outcome(Request, data, **settings), settings


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\nExpect: 202-accepted\r\n\r\n",
                                  b"GET / HTTP/1.1\r\nExpect: x\r\nX_A: 1\r\n\r\n",            # gunicorn's parser
                                  b"POST / HTTP/1.1\r\nExpect: 100-continue, foo\r\nContent-Length: 0\r\n\r\n"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_an_unknown_expectation_is_ignored(data, chunks):
    """uvicorn (vLLM's server) serves a request whose ``Expect`` is not exactly ``100-continue``
    as if it had none (no 100, no 417); gunicorn answered it with its HTML 417 page."""
    assert outcome(Request, data, chunks)[0] == "ExpectationFailed"
    got = outcome(LeanRequest, data, chunks)
    assert isinstance(got[0], dict), got
    assert got[9] is False                       # no 100 Continue owed
    assert ("EXPECT", data.split(b"Expect: ")[1].split(b"\r\n")[0].decode()) in got[7]


def test_plain_heads_take_the_one_pass(monkeypatch):
    cfg = Config()
    calls = []
    monkeypatch.setattr(Request, "_parse_python", lambda self, *a: calls.append(1))
    for data in PLAIN:
        LeanRequest(cfg, IterUnreader([data]), ("127.0.0.1", 5000))
    assert calls == []


def test_pipelined_requests_leave_the_next_one_unread():
    data = PLAIN[0] + PLAIN[1]
    unreader = IterUnreader([data])
    req = LeanRequest(Config(), unreader, ("127.0.0.1", 5000))
    assert req.body.read() == BODY
    assert unreader.read() == PLAIN[1]
