"""Fewer system calls per response under gunicorn (issue 13, "the stack").

gunicorn's ``Response`` sends the status line and headers in one ``sendall`` and every body
write in another, and a chunked response's terminating ``0\\r\\n\\r\\n`` in a third.  A small
JSON answer therefore costs two writes (two TCP segments) where one would do, and a stream whose
tokens are all due at once costs three.  :func:`install` makes gunicorn hold the header bytes
until the first body write (or the end of the response) and send them in the same ``sendall``.
A stream still gets its headers at once: the SSE generators yield their first frame (or an
empty flush) before any sleep, and an empty write flushes held headers.

Call :func:`install` in the process that serves (before or after the fork); it is idempotent
and only touches ``gunicorn.http.wsgi.Response``.
"""
from __future__ import annotations


def install() -> None:
    """Patch gunicorn's Response: headers go out with the first body bytes."""
    from gunicorn import util
    from gunicorn.http import wsgi

    resp = wsgi.Response
    if getattr(resp, "_headers_with_body", False):
        return
    original_write = resp.write

    def send_headers(self):
        if self.headers_sent:
            return
        tosend = self.default_headers()
        tosend.extend(["%s: %s\r\n" % (k, v) for k, v in self.headers])
        self._held_headers = util.to_bytestring("%s\r\n" % "".join(tosend), "latin-1")
        self.headers_sent = True

    def _flush_headers(self, data: bytes = b"") -> None:
        held = self.__dict__.pop("_held_headers", None)
        if held is not None:
            self.sock.sendall(held + data)
        elif data:
            self.sock.sendall(data)

    def _emit_body(self, data):
        if self.chunked:
            data = b"%X\r\n%s\r\n" % (len(data), data)
        _flush_headers(self, data)

    def write(self, arg):
        original_write(self, arg)
        if "_held_headers" in self.__dict__:
            _flush_headers(self)          # an empty write (a flush) or a body-less response

    def close(self):
        if not self.headers_sent:
            self.send_headers()
        _flush_headers(self, b"0\r\n\r\n" if self.chunked else b"")

    resp.sendfile = lambda self, respiter: False     # file bodies go through write() too
    resp.send_headers = send_headers
    resp._emit_body = _emit_body
    resp.write = write
    resp.close = close
    resp._headers_with_body = True
