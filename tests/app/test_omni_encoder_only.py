"""``--omni`` image output and ``--mm-encoder-only`` (issue 24; reference api.md 2.7, 3.7,
5.1.9, 5.1.10 and its black-box cases 23-27, 84, 85; engine.md case 25)."""
from __future__ import annotations

import base64
import struct
import time
import zlib

import pytest

from support import sse_events

USER = [{"role": "user", "content": "hello"}]
CHAT = {"messages": USER, "max_tokens": 5}
IMG = {"X-Send-Image": "true"}
PREFIX = "data:image/png;base64,"
REF_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
MEDIA = [{"role": "user", "content": [{"type": "text", "text": "describe"},
                                      {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                                      {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}}]}]


@pytest.fixture(scope="module")
def omni(app_client):
    return app_client("--omni")


def chat(c, body=None, headers=None):
    r = c.post("/v1/chat/completions", json=body or CHAT, headers=headers or {})
    assert r.status_code == 200, r.text
    return r


# ---- the image -----------------------------------------------------------------------------------

def test_the_png_is_valid_and_the_references():
    from generation.content.image import DATA_URL, PNG
    assert DATA_URL == PREFIX + REF_PNG
    assert PNG[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(PNG):
        n = struct.unpack(">I", PNG[pos:pos + 4])[0]
        kind, data = PNG[pos + 4:pos + 8], PNG[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", PNG[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + data)
        chunks.append((kind, data))
        pos += 12 + n
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">IIBBBBB", chunks[0][1]) == (1, 1, 8, 6, 0, 0, 0)
    assert zlib.decompress(chunks[1][1]) == b"\x01\x00\xff\x00\x7f"


# ---- non-streaming (cases 23, 25, 26) ---------------------------------------------------------------

def test_header_gives_text_then_image(omni):
    msg = chat(omni, headers=IMG).json()["choices"][0]["message"]
    text, image = msg["content"]
    assert text["type"] == "text" and text["text"]
    assert image == {"type": "image_url", "image_url": {"url": PREFIX + REF_PNG}}


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "True"])
def test_header_parses_like_go(omni, value):
    assert isinstance(chat(omni, headers={"X-Send-Image": value}).json()["choices"][0]["message"]["content"], list)


@pytest.mark.parametrize("value", ["false", "0", "yes", ""])
def test_header_not_true_no_image(omni, value):
    assert isinstance(chat(omni, headers={"X-Send-Image": value}).json()["choices"][0]["message"]["content"], str)


def test_without_omni_the_header_is_ignored(api):
    assert isinstance(chat(api, headers=IMG).json()["choices"][0]["message"]["content"], str)


def test_emission_rate_100_without_header(app_client):
    c = app_client("--omni", "--image-emission-rate", "100")
    assert chat(c).json()["choices"][0]["message"]["content"][1]["type"] == "image_url"


def test_emission_rate_needs_omni(app_client):
    c = app_client("--image-emission-rate", "100")
    assert isinstance(chat(c).json()["choices"][0]["message"]["content"], str)


def test_n_choices_each_carry_the_image(omni):
    choices = chat(omni, {**CHAT, "n": 3}, IMG).json()["choices"]
    assert [c["message"]["content"][1]["type"] for c in choices] == ["image_url"] * 3


def test_tool_calls_carry_only_the_image(omni):
    body = {**CHAT, "tools": [TOOL], "tool_choice": "required"}
    msg = chat(omni, body, IMG).json()["choices"][0]["message"]
    assert msg["content"] == [{"type": "image_url", "image_url": {"url": PREFIX + REF_PNG}}]
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather"


def test_other_endpoints_ignore_the_header(omni):
    r = omni.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3}, headers=IMG)
    assert isinstance(r.json()["choices"][0]["text"], str)


# ---- admin (case 27) -----------------------------------------------------------------------------

def test_admin_toggles_the_emission_rate(app_client):
    c = app_client("--omni", "--image-emission-rate", "0")
    assert isinstance(chat(c).json()["choices"][0]["message"]["content"], str)
    assert c.post("/admin/config", json={"image-emission-rate": 100}).status_code == 200
    assert isinstance(chat(c).json()["choices"][0]["message"]["content"], list)
    assert c.post("/admin/config", json={"image-emission-rate": 0}).status_code == 200
    assert isinstance(chat(c).json()["choices"][0]["message"]["content"], str)
    r = c.post("/admin/config", json={"image-emission-rate": 101})
    assert r.status_code == 400 and "image emission rate" in r.json()["error"]["message"]


# ---- streaming (case 24) ----------------------------------------------------------------------------

def test_stream_text_parts_then_one_image_chunk_per_choice(omni):
    r = chat(omni, {**CHAT, "stream": True, "n": 2, "stream_options": {"include_usage": True}}, IMG)
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    images = [i for i, e in enumerate(chunks) if e.get("modality") == "image"]
    assert len(images) == 2
    finishes = [i for i, e in enumerate(chunks) if e["choices"] and e["choices"][0]["finish_reason"]]
    tokens = [i for i, e in enumerate(chunks) if e["choices"] and isinstance(e["choices"][0]["delta"].get("content"), list)
              and e.get("modality") is None]
    assert max(tokens) < min(images) and max(images) < min(finishes)       # after all tokens, before finishes
    for i in images:
        e = chunks[i]
        assert e["object"] == "chat.completion.chunk" and e["usage"] is None
        (part,) = e["choices"][0]["delta"]["content"]
        assert part["type"] == "image_url" and part["image_url"]["url"].startswith(PREFIX)
        assert e["choices"][0]["finish_reason"] is None
    assert sorted(chunks[i]["choices"][0]["index"] for i in images) == [0, 1]
    for i in tokens:
        (part,) = chunks[i]["choices"][0]["delta"]["content"]
        assert part["type"] == "text" and part["text"]
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_stream_without_image_keeps_string_deltas(omni):
    chunks = sse_events(chat(omni, {**CHAT, "stream": True}).text)[:-1]
    assert all(isinstance(c["choices"][0]["delta"].get("content", ""), str) for c in chunks)
    assert not any("modality" in c for c in chunks)


def test_stream_with_logprobs_and_image(omni):
    chunks = sse_events(chat(omni, {**CHAT, "stream": True, "logprobs": True}, IMG).text)[:-1]
    tok = [c for c in chunks if c["choices"][0]["logprobs"]]
    assert tok and all(c["choices"][0]["delta"]["content"][0]["type"] == "text" for c in tok)


# ---- latency (engine.md case 25) -----------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_image_latency(app_client, stream):
    c = app_client("--omni", "--time-to-generate-image", "300ms")
    body = {**CHAT, "stream": stream}
    t = time.monotonic()
    chat(c, body)
    assert time.monotonic() - t < 0.2
    t = time.monotonic()
    chat(c, body, IMG)
    assert 0.3 <= time.monotonic() - t < 1.5


def test_messages_pay_the_image_latency_without_an_image(app_client):
    c = app_client("--omni", "--time-to-generate-image", "300ms")
    t = time.monotonic()
    r = c.post("/v1/messages", json={"model": "test-model", "max_tokens": 5, "messages": USER}, headers=IMG)
    assert r.status_code == 200 and 0.3 <= time.monotonic() - t < 1.5
    assert all(b["type"] == "text" for b in r.json()["content"])


def test_image_latency_is_in_the_e2e_metric(app_client):
    from support import metric, scrape
    c = app_client("--omni", "--time-to-generate-image", "300ms")
    chat(c, headers=IMG)
    m = scrape(c)
    assert metric(m, "vllm:e2e_request_latency_seconds_sum") >= 0.3


# ---- --mm-encoder-only (cases 84, 85) ------------------------------------------------------------------

@pytest.fixture(scope="module")
def encoder(app_client):
    return app_client("--mm-encoder-only")


@pytest.mark.parametrize("max_tokens", [1, 10])
def test_encoder_only_bang_output(encoder, max_tokens):
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/i.png"}}]}],
            "max_tokens": max_tokens}
    b = chat(encoder, body).json()
    choice = b["choices"][0]
    assert choice["message"]["content"] == "!" * max_tokens and choice["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] == max_tokens


def test_encoder_only_one_bang_without_a_cap(encoder):
    assert chat(encoder, {"messages": USER}).json()["choices"][0]["message"]["content"] == "!"


def test_encoder_only_ec_transfer_params(encoder):
    b = chat(encoder, {"messages": MEDIA, "max_tokens": 1}).json()
    ec = b["ec_transfer_params"]
    assert len(ec) == 2 and all(k.startswith("sim_img_") for k in ec)
    for v in ec.values():
        assert v == {"peer_host": "DUMMY", "peer_port": 1234, "size_bytes": 2359296,
                     "nixl_agent_metadata_b64": base64.b64encode(b"NIXL_METADATA_PLACEHOLDER").decode()}
    render = encoder.post("/v1/chat/completions/render", json={"messages": MEDIA}).json()
    assert sorted(ec) == sorted(render["features"]["mm_hashes"]["image"])      # the same synthetic hashes


def test_ec_transfer_params_absent_text_only_or_normal_mode(encoder, api):
    assert chat(encoder, {"messages": USER, "max_tokens": 1}).json()["ec_transfer_params"] is None
    assert chat(api, {"messages": MEDIA, "max_tokens": 1}).json()["ec_transfer_params"] is None


def test_encoder_only_other_endpoints_and_stream(encoder):
    r = encoder.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    assert r.json()["choices"][0]["text"] == "!!!" and r.json()["choices"][0]["finish_reason"] == "length"
    chunks = sse_events(chat(encoder, {"messages": USER, "max_tokens": 2, "stream": True}).text)[:-1]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "!!"
    assert encoder.post("/v1/embeddings", json={"input": "hi"}).status_code == 404


def test_encoder_only_ignores_echo_and_kv_cache(app_client):
    c = app_client("--mm-encoder-only", "--mode", "echo", "--enable-kvcache", env={"POD_IP": "10.0.0.1"})
    assert c.sim.kv_cache is None
    assert chat(c, {"messages": USER, "max_tokens": 2}).json()["choices"][0]["message"]["content"] == "!!"


# ---- a real server: the stream is driven from the event loop (TokenSchedule, deadlines) ---------------

