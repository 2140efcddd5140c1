"""generation/adapters/response_bodies.py: vLLM 0.34's non-streaming answers dumped whole.  Unit tier."""
from __future__ import annotations

import pytest

from generation.adapters import response_bodies as rb


def test_builders_lay_fields_out_in_the_models_order_null_unless_given():
    body = rb.completion_response(metrics={"x": 1}, id="cmpl-1", model="m", choices=[], usage={})
    assert list(body) == ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint",
                          "usage", "kv_transfer_params", "ec_transfer_params", "metrics"]
    assert body["object"] == "text_completion" and body["metrics"] == {"x": 1} and body["service_tier"] is None
    assert rb.chat_response(id="c", model="m", choices=[], usage={})["object"] == "chat.completion"
    assert rb.chat_choice(stop_reason=7, index=0) == {"index": 0, "message": None, "logprobs": None,
                                                        "finish_reason": None, "stop_reason": 7, "token_ids": None,
                                                        "routed_experts": None, "weight_versions": None}


def test_a_message_keeps_tool_calls_only_when_there_are_some():
    assert rb.chat_message("assistant", "hi") == {"role": "assistant", "content": "hi", "refusal": None,
                                                  "audio": None, "function_call": None, "reasoning": None}
    calls = [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert list(rb.chat_message("assistant", None, "why", calls)) == ["role", "content", "refusal", "audio",
                                                                     "function_call", "tool_calls", "reasoning"]
    assert "tool_calls" not in rb.chat_message("assistant", "x", tool_calls=[])


@pytest.mark.parametrize("build", [rb.chat_choice, rb.chat_response, rb.completion_choice, rb.completion_response])
def test_a_field_the_model_lacks_is_a_key_error(build):
    with pytest.raises(KeyError, match="not a field of the vLLM model: \\['bogus'\\]"):
        build(bogus=1)
