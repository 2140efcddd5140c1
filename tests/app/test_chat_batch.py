"""vLLM 0.34's ``POST /v1/chat/completions/batch`` (``openai/chat_completion/batch_serving.py``,
``protocol.py`` ``BatchChatCompletionRequest``; :mod:`generation.adapters.chat_batch`): one
choice per conversation, chat's checks per conversation, the batch's own refusals in vLLM's
words, N conversations as N sequences in the engine and the metrics, and the openai SDK reading
the answer as a ``ChatCompletion``."""
from __future__ import annotations

import json

import openai
import pytest

from support import error_of, error_type_400

from support import scrape, value

BATCH = "/v1/chat/completions/batch"
CHAT = "/v1/chat/completions"
A = [{"role": "user", "content": "Reply with exactly the word: alpha"}]
B = [{"role": "user", "content": "Reply with exactly the word: beta, please"}]


err = error_of


def test_one_choice_per_conversation_as_coupled_chat_answers_it(api):
    body = {"model": "test-model", "max_tokens": 12, "temperature": 0, "request_id": "b1"}
    r = api.post(BATCH, json={**body, "messages": [A, B]})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["id"] == "chatcmpl-b1" and d["object"] == "chat.completion" and d["model"] == "test-model"
    assert d["system_fingerprint"].startswith("vllm-0.34.0-")
    assert [c["index"] for c in d["choices"]] == [0, 1]
    singles = [api.post(CHAT, json={**body, "messages": conv}).json() for conv in (A, B)]
    for i, (c, s) in enumerate(zip(d["choices"], singles)):
        assert c == {**s["choices"][0], "index": i}          # the same answer, message and finish
        assert c["message"]["role"] == "assistant"
    # usage: the conversations' prompt and completion tokens summed (batch_serving.py)
    prompt = sum(s["usage"]["prompt_tokens"] for s in singles)
    completion = sum(s["usage"]["completion_tokens"] for s in singles)
    assert d["usage"] == {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                          "completion_tokens": completion, "completion_tokens_details": None}
    assert d["prompt_logprobs"] is None and d["prompt_token_ids"] is None and d["kv_transfer_params"] is None


def test_return_token_ids_logprobs_and_echo_per_conversation(api):
    body = {"max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2, "return_token_ids": True,
            "echo": True}
    d = api.post(BATCH, json={**body, "messages": [A, B]}).json()
    for c, conv in zip(d["choices"], (A, B)):
        s = api.post(CHAT, json={**body, "messages": conv}).json()
        assert c["logprobs"] == s["choices"][0]["logprobs"] and len(c["logprobs"]["content"]) >= 1
        assert c["token_ids"] == s["choices"][0]["token_ids"]       # per choice; no top-level prompt ids
        assert c["message"]["content"] == s["choices"][0]["message"]["content"]   # last message is the user's: no echo
    assert d["prompt_token_ids"] is None and d["prompt_logprobs"] is None   # chat's echo adds prompt logprobs; batch's none
    # add_generation_prompt false: the answer's role is the last message's, whose content echo prepends
    pre = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Prefix "}]
    d = api.post(BATCH, json={"messages": [pre, A], "max_tokens": 3, "temperature": 0, "echo": True,
                              "add_generation_prompt": False, "continue_final_message": True}).json()
    first, second = d["choices"]
    assert first["message"]["role"] == "assistant" and first["message"]["content"].startswith("Prefix ")
    assert second["message"]["role"] == "user"
    assert second["message"]["content"].startswith(A[0]["content"])


@pytest.mark.parametrize("extra, message, param", [
    ({"n": 2}, "Batch chat completions do not support `n > 1`. Please set `n` to 1. (parameter=n, value=2)", "n"),
    ({"n": "1"}, "Batch chat completions do not support `n > 1`. Please set `n` to 1. (parameter=n, value=1)", "n"),
    ({"n": [1, 2]}, "Batch chat completions do not support `n > 1`. Please set `n` to 1. "
                    "(parameter=n, value=<list of 2 items>)", "n"),
    ({"use_beam_search": True}, "Batch chat completions do not support beam search. Please set `use_beam_search` "
                                "to False. (parameter=use_beam_search)", "use_beam_search"),
    ({"logprob_token_ids": [5]}, "when using `logprob_token_ids`, `logprobs` must be set to true. "
                                 "(parameter=logprob_token_ids)", "logprob_token_ids"),
    ({"kv_transfer_params": {"prompt_token_ids": [1, 2]}},
     "Batch chat completions do not support `kv_transfer_params['prompt_token_ids']`: one pre-tokenized prompt "
     "cannot serve several conversations. (parameter=kv_transfer_params.prompt_token_ids)",
     "kv_transfer_params.prompt_token_ids"),
    ({"tool_choice": "auto"}, "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.tool_choice', "
                              "'msg': \"Input should be 'none'\", 'input': 'auto', 'ctx': {'expected': \"'none'\"}}",
     "body.tool_choice"),
    # chat's own validators, run on each conversation's request (to_chat_completion_request)
    ({"stream_options": {"include_usage": True}},
     "Stream options can only be defined when `stream=True`. (parameter=stream_options)", "stream_options"),
    ({"continue_final_message": True},           # the batch's add_generation_prompt default is given
     "Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "continue_final_message"),
    ({"max_tokens": "x"}, "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.max_tokens', 'msg': 'Input should "
     "be a valid integer, unable to parse string as an integer', 'input': 'x'}", "body.max_tokens"),
])
def test_batch_limitations_and_chat_checks_are_vllms_400s(api, extra, message, param):
    # check_batch_mode runs on the raw body first: before a bad messages value is read
    for messages in ([A, B], "not conversations") if param in ("n", "use_beam_search") else ([A, B],):
        e = err(api.post(BATCH, json={"messages": messages, **extra}), 400)
        assert (e["message"], e["param"], e["type"]) == (message, param, error_type_400(message))


@pytest.mark.parametrize("messages, message, param", [
    ([], "1 validation error:\n  {'type': 'too_short', 'loc': 'body.messages', 'msg': 'List should have at least "
         "1 item after validation, not 0', 'input': '<list of 0 items>', 'ctx': {'field_type': 'List', "
         "'min_length': 1, 'actual_length': 0}}", "body.messages"),
    ([A, []], "1 validation error:\n  {'type': 'too_short', 'loc': 'body.messages.1', 'msg': 'List should have at "
              "least 1 item after validation, not 0', 'input': '<list of 0 items>', 'ctx': {'field_type': 'List', "
              "'min_length': 1, 'actual_length': 0}}", "body.messages.1"),
    ("x", "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages', 'msg': 'Input should be a valid "
          "list', 'input': 'x'}", "body.messages"),
    (A, "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages.0', 'msg': 'Input should be a valid "
        "list', 'input': '<dict of 2 items>'}", "body.messages.0"),
    ([A, [{"content": "no role"}]], "messages[1][0].role: Missing data for required field.", "messages[1][0].role"),
    ([[{"role": "user", "content": 5}]], "messages[0][0].content: Input should be a valid string or a list of "
                                         "content parts.", "messages[0][0].content"),
])
def test_bad_conversations_name_the_field(api, messages, message, param):
    e = err(api.post(BATCH, json={"messages": messages}), 400)
    assert (e["message"], e["param"]) == (message, param)
    # BatchChatCompletionRequest.messages = Field(..., min_length=1) (chat_completion/protocol.py:1158):
    # pydantic's missing, the whole body its input
    e = err(api.post(BATCH, json={}), 400)
    assert (e["message"], e["param"]) == ("1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': "
                                          "'Field required', 'input': '<dict of 0 items>'}", "body.messages")
    # a body that is not an object: pydantic's model_attributes_type at body
    e = err(api.post(BATCH, json=[A]), 400)
    assert (e["message"], e["param"]) == ("1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', "
                                          "'msg': 'Input should be a valid dictionary or object to extract fields "
                                          "from', 'input': '<list of 1 items>'}", "body")


def test_model_and_context_errors_are_chats(app_client):
    c = app_client("--max-model-len", "64")
    e = err(c.post(BATCH, json={"model": "nope", "messages": [A]}), 404)
    assert e["message"] == "The model `nope` does not exist."
    long = [{"role": "user", "content": "word " * 80}]
    e = err(c.post(BATCH, json={"messages": [A, long]}), 400)
    assert e["message"].startswith("This model's maximum context length is 64 tokens. However, your prompt contains")


def test_tools_are_type_checked_and_left_out(api):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    plain = api.post(BATCH, json={"messages": [A], "max_tokens": 5, "temperature": 0}).json()
    d = api.post(BATCH, json={"messages": [A], "max_tokens": 5, "temperature": 0, "tools": tools}).json()
    assert d["choices"] == plain["choices"] and d["usage"] == plain["usage"]   # tool_choice "none": no call
    e = err(api.post(BATCH, json={"messages": [A], "tools": [{"type": "function"}]}), 400)
    assert e["param"] == "body.tools.0.function"          # pydantic's missing field


def test_stream_true_answers_one_json_body(api):
    body = {"messages": [A, B], "max_tokens": 6, "temperature": 0}
    r = api.post(BATCH, json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json()["choices"] == api.post(BATCH, json=body).json()["choices"]


def test_conversations_are_sequences_in_metrics_and_bounds(app_client):
    c = app_client("--max-num-seqs", "2", "--max-waiting-queue-length", "1", "--max-request-work", "100")
    before = scrape(c)
    r = c.post(BATCH, json={"messages": [A, B, A], "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200, r.text
    after = scrape(c)
    # vLLM runs each conversation as a request of its own: three successes, three n observations
    assert value(after, "vllm:request_success_total", finished_reason="length") - \
        value(before, "vllm:request_success_total", finished_reason="length") == 3
    assert value(after, "vllm:request_params_n_count") - value(before, "vllm:request_params_n_count") == 3
    assert value(after, "vllm:prompt_tokens_total") - value(before, "vllm:prompt_tokens_total") == \
        r.json()["usage"]["prompt_tokens"]
    # more conversations than slots and queue together: the queue's 429 before anything is tokenized
    e = err(c.post(BATCH, json={"messages": [A] * 4}), 429)
    assert e["message"] == "Failed to enqueue request, waiting requests queue is full"
    # --max-request-work counts every conversation's tokens
    e = err(c.post(BATCH, json={"messages": [A, B], "max_tokens": 60}), 400)
    assert e["param"] == "messages" and "(conversations x max_tokens)" in e["message"]


def test_prompt_tokens_details_sum_the_conversations(app_client):
    # vLLM's test_batched_chat_completions_prompt_tokens_details: a warmed prefix, then a batch of two
    c = app_client("--enable-prompt-tokens-details", "--enable-kvcache", "--block-size", "16")
    conv = [{"role": "user", "content": "Repeat the word alpha. " * 20}]
    body = {"max_tokens": 1, "temperature": 0}
    c.post(CHAT, json={**body, "messages": conv})
    single = c.post(CHAT, json={**body, "messages": conv}).json()["usage"]["prompt_tokens_details"]
    batch = c.post(BATCH, json={**body, "messages": [conv, conv]}).json()["usage"]["prompt_tokens_details"]
    assert single["cached_tokens"] > 0
    for field in ("cached_tokens", "created_cache_tokens"):
        assert batch[field] == 2 * single[field]


def test_openai_sdk_reads_the_answer_as_a_chat_completion(api):
    from openai.types.chat import ChatCompletion
    client = api.openai()
    out = client.post("/chat/completions/batch", cast_to=ChatCompletion,
                      body={"model": "test-model", "messages": [A, B], "max_tokens": 5})
    assert isinstance(out, ChatCompletion) and [c.index for c in out.choices] == [0, 1]
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/chat/completions/batch", cast_to=ChatCompletion, body={"messages": [A], "n": 3})
    assert e.value.status_code == 400 and e.value.body["param"] == "n"


def test_response_format_constrains_every_conversation(api):
    # vLLM's test_batched_chat_completions_with_json_schema
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"]}
    d = api.post(BATCH, json={"messages": [[{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
                                           [{"role": "user", "content": "Is fire cold? Answer in JSON."}]],
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "answer", "schema": schema, "strict": True}}})
    assert d.status_code == 200, d.text
    for c in d.json()["choices"]:
        assert json.loads(c["message"]["content"])["answer"] in ("yes", "no")


def test_step_engine_runs_each_conversation(app_client):
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "1024")
    before = scrape(c)
    d = c.post(BATCH, json={"messages": [A, B, A], "max_tokens": 4, "ignore_eos": True}).json()
    assert [ch["finish_reason"] for ch in d["choices"]] == ["length"] * 3 and d["usage"]["completion_tokens"] == 12
    after = scrape(c)
    assert value(after, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total") == 12
    assert value(after, "vllm:request_success_total", finished_reason="length") - \
        value(before, "vllm:request_success_total", finished_reason="length") == 3


def test_the_first_conversation_past_the_context_refuses_the_batch_before_the_rest_render(api, monkeypatch):
    """A batch is refused at its first conversation too long for the context, with the error
    prepare gives it, before the later ones are rendered (a request chat template can make each
    render seconds long: only the first is paid)."""
    from generation.adapters import chat_batch
    rendered = []
    real = chat_batch.chat_prompt

    def counting(sim, conv, **opts):
        rendered.append(conv)
        return real(sim, conv, **opts)
    monkeypatch.setattr(chat_batch, "chat_prompt", counting)
    long = [{"role": "user", "content": "word " * 2000}]
    r = api.post(BATCH, json={"messages": [A, long, long, long], "max_tokens": 2})
    e = err(r, 400)
    assert e["message"].startswith("This model's maximum context length is 1024 tokens. However, your prompt "
                                   "contains ") and len(rendered) == 2
