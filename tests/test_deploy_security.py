"""``--api-key`` (vLLM's AuthenticationMiddleware, plus x-api-key), HTTPS with given and
self-signed certificates, and the LoRA load route's handling of paths (issue 10 Security)."""
from __future__ import annotations

import ssl
import subprocess
import sys

import httpx
import pytest

from support import ROOT, free_port

KEY = "sk-sim-test-key"
OPEN = ["/health", "/health/ready", "/metrics", "/ping", "/version"]
PROTECTED = [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("GET", "/v1/models"),
             ("POST", "/v1/embeddings"), ("POST", "/v1/responses"), ("POST", "/tokenize"),
             ("POST", "/detokenize"), ("POST", "/inference/v1/generate"),
             ("POST", "/v1/chat/completions/render"), ("POST", "/v1/completions/render"),
             ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"),
             ("GET", "/admin/config"), ("POST", "/admin/config"), ("POST", "/sleep"),
             ("GET", "/is_sleeping"), ("GET", "/v1/no-such-route")]
CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "extra_body": {"ignore_eos": True}}          # SDK form; RAW is the same body for httpx
RAW = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
       "ignore_eos": True}


@pytest.fixture(scope="module")
def keyed(app_client):
    return app_client("--api-key", KEY)


@pytest.mark.parametrize("path", OPEN)
def test_probes_stay_open(keyed, path):
    assert keyed.get(path).status_code == 200


@pytest.mark.parametrize("method,path", PROTECTED)
def test_protected_routes_need_the_key(keyed, method, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                    {"x-api-key": "wrong"}, {"Authorization": "Bearer"}):
        r = keyed.request(method, path, headers=headers, json={})
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"error": {"message": "Unauthorized: a valid API key is required "
                                                 "(Authorization: Bearer <key>).",
                                      "type": "AuthenticationError", "param": None, "code": 401}}
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"Authorization": f"bearer {KEY}"}, {"x-api-key": KEY}):
        assert keyed.request(method, path, headers=headers, json={}).status_code != 401


def test_messages_get_anthropic_envelope(keyed):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = keyed.post(path, json={})
        assert r.status_code == 401
        assert r.json() == {"type": "error", "error": {"type": "authentication_error", "message":
                            "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."}}
    r = keyed.post("/v1/messages", headers={"x-api-key": KEY},
                   json={"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200


def test_no_key_configured_means_open(api):
    assert api.post("/v1/chat/completions", json=RAW).status_code == 200


def test_key_from_environment(app_client):
    c = app_client(env={"VLLM_API_KEY": "env-key"})
    assert c.post("/v1/chat/completions", json=RAW).status_code == 401
    assert c.post("/v1/chat/completions", json=RAW, headers={"Authorization": "Bearer env-key"}).status_code == 200


def test_sdks_with_and_without_key(keyed):
    import anthropic
    import openai
    ok = keyed.openai(api_key=KEY).chat.completions.create(**CHAT)
    assert ok.usage.completion_tokens == 3
    with pytest.raises(openai.AuthenticationError):
        keyed.openai(api_key="nope").chat.completions.create(**CHAT)
    msg = keyed.anthropic(api_key=KEY).messages.create(model="test-model", max_tokens=3,
                                                       messages=[{"role": "user", "content": "hi"}])
    assert msg.usage.output_tokens >= 1
    with pytest.raises(anthropic.AuthenticationError):
        keyed.anthropic(api_key="nope").messages.create(model="test-model", max_tokens=3,
                                                       messages=[{"role": "user", "content": "hi"}])


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
def _start_tls(tmp_path, *flags):
    port = free_port()
    log = tmp_path / f"tls-{port}.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             *flags], cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
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
    import openai
    proc, base, log = _start_tls(tmp_path, "--self-signed-certs")
    try:
        with httpx.Client(verify=False, timeout=10) as c:
            assert c.get(base + "/health").status_code == 200
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
    port = free_port(2)
    log = tmp_path / "dp.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             "--self-signed-certs", "--data-parallel-size", "2"], cwd=ROOT,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    import time
    try:
        for p in (port, port + 1):
            deadline = time.monotonic() + 30
            while True:
                try:
                    assert httpx.get(f"https://127.0.0.1:{p}/health", verify=False, timeout=1).status_code == 200
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                    time.sleep(0.05)
    finally:
        _stop(proc)


@pytest.mark.parametrize("flags,message", [
    (["--ssl-certfile", "c.pem"], "both ssl-certfile and ssl-keyfile must be provided together"),
    (["--ssl-keyfile", "k.pem"], "both ssl-certfile and ssl-keyfile must be provided together"),
    (["--self-signed-certs", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem"],
     "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile"),
])
def test_tls_flag_pairs(flags, message):
    from generation.config.values import ConfigError
    from generation.config.cli import load_config
    with pytest.raises(ConfigError, match=message):
        load_config(flags, env={})


def test_unreadable_certificate_is_one_line(tmp_path):
    from server.tls import tls_files
    from generation.config.cli import load_config
    missing = str(tmp_path / "missing.pem")
    cfg = load_config(["--ssl-certfile", missing, "--ssl-keyfile", missing], env={})
    with pytest.raises(ValueError, match="--ssl-certfile/--ssl-keyfile: cannot load"):
        tls_files(cfg)
