"""Request fields vLLM checks or honours (issue 22): logit_bias, stop_token_ids, out-of-vocabulary
prompt ids, seed range, cache_salt, logprob_token_ids, tools / tool_choice, the empty prompt,
lax ``logprobs``, min_tokens, return_tokens_as_token_ids, truncate_prompt_tokens, and the
``/inference/v1/generate`` defaults."""
from __future__ import annotations

import os

import pytest
from support.tokenizer_hub import MODEL, make_hub

from support import sse_events

CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/inference/v1/generate"
MSG = [{"role": "user", "content": "Hello there"}]
VOCAB = 2 ** 32          # the simulated tokenizer's ids


def err(api, path, body, status=400) -> dict:
    r = api.post(path, json={"model": "test-model", **body})
    assert r.status_code == status, r.text
    return r.json()["error"]


def ok(api, path, body) -> dict:
    r = api.post(path, json={"model": "test-model", **body})
    assert r.status_code == 200, r.text
    return r.json()


# ---- logit_bias, stop_token_ids, prompt ids ------------------------------------------------------

@pytest.mark.parametrize("path,body", [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})])
def test_logit_bias_checks(api, path, body):
    e = err(api, path, {**body, "logit_bias": {"5": 1, str(VOCAB): 2, "-1": 3}})
    assert e["message"] == (f"token_id(s) [{VOCAB}, -1] in logit_bias contain out-of-vocab token ids. "
                            f"Vocabulary size: {VOCAB} (parameter=logit_bias, value=[{VOCAB}, -1])")
    assert e["param"] == "logit_bias"
    # vLLM 0.34's words (SamplingParams.from_optional), param logit_bias
    e = err(api, path, {**body, "logit_bias": {"a": 1, "7": 1, "1.5": 2}})
    assert (e["message"], e["param"]) == (
        "logit_bias contains key(s) that cannot be converted to integer token IDs: ['a', '1.5'] "
        "(parameter=logit_bias, value=['a', '1.5'])", "logit_bias")
    # the values are pydantic's dict[str, float] (a boolean is a number there), checked first
    e = err(api, path, {**body, "logit_bias": {"a": 1, "7": "high", "8": None, "9": True}})
    assert (e["message"], e["param"]) == (
        "2 validation errors:\n"
        "  {'type': 'float_parsing', 'loc': 'body.logit_bias.7', 'msg': 'Input should be a valid number, unable to "
        "parse string as a number', 'input': 'high'}\n"
        "  {'type': 'float_type', 'loc': 'body.logit_bias.8', 'msg': 'Input should be a valid number', "
        "'input': 'None'}", "body.logit_bias.7")
    assert ok(api, path, {**body, "max_tokens": 2, "logit_bias": {"5": True}})["choices"]
    assert ok(api, path, {**body, "max_tokens": 2, "logit_bias": {"5": -100, "6": "2.5"}})["choices"]


@pytest.mark.parametrize("ids,bad", [([1, VOCAB], [VOCAB]), ([-3, 2], [-3])])
def test_stop_token_ids_out_of_vocabulary(api, ids, bad):
    e = err(api, CHAT, {"messages": MSG, "stop_token_ids": ids})
    assert e["message"] == (f"token_id(s) {bad} in stop_token_ids contain out-of-vocab token ids. "
                            f"Vocabulary size: {VOCAB} (parameter=stop_token_ids, value={bad})")
    assert e["param"] == "stop_token_ids"
    e = err(api, GENERATE, {"token_ids": [1], "sampling_params": {"stop_token_ids": ids}})
    assert e["param"] == "stop_token_ids"


@pytest.fixture(scope="module")
def hf_api(app_client, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf_home"))
    make_hub(root)
    return app_client("--tokenizers-cache-dir", os.path.join(root, "hub"), model=MODEL)


def test_prompt_ids_at_or_above_the_vocabulary_are_400s(hf_api):
    vocab = hf_api.sim.tokenizer.vocab_size
    assert 300 < vocab < 700
    r = hf_api.post(COMPLETIONS, json={"prompt": [1, 2, vocab], "max_tokens": 1})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": f"Token id {vocab} is out of vocabulary", "type": "BadRequestError",
                                 "param": None, "code": 400}
    r = hf_api.post(GENERATE, json={"token_ids": [vocab + 5, 1], "sampling_params": {"max_tokens": 1}})
    assert r.status_code == 400 and r.json()["error"]["message"] == f"Token id {vocab + 5} is out of vocabulary"
    assert hf_api.post(COMPLETIONS, json={"prompt": [1, 2, vocab - 1], "max_tokens": 1}).status_code == 200
    r = hf_api.post(CHAT, json={"messages": MSG, "logit_bias": {str(vocab): 1}})
    assert r.json()["error"]["message"].endswith(f"Vocabulary size: {vocab} (parameter=logit_bias, value=[{vocab}])")


# ---- scalar checks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,message", [
    (2 ** 63, "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input should be less "
              "than or equal to 9223372036854775807', 'input': '9223372036854775808', "
              "'ctx': {'le': 9223372036854775807}}"),
    (-(2 ** 64), "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.seed', 'msg': 'Input should be "
                 "greater than or equal to -9223372036854775808', 'input': '-18446744073709551616', "
                 "'ctx': {'ge': -9223372036854775808}}"),
])
def test_seed_outside_int64(api, seed, message):
    for path, body in ((CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"}),
                       (GENERATE, {"token_ids": [1], "sampling_params": {"seed": seed}})):
        e = err(api, path, {**body, "seed": seed})
        assert (e["message"], e["param"]) == (message, "body.seed")
    assert ok(api, CHAT, {"messages": MSG, "max_tokens": 1, "seed": 2 ** 63 - 1})


def test_cache_salt_must_be_a_non_empty_string(api):
    for path, body in ((CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"}), (GENERATE, {"token_ids": [1]})):
        e = err(api, path, {**body, "cache_salt": ""})
        assert (e["message"], e["param"]) == ("Parameter 'cache_salt' must be a non-empty string if provided. "
                                              "(parameter=cache_salt)",
                                              "cache_salt")
    assert ok(api, CHAT, {"messages": MSG, "max_tokens": 1, "cache_salt": "tenant-a"})


def test_logprob_token_ids(api):
    """vLLM 0.34's request validators (``check_logprobs``): an empty list is no list; chat needs
    ``logprobs: true``, completions a ``logprobs`` given (their own words); neither with beam
    search; completions' ``echo`` with ``max_tokens: 0`` generates nothing to score."""
    assert ok(api, CHAT, {"messages": MSG, "max_tokens": 1, "logprob_token_ids": []})
    e = err(api, CHAT, {"messages": MSG, "logprob_token_ids": [1, 2]})
    assert (e["message"], e["param"]) == ("when using `logprob_token_ids`, `logprobs` must be set to true. "
                                          "(parameter=logprob_token_ids)",
                                          "logprob_token_ids")
    e = err(api, COMPLETIONS, {"prompt": "hi", "logprob_token_ids": [1]})
    assert (e["message"], e["param"]) == ("when using `logprob_token_ids`, `logprobs` must be set. "
                                          "(parameter=logprob_token_ids)", "logprob_token_ids")
    for path, body in ((CHAT, {"messages": MSG, "logprobs": True}), (COMPLETIONS, {"prompt": "hi", "logprobs": 1})):
        e = err(api, path, {**body, "logprob_token_ids": [1], "use_beam_search": True})
        assert (e["message"], e["param"]) == ("`logprob_token_ids` is not supported with beam search. "
                                              "(parameter=logprob_token_ids)", "logprob_token_ids")
    e = err(api, COMPLETIONS, {"prompt": "hi", "logprobs": 1, "logprob_token_ids": [1], "echo": True, "max_tokens": 0})
    assert e["message"] == ("`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no "
                            "output tokens are generated. (parameter=logprob_token_ids)")
    e = err(api, COMPLETIONS, {"prompt": "hi", "logprobs": 1, "echo": True, "use_beam_search": True})
    assert (e["message"], e["param"]) == ("`echo` with `logprobs` is not supported with beam search because beam "
                                          "search does not compute prompt logprobs. (parameter=echo)", "echo")
    assert ok(api, CHAT, {"messages": MSG, "max_tokens": 1, "logprobs": True, "logprob_token_ids": [1]})


def test_empty_tools_and_tool_choice_without_tools(api):
    """vLLM 0.34: ``tools: []`` is no tools, and "auto" / "required" then fall back to "none"."""
    for choice in (None, "auto", "required", "none"):
        body = {"messages": MSG, "max_tokens": 1, "tools": []}
        if choice is not None:
            body["tool_choice"] = choice
        assert ok(api, CHAT, body)
    e = err(api, CHAT, {"messages": MSG, "tools": [], "tool_choice": {"type": "function", "function": {"name": "f"}}})
    assert (e["message"], e["param"]) == ("The tool `f` specified in `tool_choice` does not match any of the "
                                          "specified `tools` (parameter=tool_choice)", "tool_choice")
    e = err(api, CHAT, {"messages": MSG, "tool_choice": "auto"})
    assert (e["message"], e["param"]) == ("When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
                                          "tool_choice")
    assert ok(api, CHAT, {"messages": MSG, "max_tokens": 1, "tool_choice": "none"})


_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
_F = [{"type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize("tools, choice, message, param", [
    (_F, "bogus", 'Invalid value for `tool_choice`: bogus! Only named tools, "none", "auto" or "required" are '
                  'supported. (parameter=tool_choice)', "tool_choice"),
    (None, "bogus", "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)", "tool_choice"),       # tools first
    (_F, {"type": "function"}, f"Invalid value for `function`: `None` in `tool_choice`! {_USAGE} "
     "(parameter=tool_choice.function)", "tool_choice.function"),
    (_F, {"type": "function", "function": "f"}, f"Invalid value for `function`: `f` in `tool_choice`! {_USAGE} "
     "(parameter=tool_choice.function)", "tool_choice.function"),
    (_F, {"type": "function", "function": {}}, f"Expected field `name` in `function` in `tool_choice`! {_USAGE} "
     "(parameter=tool_choice.function.name)", "tool_choice.function.name"),
    (_F, {"type": "function", "function": {"name": ""}}, f"Invalid `name` in `function`: `` in `tool_choice`! "
                                                         f"{_USAGE} (parameter=tool_choice.function.name)", "tool_choice.function.name"),
    (_F, {"type": "function", "function": {"name": 7}}, f"Invalid `name` in `function`: `7` in `tool_choice`! "
                                                        f"{_USAGE} (parameter=tool_choice.function.name)", "tool_choice.function.name"),
])
def test_bad_tool_choice_has_vllms_messages(api, tools, choice, message, param):
    """vLLM 0.34 ``chat_completion/protocol.py`` ``check_tool_usage``: the tools check first, then
    an unknown string, then the named choice's ``function`` and ``name``, each its own message."""
    body = {"messages": MSG, "tool_choice": choice, **({"tools": tools} if tools is not None else {})}
    e = err(api, CHAT, body)
    assert (e["message"], e["param"]) == (message, param)


def test_an_empty_tool_or_schema_name_is_a_string_like_any(api):
    """vLLM 0.34's ``FunctionDefinition.name`` and ``JsonSchemaResponseFormat.name`` are plain
    ``str`` fields: "" passes (only a forcing ``tool_choice`` checks its name is non-empty), and
    a name that is not a string is still a 400 naming it."""
    body = {"messages": MSG, "max_tokens": 3}
    assert ok(api, CHAT, {**body, "tools": [{"type": "function", "function": {"name": ""}}]})
    assert ok(api, CHAT, {**body, "response_format": {"type": "json_schema", "json_schema": {"name": "", "schema": {}}}})
    # a required tool call to a tool named "" is one like any other
    r = ok(api, CHAT, {**body, "tools": [{"type": "function", "function": {"name": ""}}], "tool_choice": "required"})
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == ""
    e = err(api, CHAT, {**body, "tools": [{"type": "function", "function": {"name": 5}}]})
    assert e["param"] == "body.tools.0.function.name" and "Input should be a valid string" in e["message"]
    e = err(api, CHAT, {**body, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})
    assert e["param"] == "body.response_format.json_schema.name" and "Field required" in e["message"]


@pytest.mark.parametrize("prompt", ["", None])
def test_empty_prompt_has_vllms_message(api, prompt):
    e = err(api, COMPLETIONS, {"prompt": prompt})
    assert "Either prompt or prompt_embeds must be provided and non-empty." in e["message"]
    assert e["param"] == "prompt"
    e = err(api, COMPLETIONS, {})
    assert "Either prompt or prompt_embeds must be provided and non-empty." in e["message"]


@pytest.mark.parametrize("value,on", [("true", True), ("True", True), ("yes", True), (1, True), ("false", False),
                                      (0, False)])
def test_chat_logprobs_is_coerced_as_pydantic_does(api, value, on):
    out = ok(api, CHAT, {"messages": MSG, "max_tokens": 2, "logprobs": value})
    assert (out["choices"][0]["logprobs"] is not None) == on


def test_chat_logprobs_garbage_is_still_a_400(api):
    assert err(api, CHAT, {"messages": MSG, "logprobs": "maybe"})["param"] == "body.logprobs"


# ---- min_tokens ------------------------------------------------------------------------------------------

def test_min_tokens_keeps_the_answer_going(app_client):
    api = app_client("--seed", "3")
    lengths = []
    for _ in range(10):
        out = ok(api, CHAT, {"messages": MSG, "max_tokens": 200, "min_tokens": 60})
        lengths.append(out["usage"]["completion_tokens"])
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
    assert min(lengths) >= 60
    out = ok(api, COMPLETIONS, {"prompt": "hi", "max_tokens": 30, "min_tokens": 30})
    assert (out["usage"]["completion_tokens"], out["choices"][0]["finish_reason"]) == (30, "length")
    out = ok(api, GENERATE, {"token_ids": [1, 2], "sampling_params": {"max_tokens": 40, "min_tokens": 25}})
    assert len(out["choices"][0]["token_ids"]) >= 25


def test_min_tokens_bounds(api):
    e = err(api, CHAT, {"messages": MSG, "max_tokens": 5, "min_tokens": 6})
    assert (e["message"], e["param"]) == ("min_tokens must be less than or equal to max_tokens=5, got 6.", None)
    e = err(api, COMPLETIONS, {"prompt": "hi", "min_tokens": -1})
    assert e["message"] == "min_tokens must be greater than or equal to 0, got -1."


# ---- return_tokens_as_token_ids ------------------------------------------------------------------------

def test_chat_logprob_tokens_as_token_ids(api, app_client):
    body = {"messages": MSG, "max_tokens": 3, "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
    for client, extra in ((api, {"return_tokens_as_token_ids": True}), (app_client("--return-tokens-as-token-ids"), {})):
        out = ok(client, CHAT, {**body, **extra})
        ids = out["choices"][0]["token_ids"]
        content = out["choices"][0]["logprobs"]["content"]
        assert [c["token"] for c in content] == [f"token_id:{t}" for t in ids]
        assert content[0]["bytes"] == list(f"token_id:{ids[0]}".encode())
        assert content[0]["top_logprobs"][0]["token"] == f"token_id:{ids[0]}"
        r = client.post(CHAT, json={"model": "test-model", **body, **extra, "stream": True})
        chunks = [e["choices"][0] for e in sse_events(r.text)[:-1] if e["choices"] and e["choices"][0].get("logprobs")]
        assert chunks and all(c["logprobs"]["content"][0]["token"] == f"token_id:{c['token_ids'][0]}" for c in chunks)


def test_completion_logprob_tokens_as_token_ids(api):
    out = ok(api, COMPLETIONS, {"prompt": "hi there", "max_tokens": 3, "logprobs": 1, "return_token_ids": True,
                                "return_tokens_as_token_ids": True})
    c = out["choices"][0]
    assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]
    assert list(c["logprobs"]["top_logprobs"][0]) == [f"token_id:{c['token_ids'][0]}"]
    plain = ok(api, COMPLETIONS, {"prompt": "hi there", "max_tokens": 3, "logprobs": 1})
    assert not plain["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:")


# ---- truncate_prompt_tokens --------------------------------------------------------------------------

def test_truncate_prompt_tokens_keeps_the_last_or_first_tokens(echo_api):
    ids = list(range(100, 110))
    out = ok(echo_api, COMPLETIONS, {"prompt": ids, "max_tokens": 20, "truncate_prompt_tokens": 4,
                                     "return_token_ids": True})
    assert out["usage"]["prompt_tokens"] == 4 and out["choices"][0]["prompt_token_ids"] == ids[-4:]
    out = ok(echo_api, COMPLETIONS, {"prompt": ids, "max_tokens": 20, "truncate_prompt_tokens": 4,
                                     "truncation_side": "right", "return_token_ids": True})
    assert out["choices"][0]["prompt_token_ids"] == ids[:4]
    assert ok(echo_api, COMPLETIONS, {"prompt": ids, "max_tokens": 20, "truncate_prompt_tokens": -1})["usage"][
        "prompt_tokens"] == 10


@pytest.mark.parametrize("path,body", [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})])
def test_truncate_prompt_tokens_bounds(api, path, body):
    """vLLM 0.34: past the context, ``TokenizeParams.__post_init__``'s words (renderers/params.py;
    the older "truncate_prompt_tokens value (N) is greater than max_model_len (M). Please, select
    ..." is gone); outside ``Field(ge=-1, le=_INT64_MAX)``, pydantic's error at the body."""
    e = err(api, path, {**body, "truncate_prompt_tokens": 1025})
    assert (e["message"], e["param"]) == (
        "truncate_prompt_tokens=1025 cannot be greater than max_model_len = 1024. Please request a smaller "
        "truncation size. (parameter=truncate_prompt_tokens, value=1025)", "truncate_prompt_tokens")
    assert ok(api, path, {**body, "truncate_prompt_tokens": 1024, "max_tokens": 2})
    e = err(api, path, {**body, "truncate_prompt_tokens": -2})
    assert (e["message"], e["param"], e["type"]) == (
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.truncate_prompt_tokens', 'msg': 'Input "
        "should be greater than or equal to -1', 'input': '-2', 'ctx': {'ge': -1}}", "body.truncate_prompt_tokens",
        "Bad Request")
    e = err(api, path, {**body, "truncate_prompt_tokens": 2 ** 63})
    assert (e["message"], e["param"]) == (
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.truncate_prompt_tokens', 'msg': 'Input "
        "should be less than or equal to 9223372036854775807', 'input': '9223372036854775808', 'ctx': "
        "{'le': 9223372036854775807}}", "body.truncate_prompt_tokens")
    assert err(api, COMPLETIONS, {"prompt": "hi", "truncation_side": "middle"})["param"] == "body.truncation_side"


# ---- /inference/v1/generate defaults -----------------------------------------------------------------

def test_generate_defaults_sampling_params_and_max_tokens(app_client):
    api = app_client("--max-model-len", "40")
    out = ok(api, GENERATE, {"token_ids": [1, 2, 3], "ignore_eos": True})
    assert len(out["choices"][0]["token_ids"]) == 37 and out["choices"][0]["finish_reason"] == "length"
    out = ok(api, GENERATE, {"token_ids": [1, 2, 3], "sampling_params": {"ignore_eos": True}})
    assert len(out["choices"][0]["token_ids"]) == 37


def test_generate_logprobs_zero_gives_the_sampled_tokens_logprob(api):
    """vLLM's tokens level: ``top_logprobs`` has ``max(logprobs, 1)`` candidates, the sampled
    token first (vLLM's test_serving_tokens ``test_generate_logprobs``)."""
    out = ok(api, GENERATE, {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3, "logprobs": 0}})
    c = out["choices"][0]
    content = c["logprobs"]["content"]
    assert [e["token_id"] for e in content] == c["token_ids"]
    assert all(isinstance(e["logprob"], float) and e["top_logprobs"] == [{"token_id": e["token_id"],
               "logprob": e["logprob"], "rank": 1}] for e in content)


def test_generate_stop_strings_need_detokenize(api):
    e = err(api, GENERATE, {"token_ids": [1], "sampling_params": {"stop": ["x"], "detokenize": False}})
    assert e["message"] == ("stop strings are only supported when detokenize is True. Set detokenize=True to use "
                            "stop.")
    assert e["param"] == "stop"


def test_token_id_bounds_follow_the_models_vocab_size(hf_api):
    """With the model's config read, ``stop_token_ids`` / ``logit_bias`` are bounded by its
    ``vocab_size`` (vLLM's ``get_vocab_size``), prompt ids by the larger of it and the tokenizer's."""
    tok = hf_api.sim.tokenizer.vocab_size
    model = tok + 64                                # Qwen-style: more model rows than tokens

    def post(path, body):
        return hf_api.post(path, json={"max_tokens": 1, **body})
    hf_api.sim.config.model_vocab_size = model
    try:
        assert post(CHAT, {"messages": MSG, "stop_token_ids": [model - 1]}).status_code == 200
        e = post(CHAT, {"messages": MSG, "stop_token_ids": [model + 1]}).json()["error"]
        assert (e["message"], e["param"]) == (f"token_id(s) [{model + 1}] in stop_token_ids contain out-of-vocab "
                                              f"token ids. Vocabulary size: {model} "
                                              f"(parameter=stop_token_ids, value=[{model + 1}])", "stop_token_ids")
        e = post(CHAT, {"messages": MSG, "logit_bias": {str(model): 1}}).json()["error"]
        assert e["message"].endswith(f"Vocabulary size: {model} (parameter=logit_bias, value=[{model}])")
        assert post(COMPLETIONS, {"prompt": [1, model - 1]}).status_code == 200
        e = post(COMPLETIONS, {"prompt": [1, model]}).json()["error"]
        assert e["message"] == f"Token id {model} is out of vocabulary"
    finally:
        hf_api.sim.config.model_vocab_size = None



def test_the_simulated_tokenizers_own_ids_are_in_vocabulary_with_a_models_config(api):
    """``HF_HUB_OFFLINE=1 python app.py Qwen/Qwen3-8B`` reads the shipped config (vocab_size
    151,936) but tokenizes with the simulated tokenizer, whose ids are 32-bit hashes: an id from an
    answer's ``token_ids`` sent back as ``stop_token_ids`` or a ``logit_bias`` key was a 400
    ``out-of-vocab token ids. Vocabulary size: 151936``; the bound is the tokenizer's own."""
    api.sim.config.model_vocab_size = 151936
    try:
        body = {"messages": MSG, "max_tokens": 12, "ignore_eos": True, "seed": 3, "return_token_ids": True}
        ids = ok(api, CHAT, body)["choices"][0]["token_ids"]
        stop = next(i for i in ids[4:] if i >= 151936)
        choice = ok(api, CHAT, {**body, "stop_token_ids": [stop]})["choices"][0]
        assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
        assert choice["token_ids"] == ids[:ids.index(stop) + 1]
        assert ok(api, CHAT, {**body, "logit_bias": {str(stop): 5}})["choices"]
        e = err(api, CHAT, {**body, "stop_token_ids": [VOCAB]})
        assert e["message"].endswith(f"Vocabulary size: {VOCAB} (parameter=stop_token_ids, value=[{VOCAB}])")
    finally:
        api.sim.config.model_vocab_size = None

# ---- a body that is JSON but not an object (vLLM's test_non_object_body_validation) ------------
@pytest.mark.parametrize("raw,shown", [(b"[]", "<list of 0 items>"), (b'["not", "an", "object"]', "<list of 3 items>"),
                                       (b"42", "42"), (b"null", "None"), (b'"hello"', "hello"), (b"true", "True")])
@pytest.mark.parametrize("path,members", [(CHAT, 1), (COMPLETIONS, 1), (GENERATE, 1), ("/v1/responses", 1),
                                          ("/v1/embeddings", 5), ("/tokenize", 2), ("/v1/messages", 1)])
def test_a_non_object_body_is_a_400_not_a_500(api, path, members, raw, shown):
    """vLLM 0.34 (``chat_completion/protocol.py``: every ``mode="before"`` validator returns a
    non-dict body unchanged) answers a list, scalar or null body with pydantic's
    ``model_attributes_type`` at ``body``, not an AttributeError's 500: one error per model of a
    union body (EmbeddingRequest's 5, TokenizeRequest's 2), in each API's envelope.  ``null`` too:
    FastAPI validates a JSON null (only an empty body is ``missing``)."""
    r = api.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    line = ("  {'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should be a valid dictionary or object "
            f"to extract fields from', 'input': '{shown}'}}")
    label = "error" if members == 1 else "errors"
    message = f"{members} validation {label}:\n" + "\n".join([line] * members)
    if path == "/v1/messages":
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        assert r.json() == {"error": {"message": message, "type": "Bad Request", "param": "body", "code": 400}}


@pytest.mark.parametrize("extra, limit", [({}, 1017), ({"max_tokens": 5000}, 1017), ({"max_tokens": 500}, 500)])
def test_min_tokens_past_the_room_left(api, extra, limit):
    """vLLM: a missing (or too large) max_tokens becomes the room the context leaves
    (get_max_tokens), and SamplingParams refuses a min_tokens past it; the simulator capped
    min_tokens silently."""
    e = err(api, CHAT, {"messages": MSG, "min_tokens": 1020, **extra})
    assert (e["message"], e["param"]) == (f"min_tokens must be less than or equal to max_tokens={limit}, got 1020.", None)
    assert ok(api, CHAT, {"messages": MSG, "min_tokens": 1000, "max_tokens": 1000})
