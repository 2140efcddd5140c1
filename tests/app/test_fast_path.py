"""The generation routes' two entry points (blueprints/serving.py) answer alike.

A POST with a Content-Length goes through ``GenerationFastPath`` (no Flask request context); the
same request with a chunked body (no Content-Length, as gunicorn passes it) goes through the
Flask view.  Both must give the same status, headers and body, errors included.
"""
from __future__ import annotations

import io
import json

import orjson
import pytest

from app import create_app
from blueprints.serving import GenerationFastPath
from generation.config.cli import load_config

MSG = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def app():
    return create_app(load_config(["--model", "test-model", "--seed", "7"]))


def call(app, path: str, body: bytes, chunked: bool, headers: dict | None = None, body_input=None):
    """(status line, {header: value}, body bytes) of one POST through the whole WSGI stack
    (``body_input``: the ``wsgi.input`` stream, else one holding ``body``)."""
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
               "SERVER_NAME": "sim", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "http", "wsgi.input": body_input or io.BytesIO(body), "wsgi.errors": io.StringIO(),
               "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
               "CONTENT_TYPE": "application/json", "HTTP_X_REQUEST_ID": "fixed-id"}
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = True
    else:
        environ["CONTENT_LENGTH"] = str(len(body))
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs, exc_info=None):
        got["status"], got["headers"] = status, dict(hdrs)
    it = app.wsgi_app(environ, start_response)
    out = b"".join(it)
    if hasattr(it, "close"):
        it.close()
    return got["status"], got["headers"], out


def normalise(body: bytes) -> bytes:
    """The body without its creation times (they may tick between the two calls)."""
    text = body.decode()
    return orjson.dumps([_drop_created(json.loads(part)) if part.startswith("{") else part
                         for part in _parts(text)])


def _parts(text: str) -> list:
    if not text.startswith(("data:", "event:")):
        return [text]
    return [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("data: ")]


def _drop_created(obj):
    if isinstance(obj, dict):
        return {k: _drop_created(v) for k, v in obj.items() if k not in ("created", "created_at")}
    if isinstance(obj, list):
        return [_drop_created(v) for v in obj]
    return obj


CASES = [
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 5}),
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 5, "stream": True}),
    ("/v1/completions", {"model": "test-model", "prompt": "Hi", "max_tokens": 4, "n": 2}),
    ("/v1/completions", {"model": "test-model", "prompt": "Hi", "max_tokens": 4, "stream": True}),
    ("/v1/messages", {"model": "test-model", "messages": MSG, "max_tokens": 5}),
    ("/v1/messages", {"model": "test-model", "messages": MSG, "max_tokens": 5, "stream": True}),
    # (the Responses API's id is its body's request_id, not the X-Request-Id header: vLLM's)
    ("/v1/responses", {"model": "test-model", "input": "Hi", "max_output_tokens": 5, "request_id": "resp_fixed"}),
    ("/inference/v1/generate", {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 3}}),
    ("/v1/chat/completions/batch", {"model": "test-model", "messages": [MSG, MSG], "max_tokens": 5}),
    # errors, in each envelope
    ("/v1/chat/completions/batch", {"model": "test-model", "messages": [MSG], "n": 2}),
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": -1}),
    ("/v1/chat/completions", {"model": "nope", "messages": MSG}),
    ("/v1/messages", {"model": "test-model", "messages": MSG}),
    ("/v1/completions", b"{not json"),
]


@pytest.mark.parametrize("path,body", CASES)
def test_both_entry_points_answer_alike(app, path, body):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    sim = app.extensions["simulator"]
    sim.rng.seed(3)
    fast = call(app, path, raw, chunked=False)
    sim.rng.seed(3)
    flask = call(app, path, raw, chunked=True)
    assert fast[0] == flask[0]
    assert fast[1] == flask[1]
    assert normalise(fast[2]) == normalise(flask[2])
    assert sim.running == 0 and not sim.waiting


def test_route_table_is_the_generation_routes(app):
    fast = GenerationFastPath(app)
    assert sorted(fast.routes) == ["/inference/v1/generate", "/v1/chat/completions", "/v1/chat/completions/batch",
                                   "/v1/completions", "/v1/messages", "/v1/responses"]


@pytest.mark.parametrize("path,envelope", [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")])
def test_unexpected_error_is_a_readable_500_on_both(app, monkeypatch, path, envelope):
    import blueprints.serving as serving

    def broken(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(serving, "header_checks", broken)
    body = orjson.dumps({"model": "test-model", "messages": MSG, "max_tokens": 2})
    for chunked in (False, True):
        status, headers, out = call(app, path, body, chunked)
        assert status.startswith("500 ")
        err = json.loads(out)
        if envelope == "openai":
            assert err["error"]["code"] == 500 and "RuntimeError: boom" in err["error"]["message"]
        else:
            assert err["type"] == "error" and err["error"]["type"] == "api_error"
            assert "RuntimeError: boom" in err["error"]["message"]


class _ResetMidBody(io.BytesIO):
    def read(self, *a):
        raise ConnectionResetError(104, "Connection reset by peer")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/responses",
                                  "/inference/v1/generate"])
def test_a_reset_mid_body_is_a_client_that_left(app, caplog, path):
    """A connection reset while the body is read is the client leaving (nginx's 499, hung up
    on), not a 500 with a traceback in the log (a stateful fuzzing helper found it)."""
    status, _, out = call(app, path, b'{"model": "test-model"}', chunked=False, body_input=_ResetMidBody())
    assert status.startswith("499 ") and out == b""
    assert "unexpected error" not in caplog.text


def test_other_methods_and_paths_still_reach_flask(app):
    environ_get = call(app, "/v1/chat/completions/", b"{}", chunked=False)
    assert environ_get[0].startswith("307")         # Flask's answer: Starlette's redirect_slashes
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"], got["headers"] = status, dict(headers)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/chat/completions", "SCRIPT_NAME": "", "QUERY_STRING": "",
               "SERVER_NAME": "sim", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b""), "wsgi.errors": io.StringIO()}
    body = b"".join(app.wsgi_app(environ, start_response))
    assert got["status"].startswith("405") and set(got["headers"]["Allow"].split(", ")) == {"POST"}    # no automatic OPTIONS (vLLM)
    assert json.loads(body) == {"detail": "Method Not Allowed"}
    status, _, out = call(app, "/tokenize", orjson.dumps({"model": "test-model", "prompt": "Hi there"}), chunked=False)
    assert status.startswith("200") and json.loads(out)["count"] == 2


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 40, "stream": True, "ignore_eos": True}),
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 30, "n": 3, "stream": True, "ignore_eos": True,
                              "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"model": "test-model", "prompt": "Hi", "max_tokens": 40, "stream": True, "ignore_eos": True}),
    ("/v1/completions", {"model": "test-model", "prompt": ["Hi", "Ho"], "max_tokens": 25, "n": 2, "stream": True, "ignore_eos": True}),
])
def test_token_blocks_give_the_bytes_of_single_tokens(app, monkeypatch, path, body):
    """Tokens due at once are rendered as one block (engine ``blocks``); the stream's bytes are
    those of rendering them one by one."""
    from generation.engine.simulator import Simulator
    sim = app.extensions["simulator"]
    raw = orjson.dumps(body)
    original = Simulator.stream
    used = []

    def stream(self, seqs, flush=False, blocks=False, deadlines=False, first_in_schedule=False):
        used.append(blocks)
        return original(self, seqs, flush, blocks and not forced_single, deadlines, first_in_schedule)
    monkeypatch.setattr(Simulator, "stream", stream)
    forced_single = False
    sim.rng.seed(5)
    blocked = call(app, path, raw, chunked=False)
    forced_single = True
    sim.rng.seed(5)
    single = call(app, path, raw, chunked=False)
    assert used == [True, True]
    assert blocked[0].startswith("200") and normalise(blocked[2]) == normalise(single[2])
    assert blocked[2].count(b"data: ") == single[2].count(b"data: ") > body["max_tokens"]


@pytest.mark.parametrize("path,body,itls", [
    ("/v1/chat/completions", {"model": "test-model", "messages": MSG, "max_tokens": 10, "ignore_eos": True,
                              "stream": True}, 9),
    ("/v1/completions", {"model": "test-model", "prompt": "Hi", "max_tokens": 10, "ignore_eos": True, "n": 2,
                         "stream": True}, 18),
])
def test_token_blocks_still_observe_every_inter_token_latency(app, path, body, itls):
    """Tokens rendered as one block are still n - 1 ITL observations per sequence (vLLM's
    inter_token_latency_seconds)."""
    sim = app.extensions["simulator"]
    before = metric_count(app, "vllm:inter_token_latency_seconds_count")
    status, _, _ = call(app, path, orjson.dumps(body), chunked=False)
    assert status.startswith("200")
    assert metric_count(app, "vllm:inter_token_latency_seconds_count") - before == itls
    assert sim.running == 0


def metric_count(app, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "SCRIPT_NAME": "", "QUERY_STRING": "",
               "SERVER_NAME": "sim", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""), "wsgi.errors": io.StringIO()}
    text = b"".join(app.wsgi_app(environ, lambda *a: None)).decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)
