"""Pooling routes (issue 24) through real client SDKs: the openai SDK's embeddings and the
``cohere`` SDK's v2 rerank, against ``--runner pooling`` apps."""
from __future__ import annotations

import base64
import struct

import httpx
import pytest

cohere = pytest.importorskip("cohere")


@pytest.fixture(scope="module")
def embed(app_client):
    return app_client("--runner", "pooling")


@pytest.fixture(scope="module")
def cross(app_client):
    return app_client("--runner", "pooling", "--convert", "score")


def cohere_client(api):
    return cohere.ClientV2(api_key="x", base_url=api.url,
                           httpx_client=httpx.Client(transport=httpx.WSGITransport(app=api.app)))


def test_openai_sdk_embeddings(embed):
    client = embed.openai()
    r = client.embeddings.create(model="test-model", input=["a cat", "a dog sat"])
    assert [d.index for d in r.data] == [0, 1] and all(len(d.embedding) == 384 for d in r.data)
    assert (r.usage.prompt_tokens, r.usage.total_tokens) == (5, 5) and r.model == "test-model"
    same = client.embeddings.create(model="test-model", input="a cat")
    assert same.data[0].embedding == r.data[0].embedding                      # deterministic
    b64 = client.embeddings.create(model="test-model", input="a cat", encoding_format="base64")
    raw = base64.b64decode(b64.data[0].embedding)
    assert struct.unpack(f"<{len(raw) // 4}f", raw) == pytest.approx(r.data[0].embedding, abs=1e-6)
    short = client.embeddings.create(model="test-model", input="a cat", dimensions=8)
    assert len(short.data[0].embedding) == 8


def test_openai_sdk_errors_on_a_pooling_model(embed):
    import openai
    client = embed.openai()
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="nope", input="a")
    assert "nope" in e.value.message
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="test-model", input="")
    with pytest.raises(openai.NotFoundError) as e:     # no generate task: vLLM registers no chat route
        client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body == {"detail": "Not Found"}


def test_cohere_sdk_v2_rerank_cross_encoder(cross):
    co = cohere_client(cross)
    docs = ["a cat is an animal", "stocks fell sharply", "cats purr"]
    r = co.rerank(model="test-model", query="what is a cat", documents=docs, top_n=2)
    assert r.id.startswith("score-") and len(r.results) == 2
    scores = [x.relevance_score for x in r.results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert r.results[0].index == 0 and r.results[0].document == {"text": docs[0], "multi_modal": None}
    full = co.rerank(model="test-model", query="what is a cat", documents=docs)
    assert sorted(x.index for x in full.results) == [0, 1, 2]
    assert [x.relevance_score for x in full.results][:2] == scores                # deterministic


def test_cohere_sdk_v2_rerank_bi_encoder_and_errors(embed):
    co = cohere_client(embed)
    r = co.rerank(model="test-model", query="a cat", documents=["a cat", "stocks"])
    assert r.results[0].index == 0 and r.results[0].relevance_score == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(cohere.errors.NotFoundError):
        co.rerank(model="nope", query="a", documents=["b"])
    # the SDK's embed always sends input_type, which vLLM refuses for a model without prompt
    # prefixes (its config has no task_instructions / sentence-transformers prompts)
    with pytest.raises(cohere.errors.BadRequestError) as e:
        co.embed(model="test-model", texts=["a cat"], input_type="search_document", embedding_types=["float"])
    assert "Unsupported input_type 'search_document'" in str(e.value.body)
