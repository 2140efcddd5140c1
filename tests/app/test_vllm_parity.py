"""vLLM wire parity (issue 8): what a client of a real vLLM server sees where the reference
simulator differs.  In-process through Flask's WSGI app (httpx's WSGI transport), so these run
in the fast tier; the openai and anthropic SDKs are driven over the same transport.

Sources: vLLM's ``entrypoints/openai/{chat_completion,completion}/protocol.py`` validators and
response models, ``orca_metrics.py`` for the load-report header, and the openai SDK's types.
"""
from __future__ import annotations

import json
import re

import pytest

from support import INPROC_URL, SimClient, make_app, metric, named_events, scrape, sse_events

_apps: dict = {}


def make_client(*flags: str) -> SimClient:
    """An in-process client (:class:`support.SimClient`) on a simulator built from ``flags``
    (apps cached per flags)."""
    key = flags
    if key not in _apps:
        _apps[key] = make_app("--seed", "7", *flags)
    return SimClient(INPROC_URL, app=_apps[key])


@pytest.fixture(scope="module")
def client():
    return make_client()


@pytest.fixture(scope="module")
def echo_client():
    return make_client("--mode", "echo")


def sse(body: str) -> list:
    out = []
    for block in body.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                p = line[6:]
                out.append(p if p == "[DONE]" else json.loads(p))
    return out


def named(body: str) -> list:
    out = []
    for block in body.split("\n\n"):
        name = data = None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            out.append((name, data))
    return out


CHAT = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 5}
MSGS = [{"role": "user", "content": "Hello there"}]


# ---- model omitted / null / "" -> the first served model --------------------------------------
@pytest.mark.parametrize("model", ["<absent>", None, ""])
@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3}),
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 3}),
    ("/v1/responses", {"input": "Hello", "max_output_tokens": 3}),
    ("/v1/embeddings", {"input": "Hello"}),
    ("/tokenize", {"prompt": "Hello"}),
    ("/v1/completions/render", {"prompt": "Hello"}),
    ("/v1/chat/completions/render", {"messages": MSGS}),
])
def test_model_omitted_null_or_empty_serves_the_first_model(client, path, body, model):
    body = dict(body)
    if model != "<absent>":
        body["model"] = model
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    if path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"):
        assert data["model"] == "test-model"        # these answers name the model they used


@pytest.mark.parametrize("model,error", [
    ("<absent>", "{'type': 'missing', 'loc': 'body.model', 'msg': 'Field required', 'input': '<dict of 2 items>'}"),
    (None, "{'type': 'string_type', 'loc': 'body.model', 'msg': 'Input should be a valid string', 'input': 'None'}"),
    ("", "{'type': 'value_error', 'loc': 'body.model', 'msg': 'Value error, Model is required', 'input': '', "
         "'ctx': {'error': ValueError('Model is required')}}"),
])
def test_anthropic_messages_require_a_model(client, model, error):
    """Not on /v1/messages: vLLM's AnthropicMessagesRequest declares ``model: str`` without a
    default (anthropic/protocol.py:272) and its ``validate_model`` (:362) refuses an empty one."""
    body = {"messages": MSGS, "max_tokens": 3, **({} if model == "<absent>" else {"model": model})}
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "1 validation error:\n  " + error


def test_unknown_model_is_still_404(client):
    r = client.post("/v1/chat/completions", json={"model": "nope", **CHAT})
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "model"


# ---- return_token_ids ----------------------------------------------------------------------
def test_chat_return_token_ids_non_streaming(client):
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "return_token_ids": True})
    d = r.json()
    assert isinstance(d["prompt_token_ids"], list) and all(isinstance(t, int) for t in d["prompt_token_ids"])
    assert len(d["prompt_token_ids"]) == d["usage"]["prompt_tokens"]
    assert len(d["choices"][0]["token_ids"]) == d["usage"]["completion_tokens"]


def test_chat_without_return_token_ids_has_no_token_ids(client):
    d = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT}).json()
    assert d.get("prompt_token_ids") is None
    assert d["choices"][0].get("token_ids") is None


def test_chat_return_token_ids_streaming(client):
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "stream": True,
                                                   "return_token_ids": True,
                                                   "stream_options": {"include_usage": True}})
    ev = [e for e in sse(r.text) if e != "[DONE]"]
    usage = ev[-1]["usage"]
    assert len(ev[0]["prompt_token_ids"]) == usage["prompt_tokens"]
    assert all(e.get("prompt_token_ids") is None for e in ev[1:])
    ids = [t for e in ev for c in e["choices"] for t in (c.get("token_ids") or [])]
    assert len(ids) == usage["completion_tokens"]


def test_completions_return_token_ids(client):
    d = client.post("/v1/completions", json={"model": "test-model", "prompt": ["Hello there", "Hi"],
                                             "max_tokens": 4, "return_token_ids": True}).json()
    assert [len(c["prompt_token_ids"]) for c in d["choices"]] == [2, 1]
    assert sum(len(c["token_ids"]) for c in d["choices"]) == d["usage"]["completion_tokens"]
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hello there", "max_tokens": 4,
                                             "stream": True, "return_token_ids": True})
    ev = [e for e in sse(r.text) if e != "[DONE]"]
    assert ev[0]["choices"][0]["prompt_token_ids"] and len(ev[0]["choices"][0]["prompt_token_ids"]) == 2
    assert all(e["choices"][0].get("prompt_token_ids") is None for e in ev[1:])
    text = "".join(e["choices"][0]["text"] for e in ev)
    ids = [t for e in ev for t in (e["choices"][0].get("token_ids") or [])]
    assert len(ids) >= 1 and text


# ---- prompt_logprobs -----------------------------------------------------------------------
def test_completions_prompt_logprobs(client):
    d = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hello there friend",
                                             "max_tokens": 2, "prompt_logprobs": 1}).json()
    pl = d["choices"][0]["prompt_logprobs"]
    assert len(pl) == d["usage"]["prompt_tokens"] == 3
    assert pl[0] is None
    for entry in pl[1:]:
        assert 1 <= len(entry) <= 2
        for tid, lp in entry.items():
            assert int(tid) >= 0
            assert set(lp) == {"logprob", "rank", "decoded_token"}
            assert lp["logprob"] <= 0 and lp["rank"] >= 1


def test_chat_prompt_logprobs(client):
    d = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "prompt_logprobs": 0}).json()
    pl = d["prompt_logprobs"]
    assert len(pl) == d["usage"]["prompt_tokens"] and pl[0] is None and all(len(e) == 1 for e in pl[1:])


@pytest.mark.parametrize("path,body", [("/v1/completions", {"prompt": "Hi"}), ("/v1/chat/completions", {"messages": MSGS})])
def test_prompt_logprobs_with_stream_is_400(client, path, body):
    r = client.post(path, json={"model": "test-model", **body, "stream": True, "prompt_logprobs": 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("`prompt_logprobs` are not available when `stream=True`. "
                                                "(parameter=prompt_logprobs)")
    assert r.json()["error"]["param"] == "prompt_logprobs"


def test_generate_logprobs(client):
    d = client.post("/inference/v1/generate", json={"token_ids": [1, 2, 3],
                                                    "sampling_params": {"max_tokens": 3, "logprobs": 2}}).json()
    ch = d["choices"][0]
    content = ch["logprobs"]["content"]
    assert len(content) == len(ch["token_ids"])
    for item, tid in zip(content, ch["token_ids"]):            # vLLM's GenerateLogProbs
        assert (item["token_id"], item["rank"], set(item)) == (tid, 1, {"token_id", "logprob", "rank", "top_logprobs"})
        assert [a["rank"] for a in item["top_logprobs"]] == [1, 2]
        assert (item["top_logprobs"][0]["token_id"], item["top_logprobs"][0]["logprob"]) == (tid, item["logprob"])
    d = client.post("/inference/v1/generate", json={"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}).json()
    assert d["choices"][0].get("logprobs") is None


# ---- logprob limits ------------------------------------------------------------------------
def test_max_logprobs_default_20(client):
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2, "logprobs": 21})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Requested sample logprobs of 21, which is greater than max allowed: 20 "
                                                "(parameter=logprobs, value=21)")
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "logprobs": True, "top_logprobs": 21})
    assert r.status_code == 400 and "greater than max allowed: 20" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "logprobs": True, "top_logprobs": 20})
    assert r.status_code == 200
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2,
                                             "prompt_logprobs": 21})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Requested prompt logprobs of 21, which is greater than max allowed: 20 "
                                                "(parameter=prompt_logprobs, value=21)")


def test_max_logprobs_flag():
    c = make_client("--max-logprobs", "3")
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2, "logprobs": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    assert c.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2,
                                           "logprobs": 3}).status_code == 200


def test_top_logprobs_without_logprobs_is_400(client):
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "top_logprobs": 2})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("when using `top_logprobs`, `logprobs` must be set to true. "
                                                "(parameter=top_logprobs)")
    assert r.json()["error"]["param"] == "top_logprobs"


@pytest.mark.parametrize("path,body,field", [
    ("/v1/completions", {"prompt": "Hi", "logprobs": -2}, "logprobs"),
    ("/v1/chat/completions", {"messages": MSGS, "logprobs": True, "top_logprobs": -2}, "top_logprobs"),
])
def test_negative_logprobs_are_400(client, path, body, field):
    r = client.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"`{field}` must be a positive value or -1. (parameter={field}, value=-2)"


def test_echo_logprobs_first_prompt_token_is_null(client):
    d = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hello there friend", "max_tokens": 3,
                                             "echo": True, "logprobs": 1}).json()
    lp = d["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(v is not None for v in lp["token_logprobs"][1:])
    assert all(v is not None for v in lp["top_logprobs"][1:])


# ---- usage as vLLM counts it --------------------------------------------------------------
def _chunks(c, path, body):
    return [e for e in sse(c.post(path, json=body).text) if e != "[DONE]"]


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "Hi"})])
def test_continuous_usage_alone_changes_nothing(client, path, body):
    ev = _chunks(client, path, {"model": "test-model", **body, "max_tokens": 4, "stream": True,
                                "stream_options": {"continuous_usage_stats": True}})
    assert all(e.get("usage") is None for e in ev)


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "Hi"})])
def test_continuous_usage_with_include_usage(client, path, body):
    ev = _chunks(client, path, {"model": "test-model", **body, "max_tokens": 4, "stream": True,
                                "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert all(e.get("usage") is not None for e in ev)
    assert ev[-1]["choices"] == []


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "Hi"})])
def test_force_include_usage(path, body):
    c = make_client("--enable-force-include-usage")
    ev = _chunks(c, path, {"model": "test-model", **body, "max_tokens": 4, "stream": True})
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["total_tokens"] >= 2
    assert all(e.get("usage") is not None for e in ev)


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "Hi"})])
def test_stream_options_without_stream_is_400(client, path, body):
    r = client.post(path, json={"model": "test-model", **body, "stream_options": {"include_usage": True}})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Stream options can only be defined when `stream=True`. "
                                                "(parameter=stream_options)")
    assert r.json()["error"]["param"] == "stream_options"


def test_anthropic_message_delta_usage_has_input_tokens(client):
    ac = client.anthropic()   # the SDK over the in-process transport (its own httpx fork)
    with ac.messages.stream(model="test-model", max_tokens=5, messages=MSGS) as stream:
        events = list(stream)
        final = stream.get_final_message()
    delta = [e for e in events if e.type == "message_delta"][0]
    count = ac.messages.count_tokens(model="test-model", messages=MSGS).input_tokens
    assert delta.usage.input_tokens == count
    assert final.usage.input_tokens == count and final.usage.output_tokens >= 1


def _openai(client):
    return client.openai()


def test_responses_usage_strict_round_trip(client):
    from openai.types.responses import Response
    r = client.post("/v1/responses", json={"model": "test-model", "input": "Hello", "max_output_tokens": 5})
    resp = Response.model_validate_json(r.text, strict=True)
    assert resp.usage.input_tokens_details is not None and resp.usage.output_tokens_details is not None
    r = client.post("/v1/responses", json={"model": "test-model", "input": "Hello", "max_output_tokens": 5,
                                           "stream": True})
    done = [d for n, d in named(r.text) if n in ("response.completed", "response.incomplete")][-1]
    Response.model_validate_json(json.dumps(done["response"]), strict=True)


def test_responses_stream_cut_by_max_output_tokens_ends_incomplete():
    c = make_client()
    r = c.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 2,
                                      "stream": True, "ignore_eos": True})
    ev = named(r.text)
    names = [n for n, _ in ev]
    assert names[-1] == "response.incomplete" and "response.completed" not in names
    last = ev[-1][1]["response"]
    assert last["status"] == "incomplete" and last["incomplete_details"] == {"reason": "max_output_tokens"}
    sdk = _openai(c)
    with sdk.responses.stream(model="test-model", input="Hi", max_output_tokens=200) as s:
        events = list(s)
    # a random answer reaches the cap now and then (~1 in 400): then it is incomplete too
    capped = events[-1].response.usage.output_tokens == 200
    assert events[-1].type == ("response.incomplete" if capped else "response.completed")


# ---- routing headers -----------------------------------------------------------------------
def test_orca_load_report_text_and_json(client):
    r = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT},
                    headers={"endpoint-load-metrics-format": "TEXT"})
    h = r.headers["endpoint-load-metrics"]
    assert h.startswith("TEXT ")
    parts = dict(p.split("=") for p in h[5:].split(", "))
    assert set(parts) >= {"named_metrics.kv_cache_usage_perc", "named_metrics.num_requests_waiting",
                          "named_metrics.num_requests_running"}
    assert all(float(v) >= 0 for v in parts.values())
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2},
                    headers={"endpoint-load-metrics-format": "json"})
    h = r.headers["endpoint-load-metrics"]
    assert h.startswith("JSON ")
    assert set(json.loads(h[5:])["named_metrics"]) >= {"kv_cache_usage_perc", "num_requests_waiting"}
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2})
    assert "endpoint-load-metrics" not in r.headers
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2},
                    headers={"endpoint-load-metrics-format": "BIN"})
    assert "endpoint-load-metrics" not in r.headers


def test_x_request_id_names_the_body_id(client):
    d = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT},
                    headers={"X-Request-Id": "abc-123"}).json()
    assert d["id"] == "chatcmpl-abc-123"
    d = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2},
                    headers={"X-Request-Id": "abc-124"}).json()
    assert d["id"] == "cmpl-abc-124"


def test_x_request_id_echoed_on_errors_with_flag():
    c = make_client("--enable-request-id-headers")
    r = c.post("/v1/chat/completions", json={"model": "nope", **CHAT}, headers={"X-Request-Id": "err-1"})
    assert r.status_code == 404 and r.headers["X-Request-Id"] == "err-1"
    r = c.post("/v1/chat/completions", json={"model": "test-model", **CHAT}, headers={"X-Request-Id": "ok-1"})
    assert r.status_code == 200 and r.headers["X-Request-Id"] == "ok-1"


def test_wrong_method_is_405_with_fastapis_detail(client):
    # Starlette's router raises its own HTTPException, which vLLM's handler (registered for
    # FastAPI's subclass) does not catch: FastAPI's default body, allow naming the route's method
    r = client.get("/v1/chat/completions")
    assert (r.status_code, r.json(), r.headers["allow"]) == (405, {"detail": "Method Not Allowed"}, "POST")
    r = client.post("/v1/models")
    assert (r.status_code, r.json(), r.headers["allow"]) == (405, {"detail": "Method Not Allowed"}, "GET")
    r = client.delete("/ping")       # /ping's GET route comes first in vLLM's router
    assert (r.status_code, r.headers["allow"]) == (405, "GET")


def test_x_request_id_on_every_response_with_flag():
    """vLLM's request-id middleware is outermost: --api-key's 401 and plain routes carry it too,
    a fresh id when the client sent none (the body id and the header then agree)."""
    c = make_client("--enable-request-id-headers", "--api-key", "k")
    r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, headers={"X-Request-Id": "auth-1"})
    assert r.status_code == 401 and r.headers["X-Request-Id"] == "auth-1"
    r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, headers={"Authorization": "Bearer k"})
    assert r.status_code == 200 and r.json()["id"] == "cmpl-" + r.headers["X-Request-Id"]
    assert make_client("--enable-request-id-headers").get("/health").headers["X-Request-Id"]


def test_routing_errors_are_fastapis_detail(client):
    # vLLM's pooling/classify/test_online.py::test_score reads response.json()["detail"]
    r = client.get("/v1/no-such-route")
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    assert client.post("/static/x").status_code == 404       # no static files route, as vLLM
    r = client.get("/v1/messages")          # Anthropic clients keep Anthropic's envelope
    assert r.status_code == 405 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path,body", [("/v1/completions", {"prompt": "Hi"}), ("/v1/chat/completions", {"messages": MSGS})])
def test_negative_prompt_logprobs_is_400(client, path, body):
    r = client.post(path, json={"model": "test-model", **body, "prompt_logprobs": -2})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "`prompt_logprobs` must be a positive value or -1. "
                                            "(parameter=prompt_logprobs, value=-2)", "type": "BadRequestError",
                                 "param": "prompt_logprobs", "code": 400}
    # 0 (the prompt token alone) streams: vLLM refuses only > 0 and -1 with stream
    r = client.post(path, json={"model": "test-model", **body, "prompt_logprobs": 0, "stream": True, "max_tokens": 2})
    assert r.status_code == 200


def test_continuous_usage_counts_up(client):
    ev = _chunks(client, "/v1/completions", {"model": "test-model", "prompt": "Hello there", "max_tokens": 4,
                                             "ignore_eos": True, "stream": True,
                                             "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    done = [e["usage"]["completion_tokens"] for e in ev]
    assert done == [1, 2, 3, 4, 4]       # 4 token chunks (the last one finishes), the usage chunk
    assert all(e["usage"]["prompt_tokens"] == 2 for e in ev)


def test_echo_logprobs_stream_first_chunk_carries_the_prompt(echo_client):
    ev = _chunks(echo_client, "/v1/completions", {"model": "test-model", "prompt": "Hello there friend",
                                                  "max_tokens": 3, "echo": True, "logprobs": 1, "stream": True})
    first = ev[0]["choices"][0]       # vLLM: the prompt prepended to the first token (issue 22)
    assert first["text"].startswith("Hello there friend") and len(first["text"]) > len("Hello there friend")
    assert first["logprobs"]["token_logprobs"][0] is None and first["logprobs"]["top_logprobs"][0] is None
    assert None not in first["logprobs"]["token_logprobs"][1:]
    assert first["logprobs"]["text_offset"][-1] == len("Hello there friend")
    later = [e["choices"][0]["logprobs"] for e in ev[1:] if e["choices"] and e["choices"][0]["text"]]
    assert later and all(None not in x["token_logprobs"] for x in later)


def test_body_request_id_names_the_id_and_the_header_wins(client):
    d = client.post("/v1/chat/completions", json={"model": "test-model", **CHAT, "request_id": "body-1"}).json()
    assert d["id"] == "chatcmpl-body-1"
    d = client.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2,
                                             "request_id": "body-2"}, headers={"X-Request-Id": "hdr-2"}).json()
    assert d["id"] == "cmpl-hdr-2"      # vLLM's _base_request_id: the header first


# ---- cases C34 and C36 of ../shared/cases (each an example of a kind checked above) ----------------
HI = [{"role": "user", "content": "hi"}]


# ---- C34: --enable-force-include-usage ----------------------------------------------------------
def test_c34_force_include_usage_without_stream_options(app_client):
    c = app_client("--enable-force-include-usage")
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": HI, "max_tokens": 5,
                                              "stream": True})
    assert r.status_code == 200
    ev = sse_events(r.text)
    assert ev[-1] == "[DONE]"
    last = ev[-2]
    assert last["choices"] == []
    content_tokens = sum(1 for e in ev[:-2] for ch in e["choices"] if ch["delta"].get("content"))
    assert last["usage"]["completion_tokens"] == content_tokens >= 1


# ---- C36: Responses stream cut by max_output_tokens -----------------------------------------------
def test_c36_responses_incomplete_event(app_client):
    c = app_client()
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 4,
                                      "ignore_eos": True, "stream": True})
    ev = named_events(r.text)
    name, data = ev[-1]
    assert name == "response.incomplete"
    assert data["response"]["status"] == "incomplete"
    assert data["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    # "With no cap reached, the last event stays response.completed": a random answer may still
    # reach the cap (then it is incomplete), so the rule is checked per answer, over several.
    ends = []
    for _ in range(5):
        r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 500,
                                          "stream": True})
        name, data = named_events(r.text)[-1]
        capped = data["response"]["usage"]["output_tokens"] == 500
        assert name == ("response.incomplete" if capped else "response.completed")
        ends.append(name)
    assert "response.completed" in ends


def test_metrics_routes_as_vllm_mounts_them(client):
    """vLLM 0.34 (serve/instrumentator/metrics.py): GET /metrics is the instrumentator's route;
    other methods there and any path starting with /metrics reach prometheus_client's ASGI app
    (format from Accept, name[] filter, gzip when accepted)."""
    r = client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    r = client.post("/metrics?name[]=vllm:num_requests_running&name[]=vllm:e2e_request_latency_seconds_count")
    assert r.status_code == 200 and re.sub(r"} [0-9.]+\n", "} N\n", r.text) == (
        '# HELP vllm:num_requests_running Number of requests in model execution batches.\n'
        '# TYPE vllm:num_requests_running gauge\n'
        'vllm:num_requests_running{engine="0",model_name="test-model"} N\n'
        '# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n'
        '# TYPE vllm:e2e_request_latency_seconds histogram\n'
        'vllm:e2e_request_latency_seconds_count{engine="0",model_name="test-model"} N\n')
    r = client.get("/metrics/", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    # the client decompressed it (the process' own figures, vLLM's too, move between two scrapes)
    def lines(text):
        return [line for line in text.splitlines() if not line.startswith(("process_", "python_gc_"))]
    assert lines(r.text) == lines(client.get("/metrics").text)
    r = client.delete("/metrics.txt", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert r.text.endswith("# EOF\n")
    assert client.get("/metric").status_code == 404


def test_answer_role_is_the_last_messages_without_a_generation_prompt(client):
    """vLLM 0.34 ``get_chat_request_role``: with ``add_generation_prompt: false`` the answer
    takes the last message's role, and ``echo`` then repeats that message; otherwise
    ``assistant``, and echo only repeats an assistant's last message."""
    msgs = [{"role": "user", "content": "hi"}, {"role": "user", "content": "more"}]
    body = {"model": "test-model", "messages": msgs, "max_tokens": 2, "ignore_eos": True, "echo": True}
    m = client.post("/v1/chat/completions", json={**body, "add_generation_prompt": False}).json()["choices"][0]["message"]
    assert m["role"] == "user" and m["content"].startswith("more")
    r = client.post("/v1/chat/completions", json={**body, "add_generation_prompt": False, "stream": True})
    first = json.loads(r.text.split("\n\n")[0][len("data: "):])
    assert first["choices"][0]["delta"] == {"role": "user", "content": ""}
    m = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert m["role"] == "assistant" and not m["content"].startswith("more")


def test_a_non_json_post_to_no_post_route_is_the_routers_404_or_405(client):
    """vLLM checks the content type inside each POST route (validate_json_request), after
    routing: an unknown path or a GET-only route answers 404 / 405 whatever the body's type
    (curl's -d sends application/x-www-form-urlencoded)."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = client.post("/nope", content=b"{}", headers=form)
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    r = client.post("/health", content=b"{}", headers=form)
    assert (r.status_code, r.json(), r.headers["allow"]) == (405, {"detail": "Method Not Allowed"}, "GET")
    r = client.post("/v1/chat/completions", content=b"{}", headers=form)
    assert (r.status_code, r.json()) == (400, {"error": {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": None, "code": 400}})


def test_model_cards_carry_vllms_permission_list(client):
    """vLLM 0.34's ModelCard: ``permission=[ModelPermission()]``, a fresh id per card."""
    cards = client.get("/v1/models").json()["data"]
    perm = cards[0]["permission"]
    assert len(perm) == 1 and perm[0]["id"].startswith("modelperm-") and len(perm[0]["id"]) == 42
    assert {k: v for k, v in perm[0].items() if k not in ("id", "created")} == {
        "object": "model_permission", "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
        "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
        "group": None, "is_blocking": False}


def test_every_reader_of_kv_usage_agrees_with_metrics(app_client):
    """The ORCA load header, gRPC's GetLoads and the data-parallel balancer read the KV usage
    /metrics reports (they read 0.0 without --enable-kvcache), and in step mode the engine's own
    queue and batch."""
    import gevent
    from blueprints.common import orca_header
    from generation.metrics.scrape import kv_cache_usage
    from server.dp_api import engine_counts
    from server.grpc_support import scheduler_state
    for flags in (("--inter-token-latency", "50ms"), ("--latency-calculator", "step", "--force-dummy-tokenizer")):
        c = app_client(*flags, "--max-num-seqs", "1")
        body = {"model": "test-model", "prompt": "a b c d e f g h", "max_tokens": 200, "ignore_eos": True}
        jobs = [gevent.spawn(c.post, "/v1/completions", json=body) for _ in range(2)]
        gevent.sleep(0.3)
        usage = metric(scrape(c), "vllm:kv_cache_usage_perc")
        assert usage > 0 and kv_cache_usage(c.sim) == usage
        assert engine_counts(c.sim) == [1, 1, usage]
        assert scheduler_state(c.sim)[:3] == (1, 1, usage)
        assert json.loads(orca_header(c.sim, "json")[5:])["named_metrics"] == {
            "kv_cache_usage_perc": usage, "num_requests_waiting": 1.0, "num_requests_running": 1.0}
        for j in jobs:
            j.kill()
