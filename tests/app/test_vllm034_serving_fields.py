"""vLLM 0.34 serving fields found by its own tests (bench/vllm_entrypoint_tests.py):
``kv_transfer_params.prompt_token_ids``, ``--enable-per-request-metrics``, the completion
choice's null ``token_ids`` / ``prompt_token_ids``."""
from __future__ import annotations

import json

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hello there"}]
TIMING = {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"}


def test_forwarded_prompt_ids_replace_the_rendered_messages(api):
    ids = api.post(CHAT, json={"messages": MSG, "max_tokens": 2, "return_token_ids": True}).json()["prompt_token_ids"]
    other = [{"role": "user", "content": "a different and longer conversation than the first"}]
    d = api.post(CHAT, json={"messages": other, "max_tokens": 2, "return_token_ids": True,
                             "kv_transfer_params": {"prompt_token_ids": ids}}).json()
    assert d["prompt_token_ids"] == ids and d["usage"]["prompt_tokens"] == len(ids)
    media = [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
    m = api.post(CHAT, json={"messages": media, "max_tokens": 2, "return_token_ids": True,
                             "kv_transfer_params": {"prompt_token_ids": ids}}).json()
    assert m["prompt_token_ids"] != ids          # vLLM ignores them with non-text content
    r = api.post(CHAT, json={"messages": MSG, "max_tokens": 2, "kv_transfer_params": {"prompt_token_ids": [1, -2]}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "kv_transfer_params.prompt_token_ids"


def test_per_request_metrics(app_client, api):
    c = app_client("--enable-per-request-metrics")
    body = c.post(CHAT, json={"messages": MSG, "max_tokens": 4, "min_tokens": 4}).json()
    assert TIMING <= body["metrics"].keys() and all(body["metrics"][k] >= 0 for k in TIMING)
    r = c.post(CHAT, json={"messages": MSG, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}})
    chunks = [json.loads(e[6:]) for e in r.text.strip().split("\n\n") if e.startswith("data: {")]
    assert all("metrics" not in ch for ch in chunks[:-1])
    assert chunks[-1]["metrics"].keys() == TIMING - {"mean_itl_ms"}      # one token: no ITL, left out
    assert c.post(CHAT, json={"messages": MSG, "max_tokens": 2, "n": 2}).json()["metrics"] is None
    assert api.post(CHAT, json={"messages": MSG, "max_tokens": 2}).json()["metrics"] is None
    assert TIMING <= c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).json()["metrics"].keys()


def test_completion_choices_carry_null_token_ids(api):
    choice = api.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).json()["choices"][0]
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None


def test_seed_below_int64_is_vllms_validation_error(api):
    # orjson reads -2**63 - 1 as the float -2**63: still below vLLM's bound (its test_long_seed)
    r = api.post(CHAT, json={"messages": MSG, "max_tokens": 2, "seed": -(2 ** 63) - 1})
    assert r.status_code == 400 and "greater_than_equal" in r.json()["error"]["message"]
    assert api.post(CHAT, json={"messages": MSG, "max_tokens": 2, "seed": -(2 ** 63)}).status_code == 200


def test_refused_admissions_are_counted(app_client):
    c = app_client("--max-num-seqs", "1", "--max-waiting-queue-length", "0")
    r = c.post(CHAT, json={"messages": MSG, "max_tokens": 2, "n": 3})
    assert r.status_code == 429
    line = [x for x in c.get("/metrics").text.splitlines()
            if x.startswith('vllm:admission_rejections_total{model_name="test-model",reason="max_num_queued_reqs"}')]
    assert line and float(line[0].split()[-1]) == 1.0


def test_multimodal_cache_counters_exist_at_zero(api):
    text = api.get("/metrics").text
    for name in ("vllm:mm_cache_queries_total", "vllm:mm_cache_hits_total"):
        assert f'{name}{{engine="0",model_name="test-model"}} 0.0' in text or \
            f'{name}{{model_name="test-model",engine="0"}} 0.0' in text, name


CHAT_KEYS = ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
             "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics"]
CHAT_CHOICE_KEYS = ["index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids", "routed_experts",
                    "weight_versions"]
COMPLETION_KEYS = ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                   "kv_transfer_params", "ec_transfer_params", "metrics"]
COMPLETION_CHOICE_KEYS = ["index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_logprobs",
                          "prompt_token_ids", "routed_experts", "weight_versions"]


def test_non_stream_answers_carry_every_field_of_vllms_models_in_their_order(api):
    """vLLM 0.34's routers answer ``model_dump()``: every field of the response, choice and
    message models, null where unset, but a message's empty ``tool_calls`` and null
    ``annotations`` (its serializer) and usage's null ``prompt_tokens_details``."""
    chat = api.post(CHAT, json={"messages": MSG, "max_tokens": 2}).json()
    assert list(chat) == CHAT_KEYS and list(chat["choices"][0]) == CHAT_CHOICE_KEYS
    message = chat["choices"][0]["message"]
    assert list(message) == ["role", "content", "refusal", "audio", "function_call", "reasoning"]
    assert [message[k] for k in ("refusal", "audio", "function_call", "reasoning")] == [None] * 4
    assert [chat[k] for k in CHAT_KEYS[5:] if k not in ("system_fingerprint", "usage")] == [None] * 7
    assert chat["system_fingerprint"].startswith("vllm-0.34.0-")
    assert list(chat["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens", "completion_tokens_details"]
    tool = {"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {}}}}
    called = api.post(CHAT, json={"messages": MSG, "max_tokens": 30, "tools": [tool],
                                  "tool_choice": "required"}).json()["choices"][0]["message"]
    assert list(called) == ["role", "content", "refusal", "audio", "function_call", "tool_calls", "reasoning"]
    done = api.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "n": 2}).json()
    assert list(done) == COMPLETION_KEYS and all(list(c) == COMPLETION_CHOICE_KEYS for c in done["choices"])
    assert done["system_fingerprint"] == chat["system_fingerprint"]     # CompletionResponse's too
    assert [done[k] for k in ("service_tier", "kv_transfer_params", "ec_transfer_params", "metrics")] == [None] * 4
    batch = api.post("/v1/chat/completions/batch", json={"messages": [MSG, MSG], "max_tokens": 2}).json()
    assert list(batch) == CHAT_KEYS and all(list(c) == CHAT_CHOICE_KEYS for c in batch["choices"])


def test_per_request_times_agree_with_the_metrics_in_step_mode(app_client):
    """vLLM's queued_ts is the engine core's QUEUED event: in step mode after the modelled
    frontend, as vllm:request_queue_time_seconds counts it, not at the request's arrival (a
    lone request on an idle engine queues 0 ms, while its TTFT carries the frontend's latency)."""
    c = app_client("--enable-per-request-metrics", "--latency-calculator", "step",
                   model="meta-llama/Llama-3.1-8B-Instruct")
    body = c.post(CHAT, json={"messages": MSG, "max_tokens": 30, "ignore_eos": True}).json()["metrics"]
    text = c.get("/metrics").text

    def total(name):
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(name + "{"))
    assert body["queue_time_ms"] == total("vllm:request_queue_time_seconds_sum") * 1000
    assert body["time_to_first_token_ms"] < total("vllm:time_to_first_token_seconds_sum") * 1000
