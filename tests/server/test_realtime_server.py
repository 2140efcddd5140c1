"""vLLM 0.34's realtime transcription WebSocket (``/v1/realtime``: blueprints.realtime on
server.websocket) on a real server, with wsproto as the client over a plain socket: the
protocol's events and errors, the engine request behind a transcription (deltas as its tokens
come, the done's usage, a client that leaves aborting it), the WebSocket limits (1009 over
16 MiB, pings, close frames), the three vllm:websocket_* families, the API key, an HTTP GET of
the route, and the close at shutdown (1012)."""
from __future__ import annotations

import base64
import json
import signal
import socket
import time

import httpx
import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, CloseConnection, Message, Ping, Pong, RejectConnection, Request,
                            TextMessage)

from support import metric

KEY = "rt-key"
AUTH = [(b"authorization", f"Bearer {KEY}".encode())]
FLAGS = ("--time-to-first-token", "20ms", "--inter-token-latency", "10ms", "--api-key", KEY)
SECOND = base64.b64encode(bytes(range(256)) * 125).decode()      # 16,000 samples: 1 s of PCM16 at 16 kHz
MiB = 1 << 20


OPENED: list = []


@pytest.fixture(autouse=True)
def _closed_after():
    """Every client's socket closed when its test ends, passed or failed (an open one is a
    session still active for the next test)."""
    yield
    while OPENED:
        OPENED.pop().close()


class Client:
    """A WebSocket client: wsproto over a blocking socket."""

    def __init__(self, base: str, path: str = "/v1/realtime", headers=AUTH):
        host, port = base.rsplit("/", 1)[-1].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        OPENED.append(self.sock)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target=path, extra_headers=list(headers))))
        self.answer = self._event()
        self.close_code = None
        self.pongs = 0

    def _event(self):
        while True:
            for ev in self.ws.events():
                if isinstance(ev, Ping):
                    self.sock.sendall(self.ws.send(ev.response()))
                    continue
                if isinstance(ev, Pong):
                    self.pongs += 1
                    continue
                return ev
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)

    def recv(self):
        """The next event (a dict), or None when the server closed (``close_code``)."""
        parts = []
        while True:
            ev = self._event()
            if isinstance(ev, CloseConnection):
                self.close_code = ev.code
                return None
            if isinstance(ev, TextMessage):
                parts.append(ev.data)
                if ev.message_finished:
                    return json.loads("".join(parts))

    def send(self, event) -> None:
        data = event if isinstance(event, (str, bytes)) else json.dumps(event)
        self.sock.sendall(self.ws.send(Message(data=data)))

    def transcribe(self, audio: str = SECOND, seconds: int = 1) -> tuple[list, dict]:
        for _ in range(seconds):
            self.send({"type": "input_audio_buffer.append", "audio": audio})
        self.send({"type": "input_audio_buffer.commit"})
        self.send({"type": "input_audio_buffer.commit", "final": True})
        deltas = []
        while True:
            ev = self.recv()
            if ev["type"] != "transcription.delta":
                return deltas, ev
            deltas.append(ev["delta"])

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def base(sim_server):
    return sim_server(*FLAGS)


def session(base) -> Client:
    c = Client(base)
    assert isinstance(c.answer, AcceptConnection)
    created = c.recv()
    assert created["type"] == "session.created" and created["id"].startswith("sess-")
    assert abs(created["created"] - time.time()) < 5 and list(created) == ["type", "id", "created"]
    c.send({"type": "session.update", "model": "test-model"})
    return c


def running(base) -> float:
    return metric(_scrape(base), "vllm:num_requests_running")


def _scrape(base):
    r = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def wait_until(check, timeout=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_a_transcription_streams_deltas_then_done_with_usage(base):
    c = session(base)
    deltas, done = c.transcribe(seconds=2)
    assert done["type"] == "transcription.done" and list(done) == ["type", "text", "usage"]
    assert deltas and "".join(deltas) == done["text"]
    usage = done["usage"]
    # Whisper's decoder prompt (4 tokens) + 2 s of audio (100 encoder tokens a second); a delta has
    # the tokens due at once (one, unless the machine is slow), at most the segment's 64
    made = usage["completion_tokens"]
    assert usage == {"prompt_tokens": 204, "total_tokens": 204 + made, "completion_tokens": made,
                     "completion_tokens_details": None}
    assert len(deltas) <= made <= 64
    # the next utterance on the same session: the same audio, the same (greedy) text and usage
    again, done2 = c.transcribe(seconds=2)
    assert done2 == done and "".join(again) == done["text"]
    other, done3 = c.transcribe(audio=base64.b64encode(b"\x07\x00" * 16000).decode(), seconds=1)
    assert done3["usage"]["prompt_tokens"] == 104
    c.close()
    assert wait_until(lambda: running(base) == 0)


def successes(base) -> float:
    return sum(v for (n, _), v in _scrape(base).items() if n == "vllm:request_success_total")


def test_text_streams_while_audio_arrives_one_request_per_5_s_segment(base):
    before = successes(base)
    c = session(base)
    c.send({"type": "input_audio_buffer.commit"})
    for _ in range(12):                         # 12 s: two 5 s segments transcribed before the final commit
        c.send({"type": "input_audio_buffer.append", "audio": SECOND})
    early = [c.recv()]                          # the first segment's text, the final commit not sent
    assert early[0]["type"] == "transcription.delta"
    c.send({"type": "input_audio_buffer.commit", "final": True})
    while (ev := c.recv())["type"] == "transcription.delta":
        early.append(ev)
    deltas = [e["delta"] for e in early]
    assert ev["type"] == "transcription.done" and "".join(deltas) == ev["text"]
    # vLLM's usage: the first output's prompt (4 decoder tokens + 5 s of audio), every token sent
    assert ev["usage"]["prompt_tokens"] == 504 and len(deltas) <= ev["usage"]["completion_tokens"] <= 3 * 64
    assert sum(1 for d in deltas if d.startswith(" ")) >= 2          # the later segments' texts
    assert successes(base) - before == 3         # 5 s, 5 s and the 2 s left at the final commit
    assert running(base) == 0
    c.close()


def test_a_final_commit_without_audio_is_an_empty_done(base):
    c = session(base)
    c.send({"type": "input_audio_buffer.commit", "final": True})
    c.send({"type": "input_audio_buffer.commit"})
    assert c.recv() == {"type": "transcription.done", "text": "",
                        "usage": {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0,
                                  "completion_tokens_details": None}}
    c.close()


def error(c: Client, event) -> tuple:
    c.send(event)
    ev = c.recv()
    assert ev["type"] == "error" and list(ev) == ["type", "error", "code"], ev
    return ev["code"], ev["error"]


def test_each_error_event(base):
    c = Client(base)
    assert c.recv()["type"] == "session.created"
    assert error(c, {"type": "input_audio_buffer.commit"}) == (
        "model_not_validated", "Model not validated. Make sure to validate the model by sending a session.update event.")
    assert error(c, {"type": "session.update", "model": "nope"}) == (
        "model_not_found", "The model `nope` does not exist.")
    assert error(c, {"type": "session.update"}) == ("invalid_event", "Missing required field: model")
    assert error(c, {"type": "session.update", "model": None}) == ("invalid_event", "Missing required field: model")
    assert error(c, "{not json") == ("invalid_json", "Invalid JSON")
    assert error(c, "[1, 2]") == ("processing_error", "'list' object has no attribute 'get'")
    assert error(c, {"type": "nope"}) == ("unknown_event", "Unknown event type: nope")
    assert error(c, {"kind": 1}) == ("unknown_event", "Unknown event type: None")
    for audio in ("abc", "AA==", "", "é"):        # bad padding, an odd byte count, empty, not ASCII
        assert error(c, {"type": "input_audio_buffer.append", "audio": audio}) == ("invalid_audio",
                                                                                    "Invalid audio data")
    code, text = error(c, {"type": "input_audio_buffer.append"})
    assert code == "processing_error" and text.startswith(
        "1 validation error for InputAudioBufferAppend\naudio\n  Field required [type=missing, "
        "input_value={'type': 'input_audio_buffer.append'}, input_type=dict]")
    code, text = error(c, {"type": "input_audio_buffer.append", "audio": 5})
    assert "Input should be a valid string [type=string_type, input_value=5, input_type=int]" in text
    # a falsy model is vLLM's "no model given": valid
    c.send({"type": "session.update", "model": ""})
    code, text = error(c, {"type": "input_audio_buffer.commit", "final": "maybe"})
    assert code == "processing_error" and "1 validation error for InputAudioBufferCommit\nfinal\n" in text
    # the session goes on after every error
    deltas, done = c.transcribe()
    assert "".join(deltas) == done["text"]
    # a binary message ends the session (vLLM's receive_text fails on it)
    c.send(b"\x00\x01")
    assert c.recv() is None and c.close_code == 1000
    c.close()


def test_a_message_over_16_mib_is_closed_with_1009_and_one_at_the_limit_is_read(base):
    c = session(base)
    event = '{"type": "x"}'
    c.send(event + " " * (16 * MiB - len(event)))          # exactly 16 MiB: parsed (off the hub)
    assert c.recv() == {"type": "error", "error": "Unknown event type: x", "code": "unknown_event"}
    c.send("x" * (16 * MiB + 1))
    assert c.recv() is None and c.close_code == 1009
    c.close()
    # split over frames the same
    c = session(base)
    for _ in range(17):
        c.sock.sendall(c.ws.send(Message(data="y" * MiB, message_finished=False)))
    assert c.recv() is None and c.close_code == 1009
    c.close()


SLOW = ("--time-to-first-token", "20ms", "--inter-token-latency", "100ms", "--api-key", KEY)


def aborts(base) -> float:
    return metric(_scrape(base), "vllm:request_success_total", finished_reason="abort")


@pytest.fixture(scope="module")
def slow(sim_server):
    """A server at 100 ms a token (a client leaves well inside a segment), in dev mode (its
    /abort_requests); stopped by the last test."""
    return sim_server(*SLOW, env={"VLLM_SERVER_DEV_MODE": "1"})


def test_a_client_that_leaves_mid_generation_aborts_its_request(slow):
    base = slow
    for leave in ("reset", "close frame"):
        before = aborts(base)
        c = session(base)
        c.send({"type": "input_audio_buffer.append", "audio": SECOND})
        c.send({"type": "input_audio_buffer.commit"})
        c.send({"type": "input_audio_buffer.commit", "final": True})
        assert c.recv()["type"] == "transcription.delta"
        assert running(base) == 1
        if leave == "reset":
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        else:
            c.sock.sendall(c.ws.send(CloseConnection(code=1000)))
            while c.recv() is not None:       # deltas already on their way, then the server's close
                pass
            assert c.close_code == 1000
        c.close()
        assert wait_until(lambda: running(base) == 0, 1.0), leave
        assert aborts(base) == before + 1, leave          # aborted, not finished
        assert wait_until(lambda: metric(_scrape(base), "vllm:websocket_connections_active") == 0, 1.0)


def test_a_request_the_server_aborts_ends_with_the_done_of_what_was_made(slow):
    c = session(slow)
    c.send({"type": "input_audio_buffer.append", "audio": SECOND})
    c.send({"type": "input_audio_buffer.commit"})
    c.send({"type": "input_audio_buffer.commit", "final": True})
    first = c.recv()
    assert first["type"] == "transcription.delta"
    r = httpx.post(slow + "/abort_requests", json={}, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and r.json()["aborted"] == 1
    deltas = [first["delta"]]
    while (ev := c.recv())["type"] == "transcription.delta":
        deltas.append(ev["delta"])
    # vLLM: the abort output ends the stream, then the done with what was made
    assert ev["type"] == "transcription.done" and ev["text"] == "".join(deltas)
    assert ev["usage"]["prompt_tokens"] == 104 and ev["usage"]["completion_tokens"] >= len(deltas)
    assert running(slow) == 0
    c.send({"type": "input_audio_buffer.commit"})       # the session goes on: the next utterance
    c.send({"type": "input_audio_buffer.append", "audio": SECOND})
    c.send({"type": "input_audio_buffer.commit", "final": True})
    assert c.recv()["type"] == "transcription.delta"


def test_the_websocket_metrics(base):
    before = _scrape(base)
    assert wait_until(lambda: metric(_scrape(base), "vllm:websocket_connections_active") == 0)
    c = session(base)
    c.send({"type": "nope"})
    c.recv()
    during = _scrape(base)
    assert metric(during, "vllm:websocket_connections_active") == 1
    assert metric(during, "vllm:websocket_connections_total") == metric(before, "vllm:websocket_connections_total") + 1
    c.sock.sendall(c.ws.send(CloseConnection(code=1000)))
    assert c.recv() is None
    c.close()
    assert wait_until(lambda: metric(_scrape(base), "vllm:websocket_connections_active") == 0)
    after = _scrape(base)
    name = "vllm:websocket_connection_duration_seconds"
    assert metric(after, name + "_count") == metric(before, name + "_count") + 1
    les = [dict(k[1])["le"] for k in after if k[0] == name + "_bucket"]
    assert les == ["0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "60.0", "120.0", "300.0", "600.0", "1800.0", "+Inf"]
    assert metric(after, name + "_bucket", le="0.5") == metric(before, name + "_bucket", le="0.5") + 1
    assert ("vllm:websocket_connections_created", frozenset()) in after
    # the http_* families do not count WebSocket sessions (the instrumentator passes them by)
    assert not [k for k in after if k[0] == "http_requests_total" and ("handler", "/v1/realtime") in k[1]]


def test_http_get_handshake_errors_api_key_and_ping(base):
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.get(base + "/v1/realtime", headers=h)
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}       # Starlette: no HTTP route
    assert httpx.get(base + "/v1/realtime").status_code == 401
    c = Client(base, headers=[])               # vLLM's API key middleware guards WebSocket scopes too
    assert isinstance(c.answer, RejectConnection) and c.answer.status_code == 401
    c.close()
    up = {**h, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    r = httpx.get(base + "/v1/realtime", headers=up)                          # no Sec-WebSocket-Key
    assert r.status_code == 400 and "Sec-WebSocket-Key" in r.text
    r = httpx.get(base + "/v1/realtime", headers={**up, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                                   "Sec-WebSocket-Version": "8"})
    assert r.status_code == 426 and r.headers["sec-websocket-version"] == "13"
    for bad in ("not base64!", "c2hvcnQ=", "dGhlIHNhbXBsZSBub25jZQ==,dGhlIHNhbXBsZSBub25jZQ=="):   # 16 bytes of base64 only
        r = httpx.get(base + "/v1/realtime", headers={**up, "Sec-WebSocket-Key": bad})
        assert r.status_code == 400 and f"invalid Sec-WebSocket-Key header: {bad}" in r.text, (bad, r.text)
    key = {**up, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    r = httpx.request("GET", base + "/v1/realtime", headers=key, content=b"x" * 10)
    assert r.status_code == 400 and "no body" in r.text                    # its bytes are no frames
    assert httpx.post(base + "/v1/realtime", headers=key).status_code == 404  # not a GET: HTTP's router
    # no permessage-deflate, even when offered
    c = Client(base, headers=[*AUTH, (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits")])
    assert isinstance(c.answer, AcceptConnection) and not c.answer.extensions
    c.recv()
    c.sock.sendall(c.ws.send(Ping(payload=b"hi")))
    c.send({"type": "nope"})
    assert c.recv()["code"] == "unknown_event" and c.pongs == 1
    c.close()


def test_an_event_of_millions_of_json_values_does_not_hold_the_hub(base):
    """A 16 MiB message of 8 M list items: its json.loads and the error's repr held the hub
    ~1-2 s (one C call each); past 65,536 values an event is refused before it is parsed, and a
    concurrent /health answers meanwhile (the bound is loose: a loaded machine, the probe in
    this process)."""
    c = session(base)
    many = '{"type": "input_audio_buffer.append", "audio": [' + ",".join(["1"] * 8_000_000) + "]}"
    framed = c.ws.send(Message(data=many))            # masked here, not while the probe runs
    slowest = []

    def probe():
        while not slowest or slowest[0] is not None:
            t = time.monotonic()
            httpx.get(base + "/health", timeout=10)
            slowest.append(time.monotonic() - t)
            time.sleep(0.01)
    import threading
    slowest.append(0.0)
    th = threading.Thread(target=probe)
    th.start()
    try:
        for _ in range(2):
            c.sock.sendall(framed)      # (one masked frame twice: the same bytes, a mask per frame is the client's)
        for _ in range(2):
            ev = c.recv()
            assert ev["type"] == "error" and ev["code"] == "processing_error" and "65536" in ev["error"], ev
    finally:
        slowest[0] = None
        th.join()
    assert max(slowest[1:]) < 0.5, max(slowest[1:])      # (before: 1-2 s a message)
    deltas, done = c.transcribe()                       # the session goes on
    assert done["type"] == "transcription.done"
    c.close()


def test_a_handshake_header_not_ascii_is_a_400(base):
    """wsproto decodes the extension and subprotocol offers as ASCII: a byte past 0x7f there was
    its UnicodeDecodeError, gunicorn's 500 and a traceback in the log."""
    for name in (b"Sec-WebSocket-Extensions", b"Sec-WebSocket-Protocol"):
        host, port = base.rsplit("/", 1)[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                      b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + name + b": a\xff\r\n\r\n")
            head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 400 ") and b"WebSocket" in head, head


def test_shutdown_closes_sessions_with_1012(slow, _pool):
    base = slow                                       # its last test
    c = session(base)
    c.send({"type": "input_audio_buffer.append", "audio": SECOND})
    c.send({"type": "input_audio_buffer.commit"})
    c.send({"type": "nope"})
    assert c.recv()["code"] == "unknown_event"
    proc = next(p for p, b in _pool.procs.values() if b == base)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert c.recv() is None and c.close_code == 1012
    assert time.monotonic() - started < 1.0           # at once, not after the 30 s grace
    c.close()
    proc.wait(timeout=10)                             # and the drain is over (nothing else in flight)
