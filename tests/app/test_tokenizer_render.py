"""``--render-url`` (issue 9, seeds' HF mode): prompts tokenized by a vLLM render service.

A fake render service runs in a thread of the test (stdlib ``http.server``): it answers fixed
ids, records what it was sent, and can be slow or fail on demand.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

FEATURES = {"mm_hashes": {"image": ["abc"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 2}]}}


class FakeRender:
    def __init__(self):
        self.calls = []
        self.delay = 0.0
        self.status = 200
        self.refuse = None          # a predicate on the body: answer it 400 (a template that fails)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append((self.path, body))
                time.sleep(fake.delay)
                if fake.status != 200 or (fake.refuse is not None and fake.refuse(body)):
                    out, status = {"error": {"message": "template exploded"}}, fake.status if fake.status != 200 else 400
                elif self.path == "/v1/completions/render":
                    out, status = [{"token_ids": [7] * len(body["prompt"].split())}], 200
                elif self.path == "/v1/chat/completions/render":
                    out, status = {"token_ids": list(range(100, 100 + 3 * len(body["messages"]))),
                                   "features": FEATURES}, 200
                else:
                    out, status = {"error": "no"}, 404
                raw = json.dumps(out).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass                # the simulator gave up first (render timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()  # quick shutdown()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake():
    f = FakeRender()
    yield f
    f.close()


@pytest.fixture()
def client(app_client, fake):
    fake.calls.clear()
    fake.delay, fake.status, fake.refuse = 0.0, 200, None
    return app_client("--render-url", fake.url, "--render-timeout", "1s", model="org/real-model")


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]


def test_completion_prompt_tokens_come_from_the_service(client, fake):
    r = client.post("/v1/completions", json={"model": "org/real-model", "prompt": "one two three four",
                                              "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 4
    assert fake.calls[-1] == ("/v1/completions/render", {"model": "org/real-model", "prompt": "one two three four",
                                                         "add_special_tokens": True})


def test_chat_and_render_pass_options_and_features(client, fake):
    r = client.post("/v1/chat/completions", json={"model": "org/real-model", "messages": MESSAGES, "max_tokens": 2,
                                                   "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 6
    path, body = fake.calls[-1]
    assert path == "/v1/chat/completions/render"
    assert body["messages"] == MESSAGES and body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["add_generation_prompt"] is True
    r = client.post("/v1/chat/completions/render", json={"model": "org/real-model", "messages": MESSAGES})
    assert {k: r.json()[k] for k in ("token_ids", "features")} == {"token_ids": [100, 101, 102, 103, 104, 105],
                                                                   "features": FEATURES}
    t = client.post("/tokenize", json={"messages": MESSAGES}).json()
    assert t["tokens"] == [100, 101, 102, 103, 104, 105]


def test_unreachable_service_is_502(app_client):
    c = app_client("--render-url", "http://127.0.0.1:9", "--render-timeout", "1s", model="org/real-model")
    r = c.post("/v1/chat/completions", json={"model": "org/real-model", "messages": MESSAGES, "max_tokens": 2})
    assert r.status_code == 502
    err = r.json()["error"]
    assert "Render service unreachable" in err["message"] and err["code"] == 502


def test_slow_service_is_504_not_a_hang(client, app_client, fake):
    short = app_client("--render-url", fake.url, "--render-timeout", "300ms", model="org/real-model")
    fake.delay = 0.9
    t0 = time.monotonic()
    r = short.post("/v1/completions", json={"model": "org/real-model", "prompt": "a b", "max_tokens": 2})
    assert r.status_code == 504 and "timed out" in r.json()["error"]["message"]
    assert time.monotonic() - t0 < 0.8


def test_upstream_client_error_keeps_its_status(client, fake):
    fake.status = 400
    r = client.post("/v1/chat/completions", json={"model": "org/real-model", "messages": MESSAGES, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["message"] == "template exploded"


def test_disabled_thinking_probe_reads_a_refused_render_as_a_failed_one(app_client, fake):
    """Anthropic thinking disabled: vLLM 0.34's DisabledThinkingEffortResolver picks "low" when
    rendering reasoning_effort "none" fails.  With --render-url that failure is the service's 400:
    the simulator passed it on to every disabled-thinking request (a valid request refused, the
    effort never cached); an outage (5xx) still propagates and caches nothing."""
    c = app_client("--render-url", fake.url, "--render-timeout", "1s", "--max-model-len", "2048",
                   model="org/real-model")
    body = {"model": "org/real-model", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "disabled"}}
    fake.status = 502
    r = c.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 502 and getattr(c.sim, "_disabled_thinking_effort", None) is None
    fake.status = 200
    fake.refuse = lambda b: (b.get("chat_template_kwargs") or {}).get("reasoning_effort") == "none"
    r = c.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 200, r.text
    assert c.sim._disabled_thinking_effort == "low"
    assert fake.calls[-1][1]["chat_template_kwargs"]["reasoning_effort"] == "low"
    r = c.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    fake.refuse = None
