"""Fewer system calls per response under gunicorn (issue 13, "the stack").

gunicorn's ``Response`` sends the status line and headers in one ``sendall`` and every body
write in another, and a chunked response's terminating ``0\\r\\n\\r\\n`` in a third.  A small
JSON answer therefore costs two writes (two TCP segments) where one would do, and a stream whose
tokens are all due at once costs three.  :func:`install` makes gunicorn hold the header bytes
until the first body write (or the end of the response) and send them in the same ``sendall``.
A stream still gets its headers at once: the SSE generators yield their first frame (or an
empty flush) before any sleep, and an empty write flushes held headers.  A stream whose last
bytes are known before they are written (:func:`end_with_next_write`) sends the chunked end
``0\r\n\r\n`` with them: a stream of tokens all due at once is one ``send``, as a sized body.

It also trims per-request work gunicorn repeats although its inputs never change in a running
worker (the configuration is fixed once the worker starts):

* a body is sent with one ``send`` when the socket takes it all (gevent's ``sendall`` asks the
  kernel for ``SO_SNDBUF`` on every call first); the rest, if any, goes through ``sendall``;
* the ``Date`` header is formatted once per second, not once per response;
* whether a peer address may set ``X-Forwarded-*`` headers (``forwarded_allow_ips``) is decided
  once per address (a bounded memo), not parsed with :mod:`ipaddress` per request;
* ``wsgi.errors`` is one object per worker, not a new one (and a logger lookup) per request;
* ``SCRIPT_NAME`` is read from the process environment once, not per request;
* a setting read from the worker's configuration (``cfg.limit_request_line`` and some twenty
  more per request) is looked up once (:func:`freeze_config`), not through ``Config.__getattr__``
  and ``Setting.get`` each time (about 3% of a small request's CPU).

Call :func:`install` in the process that serves (before or after the fork); it is idempotent
and only touches ``gunicorn.http.wsgi`` (``Response``, ``WSGIErrorsWrapper``),
``gunicorn.util.http_date`` and ``gunicorn.http.message._ip_in_allow_list`` (gunicorn 27.0.1,
pinned in requirements.txt; ``tests/unit/test_gunicorn_tuning.py`` checks each against gunicorn's own).
"""
from __future__ import annotations

import time
from http import HTTPStatus

from blueprints.streaming import send_all_or_stall

ALLOW_LIST_MEMO = 4096        # peer addresses remembered (one entry each; cleared when full)


def send_all(sock, data) -> None:
    """``sock.sendall(data)``: one ``send`` when the kernel takes every byte (the usual case for
    a response that fits the socket buffer); a client that takes no byte of it for
    ``--timeout-keep-alive`` fails it with a ``StalledReader`` (:mod:`blueprints.streaming`)."""
    if data:
        send_all_or_stall(sock, data)


def end_with_next_write(resp) -> bool:
    """Make the next non-empty body write of ``resp`` (a gunicorn ``Response`` patched by
    :func:`install`) carry the chunked body's end (``0\\r\\n\\r\\n``) in the same ``send``, and
    :meth:`close` send nothing more: a stream whose last bytes are known (its generator is
    done) ends in one ``send``, as a sized body does, instead of two (the second, 5 bytes, cost
    as much as a chunk).  Returns whether it will (a chunked response of this module's)."""
    if not resp.chunked or not getattr(type(resp), "_headers_with_body", False) or resp.ended:
        return False
    resp.last_write = True
    return True


SERVER_HEADER = "uvicorn"


def uvicorn_status_line(status: str) -> str:
    """``status`` with its reason phrase as uvicorn writes it (``http.HTTPStatus``'s: ``400 Bad
    Request``, where werkzeug writes ``400 BAD REQUEST``); a status without a phrase of its own
    (not a number, or an unregistered code) as the app wrote it."""
    code = status.partition(" ")[0]
    try:
        return f"{code} {HTTPStatus(int(code)).phrase}"
    except ValueError:
        return status


def install() -> None:
    """Patch gunicorn's Response: headers go out with the first body bytes."""
    from gunicorn import util
    from gunicorn.http import wsgi

    resp = wsgi.Response
    if getattr(resp, "_headers_with_body", False):
        return
    # A vLLM pod is served by uvicorn, whose every answer says ``server: uvicorn`` (vLLM leaves
    # uvicorn's server_header on): gunicorn's Response takes this module global as its version.
    wsgi.SERVER = SERVER_HEADER
    original_write = resp.write

    heads: dict = {}              # (version, status, connection, chunked, server) -> (date, status line and
    #                               gunicorn's default headers): rebuilt when the Date header's second changes

    def send_headers(self):
        if self.headers_sent:
            return
        if self.upgrade:
            tosend = "".join(self.default_headers())
        else:
            key = (self.req.version, self.status, self.should_close(), self.chunked, self.version)
            date = util.http_date()
            got = heads.get(key)
            if got is None or got[0] != date:
                if len(heads) >= HEADER_KEYS_MEMO:
                    heads.clear()
                got = heads[key] = (date, "".join(self.default_headers()))
            tosend = got[1]
        self._held_headers = (tosend + "".join(["%s: %s\r\n" % (k, v) for k, v in self.headers])
                              + "\r\n").encode("latin-1")
        self.headers_sent = True

    original_start = resp.start_response
    statuses: dict = {}           # status line -> its code, once gunicorn's start_response accepted it
    names: dict = {}              # response header name -> True for Content-Length, False for another
    #                               end-to-end name, once gunicorn's process_headers accepted it
    value_ok = wsgi.HEADER_VALUE_RE.fullmatch

    spelled: dict = {}            # status line -> uvicorn's spelling of it

    def spell(status):
        """:func:`uvicorn_status_line`, remembered."""
        if status.__class__ is not str:
            return status
        line = uvicorn_status_line(status)
        if len(spelled) >= HEADER_KEYS_MEMO:
            spelled.clear()
        spelled[status] = line
        return line

    def start_response(self, status, headers, exc_info=None):
        """uvicorn's spelling of the status line (:func:`spell`), and gunicorn's ``start_response`` with the status line's and each header name's checks
        remembered: a status and a name gunicorn accepted once are accepted again without its
        patterns; every value is still checked, and anything unusual (``exc_info``, a second
        call, HEAD, a bodiless status, a hop-by-hop or new name, a value gunicorn refuses) goes
        through gunicorn's own code, which answers it as before."""
        status = spelled.get(status) or spell(status)
        code = statuses.get(status) if status.__class__ is str else None
        if (code is None or exc_info or self.status is not None or code < 200 or code in (204, 304)
                or self.req.method == "HEAD"):
            write = original_start(self, status, headers, exc_info)
            if code is None and status.__class__ is str and self.status_code is not None:
                if len(statuses) >= HEADER_KEYS_MEMO:
                    statuses.clear()
                statuses[status] = self.status_code
            return write
        self.status = status
        self.status_code = code
        out = self.headers
        for pair in headers:
            name, value = pair
            length = names.get(name) if name.__class__ is str else None
            if length is None or value.__class__ is not str or not value_ok(value):
                self.process_headers((pair,))       # gunicorn's checks: raises, or appends it
                if name.__class__ is str and not wsgi.util.is_hoppish(name):
                    if len(names) >= HEADER_KEYS_MEMO:
                        names.clear()
                    names[name] = name.lower() == "content-length"
                continue
            value = value.strip(" \t")
            if length:
                self.response_length = int(value)
            out.append((name, value))
        self._omits_body = False
        self.chunked = self.is_chunked()
        return self.write

    def _flush_headers(self, data: bytes = b"") -> None:
        held = self.__dict__.pop("_held_headers", None)
        if held is not None:
            send_all(self.sock, held + data)
        elif data:
            send_all(self.sock, data)

    def _emit_body(self, data):
        held = self.__dict__.pop("_held_headers", b"")     # framed with the body: one copy of it
        if self.chunked:
            if self.last_write:           # the body's end rides with its last bytes (end_with_next_write)
                self.last_write, self.ended = False, True
                data = b"%s%X\r\n%s\r\n0\r\n\r\n" % (held, len(data), data)
            else:
                data = b"%s%X\r\n%s\r\n" % (held, len(data), data)
        elif held:
            data = held + data
        send_all(self.sock, data)

    def write(self, arg):
        if self.ended:
            return                        # nothing may follow a chunked body's end
        original_write(self, arg)
        if "_held_headers" in self.__dict__:
            _flush_headers(self)          # an empty write (a flush) or a body-less response

    def close(self):
        if not self.headers_sent:
            self.send_headers()
        _flush_headers(self, b"0\r\n\r\n" if self.chunked and not self.ended else b"")

    resp.sendfile = lambda self, respiter: False     # file bodies go through write() too
    resp.send_headers = send_headers
    start_response.original = original_start
    resp.start_response = start_response
    resp._emit_body = _emit_body
    resp.write = write
    resp.close = close
    resp.last_write = False               # the next body write carries the chunked end (end_with_next_write)
    resp.ended = False                    # the chunked end is out (or handed to the socket by the hub)
    resp._headers_with_body = True
    _install_per_request_savings()


def _install_per_request_savings() -> None:
    from gunicorn import util
    from gunicorn.http import message, wsgi

    original_date = util.http_date
    last = [0, ""]

    def http_date(timestamp=None):
        if timestamp is not None:
            return original_date(timestamp)
        now = int(time.time())
        if now != last[0]:
            last[1] = original_date(now)
            last[0] = now
        return last[1]
    util.http_date = http_date

    original_allow = message._ip_in_allow_list
    memo: dict = {}

    def ip_in_allow_list(ip_str, allow_list, networks):
        ok = memo.get(ip_str)
        if ok is None:
            if len(memo) >= ALLOW_LIST_MEMO:
                memo.clear()
            ok = memo[ip_str] = original_allow(ip_str, allow_list, networks)
        return ok
    message._ip_in_allow_list = ip_in_allow_list

    if not isinstance(wsgi.os, _FrozenEnvironOs):
        wsgi.os = _FrozenEnvironOs()

    wrapper_cls = wsgi.WSGIErrorsWrapper
    wrappers: dict = {}           # id(cfg) -> (cfg, wrapper); a worker has one cfg

    def errors_wrapper(cfg):
        got = wrappers.get(id(cfg))
        if got is None or got[0] is not cfg:
            got = wrappers[id(cfg)] = (cfg, wrapper_cls(cfg))
        return got[1]
    wsgi.WSGIErrorsWrapper = errors_wrapper
    _install_lean_create(wsgi)


HEADER_KEYS_MEMO = 1024       # request header names remembered with their environ key (cleared when full)


def _install_lean_create(wsgi) -> None:
    """gunicorn's ``wsgi.create`` (the request's ``environ`` and ``Response``) with what never
    changes in a running worker done once: the base environ (a copy of one dict per
    configuration), ``SERVER_PROTOCOL`` and ``SERVER_NAME`` / ``SERVER_PORT`` per version and
    listener, the ``HTTP_*`` key of each header name (a bounded memo), and ``PATH_INFO``
    unquoted only when it has a ``%`` or a non-ASCII character (otherwise unquoting returns it
    unchanged).  The same keys, values and order as gunicorn's (``tests/unit/test_gunicorn_tuning.py``
    compares them); a request that ``create`` treats specially (``Expect: 100-continue`` left to
    gunicorn, which LeanRequest's sockets never do: it answers it when the body is first read;
    the PROXY protocol, HTTP/2, ``SCRIPT_NAME``, a unix socket listener, a custom response class)
    goes through gunicorn's own."""
    original = wsgi.create
    if getattr(original, "_lean", False):
        return
    bases: dict = {}              # id(cfg) -> (cfg, base environ)
    servers: dict = {}            # listener name -> (SERVER_NAME, SERVER_PORT) or None
    keys: dict = {}               # header name -> environ key
    protocols = {(1, 1): "HTTP/1.1", (1, 0): "HTTP/1.0"}
    response_cls = wsgi.Response
    hints = wsgi._make_early_hints_callback
    unquote = wsgi.util.unquote_to_wsgi_str

    def create(req, sock, client, server, cfg, response_class=None, response_args=()):
        protocol = protocols.get(req.version)
        if (response_class is not None or response_args or protocol is None or req._expected_100_continue
                or req.proxy_protocol_info or hasattr(req, "priority_weight") or wsgi.os.environ.get("SCRIPT_NAME")
                or client.__class__ is not tuple or (server.__class__ is not str and server.__class__ is not tuple)):
            return original(req, sock, client, server, cfg, response_class, response_args)
        where = servers.get(server)
        if where is None:             # the listener's getsockname(): an address tuple, or a str
            parts = server.split(":") if server.__class__ is str else server
            if len(parts) == 1:       # a unix socket: the Host header decides
                return original(req, sock, client, server, cfg, response_class, response_args)
            if len(servers) >= HEADER_KEYS_MEMO:
                servers.clear()
            where = servers[server] = (parts[0], str(parts[1]))
        base = bases.get(id(cfg))
        if base is None or base[0] is not cfg:
            base = bases[id(cfg)] = (cfg, wsgi.base_environ(cfg))
        resp = response_cls(req, sock, cfg)
        environ = base[1].copy()
        environ["wsgi.input"] = req.body
        environ["gunicorn.socket"] = sock
        environ["REQUEST_METHOD"] = req.method
        environ["QUERY_STRING"] = req.query
        environ["RAW_URI"] = req.uri
        environ["SERVER_PROTOCOL"] = protocol
        repeated = None
        for name, value in req.headers:
            if name == "SCRIPT_NAME":     # gunicorn takes SCRIPT_NAME from such a header
                return original(req, sock, client, server, cfg, response_class, response_args)
            if name == "CONTENT-TYPE":
                environ["CONTENT_TYPE"] = value
                continue
            if name == "CONTENT-LENGTH":
                environ["CONTENT_LENGTH"] = value
                continue
            key = keys.get(name)
            if key is None:
                if len(keys) >= HEADER_KEYS_MEMO:
                    keys.clear()
                key = keys[name] = "HTTP_" + name.replace("-", "_")
            if key in environ:
                if repeated is None:
                    repeated = {}
                repeated.setdefault(key, [environ[key]]).append(value)
            else:
                environ[key] = value
        if repeated is not None:
            for key, values in repeated.items():
                environ[key] = ",".join(values)
        environ["wsgi.url_scheme"] = req.scheme
        environ["REMOTE_ADDR"] = client[0]
        environ["REMOTE_PORT"] = str(client[1])
        environ["SERVER_NAME"], environ["SERVER_PORT"] = where
        path = req.path
        environ["PATH_INFO"] = unquote(path) if "%" in path or not path.isascii() else path
        environ["SCRIPT_NAME"] = ""
        environ["wsgi.early_hints"] = hints(req, sock, resp)
        return resp, environ

    create._lean = True
    create.original = original
    wsgi.create = create


class _FrozenEnvironOs:
    """:mod:`os` as ``gunicorn.http.wsgi`` sees it, with ``environ`` read once: its ``create``
    reads ``os.environ.get("SCRIPT_NAME", "")`` for every request (the key encoded and looked
    up in the process environment: ~1.5% of a small request's CPU).  A running worker's
    environment does not change; the value is the one at :func:`install`."""

    def __init__(self):
        import os
        self._os = os
        name = os.environ.get("SCRIPT_NAME")
        self.environ = {} if name is None else {"SCRIPT_NAME": name}

    def __getattr__(self, name):
        return getattr(self._os, name)


def no_pre_request(worker, req) -> None:
    """gunicorn's ``pre_request`` hook when its one line (``"POST /path"`` at debug level) would
    not be logged: the default hook's ``log.debug`` call costs ~0.5% of a small request."""


def freeze_config(cfg) -> None:
    """Make ``cfg`` (a gunicorn ``Config``) remember each setting it is asked for in the
    instance, so that later reads are plain attribute reads.  ``cfg.set`` forgets the remembered
    value, so a setting changed later (``server.serve.attach_to_gunicorn`` does, at load) is read
    afresh.  Idempotent."""
    cls = type(cfg)
    if getattr(cls, "_frozen_reads", False):
        return

    class FrozenConfig(cls):
        _frozen_reads = True

        def __getattr__(self, name):
            value = cls.__getattr__(self, name)
            object.__setattr__(self, name, value)      # Config.__setattr__ refuses plain sets
            return value

        def set(self, name, value):
            cls.set(self, name, value)
            self.__dict__.pop(name, None)

    cfg.__class__ = FrozenConfig
