"""Client values nested deeper than orjson writes (255 levels; it parses 1,024) that an answer
echoes back: the stream's events and the render routes' answers were a 500 (``TypeError:
Recursion limit reached``, then the standard library's ``RecursionError``); they are written by
the standard library's encoder under a raised recursion limit (``dumps_any``)."""
from __future__ import annotations

import orjson
import pytest

USER = '"messages":[{"role":"user","content":"hi"}]'


def nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("path, body", [
    ("/v1/responses", '{"model":"test-model","input":"hi","stream":true,"reasoning":{"effort":"low","x":%s}}' % nest(300)),
    ("/v1/responses", '{"model":"test-model","input":"hi","reasoning":{"effort":"low","x":%s}}' % nest(1000)),
    ("/v1/chat/completions/render", '{"model":"test-model",%s,"tools":[{"type":"function","function":{"name":"f",'
     '"parameters":{"type":"object","x":%s}}}]}' % (USER, nest(1000))),
    ("/v1/chat/completions/render", '{"model":"test-model",%s,"kv_transfer_params":{"x":%s}}' % (USER, nest(1000))),
    ("/v1/chat/completions/render", '{"model":"test-model",%s,"chat_template_kwargs":{"x":%s}}' % (USER, nest(1000))),
    # the completions render sized one prompt's answer with orjson before writing it (--max-request-work)
    ("/v1/completions/render", '{"model":"test-model","prompt":"hi","kv_transfer_params":{"x":%s}}' % nest(1000)),
    ("/v1/completions/render", '{"model":"test-model","prompt":["a","b"],"ec_transfer_params":{"x":%s}}' % nest(300)),
], ids=["responses-stream-reasoning", "responses-reasoning", "render-tools", "render-kv-transfer", "render-template-kwargs",
        "completions-render-kv-transfer", "completions-render-ec-transfer"])
def test_deeply_nested_values_echoed_back_are_written(api, path, body):
    r = api.post(path, content=body.encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert '"code":"500"' not in r.text and "Recursion" not in r.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_response_holding_a_deep_value_is_stored(app_client, stream):
    """With ``VLLM_ENABLE_RESPONSES_API_STORE=1`` the store sizes each response it keeps: orjson
    refused the echoed ``reasoning`` 990 levels deep and the fallback, its ``repr``, raised
    RecursionError: a 500 with a traceback (a stream: an error event after its last delta).
    It is sized as it is written (``dumps_any``), stored and read back."""
    api = app_client(env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    body = ('{"model":"test-model","input":"hi","max_output_tokens":3,"stream":%s,'
            '"reasoning":{"effort":"low","x":%s}}' % ("true" if stream else "false", nest(990)))
    r = api.post("/v1/responses", content=body.encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert "event: error" not in r.text and "Recursion" not in r.text, r.text[-500:]
    rid = "resp_" + r.text.split('"id":"resp_', 1)[1].split('"', 1)[0]      # (json.loads: too deep for the test's stack)
    got = api.get(f"/v1/responses/{rid}")
    assert got.status_code == 200 and orjson.loads(got.content)["status"] in ("completed", "incomplete"), got.text[:300]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", '{"model":"test-model",%s,"structured_outputs":{"json_object":%s,"regex":"a"}}'),
    ("/v1/chat/completions", '{"model":"test-model",%s,"structured_outputs":{"x":1,"whitespace_pattern":%s}}'),
    ("/inference/v1/generate", '{"model":"test-model","token_ids":[1],%s"sampling_params":{"structured_outputs":'
                               '{"json":%s,"choice":["a"]}}}'),
], ids=["chat-json-object", "chat-none-given", "generate-json"])
def test_a_deep_value_quoted_in_an_error_is_quoted(api, path, body):
    """vLLM's structured-outputs refusal quotes the params' ``__dict__`` (``params_repr``): its
    ``repr`` of a value 990 levels deep raised RecursionError, a 500 with a traceback; it is the
    400 naming what was given, the value quoted whole."""
    user = USER if path != "/inference/v1/generate" else ""
    r = api.post(path, content=(body % (user, "[" * 990 + "]" * 990)).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    message = orjson.loads(r.content)["error"]["message"]
    assert message.startswith("You ") and "[" * 990 + "]" * 990 in message, message[:300]


DEEP = nest(990)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", '{"model":"test-model",%s,"logprobs":true,"top_logprobs":%s}' % (USER, DEEP)),
    ("/v1/chat/completions", '{"model":"test-model",%s,"prompt_logprobs":%s}' % (USER, DEEP)),
    ("/v1/completions", '{"model":"test-model","prompt":"hi","logprobs":%s}' % DEEP),
    ("/v1/chat/completions", '{"model":"test-model",%s,"tools":[{"type":"function","function":{"name":"f"}}],'
                             '"tool_choice":%s}' % (USER, DEEP)),
    ("/v1/messages", '{"model":"test-model","max_tokens":3,%s,"tools":[{"type":%s,"name":"f",'
                     '"input_schema":{"type":"object"}}]}' % (USER, DEEP)),
    ("/v1/responses", '{"model":"test-model","input":[{"role":"user","content":[{"type":%s,"text":"hi"}]}]}' % DEEP),
    ("/v1/completions", '{"model":"test-model","prompt":"hi","kv_transfer_params":{"remote_port":%s}}' % DEEP),
    ("/inference/v1/generate", '{"model":"test-model","token_ids":[1],"sampling_params":{"extra_args":'
                               '{"kv_transfer_params":{"do_remote_prefill":%s}}}}' % DEEP),
], ids=["top-logprobs", "prompt-logprobs", "completions-logprobs", "tool-choice", "messages-tool-type",
        "responses-part-type", "kv-transfer-key", "generate-kv-transfer-key"])
def test_a_deep_value_a_400_quotes_is_that_400(api, path, body):
    """A field's 400 that quotes the value (``value=...``, ``got ...``, ``tool type ...``) formats
    it recursively: at Python's default limit of 1,000 frames a value 990 levels deep (orjson
    parses 1,024) raised RecursionError there, a 500 with a traceback, where a shallow value of
    the same kind is the 400.  The server runs under a raised limit (app.allow_deep_client_values)."""
    headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    r = api.post(path, content=body.encode(), headers=headers)
    assert r.status_code == 400, r.text[:300]
    assert "Recursion" not in r.text and "Internal server error" not in r.text, r.text[:300]
