"""Request schemas of the pooling routes (vLLM's ``entrypoints/pooling`` protocols):
``/pooling`` (PoolingCompletionRequest / PoolingChatRequest), ``/classify``
(ClassificationCompletionRequest / ClassificationChatRequest), ``/score`` (ScoreRequest: the
``queries``/``documents``, ``queries``/``items``, ``data_1``/``data_2`` and ``text_1``/``text_2``
spellings), ``/rerank`` (RerankRequest) and Cohere's ``/v2/embed`` (CohereEmbedRequest).

Each loads into a plain dict.  ``input`` takes the four OpenAI forms (see
:mod:`schemas.embeddings`); a score or rerank input is a string or ``{"content": [parts]}``
(vLLM's ScoreMultiModalParam), normalised to a list of items.  Unknown keys are ignored.
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validate

from .chat import MessagesField
from . import field_order as order
from .common import BaseSchema, BoundedList, Literal, Str, StrictBool, StrictInt
from .lax import lax_dict
from .embeddings import (EMBED_DTYPES, ENCODING_FORMATS, ENDIANNESS, TRUNCATION_SIDES, EmbeddingInputField,
                         PoolingChecks)

POOLING_TASKS = ("embed", "token_embed", "classify", "token_classify")


def _bad_truncate():
    raise ValidationError("truncate_prompt_tokens must be -1 (the model's maximum) or a positive integer")


class _PoolingBase(PoolingChecks):
    """vLLM's PoolingBasicRequestMixin."""
    model = Str()                   # str | None = None (pooling/base/protocol.py:37)
    user = fields.String()
    truncate_prompt_tokens = StrictInt(validate=lambda v: v == -1 or v >= 1 or _bad_truncate())
    truncation_side = Literal(*TRUNCATION_SIDES)
    request_id = fields.String()
    priority = StrictInt()
    use_activation = StrictBool()


class _InputMixin(_PoolingBase):
    input = EmbeddingInputField()
    messages = MessagesField()
    add_special_tokens = StrictBool()
    add_generation_prompt = StrictBool()       # ChatRequestOptionsMixin (pooling/base/protocol.py l. 228-293)
    continue_final_message = StrictBool()
    chat_template = Str()
    chat_template_kwargs = lax_dict()


class PoolingRequestSchema(_InputMixin):
    task = fields.String()
    # vLLM's EncodingRequestMixin (pydantic's literal_error, null included)
    encoding_format = Literal(*ENCODING_FORMATS, nullable=False)
    embed_dtype = Literal(*EMBED_DTYPES, nullable=False)
    endianness = Literal(*ENDIANNESS, nullable=False)
    dimensions = StrictInt()          # int | None: the range is PoolingParams' check (adapters.pooling)


class ClassifyRequestSchema(_InputMixin):
    pass


def _score_item(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), list):
        for part in v["content"]:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValidationError("content parts must be objects with a type")
        return v
    raise ValidationError("must be a string, an object with content parts, or a list of them")


class ScoreInputsField(fields.Field):
    """A string, ``{"content": [...]}``, or a list of them -> a list of items (an empty list is
    the request's 400, ``generation.adapters.pooling.score_pairs``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, list):
            return [_score_item(v) for v in value]
        return [_score_item(value)]


class ScoreInputField(fields.Field):
    """One score input (rerank's ``query``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        return _score_item(value)


class _ScoringBase(_PoolingBase):
    """vLLM 0.34's ScoringRequestMixin (scoring/protocol.py l. 19-53)."""
    max_tokens_per_query = StrictInt()
    max_tokens_per_doc = StrictInt()
    instruction = Str()
    chat_template_kwargs = lax_dict()


class ScoreRequestSchema(_ScoringBase):
    queries = ScoreInputsField()
    documents = ScoreInputsField()
    items = ScoreInputsField()
    data_1 = ScoreInputsField()
    data_2 = ScoreInputsField()
    text_1 = ScoreInputsField()
    text_2 = ScoreInputsField()


class RerankRequestSchema(_ScoringBase):
    # vLLM's RerankRequest, a pydantic model: a missing query or documents is its ``missing`` error
    __order__ = order.RerankRequest
    query = ScoreInputField(required=True)
    documents = ScoreInputsField(required=True)
    top_n = StrictInt()


class CohereContentSchema(BaseSchema):
    type = fields.String(required=True, validate=validate.OneOf(("text", "image_url")))
    text = fields.String(allow_none=True)         # a part without its payload: the request's check
    image_url = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True)


class CohereInputSchema(BaseSchema):
    content = BoundedList(fields.Nested(CohereContentSchema), required=True)


class CohereEmbedRequestSchema(BaseSchema):
    model = Str()                   # vLLM's CohereEmbedRequest: str | None = None (pooling/embed/protocol.py:262)
    input_type = fields.String()
    # exactly one of these, non-empty: vLLM's model validator, after the fields (blueprints.pooling)
    texts = BoundedList(fields.String())
    images = BoundedList(fields.String())
    inputs = BoundedList(fields.Nested(CohereInputSchema))
    output_dimension = StrictInt()          # int | None: the range is PoolingParams' check (adapters.pooling)
    embedding_types = BoundedList(fields.String(validate=validate.OneOf(
        ("float", "binary", "ubinary", "base64"),
        error="embedding_types must be among 'float', 'binary', 'ubinary', 'base64'")))
    truncate = fields.String(validate=validate.OneOf(("NONE", "START", "END"),
                                                     error="truncate must be 'NONE', 'START' or 'END'"))
    max_tokens = StrictInt(validate=validate.Range(min=1, error="max_tokens must be at least 1"))
    priority = StrictInt()


pooling_request_schema = PoolingRequestSchema()
classify_request_schema = ClassifyRequestSchema()
score_request_schema = ScoreRequestSchema()
rerank_request_schema = RerankRequestSchema()
cohere_embed_request_schema = CohereEmbedRequestSchema()
