"""Render endpoints (api.md 5.8, case 88), ``/tokenize`` (case 87) and ``/detokenize`` through
the in-process app with httpx."""
from __future__ import annotations

import base64

import pytest

from support.flag_sets import EXTRA_ENV, EXTRA_FLAGS

IMG_A = "http://example.com/a.png"
IMG_B = "http://example.com/b.png"
THIS_IS_A_TEST = [3157421587, 1477013615, 186949092, 2949673445]   # "This ", "is ", "a ", "test"


def fnv(s: str) -> str:
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return format(h, "x")


@pytest.fixture(scope="module")
def extra(app_client):
    """--max-model-len 2048, request-id headers, a LoRA, pod env."""
    return app_client(*EXTRA_FLAGS, env=EXTRA_ENV)


def post(base, path, body, **kw):
    return base.post(path, json=body, timeout=30, **kw)


def err(r, status):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["code"] == status
    return e


# ---- /v1/completions/render --------------------------------------------------------------

def ids_only(r) -> list:
    """The seeds' fields of a completions render (issue 22 added vLLM's GenerateRequest fields)."""
    return [{"token_ids": x["token_ids"]} for x in r.json()]


def test_completions_render_forms(api):
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": "hello world"})
    assert r.status_code == 200
    assert ids_only(r) == [{"token_ids": [3801292497, 933488787]}]        # "hello ", "world"
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": "This is a test"})
    assert ids_only(r) == [{"token_ids": THIS_IS_A_TEST}]
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": ["hello", "world"]})
    assert ids_only(r) == [{"token_ids": [1335831723]}, {"token_ids": [933488787]}]
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": [10, 20, 30]})
    assert ids_only(r) == [{"token_ids": [10, 20, 30]}]
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": [[1, 2], [3, 4, 5]]})
    assert ids_only(r) == [{"token_ids": [1, 2]}, {"token_ids": [3, 4, 5]}]


@pytest.mark.parametrize("body,status,param", [
    ({"model": "test-model"}, 400, "prompt"),
    ({"model": "test-model", "prompt": None}, 400, "prompt"),
    ({"model": "test-model", "prompt": []}, 400, "prompt"),
    ({"model": "test-model", "prompt": ""}, 400, "prompt"),
    ({"model": "test-model", "prompt": [[1], []]}, 400, "prompt"),
    ({"model": "test-model", "prompt": [1, "a"]}, 400, "prompt"),
    ({"model": "test-model", "prompt": [-1]}, 400, "prompt"),
    ({"model": "nope", "prompt": "x"}, 404, "model"),
])
def test_completions_render_errors(api, body, status, param):
    assert err(post(api, "/v1/completions/render", body), status)["param"] == param


def test_completions_render_without_model_uses_the_first_model(api):
    """vLLM serves a request without ``model`` with the first served model (issue 8); it was a 404."""
    r = post(api, "/v1/completions/render", {"prompt": "x"})
    assert r.status_code == 200 and len(r.json()) == 1


def test_render_ignores_other_fields_and_headers(api):
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": "hi", "stream": "yes"},
             headers={"X-Return-Error": "500"})
    assert r.status_code == 200 and len(r.json()) == 1
    # but its SamplingParams are vLLM's render's (render_completion_request's to_sampling_params):
    # n 0 is _verify_num_sequences' 400, before max_tokens -5 (both were answered 200)
    r = post(api, "/v1/completions/render", {"model": "test-model", "prompt": "hi", "max_tokens": -5, "n": 0})
    assert r.json() == {"error": {"message": "n must be at least 1, got 0.", "type": "BadRequestError",
                                  "param": None, "code": 400}}


# ---- /v1/chat/completions/render ---------------------------------------------------------

def test_chat_render_text_only(api):
    r = post(api, "/v1/chat/completions/render",
             {"model": "test-model", "messages": [{"role": "user", "content": "This is a test"}]})
    assert r.status_code == 200
    body = r.json()
    assert "features" not in body
    assert body["token_ids"] == [638357778, 638357778, 399020470, 1618501362, 2382766391] + THIS_IS_A_TEST[:3] \
        + [3022215997]


def test_chat_render_two_images(api):
    msg = {"role": "user", "content": [{"type": "text", "text": "describe this"},
                                       {"type": "image_url", "image_url": {"url": IMG_A}},
                                       {"type": "image_url", "image_url": {"url": IMG_B}}]}
    r = post(api, "/v1/chat/completions/render", {"model": "test-model", "messages": [msg]})
    assert r.status_code == 200
    body = r.json()
    assert len(body["token_ids"]) == 33
    assert body["features"] == {
        "mm_hashes": {"image": ["sim_img_0_e2cca4f5", "sim_img_1_11287d1c"]},
        "mm_placeholders": {"image": [{"offset": 0, "length": 16}, {"offset": 16, "length": 16}]},
        "kwargs_data": {"image": ["c2ltX2ltZ18wX2UyY2NhNGY1",
                                  base64.b64encode(b"sim_img_1_11287d1c").decode()]},
    }


def test_chat_render_audio_video_features(api):
    msg = {"role": "user", "content": [
        {"type": "text", "text": "listen and watch"},
        {"type": "audio_url", "audio_url": {"url": "http://x/a.wav"}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "video_url", "video_url": {"url": "http://x/v.mp4"}},
        {"type": "image_url", "image_url": "http://x/i.png"},
        {"type": "image_url", "image_url": {"url": ""}},          # empty url: not an item
    ]}
    r = post(api, "/v1/chat/completions/render", {"model": "test-model", "messages": [msg]})
    assert r.status_code == 200, r.text
    body = r.json()
    # "### user: listen and watch\nimage: http://x/i.png\nimage: \n": audio/video add no text.
    t = len(body["token_ids"])
    assert t == 21
    hashes = {"audio": [f"sim_audio_0_{fnv('http://x/a.wav')}", f"sim_audio_1_{fnv('UklGRg==')}"],
              "image": [f"sim_img_0_{fnv('http://x/i.png')}"],
              "video": [f"sim_video_0_{fnv('http://x/v.mp4')}"]}
    f = body["features"]
    assert f["mm_hashes"] == hashes
    assert list(f["mm_hashes"]) == ["audio", "image", "video"]
    assert f["kwargs_data"] == {k: [base64.b64encode(h.encode()).decode() for h in v] for k, v in hashes.items()}
    span = t // 4   # items in order: audio_url, input_audio, video_url, image_url
    assert f["mm_placeholders"] == {"audio": [{"offset": 0, "length": span}, {"offset": span, "length": span}],
                                    "video": [{"offset": 2 * span, "length": span}],
                                    "image": [{"offset": 3 * span, "length": span}]}


def test_chat_render_more_items_than_tokens(api):
    msg = {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": d}} for d in "abc"]}
    r = post(api, "/v1/chat/completions/render", {"model": "test-model", "messages": [msg]})
    body = r.json()
    t = len(body["token_ids"])        # "### user: \n" -> 5 tokens
    assert t == 5
    assert body["features"]["mm_placeholders"]["audio"] == [
        {"offset": 0, "length": 1}, {"offset": 1, "length": 1}, {"offset": 2, "length": 1}]


@pytest.mark.parametrize("body,status,param,message", [
    # ChatCompletionRequest.messages has no default (chat_completion/protocol.py:240)
    ({"model": "test-model"}, 400, "body.messages", "1 validation error:\n  {'type': 'missing', 'loc': "
     "'body.messages', 'msg': 'Field required', 'input': '<dict of 1 items>'}"),
    ({"model": "test-model", "messages": []}, 400, "messages", "messages must not be empty"),
    ({"model": "test-model", "messages": [{"content": "x"}]}, 400, "messages[0].role", None),
    ({"model": "test-model", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content", None),
    ({"model": "test-model", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content[0].image_url.url", None),
    ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model",
     "The model `nope` does not exist."),
])
def test_chat_render_errors(api, body, status, param, message):
    e = err(post(api, "/v1/chat/completions/render", body), status)
    assert e["param"] == param
    if message:
        assert e["message"] == message


def test_render_lora_and_headers(extra):
    msgs = [{"role": "user", "content": "hi"}]
    for path, body in (("/v1/chat/completions/render", {"messages": msgs}),
                       ("/v1/completions/render", {"prompt": "hi"})):
        e = err(post(extra, path, dict(body, model="lora1")), 400)
        assert e["message"] == "The model `lora1` is a LoRA adapter and is not supported by the render endpoints."
        r = post(extra, path, dict(body, model="test-model"), headers={"X-Request-Id": "render-1"})
        assert r.status_code == 200
        assert r.headers["x-inference-pod"] == "sim-pod-0"
        assert r.headers["x-inference-namespace"] == "ns1"
        assert r.headers["x-request-id"] == "render-1"


# ---- /tokenize, /detokenize --------------------------------------------------------------

def test_tokenize_case_87(extra):
    r = post(extra, "/tokenize", {"prompt": "This is a test"})
    assert r.status_code == 200
    assert r.json() == {"count": 4, "max_model_len": 2048, "tokens": THIS_IS_A_TEST, "token_strs": None}
    assert list(r.json()) == ["count", "max_model_len", "tokens", "token_strs"]
    assert "x-inference-pod" not in r.headers
    r = post(extra, "/tokenize", {"messages": [{"role": "user", "content": "This is a test"}]})
    assert r.status_code == 200
    assert r.json()["count"] == 9 and len(r.json()["tokens"]) == 9


def test_tokenize_options(api):
    r = post(api, "/tokenize", {"model": "test-model", "prompt": "This is a test", "add_special_tokens": True,
                                   "return_token_strs": True})
    assert r.json()["token_strs"] == ["This ", "is ", "a ", "test"]
    r = post(api, "/tokenize", {"model": "test-model", "messages": [{"role": "user", "content": "This is a test"}],
                                   "add_generation_prompt": True, "return_token_strs": True})
    assert r.json()["token_strs"] == ["#", "#", "# ", "user", ": ", "This ", "is ", "a ", "test\n"]
    r = post(api, "/tokenize", {"prompt": ""})
    assert r.json() == {"count": 0, "max_model_len": 1024, "tokens": [], "token_strs": None}


@pytest.mark.parametrize("body,status,param", [
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, 400, "messages"),
    ({}, 400, "body.prompt"),                  # serve/tokenize/protocol.py:26 prompt: str (missing)
    ({"prompt": 5}, 400, "body.prompt"),       # string_type
    ({"prompt": "a", "return_token_strs": "maybe"}, 400, "body.return_token_strs"),
    ({"prompt": "a", "add_special_tokens": 2}, 400, "body.add_special_tokens"),
    ({"messages": [{"role": "user", "content": {"x": 1}}]}, 400, "messages[0].content"),
    ({"model": "nope", "prompt": "a"}, 404, "model"),
])
def test_tokenize_errors(api, body, status, param):
    assert err(post(api, "/tokenize", body), status)["param"] == param


def test_detokenize_round_trip(api):
    text = "Hello there, this is a round-trip test."
    ids = post(api, "/tokenize", {"prompt": text}).json()["tokens"]
    r = post(api, "/detokenize", {"model": "test-model", "tokens": ids})
    assert r.status_code == 200
    assert r.json() == {"prompt": text}


def test_detokenize_unknown_ids(api):
    r = post(api, "/detokenize", {"tokens": [7, 8, 9]})
    assert r.json() == {"prompt": "7,8,9"}
    r = post(api, "/detokenize", {"tokens": []})
    assert r.json() == {"prompt": ""}


def test_detokenize_generated_tokens(api):
    g = post(api, "/inference/v1/generate",
             {"model": "test-model", "token_ids": [1, 2], "sampling_params": {"max_tokens": 30}}).json()
    ids = g["choices"][0]["token_ids"]
    text = post(api, "/detokenize", {"tokens": ids}).json()["prompt"]
    assert post(api, "/tokenize", {"prompt": text}).json()["tokens"] == ids


@pytest.mark.parametrize("body,status,param", [
    ({}, 400, "body.tokens"),                  # serve/tokenize/protocol.py:198: no default (missing)
    # list[Annotated[int, Field(ge=0, le=2**63 - 1)]]: pydantic's errors, at their locations
    ({"tokens": None}, 400, "body.tokens"),
    ({"tokens": "1 2"}, 400, "body.tokens"),
    ({"tokens": [1, -1]}, 400, "body.tokens.1"),
    ({"tokens": [1, 2.5]}, 400, "body.tokens.1"),
    ({"tokens": [2 ** 63]}, 400, "body.tokens.0"),
    ({"tokens": [2 ** 32]}, 400, "tokens[0]"),       # valid for vLLM, past the simulated vocabulary
    ({"model": "nope", "tokens": [1]}, 404, "model"),
])
def test_detokenize_errors(api, body, status, param):
    assert err(post(api, "/detokenize", body), status)["param"] == param


def test_detokenize_bounds_in_pydantics_words(api):
    """vLLM 0.34's DetokenizeRequest.tokens (serve/tokenize/protocol.py:198) through its
    validation handler: every failing id, ``type`` "Bad Request"."""
    e = err(post(api, "/detokenize", {"tokens": [-1, 5, -2]}), 400)
    assert e["type"] == "Bad Request" and e["message"] == (
        "2 validation errors:\n"
        "  {'type': 'greater_than_equal', 'loc': 'body.tokens.0', 'msg': 'Input should be greater than or equal to 0', "
        "'input': '-1', 'ctx': {'ge': 0}}\n"
        "  {'type': 'greater_than_equal', 'loc': 'body.tokens.2', 'msg': 'Input should be greater than or equal to 0', "
        "'input': '-2', 'ctx': {'ge': 0}}")
    assert post(api, "/detokenize", {"tokens": ["5"]}).status_code == 200        # lax mode: "5" is 5
