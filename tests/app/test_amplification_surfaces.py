"""Request amplification on the surfaces earlier sweeps left (audio uploads, admin fake metrics,
renders and derenders, ``structured_outputs.regex``, the Responses store), in-process: each
small hostile request is refused with a 4xx naming its field, or costs what its bytes do.

Figures in the docstrings are a real ``python app.py`` server's on a 2-core machine, before
the fix; the assertions are on what the fix changed (memory traced, entries rendered,
characters parsed), not on wall time.
"""
from __future__ import annotations

import hashlib
import io
import tracemalloc

import numpy as np
import orjson
import pytest
import soundfile as sf

from generation.content import audio as au

USER = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}


def silent_flac(seconds: float, rate: int) -> bytes:
    """A FLAC of silence: a few hundred bytes a second, however high the rate."""
    buf = io.BytesIO()
    block = np.zeros(rate, dtype=np.float32)
    with sf.SoundFile(buf, "w", rate, 1, format="FLAC", subtype="PCM_16") as f:
        for _ in range(int(seconds)):
            f.write(block)
    return buf.getvalue()


# ---- audio uploads ------------------------------------------------------------------------------

def test_a_long_compressed_upload_is_decoded_in_blocks():
    """A 210 KB FLAC of 600 s of silence at 192 kHz (within vLLM's decode limits) held 577 MB
    (its 256 MiB of float32 samples and a copy for the hash); four at once 2.1 GB.  Decoded in
    blocks now: the same duration and key, about 1 MiB held."""
    data = silent_flac(60, 192_000)                  # 11.5 M samples: 46 MB of float32 at once
    assert len(data) < 100_000
    with sf.SoundFile(io.BytesIO(data)) as f:
        whole = f.read(dtype="float32", always_2d=True)
    key = hashlib.blake2b(whole.tobytes(), digest_size=16).digest()
    del whole
    tracemalloc.start()
    try:
        clip = au.decode_upload(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (clip.frames, clip.duration_s, clip.key) == (60 * 192_000, 60.0, key)
    assert peak < 4 * au.DECODE_BLOCK_SAMPLES * 4, peak        # a few blocks, not 46 MB


@pytest.mark.parametrize("field,value,status,message", [
    # Python's int() refuses past 4,300 digits (a 500); pydantic's own bound is the same
    ("max_completion_tokens", "9" * 5000, 400, "'type': 'int_parsing_size', 'loc': 'body.max_completion_tokens'"),
    ("seed", "9" * 5000, 400, "'type': 'int_parsing_size', 'loc': 'body.seed'"),
    # a 4,000-digit limit passed pydantic and overflowed the max_tokens histogram's float sum: 500
    ("max_completion_tokens", "9" * 4000, 200, None),
    # json.loads's RecursionError was a 500
    ("vllm_xargs", "[" * 100_000, 400, "Failed to parse vllm_xargs. Must be valid JSON: nested too deeply"),
], ids=["limit-5000-digits", "seed-5000-digits", "limit-4000-digits", "xargs-deep"])
def test_audio_form_fields_past_pythons_limits_are_400s(api, field, value, status, message):
    wav = io.BytesIO()
    sf.write(wav, np.zeros(1600, dtype=np.float32), 16000, format="WAV", subtype="PCM_16")
    r = api.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav.getvalue(), "audio/wav")},
                 data={"model": "test-model", field: value})
    assert r.status_code == status, r.text[:300]
    if message:
        assert message in r.json()["error"]["message"]
        assert r.json()["error"]["param"] in (field, f"body.{field}")
    assert api.sim.running == 0 and not api.sim.waiting


# ---- renders and derenders ----------------------------------------------------------------------

CHAT_DERENDER = "/v1/chat/completions/derender"


def test_chat_derender_alternatives_are_within_the_work_budget(api):
    """``chat_request.top_logprobs`` 100,000 on 100 ids (a 200-byte body) made 10 M simulated
    alternatives: the hub held 40 s, 4.7 GB, a 693 MB answer.  Now --max-request-work's 400,
    before anything is decoded; what the budget allows still renders."""
    gen = {"choices": [{"index": 0, "token_ids": [5] * 100}]}
    r = api.post(CHAT_DERENDER, json={"model": "test-model", "generate_response": gen,
                                      "chat_request": {"logprobs": True, "top_logprobs": 100_000}})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "chat_request.top_logprobs"
    assert err["message"].startswith("This request asks for 10000100 output tokens and logprob alternatives "
                                     "(generate_response's token ids x (1 + chat_request.top_logprobs))")
    r = api.post(CHAT_DERENDER, json={"model": "test-model", "generate_response": gen,
                                      "chat_request": {"logprobs": True, "top_logprobs": 20}})
    assert r.status_code == 200
    assert len(r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20


@pytest.mark.parametrize("body,param,message", [
    # vLLM's _validate_derender_bounds, which its chat derender applies as its completions one does
    ({"generate_response": {"choices": [{"index": 0, "token_ids": [5] * 1025}]}},
     "generate_response.choices[0].token_ids", "token_ids length (1025) in choice 0 exceeds max_model_len (1024)."),
    ({"generate_response": {"choices": [{"index": 0, "token_ids": [5]}]}, "prompt_token_ids": [1] * 1025},
     "prompt_token_ids", "prompt_token_ids length (1025) exceeds max_model_len (1024)."),
    ({"generate_response": {"choices": [{"index": 0, "token_ids": [5] * 1000}] * 1100}},
     "generate_response", "This request asks for 1100000 output tokens"),
    # shapes the bounds read: a list where an object goes was a 500 once they were checked
    ({"generate_response": {"choices": [{"index": 0, "token_ids": [5], "logprobs": [1]}]}},
     "generate_response.choices[0].logprobs", "generate_response.choices[0].logprobs: Input should be a valid"),
], ids=["token-ids", "prompt-token-ids", "work", "logprobs-shape"])
def test_chat_derender_bounds_are_vllms(api, body, param, message):
    r = api.post(CHAT_DERENDER, json={"model": "test-model", **body})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(message), err


def test_completions_render_prompt_count_is_vllms(api):
    """1,000,000 one-letter prompts (4 MB) answered 473 MB after 6.7 s on the hub: vLLM's
    ``VLLM_MAX_COMPLETION_PROMPTS`` validator, which its render's ``CompletionRequest`` runs, for
    text prompts and token-id prompts alike (a flat id list is one prompt)."""
    for prompt in (["a"] * 1025, [[1]] * 1025):
        r = api.post("/v1/completions/render", content=orjson.dumps({"model": "test-model", "prompt": prompt}),
                     headers=JSON)
        assert r.status_code == 400, r.text[:300]
        assert r.json()["error"]["param"] == "prompt"
        assert r.json()["error"]["message"].startswith("prompt list length 1025 exceeds the maximum allowed count "
                                                       "of 1024.")
    # a flat id list is one prompt: not counted, refused only as longer than the context
    r = api.post("/v1/completions/render", json={"model": "test-model", "prompt": [7] * 1025})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "This model's maximum context length is 1024 tokens. However, your prompt contains 1025 input tokens")


def test_completions_render_repeated_sampling_fields_are_within_the_work_budget(api):
    """Each prompt's answer repeats the sampling fields: 1,024 prompts with a 300 KB ``stop``
    list would answer 300 MB.  Counted against --max-request-work (64-byte entries), the 400
    names ``prompt``; a render the budget allows answers in full."""
    stop = ["x" * 100] * 3000
    r = api.post("/v1/completions/render", content=orjson.dumps({"model": "test-model", "prompt": ["a"] * 1024,
                                                                  "stop": stop}), headers=JSON)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "prompt" and "(--max-request-work)" in err["message"], err
    assert "(the sampling fields each repeats, in 64-byte entries)" in err["message"]
    r = api.post("/v1/completions/render", json={"model": "test-model", "prompt": ["a"] * 1024, "stop": stop[:10]})
    assert r.status_code == 200 and len(r.json()) == 1024
    assert r.json()[1023]["sampling_params"]["stop"] == stop[:10]


# ---- structured outputs -------------------------------------------------------------------------

@pytest.mark.parametrize("path,extra", [("/v1/chat/completions", {"messages": USER}),
                                        ("/v1/completions", {"prompt": "hi"})], ids=["chat", "completions"])
def test_a_structured_outputs_regex_has_a_schema_patterns_bounds(api, path, extra, monkeypatch):
    """A 3 MB alternation (``a0|a1|...``) was parsed twice in pure Python on the hub (3-4 s,
    330 MB) before the 400, which quoted all of it.  The length is checked first now, as a schema
    ``pattern``'s is: nothing is parsed, the message names the bound, not the pattern."""
    from generation.structured import regex_sampler
    parsed = []
    real = regex_sampler.parse
    monkeypatch.setattr(regex_sampler, "parse", lambda p: parsed.append(len(p)) or real(p))
    pattern = "|".join(f"a{i}" for i in range(400_000))
    r = api.post(path, content=orjson.dumps({"model": "test-model", "max_tokens": 5, **extra,
                                             "structured_outputs": {"regex": pattern}}), headers=JSON)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "structured_outputs.regex"
    assert err["message"] == ("structured_outputs.regex: the expression cannot be used by the simulator: it is "
                              "longer than 4096 characters.")
    assert parsed == []
    r = api.post(path, json={"model": "test-model", "max_tokens": 5, **extra,
                             "structured_outputs": {"regex": "a{5000}"}})
    assert r.status_code == 400 and "unroll to more than 4096 atoms" in r.json()["error"]["message"]


# ---- admin: fake metrics ------------------------------------------------------------------------

FAKE = ("--fake-metrics", '{"running-requests": 1}')


def test_fake_metrics_loras_are_bounded(app_client):
    """300,000 ``loras`` entries (a 1.2 MB admin update) made every ``/metrics`` scrape a 27 MB,
    1.8 s hold of the hub, for as long as the server ran.  At most 1,000 entries now (a 400
    naming ``fake-metrics``, nothing changed); 1,000 still render."""
    c = app_client(*FAKE)
    r = c.post("/admin/config", content=orjson.dumps({"fake-metrics": {"loras": [{}] * 300_000}}), headers=JSON)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == "fake-metrics"
    assert r.json()["error"]["message"] == "fake metrics loras: at most 1000 entries, got 300000"
    r = c.post("/admin/config", json={"fake-metrics": {"loras": [{"running": f"a{i}"} for i in range(1000)]}})
    assert r.status_code == 200, r.text[:300]
    assert c.get("/metrics").text.count("vllm:lora_requests_info{") == 1000


@pytest.mark.parametrize("entry,message", [
    ("[" * 100_000, "fake metrics loras: invalid JSON entry '" + "[" * 100 + "'...: nested too deeply"),   # was a 500
    ("x" * 3_000_000, "fake metrics loras: invalid JSON entry '" + "x" * 100 + "'...: Expecting value"),   # quoted 3 MB
], ids=["deep", "long"])
def test_fake_metrics_lora_strings_are_400s_quoting_100_characters(app_client, entry, message):
    c = app_client(*FAKE)
    r = c.post("/admin/config", content=orjson.dumps({"fake-metrics": {"loras": [entry]}}), headers=JSON)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == "fake-metrics"
    assert r.json()["error"]["message"].startswith(message), r.json()["error"]["message"][:300]
    assert len(r.content) < 1000


# ---- Responses API: the conversations kept for previous_response_id -----------------------------

STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}


def test_a_conversation_longer_than_a_body_is_not_kept(app_client):
    """The simulated tokenizer drops whitespace past 64 characters, so a 3 MB input of spaces
    is a few tokens: the token-counted history kept each one whole (100 requests: 51 -> 343 MB,
    for good), and a chain of them made a small continuing request tokenize every earlier input.
    A conversation over one body (``--max-request-body-size-mb``) is not kept now; continuing it
    is a 400 naming ``previous_response_id``, before anything is tokenized."""
    c = app_client("--max-request-body-size-mb", "1", env=STORE)
    store = c.sim.response_store
    spaces = "a" + " " * 600_000 + "b"
    first = c.post("/v1/responses", content=orjson.dumps({"model": "test-model", "input": spaces,
                                                          "max_output_tokens": 1}), headers=JSON)
    assert first.status_code == 200, first.text[:300]
    assert store.history[first.json()["id"]][0] is not None           # one body's worth: kept
    second = c.post("/v1/responses", content=orjson.dumps({
        "model": "test-model", "input": spaces, "max_output_tokens": 1,
        "previous_response_id": first.json()["id"]}), headers=JSON)
    assert second.status_code == 200, second.text[:300]
    big = second.json()["id"]
    assert store.history[big][0] is None and store.history[big][2] > 1 << 20     # two: its size only
    r = c.post("/v1/responses", json={"model": "test-model", "input": "hi", "previous_response_id": big})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "previous_response_id"
    assert err["message"].startswith(f"The conversation of previous_response_id '{big}' holds ")


def test_kept_conversations_are_bounded_in_bytes():
    from generation.adapters.response_store import ResponseStore
    store = ResponseStore(limit=100, history_tokens=1000, limit_bytes=10_000, conversation_bytes=5000)
    for i in range(6):
        store.remember(f"resp_{i}", [{"role": "user", "content": "x" * 3000}], 2)
    assert list(store.history) == ["resp_3", "resp_4", "resp_5"]
    assert store.history_bytes == sum(e[2] for e in store.history.values()) <= 10_000
    store.remember("resp_6", [{"role": "user", "content": "x" * 6000}], 2)       # too long: its size only
    assert store.history["resp_6"][0] is None and store.history_bytes < 10_000
    store.remember("resp_5", [], 1)                                              # replaced: counted once
    assert store.history_bytes == sum(e[2] for e in store.history.values() if e[0] is not None)


# ---- thousands of tools -------------------------------------------------------------------------

def test_anthropic_tools_of_the_plain_shape_skip_the_nested_schema(api, monkeypatch):
    """120,000 minimal tools (3.7 MB) held the hub 2.6 s in marshmallow's nested schema (~20 us a
    tool; chat's 90,000 took 0.4 s).  Plain tools load in one loop now, into the objects the
    schema makes; a tool that is not plain still gets the schema's error, naming it."""
    from schemas.messages import AnthropicToolSchema
    loads = []
    real = AnthropicToolSchema.load
    monkeypatch.setattr(AnthropicToolSchema, "load", lambda self, *a, **kw: loads.append(1) or real(self, *a, **kw))
    tools = [{"name": f"f{i}", "input_schema": {"type": "object"}} for i in range(80_000)]
    body = {"model": "test-model", "max_tokens": 5, "messages": USER, "tools": tools, "tool_choice": {"type": "any"}}
    r = api.post("/v1/messages", content=orjson.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["content"][0]["type"] == "tool_use" and r.json()["content"][0]["name"].startswith("f")
    assert loads == []
    for bad, where in (({"name": "", "input_schema": {}}, "name"), ({"name": "g", "input_schema": []}, "input_schema"),
                       ({"name": "g", "input_schema": {}, "strict": "maybe"}, "strict")):
        r = api.post("/v1/messages", content=orjson.dumps({**body, "tools": tools[:3] + [bad]}), headers=JSON)
        assert r.status_code == 400, r.text[:300]
        message = r.json()["error"]["message"]
        assert message.startswith(f"tools[3].{where}: ") or f"'loc': 'body.tools.3.{where}'" in message, r.json()


def test_speech_frames_count_against_the_work_budget(app_client):
    """A 48 KB ``/v1/audio/speech`` input with a 32k context made 24,000 frames (a 95 MB
    answer): the hub held 6-12 s and 1.9 GB.  A frame is 60 of --max-request-work's 64-byte
    entries now: the 400 names ``input``, before anything is synthesized."""
    c = app_client("--max-model-len", "32768")
    r = c.post("/v1/audio/speech", json={"model": "test-model", "input": "hello " * 8000})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "input"
    assert "(ceil(3.75 x input tokens / speed) audio frames x 60)" in err["message"], err
    r = c.post("/v1/audio/speech", json={"model": "test-model", "input": "hello " * 100, "response_format": "pcm"})
    assert r.status_code == 200 and len(r.content) == au.speech_tokens(100) * au.FRAME_SAMPLES * 2


def test_speech_is_synthesized_in_slices():
    """The whole answer's float64 intermediates took ~64 bytes a sample; slices of 256 frames
    give the same file with ~20 MB of them."""
    ids = list(range(3000, 5000))                    # 2,000 frames: 3.8 M samples, 7.7 MB of WAV
    whole = io.BytesIO()
    sf.write(whole, au.synthesize(ids[:300], 5), au.SPEECH_SAMPLE_RATE, format="WAV", subtype="PCM_16")
    assert au.encode_speech(ids[:300], 5, "wav") == whole.getvalue()
    tracemalloc.start()
    try:
        data = au.encode_speech(ids, 5, "wav")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(data) == 44 + len(ids) * au.FRAME_SAMPLES * 2
    assert peak < 3 * len(data) + (32 << 20), peak                     # all at once: ~250 MB
