"""vLLM 0.34's request validators and SamplingParams checks on chat and completions fields that
vLLM's own tests do not send (``chat_completion/protocol.py``, ``completion/protocol.py``,
``generate/base/protocol.py``, ``sampling_params.py``): the simulator refuses what vLLM
refuses, in vLLM's words, and accepts what it accepts."""
from __future__ import annotations

import pytest

from support import error_type_400

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "Hello there"}]
BODIES = [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def post(api, path, body):
    return api.post(path, json={"model": "test-model", "max_tokens": 2, **body})


def err(api, path, body) -> tuple:
    r = post(api, path, body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == error_type_400(e["message"])
    return e["message"], e["param"]


@pytest.mark.parametrize("path,body", BODIES)
def test_stop_strings(api, path, body):
    """``stop``: at most VLLM_MAX_STOP_STRINGS (4) strings (pydantic's two union errors), none
    empty (``"stop": ""`` is ``[""]`` to SamplingParams)."""
    assert post(api, path, {**body, "stop": ["a", "b", "c", "d"]}).status_code == 200
    assert err(api, path, {**body, "stop": list("abcde")}) == (
        "2 validation errors:\n"
        "  {'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', "
        "'input': '<list of 5 items>'}\n"
        "  {'type': 'too_long', 'loc': 'body.stop', 'msg': 'List should have at most 4 items after validation, "
        "not 5', 'input': '<list of 5 items>', 'ctx': {'field_type': 'List', 'max_length': 4, 'actual_length': 5}}",
        "body.stop")
    for stop in ("", ["a", ""]):
        assert err(api, path, {**body, "stop": stop}) == ("stop cannot contain an empty string.", None)


@pytest.mark.parametrize("path,body", BODIES)
def test_bad_words(api, path, body):
    assert post(api, path, {**body, "bad_words": ["x", "y"]}).status_code == 200
    assert err(api, path, {**body, "bad_words": ["x", "", ""]}) == (
        "bad_words cannot contain an empty string. Got bad_words=['x', '']", None)
    assert err(api, path, {**body, "bad_words": "x"}) == (
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.bad_words', 'msg': 'Input should be a valid "
        "list', 'input': 'x'}", "body.bad_words")


@pytest.mark.parametrize("path,body", BODIES)
def test_cache_salt_length_and_characters(api, path, body):
    words = ("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', "
             "or NUL. (parameter=cache_salt)", "cache_salt")
    for salt in ("x" * 129, "a/b", "a@b", "a\\b", "a\x00b"):
        assert err(api, path, {**body, "cache_salt": salt}) == words
    assert post(api, path, {**body, "cache_salt": "x" * 128}).status_code == 200


@pytest.mark.parametrize("path,body", BODIES)
def test_temperature_range_and_greedy_n(api, path, body):
    assert err(api, path, {**body, "temperature": 2.5}) == ("temperature must be in [0, 2], got 2.5. "
                                                               "(parameter=temperature, value=2.5)", "temperature")
    assert err(api, path, {**body, "temperature": 0, "n": 2}) == ("n must be 1 when using greedy sampling, got 2.", None)
    assert post(api, path, {**body, "temperature": 2}).status_code == 200
    assert post(api, path, {**body, "temperature": 0, "n": 2, "use_beam_search": True}).status_code == 200


@pytest.mark.parametrize("path,body", BODIES)
def test_integer_field_bounds(api, path, body):
    """pydantic's ``Field(ge=..., le=...)`` on ``stream_interval``, ``routed_experts_prompt_start``
    and ``priority``, in vLLM's validation handler's words."""
    assert err(api, path, {**body, "stream_interval": 0}) == (
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.stream_interval', 'msg': 'Input should "
        "be greater than or equal to 1', 'input': '0', 'ctx': {'ge': 1}}", "body.stream_interval")
    assert err(api, path, {**body, "routed_experts_prompt_start": -1})[1] == "body.routed_experts_prompt_start"
    assert err(api, path, {**body, "priority": 2 ** 63}) == (
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.priority', 'msg': 'Input should be less "
        "than or equal to 9223372036854775807', 'input': '9223372036854775808', 'ctx': {'le': 9223372036854775807}}",
        "body.priority")
    assert post(api, path, {**body, "stream_interval": 2, "routed_experts_prompt_start": 1}).status_code == 200


@pytest.mark.parametrize("path,body", BODIES)
def test_vllm_xargs(api, path, body):
    assert post(api, path, {**body, "vllm_xargs": {"a": 1, "b": "x", "c": [1, 2.5, "y"]}}).status_code == 200
    assert err(api, path, {**body, "vllm_xargs": "x"}) == (
        "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.vllm_xargs', 'msg': 'Input should be a valid "
        "dictionary', 'input': 'x'}", "body.vllm_xargs")
    message, param = err(api, path, {**body, "vllm_xargs": {"a": {"b": 1}}})
    assert message.startswith("4 validation errors:\n  {'type': 'string_type', 'loc': 'body.vllm_xargs.a'")
    assert param == "body.vllm_xargs.a"


@pytest.mark.parametrize("path,body,field", [(CHAT, {"messages": MSG, "logprobs": True}, "top_logprobs"),
                                             (CHAT, {"messages": MSG}, "prompt_logprobs"),
                                             (COMPLETIONS, {"prompt": "hi"}, "logprobs"),
                                             (COMPLETIONS, {"prompt": "hi"}, "prompt_logprobs")])
def test_logprobs_counts_that_are_not_numbers(api, path, body, field):
    for value in ("3", [1], {"a": 1}):
        assert err(api, path, {**body, field: value}) == (f"`{field}` must be an integer. (parameter={field}, "
                                                          f"value={value})", field)


@pytest.mark.parametrize("path,body,field", [(CHAT, {"messages": MSG, "logprobs": True}, "top_logprobs"),
                                             (CHAT, {"messages": MSG}, "prompt_logprobs"),
                                             (COMPLETIONS, {"prompt": "hi"}, "logprobs"),
                                             (COMPLETIONS, {"prompt": "hi"}, "prompt_logprobs")])
def test_logprobs_counts_that_are_booleans(api, path, body, field):
    """``check_logprobs``' ``isinstance(value, (int, float))`` lets a boolean through (a bool is
    an int) and pydantic's lax ``int`` reads it as 1 or 0: ``"logprobs": true`` on completions
    (chat's spelling) is one logprob per token, served as ``1``; the simulator refused it."""
    for value, count in ((True, 1), (False, 0)):
        got, want = (post(api, path, {**body, field: v}) for v in (value, count))
        assert (got.status_code, want.status_code) == (200, 200), got.text
        g, w = got.json(), want.json()
        if field == "prompt_logprobs":
            g, w = (x.get("prompt_logprobs") or x["choices"][0]["prompt_logprobs"] for x in (g, w))
            assert g is not None and [p and len(p) for p in g] == [p and len(p) for p in w]
        elif path == CHAT:          # top_logprobs entries per token
            assert {len(e["top_logprobs"]) for e in g["choices"][0]["logprobs"]["content"]} == {count}
        else:                       # the sampled token's own entry, the only one here
            assert {len(e) for e in g["choices"][0]["logprobs"]["top_logprobs"]} == {1}


@pytest.mark.parametrize("path,body", BODIES)
def test_structured_outputs_kinds(api, path, body):
    """The request validator counts json / regex / choice (its own words); the
    StructuredOutputsParams check then wants exactly one kind, printing all its fields."""
    # vLLM 0.34: completions' validator names the parameter, chat's does not
    named = path == COMPLETIONS
    assert err(api, path, {**body, "structured_outputs": {"json": {"type": "object"}, "regex": "a"}}) == (
        "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice')."
        + (" (parameter=structured_outputs)" if named else ""), "structured_outputs" if named else None)
    assert err(api, path, {**body, "structured_outputs": {}}) == (
        "You must use one kind of structured outputs constraint but none are specified: {'json': None, "
        "'regex': None, 'choice': None, 'grammar': None, 'json_object': None, 'disable_any_whitespace': False, "
        "'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, "
        "'_backend': None, '_backend_was_auto': False}", None)       # a VLLMValidationError naming no parameter
    message, param = err(api, path, {**body, "structured_outputs": {"grammar": "root ::= \"a\"", "regex": "a"}})
    assert param is None
    assert message.startswith("You can only use one kind of structured outputs constraint but multiple are "
                              "specified: {'json': None, 'regex': 'a', 'choice': None, 'grammar': 'root ::= \"a\"',")


def test_structured_outputs_with_a_named_tool(api):
    body = {"messages": MSG, "structured_outputs": {"choice": ["a"]}, "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "f"}}}
    assert err(api, CHAT, body) == ("You can only either use constraints for structured outputs or tools, not both.",
                                    None)
    assert post(api, CHAT, {**body, "tool_choice": "auto"}).status_code == 200


def test_response_format_json_schema_without_schema(api):
    assert err(api, CHAT, {"messages": MSG, "response_format": {"type": "json_schema"}}) == (
        "When response_format type is 'json_schema', the 'json_schema' field must be provided. "
        "(parameter=response_format)", "response_format")


@pytest.mark.parametrize("value", [-2, 1.5, True, "3"])
def test_thinking_token_budget(api, value):
    assert err(api, CHAT, {"messages": MSG, "thinking_token_budget": value}) == (
        "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.", "thinking_token_budget")


def test_continue_final_message_with_the_default_generation_prompt(api):
    """vLLM's request check sees only an ``add_generation_prompt`` the body gives; with the
    default the chat template (transformers) refuses the pair in its own words."""
    msgs = MSG + [{"role": "assistant", "content": "Hi"}]
    assert err(api, CHAT, {"messages": msgs, "continue_final_message": True})[0].startswith(
        "continue_final_message and add_generation_prompt are not compatible.")
    assert err(api, CHAT, {"messages": msgs, "continue_final_message": True, "add_generation_prompt": True})[0] == (
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    assert post(api, CHAT, {"messages": msgs, "continue_final_message": True,
                            "add_generation_prompt": False}).status_code == 200


def test_n_past_the_limit_names_the_variable(api):
    message, param = err(api, CHAT, {"messages": MSG, "n": 16385})
    assert (message, param) == ("n must be at most 16384, got 16385. To increase this limit, set the "
                                "VLLM_MAX_N_SEQUENCES environment variable.", None)


def test_responses_checks_cache_salt_seed_and_stop_as_chat(api):
    """vLLM 0.34's ResponsesRequest has chat's ``cache_salt`` validator, ``seed`` bounds and
    ``StopParam``."""
    body = {"input": "hi", "max_output_tokens": 2}
    r = api.post("/v1/responses", json={"model": "test-model", **body, "cache_salt": "a/b"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"
    r = api.post("/v1/responses", json={"model": "test-model", **body, "seed": 2 ** 63})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed'")
    r = api.post("/v1/responses", json={"model": "test-model", **body, "stop": list("abcde")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.stop"
    r = api.post("/v1/responses", json={"model": "test-model", **body, "cache_salt": "ok", "seed": 7, "stop": ["x"]})
    assert r.status_code == 200, r.text


def test_completions_response_format_constrains_the_text_as_on_chat(app_client):
    """vLLM 0.34's CompletionRequest takes ``response_format`` (``structured_outputs_from_
    response_format``): a json_schema answer is an instance of the schema, json_object a JSON
    object, and the same 400s as chat for a bad one; it was accepted and ignored."""
    import json
    c = app_client("--max-model-len", "2048")
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["city", "n"], "additionalProperties": False}
    body = {"model": "test-model", "prompt": "hi", "max_tokens": 200}
    r = c.post("/v1/completions", json={**body, "response_format": {"type": "json_schema",
                                                                    "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 200, r.text
    out = json.loads(r.json()["choices"][0]["text"])
    assert set(out) == {"city", "n"} and isinstance(out["city"], str) and isinstance(out["n"], int)
    r = c.post("/v1/completions", json={**body, "response_format": {"type": "json_object"}})
    choice = r.json()["choices"][0]
    if choice["finish_reason"] == "length":     # cut at max_tokens, as vLLM cuts it (1 answer in 200 here)
        assert r.status_code == 200 and choice["text"].startswith("{")
    else:
        assert r.status_code == 200 and isinstance(json.loads(choice["text"]), dict)
    r = c.post("/v1/completions", json={**body, "response_format": {"type": "json_schema"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    r = c.post("/v1/completions", json={**body, "response_format": {"type": "bogus"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.response_format.type"


def test_pooling_truncate_prompt_tokens_past_the_context_is_refused(app_client):
    """vLLM 0.34's PoolingBaseServing._validate_request refuses a truncate_prompt_tokens over
    max_model_len on every pooling route; the simulator truncated to the context instead."""
    c = app_client("--runner", "pooling")
    for path, body in (("/v1/embeddings", {"input": "a cat"}), ("/pooling", {"input": "a cat"}),
                       ("/score", {"text_1": "a", "text_2": "b"})):
        r = c.post(path, json={"model": "test-model", "truncate_prompt_tokens": 1025, **body})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["message"] == ("truncate_prompt_tokens value is greater than max_model_len. "
                                                "Please request a smaller truncation size.")
        assert r.json()["error"]["param"] == "truncate_prompt_tokens"
        ok = c.post(path, json={"model": "test-model", "truncate_prompt_tokens": 1024, **body})
        assert ok.status_code == 200, (path, ok.text)


def test_responses_max_tool_calls_is_an_integer_echoed_in_the_response(app_client):
    """vLLM 0.34's ResponsesRequest: ``max_tool_calls: int | None`` (a string was accepted and
    ignored here), echoed in the response object as vLLM's ``from_request`` echoes it."""
    c = app_client()
    body = {"model": "test-model", "input": "hi", "max_output_tokens": 5}
    for bad in ("x", 1.5, [1]):
        r = c.post("/v1/responses", json={**body, "max_tool_calls": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "body.max_tool_calls", r.text
    r = c.post("/v1/responses", json={**body, "max_tool_calls": 3})
    assert r.status_code == 200 and r.json()["max_tool_calls"] == 3
    assert c.post("/v1/responses", json=body).json()["max_tool_calls"] is None


def test_pooling_priority_is_checked_as_on_generation(app_client):
    """vLLM 0.34's pooling requests carry ``priority`` (PoolingBasicRequestMixin: int64); without
    priority scheduling its FCFS queue ignores the value."""
    c = app_client("--runner", "pooling")
    routes = (("/v1/embeddings", {"input": "a cat"}), ("/pooling", {"input": "a cat"}),
              ("/score", {"text_1": "a", "text_2": "b"}), ("/v2/embed", {"texts": ["a cat"]}))
    for path, body in routes:
        r = c.post(path, json={"model": "test-model", "priority": 3, **body})
        assert r.status_code == 200, (path, r.text)
        r = c.post(path, json={"model": "test-model", "priority": 2 ** 63, **body})
        assert r.status_code == 400 and "less_than_equal" in r.json()["error"]["message"], (path, r.text)
        assert c.post(path, json={"model": "test-model", "priority": 0, **body}).status_code == 200, path
    p = app_client("--runner", "pooling", "--scheduling-policy", "priority")
    for path, body in routes:
        assert p.post(path, json={"model": "test-model", "priority": 3, **body}).status_code == 200, path


def test_pooling_truncation_side_keeps_the_start_on_the_right(app_client):
    """``truncation_side: right`` keeps a prompt's first tokens on /pooling and /classify as on
    /v1/embeddings (vLLM's PoolingBasicRequestMixin), ``left`` the end; unset, the pooling
    runner's tokenizer truncates on the right."""
    c = app_client("--runner", "pooling", "--convert", "classify")
    ids = list(range(100, 130))
    for path in ("/pooling", "/classify"):
        unset = c.post(path, json={"model": "test-model", "input": ids, "truncate_prompt_tokens": 5})
        left = c.post(path, json={"model": "test-model", "input": ids, "truncate_prompt_tokens": 5,
                                  "truncation_side": "left"})
        right = c.post(path, json={"model": "test-model", "input": ids, "truncate_prompt_tokens": 5,
                                   "truncation_side": "right"})
        assert left.status_code == 200 and right.status_code == 200, (path, left.text, right.text)
        assert left.json()["data"] != right.json()["data"], path          # different tokens kept
        assert unset.json()["data"] == right.json()["data"], path
        assert c.post(path, json={"model": "test-model", "input": ids, "truncation_side": "middle"}).status_code == 400


def test_generate_sampling_params_bad_words_and_repetition_detection(api):
    """``/inference/v1/generate`` builds vLLM's SamplingParams itself: its ``bad_words`` checks
    (``_verify_args``, then ``update_from_tokenizer``) and ``RepetitionDetectionParams`` apply
    there as on chat, named where the request keeps them."""
    def gen(**sp):
        return api.post("/inference/v1/generate", json={"model": "test-model", "token_ids": [1, 2, 3],
                                                        "sampling_params": {"max_tokens": 2, **sp}})
    assert gen(bad_words=["x", "y"], repetition_detection={"max_pattern_size": 3, "min_count": 2}).status_code == 200
    r = gen(bad_words=["x", ""])
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, "bad_words cannot contain an empty string. Got bad_words=['x', '']")
    r = gen(bad_words="x")
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.sampling_params.bad_words")
    r = gen(bad_words=[" "])
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, "bad_words entries must tokenize to at least one token. (parameter=bad_words, value=[' '])")
    r = gen(repetition_detection={"max_pattern_size": 3, "min_count": 1})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "sampling_params.repetition_detection")
    assert r.json()["error"]["message"].startswith("min_count must be >= 2")


@pytest.mark.parametrize("path,body,field", [(CHAT, {"messages": MSG}, "max_tokens"),
                                             (CHAT, {"messages": MSG, "max_tokens": 5}, "max_completion_tokens"),
                                             (COMPLETIONS, {"prompt": "hi"}, "max_tokens"),
                                             ("/v1/responses", {"input": "hi"}, "max_output_tokens"),
                                             ("/v1/responses/render", {"input": "hi"}, "max_output_tokens")])
def test_output_limit_past_the_context_is_cut(api, path, body, field):
    """An output limit over ``max_model_len`` is served, cut to the room the context leaves, as
    the seeds say (random mode: "max_tokens is not considered when validating the request against
    max-model-len"); vLLM 0.34's ``TokenizeParams.__post_init__`` would refuse it, and the seeds
    come first."""
    for limit in (1024, 1025, 10 ** 9):
        r = api.post(path, json={"model": "test-model", **body, field: limit})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/render"])
def test_responses_max_output_tokens_below_one(api, path):
    """vLLM 0.34's Responses API makes ``max_output_tokens`` SamplingParams' ``max_tokens``
    (``to_sampling_params``), whose ``_verify_args`` refuses it below 1, as the render already
    said (``/v1/responses`` said "max_output_tokens: must be a positive integer")."""
    for v in (0, -3):
        r = api.post(path, json={"model": "test-model", "input": "hi", "max_output_tokens": v})
        assert r.status_code == 400, r.text
        assert (r.json()["error"]["message"], r.json()["error"]["param"]) == (
            f"max_tokens must be at least 1, got {v}. (parameter=max_tokens, value={v})", "max_tokens")


def test_responses_prompt_and_structured_outputs_beside_text_format(api):
    """vLLM 0.34's ResponsesRequest: any ``prompt`` is refused (``validate_prompt``), and
    ``structured_outputs`` together with ``text.format`` (``extract_structured_outputs``); the
    simulator ignored both fields and answered 200."""
    base = {"model": "test-model", "input": "hi", "max_output_tokens": 3}
    for path in ("/v1/responses", "/v1/responses/render"):
        for prompt in ({"id": "pmpt_1"}, "x"):
            r = api.post(path, json={**base, "prompt": prompt})
            assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
                400, "prompt template is not supported (parameter=prompt)", "prompt")
    assert api.post("/v1/responses", json={**base, "prompt": None}).status_code == 200
    r = api.post("/v1/responses", json={**base, "structured_outputs": {"regex": "a"},
                                        "text": {"format": {"type": "json_object"}}})
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
        400, "Cannot specify both structured_outputs and text.format (parameter=structured_outputs)",
        "structured_outputs")
    assert api.post("/v1/responses", json={**base, "text": {"format": {"type": "json_object"}}}).status_code == 200


def test_responses_top_logprobs_is_checked_only_as_sampling_logprobs(api):
    """vLLM 0.34's ResponsesRequest gives ``top_logprobs`` no range (``TopLogprobsParam``): it is
    SamplingParams' ``logprobs`` only with the ``message.output_text.logprobs`` include, refused
    there by ``_verify_args`` (below -1) and ``_validate_logprobs`` (past --max-logprobs), and
    not used otherwise; the simulator refused anything outside 0..20 ("top_logprobs: Must be
    between 0 and 20.") with or without the include."""
    base = {"model": "test-model", "input": "hi", "max_output_tokens": 3}
    inc = {"include": ["message.output_text.logprobs"]}
    for top in (-2, 21):
        r = api.post("/v1/responses", json={**base, "top_logprobs": top})
        assert r.status_code == 200 and r.json()["top_logprobs"] is None, r.text
    r = api.post("/v1/responses", json={**base, **inc, "top_logprobs": -2})
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
        400, "logprobs must be non-negative or -1, got -2. (parameter=logprobs, value=-2)", "logprobs")
    r = api.post("/v1/responses", json={**base, **inc, "top_logprobs": 21})
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
        400, "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)",
        "logprobs")
    assert api.post("/v1/responses", json={**base, **inc, "top_logprobs": 20}).status_code == 200


def test_responses_include_is_vllm_034s_literal(api):
    """vLLM 0.34's ResponsesRequest.include is ``list[Literal[...]] | None`` of six values
    (responses/protocol.py): another value, ``web_search_call.results`` and
    ``web_search_call.action.sources`` included (the openai SDK has them, vLLM does not), is
    pydantic's ``literal_error`` at ``body.include.<i>``, and a non-list its ``list_type``; the
    simulator accepted the two web-search values and worded the others itself ("include[0]:
    Must be one of: ...", param ``include[0]``)."""
    base = {"model": "test-model", "input": "hi", "max_output_tokens": 3}
    expected = ("'code_interpreter_call.outputs', 'computer_call_output.output.image_url', 'file_search_call.results', "
                "'message.input_image.image_url', 'message.output_text.logprobs' or 'reasoning.encrypted_content'")
    for bad in ("web_search_call.results", "web_search_call.action.sources", "bogus"):
        r = api.post("/v1/responses", json={**base, "include": ["reasoning.encrypted_content", bad]})
        assert r.status_code == 400, r.text
        assert (r.json()["error"]["message"], r.json()["error"]["param"], r.json()["error"]["type"]) == (
            f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'body.include.1', 'msg': \"Input should be "
            f"{expected}\", 'input': '{bad}', 'ctx': {{'expected': \"{expected}\"}}}}", "body.include.1", "Bad Request")
    r = api.post("/v1/responses", json={**base, "include": "message.output_text.logprobs"})
    assert (r.json()["error"]["message"], r.json()["error"]["param"]) == (
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.include', 'msg': 'Input should be a valid list', "
        "'input': 'message.output_text.logprobs'}", "body.include")
    for ok in (None, [], ["file_search_call.results", "message.output_text.logprobs"]):
        assert api.post("/v1/responses", json={**base, "include": ok}).status_code == 200


def test_responses_metadata_is_a_dict_of_strings(api):
    """vLLM 0.34's ResponsesRequest.metadata is the openai SDK's ``Metadata``
    (``Dict[str, str]``): a value that is not a string is pydantic's ``string_type`` at
    ``body.metadata.<key>``; the simulator took any object (and echoed it)."""
    base = {"model": "test-model", "input": "hi", "max_output_tokens": 3}
    r = api.post("/v1/responses", json={**base, "metadata": {"a": "x", "n": 1}})
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
        400, "1 validation error:\n  {'type': 'string_type', 'loc': 'body.metadata.n', 'msg': 'Input should be a "
             "valid string', 'input': '1'}", "body.metadata.n")
    r = api.post("/v1/responses", json={**base, "metadata": ["a"]})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.metadata")
    r = api.post("/v1/responses", json={**base, "metadata": {"a": "x"}})
    assert r.status_code == 200 and r.json()["metadata"] == {"a": "x"}


NAMESPACE = {"type": "namespace", "name": "ns", "description": "d", "tools": [
    {"type": "function", "name": "f", "parameters": {"type": "object"}}]}


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/render"])
@pytest.mark.parametrize("tools,choice,message,param", [
    (None, "required", "Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice"),
    ([], "required", "Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice"),
    (None, {"type": "function", "name": "f"}, "Tool choice 'function' not found in 'tools' parameter.", "tool_choice"),
    ([{"type": "function", "name": "f"}], {"type": "function", "name": "g"},
     "Tool choice 'function' not found in 'tools' parameter.", "tool_choice"),
    ([{"type": "function", "name": "f"}], {"type": "custom", "name": "g"},
     "Tool choice 'function' not found in 'tools' parameter.", "tool_choice"),
    ([NAMESPACE, {**NAMESPACE, "name": "ns2"}], {"type": "function", "name": "f"},
     "Tool choice 'f' is ambiguous: it is defined in more than one namespace (ns__f, ns2__f). Select it by its "
     "full '<namespace>__<name>' name.", "tool_choice"),
    ([{"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
     None, "Custom tools with a grammar format are not supported; only free-form text custom tools are accepted.",
     "tools"),
])
def test_responses_tool_usage(api, path, tools, choice, message, param):
    """vLLM 0.34's ResponsesRequest validators ``check_tool_usage`` and
    ``check_custom_tool_format`` (responses/protocol.py l. 837-902), in their words: the
    simulator answered chat's "When using `tool_choice`, `tools` must be set." / "The tool `g`
    specified in `tool_choice` does not match any of the specified `tools`", or 200 (a named
    ``custom`` choice naming no tool, an ambiguous namespaced name, a grammar custom tool)."""
    body = {"model": "test-model", "input": "hi", "max_output_tokens": 3}
    if tools is not None:
        body["tools"] = tools
    if choice is not None:
        body["tool_choice"] = choice
    r = api.post(path, json=body)
    assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["param"]) == (
        400, f"{message} (parameter={param})", param)


def test_responses_named_choices_vllm_resolves(api):
    """A namespaced tool's local name, when one namespace has it, and the flat name are served."""
    body = {"model": "test-model", "input": "hi", "max_output_tokens": 30, "tools": [NAMESPACE]}
    for name in ("f", "ns__f"):
        r = api.post("/v1/responses", json={**body, "tool_choice": {"type": "function", "name": name}})
        assert r.status_code == 200, r.text
    r = api.post("/v1/responses", json={**body, "tools": [{"type": "custom", "name": "p", "format": {"type": "text"}}],
                                        "tool_choice": {"type": "custom", "name": "p"}})
    assert r.status_code == 200, r.text


def test_chat_reasoning_effort_is_a_literal(api):
    """vLLM 0.34's ChatCompletionRequest.reasoning_effort is ``ReasoningEffort | None``
    (renderers/params.py: a Literal of seven values): another value is pydantic's
    ``literal_error`` at ``body.reasoning_effort`` (type "Bad Request"); the simulator worded it
    itself ("reasoning_effort: Input should be one of ..., got 'bogus'.", param
    ``reasoning_effort``, type BadRequestError)."""
    expected = "'none', 'minimal', 'low', 'medium', 'high', 'xhigh' or 'max'"
    for bad, shown in (("bogus", "bogus"), (5, "5")):
        r = post(api, CHAT, {"messages": MSG, "reasoning_effort": bad})
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert (e["message"], e["param"], e["type"]) == (
            f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'body.reasoning_effort', 'msg': \"Input should "
            f"be {expected}\", 'input': '{shown}', 'ctx': {{'expected': \"{expected}\"}}}}", "body.reasoning_effort",
            "Bad Request")
    for ok in (None, "none", "high", "max"):
        assert post(api, CHAT, {"messages": MSG, "reasoning_effort": ok}).status_code == 200


@pytest.mark.parametrize("path,body", BODIES + [("/inference/v1/generate", {"token_ids": [1, 2]})])
def test_stream_options_that_is_no_object(api, path, body):
    """``stream_options: StreamOptions | None``: with ``stream`` (the request validator passes),
    a value that is no object is pydantic's ``model_type`` at ``body.stream_options``; the
    simulator said marshmallow's "stream_options: Invalid input type." (param stream_options)."""
    for bad, shown in (("x", "'x'"), ([], "'<list of 0 items>'")):
        r = post(api, path, {**body, "stream": True, "stream_options": bad})
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert (e["message"], e["param"], e["type"]) == (
            f"1 validation error:\n  {{'type': 'model_type', 'loc': 'body.stream_options', 'msg': 'Input should be "
            f"a valid dictionary or instance of StreamOptions', 'input': {shown}, 'ctx': {{'class_name': "
            f"'StreamOptions'}}}}", "body.stream_options", "Bad Request")


@pytest.mark.parametrize("field,model", [("text", "ResponseTextConfig"), ("reasoning", "Reasoning")])
def test_responses_model_fields_that_are_no_object(api, field, model):
    """vLLM 0.34's ResponsesRequest types ``text`` and ``reasoning`` as the openai SDK's
    ``ResponseTextConfig`` / ``Reasoning``: a value that is no object is pydantic's
    ``model_type``; the simulator said marshmallow's "text: Invalid input type." /
    "reasoning: Not a valid mapping type."."""
    r = api.post("/v1/responses", json={"model": "test-model", "input": "hi", field: "x"})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert (e["message"], e["param"], e["type"]) == (
        f"1 validation error:\n  {{'type': 'model_type', 'loc': 'body.{field}', 'msg': 'Input should be a valid "
        f"dictionary or instance of {model}', 'input': 'x', 'ctx': {{'class_name': '{model}'}}}}", f"body.{field}",
        "Bad Request")


def test_responses_integers_past_int64(api):
    """pydantic's ``int`` takes any integer: ``max_output_tokens`` past 64 bits is cut to the
    room the context leaves (the seeds' cap) and ``top_logprobs`` is SamplingParams' 400 (with
    the logprobs include) or unused (without); the simulator said "max_output_tokens: Not a valid
    integer." / "top_logprobs: Not a valid integer."."""
    base = {"model": "test-model", "input": "hi"}
    big = 2 ** 70
    r = api.post("/v1/responses", json={**base, "max_output_tokens": big})
    assert r.status_code == 200, r.text
    r = api.post("/v1/responses", json={**base, "top_logprobs": big, "include": ["message.output_text.logprobs"]})
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, f"Requested sample logprobs of {big}, which is greater than max allowed: 20 (parameter=logprobs, "
             f"value={big})")
    assert api.post("/v1/responses", json={**base, "max_output_tokens": 3, "top_logprobs": big}).status_code == 200
