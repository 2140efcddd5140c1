"""``--api-key`` on a real server, and HTTPS with given and self-signed certificates (issue 10
Security; case C37): SDKs over TLS, a pinned certificate, bounded and quiet handshakes, and
data-parallel ranks serving HTTPS."""
from __future__ import annotations

import ssl
import subprocess
import sys

import httpx
import pytest

from support import ROOT, free_port

KEY = "sk-sim-test-key"

CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "extra_body": {"ignore_eos": True}}          # SDK form; RAW is the same body for httpx
RAW = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
       "ignore_eos": True}


@pytest.mark.server
def test_api_key_on_a_real_server(live_client):
    import openai
    c = live_client("--api-key", KEY)
    assert c.get("/health").status_code == 200
    assert c.get("/metrics").status_code == 200
    assert c.post("/v1/chat/completions", json=RAW).status_code == 401
    assert c.post("/v1/chat/completions", json=RAW, headers={"x-api-key": KEY}).status_code == 200
    stream = c.openai(api_key=KEY).chat.completions.create(**CHAT, stream=True)
    assert sum(1 for _ in stream) >= 3
    with pytest.raises(openai.AuthenticationError):
        c.openai(api_key="nope").models.list()


# ---- TLS ---------------------------------------------------------------------------------------
def _start_tls(tmp_path, *flags, env=None):
    port = free_port()
    log = tmp_path / f"tls-{port}.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             *flags], cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    base = f"https://127.0.0.1:{port}"
    import time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            httpx.get(base + "/health", verify=False, timeout=1)
            return proc, base, log
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(log.read_text())


def _stop(proc):
    import signal
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@pytest.mark.server
def test_https_with_given_certificate(tmp_path):
    from server.tls import make_self_signed_cert
    cert, key = make_self_signed_cert(str(tmp_path))
    proc, base, log = _start_tls(tmp_path, "--ssl-certfile", cert, "--ssl-keyfile", key)
    try:
        with httpx.Client(verify=ssl.create_default_context(cafile=cert), timeout=10) as c:
            assert c.get(base + "/health").status_code == 200
            r = c.post(base + "/v1/chat/completions", json=RAW)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        with pytest.raises(httpx.ConnectError):          # a client that does not trust it
            httpx.get(base + "/health", timeout=5)
        with pytest.raises(httpx.HTTPError):              # plain HTTP on the TLS port
            httpx.get(base.replace("https", "http") + "/health", timeout=5)
    finally:
        _stop(proc)
    assert f"serving https://127.0.0.1:{base.rsplit(':', 1)[1]}" in log.read_text()


@pytest.mark.server
def test_https_with_self_signed_certificate(tmp_path):
    import os

    import openai
    temp = tmp_path / "temp"
    temp.mkdir()
    proc, base, log = _start_tls(tmp_path, "--self-signed-certs", env={**os.environ, "TMPDIR": str(temp)})
    try:
        with httpx.Client(verify=False, timeout=10) as c:
            assert c.get(base + "/health").status_code == 200
            assert list(temp.iterdir()) == []     # the private key is off the disk once loaded
            client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, http_client=c)
            r = client.chat.completions.create(**CHAT)
            assert r.usage.completion_tokens == 3
        # The certificate names localhost / 127.0.0.1: a client pinning it verifies the host.
        pem = ssl.get_server_certificate(("127.0.0.1", int(base.rsplit(":", 1)[1])))
        pinned = tmp_path / "pinned.pem"
        pinned.write_text(pem)
        with httpx.Client(verify=ssl.create_default_context(cafile=str(pinned)), timeout=10) as c:
            assert c.get(base + "/v1/models").status_code == 200
    finally:
        _stop(proc)


@pytest.mark.server
def test_tls_handshake_is_bounded_and_a_dropped_one_is_quiet(tmp_path):
    # A client that connects and never says a word is closed after --timeout-keep-alive, as on
    # plain HTTP (gevent waited for ever: a pool slot and a descriptor per such client); one
    # that drops out of its handshake leaves a debug line, not a traceback.
    import socket
    import time
    proc, base, log = _start_tls(tmp_path, "--self-signed-certs", "--timeout-keep-alive", "1")
    port = int(base.rsplit(":", 1)[1])
    try:
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        started = time.monotonic()
        assert silent.recv(1) == b""                  # closed by the server
        assert 0.9 <= time.monotonic() - started < 8
        silent.close()
        for _ in range(3):                            # a ClientHello cut short, then gone
            dropped = socket.create_connection(("127.0.0.1", port), timeout=10)
            dropped.sendall(b"\x16\x03\x01\x00\xa5\x01\x00")
            dropped.close()
        with httpx.Client(verify=False, timeout=10) as c:
            assert c.get(base + "/health").status_code == 200
    finally:
        _stop(proc)
    assert "Traceback" not in log.read_text()


@pytest.mark.server
def test_data_parallel_ranks_serve_https(tmp_path):
    import time
    log = tmp_path / "dp.log"
    for _attempt in range(3):      # another test may take a port between free_port and the bind
        port = free_port(2)
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                                 "--self-signed-certs", "--data-parallel-size", "2", "-dpe"], cwd=ROOT,
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        try:
            for p in (port, port + 1):
                deadline = time.monotonic() + 30
                while True:
                    try:
                        assert httpx.get(f"https://127.0.0.1:{p}/health", verify=False, timeout=1).status_code == 200
                        break
                    except httpx.HTTPError:
                        if proc.poll() is not None and "in use" in log.read_text():
                            break
                        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                        time.sleep(0.05)
                if proc.poll() is not None:
                    break
            else:
                return
        finally:
            _stop(proc)
    raise AssertionError(log.read_text())
