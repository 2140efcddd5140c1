"""server.request_head: a plain head read in one pass gives what gunicorn's parser gives, and
every other head (hostile ones included) is gunicorn's to answer, with the same result."""
from __future__ import annotations

import pytest
from gunicorn.config import Config
from gunicorn.http import errors
from gunicorn.http.message import Request
from gunicorn.http.unreader import IterUnreader

from server.request_head import LeanRequest, StrictChunkedReader

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
    b"GET /x HTTP/2.0\r\n\r\n",
    b"GET /x  HTTP/1.1\r\n\r\n",
    b"GET /\x7f HTTP/1.1\r\n\r\n",
    b"GET /\xe9 HTTP/1.1\r\n\r\n",
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


# What gunicorn accepts and uvicorn's httptools parser (llhttp, under vLLM) refuses; checked
# against httptools 0.9: "Invalid method encountered", CONNECT an upgrade uvicorn refuses,
# "Invalid HTTP version".
REFUSED_AS_UVICORN = [
    (b"FOO /health HTTP/1.1\r\nHost: a\r\n\r\n", "InvalidRequestMethod"),         # gunicorn: a 405 JSON
    (b"GETS /health HTTP/1.1\r\n\r\n", "InvalidRequestMethod"),
    (b"DESCRIBE /x HTTP/1.1\r\n\r\n", "InvalidRequestMethod"),                       # RTSP's
    (b"CONNECT example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n", "InvalidRequestMethod"),  # gunicorn: a 404 JSON
    (b"CONNECT /x HTTP/1.1\r\n\r\n", "InvalidRequestMethod"),
    (b"GET /x HTTP/1.2\r\n\r\n", "InvalidHTTPVersion"),       # gunicorn answered "HTTP/1.2 200 OK"
    (b"GET /x HTTP/1.9\r\nHost: a\r\n\r\n", "InvalidHTTPVersion"),
]


@pytest.mark.parametrize("data,error", REFUSED_AS_UVICORN)
@pytest.mark.parametrize("chunks", [1, 3])
def test_what_uvicorn_refuses_is_refused(data, error, chunks):
    assert not isinstance(outcome(Request, data, chunks)[0], str)      # gunicorn alone accepts it
    assert outcome(LeanRequest, data, chunks)[0] == error


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND",
                                    "M-SEARCH", "QUERY"])
def test_methods_uvicorn_knows_pass(method):
    data = method.encode() + b" /x HTTP/1.1\r\nHost: a\r\n\r\n"
    assert outcome(LeanRequest, data) == outcome(Request, data)
    assert outcome(LeanRequest, data)[1] == method


def chunked(body: bytes) -> bytes:
    return b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body


class EndlessUnreader(IterUnreader):
    """The bytes given, then a read that fails the test: the client sent nothing more."""

    def chunk(self, size_hint=None):
        data = super().chunk()
        if not data:
            raise AssertionError("read past what the client sent: the reader waits for more")
        return data


@pytest.mark.parametrize("body", [
    b"5\n{}{}{", b"34\n", b"5;a\nb", b"FFFFFFFFFFFFFFFFFFFF\r\n{", b"FFFFFFFFFFFFFFFFF\r\n",
    b"FFFFFFFFFFFFFFFFFFFF", b"zz", b"5 5", b" 5", b"5\rx", b"-5\r\n",
    b"2 ;a\r\n{}\r\n0\r\n\r\n",                  # whitespace before an extension: gunicorn took it
])
def test_a_chunk_size_llhttp_refuses_is_refused_without_waiting(body):
    """httptools 0.9 refuses each of these as the bytes arrive ("Missing expected CR after chunk
    size", "Chunk size overflow", "Invalid character in chunk size"); gunicorn waited for a
    CRLF, or for 2**80 bytes, until the body's deadline (a 408 after 9 s)."""
    req = LeanRequest(Config(), EndlessUnreader([chunked(body)]), ("127.0.0.1", 5000))
    assert type(req.body.reader) is StrictChunkedReader
    with pytest.raises(errors.InvalidChunkSize):
        req.body.read()


@pytest.mark.parametrize("body,expected", [
    (b"2\r\n{}\r\n0\r\n\r\n", b"{}"),
    (b"2;a=b\r\n{}\r\n0\r\n\r\n", b"{}"),
    (b"2;a=\"x y\"\r\n{}\r\n0\r\n\r\n", b"{}"),
    (b"0000000000000000000002\r\n{}\r\n0\r\n\r\n", b"{}"),       # leading zeros: still 2
    (b"FFFFFFFFFFFFFFFF\r\n", None),                            # 2**64-1 fits: more bytes owed
    (b"1\r\n{\r\n1\r\n}\r\n0\r\nX-T: 1\r\n\r\n", b"{}"),
])
@pytest.mark.parametrize("chunks", [1, 4, 40])
def test_valid_chunked_bodies_read_as_gunicorn_reads_them(body, expected, chunks):
    data = chunked(body)
    step = max(1, -(-len(data) // chunks))
    req = LeanRequest(Config(), IterUnreader([data[i:i + step] for i in range(0, len(data), step)]),
                      ("127.0.0.1", 5000))
    if expected is None:
        with pytest.raises(errors.NoMoreData):
            req.body.read()
        return
    assert req.body.read() == expected
    lean, plain = outcome(LeanRequest, data, chunks), outcome(Request, data, chunks)
    assert (lean[11], plain[11]) == ("StrictChunkedReader", "ChunkedReader")
    assert lean[:11] + lean[12:] == plain[:11] + plain[12:]


@pytest.mark.parametrize("data,kept", [
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", [("HOST", "a")]),
    (b"POST / HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
     b"Content-Type: text/plain\r\n\r\n{}", [("CONTENT-TYPE", "application/json"), ("CONTENT-LENGTH", "2")]),
    (b"GET / HTTP/1.1\r\nHost: a\r\nX_A: 1\r\nHost: a\r\n\r\n", [("HOST", "a")]),     # gunicorn's parser
])
@pytest.mark.parametrize("chunks", [1, 3])
def test_a_repeated_singleton_field_keeps_its_first_copy(data, kept, chunks):
    """uvicorn keeps every copy of a header and Starlette's ``headers.get`` reads the first:
    vLLM serves ``Content-Type: application/json`` followed by another one; gunicorn refused a
    repeated Host or Content-Type (``InvalidHeader``, a 400)."""
    assert outcome(Request, data, chunks)[0] == "InvalidHeader"
    got = outcome(LeanRequest, data, chunks)
    assert isinstance(got[0], dict), got
    assert [h for h in got[7] if h[0] in ("HOST", "CONTENT-TYPE", "CONTENT-LENGTH")] == kept
