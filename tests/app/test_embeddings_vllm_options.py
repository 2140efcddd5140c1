"""Embeddings options as vLLM 0.33 serves them (issue 22): usage with ``completion_tokens: 0``,
``embed_dtype`` and ``endianness`` in the base64 payload, ``encoding_format`` ``bytes`` /
``bytes_only``, bad values naming the value, and the chat form's template options."""
from __future__ import annotations

import base64
import json
import sys

import ml_dtypes
import numpy as np
import pytest

EMB = "/v1/embeddings"
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def embed(api, **body):
    r = api.post(EMB, json={"model": "test-model", "input": "hello there", **body})
    assert r.status_code == 200, r.text
    return r


def reference(api, dims=None) -> np.ndarray:
    extra = {"dimensions": dims} if dims else {}
    return np.asarray(embed(api, encoding_format="float", **extra).json()["data"][0]["embedding"], dtype=np.float32)


def test_usage_has_completion_tokens(api):
    u = embed(api).json()["usage"]
    assert u == {"prompt_tokens": u["prompt_tokens"], "total_tokens": u["prompt_tokens"], "completion_tokens": 0,
                 "completion_tokens_details": None}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("endianness", ["native", "little", "big"])
def test_base64_payload_follows_embed_dtype_and_endianness(api, dtype, endianness):
    want = reference(api).astype(DTYPES[dtype])
    b64 = embed(api, encoding_format="base64", embed_dtype=dtype, endianness=endianness).json()["data"][0]["embedding"]
    raw = base64.b64decode(b64)
    assert len(raw) == want.size * want.dtype.itemsize
    order = sys.byteorder if endianness == "native" else endianness
    got = np.frombuffer(raw, dtype=np.dtype(DTYPES[dtype]).newbyteorder("<" if order == "little" else ">"))
    assert np.array_equal(got.astype(np.float32), want.astype(np.float32))


def test_default_base64_is_native_float32(api):
    b64 = embed(api, encoding_format="base64").json()["data"][0]["embedding"]
    assert np.array_equal(np.frombuffer(base64.b64decode(b64), dtype="=f4"), reference(api))


def test_float_format_ignores_embed_dtype(api):
    got = embed(api, encoding_format="float", embed_dtype="float16").json()["data"][0]["embedding"]
    assert np.array_equal(np.asarray(got, dtype=np.float32), reference(api))


def test_bytes_format_with_metadata_header(api):
    r = api.post(EMB, json={"model": "test-model", "input": ["hello there", "bye"], "encoding_format": "bytes",
                            "embed_dtype": "float16", "endianness": "big", "dimensions": 8})
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    meta = json.loads(r.headers["metadata"])
    assert meta["model"] == "test-model" and meta["id"].startswith("embd-")
    assert [(d["index"], d["start"], d["end"], d["shape"], d["embed_dtype"], d["endianness"]) for d in meta["data"]] \
        == [(0, 0, 16, [8], "float16", "big"), (1, 16, 32, [8], "float16", "big")]
    assert meta["usage"]["prompt_tokens"] == meta["usage"]["total_tokens"] > 0
    first = np.frombuffer(r.content[:16], dtype=">f2")
    assert np.array_equal(first, reference(api, dims=8).astype(np.float16))
    assert len(r.content) == 32


def test_bytes_only_has_no_metadata(api):
    r = api.post(EMB, json={"model": "test-model", "input": "hello there", "encoding_format": "bytes_only",
                            "dimensions": 4})
    assert r.status_code == 200 and "metadata" not in r.headers
    assert np.array_equal(np.frombuffer(r.content, dtype="=f4"), reference(api, dims=4))


@pytest.mark.parametrize("field,value", [("encoding_format", "hex"), ("embed_dtype", "int8"),
                                         ("endianness", "middle")])
def test_bad_values_are_400s_naming_the_value(api, field, value):
    r = api.post(EMB, json={"model": "test-model", "input": "hi", field: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == f"body.{field}" and repr(value) in err["message"] and err["type"] == "Bad Request"
    # vLLM's pydantic error names its type (vLLM's test_params_not_supported reads it)
    assert err["message"].startswith(f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'body.{field}', "
                                     "'msg': \"Input should be ")


def test_chat_form_refuses_continue_final_message_with_add_generation_prompt(api):
    msgs = [{"role": "user", "content": "hi"}]
    r = api.post(EMB, json={"model": "test-model", "messages": msgs, "continue_final_message": True,
                            "add_generation_prompt": True})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    assert api.post(EMB, json={"model": "test-model", "messages": msgs, "continue_final_message": True}).status_code \
        == 200


def test_truncation_side(api):
    ids = list(range(100, 110))
    left = embed(api, input=ids, truncate_prompt_tokens=3).json()
    right = embed(api, input=ids, truncate_prompt_tokens=3, truncation_side="right").json()
    assert left["usage"]["prompt_tokens"] == right["usage"]["prompt_tokens"] == 3
    assert left["data"][0]["embedding"] == embed(api, input=ids[-3:]).json()["data"][0]["embedding"]
    assert right["data"][0]["embedding"] == embed(api, input=ids[:3]).json()["data"][0]["embedding"]
    r = api.post(EMB, json={"model": "test-model", "input": "hi", "truncation_side": "up"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.truncation_side"


@pytest.mark.parametrize("flags", [(), ("--runner", "pooling", "--convert", "embed")])
def test_body_request_id_names_the_response(app_client, flags):
    """PoolingBasicRequestMixin.request_id (vLLM 0.34 pooling/base/protocol.py:62): the id is
    ``embd-<request_id>`` (embed/serving.py:45, base/serving.py:112-115), the X-Request-Id
    header before it."""
    c = app_client(*flags)
    assert embed(c, request_id="abc").json()["id"] == "embd-abc"
    r = c.post(EMB, json={"input": "hi", "request_id": "abc"}, headers={"X-Request-Id": "hdr"})
    assert r.json()["id"] == "embd-hdr"


def test_chat_conversations_in_input_and_batched_messages(api):
    """vLLM 0.34's EmbeddingChatInputRequest, EmbeddingBatchChatRequest and
    EmbeddingBatchChatInputRequest (pooling/embed/protocol.py:113-160, embed/io_processor.py:
    336-341): chat messages in ``input`` are one conversation, a list of conversations in
    ``input`` or ``messages`` is one embedding per conversation, in order."""
    hi, yo = [{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]
    one = embed(api, input=None, messages=hi).json()
    two = [embed(api, input=None, messages=m).json()["data"][0]["embedding"] for m in (hi, yo)]
    assert embed(api, input=hi).json()["data"] == one["data"]
    for body in ({"input": [hi, yo]}, {"input": None, "messages": [hi, yo]}):
        b = embed(api, **body).json()
        assert [(d["index"], d["embedding"]) for d in b["data"]] == [(0, two[0]), (1, two[1])]
        assert b["usage"]["prompt_tokens"] == 2 * one["usage"]["prompt_tokens"]
    r = api.post(EMB, json={"messages": [hi, []]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1]"
