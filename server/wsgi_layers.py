"""WSGI layers around the Flask app, outside Flask: ``--log-http`` bodies (:class:`LogHTTP`),
the size limit of chunked request bodies (:class:`ChunkedBodyLimit`), the time limit of
request bodies (:class:`BodyDeadline`), the method / media-type rules every route shares
(:class:`RequestGuard`), and the one layer a common generation request crosses instead of
them all (:class:`FrontDoor`).
"""
from __future__ import annotations

import io
import logging
import socket
import time
from time import monotonic, perf_counter

from blueprints.streaming import KERNEL_ARRIVAL_KEY
from generation.errors import UNSUPPORTED_MEDIA_MESSAGE, anthropic_envelope

from .http_metrics import GONE, ObservedStream, content_length

BODY_RATE = 1 << 20          # bytes/s a body must arrive at, after its first --timeout-keep-alive seconds


def close_after(environ) -> None:
    """Make gunicorn answer ``Connection: close`` and close the connection after this
    response.  gunicorn ignores a ``Connection`` response header from the app; its request
    object is reached through the closure of ``wsgi.early_hints`` (gunicorn 27, pinned),
    and the socket's read side is shut down anyway."""
    hints = environ.get("wsgi.early_hints")
    for cell in getattr(hints, "__closure__", None) or ():
        try:
            obj = cell.cell_contents
        except ValueError:
            continue
        if hasattr(obj, "must_close") and hasattr(obj, "should_close"):
            obj.must_close = True


class DeadlineInput:
    """A WSGI input whose reads share one deadline (``time.monotonic`` seconds).  Past it, a
    read raises the 408 :class:`generation.errors.APIError` and shuts the socket's read side, so
    that gunicorn closes the connection after the answer instead of draining the rest of a
    body that trickles in."""
    __slots__ = ("stream", "deadline", "sock", "timed_out", "environ", "left")

    def __init__(self, stream, deadline: float, sock, environ=None, length: int | None = None):
        self.environ = environ
        self.stream = stream
        self.deadline = deadline
        self.sock = sock
        self.timed_out = False
        self.left = length            # bytes still to come (None: chunked, until the end)

    def _call(self, fn, *args):
        from gevent import Timeout

        from .unfinished import Evicted, done
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._expire()
        timer = Timeout(left)
        timer.start()
        try:
            data = fn(*args)
        except Timeout as t:
            if t is not timer:
                raise
            self._expire()
        except Evicted:               # closed to admit a new connection: as if the deadline had passed
            self._expire()
        finally:
            timer.close()
        if self.left is not None and isinstance(data, (bytes, bytearray)):
            self.left -= len(data)
        if not data or (self.left is not None and self.left <= 0):
            done()                    # the body is in: the request is in flight, never evicted
        return data

    def _expire(self):
        from generation.errors import APIError

        from .arrivals import take_turn
        take_turn(low=True)     # bodies that started together expire together: 5 answers a loop turn, after new requests
        self.timed_out = True
        if self.environ is not None:
            close_after(self.environ)
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        raise APIError("Request body timed out: it did not arrive in time.", 408, None, "RequestTimeout")

    def read(self, size=-1):
        return self._call(self.stream.read, size)

    def readline(self, size=-1):
        return self._call(self.stream.readline, size)

    def readlines(self, hint=-1):
        return self._call(self.stream.readlines, hint)

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line


class BodyDeadline:
    """A time limit on reading a request's body, as gunicorn limits its headers (to
    ``--timeout-keep-alive``): the body must arrive within ``grace`` seconds plus its length at
    :data:`BODY_RATE` (a chunked body counts as ``limit`` bytes).  10,000 connections sending
    one byte a second held every worker connection for as long as they liked (issue 23).
    Past the deadline the request is answered 408 in the API's envelope and the connection is
    closed.  Only under gunicorn (``gunicorn.socket`` in the environ); in-process bodies are
    already in memory."""

    def __init__(self, wsgi_app, limit: int, grace: float):
        self.wsgi_app = wsgi_app
        self.limit = limit
        self.grace = grace

    def __call__(self, environ, start_response):
        sock = environ.get("gunicorn.socket")
        if sock is not None and environ.get("REQUEST_METHOD") in ("POST", "PUT", "PATCH"):
            length = environ.get("CONTENT_LENGTH")
            if length and length.isdigit():
                size = min(int(length), self.limit + 1)
            elif "chunked" in (environ.get("HTTP_TRANSFER_ENCODING") or "").lower():
                size = self.limit
            else:
                size = 0
            if size:
                body = environ["wsgi.input"] = DeadlineInput(
                    environ["wsgi.input"], time.monotonic() + self.grace + size / BODY_RATE, sock, environ,
                    int(length) if length and length.isdigit() else None)
                try:
                    return self.wsgi_app(environ, start_response)
                except Exception:
                    if not body.timed_out:
                        raise
                    return self.timed_out(environ, start_response)      # read outside Flask and the fast path
        if sock is not None:
            from .unfinished import done
            done()                    # no body: the request is in (server.unfinished)
        return self.wsgi_app(environ, start_response)

    @staticmethod
    def timed_out(environ, start_response):
        close_after(environ)
        import orjson
        message = "Request body timed out: it did not arrive in time."
        if anthropic_envelope(environ.get("PATH_INFO", "")):
            out = orjson.dumps({"type": "error", "error": {"type": "timeout_error", "message": message}})
        else:
            out = orjson.dumps({"error": {"message": message, "type": "RequestTimeout", "param": None, "code": 408}})
        start_response("408 Request Timeout", [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(out)))])
        return [out]



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
    here, at most ``limit + 1`` bytes, the hub given a turn every ``SLICE`` of it, and handed on
    with its length (memory stays bounded); after a 413 the connection is closed, not read on to
    the body's end (:func:`server.worker.body_left_to_drain`)."""
    def __init__(self, wsgi_app, limit: int):
        from generation.errors import body_too_large_message
        self.wsgi_app = wsgi_app
        self.limit = limit
        self.message = body_too_large_message(limit)

    def __call__(self, environ, start_response):
        te = environ.get("HTTP_TRANSFER_ENCODING")
        if te is None or environ.get("CONTENT_LENGTH") or "chunked" not in te.lower():
            return self.wsgi_app(environ, start_response)
        import io
        from generation.lanes import SLICE, hub_turn
        stream, parts, size = environ["wsgi.input"], [], 0
        turn_by = monotonic() + SLICE
        while size <= self.limit:
            part = stream.read(min(65536, self.limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
            if monotonic() > turn_by:       # a body already in the socket never blocks a read:
                hub_turn()                  # gunicorn's chunk parser held the hub 165 ms on 4 MiB
                turn_by = monotonic() + SLICE
        if size > self.limit:
            import orjson
            path = environ.get("PATH_INFO", "")
            if anthropic_envelope(path):
                body = orjson.dumps({"type": "error", "error": {"type": "request_too_large", "message": self.message}})
            else:
                body = orjson.dumps({"error": {"message": self.message, "type": "RequestEntityTooLarge",
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
                       "/v1/responses", "/inference/v1/generate", "/generative_scoring", "/v1/decisions",
                       "/v1/systemone", "/cohere/v2/chat",
                       # vLLM 0.34's pooling and speech-to-text routers are load_aware_call too
                       # (/v1/score, /v1/rerank, /v2/rerank through /score's and /rerank's handlers)
                       "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
                       "/v2/embed", "/v1/audio/transcriptions", "/v1/audio/translations"})

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


CORS_METHODS = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"     # Starlette's ALL_METHODS
# probes: change nothing, take anything (vLLM's is_scaling_elastic_ep reads no body: no JSON check)
NO_BODY_POSTS = frozenset({"/ping", "/is_scaling_elastic_ep"})
# vLLM's upload routes (FastAPI ``Form``): multipart bodies, from a command line or a same-origin page
MULTIPART_POSTS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
# vLLM 0.34's abort route reads its body itself (``scale_out/token_in_token_out/api_router.py``
# ``abort_requests``: "FastAPI's strict content-type check would then reject clients that send no
# `Content-Type`"): any Content-Type, or none, from a command line or a same-origin page
# (dev mode's /abort_requests and /collective_rpc too: blueprints.rl, blueprints.dev)
ANY_TYPE_POSTS = frozenset({"/inference/v1/abort_requests", "/abort_requests", "/collective_rpc"})
CROSS_SITE_FORM = ("An upload from another site's page is refused: a browser sends a form cross-site without a "
                   "CORS preflight")
CROSS_SITE = ("A POST without a body from another site's page is refused: send it with "
              "'Content-Type: application/json' (a browser then asks first: a CORS preflight)")


def _cross_origin(environ: dict) -> bool:
    """Whether a browser marked the request as coming from another origin's page:
    ``Sec-Fetch-Site`` ``cross-site`` or ``same-site`` (another port or subdomain), or an
    ``Origin`` (``null`` included) whose host differs from the ``Host`` header.  Command-line
    clients send neither header."""
    if environ.get("HTTP_SEC_FETCH_SITE") in ("cross-site", "same-site"):
        return True
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return False
    return origin.split("://", 1)[-1].rstrip("/").lower() != environ.get("HTTP_HOST", "").lower()


class RequestGuard:
    """What every route shares, before routing:

    * a CORS preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is
      answered ``200 OK`` for any path, as vLLM's ``CORSMiddleware`` (``--allowed-origins``
      ``*`` and friends, its defaults) answers it; any other ``OPTIONS`` goes on to the router,
      whose 405 / 404 are vLLM's too;
    * a ``POST`` may change state only with a JSON body: a ``Content-Type`` other than
      ``application/json``, or a body without one, is a 400 (vLLM's message) on every POST
      route, as vLLM's ``validate_json_request`` does on its JSON routes.  A browser can send
      ``text/plain`` or a form cross-site without a preflight; a body-less POST (``/sleep?level=1``)
      passes from a command line, but not from another site's page (issue 31 item 12: a
      ``fetch(url, {method: "POST", mode: "no-cors"})`` sends exactly that and put the server
      to sleep): one that a browser marks cross-origin (``Sec-Fetch-Site`` ``cross-site`` /
      ``same-site``, or an ``Origin`` other than the ``Host``) is a 400; with
      ``Content-Type: application/json`` the browser asks first (a preflight), as CORS wants.
      ``/ping`` and ``/is_scaling_elastic_ep`` (probes; vLLM checks no body there) are exempt.
      The upload routes (:data:`MULTIPART_POSTS`) take ``multipart/form-data`` and any other
      type, as vLLM's ``Form`` routes (which check none: a body that is no multipart form lacks
      its ``file``), except from another origin's page (a browser posts a form cross-site
      without asking first); the abort routes
      (:data:`ANY_TYPE_POSTS`) take any ``Content-Type`` or none, as vLLM's, with the same
      exception;
    * a path that starts with ``//`` is a 404 (after a preflight, before the POST rules, as
      vLLM's router comes after its middleware and before a route's checks): Starlette matches
      the path as sent, where Werkzeug strips every leading slash but one, which served
      ``//v1/models`` (a client joining its base URL with an extra slash) as ``/v1/models``."""

    def __init__(self, wsgi_app, posts_to_a_route=None):
        self.wsgi_app = wsgi_app
        # environ -> whether a POST there reaches a route; None: every path counts as one
        self.posts_to_a_route = posts_to_a_route

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD")
        if environ.get("PATH_INFO", "").startswith("//") and not (
                method == "OPTIONS" and environ.get("HTTP_ORIGIN")
                and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in environ):
            return self._error(environ, start_response, 404, "Not Found", "Not Found")     # FastAPI's body
        if method == "POST":
            ctype = environ.get("CONTENT_TYPE")
            if ctype:
                mime = ctype.split(";", 1)[0].lower()
                ok = mime == "application/json"       # as sent: vLLM's check strips nothing
                if (not ok and mime.strip() == "multipart/form-data"
                        and environ.get("PATH_INFO") in MULTIPART_POSTS):
                    if _cross_origin(environ):
                        return self._error(environ, start_response, 400, CROSS_SITE_FORM)
                    ok = True
            else:
                length = environ.get("CONTENT_LENGTH")
                ok = (not length or length == "0") and "HTTP_TRANSFER_ENCODING" not in environ
            if not ok and environ.get("PATH_INFO") in ANY_TYPE_POSTS and not _cross_origin(environ):
                ok = True
            if not ok and environ.get("PATH_INFO") in MULTIPART_POSTS and not _cross_origin(environ):
                # vLLM's Form() routes check no type: any other body reads as a form without a
                # file (URL-encoded fields, or none), pydantic's 400 naming body.file, not a
                # message that only JSON is allowed on an upload route
                ok = True
            if not ok and environ.get("PATH_INFO") not in NO_BODY_POSTS and self._routed(environ):
                return self._error(environ, start_response, 400, UNSUPPORTED_MEDIA_MESSAGE, "Bad Request")
            if (not ctype and environ.get("PATH_INFO") not in NO_BODY_POSTS and _cross_origin(environ)
                    and self._routed(environ)):
                return self._error(environ, start_response, 400, CROSS_SITE)
        elif method == "OPTIONS" and environ.get("HTTP_ORIGIN") and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in environ:
            headers = [("Access-Control-Allow-Origin", "*"), ("Access-Control-Allow-Methods", CORS_METHODS),
                       ("Access-Control-Max-Age", "600")]
            asked = environ.get("HTTP_ACCESS_CONTROL_REQUEST_HEADERS")
            if asked is not None:
                headers.append(("Access-Control-Allow-Headers", asked))
            start_response("200 OK", [*headers, ("Content-Type", "text/plain; charset=utf-8"),
                                      ("Content-Length", "2")])
            return [b"OK"]
        return self.wsgi_app(environ, start_response)

    def _routed(self, environ) -> bool:
        """Whether a POST to this path reaches a route: vLLM checks the content type in each
        POST route (``validate_json_request``), after routing, so an unknown path or a GET-only
        route answers the router's 404 / 405 whatever the body's type (asked only on the way to
        a refusal)."""
        return self.posts_to_a_route is None or self.posts_to_a_route(environ)

    @staticmethod
    def _error(environ, start_response, status: int, message: str, kind: str = "BadRequestError"):
        import orjson
        path = environ.get("PATH_INFO", "")
        if anthropic_envelope(path):
            out = orjson.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        elif status == 404:           # Starlette's router: FastAPI's default handler (blueprints.errors.routing_error)
            out = orjson.dumps({"detail": message})
        else:
            out = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})
        phrase = "Not Found" if status == 404 else "Bad Request"
        start_response(f"{status} {phrase}", [("Content-Type", "application/json"),
                                              ("Content-Length", str(len(out)))])
        return [out]


class _Answer(list):
    """A finished (non-streaming) body whose ``close`` gives other connections a turn
    (``gevent.sleep(0)``, see ``app._yield_after_each_response``) without a
    ``ClosingIterator`` around it."""
    __slots__ = ()
    close = None                  # gevent.sleep, set by FrontDoor (gevent is imported once serving)


def _json_type(ctype: str) -> bool:
    # vLLM's validate_json_request: the text before ";", lower-cased, nothing stripped
    # ("application/json ; charset=utf-8" is a 400 there)
    return ctype.split(";", 1)[0].lower() == "application/json"


class FrontDoor:
    """The one layer a common generation request crosses (issue 32): a ``POST`` to a
    generation route with ``Content-Type: application/json`` and a ``Content-Length`` within
    the limit, on a server without ``--log-http`` or ``--enable-server-load-tracking``, is
    answered by ``fast.serve`` (:meth:`blueprints.serving.GenerationFastPath.serve`) straight away; everything else goes to
    ``slow``, the full stack of layers (:class:`RequestGuard`, :class:`BodyDeadline`,
    :class:`ChunkedBodyLimit`, the fast path again, Flask).

    Such a request passes every check of those layers by construction (a JSON POST: the guard
    lets it through; a Content-Length: no chunked limit), except the body's time limit, which
    is kept here: a body that is already in gunicorn's buffer (a small body arrives with its
    headers) is taken from it without a timer or a socket read; any other goes through
    :class:`DeadlineInput` with the deadline :class:`BodyDeadline` gives
    it (the same 408).  A finished body yields the hub after its response, as every response
    does (``app._yield_after_each_response``)."""

    def __init__(self, slow, fast, grace: float, observed=None):
        self.slow = slow
        self.fast = fast
        self.routes = fast.routes
        self.limit = fast.limit
        self.grace = grace
        # the http_* metrics of the requests answered here (server.http_metrics.ObservedHTTP
        # observes the others): each route's series, looked up once
        self.http = observed.http if observed is not None else None
        self.series = {}
        if observed is not None:
            from .http_metrics import EXCLUDED
            for path in self.routes:
                handler = observed.table.exact.get(path, path)
                self.series[path] = None if handler is EXCLUDED else self.http.route("POST", handler)
        try:
            from gunicorn.http.body import Body, LengthReader
            from .request_head import ContinueBody
            Body = (Body, ContinueBody)         # an Expect: 100-continue body already here needs no invitation
        except ImportError:          # not served by gunicorn: every input goes through read()
            Body = LengthReader = None
        self._body_cls, self._length_cls = Body, LengthReader
        import gevent
        _Answer.close = staticmethod(gevent.sleep)
        from .unfinished import done
        self._done, self._rate, self._deadline_input = done, BODY_RATE, DeadlineInput

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST":
            route = self.routes.get(environ.get("PATH_INFO"))
            if route is not None:
                length = environ.get("CONTENT_LENGTH")
                ctype = environ.get("CONTENT_TYPE")
                if (length and ctype and length.isdigit() and (ctype == "application/json" or _json_type(ctype))
                        and int(length) <= self.limit and "HTTP_TRANSFER_ENCODING" not in environ):
                    series = self.series.get(environ["PATH_INFO"])
                    if series is None:
                        body = self.fast.serve(environ, start_response, route, self._read)
                        return _Answer(body) if body.__class__ is list else body
                    start = perf_counter()
                    status, headers, body = self.fast.answer(environ, start_response, route, self._read)
                    if status == GONE:
                        status = 200
                    if body.__class__ is list:          # the whole answer: observed now
                        self.http.observe(series, status, int(length), content_length(headers) or 0,
                                          perf_counter() - start)
                        return _Answer(body)
                    return ObservedStream(body, self.http, series, status, int(length),      # at its end
                                          content_length(headers) or 0, start)
        return self.slow(environ, start_response)

    def _read(self, environ) -> bytes:
        """The whole body (``CONTENT_LENGTH`` bytes, checked by the caller), within the body's
        deadline; marks the request as arrived (:mod:`server.unfinished`)."""
        n = int(environ["CONTENT_LENGTH"])
        inp = environ["wsgi.input"]
        sock = environ.get("gunicorn.socket")
        if sock is None:                      # in-process: the body is in memory
            return inp.read(n) if n else b""
        if not n:
            self._done()
            return b""
        data = self._buffered(inp, n)
        if data is not None:             # the whole request came in one read: its kernel time holds
            stamp = inp.reader.unreader.__dict__.get("stamp")
            if stamp is not None:
                environ[KERNEL_ARRIVAL_KEY] = stamp
            self._done()
            return data
        data = self._deadline_input(inp, monotonic() + self.grace + n / self._rate, sock, environ, n).read(n)
        if len(data) < n:         # the connection ended before the body did: uvicorn hands vLLM's
            raise ConnectionResetError("the body ended early")    # route http.disconnect
        return data

    def _buffered(self, inp, n: int) -> bytes | None:
        """The body from gunicorn's read-ahead buffer when every byte of it is there (what
        ``Body.read(n)`` returns, without its copies), else None.  gunicorn 27.0.1 (pinned):
        ``Body(LengthReader(SocketUnreader))``; the reader is left at the body's end."""
        if self._body_cls is None or inp.__class__ not in self._body_cls or inp.buf.tell():
            return None
        reader = inp.reader
        if reader.__class__ is not self._length_cls or reader.length != n:
            return None
        unreader = reader.unreader
        if unreader.buf.seek(0, 2) < n:
            return None
        data = unreader.buf.getvalue()
        unreader.buf = rest = io.BytesIO()
        if len(data) > n:                     # the next request's bytes, pipelined
            rest.write(data[n:])
            data = data[:n]
        reader.length = 0
        return data
