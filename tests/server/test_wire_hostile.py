"""Hostile bytes on the wire, over a real server (gunicorn's parser and the worker's answer):
what uvicorn's httptools parser refuses under vLLM is refused at once with its
``400 Invalid HTTP request received.``, a doubled slash is the router's 404, and a UTF-16 body
is served (``tests/unit/test_request_head.py``, ``tests/app/test_request_targets.py``,
``tests/app/test_body_encodings.py`` in-process)."""
from __future__ import annotations

import json
import socket
import time

import pytest

BODY = b'{"model": "test-model", "prompt": "hi", "max_tokens": 2}'
UVICORN_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 30\r\n" \
              b"Connection: close\r\n\r\nInvalid HTTP request received."


def exchange(base: str, data: bytes, limit_s: float = 5.0) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes (or ``limit_s``); ``(bytes, seconds)``."""
    host, port = base.rsplit("//", 1)[1].split(":")
    t0 = time.monotonic()
    with socket.create_connection((host, int(port))) as s:
        s.settimeout(limit_s)
        s.sendall(data)
        out = b""
        try:
            while d := s.recv(65536):
                out += d
        except (socket.timeout, ConnectionResetError):
            pass
    return out, time.monotonic() - t0


def chunked(size_line: bytes) -> bytes:
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + size_line + BODY)


@pytest.mark.parametrize("data", [
    b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.2\r\nHost: x\r\n\r\n",
    chunked(b"%x\n" % len(BODY)),                          # a bare LF: no CRLF will ever come
    chunked(b"FFFFFFFFFFFFFFFFFFFF\r\n"),                  # 2**80 bytes owed
])
def test_what_uvicorn_refuses_is_a_400_at_once(server, data):
    out, took = exchange(server, data)
    assert out == UVICORN_400, out[:200]
    assert took < 2, took                      # not the body's deadline (408 after seconds)


@pytest.mark.parametrize("path", [b"//v1/models", b"//health", b"/v1//models"])
def test_a_doubled_slash_is_the_routers_404(server, path):
    out, _ = exchange(server, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404"), out[:200]
    assert json.loads(body) == {"detail": "Not Found"}


def test_a_utf16_body_is_served_on_the_fast_path(server):
    body = BODY.decode().encode("utf-16")
    out, _ = exchange(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    head, _, answer = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), out[:300]
    assert json.loads(answer)["object"] == "text_completion"


@pytest.mark.parametrize("repeated", [b"Host: y\r\n", b"Content-Type: text/plain\r\n"])
def test_a_repeated_host_or_content_type_is_served_with_the_first(server, repeated):
    """vLLM (uvicorn, Starlette's first-copy ``headers.get``) serves it; gunicorn refused it."""
    out, _ = exchange(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              + repeated + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]


# ---- a request's chat template over a real (gevent-patched) server --------------------------------
def test_a_request_template_is_bounded_in_the_patched_server(sim_server):
    """``python app.py`` installs transformers' bounded template environment before gevent patches
    the process (imported after it, transformers' huggingface_hub -> httpx -> trio stack needed
    ``select.epoll``: the import failed, was retried by every request, and templates rendered
    without bounds)."""
    import urllib.error
    import urllib.request
    base = sim_server("--trust-request-chat-template")

    def chat(template):
        body = json.dumps({"model": "test-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],
                           "chat_template": template}).encode()
        req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)
    status, out = chat("{% for m in messages %}<{{ m['content'] }}>{% endfor %}")
    assert status == 200 and out["usage"]["prompt_tokens"] > 0, out
    status, out = chat("{{ 'a' * 100000000 }}")
    assert status == 400 and "TemplateTooBig" in out["error"]["message"], out


def test_runaway_request_templates_free_their_render_threads_in_the_patched_server(sim_server):
    """A template past its time is interrupted in its render thread: gevent's patched
    ``threading.get_ident`` named a greenlet, no thread, so two runaway templates held both render
    threads for good and every later request's template timed out.  A batch of conversations over
    the tokenizer's offload threshold renders in the tokenizer's worker thread, which cannot use the
    render pool (InvalidThreadUseError, a 400): it renders there, bounded the same way."""
    import concurrent.futures
    import urllib.error
    import urllib.request
    base = sim_server("--trust-request-chat-template")
    runaway = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    plain = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"

    def post(path, body):
        req = urllib.request.Request(base + path, json.dumps({"model": "test-model", "max_tokens": 2, **body}).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)
    one = {"messages": [{"role": "user", "content": "hi"}]}
    batch = {"messages": [[{"role": "user", "content": "word " * 1000}]] * 2}     # 10,000 characters
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        slow = [ex.submit(post, "/v1/chat/completions", {**one, "chat_template": runaway}) for _ in range(2)]
        slow.append(ex.submit(post, "/v1/chat/completions/batch", {**batch, "chat_template": runaway}))
        for f in slow:
            status, out = f.result()
            assert status == 400 and "did not render within" in out["error"]["message"], out
    status, out = post("/v1/chat/completions", {**one, "chat_template": plain})
    assert status == 200, out
    status, out = post("/v1/chat/completions/batch", {**batch, "chat_template": plain})
    assert status == 200 and len(out["choices"]) == 2, out


def test_a_body_of_many_tiny_chunks_leaves_other_clients_served(server):
    """500,000 one-byte chunks (3 MB on the wire, all in the socket at once): no read blocks, so
    parsing them held the hub, and every other client, 3-4 s; the hub now gets a turn every 2 ms
    of parsing (``server.request_head.StrictChunkedReader``)."""
    import threading
    body = b'{"model": "test-model", "prompt": "' + b"a" * 500_000 + b'", "max_tokens": 1}'
    data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(b"1\r\n%c\r\n" % c for c in body) + b"0\r\n\r\n")
    got = {}
    flood = threading.Thread(target=lambda: got.update(out=exchange(server, data, limit_s=30)))
    flood.start()
    worst = 0.0
    time.sleep(0.3)                            # the chunks are being parsed
    while flood.is_alive():
        out, took = exchange(server, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10)
        assert out.startswith(b"HTTP/1.1 200"), out[:100]
        worst = max(worst, took)
        time.sleep(0.05)
    flood.join()
    assert got["out"][0].startswith(b"HTTP/1.1 "), got["out"][0][:100]     # answered (400: too long a prompt)
    assert worst < 1.0, worst


def test_a_tls_body_of_one_byte_records_leaves_other_clients_served():
    """A TLS client sending its body as one-byte records (600,000 of them, 14 MB on the wire, all
    in the socket at once): each ``recv`` returns one byte without blocking, so reading them
    held the hub, and every other client, 2-3 s (2 MB of body: 10 s); the hub now gets a turn
    every 2 ms of a request's reads (``server.arrivals``' ``SlicedUnreader``)."""
    import ssl
    import threading

    import httpx

    from support.sockets import self_signed_server
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with self_signed_server() as (_, base):
        host, port = base.rsplit("//", 1)[1].split(":")
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
        sock = socket.create_connection((host, int(port)), timeout=30)
        while True:                                  # the handshake, through memory
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        sock.sendall(outgoing.read())
        body = b'{"model": "test-model", "prompt": "' + b"a" * 600_000 + b'", "max_tokens": 1}'
        tls.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        for i in range(len(body)):
            tls.write(body[i:i + 1])                 # one record a byte
        wire = outgoing.read()

        def flood():
            try:
                sock.sendall(wire)
                while sock.recv(65536):
                    pass
            except OSError:
                pass                                 # the body's deadline (408) may close it first
        thread = threading.Thread(target=flood)
        worst = 0.0
        with httpx.Client(verify=False, timeout=10) as probe:
            thread.start()
            time.sleep(0.2)
            while thread.is_alive():
                t0 = time.monotonic()
                assert probe.get(base + "/health", headers={"Connection": "close"}).status_code == 200
                worst = max(worst, time.monotonic() - t0)
                time.sleep(0.05)
        thread.join()
        sock.close()
    assert worst < 1.0, worst
