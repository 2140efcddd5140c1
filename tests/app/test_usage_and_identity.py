"""vLLM's usage shape and the server's identity (issue 22): ``prompt_tokens_details`` left out by
default (vLLM 0.34; 0.33 sent null), ``stream_options`` refused without a stream, ``system_fingerprint``, ``/version`` as
vLLM's release (PEP 440) with the simulator's own version on ``/server_info``, uuid4 request
ids, and ``/health/`` open without a key."""
from __future__ import annotations

import uuid

import pytest
from packaging.version import Version

from support import sse_events

CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/inference/v1/generate"
MSG = [{"role": "user", "content": "Hello there"}]
KV = ("--enable-kvcache", "--zmq-endpoint", "", "--block-size", "16")
KV_ENV = {"POD_IP": "10.0.0.1"}


def usage_of(client, path, body) -> dict:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": MSG}),
    (COMPLETIONS, {"prompt": "Hello there"}),
    (GENERATE, {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 3}}),
])
def test_prompt_tokens_details_is_left_out_by_default(api, path, body):
    u = usage_of(api, path, {"model": "test-model", "max_tokens": 3, "ignore_eos": True, **body})
    # chat and completions also carry completion_tokens_details (null without --reasoning-parser)
    extra = {} if path == GENERATE else {"completion_tokens_details": None}
    assert u == {"prompt_tokens": u["prompt_tokens"], "completion_tokens": 3, "total_tokens": u["prompt_tokens"] + 3,
                 **extra}


def test_stream_usage_chunk_has_no_details(api):
    r = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2, "stream": True,
                             "stream_options": {"include_usage": True}})
    assert "prompt_tokens_details" not in sse_events(r.text)[-2]["usage"]


def test_the_flag_gives_cached_tokens_0_without_a_cache(app_client):
    """vLLM's test_completion (``--enable-prompt-tokens-details --no-enable-prefix-caching``)
    expects ``prompt_tokens_details.cached_tokens == 0``: the object is there, 0 included, with
    vLLM 0.34's other PromptTokenUsageInfo fields as it serialises them (nothing is written to a
    cache here: ``created_cache_tokens`` 0 on chat; completions leave it null)."""
    c = app_client("--enable-prompt-tokens-details")
    assert usage_of(c, CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 2})["prompt_tokens_details"] == \
        {"cached_tokens": 0, "created_cache_tokens": 0, "multimodal_tokens": None}
    assert usage_of(c, COMPLETIONS, {"model": "test-model", "prompt": "Hello there", "max_tokens": 2})[
        "prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": None, "multimodal_tokens": None}
    r = c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2, "stream": True,
                           "stream_options": {"include_usage": True}})
    assert sse_events(r.text)[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 0}
    r = c.post(COMPLETIONS, json={"model": "test-model", "prompt": "Hello there", "max_tokens": 2, "stream": True,
                                  "stream_options": {"include_usage": True}})
    assert sse_events(r.text)[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_kv_cache_reports_cached_tokens_always_with_or_without_the_flag(app_client):
    prompt = list(range(100, 140))          # 40 ids: 2 full blocks of 16
    body = {"model": "test-model", "prompt": prompt, "max_tokens": 2}
    c = app_client(*KV, env=KV_ENV)                  # the reference's shape
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 0}
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 32}
    c = app_client(*KV, "--enable-prompt-tokens-details", env=KV_ENV)      # vLLM's
    nulls = {"created_cache_tokens": None, "multimodal_tokens": None}
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 0, **nulls}
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 32, **nulls}


def test_kv_cache_hits_whole_blocks_of_at_most_the_prompt_minus_one(app_client):
    """vLLM's rule in the default cache too: an exact repeat of an 80-token, block-aligned prompt
    hits 64 tokens (80 - 1 rounded down to blocks of 16), an 81-token one 80."""
    c = app_client(*KV, env=KV_ENV)
    for n, hit in ((80, 64), (81, 80), (17, 16), (16, 0)):
        body = {"model": "test-model", "prompt": list(range(1000 * n, 1000 * n + n)), "max_tokens": 1}
        assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 0}
        assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": hit}, n


def test_step_mode_prefix_cache_gives_no_details_without_the_flag(app_client):
    """vLLM's default prefix caching (the step engine's cache) sends no ``prompt_tokens_details``
    unless ``--enable-prompt-tokens-details`` is given; with it, the hits."""
    step = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--block-size", "16")
    body = {"model": "test-model", "prompt": list(range(100, 140)), "max_tokens": 2}
    c = app_client(*step)
    assert "prompt_tokens_details" not in usage_of(c, COMPLETIONS, body)
    assert "prompt_tokens_details" not in usage_of(c, COMPLETIONS, body)
    c = app_client(*step, "--enable-prompt-tokens-details")
    nulls = {"created_cache_tokens": None, "multimodal_tokens": None}
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 0, **nulls}
    assert usage_of(c, COMPLETIONS, body)["prompt_tokens_details"] == {"cached_tokens": 32, **nulls}


def test_continuous_usage_first_chunk_carries_prompt_details(app_client):
    """vLLM 0.34: with continuous usage, the chat role chunk's usage already has
    ``prompt_tokens_details`` (when the details are on); token chunks' running usage has none.
    Every chat running usage sets ``completion_tokens_details`` (null without a reasoning
    parser; chat_completion/serving.py chat_completion_stream_generator_raw)."""
    body = {"model": "test-model", "messages": MSG, "max_tokens": 3, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = sse_events(app_client("--enable-prompt-tokens-details").post(CHAT, json=body).text)
    p = events[0]["usage"]["prompt_tokens"]
    assert events[0]["usage"] == {"prompt_tokens": p, "total_tokens": p, "completion_tokens": 0,
                                  "prompt_tokens_details": {"cached_tokens": 0, "created_cache_tokens": 0,
                                                            "multimodal_tokens": None},
                                  "completion_tokens_details": None}
    assert [e["usage"] for e in events[1:4]] == [{"prompt_tokens": p, "total_tokens": p + k, "completion_tokens": k,
                                                  "completion_tokens_details": None} for k in (1, 2, 3)]
    assert events[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 0}
    events = sse_events(app_client().post(CHAT, json=body).text)
    assert events[0]["usage"] == {"prompt_tokens": p, "total_tokens": p, "completion_tokens": 0,
                                  "completion_tokens_details": None}


@pytest.mark.parametrize("path,body", [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})])
@pytest.mark.parametrize("opts", [{"include_usage": None}, {"continuous_usage_stats": False}, {"other": 1}])
def test_any_non_empty_stream_options_without_a_stream_is_a_400(api, path, body, opts):
    r = api.post(path, json={"model": "test-model", **body, "stream_options": opts})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Stream options can only be defined when `stream=True`. "
                                            "(parameter=stream_options)")
    assert r.json()["error"]["param"] == "stream_options"


@pytest.mark.parametrize("opts", [{}, None])
def test_empty_or_null_stream_options_without_a_stream_are_fine(api, opts):
    r = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2, "stream_options": opts})
    assert r.status_code == 200


def test_chat_carries_vllms_system_fingerprint(api, app_client):
    fp = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).json()["system_fingerprint"]
    prefix, version, hash8 = fp.split("-")
    assert (prefix, version, len(hash8)) == ("vllm", "0.34.0", 8)
    int(hash8, 16)
    again = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).json()
    assert again["system_fingerprint"] == fp            # one per configuration
    other = app_client("--max-model-len", "2048").post(CHAT, json={"model": "test-model", "messages": MSG,
                                                                  "max_tokens": 2}).json()
    assert other["system_fingerprint"] != fp and other["system_fingerprint"].startswith("vllm-0.34.0-")


def test_version_is_vllms_release_and_server_info_the_simulators(api, app_client):
    r = api.get("/version")
    v = r.json()
    assert v == {"version": "0.34.0"}                   # --vllm-version's default
    assert Version(v["version"]) == Version("0.34.0")
    assert r.headers["X-Simulator-Version"] == "vllm-sim/0.1.0"
    info = app_client(env={"VLLM_SERVER_DEV_MODE": "1"}).get("/server_info").json()   # dev mode, as vLLM
    assert info["simulator"] == {"name": "vllm-sim", "version": "0.1.0", "vllm_version": "0.34.0"}
    assert "max-model-len=1024" in info["vllm_config"]


def test_version_and_fingerprint_follow_vllm_version(app_client):
    c = app_client("--vllm-version", "0.15.1")
    assert c.get("/version").json() == {"version": "0.15.1"}
    fp = c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).json()["system_fingerprint"]
    assert fp is None                       # vLLM computes one from 0.21.0
    fp = app_client("--vllm-version", "0.27.0").post(CHAT, json={"model": "test-model", "messages": MSG,
                                                                 "max_tokens": 2}).json()["system_fingerprint"]
    assert fp.startswith("vllm-0.27.0-")


def test_streams_carry_the_fingerprint_on_their_last_chunk(app_client):
    """vLLM 0.21+: a choice's finishing chunk carries system_fingerprint, or with include_usage
    only the usage chunk (serialised without nulls: no completion_tokens_details)."""
    import json
    c = app_client()
    fp = c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).json()["system_fingerprint"]
    for path, body in ((CHAT, {"messages": MSG}), ("/v1/completions", {"prompt": "hi"})):
        base = {"model": "test-model", "max_tokens": 3, "ignore_eos": True, "stream": True, "n": 2, **body}
        events = [json.loads(e[6:]) for e in c.post(path, json=base).text.split("\n\n") if e.startswith("data: {")]
        stamped = [e for e in events if "system_fingerprint" in e]
        assert [e["system_fingerprint"] for e in stamped] == [fp, fp]
        assert all(e["choices"][0]["finish_reason"] == "length" for e in stamped)
        events = [json.loads(e[6:]) for e in c.post(path, json={**base, "stream_options": {"include_usage": True}})
                  .text.split("\n\n") if e.startswith("data: {")]
        assert [e for e in events if "system_fingerprint" in e] == [events[-1]]
        assert events[-1]["system_fingerprint"] == fp and "completion_tokens_details" not in events[-1]["usage"]
    old = app_client("--vllm-version", "0.15.1")
    text = old.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2, "stream": True}).text
    assert "system_fingerprint" not in text


def test_generated_request_ids_are_uuid4_hex(app_client):
    c = app_client("--enable-request-id-headers")
    ids = [c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 1}).headers["X-Request-Id"]
           for _ in range(5)]
    ids.append(c.get("/v1/models").headers["X-Request-Id"])
    for rid in ids:
        u = uuid.UUID(hex=rid)
        assert (len(rid), u.version, u.variant, u.hex) == (32, 4, uuid.RFC_4122, rid)
    assert len(set(ids)) == len(ids)


def test_health_with_a_trailing_slash_needs_no_key(app_client):
    c = app_client("--api-key", "sk-1")
    assert c.get("/health/").status_code == 200
    assert c.get("/health").status_code == 200
    assert c.get("/v1/models").status_code == 401


def test_chat_message_has_no_null_annotations(api):
    """vLLM 0.34 leaves a null message ``annotations`` out of the body (it is never set here)."""
    out = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2}).json()
    assert "annotations" not in out["choices"][0]["message"]


def test_vllm_prompt_details_count_what_the_request_wrote_to_the_cache(app_client):
    """vLLM 0.34's chat ``prompt_tokens_details`` with ``--enable-prompt-tokens-details``:
    ``created_cache_tokens`` is the prompt's whole blocks less the hits (``PrefillStats.finalize``),
    ``multimodal_tokens`` the prompt tokens per modality (chat render's placeholders), null
    without media; key order as vLLM's UsageInfo."""
    c = app_client(*KV, "--enable-prompt-tokens-details", env=KV_ENV)
    msg = [{"role": "user", "content": "Tell me a long story about a dragon who learns to fly over the sea at night"}]
    body = {"model": "test-model", "messages": msg, "max_tokens": 2, "ignore_eos": True}
    first, again = usage_of(c, CHAT, body), usage_of(c, CHAT, body)
    assert first == {"prompt_tokens": 22, "total_tokens": 24, "completion_tokens": 2,
                     "prompt_tokens_details": {"cached_tokens": 0, "created_cache_tokens": 16, "multimodal_tokens": None},
                     "completion_tokens_details": None}
    assert list(first) == ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details",
                           "completion_tokens_details"]
    assert again["prompt_tokens_details"] == {"cached_tokens": 16, "created_cache_tokens": 0, "multimodal_tokens": None}
    image = [{"role": "user", "content": [{"type": "text", "text": "What is in this image?"},
                                          {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
    body = {"model": "test-model", "messages": image, "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = sse_events(c.post(CHAT, json=body).text)
    with_media = {"cached_tokens": 0, "created_cache_tokens": 16, "multimodal_tokens": {"image": 24}}
    assert events[0]["usage"]["prompt_tokens_details"] == with_media      # the role chunk
    assert events[-2]["usage"]["prompt_tokens_details"] == with_media     # the usage chunk keeps a non-null one
    body = {"model": "test-model", "token_ids": list(range(7100, 7140)), "sampling_params": {"max_tokens": 2}}
    assert usage_of(c, "/inference/v1/generate", body)["prompt_tokens_details"] == \
        {"cached_tokens": 0, "created_cache_tokens": None, "multimodal_tokens": None}
    r = c.post("/inference/v1/generate", json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert sse_events(r.text)[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}


def test_responses_report_the_tokens_written_to_the_cache(app_client):
    """vLLM 0.34's Responses usage: ``cache_write_tokens`` is the request's
    ``num_cache_creation_tokens`` (whole blocks written less the hits), with or without the flag."""
    c = app_client(*KV, env=KV_ENV)
    body = {"model": "test-model", "input": "Write a short poem about the mountains and the rivers below them",
            "max_output_tokens": 2}
    details = [usage_of(c, "/v1/responses", body)["input_tokens_details"] for _ in range(2)]
    p = usage_of(c, "/v1/responses", body)["input_tokens"]
    # vLLM's own InputTokensDetails (responses/protocol.py l. 99-103); a simple context keeps no turns
    per_turn = {"input_tokens_per_turn": [], "cached_tokens_per_turn": []}
    assert (p, details) == (17, [{"cached_tokens": 0, "cache_write_tokens": 16, **per_turn},
                                 {"cached_tokens": 16, "cache_write_tokens": 0, **per_turn}])
    assert usage_of(app_client(), "/v1/responses", body)["input_tokens_details"] == \
        {"cached_tokens": 0, "cache_write_tokens": 0, **per_turn}          # no prefix cache: nothing written
