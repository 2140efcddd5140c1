"""``POST /inference/v1/generate`` request schema (vLLM token-in / token-out, api.md 5.5.1).

``token_ids`` and ``sampling_params`` are required, but their absence is reported by the
blueprint after the model check (``Missing input token_ids`` / ``Missing sampling_params
field``, as the reference orders it).  ``kv_transfer_params`` may also come in
``sampling_params.extra_args.kv_transfer_params``; ``ignore_eos`` at the root or in
``sampling_params`` (where vLLM's SamplingParams keeps it).  ``features`` is what the chat
render endpoint returns (``mm_hashes`` maps a modality to hash strings).  ``output_mode``
(vLLM's ``tokens`` / ``text`` / ``derender``) and the render's ``parse_context`` (an object;
``return_tokens_as_token_ids`` is read from it in derender mode).
"""
from __future__ import annotations

from marshmallow import ValidationError, fields, validate

from .common import (BaseSchema, IntList, SamplingKnobsSchema, Str, StreamOptionsSchema, ModelNested, StrictBool, StrictInt,
                     StringOrList)
from .lax import RepetitionDetection
from .render import TokenIdList

from generation.adapters import protocol as p


class ExtraArgsSchema(BaseSchema):
    __model__ = p.ExtraArgs
    kv_transfer_params = fields.Dict()


class SamplingParamsSchema(SamplingKnobsSchema):
    __model__ = p.SamplingParams
    max_tokens = StrictInt()
    n = StrictInt()
    ignore_eos = StrictBool()
    stop = StringOrList()
    stop_token_ids = IntList()
    logprobs = StrictInt()
    detokenize = StrictBool()
    skip_special_tokens = StrictBool()
    extra_args = fields.Nested(ExtraArgsSchema)
    prompt_logprobs = StrictInt()
    prompt_logprob_token_ids = fields.Raw()      # checked by generation.adapters.prompt_scores
    prompt_logprob_start = StrictInt()
    structured_outputs = fields.Dict()
    bad_words = fields.Raw()                     # generation.adapters.fields.check_bad_words
    repetition_detection = RepetitionDetection(where="sampling_params.")
    stream_interval = fields.Raw()               # read by --vllm-version (fields.request_stream_interval)


class MmHashes(fields.Field):
    """``{modality: [hash string, ...]}``."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise ValidationError("Must be an object mapping a modality to a list of hash strings.")
        for k, v in value.items():
            if not isinstance(v, list) or not all(isinstance(h, str) for h in v):
                raise ValidationError({k: ["Must be a list of hash strings."]})
        return value


class FeaturesSchema(BaseSchema):
    __model__ = p.Features
    mm_hashes = MmHashes()
    mm_placeholders = fields.Raw()
    kwargs_data = fields.Raw()


class GenerateRequestSchema(BaseSchema):
    __model__ = p.GenerateRequest
    model = Str()                   # vLLM's GenerateRequest: str | None = None (token_in_token_out/protocol.py:288)
    request_id = fields.String()
    token_ids = TokenIdList()
    sampling_params = fields.Nested(SamplingParamsSchema)
    stream = StrictBool()
    stream_options = ModelNested(StreamOptionsSchema, model_name="StreamOptions", allow_none=True)
    ignore_eos = StrictBool()
    kv_transfer_params = fields.Dict()
    features = fields.Nested(FeaturesSchema)
    cache_salt = fields.String()
    priority = StrictInt()
    output_mode = fields.String(validate=validate.OneOf(("tokens", "text", "derender")))
    parse_context = fields.Dict()
    reasoning_ended = fields.Boolean(allow_none=True)
    reasoning_parser_kwargs = fields.Dict(allow_none=True)


generate_request_schema = GenerateRequestSchema()
