"""Client mistakes never yield a 500 nor take the server down: seeded random bodies against
every JSON endpoint (a small, deterministic fuzz run)."""
from __future__ import annotations

import json
import random


PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/v1/embeddings",
         "/inference/v1/generate", "/v1/completions/render", "/v1/chat/completions/render", "/tokenize",
         "/detokenize", "/v1/messages/count_tokens", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
         "/v1/chat/completions/batch", "/v1/responses/render", "/v1/completions/derender", "/scale_elastic_ep",
         "/is_scaling_elastic_ep"]
SCALARS = [None, True, False, 0, -1, 1, 2.5, 10 ** 12, "", "x", "test-model", [], {}, [1, 2], ["a"], {"a": 1},
           "none", "auto", "required", 1e308]
KEYS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options",
        "logprobs", "top_logprobs", "tools", "tool_choice", "response_format", "stop", "ignore_eos", "echo", "input",
        "instructions", "max_output_tokens", "system", "token_ids", "sampling_params", "encoding_format",
        "dimensions", "kv_transfer_params", "cache_hit_threshold", "text", "include", "tokens", "lora_name",
        "temperature", "stop_sequences", "features", "parallel_tool_calls", "generate_responses",
        "completion_request", "prompt_tokens", "prompt_token_ids", "new_data_parallel_size", "drain_timeout"]
INNER = KEYS + ["role", "content", "type", "text", "name", "function", "parameters", "input_schema", "image_url",
                "url", "source", "tool_use_id", "id", "arguments", "call_id", "output", "include_usage", "properties",
                "choices", "index", "token_ids", "token_id", "usage", "request_id"]


def random_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth < 3 and r < 0.2:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and r < 0.4:
        return {rng.choice(INNER): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice(SCALARS)


def test_random_bodies_never_500(app_client):
    base = app_client("--max-num-seqs", "50", "--mode", "echo")
    rng = random.Random(20261129)
    failures = []
    with base.session(timeout=10, headers={"anthropic-version": "2023-06-01"}) as client:
        for _ in range(830):            # ~46 random bodies for each of the 18 paths
            path = rng.choice(PATHS)
            body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "prompt": "hi",
                    "input": "hi", "max_tokens": 5, "token_ids": [1, 2], "sampling_params": {"max_tokens": 3}}
            if path == "/v1/chat/completions/batch":
                body["messages"] = [body["messages"]] * 2
            elif path == "/v1/completions/derender":
                body["generate_responses"] = [{"choices": [{"index": 0, "token_ids": [1, 2]}]}]
            for k in rng.sample(list(body), rng.randint(0, 3)):
                del body[k]
            for _ in range(rng.randint(1, 4)):
                body[rng.choice(KEYS)] = random_value(rng)
            if rng.random() < 0.05:
                r = client.post(path, content=json.dumps(body)[: rng.randint(0, 40)],
                                headers={"content-type": "application/json"})
            else:
                r = client.post(path, json=body)
            if r.status_code >= 500:
                failures.append((path, body, r.status_code, r.text[:200]))
        assert client.get("/health").status_code == 200
    assert failures == []
