"""A request head read in one pass when it is plain (issue 32: gunicorn's pure-Python parser
was ~13% of a small request's CPU).

:class:`LeanRequest` is gunicorn's ``Request`` whose ``parse`` first tries the common case: the
whole head is already in the buffer, and one compiled pattern (:data:`PLAIN_HEAD`) matches all
of it: an upper-case method, an origin-form target of printable ASCII without a fragment,
``HTTP/1.0`` or ``HTTP/1.1``, and header lines of a token name without ``_``, a colon and a
printable-ASCII value.  Such a head is split once (one ``decode``, one ``split``), within the
same limits gunicorn applies (request line, number and size of header lines, head size), and
every header goes through gunicorn's own header policy where it can act (singleton fields,
``Expect``, the trusted proxy's scheme headers).  The body reader is gunicorn's.

Anything else (a head split over reads, a leading empty line, a lower-case or odd method, a
``//`` or ``*`` or absolute target, a fragment, another version, obsolete folding, a name with
``_``, a control or non-ASCII byte, a PROXY protocol preamble, a head past a limit) is handed
back unread to gunicorn's parser, which answers it exactly as before: the plain subset is one
that gunicorn accepts, giving the same method, target, version and headers
(``tests/unit/test_request_head.py`` compares both on plain and hostile heads).

Where gunicorn accepts what vLLM's server refuses, the request is refused as uvicorn's
``httptools`` parser (llhttp) refuses it, with the same ``400 Invalid HTTP request received.``
(``server.worker.unparsable_request``): a method llhttp does not know for HTTP/1 (``FOO``:
gunicorn passed it on, a 405 JSON), ``CONNECT`` (uvicorn has no tunnel: a 400), a version
``HTTP/1.2`` to ``HTTP/1.9`` (gunicorn answered ``HTTP/1.2 200 OK``), and chunked framing that
llhttp refuses as the bytes arrive (:class:`StrictChunkedReader`).  The other way round, a
repeated ``Host`` or ``Content-Type``, which gunicorn refused, is served with its first copy, as
vLLM serves it.
"""
from __future__ import annotations

import re
from time import monotonic

import gevent
from gunicorn.http.body import Body, ChunkedReader
from gunicorn.http.errors import InvalidChunkSize, InvalidHTTPVersion, InvalidRequestMethod
from gunicorn.http.message import RFC9110_5_3_SINGLETON_FIELDS, Request

_NAME = rb"[!#$%&'*+\-.^`|~0-9A-Za-z]+"         # RFC 9110 token, without "_" (gunicorn's header_map)
PLAIN_HEAD = re.compile(
    rb"[A-Z]{3,20} /[!\x22\x24-\x7e]* HTTP/1\.[01]\r\n"     # no "#", not "//" (checked apart)
    rb"(?:" + _NAME + rb":[\t\x20-\x7e]*\r\n)*")
HEAD_MAX = 8192            # bytes: longer heads go to gunicorn's parser (its max_buffer_headers)
POLICY = RFC9110_5_3_SINGLETON_FIELDS | {"EXPECT"}     # names gunicorn's header policy acts on
# The methods llhttp (httptools 0.9, uvicorn's default parser under vLLM) accepts on an HTTP/1.x
# request line; any other is "Invalid method encountered" (its RTSP methods: "Invalid method for
# HTTP/x.x request"), CONNECT an upgrade uvicorn refuses; PRI is HTTP/2's preface (a 400 anyway).
HTTP_METHODS = frozenset(
    "DELETE GET HEAD POST PUT OPTIONS TRACE COPY LOCK MKCOL MOVE PROPFIND PROPPATCH SEARCH UNLOCK BIND "
    "REBIND UNBIND ACL REPORT MKACTIVITY CHECKOUT MERGE M-SEARCH NOTIFY SUBSCRIBE UNSUBSCRIBE PATCH PURGE "
    "MKCALENDAR LINK UNLINK SOURCE QUERY".split())
HEX_DIGITS = b"0123456789abcdefABCDEF"
CHUNK_SLICE = 0.002                # s: the longest a chunked body is parsed before the hub gets a turn
CHUNK_SIZE_MAX = (1 << 64) - 1     # llhttp keeps a chunk's size in 64 bits: past it, "Chunk size overflow"


DRAIN_MAX = 64 << 10        # bytes of an unread body gunicorn may read on to keep the connection


def body_left_to_drain(req) -> bool:
    """Whether ``req``'s body was left unread past :data:`DRAIN_MAX` bytes (a Content-Length body
    answered early: a 413, a 401, a refused media type) or mid-way through its chunks: then the
    connection is closed, not kept alive.  gunicorn reads an unread body to its end before the
    next request, in Python on the hub: a 9 MB body answered 413 held every other client ~190 ms
    (nginx closes such a connection too).  The answer says so: its
    ``Connection: close`` (:meth:`LeanRequest.should_close`), else a client reuses the connection
    and meets the reset."""
    return _unread(getattr(req, "body", None), DRAIN_MAX)


def _unread(body, beyond: int) -> bool:
    """Whether ``body`` (gunicorn's) has more than ``beyond`` bytes of a Content-Length body
    still to come, or chunks not all read."""
    reader = getattr(body, "reader", None)
    length = getattr(reader, "length", None)              # LengthReader: the bytes still to come
    if length is not None:
        return length > beyond
    return getattr(reader, "parser", None) is not None     # ChunkedReader: its chunks not all read


class ContinueBody(Body):
    """gunicorn's request ``Body`` that sends ``HTTP/1.1 100 Continue`` on ``continue_to`` (the
    connection's socket) before its first read from the socket, as uvicorn answers ``Expect:
    100-continue`` on the application's first ``receive()``."""

    continue_to = None          # the socket, until the interim answer is sent

    def _read_reader(self, size):
        sock = self.continue_to
        if sock is not None:
            self.continue_to = None
            try:
                sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            except Exception:
                self.failed = True          # the connection cannot be reused (Body's own rule)
                raise
        return super()._read_reader(size)


def body_not_invited(req) -> bool:
    """Whether ``req`` expected ``100 Continue`` and was answered without it while its body
    has bytes still to come (a Content-Length body not read to its end, a chunked one not
    ended)."""
    body = getattr(req, "body", None)
    return body.__class__ is ContinueBody and body.continue_to is not None and _unread(body, 0)


class LeanRequest(Request):
    """gunicorn's ``Request`` with a one-pass reading of a plain head (see the module)."""

    def _apply_header_policy(self, name, value, scheme_state, seen, *args, **kwargs):
        # uvicorn (vLLM's server) acts on ``Expect: 100-continue`` alone and serves a request
        # with any other expectation as if it had none; gunicorn answers those with its own
        # HTML 417 page.
        if name == "EXPECT" and value.lower() != "100-continue":
            return (name, value)
        # A repeated Host or Content-Type: uvicorn keeps every copy and Starlette's
        # ``headers.get`` (vLLM's ``validate_json_request``) reads the first, so vLLM serves
        # ``Content-Type: application/json`` followed by another; gunicorn refused the request
        # (a 400).  Neither frames the body, so the first copy is kept and the others dropped.
        if name in RFC9110_5_3_SINGLETON_FIELDS and name in seen:
            return None
        return super()._apply_header_policy(name, value, scheme_state, seen, *args, **kwargs)

    def parse_request_line(self, line_bytes):
        super().parse_request_line(line_bytes)
        if self.method not in HTTP_METHODS:
            raise InvalidRequestMethod(self.method)
        if self.version[0] == 1 and self.version[1] > 1:
            raise InvalidHTTPVersion(self.version)

    def set_body_reader(self):
        super().set_body_reader()
        if self.body.reader.__class__ is ChunkedReader:
            self.body = Body(StrictChunkedReader(self, self.unreader))
        sock = getattr(self.unreader, "sock", None)
        if self._expected_100_continue and sock is not None:
            # gunicorn sends ``100 Continue`` as it builds the environ; uvicorn (vLLM's server)
            # when the application first reads the body, so an answer from the head alone (a
            # 413 by Content-Length, a 401, a 404) goes out without inviting the body
            self._expected_100_continue = False
            self.body.__class__ = ContinueBody
            self.body.continue_to = sock

    def should_close(self):
        # a body answered early and left unread past DRAIN_MAX, or never invited (its
        # ``Expect: 100-continue`` unanswered: the client may never send it, so reading on to
        # the next request could wait for ever): the connection closes after the answer
        # (server.worker), and the answer's headers say ``Connection: close`` (gunicorn's
        # Response asks this when it writes them), not keep-alive
        return super().should_close() or body_left_to_drain(self) or body_not_invited(self)

    def parse(self, unreader):
        if self._use_fast or (self.req_number == 1 and self.cfg.proxy_protocol != "off"):
            return super().parse(unreader)
        data = unreader.read()
        if not data:
            raise StopIteration()
        end = data.find(b"\r\n\r\n", 0, HEAD_MAX)
        if end > 0 and PLAIN_HEAD.fullmatch(data, 0, end + 2):
            rest = self._plain(data, end)
            if rest is not None:
                return rest
        unreader.unread(data)
        return super().parse(unreader)

    def _plain(self, data: bytes, end: int):
        lines = data[:end].decode("latin-1").split("\r\n")
        line = lines[0]
        method, uri, version = line.split(" ")
        if (len(line) > self.limit_request_line > 0 or uri.startswith("//") or method not in HTTP_METHODS
                or len(lines) > self.limit_request_fields):
            return None
        size = self.limit_request_field_size
        for header in lines[1:]:
            if len(header) + 2 > size:
                return None
        self.method = method
        self.uri = uri
        path, _, query = uri.partition("?")
        self.path, self.query, self.fragment = path, query, ""
        self.version = (1, 1) if version[7] == "1" else (1, 0)
        headers = self.headers = []
        scheme_state = [False]
        seen = set()
        secure, forwarders = self._peer_trusted_for_forwarded()
        for header in lines[1:]:
            name, value = header.split(":", 1)
            name = name.upper()
            value = value.strip(" \t")
            if (name in POLICY or name in secure) and self._apply_header_policy(
                    name, value, scheme_state, seen, secure, forwarders) is None:
                continue                          # a repeated singleton field: the first is kept
            headers.append((name, value))
        return data[end + 4:]


class StrictChunkedReader(ChunkedReader):
    """gunicorn's chunked body reader that refuses a chunk-size line llhttp refuses, as soon as
    the bytes show it, instead of waiting for a CRLF that may never come: a bare LF (``5\\n``:
    gunicorn waited for ``\\r\\n`` until the body's deadline, a 408 after 9 s), a size with a
    byte that is not a hex digit (whitespace before an extension too, which gunicorn allowed:
    llhttp's "Invalid character in chunk size"), and a size past 64 bits
    (``FFFFFFFFFFFFFFFFFFFF``: gunicorn waited for 1.2e24 bytes).  Raises ``InvalidChunkSize``,
    which the worker answers with uvicorn's 400.  The line itself is then gunicorn's to parse.

    A body of many small chunks already in the socket is parsed without a read ever blocking:
    the hub gets a turn every :data:`CHUNK_SLICE` of parsing (one-byte chunks, 1 M of them in a
    6 MB body, held every other client 7 s; ~7 us a chunk)."""

    def parse_chunk_size(self, unreader, data=None):
        now = monotonic()
        turn_by = self.__dict__.get("_turn_by")
        if turn_by is None:
            self._turn_by = now + CHUNK_SLICE
        elif now >= turn_by:
            gevent.sleep(0)
            self._turn_by = monotonic() + CHUNK_SLICE
        buf = bytearray(data) if data else bytearray()
        while True:
            end = buf.find(b"\r\n")
            line = bytes(buf if end < 0 else buf[:end])
            size, semi, _ = line.partition(b";")
            if not semi and end < 0:
                size = size.removesuffix(b"\r")          # the CR of a CRLF still to come
            if b"\n" in line or size.strip(HEX_DIGITS):
                raise InvalidChunkSize(line[:64])
            if len(size) > 16 and int(size, 16) > CHUNK_SIZE_MAX:
                raise InvalidChunkSize(b"chunk size past 64 bits")
            if end >= 0 or len(buf) > self.limit_chunk_size_line:
                return super().parse_chunk_size(unreader, bytes(buf))
            self.read_into(unreader, buf)
