"""WebSocket routes on gunicorn's connections: vLLM 0.34 serves ``/v1/realtime`` as a WebSocket
(``entrypoints/speech_to_text/realtime/api_router.py``), uvicorn speaking the protocol.  Here the
protocol is wsproto's (sans-IO) on the raw socket gunicorn hands the application
(``environ["gunicorn.socket"]``), after gunicorn has parsed the upgrade request.

:class:`WebSocketRoutes` is a WSGI layer inside the API-key check (vLLM's
``AuthenticationMiddleware`` guards ``websocket`` scopes too: a 401 before the upgrade) and
outside every other layer, which are HTTP's business: the http_* metrics (the instrumentator
passes a ``websocket`` scope by), ``--log-http``, server-load tracking, the body deadline, the
front door.  A GET to a WebSocket route without ``Upgrade: websocket`` goes on to Flask, where no
route has the path: FastAPI's 404 ``{"detail": "Not Found"}``, as Starlette's router answers an
HTTP request whose path only a ``WebSocketRoute`` matches.  After the session the layer raises
``StopIteration``: gunicorn's worker (``base_async.handle_request``) re-raises it and its
``handle`` closes the connection without writing an HTTP response or an access line on the
upgraded socket (flask-sock does the same under gunicorn).

:class:`WebSocket`, one connection:

* no extension is accepted (no permessage-deflate: nothing is decompressed);
* a message is at most :data:`MAX_MESSAGE_BYTES` (uvicorn's ``ws_max_size``, 16 MiB): a longer
  one is closed with 1009 while it arrives, never buffered whole; and at most
  :data:`MAX_FRAGMENTS` frames (the simulator's bound: 16 MiB of one-byte frames were 16 M events
  to handle; closed with 1008);
* the socket is read only when the handler asks for the next message
  (:meth:`WebSocket.receive`), 64 KiB at a time: a client that sends faster than the handler
  works waits in TCP's flow control, not in this process's memory;
* pings are answered, a close frame is answered and ends the session, a reset or EOF ends it
  (1006), a frame wsproto cannot parse is closed with its code (1002, 1007);
* a client silent for :data:`PING_INTERVAL` seconds is pinged, and closed with 1011 if it stays
  silent :data:`PING_TIMEOUT` more (uvicorn's websockets keep-alive, 20 s and 20 s);
* writes take turns (a lock: the session's generation and its reader both write) and a write
  that waits :data:`blueprints.streaming.WRITE_STALL_S` without the client taking a byte ends
  the connection (a reader that stopped is gone);
* at shutdown every open session is ended at once with 1012 (uvicorn's ``shutdown`` of its
  WebSocket protocols), see :func:`close_all`.
"""
from __future__ import annotations

import io
import logging
import socket
import time

import gevent
from gevent import GreenletExit, getcurrent
from gevent.lock import Semaphore

import blueprints.streaming as streaming
from blueprints.streaming import WebSocketClosed as Disconnected
from generation.lanes import hub_turn

from .lifecycle import ServerShuttingDown

log = logging.getLogger("vllm_sim")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024     # uvicorn's --ws-max-size default (vLLM sets none)
MAX_FRAGMENTS = 65536                    # frames a message may be split into (the simulator's: 1008 past it)
PING_INTERVAL = 20.0                     # uvicorn's --ws-ping-interval default
PING_TIMEOUT = 20.0                      # uvicorn's --ws-ping-timeout default
RECV_BYTES = 65536
TURN_SLICE = 0.002                       # s a session may hold the hub between two of its turns
LINGER_S = 1.0                           # after our close frame: reading what the client still sends

OPEN: set = set()          # the greenlets of the sessions open in this worker (close_all)
CLOSING = [False]          # the worker is shutting down: a new session is closed at once


class ServerClosing(GreenletExit):
    """Thrown into a session's greenlet when the server shuts down (:func:`close_all`)."""


def close_all() -> int:
    """End every open session now (the server is shutting down): each is closed with 1012
    (Service Restart) by its own greenlet, as is any opened after; returns how many."""
    CLOSING[0] = True
    sessions = [g for g in OPEN if not g.dead]
    for g in sessions:
        g.kill(ServerClosing, block=False)
    return len(sessions)


def _tokens(value: str) -> list:
    return [t.strip().lower() for t in value.split(",")]


def valid_key(key: str) -> bool:
    """RFC 6455 4.2.1: ``Sec-WebSocket-Key`` is 16 bytes in base64 (websockets' ``check_request``)."""
    import base64
    import binascii
    try:
        return len(base64.b64decode(key.encode("ascii"), validate=True)) == 16
    except (binascii.Error, UnicodeError):
        return False


def is_upgrade(environ: dict) -> bool:
    """Whether the request asks for a WebSocket (``Connection: upgrade`` and ``Upgrade:
    websocket``, as uvicorn decides to hand it to its WebSocket protocol)."""
    return ("upgrade" in _tokens(environ.get("HTTP_CONNECTION", ""))
            and environ.get("HTTP_UPGRADE", "").strip().lower() == "websocket")


def _headers(environ: dict) -> list:
    """The request's headers as wsproto takes them (gunicorn has already joined repeats)."""
    out = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            out.append((key[5:].replace("_", "-").lower().encode("latin-1"), value.encode("latin-1")))
    return out


class WebSocket:
    """One server-side WebSocket connection on ``sock`` (see the module)."""

    def __init__(self, sock, environ: dict):
        from wsproto import ConnectionType, WSConnection
        self.sock = sock
        self.conn = WSConnection(ConnectionType.SERVER)
        self.lock = Semaphore()
        self.broken = False         # a write was cut off, or the socket failed: no more frames
        self.pinged_at = None
        self.turned_at = time.monotonic()   # when the hub last had a turn (pace)
        target = environ.get("RAW_URI") or environ.get("PATH_INFO") or "/"
        # raises wsproto's RemoteProtocolError (its event_hint the rejection) for a bad handshake
        self.conn.initiate_upgrade_connection(_headers(environ), target)
        self.request = next(iter(self.conn.events()))
        # bytes the client sent behind its request (read ahead by gunicorn's parser)
        reader = getattr(environ.get("wsgi.input"), "reader", None)
        unreader = getattr(reader, "unreader", None)
        self.pending = unreader.take_buffered() if hasattr(unreader, "take_buffered") else b""

    # -- writing ---------------------------------------------------------------------------
    def _send(self, event) -> None:
        from wsproto.utilities import LocalProtocolError
        with self.lock:
            if self.broken:
                raise Disconnected(1006)
            try:
                data = self.conn.send(event)
            except LocalProtocolError:          # closing or closed: nothing more goes out
                raise Disconnected(1006) from None
            timer = gevent.Timeout(streaming.WRITE_STALL_S)
            timer.start()
            try:
                self.sock.sendall(data)
            except BaseException as e:          # a stall, a reset, or a kill mid-frame
                self.broken = True
                self._shut()
                if isinstance(e, (OSError, gevent.Timeout)):
                    raise Disconnected(1006) from None
                raise
            finally:
                timer.close()

    def accept(self) -> None:
        """Send the 101 (no subprotocol, no extension)."""
        from wsproto.events import AcceptConnection
        self._send(AcceptConnection(extensions=[]))
        if self.pending:
            self.conn.receive_data(self.pending)
            self.pending = b""

    def send_text(self, text: str) -> None:
        from wsproto.events import TextMessage
        self._send(TextMessage(data=text))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame (when the connection is still open) and end the connection: the
        write side is shut, and what the client still sends is read and dropped for up to
        :data:`LINGER_S` (closing with unread bytes would reset the connection, and the client
        could lose the close frame)."""
        from wsproto.connection import ConnectionState
        from wsproto.events import CloseConnection
        if not self.broken and self.conn.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            try:
                self._send(CloseConnection(code=code, reason=reason or None))
            except Disconnected:
                pass
        self._linger()

    def _linger(self) -> None:
        if self.broken:
            return
        self.broken = True
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + LINGER_S
        with gevent.Timeout(LINGER_S, False):
            while time.monotonic() < deadline:
                try:
                    if not self.sock.recv(RECV_BYTES):
                        break
                except OSError:
                    break
                self.pace()                     # a client still sending is always readable

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- reading ---------------------------------------------------------------------------
    def receive(self):
        """The next message: ``str`` (text) or ``bytes`` (binary).  Answers pings and close
        frames on the way; raises :class:`Disconnected` when the connection ends (after
        closing it with 1009 for a message over :data:`MAX_MESSAGE_BYTES`, with wsproto's code
        for a frame it cannot parse)."""
        from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage
        parts = None                # io.StringIO or bytearray: a message of tiny fragments is no list of them
        size = frames = 0
        while True:
            self.pace()
            for event in self.conn.events():
                self.pace()                     # (64 KiB of one-byte frames: 9,000 events)
                cls = event.__class__
                if cls is TextMessage or cls is BytesMessage:
                    data = event.data
                    size += len(data.encode("utf-8", "surrogatepass")) if cls is TextMessage else len(data)
                    if size > MAX_MESSAGE_BYTES:
                        self.close(1009, "Message too big")
                        raise Disconnected(1009, "Message too big")
                    if event.message_finished and parts is None:
                        return data if cls is TextMessage else bytes(data)   # the common case: one piece
                    if parts is None:
                        parts = io.StringIO() if cls is TextMessage else bytearray()
                    frames += event.frame_finished
                    if frames > MAX_FRAGMENTS:
                        self.close(1008, "Too many fragments")
                        raise Disconnected(1008, "Too many fragments")
                    if cls is TextMessage:
                        parts.write(data)
                    else:
                        parts += data
                    if event.message_finished:
                        return parts.getvalue() if cls is TextMessage else bytes(parts)
                elif cls is Ping:
                    self._send(event.response())
                elif cls is Pong:
                    self.pinged_at = None
                elif cls is CloseConnection:
                    # the client's close (answered with its code), wsproto's for a bad frame
                    # (1002 / 1007: ours to send), or the end of the stream (1006: nothing to send)
                    if event.code != 1006:
                        self.close(event.code)
                    raise Disconnected(event.code, event.reason or "")
            self.conn.receive_data(self._recv() or None)

    def pace(self) -> None:
        """A turn for the hub when this connection has held it :data:`TURN_SLICE`: a client
        that sends fast is always readable (a read never waits), and 64 KiB of small messages
        are thousands of events handled back to back."""
        now = time.monotonic()
        if now - self.turned_at >= TURN_SLICE:
            hub_turn()
            self.turned_at = time.monotonic()

    def _recv(self) -> bytes:
        """The next bytes from the socket (b"" at its end), pinging a silent client."""
        while True:
            if self.broken:
                return b""
            wait = PING_INTERVAL if self.pinged_at is None else self.pinged_at + PING_TIMEOUT - time.monotonic()
            timer = gevent.Timeout(max(wait, 0.0))
            timer.start()
            try:
                data = self.sock.recv(RECV_BYTES)
            except gevent.Timeout as t:
                if t is not timer:
                    raise
                if self.pinged_at is not None:
                    self.close(1011, "keepalive ping timeout")
                    raise Disconnected(1011, "keepalive ping timeout") from None
                from wsproto.events import Ping
                self.pinged_at = time.monotonic()
                self._send(Ping(payload=b"vllm-sim"))
                continue
            except OSError:
                self.broken = True
                return b""
            finally:
                timer.close()
            self.pinged_at = None          # the client is there
            return data


class WebSocketRoutes:
    """The WSGI layer that serves WebSocket routes (see the module): ``routes`` maps a path to
    ``handler(ws, environ)``, which returns when the session ends; ``metrics``: an object with
    ``opened()`` and ``closed(seconds)`` (vLLM's ``WebSocketMetricsMiddleware``), or None."""

    def __init__(self, wsgi_app, routes: dict, metrics=None):
        self.wsgi_app = wsgi_app
        self.routes = routes
        self.metrics = metrics

    def __call__(self, environ, start_response):
        handler = self.routes.get(environ.get("PATH_INFO"))
        sock = environ.get("gunicorn.socket")
        if handler is None or sock is None or environ.get("REQUEST_METHOD") != "GET" or not is_upgrade(environ):
            return self.wsgi_app(environ, start_response)      # HTTP: the router's 404 for such a path
        from wsproto.utilities import RemoteProtocolError
        try:
            if environ.get("CONTENT_LENGTH") not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in environ:
                # its bytes would be read as the connection's first frames
                raise RemoteProtocolError("A handshake request has no body")
            key = environ.get("HTTP_SEC_WEBSOCKET_KEY")
            if key is not None and not valid_key(key):
                # wsproto takes any key; uvicorn's websockets refuses one that is not 16 bytes of
                # base64 (two headers arrive here joined by a comma, which fails the same way)
                raise RemoteProtocolError(f"invalid Sec-WebSocket-Key header: {key}")
            ws = WebSocket(sock, environ)
        except RemoteProtocolError as e:       # not a handshake wsproto accepts (a key, the version)
            return self._refuse(e, start_response)
        except UnicodeError:                   # wsproto reads the extension / subprotocol offers as ASCII
            return self._refuse(RemoteProtocolError("A handshake header is not ASCII"), start_response)
        from .unfinished import done
        done()                                 # the request is in: in flight, never evicted
        try:
            ws.accept()
        except Disconnected:
            raise StopIteration() from None
        log.info('%s - "WebSocket %s" [accepted]', environ.get("REMOTE_ADDR"), environ.get("PATH_INFO"))
        metrics = self.metrics
        started = time.monotonic()
        if metrics is not None:
            metrics.opened()
        g = getcurrent()
        OPEN.add(g)
        code = 1000
        try:
            if CLOSING[0]:                     # an upgrade on a kept-alive connection while draining
                raise ServerClosing()
            handler(ws, environ)
        except (ServerClosing, ServerShuttingDown):
            code = 1012                        # uvicorn's close at shutdown (Service Restart)
        except Disconnected:
            pass
        except Exception:                      # noqa: BLE001 - the session's own bug: logged, closed
            log.exception("WebSocket session failed")
            code = 1011
        finally:
            OPEN.discard(g)
            if metrics is not None:
                metrics.closed(time.monotonic() - started)
        try:
            ws.close(code)
        except ServerClosing:
            pass
        log.debug("WebSocket %s closed (%d)", environ.get("PATH_INFO"), code)
        raise StopIteration()                 # gunicorn closes the connection, writes nothing

    @staticmethod
    def _refuse(err, start_response):
        hint = getattr(err, "event_hint", None)
        status = getattr(hint, "status_code", 400) or 400
        body = f"Failed to open a WebSocket connection: {err}.\n".encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        for name, value in getattr(hint, "headers", None) or ():
            headers.append((name.decode("latin-1") if isinstance(name, bytes) else name,
                            value.decode("latin-1") if isinstance(value, bytes) else value))
        phrase = {400: "Bad Request", 426: "Upgrade Required"}.get(status, "Bad Request")
        start_response(f"{status} {phrase}", headers)
        return [body]
