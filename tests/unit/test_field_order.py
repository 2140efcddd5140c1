"""The order in which the simulator lists a body's field errors is pydantic's for vLLM 0.34's
request models: ``schemas.field_order`` against the fields vLLM's source declares
(``tests/fixtures/vllm034_request_field_order.json``, read from the source by
:mod:`support.vllm_source`; compared with the source itself where it is unpacked, ``VLLM_SRC``)."""
from __future__ import annotations

import pytest

from schemas import field_order
from schemas.chat import batch_chat_request_schema, chat_request_schema
from schemas.common import StreamOptionsSchema
from schemas.completions import completion_request_schema
from schemas.embeddings import embedding_request_schema
from schemas.messages import count_tokens_request_schema, messages_request_schema
from schemas.pooling import rerank_request_schema
from schemas.render import chat_render_schema, completion_render_schema, detokenize_schema, tokenize_schema
from schemas.responses import responses_request_schema
from support import vllm_source

FIXTURE = vllm_source.fixture()
MSG = [{"role": "user", "content": "hi"}]

# (schema, body, the vLLM model that body is read as)
SCHEMAS = [(chat_request_schema, {}, "ChatCompletionRequest"), (chat_render_schema, {}, "ChatCompletionRequest"),
           (batch_chat_request_schema, {}, "BatchChatCompletionRequest"),
           (completion_request_schema, {}, "CompletionRequest"), (completion_render_schema, {}, "CompletionRequest"),
           (responses_request_schema, {}, "ResponsesRequest"),
           (embedding_request_schema, {"input": "hi"}, "EmbeddingCompletionRequest"),
           (embedding_request_schema, {"messages": MSG}, "EmbeddingChatRequest"),
           (tokenize_schema, {"prompt": "hi"}, "TokenizeCompletionRequest"),
           (tokenize_schema, {"messages": MSG}, "TokenizeChatRequest"), (detokenize_schema, {}, "DetokenizeRequest"),
           (messages_request_schema, {}, "AnthropicMessagesRequest"),
           (count_tokens_request_schema, {}, "AnthropicCountTokensRequest"),
           (StreamOptionsSchema(), {}, "StreamOptions"), (rerank_request_schema, {}, "RerankRequest")]


@pytest.mark.skipif(not vllm_source.VLLM_SRC.is_dir(), reason="vLLM 0.34's source is not unpacked (VLLM_SRC)")
def test_the_fixture_is_vllms_source():
    assert vllm_source.field_orders() == FIXTURE


@pytest.mark.parametrize("model", sorted(FIXTURE))
def test_each_order_is_the_models(model):
    assert getattr(field_order, model) == tuple(FIXTURE[model])


@pytest.mark.parametrize("schema,body,model", SCHEMAS, ids=[f"{type(s).__name__}-{m}" for s, _, m in SCHEMAS])
def test_a_schema_orders_its_fields_as_its_model(schema, body, model):
    """The fields the schema declares and the model has, ranked as the schema ranks them, are
    in the model's order; every such field is ranked (none falls to the end)."""
    rank = schema.field_rank(body)
    shared = [name for name in schema.fields if name in FIXTURE[model]]
    assert shared, model
    assert sorted(shared, key=rank.__getitem__) == [name for name in FIXTURE[model] if name in shared]
