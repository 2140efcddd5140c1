"""The 400s of the common client mistakes on /v1/chat/completions and /v1/completions, word for
word (message, type, param, code) as vLLM 0.34 answers them, each where vLLM raises it:

- pydantic (FastAPI's RequestValidationError, before the handler):
  ``serve/exception_handling/handlers/validation.py`` ``validation_exception_handler``:
  ``N validation error(s):``, type "Bad Request", param the cleaned ``loc`` (``body.x``);
- a request model's before-validator, the renderer, or ``SamplingParams._verify_args``: a
  ``VLLMValidationError`` (``vllm/exceptions.py:28-57``, `` (parameter=X, value=Y)`` appended),
  answered by ``create_error_response`` (``serve/exception_handling/error_response.py:41-44``):
  type "BadRequestError", param its ``parameter``.

Where the project's reference or cases speak (max_tokens <= 0: reference api.md section 13 #4;
unknown model: case C08), their words are kept and checked here as they are."""
from __future__ import annotations

import pytest

CHAT, COMPL = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]
BASE = {CHAT: {"messages": MSG}, COMPL: {"prompt": "hi"}, "/v1/completions/render": {}}
BOTH = [CHAT, COMPL]
PYD, SERVING = "Bad Request", "BadRequestError"


def call(api, path, extra, drop=()):
    body = {"model": "test-model", "max_tokens": 3, **BASE[path], **extra}
    for k in drop:
        body.pop(k)
    return api.post(path, json=body)


def error(api, path, extra, drop=()):
    r = call(api, path, extra, drop)
    assert r.status_code == 400, r.text
    assert list(r.json()) == ["error"]
    e = r.json()["error"]
    assert e["code"] == 400
    return e["message"], e["type"], e["param"]


def pyd(*lines: str) -> str:
    n = len(lines)
    return f"{n} validation {'error' if n == 1 else 'errors'}:\n" + "\n".join(f"  {x}" for x in lines)


# ---- SamplingParams._verify_args (sampling_params.py:636-700): VLLMValidationError -----------------
SAMPLING = [
    ({"temperature": -1}, "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
     "temperature"),                                                              # :666-671
    ({"temperature": 2.5}, "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)",
     "temperature"),                                                              # :672-677
    ({"top_p": 0}, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"),    # :678-683
    ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)", "top_p"),
    ({"top_k": -2}, "top_k must be 0 (disable), or at least 1, got -2.", None),                   # :685-688
    ({"min_p": 2}, "min_p must be in [0, 1], got 2.0.", None),                                    # :693-694
    ({"n": 0}, "n must be at least 1, got 0.", None),                                             # :54-55
    ({"presence_penalty": 3}, "presence_penalty must be in [-2, 2], got 3.0.", None),             # :642-645
    ({"frequency_penalty": -3}, "frequency_penalty must be in [-2, 2], got -3.0.", None),         # :646-649
    ({"repetition_penalty": 0}, "repetition_penalty must be greater than zero, got 0.0.", None),  # :655-659
]


@pytest.mark.parametrize("path", BOTH)
@pytest.mark.parametrize("extra,message,param", SAMPLING, ids=[str(c[0]) for c in SAMPLING])
def test_sampling_params_checks(api, path, extra, message, param):
    assert error(api, path, extra) == (message, SERVING, param)


@pytest.mark.parametrize("path", BOTH)
def test_n_cap_is_vllm_max_n_sequences(api, path):
    """``_verify_num_sequences`` (sampling_params.py:49-62): the cap is VLLM_MAX_N_SEQUENCES,
    16384 by default (envs.py:1209): n 200 is served."""
    r = call(api, path, {"n": 200, "max_tokens": 1})
    assert r.status_code == 200 and len(r.json()["choices"]) == 200


# ---- logprobs past --max-logprobs (20): SamplingParams._validate_logprobs (sampling_params.py:932-941)
def test_top_logprobs_past_max_logprobs(api):
    assert error(api, CHAT, {"logprobs": True, "top_logprobs": 25}) == (
        "Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)",
        SERVING, "logprobs")


def test_completions_logprobs_past_max_logprobs(api):
    assert error(api, COMPL, {"logprobs": 30}) == (
        "Requested sample logprobs of 30, which is greater than max allowed: 20 (parameter=logprobs, value=30)",
        SERVING, "logprobs")


# ---- pydantic field types and constraints: the validation handler -------------------------------
@pytest.mark.parametrize("path", BOTH)
def test_field_types(api, path):
    assert error(api, path, {"temperature": "hot"}) == (pyd(
        "{'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a valid number, unable to "
        "parse string as a number', 'input': 'hot'}"), PYD, "body.temperature")
    assert error(api, path, {"max_tokens": "ten"}) == (pyd(
        "{'type': 'int_parsing', 'loc': 'body.max_tokens', 'msg': 'Input should be a valid integer, unable to "
        "parse string as an integer', 'input': 'ten'}"), PYD, "body.max_tokens")
    assert error(api, path, {"seed": "x"}) == (pyd(
        "{'type': 'int_parsing', 'loc': 'body.seed', 'msg': 'Input should be a valid integer, unable to parse "
        "string as an integer', 'input': 'x'}"), PYD, "body.seed")


@pytest.mark.parametrize("path", BOTH)
def test_stop(api, path):
    """``StopParam = str | Annotated[list[str], Field(max_length=VLLM_MAX_STOP_STRINGS)] | None``
    (generate/base/protocol.py:26-28): every union member's error."""
    assert error(api, path, {"stop": list("abcde")}) == (pyd(
        "{'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', "
        "'input': '<list of 5 items>'}",
        "{'type': 'too_long', 'loc': 'body.stop', 'msg': 'List should have at most 4 items after validation, "
        "not 5', 'input': '<list of 5 items>', 'ctx': {'field_type': 'List', 'max_length': 4, 'actual_length': 5}}"),
        PYD, "body.stop")
    assert error(api, path, {"stop": 5}) == (pyd(
        "{'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', 'input': '5'}",
        "{'type': 'list_type', 'loc': 'body.stop', 'msg': 'Input should be a valid list', 'input': '5'}"),
        PYD, "body.stop")
    assert error(api, path, {"stop": ["a", 5]}) == (pyd(
        "{'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', "
        "'input': '<list of 2 items>'}",
        "{'type': 'string_type', 'loc': 'body.stop.1', 'msg': 'Input should be a valid string', 'input': '5'}"),
        PYD, "body.stop")


XML_ERRORS = (
    "{'type': 'literal_error', 'loc': 'body.response_format.type', 'msg': \"Input should be 'text', "
    "'json_object' or 'json_schema'\", 'input': 'xml', 'ctx': {'expected': \"'text', 'json_object' or "
    "'json_schema'\"}}",
    "{'type': 'literal_error', 'loc': 'body.response_format.type', 'msg': \"Input should be 'structural_tag'\", "
    "'input': 'xml', 'ctx': {'expected': \"'structural_tag'\"}}",
    "{'type': 'missing', 'loc': 'body.response_format.format', 'msg': 'Field required', "
    "'input': '<dict of 1 items>'}",
    "{'type': 'literal_error', 'loc': 'body.response_format.type', 'msg': \"Input should be 'structural_tag'\", "
    "'input': 'xml', 'ctx': {'expected': \"'structural_tag'\"}}",
    "{'type': 'missing', 'loc': 'body.response_format.structures', 'msg': 'Field required', "
    "'input': '<dict of 1 items>'}",
    "{'type': 'missing', 'loc': 'body.response_format.triggers', 'msg': 'Field required', "
    "'input': '<dict of 1 items>'}")


@pytest.mark.parametrize("path", BOTH)
def test_response_format_of_no_known_type(api, path):
    """``AnyResponseFormat`` (generate/base/protocol.py:137-178), a union of three
    OpenAIBaseModels: a value none takes is all their errors, the union tags
    (``function-wrap[__log_extra_fields__()]``) dropped from the loc."""
    assert error(api, path, {"response_format": {"type": "xml"}}) == (pyd(*XML_ERRORS), PYD,
                                                                       "body.response_format.type")
    assert error(api, path, {"response_format": "json"}) == (pyd(*(
        f"{{'type': 'model_type', 'loc': 'body.response_format', 'msg': 'Input should be a valid dictionary or "
        f"instance of {c}', 'input': 'json', 'ctx': {{'class_name': '{c}'}}}}"
        for c in ("ResponseFormat", "StructuralTagResponseFormat", "LegacyStructuralTagResponseFormat"))),
        PYD, "body.response_format")
    message, kind, param = error(api, path, {"response_format": {"type": "json_schema", "json_schema": {}}})
    assert message.startswith("6 validation errors:\n  {'type': 'missing', 'loc': "
                              "'body.response_format.json_schema.name', 'msg': 'Field required', 'input': "
                              "'<dict of 0 items>'}\n") and (kind, param) == (PYD, "body.response_format.json_schema.name")
    assert call(api, path, {"response_format": {"type": "json_object"}}).status_code == 200


def test_messages_missing(api):
    assert error(api, CHAT, {}, drop=("messages",)) == (pyd(
        "{'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', 'input': '<dict of 2 items>'}"),
        PYD, "body.messages")


# ---- request models' before-validators: VLLMValidationError ahead of the fields -------------------
@pytest.mark.parametrize("path", BOTH)
def test_stream_options_without_stream(api, path):
    """``validate_stream_options`` (chat_completion/protocol.py:860-871, completion/protocol.py:599-610)."""
    assert error(api, path, {"stream_options": {"include_usage": True}}) == (
        "Stream options can only be defined when `stream=True`. (parameter=stream_options)", SERVING,
        "stream_options")


def test_prompt_missing_or_empty(api):
    """``validate_prompt_and_prompt_embeds`` (completion/protocol.py:612-631): absent, null and
    "" alike; ``[]`` passes it and pydantic, and the renderer refuses it after the model check
    (renderers/base.py:580-583)."""
    missing = ("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", SERVING, "prompt")
    assert error(api, COMPL, {}, drop=("prompt",)) == missing
    assert error(api, COMPL, {"prompt": None}) == missing
    assert error(api, COMPL, {"prompt": ""}) == missing
    assert error(api, COMPL, {"prompt": "", "temperature": "hot"}) == missing        # before the fields
    assert error(api, COMPL, {"prompt": []}) == ("You must pass at least one prompt (parameter=prompt)", SERVING,
                                                 "prompt")
    assert error(api, "/v1/completions/render", {"prompt": []}) == (
        "You must pass at least one prompt (parameter=prompt)", SERVING, "prompt")
    r = call(api, COMPL, {"prompt": [], "model": "nope"})                            # the model check first
    assert r.status_code == 404
    # pydantic's fields before the renderer
    assert error(api, COMPL, {"prompt": [], "seed": "x"})[1:] == (PYD, "body.seed")


# ---- what vLLM accepts ------------------------------------------------------------------------
@pytest.mark.parametrize("path", BOTH)
def test_accepted(api, path):
    """Extra keys are ignored (``OpenAIBaseModel``: ``extra="allow"``, logged; best_of is no
    CompletionRequest field in 0.34); ``max_completion_tokens`` wins over ``max_tokens``
    (chat_completion/serving.py:350-358)."""
    for extra in ({"foo": 1}, {"best_of": 1, "n": 2}, {"best_of": "x"}):
        assert call(api, path, extra).status_code == 200, extra
    if path == CHAT:
        r = call(api, path, {"max_tokens": 50, "max_completion_tokens": 2})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
        # no role check: CustomChatCompletionMessageParam takes any role string
        assert call(api, path, {"messages": [{"role": "robot", "content": "hi"}]}).status_code == 200


# ---- the project's own words where its reference and cases speak -----------------------------------
@pytest.mark.parametrize("path", BOTH)
def test_max_tokens_not_positive_keeps_the_reference_words(api, path):
    """vLLM 0.34: ``max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)``
    (sampling_params.py:695-700); the reference's black-box case (api.md section 13, #4) needs
    ``Max completion tokens and max tokens should be positive`` in the message, so the simulator
    words it with vLLM's sentence first."""
    for v in (0, -5):
        assert error(api, path, {"max_tokens": v}) == (
            f"max_tokens must be at least 1, got {v}. (Max completion tokens and max tokens should be positive)",
            SERVING, "max_tokens")
    if path == CHAT:        # chat's max_completion_tokens becomes the same SamplingParams max_tokens
        assert error(api, path, {"max_completion_tokens": 0}) == (
            "max_tokens must be at least 1, got 0. (Max completion tokens and max tokens should be positive)",
            SERVING, "max_tokens")


@pytest.mark.parametrize("path", BOTH)
def test_unknown_model_is_case_c08(api, path):
    """vLLM 0.34 appends `` Valid aliases: <names>.`` (serve/engine/serving.py:76-84); case C08
    asks for the message without it."""
    r = call(api, path, {"model": "nope"})
    assert r.status_code == 404 and r.json() == {"error": {
        "message": "The model `nope` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}}
