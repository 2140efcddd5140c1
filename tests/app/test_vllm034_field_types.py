"""vLLM 0.34's request fields the simulator accepted unchecked, refused as vLLM refuses them:
pydantic's type errors in its validation handler's words (``mm_payload``, ``session_id``,
``length_penalty``, ... : ``chat_completion/protocol.py``, ``completion/protocol.py``,
``responses/protocol.py``), ``repetition_detection`` (``sampling_params.py``:
``RepetitionDetectionParams``), ``bad_words`` past ``VLLM_MAX_NUM_BAD_WORDS``
(``SamplingParams.update_from_tokenizer``), the per-request multimodal kwargs without
``--trust-request-mm-kwargs`` (``validate_request_mm_kwargs``).  Each 400 is checked for its
exact message and ``param``; what vLLM accepts is still a 200."""
from __future__ import annotations

import os

import pytest

from support import error_type_400

from support.tokenizer_hub import MODEL, make_hub

CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
MSG = [{"role": "user", "content": "Hello there"}]
BODIES = [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})]


def post(api, path, body):
    limit = {"max_output_tokens": 2} if path == RESPONSES else {"max_tokens": 2}
    return api.post(path, json={"model": "test-model", **limit, **body})


def err(api, path, body) -> tuple:
    r = post(api, path, body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert (e["type"], e["code"]) == (error_type_400(e["message"]), 400)
    return e["message"], e["param"]


def one(kind: str, loc: str, msg: str, value: str, ctx: str = "") -> tuple:
    """vLLM's validation handler's 400 for one pydantic error: ``(message, param)``."""
    tail = f", 'ctx': {ctx}" if ctx else ""
    return (f"1 validation error:\n  {{'type': '{kind}', 'loc': 'body.{loc}', 'msg': '{msg}', 'input': {value}{tail}}}",
            f"body.{loc}")


NUMBER = "Input should be a valid number"
BOOL = "Input should be a valid boolean"
BOOL_WORD = "Input should be a valid boolean, unable to interpret input"
MM_PAYLOAD = ("\"Input should be 'tensors' or 'none'\"", "{'expected': \"'tensors' or 'none'\"}")


@pytest.mark.parametrize("path,body", BODIES)
def test_types_as_pydantic_reads_them(api, path, body):
    """``length_penalty: float = 1.0`` (null too is a type error), ``session_id: str | None``,
    ``mm_payload: Literal["tensors", "none"]`` (not nullable), the boolean flags (lax: ``"no"``
    is false, ``2`` is not a boolean; ``spaces_between_special_tokens`` is not nullable)."""
    assert err(api, path, {**body, "length_penalty": "x"}) == one(
        "float_parsing", "length_penalty", f"{NUMBER}, unable to parse string as a number", "'x'")
    assert err(api, path, {**body, "length_penalty": None}) == one("float_type", "length_penalty", NUMBER, "'None'")
    assert err(api, path, {**body, "session_id": 5}) == one("string_type", "session_id",
                                                             "Input should be a valid string", "'5'")
    msg, ctx = MM_PAYLOAD
    m, p = err(api, path, {**body, "mm_payload": "x"})
    assert (m, p) == ("1 validation error:\n  {'type': 'literal_error', 'loc': 'body.mm_payload', 'msg': " + msg
                      + ", 'input': 'x', 'ctx': " + ctx + "}", "body.mm_payload")
    assert err(api, path, {**body, "mm_payload": None})[1] == "body.mm_payload"
    assert err(api, path, {**body, "skip_special_tokens": 2}) == one("bool_parsing", "skip_special_tokens", BOOL_WORD,
                                                                      "'2'")
    assert err(api, path, {**body, "return_mm_kwargs": []}) == one("bool_type", "return_mm_kwargs", BOOL,
                                                                    "'<list of 0 items>'")
    assert err(api, path, {**body, "spaces_between_special_tokens": None}) == one(
        "bool_type", "spaces_between_special_tokens", BOOL, "'None'")
    assert err(api, path, {**body, "ec_transfer_params": "x"}) == one(
        "dict_type", "ec_transfer_params", "Input should be a valid dictionary", "'x'")
    for fine in ({"length_penalty": "1.5"}, {"length_penalty": True}, {"session_id": None}, {"session_id": "s-1"},
                 {"mm_payload": "none"}, {"return_mm_kwargs": False}, {"skip_special_tokens": "no"},
                 {"spaces_between_special_tokens": 1}, {"watermarking": None}, {"return_weight_versions": "yes"},
                 {"return_token_offsets": None}, {"ec_transfer_params": {"a": 1}}):
        assert post(api, path, {**body, **fine}).status_code == 200, fine


def test_chat_only_fields(api):
    """``documents: list[dict[str, str]]`` and ``media_io_kwargs: dict[str, dict]`` are chat's
    (every failing item reported); a completions request carries them as ignored extras."""
    m, p = err(api, CHAT, {"messages": MSG, "documents": [{"title": 1}, 3]})
    assert (m, p) == ("2 validation errors:\n"
                      "  {'type': 'string_type', 'loc': 'body.documents.0.title', 'msg': 'Input should be a valid "
                      "string', 'input': '1'}\n"
                      "  {'type': 'dict_type', 'loc': 'body.documents.1', 'msg': 'Input should be a valid dictionary', "
                      "'input': '3'}", "body.documents.0.title")
    assert err(api, CHAT, {"messages": MSG, "media_io_kwargs": {"image": 1}}) == one(
        "dict_type", "media_io_kwargs.image", "Input should be a valid dictionary", "'1'")
    assert err(api, CHAT, {"messages": MSG, "return_prompt_text": "maybe"}) == one(
        "bool_parsing", "return_prompt_text", BOOL_WORD, "'maybe'")
    assert post(api, CHAT, {"messages": MSG, "documents": [{"title": "t", "text": "x"}]}).status_code == 200
    assert post(api, COMPLETIONS, {"prompt": "hi", "documents": 3}).status_code == 200


REPETITION_BOUNDS = ("max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= max_pattern_size. "
                     "Set both to 0 to disable repetitive pattern detection.")
REPETITION_COUNT = ("min_count must be >= 2 to detect repetitive patterns in engine output. If you do not wish to "
                    "detect repetitive patterns, set max_pattern_size to 0.")


@pytest.mark.parametrize("path,body", BODIES)
def test_repetition_detection(api, path, body):
    """An object of three ints (pydantic's ``dataclass_type`` otherwise; each int read as pydantic
    reads one, every bad one reported), then ``RepetitionDetectionParams.__post_init__``'s
    checks (raised without a parameter in vLLM; named here)."""
    assert err(api, path, {**body, "repetition_detection": 5}) == one(
        "dataclass_type", "repetition_detection", "Input should be a dictionary or an instance of "
        "RepetitionDetectionParams", "'5'", "{'class_name': 'RepetitionDetectionParams'}")
    m, p = err(api, path, {**body, "repetition_detection": {"max_pattern_size": "a", "min_count": 2.5}})
    assert (m, p) == (
        "2 validation errors:\n"
        "  {'type': 'int_parsing', 'loc': 'body.repetition_detection.max_pattern_size', 'msg': 'Input should be a "
        "valid integer, unable to parse string as an integer', 'input': 'a'}\n"
        "  {'type': 'int_from_float', 'loc': 'body.repetition_detection.min_count', 'msg': 'Input should be a valid "
        "integer, got a number with a fractional part', 'input': '2.5'}", "body.repetition_detection.max_pattern_size")
    for bad in ({"max_pattern_size": -1}, {"min_pattern_size": 3}, {"max_pattern_size": 2, "min_pattern_size": 3}):
        assert err(api, path, {**body, "repetition_detection": bad}) == (REPETITION_BOUNDS, "repetition_detection")
    assert err(api, path, {**body, "repetition_detection": {"max_pattern_size": 4, "min_count": 1}}) == (
        REPETITION_COUNT, "repetition_detection")
    for fine in ({}, {"max_pattern_size": "4", "min_count": 2.0}, {"max_pattern_size": 4, "min_pattern_size": 2,
                                                                  "min_count": 3, "other": 1}, None):
        assert post(api, path, {**body, "repetition_detection": fine}).status_code == 200, fine


TOO_MANY = "Too many bad words after tokenization: {n}. The max number is {m}."


@pytest.mark.parametrize("path,body", BODIES)
def test_bad_words_past_vllms_limits(api, path, body):
    """``VLLM_MAX_NUM_BAD_WORDS`` (128) banned sequences after tokenization, counted over the
    distinct words (the simulated tokenizer reads a leading space as nothing: one sequence a
    word); a word of spaces alone tokenizes to nothing; at most
    ``VLLM_MAX_BAD_WORDS_TOTAL_TOKENS`` (1024) tokens in all (the engine's bound in vLLM)."""
    words = [f"w{i}" for i in range(129)]
    assert err(api, path, {**body, "bad_words": words}) == (
        TOO_MANY.format(n=129, m=128) + f" (parameter=bad_words, value={words})", "bad_words")
    assert post(api, path, {**body, "bad_words": words[:128] + words[:5]}).status_code == 200
    assert err(api, path, {**body, "bad_words": ["ok", "  "]}) == (
        "bad_words entries must tokenize to at least one token. (parameter=bad_words, value=['ok', '  '])", "bad_words")
    tokens = len(api.sim.tokenizer.encode("x" * 5000)[0])
    assert tokens * 13 > 1024 >= tokens * 12
    assert err(api, path, {**body, "bad_words": [c * 5000 for c in "abcdefghijklm"]}) == (
        f"Too many total bad word tokens: {tokens * 13}. The max is 1024.", "bad_words")
    assert post(api, path, {**body, "bad_words": [c * 5000 for c in "abcdefghijkl"]}).status_code == 200


@pytest.fixture(scope="module")
def hf_api(app_client, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf_home"))
    make_hub(root)
    return app_client("--tokenizers-cache-dir", os.path.join(root, "hub"), model=MODEL)


def test_bad_words_count_the_spaced_form_when_it_is_another_token(hf_api, monkeypatch):
    """A byte-level BPE: ``a`` and `` a`` are two one-token sequences (both banned, two of the
    limit), ``Hello`` / `` Hello`` differ in length and ``the`` / `` the`` too (one each)."""
    from generation.adapters import fields
    monkeypatch.setattr(fields, "MAX_NUM_BAD_WORDS", 2)
    tok = hf_api.sim.tokenizer
    assert [len(tok.encode(w)[0]) for w in ("a", " a", "Hello", " Hello", "the", " the")] == [1, 1, 1, 2, 2, 1]
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 1}
    assert hf_api.post(COMPLETIONS, json={**body, "bad_words": ["a"]}).status_code == 200
    assert hf_api.post(COMPLETIONS, json={**body, "bad_words": ["Hello", "the"]}).status_code == 200
    r = hf_api.post(COMPLETIONS, json={**body, "bad_words": ["Hello", "a"]})
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, TOO_MANY.format(n=3, m=2) + " (parameter=bad_words, value=['Hello', 'a'])")


MM_REFUSED = ("Per-request {name} are disabled by default because they can change multimodal {what} resource usage. "
              "Start the server with --trust-request-mm-kwargs only when clients are trusted.")


@pytest.mark.parametrize("path,body", BODIES + [(RESPONSES, {"input": "hi"})])
def test_mm_kwargs_need_the_servers_trust(app_client, api, path, body):
    """A non-empty ``mm_processor_kwargs`` / ``media_io_kwargs`` is refused unless the server
    runs ``--trust-request-mm-kwargs`` (vLLM 0.34's renderer); empty ones are nothing."""
    assert err(api, path, {**body, "mm_processor_kwargs": {"max_pixels": 100}}) == (
        MM_REFUSED.format(name="mm_processor_kwargs", what="preprocessing") + " (parameter=mm_processor_kwargs)",
        "mm_processor_kwargs")
    assert err(api, path, {**body, "media_io_kwargs": {"video": {"num_frames": 8}}}) == (
        MM_REFUSED.format(name="media_io_kwargs", what="media loading") + " (parameter=media_io_kwargs)",
        "media_io_kwargs")
    assert post(api, path, {**body, "mm_processor_kwargs": {}, "media_io_kwargs": {}}).status_code == 200
    trusting = app_client("--trust-request-mm-kwargs")
    assert post(trusting, path, {**body, "mm_processor_kwargs": {"max_pixels": 100},
                                 "media_io_kwargs": {"video": {"num_frames": 8}}}).status_code == 200


def test_mm_kwargs_on_the_render_and_tokenize_routes(api):
    for path, body in (("/v1/chat/completions/render", {"messages": MSG}), ("/v1/completions/render", {"prompt": "hi"}),
                       ("/tokenize", {"messages": MSG}), ("/tokenize", {"prompt": "hi"})):
        r = api.post(path, json={"model": "test-model", **body, "mm_processor_kwargs": {"a": 1}})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "mm_processor_kwargs"), path


IMAGE = [{"role": "user", "content": [{"type": "text", "text": "what is this"},
                                      {"type": "image_url", "image_url": {"url": "https://x.example/cat.png"}}]}]


def test_render_mm_payload(api):
    """``mm_payload: none`` (or the deprecated ``return_mm_kwargs: false``) leaves the processed
    tensors out of a chat render's ``features`` (``kwargs_data`` null), as vLLM 0.34's
    ``extract_mm_features``; a bad value is pydantic's 400."""
    def features(**extra):
        r = api.post("/v1/chat/completions/render", json={"model": "test-model", "messages": IMAGE, **extra})
        assert r.status_code == 200, r.text
        return r.json()["features"]
    assert features()["kwargs_data"] is not None
    assert features(mm_payload="tensors")["kwargs_data"] is not None
    full = features()
    assert features(mm_payload="none") == {**full, "kwargs_data": None}
    assert features(return_mm_kwargs=False)["kwargs_data"] is None
    assert features(return_mm_kwargs=False, mm_payload="tensors")["kwargs_data"] is not None
    r = api.post("/v1/chat/completions/render", json={"model": "test-model", "messages": IMAGE, "mm_payload": "all"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.mm_payload")


def test_responses_fields(api):
    """vLLM 0.34's ResponsesRequest: the penalties' ``Field(ge=-2, le=2)``, the sampling knobs
    (SamplingParams' ranges), ``service_tier`` and ``truncation`` literals, booleans that are
    not nullable, ``logit_bias`` / ``stop_token_ids`` / ``vllm_xargs`` as on chat."""
    body = {"input": "hi"}
    assert err(api, RESPONSES, {**body, "presence_penalty": -3}) == one(
        "greater_than_equal", "presence_penalty", "Input should be greater than or equal to -2", "'-3'",
        "{'ge': -2.0}")
    assert err(api, RESPONSES, {**body, "frequency_penalty": 2.5}) == one(
        "less_than_equal", "frequency_penalty", "Input should be less than or equal to 2", "'2.5'", "{'le': 2.0}")
    assert err(api, RESPONSES, {**body, "top_k": -2}) == ("top_k must be 0 (disable), or at least 1, got -2.", None)
    assert err(api, RESPONSES, {**body, "min_p": 1.5}) == ("min_p must be in [0, 1], got 1.5.", None)
    assert err(api, RESPONSES, {**body, "repetition_penalty": 0}) == (
        "repetition_penalty must be greater than zero, got 0.0.", None)
    m, p = err(api, RESPONSES, {**body, "service_tier": "fast"})
    assert p == "body.service_tier" and "Input should be 'auto', 'default', 'flex', 'scale' or 'priority'" in m
    m, p = err(api, RESPONSES, {**body, "truncation": "yes"})
    assert p == "body.truncation" and "Input should be 'auto' or 'disabled'" in m
    assert err(api, RESPONSES, {**body, "include_reasoning": None}) == one("bool_type", "include_reasoning", BOOL,
                                                                           "'None'")
    assert err(api, RESPONSES, {**body, "session_id": ["s"]}) == one("string_type", "session_id",
                                                                      "Input should be a valid string",
                                                                      "'<list of 1 items>'")
    assert err(api, RESPONSES, {**body, "logit_bias": {"a": 1}}) == (
        "logit_bias contains key(s) that cannot be converted to integer token IDs: ['a'] "
        "(parameter=logit_bias, value=['a'])", "logit_bias")
    assert err(api, RESPONSES, {**body, "vllm_xargs": "x"}) == one("dict_type", "vllm_xargs",
                                                                    "Input should be a valid dictionary", "'x'")
    r = post(api, RESPONSES, {**body, "truncation": "auto", "service_tier": "auto", "top_k": 5, "min_p": 0.1,
                              "presence_penalty": 1, "skip_special_tokens": "yes", "session_id": "s",
                              "include_stop_str_in_output": False, "mm_payload": "none"})
    assert r.status_code == 200, r.text
    assert r.json()["truncation"] == "auto"


SALT = "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL."
POOLING = [("/v1/embeddings", {"input": "a cat"}), ("/pooling", {"input": "a cat"}),
           ("/score", {"text_1": "a", "text_2": "b"}), ("/rerank", {"query": "a", "documents": ["b"]})]


BI_ENCODER, CROSS_ENCODER = ("--runner", "pooling"), ("--runner", "pooling", "--convert", "score")


def pool_err(c, path, body) -> tuple:
    r = c.post(path, json={"model": "test-model", **body})
    assert r.status_code == 400, (path, r.text)
    e = r.json()["error"]
    return e["message"], e["param"]


@pytest.mark.parametrize("path,body", POOLING + [("/classify", {"input": "a cat"})])
def test_pooling_routes_check_cache_salt_as_chat(app_client, path, body):
    """Every pooling request of vLLM 0.34 (``PoolingBasicRequestMixin``: embeddings, pooling,
    classify, score, rerank) has chat's ``check_cache_salt_support`` validator; the pooling
    routes ignored ``cache_salt``."""
    c = app_client(*(CROSS_ENCODER if path == "/classify" else BI_ENCODER))
    for salt in ("a/b", "x" * 129, "a\x00"):
        assert pool_err(c, path, {**body, "cache_salt": salt}) == (SALT + " (parameter=cache_salt)", "cache_salt")
    assert pool_err(c, path, {**body, "cache_salt": ""}) == (
        "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)", "cache_salt")
    assert pool_err(c, path, {**body, "cache_salt": 7}) == (
        "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)", "cache_salt")
    assert c.post(path, json={"model": "test-model", **body, "cache_salt": "x" * 128}).status_code == 200
    assert pool_err(c, path, {**body, "mm_processor_kwargs": {"a": 1}}) == (
        MM_REFUSED.format(name="mm_processor_kwargs", what="preprocessing") + " (parameter=mm_processor_kwargs)",
        "mm_processor_kwargs")
    message, param = pool_err(c, path, {**body, "padding": "longest"})
    assert param == "body.padding" and "Input should be 'max_length' or 'do_not_pad'" in message


@pytest.mark.parametrize("path", ["/v1/embeddings", "/pooling", "/classify"])
def test_removed_pooling_parameters(app_client, path):
    """vLLM 0.34's ``reject_removed_pooling_parameters`` (embedding, pooling and classification
    requests, not score / rerank): ``normalize`` (any value, null too) and the removed tasks.  Its
    VLLMValidationError is no ValueError, so it leaves pydantic as it is and the client reads its
    str() (vllm/exceptions.py:49-56), `` (parameter=...)`` included, as for ``cache_salt``."""
    c = app_client(*(CROSS_ENCODER if path == "/classify" else BI_ENCODER))
    body = {"input": "a cat"}
    for value in (True, None):
        assert pool_err(c, path, {**body, "normalize": value}) == (
            "Parameter `normalize` was removed; use `use_activation` instead. (parameter=normalize)", "normalize")
    assert pool_err(c, path, {**body, "task": "score"}) == ("`score` task was removed; use `classify` instead. (parameter=task)", "task")
    assert pool_err(c, path, {**body, "task": "encode"}) == (
        "`encode` task was removed; use `token_embed` or `token_classify` instead. (parameter=task)", "task")
    assert app_client(*BI_ENCODER).post("/score", json={"model": "test-model", "text_1": "a", "text_2": "b",
                                           "normalize": True}).status_code == 200


def test_rerank_top_n_is_not_negative(app_client):
    assert pool_err(app_client(*BI_ENCODER), "/rerank", {"query": "a", "documents": ["b"], "top_n": -1}) == one(
        "greater_than_equal", "top_n", "Input should be greater than or equal to 0", "'-1'", "{'ge': 0}")


def test_messages_extensions(api):
    """vLLM 0.34's ``AnthropicMessagesRequest``: ``mm_payload`` / ``return_mm_kwargs`` as on chat,
    ``cache_salt: str = Field(min_length=1, max_length=1024)`` (pydantic's bounds, not chat's
    validator); Anthropic's envelope carries the message."""
    body = {"model": "test-model", "max_tokens": 2, "messages": MSG}
    for extra, message in (
            ({"cache_salt": ""}, one("string_too_short", "cache_salt", "String should have at least 1 character",
                                     "''", "{'min_length': 1}")[0]),
            ({"cache_salt": 5}, one("string_type", "cache_salt", "Input should be a valid string", "'5'")[0]),
            ({"mm_payload": None}, "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.mm_payload', 'msg': "
                                   + MM_PAYLOAD[0] + ", 'input': 'None', 'ctx': " + MM_PAYLOAD[1] + "}")):
        r = api.post("/v1/messages", json={**body, **extra})
        assert r.status_code == 400 and r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                                              "message": message}}, r.text
    r = api.post("/v1/messages", json={**body, "cache_salt": "a/b" * 300, "mm_payload": "none"})
    assert r.status_code == 200, r.text
    assert api.post("/v1/messages", json={**body, "cache_salt": "x" * 1025}).status_code == 400
