"""Differences found by vLLM 0.34's own entrypoint tests (``bench/vllm_entrypoint_tests.py``),
each checked against vLLM 0.34's source: ``--response-length max``, ``allowed_token_ids`` with
``logprob_token_ids``, the token-in / token-out route's 0.34 fields."""
from __future__ import annotations

import json

import gevent
import pytest

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "what is 1+1?"}]


def _events(text: str) -> list:
    return [json.loads(e[6:]) for e in text.strip().split("\n\n") if e.startswith("data: {")]


def test_response_length_max_runs_capped_answers_to_their_cap(app_client, api):
    c = app_client("--response-length", "max")
    for k in range(8):
        d = c.post(CHAT, json={"messages": MSG, "max_tokens": 5, "seed": k}).json()
        assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 5
        d = c.post("/v1/completions", json={"prompt": "Hello, my name is", "max_tokens": 7, "seed": k}).json()
        assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 7
    # the default (the spec's histogram) still ends some answers early
    lengths = {api.post(CHAT, json={"messages": MSG, "max_tokens": 60, "seed": k}).json()["usage"]["completion_tokens"]
               for k in range(20)}
    assert min(lengths) < 60
    # natural: a cap under 20 tokens is always reached; a long one ends on its own (Normal(40, 20), >= 20)
    n = app_client("--response-length", "natural")
    for k in range(8):
        d = n.post(CHAT, json={"messages": MSG, "max_tokens": 10, "seed": k}).json()
        assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 10
    long = [n.post(CHAT, json={"messages": MSG, "max_tokens": 1000, "seed": k}).json() for k in range(20)]
    assert all(d["choices"][0]["finish_reason"] == "stop" for d in long)
    assert all(20 <= d["usage"]["completion_tokens"] < 1000 for d in long)
    r = n.post("/v1/messages", json={"model": "test-model", "max_tokens": 1024,
                                     "messages": [{"role": "user", "content": "how are you!"}]})
    assert r.json()["stop_reason"] == "end_turn"
    # stop strings still end an answer early (every sentence has a space)
    d = c.post(CHAT, json={"messages": MSG, "max_tokens": 30, "stop": [" "]}).json()
    assert d["choices"][0]["finish_reason"] == "stop" and d["usage"]["completion_tokens"] < 30


# ---- /inference/v1/generate (vLLM 0.34 token_in_token_out/serving.py) ---------------------------

GEN = "/inference/v1/generate"


def test_tokens_only_refuses_stop_strings_and_text_modes(app_client, api):
    c = app_client("--tokens-only")
    body = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 5, "stop": ["never"]}}
    r = c.post(GEN, json=body)
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "stop strings are not supported on a --tokens-only server because detokenization is disabled. "
                   "Check stop strings on the coordinator, or use stop_token_ids.",
        "type": "BadRequestError", "param": "stop", "code": 400}
    body["sampling_params"]["stop"] = None
    assert c.post(GEN, json=body).status_code == 200
    r = c.post(GEN, json={**body, "output_mode": "text"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "output_mode"
    assert r.json()["error"]["message"].startswith("output_mode='text' requires a tokenizer, but this server does "
                                                    "not load one (--tokens-only or --skip-tokenizer-init).")
    assert c.post(GEN, json={**body, "output_mode": "tokens"}).status_code == 200
    # the legacy unauthenticated abort path is served with --tokens-only only
    assert c.post("/abort_requests", json={"request_ids": ["x"]}).status_code == 200
    assert api.post("/abort_requests", json={"request_ids": ["x"]}).status_code == 404
    assert api.post(GEN, json={**body, "sampling_params": {"max_tokens": 2, "stop": ["x"]}}).status_code == 200


@pytest.mark.parametrize("mode", ["tokens", "text"])
def test_abort_requests_ends_a_generate_stream_with_an_abort_chunk(app_client, mode):
    c = app_client("--inter-token-latency", "50ms")
    job = gevent.spawn(c.post, GEN, json={"model": "test-model", "token_ids": [1, 2, 3], "request_id": f"ab-{mode}",
                                          "output_mode": mode, "stream": True,
                                          "stream_options": {"include_usage": True},
                                          "sampling_params": {"max_tokens": 100, "ignore_eos": True}})
    gevent.sleep(0.2)
    assert c.post("/inference/v1/abort_requests", json={"request_ids": [f"generate-tokens-ab-{mode}"]}).status_code == 200
    job.join(3)
    r = job.value
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    chunks = _events(r.text)
    assert {ch["output_mode"] for ch in chunks} == {mode}
    *tokens, last, usage = chunks
    assert 1 <= len(tokens) < 100 and all(ch["choices"][0]["finish_reason"] is None for ch in tokens)
    # the tokens streamed, as vLLM's num_generated_tokens (not the 100 the answer would have had)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(tokens)
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + len(tokens)
    # vLLM's whole GenerateTokens/TextStreamChoice (token_in_token_out/protocol.py l. 547-570); the
    # abort's output is a finished one, with the spans of the tokens made (output_processor.py)
    want = {"index": 0, "finish_reason": "abort", "stop_reason": None, "token_ids": [], "routed_experts": None,
            "sampling_mask": None, "weight_versions": [{"version": "default", "start": 0, "end": len(tokens)}],
            "logprobs": None}
    if mode == "text":
        want = {**{k: v for k, v in want.items() if k != "logprobs"}, "text": "", "logprobs": None}
    assert last["choices"] == [want] and last["request_id"] == f"generate-tokens-ab-{mode}"
    assert c.sim.running == 0


# ---- allowed_token_ids and logprob_token_ids (vLLM 0.34 sampling_params.py, completion/serving.py) -----

def test_allowed_token_ids_and_logprob_token_ids(api):
    body = {"model": "test-model", "prompt": "Hello", "max_tokens": 3, "temperature": 0.0, "logprobs": 5,
            "logprob_token_ids": [5000], "allowed_token_ids": [42], "return_tokens_as_token_ids": True,
            "ignore_eos": True}
    d = api.post("/v1/completions", json=body).json()
    lps = d["choices"][0]["logprobs"]
    assert lps["tokens"] == ["token_id:42"] * 3
    assert lps["top_logprobs"] == [{"token_id:42": -1.0, "token_id:5000": -1.5},
                                   {"token_id:42": -1.1, "token_id:5000": -1.6},
                                   {"token_id:42": -1.2, "token_id:5000": -1.7}]
    r = api.post("/v1/completions", json={**body, "stream": True})
    tops = [t for ch in _events(r.text) for t in ch["choices"][0]["logprobs"]["top_logprobs"]]
    assert tops == lps["top_logprobs"]
    d = api.post("/v1/completions", json={**body, "allowed_token_ids": [7, 9], "max_tokens": 20}).json()
    assert set(d["choices"][0]["logprobs"]["tokens"]) <= {"token_id:7", "token_id:9"}
    # vLLM's checks, each a 400 naming the field
    for extra, param, message in [
            ({"allowed_token_ids": []}, "allowed_token_ids", "allowed_token_ids is not None and empty!"),
            ({"allowed_token_ids": [-1]}, "allowed_token_ids", "allowed_token_ids contains out-of-vocab token id!"),
            ({"logprob_token_ids": [-3, 5]}, "logprob_token_ids",
             "token_id(s) [-3] in logprob_token_ids contain out-of-vocab token ids. Vocabulary size: "),
            ({"logprob_token_ids": list(range(129))}, "logprob_token_ids",
             "Requested logprob_token_ids of length 129, which is greater than max allowed: 128")]:
        r = api.post("/v1/completions", json={**body, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param
        assert r.json()["error"]["message"].startswith(message)


# ---- LoRA (vLLM 0.34 lora/peft_helper.py, openai/models/serving.py) --------------------------------

def test_lora_unsupported_inits_and_many_runtime_adapters(app_client, tmp_path):
    c = app_client("--max-loras", "1", "--max-cpu-loras", "2", "--max-lora-rank", "64")
    adapter = tmp_path / "a"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    base = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    for extra, ok in [({"init_lora_weights": "pissa"}, False), ({"init_lora_weights": "gaussian"}, True),
                      ({"init_lora_weights": True}, True), ({"use_qalora": True}, False)]:
        (adapter / "adapter_config.json").write_text(json.dumps({**base, **extra}))
        r = c.post("/v1/load_lora_adapter", json={"lora_name": f"x{len(extra)}{ok}{extra}", "lora_path": str(adapter)})
        assert r.status_code == (200 if ok else 400), r.text
    (adapter / "adapter_config.json").write_text(json.dumps({**base, "init_lora_weights": "pissa"}))
    r = c.post("/v1/load_lora_adapter", json={"lora_name": "p", "lora_path": str(adapter)})
    assert r.json()["error"]["message"] == (
        "vLLM does not support init_lora_weights='pissa'. Inits such as PiSSA, OLoRA, CorDA and LoftQ modify the "
        "base model weights when PEFT loads the adapter. Convert it to a regular LoRA adapter with PEFT's "
        "path_initial_model_for_weight_conversion, or set init_lora_weights to true if the served base model "
        "already contains the modified weights.")
    # ten adapters over --max-cpu-loras 2 all stay servable (vLLM reloads evicted ones from their path)
    (adapter / "adapter_config.json").write_text(json.dumps(base))
    for i in range(10):
        assert c.post("/v1/load_lora_adapter", json={"lora_name": f"adapter_{i}", "lora_path": str(adapter)}).status_code == 200
    for i in range(10):
        r = c.post("/v1/completions", json={"model": f"adapter_{i}", "prompt": "Hello there", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == f"adapter_{i}"


def test_generate_prompt_token_id_logprobs(api):
    import base64
    import io

    import numpy as np
    ids, rows = [11, 22, 33, 44, 55], [[33], [44, 100], [55]]
    sp = {"max_tokens": 1, "prompt_logprobs": 0, "prompt_logprob_token_ids": rows, "prompt_logprob_start": 1}
    body = {"model": "test-model", "token_ids": ids, "sampling_params": sp}
    d = api.post(GEN, json=body).json()
    plp = d["prompt_logprobs"]
    assert plp[:2] == [None, None] and [list(e) for e in plp[2:]] == [["33"], ["44"], ["55"]]
    assert [e[str(t)]["logprob"] for e, t in zip(plp[2:], ids[2:])] == [-1.2, -1.0, -1.1]
    scores = np.load(io.BytesIO(base64.b64decode(d["prompt_token_id_logprobs"])))
    assert scores.dtype == np.float32 and scores.shape == (3, 2)
    assert scores[:, 0].tolist() == pytest.approx([-1.2, -1.0, -1.1]) and scores[1, 1] == pytest.approx(-2.0)
    assert np.isneginf(scores[[0, 2], 1]).all()
    for extra, param, message in [
            ({"stream": True}, "prompt_logprob_token_ids", "prompt_logprob_token_ids are not available when stream=true."),
            ({"sampling_params": {**sp, "prompt_logprob_token_ids": rows[:2]}}, "prompt_logprob_token_ids",
             "prompt_logprob_token_ids has 2 rows, but the prompt has 3 scored rows (prompt_len - 1 - "
             "prompt_logprob_start)."),
            ({"sampling_params": {**sp, "prompt_logprob_token_ids": [[]]}}, "prompt_logprob_token_ids",
             "prompt_logprob_token_ids must be a non-empty integer array of shape [num_rows, num_ids]."),
            ({"sampling_params": {**sp, "prompt_logprob_token_ids": [[-2], [1], [1]]}}, "prompt_logprob_token_ids",
             "prompt_logprob_token_ids contain out-of-vocab token ids (-1 pads a row). Vocabulary size: "),
            ({"sampling_params": {"max_tokens": 1, "prompt_logprob_start": 1}}, "prompt_logprob_start",
             "prompt_logprob_start requires prompt_logprobs or prompt_logprob_token_ids."),
            ({"sampling_params": {"max_tokens": 1, "prompt_logprobs": 0, "prompt_logprob_start": 4}},
             "prompt_logprob_start", "prompt_logprob_start must be less than prompt_len - 1 (4) so at least one "
                                     "prompt row is scored.")]:
        r = api.post(GEN, json={**body, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        assert r.json()["error"]["message"].startswith(message)


def test_generate_sampling_mask(app_client, api):
    c = app_client("--return-sampling-mask", "--logprobs-mode", "processed_logprobs")
    sp = {"max_tokens": 5, "temperature": 0.8, "top_k": 3, "ignore_eos": True, "seed": 0, "logprobs": 5}
    body = {"model": "test-model", "token_ids": [1, 2, 3], "sampling_params": sp}
    (choice,) = c.post(GEN, json=body).json()["choices"]
    assert len(choice["sampling_mask"]) == len(choice["token_ids"]) == 5
    for tid, support, entry in zip(choice["token_ids"], choice["sampling_mask"], choice["logprobs"]["content"]):
        assert support[0] == tid and len(support) == len(set(support)) == 3
        assert [top["token_id"] in support for top in entry["top_logprobs"]] == [True] * 3 + [False] * 2
        assert [top["logprob"] > -9999.0 for top in entry["top_logprobs"]] == [True] * 3 + [False] * 2
    greedy = c.post(GEN, json={**body, "sampling_params": {"max_tokens": 2, "temperature": 0.0}}).json()
    masks = greedy["choices"][0]["sampling_mask"]
    assert masks and all(len(m) == 1 for m in masks)
    assert "sampling_mask" not in api.post(GEN, json=body).json()["choices"][0]


# ---- render -> generate (vLLM 0.34 scale_out/render/serving.py) -------------------------------------

STRUCTURED = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}}}
EU = [{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "How many countries are in the EU?"}]


def test_render_forwards_reasoning_and_structured_output_to_generate(app_client):
    c = app_client("--reasoning-parser", "deepseek_v3")
    body = {"model": "test-model", "messages": EU, "max_tokens": 64, "temperature": 0.0,
            "chat_template_kwargs": {"enable_thinking": True}, "response_format": STRUCTURED}
    chat = c.post(CHAT, json={**body, "return_token_ids": True}).json()["choices"][0]
    req = c.post("/v1/chat/completions/render", json={**body, "return_token_ids": True}).json()
    assert req["reasoning_ended"] is False
    # build_chat_params lays add_generation_prompt / continue_final_message over the request's kwargs
    kwargs = {"enable_thinking": True, "add_generation_prompt": True, "continue_final_message": False}
    assert req["reasoning_parser_kwargs"] == {"chat_template_kwargs": kwargs}
    assert req["sampling_params"]["structured_outputs"] == {"json": STRUCTURED["json_schema"]["schema"]}
    # (no return_tokens_as_token_ids: ParseContext's exclude_if leaves a null one out of vLLM's dump)
    assert req["parse_context"] == {"tools": None, "tool_choice": "none", "parallel_tool_calls": True,
                                    "include_reasoning": True,
                                    "chat_template_kwargs": kwargs, "history_tool_call_cnt": 0}
    gen = c.post(GEN, json=req).json()["choices"][0]
    assert gen["token_ids"] == chat["token_ids"]
    flag = c.post("/v1/chat/completions/render", json={**body, "return_tokens_as_token_ids": False}).json()
    assert flag["parse_context"]["return_tokens_as_token_ids"] is False
    # include_reasoning false: the answer is constrained from its first token (no reasoning)
    req = c.post("/v1/chat/completions/render", json={**body, "include_reasoning": False}).json()
    assert req["reasoning_ended"] is True
    text = c.post(GEN, json={**req, "output_mode": "text"}).json()["choices"][0]["text"]
    assert isinstance(json.loads(text)["count"], int)


def test_derender_needs_the_renders_parse_context_with_a_parser(app_client, api):
    c = app_client("--tool-call-parser", "hermes", "--enable-auto-tool-choice")
    chat = {"model": "test-model", "messages": EU, "max_tokens": 24, "temperature": 0.0}
    req = c.post("/v1/chat/completions/render", json=chat).json()
    missing = {k: v for k, v in req.items() if k != "parse_context"}
    r = c.post(GEN, json={**missing, "output_mode": "derender"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "parse_context"
    assert r.json()["error"]["message"] == ("output_mode='derender' requires parse_context on a server with a tool "
                                            "or reasoning parser. Use the one returned by /render.")
    r = c.post(GEN, json={**req, "output_mode": "derender",
                          "parse_context": {"tool_choice": {"type": "function", "function": {"name": "nope"}}}})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "The tool specified in `tool_choice` does not match any of the specified `tools`",
        "type": "BadRequestError", "param": "tool_choice", "code": 400}
    got = c.post(GEN, json={**req, "output_mode": "derender"}).json()["choices"][0]
    want = c.post(CHAT, json=chat).json()["choices"][0]
    assert got["message"]["content"] == want["message"]["content"] and got["finish_reason"] == want["finish_reason"]
    assert api.post(GEN, json={**missing, "output_mode": "derender"}).status_code == 200     # no parser: optional


@pytest.mark.parametrize("flag", [False, True])
def test_derender_routes_give_coupled_chats_logprobs(app_client, flag):
    c = app_client(*(["--return-tokens-as-token-ids"] if flag else []))
    for override in (None, False, True):
        req = {"model": "test-model", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 2,
               "temperature": 0, "logprobs": True, "top_logprobs": 2}
        if override is not None:
            req["return_tokens_as_token_ids"] = override
        expected = c.post(CHAT, json=req).json()["choices"][0]["logprobs"]
        assert len(expected["content"]) >= 1
        if (flag if override is None else override):        # placeholders: null bytes on both derender paths
            for e in expected["content"]:
                assert e["token"].startswith("token_id:")
                e["bytes"] = None
                for t in e["top_logprobs"]:
                    t["bytes"] = None
        payload = c.post("/v1/chat/completions/render", json=req).json()
        got = c.post(GEN, json={**payload, "output_mode": "derender"}).json()["choices"][0]["logprobs"]
        assert got == expected
        tokens = c.post(GEN, json={**payload, "output_mode": "tokens"}).json()
        r = c.post("/v1/chat/completions/derender", json={"model": "test-model", "chat_request": req,
                                                         "prompt_token_ids": payload["token_ids"],
                                                         "generate_response": tokens})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["choices"][0]["logprobs"] == expected and d["id"] == tokens["request_id"]
        assert d["usage"]["completion_tokens"] == len(tokens["choices"][0]["token_ids"])
        coupled = c.post(CHAT, json=req).json()       # the same models, dumped whole (response_bodies)
        assert list(d) == list(coupled) and list(d["choices"][0]) == list(coupled["choices"][0])
        assert list(d["choices"][0]["message"]) == list(coupled["choices"][0]["message"])
        assert d["system_fingerprint"] is None and d["metrics"] is None and d["prompt_token_ids"] is None
    r = c.post("/v1/chat/completions/derender", json={"model": "test-model", "generate_response": {"choices": 3}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "generate_response.choices"
    r = c.post("/v1/chat/completions/derender", json={"model": "test-model"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "generate_response"


def test_chat_logprob_token_ids_are_the_alternatives(api):
    body = {"model": "test-model", "messages": MSG, "max_tokens": 2, "ignore_eos": True, "logprobs": True,
            "top_logprobs": 5, "logprob_token_ids": [5000, 7], "return_tokens_as_token_ids": True,
            "temperature": 0}
    content = api.post(CHAT, json=body).json()["choices"][0]["logprobs"]["content"]
    for k, e in enumerate(content):
        assert [t["token"] for t in e["top_logprobs"]] == [e["token"], "token_id:5000", "token_id:7"]
        assert [t["logprob"] for t in e["top_logprobs"]] == [e["logprob"], round(-1.5 - k * 0.1, 6),
                                                             round(-2.0 - k * 0.1, 6)]
    chunks = _events(api.post(CHAT, json={**body, "stream": True}).text)
    streamed = [e for ch in chunks if ch["choices"] and ch["choices"][0].get("logprobs")
                for e in ch["choices"][0]["logprobs"]["content"]]
    assert streamed == content
