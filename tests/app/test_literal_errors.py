"""A ``Literal``-typed request field refuses a wrong value and a wrong type alike in vLLM 0.34's
words: pydantic's ``literal_error`` (``Input should be 'left' or 'right'``, ``ctx`` its
``expected``) through the validation handler, ``type`` "Bad Request" and ``param``
``body.<field>`` (:class:`schemas.common.Literal`).  The annotations are vLLM's:
``chat_completion/protocol.py`` and ``completion/protocol.py`` (``truncation_side``),
``responses/protocol.py`` (``service_tier``, ``truncation``), ``pooling/base/protocol.py``
(``PoolingBasicRequestMixin``: ``padding``, ``truncation_side``; ``EncodingRequestMixin``:
``encoding_format``, ``embed_dtype``, ``endianness``, with ``utils/serial_utils.py``'s aliases),
replicated as small pydantic models and compared through :func:`support.pydantic_400`."""
from __future__ import annotations

from typing import Literal, Optional

import pydantic
import pytest

from support import ROUTE_BODIES, pydantic_400

SIDE = Literal["left", "right"]
PADDING = Literal["max_length", "do_not_pad"]


class Sampling(pydantic.BaseModel):
    """ChatCompletionRequest's and CompletionRequest's Literal fields."""
    truncation_side: Optional[SIDE] = None


class Responses(pydantic.BaseModel):
    """ResponsesRequest's Literal fields (``service_tier`` has no None)."""
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "auto"
    truncation: Optional[Literal["auto", "disabled"]] = "disabled"


class PoolingBasic(pydantic.BaseModel):
    """PoolingBasicRequestMixin's Literal fields (every pooling request)."""
    padding: Optional[PADDING] = None
    truncation_side: Optional[SIDE] = None


class Encoding(PoolingBasic):
    """EncodingRequestMixin's (embeddings and /pooling): no None."""
    encoding_format: Literal["float", "base64", "bytes", "bytes_only"] = "float"
    embed_dtype: Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"] = "float32"
    endianness: Literal["native", "big", "little"] = "native"


ROUTES = {
    "/v1/chat/completions": (Sampling, ()),
    "/v1/completions": (Sampling, ()),
    "/v1/responses": (Responses, ()),
    "/v1/embeddings": (Encoding, ()),
    "/pooling": (Encoding, ("--runner", "pooling", "--convert", "embed")),
    "/classify": (PoolingBasic, ("--runner", "pooling", "--convert", "classify")),
    "/score": (PoolingBasic, ("--runner", "pooling", "--convert", "score")),
    "/rerank": (PoolingBasic, ("--runner", "pooling", "--convert", "score")),
}
WRONG_TYPES = [5, 1.5, True, ["left"], {"a": 1}]
WRONG_VALUES = ["middle", "LEFT", "", " auto"]
CASES = [(route, field, value) for route, (model, _) in ROUTES.items() for field in model.model_fields
         for value in (*WRONG_TYPES, *WRONG_VALUES)]
# null where the annotation has no None (pydantic's literal_error with input None)
NULLS = [(route, field) for route, (model, _) in ROUTES.items() for field in model.model_fields
         if pydantic_400(model, {field: None}) is not None]


def check(client, route, field, value):
    model = ROUTES[route][0]
    expected = pydantic_400(model, {field: value})
    assert expected is not None and "'type': 'literal_error'" in expected[0]
    r = client.post(route, json={**ROUTE_BODIES[route], field: value})
    assert r.status_code == 400, r.text
    assert r.json() == {"error": {"message": expected[0], "type": "Bad Request", "param": f"body.{field}",
                                  "code": 400}}


@pytest.mark.parametrize("route,field,value", CASES, ids=[f"{r}-{f}-{v!r}" for r, f, v in CASES])
def test_a_wrong_literal_is_pydantics_400(app_client, route, field, value):
    check(app_client(*ROUTES[route][1]), route, field, value)


@pytest.mark.parametrize("route,field", NULLS, ids=[f"{r}-{f}" for r, f in NULLS])
def test_null_is_refused_where_vllm_has_no_none(app_client, route, field):
    check(app_client(*ROUTES[route][1]), route, field, None)


def test_the_message_is_pydantics():
    """The shape the brief names, spelled out once (pydantic 2's wording)."""
    assert pydantic_400(Sampling, {"truncation_side": 5}) == (
        "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.truncation_side', 'msg': \"Input should be "
        "'left' or 'right'\", 'input': '5', 'ctx': {'expected': \"'left' or 'right'\"}}", "body.truncation_side")


ACCEPTED = [("/v1/chat/completions", "truncation_side", "right"), ("/v1/chat/completions", "truncation_side", None),
            ("/v1/completions", "truncation_side", "left"), ("/v1/responses", "service_tier", "flex"),
            ("/v1/responses", "truncation", "auto"), ("/v1/responses", "truncation", None),
            ("/v1/embeddings", "encoding_format", "base64"), ("/v1/embeddings", "embed_dtype", "bfloat16"),
            ("/v1/embeddings", "endianness", "big"), ("/v1/embeddings", "truncation_side", "right"),
            ("/v1/embeddings", "padding", None), ("/pooling", "encoding_format", "base64"),
            ("/pooling", "embed_dtype", "float16"), ("/pooling", "endianness", "little"),
            ("/classify", "truncation_side", "left"), ("/score", "padding", "do_not_pad"),
            ("/rerank", "truncation_side", "right")]


@pytest.mark.parametrize("route,field,value", ACCEPTED, ids=[f"{r}-{f}-{v!r}" for r, f, v in ACCEPTED])
def test_what_vllm_takes_is_taken(app_client, route, field, value):
    r = app_client(*ROUTES[route][1]).post(route, json={**ROUTE_BODIES[route], field: value})
    assert r.status_code == 200, r.text


def test_pooling_encodes_what_vllm_takes(app_client):
    """vLLM's /pooling type takes ``bytes`` and ``bfloat16`` and encodes them; so does the
    simulator's (it refused them in its own words)."""
    c = app_client(*ROUTES["/pooling"][1])
    for field, value in (("encoding_format", "bytes"), ("embed_dtype", "bfloat16")):
        r = c.post("/pooling", json={**ROUTE_BODIES["/pooling"], field: value})
        assert r.status_code == 200, r.text