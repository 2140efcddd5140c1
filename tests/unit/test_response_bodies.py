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


def test_pooling_render_and_generate_builders_keep_vllms_layouts():
    from generation.adapters import response_bodies as rb
    assert list(rb.pooling_usage(3)) == ["prompt_tokens", "total_tokens", "completion_tokens",
                                        "completion_tokens_details"]
    assert list(rb.embedding_data(0, [1.0])) == ["index", "object", "embedding"]
    c = rb.cohere_embed_response("embd-x", {"base64": ["A"], "float": [[1.0]]}, None, 2, 0)
    assert list(c) == ["id", "embeddings", "meta", "response_type"] and list(c["embeddings"]) == ["float", "base64"]
    g = rb.generate_request(token_ids=[1], request_id="r")
    assert "features" not in g and list(g)[:3] == ["request_id", "token_ids", "token_offsets"]
    assert g["output_mode"] == "tokens" and g["priority"] == 0 and g["stream"] is False
    assert rb.generate_request(token_ids=[1], features={"mm_hashes": {}})["features"] == {"mm_hashes": {}}
    assert list(rb.generate_text_choice(index=0, text="a"))[-2:] == ["text", "logprobs"]
    import pytest
    with pytest.raises(KeyError):
        rb.generate_request(token_ids=[1], nope=1)
    with pytest.raises(KeyError):
        rb.generate_response(id="x")
