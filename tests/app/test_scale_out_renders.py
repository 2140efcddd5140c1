"""vLLM 0.34's scale-out routes added beside the chat ones: ``POST /v1/responses/render``
(``scale_out/render/serving.py`` ``render_responses_request``) and ``POST
/v1/completions/derender`` (``scale_out/derender/serving.py`` ``derender_completion_response``):
the round trip render -> ``/inference/v1/generate`` -> derender gives the coupled route's
answer, vLLM's bounds and refusals are 400s naming the field, never a 5xx."""
from __future__ import annotations

import pytest

from support import error_of

RESP_RENDER = "/v1/responses/render"
DERENDER = "/v1/completions/derender"
GEN = "/inference/v1/generate"
IMG = "http://example.com/a.png"


err = error_of


# ---- /v1/responses/render ---------------------------------------------------------------------

def test_responses_render_is_the_coupled_prompt_and_generates_its_answer(api):
    body = {"model": "test-model", "input": "Hello there", "instructions": "Be brief", "max_output_tokens": 8,
            "temperature": 0, "request_id": "resp_r1"}
    r = api.post(RESP_RENDER, json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert list(d) == ["token_ids", "request_id", "model", "sampling_params", "stream", "reasoning_parser_kwargs",
                       "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params"]
    assert d["request_id"] == "resp_r1" and d["model"] == "test-model" and d["stream"] is False
    assert (d["reasoning_parser_kwargs"], d["cache_salt"], d["priority"], d["kv_transfer_params"]) == \
        (None, None, 0, None)
    sp = d["sampling_params"]
    assert sp["max_tokens"] == 8 and sp["temperature"] == 0 and sp["n"] == 1 and sp["logprobs"] is None
    coupled = api.post("/v1/responses", json={k: v for k, v in body.items() if k != "request_id"}).json()
    assert len(d["token_ids"]) == coupled["usage"]["input_tokens"]      # instructions included, as /v1/responses
    gen = api.post(GEN, json=d).json()
    text = "".join(api.post("/detokenize", json={"tokens": [t]}).json()["prompt"] for t in gen["choices"][0]["token_ids"])
    assert text == coupled["output"][0]["content"][0]["text"]


def test_responses_render_fields(app_client, api):
    d = api.post(RESP_RENDER, json={"input": "Hi", "stream": True, "include": ["message.output_text.logprobs"],
                                    "top_logprobs": 3, "text": {"format": {"type": "json_object"}},
                                    "stop": "END", "priority": 2, "cache_salt": "salt",
                                    "kv_transfer_params": {"do_remote_decode": True}}).json()
    sp = d["sampling_params"]
    assert sp["logprobs"] == 3 and sp["stop"] == ["END"] and sp["structured_outputs"] == {"json_object": True}
    assert sp["max_tokens"] == 1024 - len(d["token_ids"])               # no max_output_tokens: the room left
    assert d["request_id"].startswith("resp_") and d["stream"] is True
    assert (d["priority"], d["cache_salt"], d["kv_transfer_params"]) == (2, "salt", {"do_remote_decode": True})
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    d = api.post(RESP_RENDER, json={"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                                         "schema": schema}}}).json()
    assert d["sampling_params"]["structured_outputs"] == {"json": schema}
    # media: the chat render's synthetic features
    img = [{"role": "user", "content": [{"type": "input_text", "text": "describe"},
                                        {"type": "input_image", "image_url": IMG}]}]
    d = api.post(RESP_RENDER, json={"input": img}).json()
    assert d["features"]["mm_hashes"] == {"image": ["sim_img_0_e2cca4f5"]}
    assert list(d)[:2] == ["token_ids", "features"]
    # a reasoning parser: its kwargs go to the engine
    r = app_client("--reasoning-parser", "qwen3").post(RESP_RENDER, json={
        "input": "Hi", "chat_template_kwargs": {"enable_thinking": False}}).json()
    # ResponsesRequest.build_chat_params lays the generation-prompt switches over the request's kwargs
    assert r["reasoning_parser_kwargs"] == {"chat_template_kwargs": {
        "enable_thinking": False, "add_generation_prompt": True, "continue_final_message": False}}


def test_responses_render_context_and_truncation(app_client):
    c = app_client("--max-model-len", "32")
    long = "word " * 60
    e = err(c.post(RESP_RENDER, json={"input": long}), 400)
    assert e["message"].startswith("This model's maximum context length is 32 tokens. However, your prompt contains ")
    d = c.post(RESP_RENDER, json={"input": long, "truncation": "auto"}).json()
    assert len(d["token_ids"]) == 31 and d["sampling_params"]["max_tokens"] == 1      # a token kept for output
    full = c.post("/tokenize", json={"messages": [{"role": "user", "content": long}]}).json()["tokens"]
    assert d["token_ids"] == full[-31:]                                                  # the end kept


@pytest.mark.parametrize("body, status, message, param", [
    ({"input": "x", "previous_response_id": "resp_1"}, 400,
     "previous_response_id is not supported by the stateless render endpoint.", "previous_response_id"),
    ({"input": "x", "model": "nope"}, 404, "The model `nope` does not exist.", "model"),
    ({"input": "x", "max_output_tokens": 0}, 400, "max_tokens must be at least 1, got 0. (parameter=max_tokens, "
                                                  "value=0)", "max_tokens"),
    ({"input": "x", "background": True, "store": False}, 400,
     "background can only be used when `store` is true (parameter=background)", "background"),
    ({"input": 5}, 400, "input: input must be a string or array", "input"),
    ({}, 400, "1 validation error:\n  {'type': 'missing', 'loc': 'body.input', 'msg': 'Field required', "
              "'input': '<dict of 1 items>'}", "body.input"),       # responses/protocol.py:264; :865 adds tool_choice
    ({"input": "x", "text": {"format": {"type": "json_object"}}, "structured_outputs": {"regex": "a"}}, 400,
     "Cannot specify both structured_outputs and text.format (parameter=structured_outputs)", "structured_outputs"),
])
def test_responses_render_refusals(api, body, status, message, param):
    e = err(api.post(RESP_RENDER, json=body), status)
    assert (e["message"], e["param"]) == (message, param)


def test_responses_render_type_of_previous_response_id_error(api):
    e = err(api.post(RESP_RENDER, json={"input": "x", "previous_response_id": "resp_1"}), 400)
    assert e["type"] == "invalid_request_error"


# ---- /v1/completions/derender -------------------------------------------------------------------

def _round_trip(c, req: dict):
    renders = c.post("/v1/completions/render", json=req).json()
    gens = [c.post(GEN, json=r).json() for r in renders]
    return renders, gens


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}, {"logprobs": 1, "return_tokens_as_token_ids": True},
                                   {"return_token_ids": True}])
def test_completions_derender_gives_the_coupled_completion(api, extra):
    req = {"model": "test-model", "prompt": ["Hello, my name is", "The capital of France"], "max_tokens": 6,
           "temperature": 0, **extra}
    renders, gens = _round_trip(api, req)
    r = api.post(DERENDER, json={"model": "test-model", "generate_responses": gens, "completion_request": req,
                                 "prompt_token_ids": [x["token_ids"] for x in renders]})
    assert r.status_code == 200, r.text
    d = r.json()
    coupled = api.post("/v1/completions", json=req).json()
    assert d["id"] == gens[0]["request_id"] and d["object"] == "text_completion" and d["model"] == "test-model"
    assert d["usage"] == coupled["usage"] and d["kv_transfer_params"] is None
    assert list(d) == list(coupled) and d["system_fingerprint"] is None     # vLLM's derender sets none
    for got, want in zip(d["choices"], coupled["choices"]):
        # the render -> generate chain carries no prompt ids (the renders here send no return_token_ids)
        assert got == {**want, "prompt_token_ids": None}
    assert [c["index"] for c in d["choices"]] == [0, 1]


def test_completions_derender_usage_and_params(api):
    gen = {"request_id": "g1", "choices": [{"index": 0, "token_ids": [1, 2, 3], "finish_reason": "length"},
                                           {"index": 1, "token_ids": [4], "stop_reason": 4}],
           "usage": {"prompt_tokens": 7}, "kv_transfer_params": {"remote_host": "h"}, "metrics": {"queue_time_ms": 1.0}}
    d = api.post(DERENDER, json={"generate_responses": [gen]}).json()
    assert d["usage"] == {"prompt_tokens": 7, "total_tokens": 11, "completion_tokens": 4,
                          "completion_tokens_details": None}
    assert [c["finish_reason"] for c in d["choices"]] == ["length", "stop"]     # GenerateChoice's default: stop
    assert d["choices"][1]["stop_reason"] == 4
    assert d["choices"][0]["text"] == "123"          # ids decoded one by one (unknown ids as their decimals)
    assert d["kv_transfer_params"] == {"remote_host": "h"} and d["metrics"] == {"queue_time_ms": 1.0}
    two = api.post(DERENDER, json={"generate_responses": [gen, {**gen, "kv_transfer_params": None}],
                                   "prompt_tokens": [1, 2]}).json()
    assert two["kv_transfer_params"] is None and two["metrics"] is None       # they differ: none; two prompts: no metrics
    assert two["usage"]["prompt_tokens"] == 3 and [c["index"] for c in two["choices"]] == [0, 1, 2, 3]
    assert api.post(DERENDER, json={"generate_responses": [{**gen, "usage": None}]}).json()["usage"]["prompt_tokens"] == 0


@pytest.mark.parametrize("body, message, param", [
    ({"generate_responses": []}, "generate_responses must not be empty", "generate_responses"),
    ({"generate_responses": [{"request_id": "g", "choices": [{"index": 0, "token_ids": []}]}]},
     "choice 0 in response g has empty or null token_ids", "generate_responses[0].choices"),
    ({"generate_responses": [{"choices": [{"index": 0, "token_ids": [1]}]}], "prompt_tokens": [1, 2]},
     "prompt_tokens length (2) must equal generate_responses length (1)", "prompt_tokens"),
    ({"generate_responses": [{"choices": [{"index": 0, "token_ids": [1]}]}], "prompt_token_ids": [[1], None]},
     "prompt_token_ids length (2) must equal generate_responses length (1)", "prompt_token_ids"),
    ({"generate_responses": [{"choices": [{"index": 0, "token_ids": [-1]}]}]},
     "generate_responses[0].choices[0].token_ids: Input should be a list of token ids (non-negative integers).",
     "generate_responses[0].choices[0].token_ids"),
    ({"generate_responses": [{"choices": [{"token_ids": [1]}]}]},
     "generate_responses[0].choices[0].index: Field required (an integer).", "generate_responses[0].choices[0].index"),
    ({"generate_responses": [{"choices": 3}]}, "generate_responses[0].choices: Field required (a list of choices).",
     "generate_responses[0].choices"),
    ({"generate_responses": [{"output_mode": "text", "choices": []}]},
     "generate_responses[0].output_mode: Input should be 'tokens'", "generate_responses[0].output_mode"),
    ({"generate_responses": [{"choices": [{"index": 0, "token_ids": [1], "logprobs": {"content": [{"token_id": "a"}]}}]}]},
     "generate_responses[0].choices[0].logprobs.content[0].token_id: Field required (an integer).",
     "generate_responses[0].choices[0].logprobs.content[0].token_id"),
    ({"generate_responses": "x"}, "generate_responses: Field required (a list of GenerateResponse objects).",
     "generate_responses"),
    ({"generate_responses": [{"choices": []}], "completion_request": {"logprobs": "2"}},
     "completion_request.logprobs: Input should be a valid integer.", "completion_request.logprobs"),
    ({"stream": True, "generate_chunk": {"choices": []}},
     "Streaming derender (stream=true: one generate_chunk and its stream_state per call) is not simulated; send "
     "the complete generate_responses with stream false.", "stream"),
])
def test_completions_derender_refusals_name_the_field(api, body, message, param):
    e = err(api.post(DERENDER, json=body), 400)
    assert (e["message"], e["param"], e["type"]) == (message, param, "BadRequestError")


def test_completions_derender_bounds_are_vllms(app_client):
    c = app_client("--max-model-len", "8", "--max-logprobs", "2")
    e = err(c.post(DERENDER, json={"generate_responses": [{"choices": [{"index": 3, "token_ids": list(range(9))}]}]}),
            400)
    assert e["message"] == "token_ids length (9) in choice 3 exceeds max_model_len (8)."
    entry = {"token_id": 1, "logprob": -1.0, "top_logprobs": [{"token_id": t, "logprob": -1.0} for t in range(3)]}
    e = err(c.post(DERENDER, json={"generate_responses": [{"choices": [{"index": 0, "token_ids": [1],
                                                                       "logprobs": {"content": [entry]}}]}]}), 400)
    assert e["message"] == "top_logprobs count (3) in choice 0 exceeds max_logprobs (2)."
    e = err(c.post(DERENDER, json={"generate_responses": [{"request_id": "g", "choices": [],
                                                          "prompt_logprobs": [None] * 9}]}), 400)
    assert e["message"] == "prompt_logprobs length (9) in response 'g' exceeds max_model_len (8)."
    e = err(c.post(DERENDER, json={"generate_responses": [{"choices": [{"index": 0, "token_ids": [1]}]}],
                                   "prompt_token_ids": [list(range(9))]}), 400)
    assert e["message"] == "prompt_token_ids length (9) exceeds max_model_len (8)."
    e = err(c.post(DERENDER, json={"model": "nope", "generate_responses": []}), 404)
    assert e["message"] == "The model `nope` does not exist."


def test_openai_sdk_reads_a_derendered_completion(api):
    from openai.types import Completion
    req = {"model": "test-model", "prompt": "Hello, my name is", "max_tokens": 4, "logprobs": 1}
    _, gens = _round_trip(api, req)
    out = api.openai().post("/completions/derender", cast_to=Completion,
                            body={"generate_responses": gens, "completion_request": req})
    assert isinstance(out, Completion) and out.choices[0].logprobs.tokens
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
