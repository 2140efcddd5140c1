"""server.websocket.WebSocket on a socket pair (gevent's), a wsproto client on the other end:
keep-alive pings (a silent client that does not answer is closed with 1011), bytes the client
sent behind its handshake, a close frame answered, a frame the server cannot parse (1002), and
the write-stall bound (a client that stops reading)."""
from __future__ import annotations

import gevent
import pytest
from gevent import socket as gsocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request

import blueprints.streaming as streaming
import server.websocket as wsm


class _Unreader:
    def __init__(self, data: bytes):
        self.data = data

    def take_buffered(self):
        data, self.data = self.data, b""
        return data


class _Input:
    def __init__(self, data: bytes):
        self.reader = type("R", (), {"unreader": _Unreader(data)})()


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch):
    monkeypatch.setattr(wsm, "LINGER_S", 0.05)      # after its close frame the server reads on this long


def pair(ahead: bytes = b"", client_first=None):
    """``(server WebSocket, client socket, client WSConnection)``, the 101 read by the client."""
    a, b = gsocket.socketpair()
    cl = WSConnection(ConnectionType.CLIENT)
    head = cl.send(Request(host="x", target="/v1/realtime"))
    environ = {"PATH_INFO": "/v1/realtime", "wsgi.input": _Input(ahead)}
    for line in head.decode().split("\r\n")[1:]:
        if ": " in line:
            k, v = line.split(": ", 1)
            environ["HTTP_" + k.upper().replace("-", "_")] = v
    ws = wsm.WebSocket(a, environ)
    ws.accept()
    cl.receive_data(b.recv(65536))
    assert isinstance(next(cl.events()), AcceptConnection)
    return ws, b, cl


def client_events(sock, cl, until=CloseConnection, timeout=2.0):
    out = []
    with gevent.Timeout(timeout):
        while True:
            data = sock.recv(65536)
            cl.receive_data(data or None)
            for ev in cl.events():
                out.append(ev)
                if isinstance(ev, until):
                    return out
            if not data:
                return out


def test_a_silent_client_is_pinged_then_closed_with_1011(monkeypatch):
    monkeypatch.setattr(wsm, "PING_INTERVAL", 0.05)
    monkeypatch.setattr(wsm, "PING_TIMEOUT", 0.05)
    ws, sock, cl = pair()
    g = gevent.spawn(ws.receive)
    events = client_events(sock, cl)          # the client never answers the ping
    assert isinstance(events[0], Ping) and isinstance(events[-1], CloseConnection) and events[-1].code == 1011
    with pytest.raises(streaming.WebSocketClosed) as e:
        g.get(timeout=2)
    assert e.value.code == 1011


def test_answered_pings_keep_the_connection(monkeypatch):
    monkeypatch.setattr(wsm, "PING_INTERVAL", 0.05)
    monkeypatch.setattr(wsm, "PING_TIMEOUT", 0.1)
    ws, sock, cl = pair()
    g = gevent.spawn(ws.receive)
    pings = 0
    with gevent.Timeout(0.4, False):            # three times the timeout, every ping answered
        while True:
            for ev in client_events(sock, cl, until=Ping):
                assert isinstance(ev, Ping)
                sock.sendall(cl.send(ev.response()))
                pings += 1
    assert pings >= 3 and not g.dead
    sock.sendall(cl.send(Message(data="hello")))
    assert g.get(timeout=2) == "hello"


def test_bytes_sent_behind_the_handshake_are_the_first_message():
    frame = b"\x81\x85\x00\x00\x00\x00early"       # FIN, text, masked (a zero key), 5 bytes
    ws, sock, cl = pair(ahead=frame)
    assert ws.receive() == "early"


def test_a_close_frame_is_answered_and_a_bad_frame_closed_with_1002():
    ws, sock, cl = pair()
    g = gevent.spawn(ws.receive)
    sock.sendall(cl.send(CloseConnection(code=1000)))
    assert client_events(sock, cl)[-1].code == 1000
    with pytest.raises(streaming.WebSocketClosed) as e:
        g.get(timeout=2)
    assert e.value.code == 1000
    ws, sock, cl = pair()
    g = gevent.spawn(ws.receive)
    sock.sendall(b"\x81\x05hello")                     # unmasked: a client's frames must be masked
    assert client_events(sock, cl)[-1].code == 1002
    with pytest.raises(streaming.WebSocketClosed):
        g.get(timeout=2)


def test_a_client_that_stops_reading_ends_the_connection(monkeypatch):
    monkeypatch.setattr(streaming, "WRITE_STALL_S", 0.2)
    ws, sock, cl = pair()

    def flood():
        while True:
            ws.send_text("y" * 1000)
    g = gevent.spawn(flood)
    with pytest.raises(streaming.WebSocketClosed):
        g.get(timeout=5)
    assert ws.broken


def test_a_message_of_many_small_frames_is_read_and_too_many_are_closed_with_1008(monkeypatch):
    monkeypatch.setattr(wsm, "MAX_FRAGMENTS", 100)
    ws, sock, cl = pair()
    g = gevent.spawn(ws.receive)
    sock.sendall(b"".join(cl.send(Message(data="ab", message_finished=k == 99)) for k in range(100)))
    assert g.get(timeout=2) == "ab" * 100
    g = gevent.spawn(ws.receive)
    sock.sendall(b"".join(cl.send(Message(data=b"\x00", message_finished=False)) for k in range(101)))
    assert client_events(sock, cl)[-1].code == 1008
    with pytest.raises(streaming.WebSocketClosed) as e:
        g.get(timeout=2)
    assert e.value.code == 1008
