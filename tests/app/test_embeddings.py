"""``POST /v1/embeddings`` in-process (WSGI transport): the openai SDK (float and its default
base64), raw httpx for case C13, input forms, determinism, dimensions and the 4xx cases."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from support import error_type_400

from support.flag_sets import EXTRA_ENV, EXTRA_FLAGS        # shared with test_render_tokenize.py


@pytest.fixture(scope="module")
def client(api):
    return api.openai(api_key="none", max_retries=0)


def post(base, body, **kw):
    return base.post("/v1/embeddings", json=body, timeout=30, **kw)


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_sdk_float(client):
    r = client.embeddings.create(model="test-model", input=["a b c", "d e"], encoding_format="float")
    assert r.object == "list"
    assert r.model == "test-model"
    assert [d.index for d in r.data] == [0, 1]
    assert all(d.object == "embedding" for d in r.data)
    for d in r.data:
        v = f32(d.embedding)
        assert v.shape == (384,)
        assert abs(float(np.linalg.norm(v.astype(np.float64))) - 1.0) < 1e-5
    assert r.usage.prompt_tokens == 5          # "a ","b ","c" + "d ","e"
    assert r.usage.total_tokens == 5
    assert not np.array_equal(f32(r.data[0].embedding), f32(r.data[1].embedding))


def test_sdk_default_base64_matches_float(client):
    floats = client.embeddings.create(model="test-model", input=["a b c", "d e"], encoding_format="float")
    # The SDK asks for base64 when no encoding_format is given, and decodes it itself.
    decoded = client.embeddings.create(model="test-model", input=["a b c", "d e"])
    for a, b in zip(floats.data, decoded.data):
        assert np.array_equal(f32(a.embedding), f32(b.embedding))


def test_c13_raw(api):
    b64 = post(api, {"model": "test-model", "input": ["a b c", "d e"], "encoding_format": "base64"})
    flt = post(api, {"model": "test-model", "input": ["a b c", "d e"], "encoding_format": "float"})
    for r in (b64, flt):
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        body = r.json()
        assert body["object"] == "list"
        assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    for bd, fd in zip(b64.json()["data"], flt.json()["data"]):
        assert isinstance(bd["embedding"], str)
        raw = base64.b64decode(bd["embedding"], validate=True)
        assert len(raw) % 4 == 0
        vec = np.frombuffer(raw, dtype="<f4")
        assert len(vec) == len(fd["embedding"]) == 384
        assert np.isfinite(vec).all()
        assert np.array_equal(vec, f32(fd["embedding"]))
    r = post(api, {"model": "test-model", "input": "x", "dimensions": 8})
    assert r.status_code == 200
    body = r.json()
    assert len(body["data"][0]["embedding"]) == 8
    assert body["usage"]["prompt_tokens"] > 0
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]


def test_deterministic_and_token_inputs(api):
    a = post(api, {"model": "test-model", "input": "This is a test."}).json()
    b = post(api, {"model": "test-model", "input": ["This is a test."]}).json()
    assert a["data"][0]["embedding"] == b["data"][0]["embedding"]
    assert a["usage"] == {"prompt_tokens": 5, "total_tokens": 5, "completion_tokens": 0,
                          "completion_tokens_details": None}
    # The same text as its token ids gives the same vector.
    ids = [3157421587, 1477013615, 186949092, 2949673445, 722245873]
    c = post(api, {"model": "test-model", "input": ids}).json()
    assert c["data"][0]["embedding"] == a["data"][0]["embedding"]
    d = post(api, {"model": "test-model", "input": [[1, 2, 3], [4, 5]]}).json()
    assert [x["index"] for x in d["data"]] == [0, 1]
    assert d["usage"] == {"prompt_tokens": 5, "total_tokens": 5, "completion_tokens": 0,
                          "completion_tokens_details": None}


def test_dimensions_is_a_renormalised_prefix(api):
    full = f32(post(api, {"model": "test-model", "input": "hello world"}).json()["data"][0]["embedding"])
    short = f32(post(api, {"model": "test-model", "input": "hello world", "dimensions": 16})
                .json()["data"][0]["embedding"])
    expect = full[:16].astype(np.float64)
    expect /= np.linalg.norm(expect)
    assert np.allclose(short, expect, atol=1e-6)


def test_model_defaults_and_404(api):
    r = post(api, {"input": "x"})
    assert r.status_code == 200 and r.json()["model"] == "test-model"
    r = post(api, {"model": "other-model", "input": "x"})
    assert r.status_code == 404
    # vLLM 0.34's pooling serving: _maybe_get_adapters' VLLMNotFoundError, param null
    assert r.json()["error"] == {"message": "The model `other-model` does not exist.", "type": "NotFoundError",
                                 "param": None, "code": 404}


@pytest.mark.parametrize("body,param,fragment", [
    ({"input": "x", "encoding_format": "hex"}, "body.encoding_format", "literal_error"),
    ({"input": "x", "encoding_format": 1}, "body.encoding_format", "literal_error"),
    # PoolingParams._set_default_parameters (vLLM 0.34 pooling_params.py:240-257), no parameter
    ({"input": "x", "dimensions": 0}, None, "Model 'test-model' only supports dimensions in range [1, 384], got 0."),
    ({"input": "x", "dimensions": -3}, None, "Model 'test-model' only supports dimensions in range [1, 384], got -3."),
    ({"input": "x", "dimensions": 385}, None, "Model 'test-model' only supports dimensions in range [1, 384], got 385."),
    ({"input": "x", "dimensions": 1.5}, "body.dimensions", "int_from_float"),
    ({"input": ""}, "input", "input cannot be an empty string"),
    ({"input": ["a", ""]}, "input", "input cannot be an empty string"),
    ({"input": []}, None, "You must pass at least one prompt"),       # pooling/base/serving.py:85-88
    ({}, "body.input", "'type': 'missing'"),      # pooling/base/protocol.py:214: no default
    ({"input": None}, "input", "non-empty"),
    ({"input": [[1, 2], []]}, "input", "empty token-id array"),
    ({"input": ["a", 1]}, "input", "input must be"),
    ({"input": [1, -2]}, "input", "input must be"),
    ({"input": {"text": "a"}}, "input", "input must be"),
    ({"input": "x", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "truncate_prompt_tokens"),
])
def test_client_errors(api, body, param, fragment):
    r = post(api, dict(body, model="test-model"))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == error_type_400(err["message"]) and err["code"] == 400
    assert err["param"] == param
    assert fragment in err["message"]


def test_invalid_json(api):
    # no Content-Type: vLLM's validate_json_request refuses it before the body is read
    r = api.post("/v1/embeddings", content=b"{not json", timeout=10)
    assert (r.status_code, r.json()["error"]) == (400, {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": None, "code": 400})
    # JSON: FastAPI's json_invalid at json.loads' position (tests/app/test_body_400.py)
    r = api.post("/v1/embeddings", content=b"{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.1")


def test_context_length_and_truncation(api):
    r = post(api, {"model": "test-model", "input": list(range(1025))})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "This model's maximum context length is 1024 tokens. However, you requested 1025 tokens in the "
        "input for embedding generation. Please reduce the length of the input.")
    r = post(api, {"model": "test-model", "input": list(range(1025)), "truncate_prompt_tokens": 3})
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens"] == 3
    same = post(api, {"model": "test-model", "input": [1022, 1023, 1024]}).json()
    assert r.json()["data"][0]["embedding"] == same["data"][0]["embedding"]


def test_messages_form(api):
    r = post(api, {"model": "test-model", "messages": [{"role": "user", "content": "This is a test"}]})
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens"] == 9


def test_never_compressed(api):
    r = api.post("/v1/embeddings", json={"model": "test-model", "input": ["a"] * 50},
                   headers={"Accept-Encoding": "gzip, deflate, br, zstd"}, timeout=30)
    assert r.status_code == 200
    assert "content-encoding" not in r.headers


def test_headers(app_client):
    port = "18123"           # the port the server would listen on
    base = app_client(*EXTRA_FLAGS, "--port", port, env=EXTRA_ENV)
    r = post(base, {"model": "test-model", "input": "x"}, headers={"X-Request-Id": "emb-req-1"})
    assert r.status_code == 200
    assert r.headers["x-inference-pod"] == "sim-pod-0"
    assert r.headers["x-inference-namespace"] == "ns1"
    assert r.headers["x-inference-port"] == port
    assert r.headers["x-request-id"] == "emb-req-1"
    assert r.json()["id"] == "embd-emb-req-1"
    # No pod headers on errors.
    r = post(base, {"model": "test-model", "input": ""})
    assert r.status_code == 400 and "x-inference-pod" not in r.headers


def test_not_served_in_mm_encoder_only_mode(app_client):
    base = app_client("--mm-encoder-only")
    r = post(base, {"model": "test-model", "input": "x"})
    assert r.status_code == 404
