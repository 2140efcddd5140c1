"""``POST /inference/v1/generate`` in-process (api.md 5.5, cases 79-83, C32)."""
from __future__ import annotations

import pytest

from support import TIMING_PATHS, sse_events

URL = "/inference/v1/generate"
BASIC = {"model": "test-model", "token_ids": [1, 2, 3, 4], "sampling_params": {"max_tokens": 5}}
REMOTE = {"do_remote_decode": False, "do_remote_prefill": True, "remote_engine_id": "DUMMY_ID",
          "remote_block_ids": ["DUMMY_ID"], "remote_host": "DUMMY", "remote_port": 1234, "tp_size": 1}


def post(base, body, **kw):
    return base.post(URL, json=body, timeout=60, **kw)


def stream(base, body, **kw):
    r = post(base, dict(body, stream=True), **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return sse_events(r.text)


def test_basic_case_79_and_c32_3(api):
    r = post(api, BASIC)
    assert r.status_code == 200
    body = r.json()
    assert body["request_id"] and body["id"] == body["request_id"]
    assert body["model"] == "test-model"
    assert body["ec_transfer_params"] is None
    assert "kv_transfer_params" not in body
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] in ("stop", "length")
    ids = choice["token_ids"]
    assert 1 <= len(ids) <= 5 and all(isinstance(t, int) for t in ids)
    assert (choice["finish_reason"] == "length") == (len(ids) == 5)
    u = body["usage"]
    assert u["prompt_tokens"] == 4
    assert u["completion_tokens"] == len(ids)
    assert u["total_tokens"] == 4 + len(ids)


def test_missing_fields_case_80(api):
    r = post(api, {"model": "test-model", "sampling_params": {"max_tokens": 5}})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "Missing input token_ids", "type": "BadRequestError",
                                 "param": "token_ids", "code": 400}
    r = post(api, {"model": "test-model", "token_ids": [1, 2, 3]})      # vLLM defaults it (issue 22)
    assert r.status_code == 200


@pytest.mark.parametrize("where", ["root", "extra_args"])
def test_remote_decode_case_81(api, where):
    body = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 5}}
    kv = {"do_remote_decode": True}
    if where == "root":
        body["kv_transfer_params"] = kv
    else:
        body["sampling_params"] = {"max_tokens": 5, "extra_args": {"kv_transfer_params": kv}}
    r = post(api, body)
    assert r.status_code == 200
    out = r.json()
    assert out["kv_transfer_params"] == REMOTE
    assert out["choices"][0]["finish_reason"] == "remote_decode"
    assert len(out["choices"][0]["token_ids"]) >= 1
    # Remote decode cannot stream.
    r = post(api, dict(body, stream=True))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Prefill does not support streaming"


def test_stream_c32_1(api):
    events = stream(api, BASIC)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks
    rid = chunks[0]["request_id"]
    assert rid
    finals = [c for c in chunks if c["choices"][0]["finish_reason"] is not None]
    assert len(finals) == 1 and finals[0] is chunks[-1]
    total = 0
    for c in chunks:
        # vLLM 0.34's GenerateTokensStreamResponse, in its order: usage null without stream_options
        assert list(c) == ["request_id", "usage", "output_mode", "choices"] and c["output_mode"] == "tokens"
        assert c["usage"] is None
        assert list(c["choices"][0]) == ["index", "finish_reason", "stop_reason", "token_ids", "routed_experts",
                                         "sampling_mask", "weight_versions", "logprobs"]
        assert c["request_id"] == rid
        (ch,) = c["choices"]
        assert ch["index"] == 0
        assert isinstance(ch["token_ids"], list) and len(ch["token_ids"]) == 1
        assert all(isinstance(t, int) for t in ch["token_ids"])
        total += len(ch["token_ids"])
    assert 1 <= total <= 5
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_stream_usage_c32_2(api):
    events = stream(api, dict(BASIC, stream_options={"include_usage": True}))
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    token_chunks = events[:-2]
    n = sum(len(c["choices"][0]["token_ids"]) for c in token_chunks)
    assert usage_chunk["request_id"] == token_chunks[0]["request_id"]
    assert usage_chunk["usage"] == {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}
    assert all(c["usage"] is None for c in token_chunks)      # (running usage: continuous_usage_stats)
    assert list(usage_chunk) == ["request_id", "usage", "output_mode", "choices"]      # dumped exclude_none


def test_stream_continuous_usage(api):
    """``continuous_usage_stats`` gives each token chunk its choice's running usage, as vLLM 0.34's
    generate stream (it was ignored on the tokens level)."""
    events = stream(api, dict(BASIC, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    token_chunks = events[:-2]
    assert [c["usage"]["completion_tokens"] for c in token_chunks] == list(range(1, len(token_chunks) + 1))
    assert all(c["usage"]["prompt_tokens"] == 4 and c["usage"]["completion_tokens_details"] is None
               for c in token_chunks)


def test_stream_max_tokens_1_case_82(api):
    events = stream(api, {"model": "test-model", "token_ids": [5], "sampling_params": {"max_tokens": 1}})
    assert events[-1] == "[DONE]"
    (chunk,) = events[:-1]
    assert chunk["choices"][0]["finish_reason"] == "length"
    assert len(chunk["choices"][0]["token_ids"]) == 1


def test_ignore_eos_exact_length(api):
    for where in ("root", "sampling_params"):
        body = {"model": "test-model", "token_ids": [1, 2], "sampling_params": {"max_tokens": 7}}
        if where == "root":
            body["ignore_eos"] = True
        else:
            body["sampling_params"]["ignore_eos"] = True
        out = post(api, body).json()
        assert len(out["choices"][0]["token_ids"]) == 7
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["completion_tokens"] == 7
        events = stream(api, body)
        assert sum(len(c["choices"][0]["token_ids"]) for c in events[:-1]) == 7
        assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_n_choices(api):
    body = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4, "n": 2},
            "ignore_eos": True}
    out = post(api, body).json()
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert all(len(c["token_ids"]) == 4 for c in out["choices"])
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}
    events = stream(api, body)[:-1]
    for i in (0, 1):
        mine = [c for c in events if c["choices"][0]["index"] == i]
        assert len(mine) == 4
        assert [c["choices"][0]["finish_reason"] for c in mine] == [None, None, None, "length"]


def test_empty_token_ids_allowed(api):
    r = post(api, {"model": "test-model", "token_ids": [], "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens"] == 0


def test_body_request_id(api):
    """vLLM answers with its engine request's id, ``generate-tokens-<id>`` (``serve_tokens``)."""
    r = post(api, dict(BASIC, request_id="my-req-7"))
    assert r.json()["request_id"] == "generate-tokens-my-req-7"
    events = stream(api, dict(BASIC, request_id="my-req-8"))
    assert {c["request_id"] for c in events[:-1]} == {"generate-tokens-my-req-8"}


@pytest.mark.parametrize("body,status,param", [
    (dict(BASIC, token_ids=[1, -1]), 400, "token_ids[1]"),
    (dict(BASIC, token_ids=[1, 2.5]), 400, "token_ids[1]"),
    (dict(BASIC, token_ids=[1, 4294967296]), 400, "token_ids[1]"),
    (dict(BASIC, token_ids="1 2 3"), 400, "token_ids"),
    (dict(BASIC, sampling_params=[5]), 400, "sampling_params"),
    (dict(BASIC, sampling_params={"max_tokens": "five"}), 400, "body.sampling_params.max_tokens"),
    (dict(BASIC, sampling_params={"max_tokens": 0}), 400, "max_tokens"),
    (dict(BASIC, sampling_params={"n": 0}), 400, None),            # vLLM's _verify_num_sequences names none
    (dict(BASIC, stream="maybe"), 400, "body.stream"),
    (dict(BASIC, stream_options={"include_usage": 2}), 400, "body.stream_options.include_usage"),
    (dict(BASIC, kv_transfer_params=[1]), 400, "kv_transfer_params"),
    (dict(BASIC, features={"mm_hashes": {"image": "abc"}}), 400, "features.mm_hashes.image"),
    (dict(BASIC, features={"mm_hashes": ["abc"]}), 400, "features.mm_hashes"),
    (dict(BASIC, model="nope"), 404, "model"),
])
def test_client_errors(api, body, status, param):
    r = post(api, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_model_omitted_serves_the_first_model(api):
    """vLLM's ``_check_model`` accepts a request without ``model`` (issue 8); it was a 404."""
    r = post(api, {"token_ids": [1], "sampling_params": {}})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "test-model"


def test_context_window(api):
    r = post(api, {"model": "test-model", "token_ids": [7] * 1024, "sampling_params": {"max_tokens": 3}})
    assert r.status_code == 400
    assert "maximum context length is 1024 tokens" in r.json()["error"]["message"]
    r = post(api, {"model": "test-model", "token_ids": [7] * 1023, "sampling_params": {"max_tokens": 3}})
    assert r.status_code == 200
    assert r.json()["choices"][0]["token_ids"] and len(r.json()["choices"][0]["token_ids"]) == 1


def test_x_return_error(api):
    r = post(api, BASIC, headers={"X-Return-Error": "503"})
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "InternalServerError"


def test_echo_returns_input_ids(echo_api):
    body = {"model": "test-model", "token_ids": [11, 22, 33, 44], "sampling_params": {"max_tokens": 10}}
    out = post(echo_api, body).json()
    assert out["choices"] == [{"index": 0, "finish_reason": "stop", "token_ids": [11, 22, 33, 44]}]
    assert out["usage"]["completion_tokens"] == 4
    events = stream(echo_api, dict(body, sampling_params={"max_tokens": 4}))
    assert [c["choices"][0]["token_ids"] for c in events[:-1]] == [[11], [22], [33], [44]]
    assert [c["choices"][0]["finish_reason"] for c in events[:-1]] == [None, None, None, "length"]


def test_echo_empty_prompt_stream(echo_api):
    events = stream(echo_api, {"model": "test-model", "token_ids": [], "sampling_params": {}})
    assert events[-1] == "[DONE]"
    (chunk,) = events[:-1]
    # a finished output of no tokens: no span (vLLM's _weight_version_spans of no starts and 0 tokens: [])
    assert chunk["choices"] == [{"index": 0, "finish_reason": "stop", "stop_reason": None, "token_ids": [],
                                 "routed_experts": None, "sampling_mask": None, "weight_versions": [],
                                 "logprobs": None}]


def test_mm_encoder_only_features_case_83(app_client):
    base = app_client("--mm-encoder-only")
    body = {"model": "test-model", "token_ids": [1, 32000, 32000, 32000], "sampling_params": {"max_tokens": 1},
            "features": {"mm_hashes": {"image": ["abc123hash", "def456hash"]},
                         "mm_placeholders": {"image": [{"offset": 1, "length": 3}]},
                         "kwargs_data": {"image": ["x"]}}}
    ec = post(base, body).json()["ec_transfer_params"]
    assert set(ec) == {"abc123hash", "def456hash"}
    for v in ec.values():
        assert v == {"peer_host": "DUMMY", "peer_port": 1234, "size_bytes": 2359296,
                     "nixl_agent_metadata_b64": "TklYTF9NRVRBREFUQV9QTEFDRUhPTERFUg=="}
    del body["features"]
    assert post(base, body).json()["ec_transfer_params"] is None


def test_features_ignored_outside_mm_encoder_only(api):
    body = dict(BASIC, features={"mm_hashes": {"image": ["abc"]}})
    assert post(api, body).json()["ec_transfer_params"] is None


# ---- output_mode: text and derender (vLLM 0.34 streams derender) -----------------------------------
TEXTUAL = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4, "ignore_eos": True}}


def test_output_mode_text_and_derender(api):
    text = post(api, {**TEXTUAL, "output_mode": "text"}).json()
    (c,) = text["choices"]
    # vLLM 0.34's GenerateTextResponse dumped whole (token_in_token_out/api_router.py: model_dump())
    assert list(text) == ["request_id", "model", "created", "usage", "prompt_logprobs", "prompt_token_id_logprobs",
                          "prompt_token_ids", "mm_placeholders", "metrics", "kv_transfer_params", "ec_transfer_params",
                          "output_mode", "choices"]
    assert text["usage"]["completion_tokens_details"] is None and text["prompt_token_ids"] is None
    assert text["output_mode"] == "text" and list(c) == ["index", "finish_reason", "stop_reason", "token_ids",
                                                         "routed_experts", "sampling_mask", "weight_versions", "text",
                                                         "logprobs"]
    assert c["logprobs"] is None and c["routed_experts"] is None
    assert c["text"] == api.sim.tokenizer.decode_ids(c["token_ids"]) and (c["finish_reason"], len(c["token_ids"])) == ("length", 4)
    der = post(api, {**TEXTUAL, "output_mode": "derender", "parse_context": {"tools": None}}).json()
    (c,) = der["choices"]
    assert der["output_mode"] == "derender"
    assert list(der) == list(text) and list(c)[-2:] == ["message", "logprobs"]
    assert c["message"] == {"role": "assistant", "content": api.sim.tokenizer.decode_ids(c["token_ids"]),
                            "refusal": None, "audio": None, "function_call": None, "reasoning": None}
    assert "output_mode" not in post(api, TEXTUAL).json()           # tokens: the shape it always had


@pytest.mark.parametrize("mode", ["text", "derender"])
def test_output_mode_streams(api, mode):
    events = stream(api, {**TEXTUAL, "output_mode": mode, "stream_options": {"include_usage": True}})
    chunks, usage, done = events[:-2], events[-2], events[-1]
    assert done == "[DONE]" and usage["choices"] == [] and usage["output_mode"] == mode
    assert usage["usage"]["completion_tokens"] == 4 and len(chunks) == 4
    assert [e["output_mode"] for e in chunks] == [mode] * 4
    choices = [e["choices"][0] for e in chunks]
    assert [ch["finish_reason"] for ch in choices] == [None, None, None, "length"]
    ids = [t for ch in choices for t in ch["token_ids"]]
    if mode == "text":
        assert "".join(ch["text"] for ch in choices) == api.sim.tokenizer.decode_ids(ids)
    else:
        assert [set(ch["delta"]) for ch in choices] == [{"role", "content"}] + [{"content"}] * 3
        assert choices[0]["delta"]["role"] == "assistant"
        assert "".join(ch["delta"]["content"] for ch in choices) == api.sim.tokenizer.decode_ids(ids)


def test_text_levels_logprobs_and_return_tokens_as_token_ids(api, app_client):
    body = {**TEXTUAL, "output_mode": "text", "sampling_params": {**TEXTUAL["sampling_params"], "logprobs": 1}}
    c = post(api, body).json()["choices"][0]
    pieces = [e["token"] for e in c["logprobs"]["content"]]
    assert "".join(pieces) == c["text"] and len(c["logprobs"]["content"][0]["top_logprobs"]) == 1
    ids_client = app_client("--return-tokens-as-token-ids")
    c = post(ids_client, body).json()["choices"][0]
    assert [e["token"] for e in c["logprobs"]["content"]] == [f"token_id:{t}" for t in c["token_ids"]]
    der = {**body, "output_mode": "derender", "parse_context": {"return_tokens_as_token_ids": True}}
    c = post(api, der).json()["choices"][0]                        # the render's context decides
    assert [e["token"] for e in c["logprobs"]["content"]] == [f"token_id:{t}" for t in c["token_ids"]]
    c = post(ids_client, {**der, "parse_context": {"return_tokens_as_token_ids": False}}).json()["choices"][0]
    assert "".join(e["token"] for e in c["logprobs"]["content"]) == c["message"]["content"]
    events = stream(api, {**der, "stream": True})
    assert events[0]["choices"][0]["logprobs"]["content"][0]["token"] == f"token_id:{events[0]['choices'][0]['token_ids'][0]}"


def test_output_mode_checks(api):
    r = post(api, {**TEXTUAL, "output_mode": "html"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "output_mode"
    r = post(api, {**TEXTUAL, "output_mode": "text", "sampling_params": {"max_tokens": 2, "detokenize": False}})
    assert (r.status_code, r.json()["error"]["message"]) == (400, "output_mode='text' requires "
                                                                  "sampling_params.detokenize to be true")


# ---- the same bytes whatever the timing path (issue 32: schedules emitted by the server's hub) -----

SAME = {"model": "test-model", "token_ids": [1, 2, 3], "request_id": "same", "stream": True,
        "stream_options": {"include_usage": True}}
SAME_BODIES = {
    "tokens": ({"max_tokens": 12, "ignore_eos": True}, {}, ()),
    "logprobs": ({"max_tokens": 12, "ignore_eos": True, "logprobs": 2}, {}, ()),
    "stream interval": ({"max_tokens": 12, "ignore_eos": True}, {}, ("--stream-interval", "3")),
    "n": ({"max_tokens": 6, "ignore_eos": True, "n": 2}, {}, ()),
    "text": ({"max_tokens": 12, "ignore_eos": True, "logprobs": 1}, {"output_mode": "text"}, ()),
    "derender": ({"max_tokens": 12, "ignore_eos": True}, {"output_mode": "derender"}, ("--stream-interval", "3")),
}


@pytest.mark.parametrize("name", SAME_BODIES)
def test_stream_bytes_do_not_depend_on_the_timing_path(app_client, name):
    """A stream with a constant inter-token latency hands its tokens to the hub as a schedule
    (each chunk rendered per token, in order): its bytes are those of the stream that waits for
    nothing, and of one waiting per token (n > 1: each choice's chunks, interleaved as they come)."""
    sp, extra, flags = SAME_BODIES[name]
    runs = {}
    for timing, timing_flags in TIMING_PATHS.items():
        r = post(app_client(*flags, *timing_flags), {**SAME, **extra, "sampling_params": {**sp, "seed": 11}})
        assert r.status_code == 200, r.text
        runs[timing] = r.text if "n" not in sp else sorted(r.text.split("\n\n"))
    assert runs["schedule from the first token"] == runs["all at once"] == runs["deadline per token"]
    events = sse_events(runs["all at once"] if "n" not in sp else "\n\n".join(runs["all at once"]))
    assert len(events) >= (4 if name == "derender" or name == "stream interval" else 8)
