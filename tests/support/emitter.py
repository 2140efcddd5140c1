"""gunicorn's own Response over a gevent socket pair, as the hub emitter tests drive it (no
server): the SSE emitter's and the token schedule's unit tests."""
from __future__ import annotations

import socket
from types import SimpleNamespace

import gevent.socket
from gunicorn.http import wsgi

from server import gunicorn_tuning


def gunicorn_response(sock, version=(1, 1)):
    """gunicorn's Response for a POST on ``sock``, headers sent (as when a stream first waits)."""
    gunicorn_tuning.install()
    req = SimpleNamespace(version=version, method="POST", should_close=lambda: False)
    cfg = SimpleNamespace(is_ssl=False, protocol="http", header_map="drop", forwarded_allow_ips=[],
                          secure_scheme_headers={})
    resp = wsgi.Response(req, sock, cfg)
    write = resp.start_response("200 OK", [("Content-Type", "text/event-stream")])
    write(b"")                                   # the flush before the first wait
    return resp, write


def stream_pair(version=(1, 1), small_buffers: bool = False):
    """``(server socket, client socket, gunicorn Response)``: a gevent socket pair whose server
    side has sent a stream's headers and whose client side has read them.  ``small_buffers``:
    4 KB socket buffers, so that a large write fills them at once."""
    server, client = gevent.socket.socketpair()
    if small_buffers:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    resp, _ = gunicorn_response(server, version)
    client.recv(65536)                           # the headers
    return server, client, resp


def read_all(sock, until: bytes) -> bytes:
    out = b""
    while not out.endswith(until):
        data = sock.recv(65536)
        if not data:
            break
        out += data
    return out
