"""vLLM's render answers (GenerateRequest fields beside the seeds' ``token_ids`` / ``features``),
``POST /v1/messages/render``, ``GET /load`` (``--enable-server-load-tracking``) and
``GET /tokenizer_info`` (``--enable-tokenizer-info-endpoint``) (issue 22)."""
from __future__ import annotations

import os

import time

import gevent
import pytest
from support.tokenizer_hub import MODEL, make_hub

MSG = [{"role": "user", "content": "hello there"}]
GENERATE_REQUEST_KEYS = ["request_id", "token_ids", "token_offsets", "content_parts", "sampling_params", "model",
                         "reasoning_ended", "reasoning_parser_kwargs", "return_token_ids", "output_mode", "parse_context",
                         "stream", "stream_options", "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params"]


def test_completions_render_carries_generate_request_fields(api):
    out = api.post("/v1/completions/render", json={"model": "test-model", "prompt": ["hello", "world"],
                                                   "max_tokens": 7, "temperature": 0.5, "stop": "x"}).json()
    # vLLM 0.34 dumps the whole GenerateRequest (scale_out/render/api_router.py: create_json_response ->
    # model_dump()), in its order; features left out without media (the project's render spec)
    assert [list(o) for o in out] == [GENERATE_REQUEST_KEYS] * 2
    assert (a := out[0])["output_mode"] == "tokens" and a["priority"] == 0 and a["stream"] is False
    assert all(a[k] is None for k in ("token_offsets", "content_parts", "reasoning_ended", "reasoning_parser_kwargs",
                                      "return_token_ids", "parse_context", "stream_options", "cache_salt",
                                      "kv_transfer_params", "ec_transfer_params"))
    a, b = out
    assert a["request_id"].startswith("cmpl-") and a["request_id"].endswith("-0") and b["request_id"].endswith("-1")
    assert a["model"] == "test-model"
    sp = a["sampling_params"]
    assert (sp["max_tokens"], sp["temperature"], sp["stop"], sp["n"], sp["top_p"]) == (7, 0.5, ["x"], 1, 1.0)
    out = api.post("/v1/completions/render", json={"model": "test-model", "prompt": [1, 2, 3]}).json()
    assert out[0]["sampling_params"]["max_tokens"] == 1024 - 3          # the room left
    # one prompt: cmpl-<id> without an index (vLLM's render_completion_request); the header's id first
    (one,) = api.post("/v1/completions/render", json={"model": "test-model", "prompt": "hi", "request_id": "abc"}).json()
    assert one["request_id"] == "cmpl-abc"
    (one,) = api.post("/v1/completions/render", json={"model": "test-model", "prompt": "hi", "request_id": "abc"},
                      headers={"X-Request-Id": "hdr"}).json()
    assert one["request_id"] == "cmpl-hdr"
    # a prompt past the context is the renderer's 400, as /v1/completions answers it
    for path, body in (("/v1/completions/render", {"prompt": list(range(1, 1100))}),
                       ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "hi " * 1500}]})):
        r = api.post(path, json={"model": "test-model", **body})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(
            "This model's maximum context length is 1024 tokens. However, your prompt contains ")


def test_chat_render_carries_generate_request_fields(api):
    out = api.post("/v1/chat/completions/render", json={
        "model": "test-model", "messages": MSG, "max_completion_tokens": 9, "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2}).json()
    assert list(out) == GENERATE_REQUEST_KEYS     # vLLM 0.34's GenerateRequest, dumped whole
    assert (out["reasoning_ended"], out["reasoning_parser_kwargs"]) == (None, None)      # no reasoning parser
    assert out["request_id"].startswith("chatcmpl-") and out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}
    assert (out["sampling_params"]["max_tokens"], out["sampling_params"]["logprobs"]) == (9, 2)
    out = api.post("/v1/chat/completions/render", json={
        "model": "test-model", "messages": MSG, "return_token_ids": True, "cache_salt": "salt", "priority": 3,
        "kv_transfer_params": {"do_remote_decode": True}, "ec_transfer_params": {}}).json()
    assert (out["return_token_ids"], out["cache_salt"], out["priority"]) == (True, "salt", 3)
    assert out["kv_transfer_params"] == {"do_remote_decode": True} and out["ec_transfer_params"] is None
    assert out["stream"] is False and out["stream_options"] is None


def test_render_copies_only_plain_sampling_values(api):
    deep = {"a": [[[1]]]}
    out = api.post("/v1/chat/completions/render", json={"model": "test-model", "messages": MSG, "stop": deep,
                                                        "seed": [[1]], "max_tokens": {"x": 1}}).json()
    sp = out["sampling_params"]
    assert (sp["stop"], sp["seed"], sp["max_tokens"]) == ([], None, 1024 - len(out["token_ids"]))


def test_messages_render(api):
    body = {"model": "test-model", "max_tokens": 20, "system": "be brief", "messages": MSG,
            "stop_sequences": ["END"], "temperature": 0.2, "stream": True}
    out = api.post("/v1/messages/render", json=body).json()
    count = api.post("/v1/messages/count_tokens", json=body).json()["input_tokens"]
    assert len(out["token_ids"]) == count
    # vLLM 0.34 renders the converted chat request: render_chat_request's "chatcmpl-" id (was msg_)
    # and _handle_streaming_options' stream options
    assert out["model"] == "test-model" and out["request_id"].startswith("chatcmpl-") and out["stream"] is True
    assert out["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    sp = out["sampling_params"]
    assert (sp["max_tokens"], sp["stop"], sp["temperature"]) == (20, ["END"], 0.2)
    r = api.post("/v1/messages/render", json={**body, "model": "nope"})
    # ServingRender._check_model's ErrorResponse, in vLLM's envelope (not the Anthropic one)
    assert (r.status_code, r.json()) == (404, {"error": {"message": "The model `nope` does not exist.",
                                                         "type": "NotFoundError", "param": "model", "code": 404}})


# ---- GET /load --------------------------------------------------------------------------------------

def load_reaches(client, n: int, within: float = 5.0) -> dict:
    """``GET /load`` once it says ``n`` (or at ``within`` seconds): the requests spawned before
    reach the server in their own time, later on a loaded machine than a fixed sleep allows."""
    deadline = time.monotonic() + within
    while True:
        got = client.get("/load").json()
        if got == {"server_load": n} or time.monotonic() > deadline:
            return got
        gevent.sleep(0.01)


def test_load_counts_requests_in_flight(app_client):
    api = app_client("--enable-server-load-tracking", "--time-to-first-token", "1s", "--max-num-seqs", "10")
    assert api.get("/load").json() == {"server_load": 0}
    body = {"model": "test-model", "messages": MSG, "max_tokens": 2}
    calls = [gevent.spawn(api.post, "/v1/chat/completions", json=body),
             gevent.spawn(api.post, "/v1/chat/completions", json={**body, "stream": True}),
             gevent.spawn(api.post, "/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 2})]
    assert load_reaches(api, 3) == {"server_load": 3}
    gevent.joinall(calls, timeout=5)
    assert all(c.value.status_code == 200 for c in calls)
    assert api.get("/load").json() == {"server_load": 0}
    assert api.post("/v1/chat/completions", json={"model": "nope", "messages": MSG}).status_code == 404
    assert api.get("/load").json() == {"server_load": 0}          # errors leave the count too


def test_load_counts_pooling_and_audio_requests(app_client):
    """vLLM 0.34's pooling routers (/pooling, /classify, /score, /v1/score, /rerank, /v1/rerank,
    /v2/rerank, /v2/embed) and its transcription / translation routers are load_aware_call."""
    import io

    import numpy as np
    import soundfile as sf
    flags = ("--enable-server-load-tracking", "--time-to-first-token", "1s", "--max-num-seqs", "20")
    pool = app_client("--runner", "pooling", "--convert", "embed", *flags)
    calls = [gevent.spawn(pool.post, path, json=body) for path, body in (
        ("/pooling", {"input": "hi"}), ("/score", {"queries": "a", "documents": "b"}),
        ("/v1/score", {"queries": "a", "documents": "b"}), ("/rerank", {"query": "a", "documents": ["b"]}),
        ("/v1/rerank", {"query": "a", "documents": ["b"]}), ("/v2/rerank", {"query": "a", "documents": ["b"]}),
        ("/v2/embed", {"texts": ["hi"]}), ("/v1/embeddings", {"input": "hi"}))]
    assert load_reaches(pool, 8) == {"server_load": 8}
    gevent.joinall(calls, timeout=5)
    assert all(c.value.status_code == 200 for c in calls) and pool.get("/load").json() == {"server_load": 0}
    cls = app_client("--runner", "pooling", "--convert", "classify", *flags)
    call = gevent.spawn(cls.post, "/classify", json={"input": "hi"})
    assert load_reaches(cls, 1) == {"server_load": 1}
    call.join(timeout=5)
    buf = io.BytesIO()
    sf.write(buf, np.zeros(8000, dtype="float32"), 16000, format="WAV")
    gen = app_client(*flags)
    calls = [gevent.spawn(gen.post, path, files={"file": ("a.wav", buf.getvalue(), "audio/wav")})
             for path in ("/v1/audio/transcriptions", "/v1/audio/translations")]
    assert load_reaches(gen, 2) == {"server_load": 2}
    gevent.joinall(calls, timeout=5)
    assert all(c.value.status_code == 200 for c in calls) and gen.get("/load").json() == {"server_load": 0}


def test_load_without_tracking_is_zero(app_client):
    api = app_client("--time-to-first-token", "200ms")
    call = gevent.spawn(api.post, "/v1/chat/completions", json={"model": "test-model", "messages": MSG,
                                                                "max_tokens": 2})
    gevent.sleep(0.05)
    assert api.get("/load").json() == {"server_load": 0}
    call.join(timeout=5)


# ---- GET /tokenizer_info -------------------------------------------------------------------------------

def test_tokenizer_info_needs_its_flag(api, app_client):
    assert api.get("/tokenizer_info").status_code == 404
    info = app_client("--enable-tokenizer-info-endpoint").get("/tokenizer_info").json()
    assert info == {"tokenizer_class": "SimulatedTokenizer", "model_max_length": 1024, "vocab_size": 2 ** 32,
                    "chat_template": None}


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf_home"))
    make_hub(root)
    return os.path.join(root, "hub")


def test_tokenizer_info_of_a_hugging_face_tokenizer(app_client, hub_dir):
    api = app_client("--tokenizers-cache-dir", hub_dir, "--enable-tokenizer-info-endpoint", model=MODEL)
    info = api.get("/tokenizer_info").json()
    assert info["tokenizer_class"] == type(api.sim.tokenizer._tok).__name__      # transformers' class
    assert "<|im_start|>" in info["chat_template"]
    assert info["vocab_size"] == api.sim.tokenizer.vocab_size


def test_a_pooling_model_has_no_render_routes(app_client):
    """vLLM 0.34 registers the scale-out render / derender routes for a generation model only
    (``register_scale_out_api_routers`` when "generate" or "render" is a supported task): a
    pooling model's server answers them 404 whatever the method; ``/tokenize`` stays."""
    pool = app_client("--runner", "pooling", "--convert", "embed")
    for path in ("/v1/completions/render", "/v1/chat/completions/render", "/v1/responses/render",
                 "/v1/chat/completions/derender", "/v1/completions/derender"):
        for method in ("POST", "GET"):
            r = pool.request(method, path, json={"model": "test-model", "prompt": "hi"})
            assert (r.status_code, r.json()) == (404, {"detail": "Not Found"}), (method, path)
    assert pool.post("/tokenize", json={"model": "test-model", "prompt": "hi"}).status_code == 200
    assert "/v1/completions/render" not in pool.get("/openapi.json").json()["paths"]
