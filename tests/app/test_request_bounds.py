"""Request bounds in the serving pipeline, in-process (issue 12 items in the request path):
X-Return-Error outside 100-599, the JSON Content-Type rule, ``n`` and request-size bounds
checked before anything is built, header-unsafe request ids rejected before admission, nothing
left admitted when a response fails before its first byte, logprob bounds, and in-band errors
after a stream started in each API's own format.
"""
from __future__ import annotations

import httpx
import pytest

from app import create_app
from generation.adapters import messages as am
from generation.adapters import responses as ar
from generation.config.cli import load_config

MSG = [{"role": "user", "content": "hello there"}]
CHAT = {"model": "test-model", "messages": MSG, "max_tokens": 3}


def make_client(*flags: str) -> httpx.Client:
    app = create_app(load_config(["--model", "test-model", *flags]))
    c = httpx.Client(base_url="http://sim", transport=httpx.WSGITransport(app=app), timeout=30)
    c.sim = app.extensions["simulator"]
    return c


@pytest.fixture(scope="module")
def client():
    c = make_client()
    yield c
    c.close()


@pytest.fixture(scope="module")
def rid_client():
    c = make_client("--enable-request-id-headers")
    yield c
    c.close()


def successes(sim) -> float:
    return sum(c.value for c in sim.metrics.success.values())


def idle(sim) -> bool:
    return sim.running == 0 and not sim.waiting


# ---- X-Return-Error ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["999", "0", "99", "100", "199", "600", "-1", "100000000000000000000"])
def test_x_return_error_outside_status_range_is_400_json(client, value):
    r = client.post("/v1/chat/completions", json=CHAT, headers={"X-Return-Error": value})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err == {"message": f'Invalid X-Return-Error header value "{value}": must be an HTTP status code '
                              f'from 200 to 599', "type": "BadRequestError", "param": None, "code": 400}


def test_x_return_error_outside_range_on_messages_uses_anthropic_envelope(client):
    r = client.post("/v1/messages", json={**CHAT, "max_tokens": 3}, headers={"X-Return-Error": "700"})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message":
                        'Invalid X-Return-Error header value "700": must be an HTTP status code from 200 to 599'}}


@pytest.mark.parametrize("value,type_", [("418", "APIConnectionError"), ("599", "InternalServerError"),
                                         ("404", "NotFoundError")])
def test_x_return_error_in_range_still_forces_that_status(client, value, type_):
    r = client.post("/v1/chat/completions", json=CHAT, headers={"X-Return-Error": value})
    assert r.status_code == int(value) and r.json()["error"]["type"] == type_


# ---- Content-Type ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize",
                                  "/inference/v1/generate", "/admin/config", "/v1/load_lora_adapter"])
@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"])
def test_json_routes_require_json_content_type(client, path, ctype):
    headers = {"content-type": ctype} if ctype else {}
    r = client.post(path, content=b'{"failure-injection-rate": 100}', headers=headers)
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' "
                                            "is allowed", "type": "Bad Request", "param": None, "code": 400}


def test_text_plain_cannot_change_config(client):
    before = client.sim.config.failure_injection_rate
    client.post("/admin/config", content=b'{"failure-injection-rate": 100}', headers={"content-type": "text/plain"})
    assert client.sim.config.failure_injection_rate == before


def test_messages_content_type_error_in_anthropic_envelope(client):
    r = client.post("/v1/messages", content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "1 validation error:\n  Unsupported Media Type: "
                                                              "Only 'application/json' is allowed"}}


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_content_type_variants_accepted(client, ctype):
    r = client.post("/v1/chat/completions", content=httpx.Request("POST", "/", json=CHAT).content,
                    headers={"content-type": ctype})
    assert r.status_code == 200, r.text


# ---- n and request size -------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2 ** 63, 2 ** 64 - 1, 16385])
@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", CHAT),
    ("/v1/completions", {"model": "test-model", "prompt": "hi", "max_tokens": 2}),
])
def test_n_above_vllm_max_is_400(client, path, body, n):
    r = client.post(path, json={**body, "n": n})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": f"n must be at most 16384, got {n}. To increase this limit, set the "
                                            "VLLM_MAX_N_SEQUENCES environment variable.", "type": "BadRequestError",
                                 "param": None, "code": 400}     # vLLM's _verify_num_sequences names no parameter
    assert idle(client.sim)


def test_generate_n_above_max_is_400(client):
    r = client.post("/inference/v1/generate", json={"model": "test-model", "token_ids": [1, 2],
                                                   "sampling_params": {"max_tokens": 2, "n": 2 ** 63}})
    assert r.status_code == 400 and r.json()["error"]["param"] is None


def test_huge_prompt_array_rejected_before_tokenizing(client, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("tokenized a request that can never be admitted")
    monkeypatch.setattr(client.sim.tokenizer, "encode", boom)
    monkeypatch.setattr(client.sim.tokenizer, "encode_prompt", boom, raising=False)
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": ["a"] * 800_000, "max_tokens": 1})
    # vLLM 0.34's VLLM_MAX_COMPLETION_PROMPTS (1024), a request validator: refused before anything
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "prompt list length 800000 exceeds the maximum allowed count of 1024. "
                                            "To increase this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment "
                                            "variable. (parameter=prompt)", "type": "BadRequestError", "param": "prompt",
                                 "code": 400}
    # a list of token-id lists counts as vLLM's validator counts it (anything but a flat id list)
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": [[7]] * 1025, "max_tokens": 1})
    assert (r.status_code, r.json()["error"]["message"][:51]) == (400, "prompt list length 1025 exceeds the maximum allowed")
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": [7] * 1025, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("This model's maximum context length")
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": ["a"] * 1024, "n": 2, "max_tokens": 1})
    assert r.status_code == 429
    assert r.json()["error"] == {"message": "Failed to enqueue request, waiting requests queue is full",
                                 "type": "RateLimitError", "param": None, "code": 429}
    assert idle(client.sim)


def test_n_times_prompts_over_capacity_is_429_and_at_capacity_is_admitted(client):
    cfg = client.sim.config
    cap = cfg.max_num_seqs + cfg.max_waiting_queue_length       # 5 + 1000 by default
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": ["a", "b"], "n": cap // 2 + 1,
                                             "max_tokens": 1})
    assert r.status_code == 429
    r = client.post("/v1/chat/completions", json={**CHAT, "n": cap + 1})
    assert r.status_code == 429
    r = client.post("/v1/chat/completions", json={**CHAT, "n": 7, "max_tokens": 1})
    assert r.status_code == 200 and len(r.json()["choices"]) == 7
    assert idle(client.sim)


def test_size_check_skipped_when_every_answer_is_instant(client):
    """Cache-threshold finishes need no slot: such a request is not refused by the size check."""
    r = client.post("/v1/chat/completions", json={**CHAT, "n": 1006},
                    headers={"X-Cache-Threshold-Finish-Reason": "true"})
    assert r.status_code == 200 and len(r.json()["choices"]) == 1006
    assert {c["finish_reason"] for c in r.json()["choices"]} == {"cache_threshold"}


# ---- request ids and slot leaks ----------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("rid", ["a\r\nX-Injected: 1", "a\nb", "tab\there", "nul\x00", "caf\u00e9", "euro\u20ac"])
def test_header_unsafe_body_request_id_is_400_before_admission(rid_client, stream, rid):
    sim = rid_client.sim
    before = successes(sim)
    r = rid_client.post("/inference/v1/generate", json={"model": "test-model", "token_ids": [1, 2, 3],
                                                       "request_id": rid, "stream": stream,
                                                       "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "request_id" and err["message"].startswith("request_id: must be printable ASCII")
    assert idle(sim) and successes(sim) == before


def test_header_safe_body_request_id_is_echoed(rid_client):
    r = rid_client.post("/inference/v1/generate", json={"model": "test-model", "token_ids": [1, 2, 3],
                                                       "request_id": "req-1 (retry)",
                                                       "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 200 and r.json()["request_id"] == "generate-tokens-req-1 (retry)"
    assert r.headers["x-request-id"] == "req-1 (retry)"


def test_unsafe_body_request_id_allowed_when_not_echoed(client):
    """Without --enable-request-id-headers the id only appears in the JSON body."""
    r = client.post("/inference/v1/generate", json={"model": "test-model", "token_ids": [1, 2, 3],
                                                   "request_id": "a\nb", "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 200 and r.json()["request_id"] == "generate-tokens-a\nb"


@pytest.mark.parametrize("stream", [False, True])
def test_failure_after_admission_releases_the_slot(stream, monkeypatch):
    import blueprints.serving as serving
    c = make_client()
    sim = c.sim

    def broken(*a, **k):
        assert sim.running == 1          # admitted at this point
        raise RuntimeError("broken before the first byte")
    monkeypatch.setattr(serving, "sse_body" if stream else "run_to_completion", broken)
    before = successes(sim)
    errors = sim.metrics.success["error"].value
    r = c.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert r.status_code == 500
    # counted once, under vLLM's "error" finish reason (issue 31 item 7: the counters add up)
    assert idle(sim) and successes(sim) == before + 1 and sim.metrics.success["error"].value == errors + 1
    c.close()


# ---- logprob bounds (--max-logprobs, vLLM's checks) --------------------------------------------------

@pytest.mark.parametrize("path,body,param,msg", [
    ("/v1/completions", {"prompt": "a", "logprobs": 100_000}, "logprobs",
     "Requested sample logprobs of 100000, which is greater than max allowed: 20 (parameter=logprobs, value=100000)"),
    ("/v1/completions", {"prompt": "a", "logprobs": -1}, "logprobs",
     "Requested sample logprobs of -1 (the whole vocabulary), which is greater than max allowed: 20 "
     "(parameter=logprobs)"),
    ("/v1/completions", {"prompt": "a", "logprobs": -5}, "logprobs",
     "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-5)"),
    ("/v1/completions", {"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs",
     "Requested prompt logprobs of 21, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=21)"),
    # chat's top_logprobs is SamplingParams.logprobs, the parameter vLLM's check names
    ("/v1/chat/completions", {"messages": MSG, "logprobs": True, "top_logprobs": 100_000}, "logprobs",
     "Requested sample logprobs of 100000, which is greater than max allowed: 20 (parameter=logprobs, value=100000)"),
    ("/v1/chat/completions", {"messages": MSG, "top_logprobs": 3}, "top_logprobs",
     "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)"),
])
def test_logprob_bounds(client, path, body, param, msg):
    r = client.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": msg, "type": "BadRequestError", "param": param, "code": 400}


def test_whole_vocabulary_logprobs_refused_without_a_cap():
    c = make_client("--max-logprobs", "-1")
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": "a", "logprobs": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": "a", "logprobs": 50, "max_tokens": 1})
    assert r.status_code == 200 and len(r.json()["choices"][0]["logprobs"]["top_logprobs"][0]) == 50
    c.close()


def test_responses_top_logprobs_follow_max_logprobs():
    c = make_client("--max-logprobs", "2")
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "top_logprobs": 3,
                                      "include": ["message.output_text.logprobs"]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Requested sample logprobs of 3, which is greater than max allowed: 2 "
                                             "(parameter=logprobs, value=3)")
    c.close()


# ---- in-band errors after the stream started: the API's own format ------------------------------------

def _failing_stream(first: bytes):
    def gen(*a, **k):
        yield first
        raise RuntimeError("boom")
    return gen


def test_messages_stream_error_is_an_anthropic_error_event(monkeypatch):
    c = make_client()
    monkeypatch.setattr(am, "stream_message", _failing_stream(b"event: ping\ndata: {}\n\n"))
    r = c.post("/v1/messages", json={**CHAT, "stream": True})
    assert r.status_code == 200
    assert r.text.endswith('event: error\ndata: {"type":"error","error":{"type":"api_error",'
                           '"message":"Internal server error: RuntimeError: boom"}}\n\n')
    assert "[DONE]" not in r.text and idle(c.sim)
    c.close()


def test_responses_stream_error_is_a_numbered_error_event(monkeypatch):
    c = make_client()

    def gen(sim, ctx, seq):
        yield ctx.event("response.created", {})
        raise RuntimeError("boom")
    monkeypatch.setattr(ar, "stream_response", gen)
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "stream": True})
    # ResponseErrorEvent's fields in the openai SDK model's (alphabetical) order, as vLLM 0.34 dumps it
    assert r.text.endswith('event: error\ndata: {"code":"500","message":"Internal server error: RuntimeError: boom",'
                           '"param":null,"sequence_number":1,"type":"error"}\n\n')
    assert idle(c.sim)
    c.close()


def test_chat_stream_error_is_a_data_event_then_done(monkeypatch):
    import generation.adapters.chat as ac
    c = make_client()
    monkeypatch.setattr(ac, "stream_chat", _failing_stream(b"data: {}\n\n"))
    r = c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.text.endswith('data: {"error":{"message":"Internal server error: RuntimeError: boom",'
                           '"type":"InternalServerError","param":null,"code":500}}\n\ndata: [DONE]\n\n')
    assert idle(c.sim)
    c.close()
