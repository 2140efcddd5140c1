"""WSGI layers around the Flask app, outside Flask: ``--log-http`` bodies (:class:`LogHTTP`)
and the size limit of chunked request bodies (:class:`ChunkedBodyLimit`).
"""
from __future__ import annotations

import logging



class LogHTTP:
    """``--log-http`` (the reference's flag): log each request's method, URI, remote address,
    headers (keys redacted) and body (up to :attr:`LIMIT` bytes), and the response status and
    body when it is not a stream.  The body read for the log is handed on to the app."""
    LIMIT = 512 * 1024
    SECRET = {"HTTP_AUTHORIZATION", "HTTP_X_API_KEY"}

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app
        self.log = logging.getLogger("vllm_sim.http")

    def __call__(self, environ, start_response):
        import io
        headers = {k[5:].replace("_", "-").lower(): ("<redacted>" if k in self.SECRET else v)
                   for k, v in environ.items() if k.startswith("HTTP_")}
        for key, name in (("CONTENT_TYPE", "content-type"), ("CONTENT_LENGTH", "content-length")):
            if environ.get(key):                 # WSGI keeps these two apart from HTTP_*
                headers[name] = environ[key]
        body = b""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if 0 < length <= self.LIMIT:
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
        self.log.info("request %s %s from %s headers=%s body=%s", environ.get("REQUEST_METHOD"),
                      environ.get("RAW_URI") or environ.get("PATH_INFO"), environ.get("REMOTE_ADDR"),
                      headers, body.decode("utf-8", "replace") if body else "-")
        seen = {}

        def sr(status, response_headers, exc_info=None):
            seen["status"] = status
            seen["stream"] = any(k.lower() == "content-type" and v.startswith("text/event-stream")
                                 for k, v in response_headers)
            return start_response(status, response_headers, exc_info)
        result = self.wsgi_app(environ, sr)
        if seen.get("stream"):
            self.log.info("response %s (body streamed, not logged)", seen.get("status"))
            return result
        try:                   # any other body is finite: read it whole, log it, hand it on
            out = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        self.log.info("response %s body=%s", seen.get("status"),
                      out[:self.LIMIT].decode("utf-8", "replace"))
        return [out]


class ChunkedBodyLimit:
    """413 for a chunked request body (no Content-Length) over ``limit`` bytes, as a body with
    a Content-Length gets from Flask's ``MAX_CONTENT_LENGTH`` (issue 12: werkzeug cut such a
    body at the limit, and the truncated JSON became a 400 or was accepted).  The body is read
    here, at most ``limit + 1`` bytes, and handed on with its length (memory stays bounded;
    after a 413 the server discards the rest of the body)."""
    MESSAGE = "The data value transmitted exceeds the capacity limit."

    def __init__(self, wsgi_app, limit: int):
        self.wsgi_app = wsgi_app
        self.limit = limit

    def __call__(self, environ, start_response):
        te = environ.get("HTTP_TRANSFER_ENCODING")
        if te is None or environ.get("CONTENT_LENGTH") or "chunked" not in te.lower():
            return self.wsgi_app(environ, start_response)
        import io
        stream, parts, size = environ["wsgi.input"], [], 0
        while size <= self.limit:
            part = stream.read(min(65536, self.limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > self.limit:
            import orjson
            path = environ.get("PATH_INFO", "")
            if path == "/v1/messages" or path.startswith("/v1/messages/"):
                body = orjson.dumps({"type": "error", "error": {"type": "request_too_large", "message": self.MESSAGE}})
            else:
                body = orjson.dumps({"error": {"message": self.MESSAGE, "type": "RequestEntityTooLarge",
                                               "param": None, "code": 413}})
            start_response("413 Request Entity Too Large", [("Content-Type", "application/json"),
                                                            ("Content-Length", str(len(body)))])
            return [body]
        data = b"".join(parts)
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        return self.wsgi_app(environ, start_response)




class ServerLoad:
    """``--enable-server-load-tracking`` (vLLM's ``load_aware_call``): ``sim.server_load``
    counts the requests in flight on the inference routes (:data:`PATHS`), from arrival until
    their response body is closed (a stream's end), which ``GET /load`` reports.  The body is
    handed on unchanged (its iterator, so no Python layer per chunk), with a ``close`` that
    takes the request off the count once."""
    PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages",
                       "/v1/responses", "/inference/v1/generate"})

    def __init__(self, wsgi_app, sim):
        self.wsgi_app = wsgi_app
        self.sim = sim

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") not in self.PATHS:
            return self.wsgi_app(environ, start_response)
        sim = self.sim
        sim.server_load += 1
        try:
            body = self.wsgi_app(environ, start_response)
        except BaseException:
            sim.server_load -= 1
            raise
        return _Counted(body, sim)


class _Counted:
    __slots__ = ("body", "sim", "open")

    def __init__(self, body, sim):
        self.body, self.sim, self.open = body, sim, True

    def __iter__(self):
        return iter(self.body)

    def close(self):
        if self.open:
            self.open = False
            self.sim.server_load -= 1
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
