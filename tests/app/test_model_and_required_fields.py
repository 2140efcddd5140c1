"""``model`` of the wrong JSON type and a missing required field are pydantic's errors, listed with
the body's other field errors in the vLLM model's field order, as vLLM 0.34 answers them.

vLLM's request models declare ``model: str | None = None`` on the OpenAI routes (``null``: the
first served model) and ``model: str`` on Anthropic's; a field without a default is required.
pydantic reports a wrong type as ``string_type`` and an absent field as ``missing`` whose
``input`` is the whole body the model's fields were read from (after the model's
before-validators), which vLLM's validation handler
(``serve/exception_handling/handlers/validation.py:149``, ``validation_exception_handler``)
shows as ``<dict of N items>`` (``_summarize_error_input``, :84); ``param`` is the first
error's location, the type ``Bad Request``."""
from __future__ import annotations

import pytest

MSG = [{"role": "user", "content": "hi"}]
CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"
STR = ("string_type", "Input should be a valid string")
FLOAT = ("float_parsing", "Input should be a valid number, unable to parse string as a number")
INT = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
BOOL = ("bool_parsing", "Input should be a valid boolean, unable to interpret input")
LIST = ("list_type", "Input should be a valid list")
MISSING = ("missing", "Field required")


def line(loc: str, error: tuple, value: str) -> str:
    """One error as the handler prints it (``value``: the input as it summarises it)."""
    kind, msg, *ctx = error
    return "  " + str({"type": kind, "loc": f"body.{loc}", "msg": msg, "input": value,
                       **({"ctx": ctx[0]} if ctx else {})})


def errors(*lines: str) -> str:
    return f"{len(lines)} validation error{'s' if len(lines) != 1 else ''}:\n" + "\n".join(lines)


def items(n: int) -> str:
    return f"<dict of {n} items>"


def assert_400(api, path: str, body, message: str, param: str) -> None:
    r = api.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": {"message": message, "type": "Bad Request", "param": param, "code": 400}}


# ---- model of the wrong JSON type ------------------------------------------------------------------

@pytest.mark.parametrize("model,shown", [(5, "5"), (True, "True"), ({"name": "test-model"}, items(1)),
                                         (["test-model"], "<list of 1 items>"), (1.5, "1.5")])
@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": MSG}),                  # chat_completion/protocol.py:241 model: str | None = None
    (COMPLETIONS, {"prompt": "hi"}),            # completion/protocol.py:52
    (EMBEDDINGS, {"input": "hi"}),              # pooling/base/protocol.py:37 (PoolingBasicRequestMixin)
    (RESPONSES, {"input": "hi"}),               # responses/protocol.py:277
    ("/tokenize", {"prompt": "hi"}),            # serve/tokenize/protocol.py:25
    ("/detokenize", {"tokens": [1, 2]}),        # serve/tokenize/protocol.py:194
    ("/v1/chat/completions/render", {"messages": MSG}),     # scale_out/render/api_router.py: ChatCompletionRequest
    ("/v1/completions/render", {"prompt": "hi"}),           # ... CompletionRequest
    ("/v1/chat/completions/batch", {"messages": [MSG]}),    # chat_completion/protocol.py:1161
])
def test_model_of_the_wrong_type_is_a_400_not_a_404(api, path, body, model, shown):
    """Was 404 ``The model `5` does not exist.`` (``True``, a dict's repr): pydantic refuses a
    non-string for ``str | None`` (lax mode takes no number or boolean for a string)."""
    assert_400(api, path, {"model": model, **body}, errors(line("model", STR, shown)), "body.model")


@pytest.mark.parametrize("path,body", [
    ("/pooling", {"input": "hi"}), ("/classify", {"input": "hi"}),   # PoolingBasicRequestMixin
    ("/v2/embed", {"texts": ["hi"], "input_type": "search_query", "embedding_types": ["float"]}),
])
def test_model_of_the_wrong_type_on_pooling_routes(app_client, path, body):
    """pooling/base/protocol.py:37 and CohereEmbedRequest (pooling/embed/protocol.py:262):
    ``model: str | None = None``."""
    api = app_client("--runner", "pooling", "--convert", "embed") if path != "/classify" else \
        app_client("--runner", "pooling", "--convert", "classify")
    assert_400(api, path, {"model": 7, **body}, errors(line("model", STR, "7")), "body.model")


def test_model_null_is_the_first_served_model(api):
    """``model: str | None = None``: ``null`` is the default, the first served model (vLLM's
    ``_check_model``), as the simulator already answered."""
    r = api.post(CHAT, json={"model": None, "messages": MSG, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "test-model"


def test_model_is_listed_in_the_chat_models_order(api):
    """ChatCompletionRequest declares ``messages`` (chat_completion/protocol.py:240), ``model``
    (:241), ``frequency_penalty`` (:242) ... ``temperature`` (:259): ``model`` is the second
    error, after a missing ``messages``, whatever the body's key order."""
    body = {"temperature": "x", "model": 5, "frequency_penalty": "y"}
    assert_400(api, CHAT, body, errors(line("messages", MISSING, items(3)), line("model", STR, "5"),
                                       line("frequency_penalty", FLOAT, "y"), line("temperature", FLOAT, "x")),
               "body.messages")
    assert_400(api, CHAT, {"messages": MSG, "n": "z", "model": True},
               errors(line("model", STR, "True"), line("n", INT, "z")), "body.model")


def test_model_is_listed_in_the_other_models_orders(api):
    """CompletionRequest: ``model`` first (completion/protocol.py:52, ``echo`` :60);
    ResponsesRequest: ``max_output_tokens`` (responses/protocol.py:274), ``model`` (:277),
    ``store`` (:293); EmbeddingCompletionRequest: the mixins' ``dimensions``
    (pooling/base/protocol.py:347) and ``input`` (:214) before PoolingBasicRequestMixin's ``model``
    (:37) and ``user`` (:38)."""
    assert_400(api, COMPLETIONS, {"prompt": "hi", "echo": "maybe", "model": 5},
               errors(line("model", STR, "5"), line("echo", BOOL, "maybe")), "body.model")
    assert_400(api, RESPONSES, {"input": "hi", "store": "c", "model": 5, "max_output_tokens": "d"},
               errors(line("max_output_tokens", INT, "d"), line("model", STR, "5"), line("store", BOOL, "c")),
               "body.max_output_tokens")
    assert_400(api, EMBEDDINGS, {"user": 5, "model": 6, "dimensions": "x"},
               errors(line("dimensions", INT, "x"), line("input", MISSING, items(3)), line("model", STR, "6"),
                      line("user", STR, "5")), "body.dimensions")


# ---- a missing required field -----------------------------------------------------------------------

def test_missing_messages_alone_and_with_other_errors(api):
    """``messages: list[ChatCompletionMessageParam]`` has no default (chat_completion/protocol.py:240):
    pydantic's ``missing``, no longer the simulator's ``messages: Missing data for required
    field.`` hiding the other errors."""
    assert_400(api, CHAT, {"model": "test-model"}, errors(line("messages", MISSING, items(1))), "body.messages")
    assert_400(api, CHAT, {"model": "test-model", "temperature": "x"},
               errors(line("messages", MISSING, items(2)), line("temperature", FLOAT, "x")), "body.messages")
    assert_400(api, CHAT, {}, errors(line("messages", MISSING, items(0))), "body.messages")


def test_messages_null_is_a_list_type_error(api):
    """pydantic reads ``null`` for ``list[...]`` as a wrong type, not as absent."""
    assert_400(api, CHAT, {"model": "test-model", "messages": None, "n": "z"},
               errors(line("messages", LIST, "None"), line("n", INT, "z")), "body.messages")


def test_missing_input_counts_the_keys_the_before_validators_add(api):
    """pydantic's ``input`` of ``missing`` is the body after the model's before-validators: chat's
    ``check_tool_usage`` adds ``tool_choice: "auto"`` beside ``tools`` (chat_completion/protocol.py:993),
    ``apply_return_mm_kwargs_alias`` (:565, generate/base/protocol.py:61) ``mm_payload`` beside
    ``return_mm_kwargs: false``; responses' ``check_tool_usage`` (responses/protocol.py:865) sets
    ``tool_choice: "none"`` where there are no tools."""
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert_400(api, CHAT, {"model": "test-model", "tools": tools},
               errors(line("messages", MISSING, items(3))), "body.messages")
    assert_400(api, CHAT, {"model": "test-model", "return_mm_kwargs": False},
               errors(line("messages", MISSING, items(3))), "body.messages")
    assert_400(api, RESPONSES, {"model": "test-model"}, errors(line("input", MISSING, items(2))), "body.input")
    assert_400(api, RESPONSES, {"model": "test-model", "tools": [{"type": "function", "name": "f"}]},
               errors(line("input", MISSING, items(2))), "body.input")
    assert_400(api, RESPONSES, {"model": "test-model", "tool_choice": "auto", "top_p": "a"},
               errors(line("input", MISSING, items(3)), line("top_p", FLOAT, "a")), "body.input")


def test_completions_prompt_is_its_request_validators(api):
    """CompletionRequest's ``prompt`` defaults to None (completion/protocol.py:53); its
    ``validate_prompt_and_prompt_embeds`` (:612) refuses a body without one ahead of the fields, on
    /v1/completions and on its render alike (the render answered ``prompt: Field required.``)."""
    for path in (COMPLETIONS, "/v1/completions/render"):
        for body in ({"model": "test-model"}, {"model": 5, "echo": "x"}, {"prompt": None}):
            r = api.post(path, json=body)
            assert r.status_code == 400 and r.json()["error"] == {
                "message": "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                "type": "BadRequestError", "param": "prompt", "code": 400}, (path, body)


@pytest.mark.parametrize("path,body,expected,param", [
    # EmbeddingCompletionRequest's input (pooling/base/protocol.py:214; the embedding request
    # picked by the body, as for its other errors)
    (EMBEDDINGS, {"model": "test-model"}, [line("input", MISSING, items(1))], "body.input"),
    # TokenizeCompletionRequest.prompt: str (serve/tokenize/protocol.py:26), model first (:25)
    ("/tokenize", {}, [line("prompt", MISSING, items(0))], "body.prompt"),
    ("/tokenize", {"model": 5}, [line("model", STR, "5"), line("prompt", MISSING, items(1))], "body.model"),
    ("/tokenize", {"prompt": None}, [line("prompt", STR, "None")], "body.prompt"),
    # TokenizeChatRequest.messages (:52) read null
    ("/tokenize", {"messages": None}, [line("messages", LIST, "None")], "body.messages"),
    # DetokenizeRequest: model (:194), tokens (:198)
    ("/detokenize", {"model": 5}, [line("model", STR, "5"), line("tokens", MISSING, items(1))], "body.model"),
    # BatchChatCompletionRequest.messages = Field(..., min_length=1) (chat_completion/protocol.py:1158)
    ("/v1/chat/completions/batch", {"temperature": "x"},
     [line("messages", MISSING, items(1)), line("temperature", FLOAT, "x")], "body.messages"),
    # the chat render reads a ChatCompletionRequest (scale_out/render/api_router.py:41)
    ("/v1/chat/completions/render", {"model": 5}, [line("messages", MISSING, items(1)), line("model", STR, "5")],
     "body.messages"),
])
def test_missing_required_fields_on_other_routes(api, path, body, expected, param):
    assert_400(api, path, body, errors(*expected), param)


# ---- Anthropic's /v1/messages (its envelope, pydantic's words) ----------------------------------------

def anthropic_400(api, path: str, body: dict) -> str:
    r = api.post(path, json=body)
    assert r.status_code == 400, r.text
    out = r.json()
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error" and set(out) == {"type", "error"}
    return out["error"]["message"]


def test_messages_empty_body_lists_every_missing_field(api):
    """AnthropicMessagesRequest declares ``model: str``, ``messages``, ``max_tokens: int`` without
    defaults (anthropic/protocol.py:272-274): ``{}`` is three ``missing`` errors (was
    ``messages: Field required.`` alone); count_tokens' model (:477-478) requires two."""
    assert anthropic_400(api, "/v1/messages", {}) == errors(
        line("model", MISSING, items(0)), line("messages", MISSING, items(0)), line("max_tokens", MISSING, items(0)))
    assert anthropic_400(api, "/v1/messages/count_tokens", {}) == errors(
        line("model", MISSING, items(0)), line("messages", MISSING, items(0)))


def test_messages_several_mistakes_in_the_models_order(api):
    """Wrong types and missing fields together, in AnthropicMessagesRequest's order (``model``
    :272, ``messages`` :273, ``max_tokens`` :274, ``stream`` :281, ``temperature`` :283): was
    ``messages: Not a valid list.`` alone, and a missing ``max_tokens`` was hidden behind a
    missing ``messages``."""
    assert anthropic_400(api, "/v1/messages", {"model": 5, "messages": 5}) == errors(
        line("model", STR, "5"), line("messages", LIST, "5"), line("max_tokens", MISSING, items(2)))
    assert anthropic_400(api, "/v1/messages", {"temperature": "hot", "max_tokens": "x", "stream": "maybe"}) == errors(
        line("model", MISSING, items(3)), line("messages", MISSING, items(3)), line("max_tokens", INT, "x"),
        line("stream", BOOL, "maybe"), line("temperature", FLOAT, "hot"))
    # apply_return_mm_kwargs_alias (:382) adds mm_payload before the fields are read
    assert anthropic_400(api, "/v1/messages", {"model": "test-model", "max_tokens": 3, "return_mm_kwargs": False}) \
        == errors(line("messages", MISSING, items(4)))


def test_messages_model_is_required_and_not_empty(api):
    """No default model on /v1/messages (the simulator answered 200 without one): ``model: str``
    (anthropic/protocol.py:272), ``null`` a wrong type, ``""`` refused by ``validate_model``
    (:362, pydantic's ``value_error``, its ``ValueError`` in ``ctx``); on count_tokens
    (:477, :494) and the messages render (scale_out/render/api_router.py:64) too, which answers
    in vLLM's envelope (its router's validation_exception_handler)."""
    body = {"messages": MSG, "max_tokens": 3}
    assert anthropic_400(api, "/v1/messages", body) == errors(line("model", MISSING, items(2)))
    assert anthropic_400(api, "/v1/messages", {**body, "model": None}) == errors(line("model", STR, "None"))
    empty = "  {'type': 'value_error', 'loc': 'body.model', 'msg': 'Value error, Model is required', 'input': '', " \
            "'ctx': {'error': ValueError('Model is required')}}"
    assert anthropic_400(api, "/v1/messages", {**body, "model": ""}) == errors(empty)
    assert anthropic_400(api, "/v1/messages/count_tokens", {"messages": MSG, "model": ""}) == errors(empty)
    assert_400(api, "/v1/messages/render", body, errors(line("model", MISSING, items(2))), "body.model")
    assert api.post("/v1/messages", json={**body, "model": "test-model"}).status_code == 200
