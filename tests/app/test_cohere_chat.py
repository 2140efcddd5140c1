"""Cohere's v2 chat API (``POST /cohere/v2/chat``, ``/cohere/v2/chat/render``) in-process, as
vLLM 0.34 serves it with ``VLLM_ENABLE_COHERE_API=1`` (``vllm/entrypoints/cohere/``): when the
routes exist, the exact bodies and event streams, the translation into a chat completion, the
errors in Cohere's ``{message, id}`` envelope, the engine's queue and metrics, step mode."""
from __future__ import annotations

import re
import time

import gevent
import pytest

from support import TIMING_PATHS, metric, scrape, sse_events

ON = {"VLLM_ENABLE_COHERE_API": "1"}
HI = [{"role": "user", "content": "Hello there friend"}]        # "### user: Hello there friend\n": 8 tokens
RID = {"X-Request-Id": "r1"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def echo(app_client):
    return app_client("--mode", "echo", env=ON)


def chat(c, body: dict, headers: dict | None = None, path: str = "/cohere/v2/chat"):
    return c.post(path, json={"model": "test-model", "messages": HI, **body}, headers={**RID, **(headers or {})})


def usage(inp: int, out: int) -> dict:
    counts = {"input_tokens": float(inp), "output_tokens": float(out)}
    return {"billed_units": counts, "tokens": counts}


# ---- registration -----------------------------------------------------------------------------------

def test_routes_exist_only_with_the_variable_on_a_generation_model(app_client, echo):
    for c in (app_client(), app_client("--runner", "pooling", env=ON)):
        for path in ("/cohere/v2/chat", "/cohere/v2/chat/render"):
            r = c.post(path, json={"model": "test-model", "messages": HI})
            assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
        assert not [p for p in c.get("/openapi.json").json()["paths"] if p.startswith("/cohere")]
    paths = echo.get("/openapi.json").json()["paths"]
    assert paths["/cohere/v2/chat"]["post"]["operationId"] == "chat_v2_cohere_v2_chat_post"
    assert "/cohere/v2/chat/render" in paths
    r = echo.get("/cohere/v2/chat")                             # the router's answer, not rewritten
    assert (r.status_code, r.json()) == (405, {"detail": "Method Not Allowed"})


# ---- answers ------------------------------------------------------------------------------------------

def test_answer_body(echo):
    r = chat(echo, {"messages": [{"role": "system", "content": "Be brief."}, *HI]})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.text == ('{"id":"chatcmpl-r1","finish_reason":"COMPLETE","message":{"role":"assistant","content":'
                      '[{"type":"text","text":"Hello there friend"}]},"usage":{"billed_units":{"input_tokens":16.0,'
                      '"output_tokens":3.0},"tokens":{"input_tokens":16.0,"output_tokens":3.0}}}')


def test_finish_reasons(echo, app_client):
    r = chat(echo, {"stop_sequences": ["friend"]})
    assert r.json()["finish_reason"] == "STOP_SEQUENCE"
    assert r.json()["message"]["content"] == [{"type": "text", "text": "Hello there "}]
    r = chat(app_client("--seed", "3", env=ON), {"max_tokens": 1})
    assert r.json()["finish_reason"] == "MAX_TOKENS" and r.json()["usage"] == usage(8, 1)


def test_stream_events(echo):
    r = chat(echo, {"stream": True})
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "event:" not in r.text                                   # bare data: lines, typed by "type"
    assert sse_events(r.text) == [
        {"id": "chatcmpl-r1", "delta": {"message": {"role": "assistant"}}, "type": "message-start"},
        {"index": 0, "delta": {"message": {"content": {"text": "", "type": "text"}}}, "type": "content-start"},
        *({"index": 0, "delta": {"message": {"content": {"text": t}}}, "type": "content-delta"}
          for t in ("Hello ", "there ", "friend")),
        {"index": 0, "type": "content-end"},
        {"id": "chatcmpl-r1", "delta": {"finish_reason": "COMPLETE", "usage": usage(8, 3)}, "type": "message-end"},
        "[DONE]"]
    assert r.text.startswith('data: {"id":"chatcmpl-r1","delta":{"message":{"role":"assistant"}},'
                             '"type":"message-start"}\n\n')


def test_a_stream_interval_groups_each_kinds_pieces_into_one_event(app_client):
    """``--stream-interval``: chat's chunk of several tokens becomes one event per kind (a
    thinking, text or arguments delta), the first token alone; the text is the same."""
    c = app_client("--mode", "echo", "--stream-interval", "2", env=ON)
    assert [e["delta"]["message"]["content"]["text"] for e in sse_events(chat(c, {"stream": True}).text)
            if e != "[DONE]" and e["type"] == "content-delta"] == ["Hello ", "there friend"]

    def joined(events) -> dict:
        out: dict = {}
        for e in events:
            if e != "[DONE]" and e["type"] in ("content-delta", "tool-call-start", "tool-call-delta"):
                m = e["delta"]["message"]
                key, piece = (("args", m["tool_calls"]["function"]["arguments"]) if "tool_calls" in m
                              else next(iter(m["content"].items())))
                out[key] = out.get(key, "") + piece
        return out

    for body in ({"max_tokens": 40}, {"tools": [WEATHER], "tool_choice": "REQUIRED", "max_tokens": 60}):
        streams = [sse_events(chat(app_client("--reasoning-parser", "qwen3", "--seed", "5", *extra, env=ON),
                                   {**body, "stream": True}).text) for extra in ((), ("--stream-interval", "4"))]
        assert joined(streams[0]) == joined(streams[1]) and len(joined(streams[1])) == 2
        assert len(streams[1]) < len(streams[0]) and streams[1][-2]["type"] == "message-end"
        assert [e["type"] for e in streams[1][:-1]].count("content-start") == \
            [e["type"] for e in streams[0][:-1]].count("content-start")


def test_logprobs_carry_token_ids(echo):
    body = chat(echo, {"logprobs": True}).json()
    ids = echo.post("/tokenize", json={"model": "test-model", "prompt": "Hello there friend",
                                       "add_special_tokens": False}).json()["tokens"]
    assert [(i["text"], i["token_ids"]) for i in body["logprobs"]] == list(zip(["Hello ", "there ", "friend"],
                                                                                ([t] for t in ids)))
    assert all(len(i["logprobs"]) == 1 and i["logprobs"][0] <= 0 for i in body["logprobs"])
    assert "logprobs" not in chat(echo, {}).json()


def test_logprobs_cover_every_output_token(app_client):
    """vLLM's ``_build_logprobs`` zips chat's logprobs with its token_ids, both over every output
    token: the reasoning and its markers, and a tool call's tokens, not the content's alone."""
    c = app_client("--reasoning-parser", "qwen3", "--seed", "5", env=ON)
    for body in ({"max_tokens": 30}, {"max_tokens": 60, "tools": [WEATHER], "tool_choice": "REQUIRED"}):
        r = chat(c, {**body, "logprobs": True}).json()
        items = r["logprobs"]
        assert len(items) == r["usage"]["tokens"]["output_tokens"] and items[0]["text"] == "<think>"
        assert all(list(i) == ["text", "token_ids", "logprobs"] and len(i["token_ids"]) == len(i["logprobs"]) == 1
                   for i in items)
        thinking = r["message"]["content"][0]["thinking"]
        assert "".join(i["text"] for i in items).startswith("<think>" + thinking)


def test_reasoning_is_a_thinking_block_or_the_tool_plan(app_client):
    c = app_client("--reasoning-parser", "qwen3", env=ON)
    content = chat(c, {"max_tokens": 40}).json()["message"]["content"]
    assert [b["type"] for b in content] == ["thinking", "text"] and all(b[b["type"]] for b in content)
    events = sse_events(chat(c, {"max_tokens": 40, "stream": True}).text)
    kinds = [(e["type"], e.get("index")) for e in events[:-1]]
    assert kinds[:2] == [("message-start", None), ("content-start", 0)]
    assert events[1]["delta"]["message"]["content"] == {"thinking": "", "type": "thinking"}
    k = kinds.index(("content-end", 0))
    assert set(kinds[2:k]) == {("content-delta", 0)} and kinds[k + 1] == ("content-start", 1)
    assert kinds[-2:] == [("content-end", 1), ("message-end", None)]
    # a reasoning model's thinking stays a block beside tool calls
    tools = {"tools": [WEATHER], "tool_choice": "REQUIRED", "max_tokens": 60}
    msg = chat(c, tools).json()["message"]
    assert [b["type"] for b in msg["content"]] == ["thinking"] and "tool_plan" not in msg
    # --no-cohere-is-reasoning-model: older Command models' tool_plan, tool-plan-delta events
    old = app_client("--reasoning-parser", "qwen3", "--no-cohere-is-reasoning-model", env=ON)
    msg = chat(old, tools).json()["message"]
    assert list(msg) == ["role", "tool_calls", "tool_plan"] and msg["tool_plan"]
    events = sse_events(chat(old, {**tools, "stream": True}).text)
    plan = [e for e in events[1:-1] if e["type"] == "tool-plan-delta"]
    assert plan and events[1:1 + len(plan)] == plan and all(list(e) == ["delta", "type"] for e in plan)
    assert events[1 + len(plan)]["type"] == "tool-call-start"


def test_tool_calls(app_client):
    c = app_client("--seed", "5", env=ON)
    body = chat(c, {"tools": [WEATHER], "tool_choice": "REQUIRED"}).json()
    assert body["finish_reason"] == "TOOL_CALL" and list(body["message"]) == ["role", "tool_calls"]
    (tc,) = body["message"]["tool_calls"]
    assert list(tc) == ["id", "type", "function"] and tc["type"] == "function"
    assert tc["id"].startswith("chatcmpl-tool-") and tc["function"]["name"] == "get_weather"
    assert list(eval(tc["function"]["arguments"].replace("null", "None"))) == ["city"]
    events = sse_events(chat(c, {"tools": [WEATHER], "tool_choice": "REQUIRED", "stream": True}).text)
    start, *deltas, end, message_end, done = events[1:]
    call = start["delta"]["message"]["tool_calls"]
    assert (start["type"], start["index"], call["type"], call["function"]["name"]) == (
        "tool-call-start", 0, "function", "get_weather")
    assert {e["type"] for e in deltas} == {"tool-call-delta"} and end == {"index": 0, "type": "tool-call-end"}
    args = call["function"]["arguments"] + "".join(e["delta"]["message"]["tool_calls"]["function"]["arguments"]
                                                   for e in deltas)
    assert args.startswith('{"city":') and message_end["delta"]["finish_reason"] == "TOOL_CALL"
    # NONE: no call; tools without tool_choice: Cohere's free choice (chat's "auto")
    assert "tool_calls" not in chat(c, {"tools": [WEATHER], "tool_choice": "NONE"}).json()["message"]


# ---- translation: the prompt of the equivalent chat completion ----------------------------------------

def test_translation_renders_the_equivalent_chat_prompt(echo):
    cohere = [
        {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": "http://x/a.png", "detail": "low"}}]},
        {"role": "assistant", "tool_plan": "I will look.", "content": [{"type": "thinking", "thinking": "Hm. "}],
         "tool_calls": [{"id": "c1", "function": {"name": "get_weather"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": [{"type": "text", "text": "sunny"}, {"type": "document", "document": {"data": {"t": 20}, "id": "d"}}]},
        {"role": "user", "content": [{"type": "text", "text": "And?"}]}]
    chat_messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": "http://x/a.png", "detail": "low"}}]},
        {"role": "assistant", "reasoning": "Hm. I will look.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": '{"data": {"t": 20}, "id": "d"}'}]},
        {"role": "user", "content": "And?"}]
    got = chat(echo, {"messages": cohere}, path="/cohere/v2/chat/render").json()
    want = echo.post("/v1/chat/completions/render", json={"model": "test-model", "messages": chat_messages},
                     headers=RID).json()
    assert got["token_ids"] == want["token_ids"] and got["features"] == want["features"]
    r = chat(echo, {"messages": cohere})
    assert r.json()["usage"]["tokens"]["input_tokens"] == len(want["token_ids"])


def test_render_maps_the_sampling_fields(echo):
    got = chat(echo, {"max_tokens": 7, "p": 0.5, "k": 3, "temperature": 0.2, "seed": 9, "stop_sequences": ["x"],
                      "frequency_penalty": 0.1, "presence_penalty": 0.3, "stream": True},
               path="/cohere/v2/chat/render").json()
    sp = got["sampling_params"]
    assert got["request_id"] == "chatcmpl-r1" and got["model"] == "test-model"
    assert {k: sp[k] for k in ("max_tokens", "top_p", "top_k", "temperature", "seed", "stop", "frequency_penalty",
                               "presence_penalty")} == {
        "max_tokens": 7, "top_p": 0.5, "top_k": 3, "temperature": 0.2, "seed": 9, "stop": ["x"],
        "frequency_penalty": 0.1, "presence_penalty": 0.3}
    assert (got["stream"], got["stream_options"]) == (True, {"include_usage": True})
    assert chat(echo, {"messages": []}, path="/cohere/v2/chat/render").json() == {
        "message": "messages must contain at least one message (parameter=messages)", "id": "r1"}


# ---- errors: vLLM's messages in Cohere's envelope -------------------------------------------------------

@pytest.mark.parametrize("body, status, message", [
    ({"messages": []}, 400, "messages must contain at least one message (parameter=messages)"),
    ({"model": ""}, 400, "model is required (parameter=model)"),
    ({"max_tokens": -1}, 400, "max_tokens must be non-negative (parameter=max_tokens, value=-1)"),
    ({"tool_choice": "REQUIRED"}, 400,
     'tool_choice="REQUIRED" requires at least one tool in tools. (parameter=tool_choice, value=REQUIRED)'),
    # a validator's VLLMValidationError escapes pydantic at once: the earlier type error is not reported
    ({"messages": 5, "max_tokens": -1}, 400, "max_tokens must be non-negative (parameter=max_tokens, value=-1)"),
    ({"model": "nope"}, 404, "The model `nope` does not exist."),
    ({"stream": "maybe", "tool_choice": "auto"}, 400,
     "2 validation errors:\n"
     "  {'type': 'bool_parsing', 'loc': 'body.stream', 'msg': 'Input should be a valid boolean, unable to "
     "interpret input', 'input': 'maybe'}\n"
     "  {'type': 'literal_error', 'loc': 'body.tool_choice', 'msg': \"Input should be 'REQUIRED' or 'NONE'\", "
     "'input': 'auto', 'ctx': {'expected': \"'REQUIRED' or 'NONE'\"}}"),
    ({"stop_sequences": ["a", "b", "c", "d", "e"]}, 400,
     "1 validation error:\n  {'type': 'too_long', 'loc': 'body.stop_sequences', 'msg': 'List should have at most "
     "4 items after validation, not 5', 'input': '<list of 5 items>', 'ctx': {'field_type': 'List', "
     "'max_length': 4, 'actual_length': 5}}"),
    ({"messages": [{"role": "bogus", "content": "x"}]}, 400,
     "5 validation errors:\n"
     "  {'type': 'literal_error', 'loc': 'body.messages.0.UserChatMessageV2.role', 'msg': \"Input should be "
     "'user'\", 'input': 'bogus', 'ctx': {'expected': \"'user'\"}}\n"
     "  {'type': 'literal_error', 'loc': 'body.messages.0.AssistantChatMessageV2.role', 'msg': \"Input should be "
     "'assistant'\", 'input': 'bogus', 'ctx': {'expected': \"'assistant'\"}}\n"
     "  {'type': 'literal_error', 'loc': 'body.messages.0.SystemChatMessageV2.role', 'msg': \"Input should be "
     "'system'\", 'input': 'bogus', 'ctx': {'expected': \"'system'\"}}\n"
     "  {'type': 'literal_error', 'loc': 'body.messages.0.ToolChatMessageV2.role', 'msg': \"Input should be "
     "'tool'\", 'input': 'bogus', 'ctx': {'expected': \"'tool'\"}}\n"
     "  {'type': 'missing', 'loc': 'body.messages.0.ToolChatMessageV2.tool_call_id', 'msg': 'Field required', "
     "'input': '<dict of 2 items>'}"),
])
def test_errors_in_coheres_envelope(echo, body, status, message):
    r = chat(echo, body)
    assert (r.status_code, r.headers["content-type"], r.json()) == (status, "application/json",
                                                                    {"message": message, "id": "r1"})


def test_error_id_is_the_request_id_header_when_there_is_one(echo):
    r = echo.post("/cohere/v2/chat", json={"model": "test-model"})
    assert r.status_code == 400 and r.json() == {"message": (
        "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', "
        "'input': '<dict of 1 items>'}")}
    r = echo.post("/cohere/v2/chat", content=b"hi", headers={"Content-Type": "text/plain", **RID})
    assert (r.status_code, r.json()) == (400, {"message": "1 validation error:\n  Unsupported Media Type: Only "
                                                          "'application/json' is allowed", "id": "r1"})
    r = echo.post("/cohere/v2/chat", content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and list(r.json()) == ["message"]


@pytest.mark.parametrize("body, message", [
    ({"p": 1.5}, "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)"),
    ({"temperature": 3}, "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"),
    ({"k": -5}, "top_k must be 0 (disable), or at least 1, got -5."),
    ({"frequency_penalty": 3}, "frequency_penalty must be in [-2, 2], got 3.0."),
    # SamplingParams' words for the limit it gets (max_tokens and max_completion_tokens both 0)
    ({"max_tokens": 0}, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
    # its order: the ranges before max_tokens
    ({"max_tokens": 0, "p": 1.5}, "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)"),
])
def test_sampling_errors_name_the_request(echo, body, message):
    """vLLM checks the sampling parameters (``to_sampling_params``) after its chat handler named
    the request (``raw_request.state.request_metadata``), so the envelope's id is the request's
    ``chatcmpl-`` id, from the header or made up, not the header itself."""
    for stream in (False, True):
        r = chat(echo, {**body, "stream": stream})
        assert (r.status_code, r.json()) == (400, {"message": message, "id": "chatcmpl-r1"})
    r = echo.post("/cohere/v2/chat", json={"model": "test-model", "messages": HI, **body})
    assert r.json()["message"] == message and re.fullmatch(r"chatcmpl-[0-9a-f]{32}", r.json()["id"])
    # an earlier error (the model's, in vLLM's render) keeps the header's id
    r = chat(echo, {**body, "model": "nope"})
    assert (r.status_code, r.json()) == (404, {"message": "The model `nope` does not exist.", "id": "r1"})


def test_an_error_after_admission_names_the_request(app_client):
    """The engine paused (a checkpoint prepared): vLLM's full generator fails after the request
    was named, so the 503's id is ``chatcmpl-<id>``; a stream ends with its in-band error."""
    c = app_client("--enable-sleep-mode", env={**ON, "VLLM_SERVER_DEV_MODE": "1"})
    assert c.post("/checkpoint/prepare", params={"mode": "wait"}).json() == {"state": "prepared"}
    try:
        r = chat(c, {})
        assert (r.status_code, r.json()) == (503, {"message": "Generation is paused. Please retry after it resumes.",
                                                   "id": "chatcmpl-r1"})
        r = chat(c, {"stream": True})
        assert (r.status_code, r.text) == (200, 'data: {"type": "message-end", "delta": {"error": "Generation is '
                                                'paused. Please retry after it resumes.", "finish_reason": "ERROR"}}'
                                                '\n\ndata: [DONE]\n\n')
    finally:
        c.post("/checkpoint/restore")


def test_a_hostile_body_costs_a_bounded_validation(echo):
    t = time.monotonic()
    r = chat(echo, {"messages": [5] * 500_000})
    assert time.monotonic() - t < 5
    first, *_, last = r.json()["message"].split("\n")
    # 4 errors a message (one per union member, pydantic's 2,000,000); the count stops past 1,000
    assert (r.status_code, first, last) == (400, "1001 validation errors:", "  ...and 991 more errors")


def test_a_stream_that_fails_ends_with_an_error_message_end(app_client, monkeypatch):
    import generation.adapters.cohere as ac
    real = ac.stream_v2
    echo = app_client("--mode", "echo", "--inter-token-latency", "1ms", env=ON)   # (tokens due at once: one write)

    def failing(adapter, seq):
        it = real(adapter, seq)
        yield next(it)                         # message-start, content-start, the first delta
        raise RuntimeError("boom")
    monkeypatch.setattr(ac, "stream_v2", failing)
    r = chat(echo, {"stream": True})
    assert r.status_code == 200 and r.text.endswith(
        'data: {"index":0,"type":"content-end"}\n\n'
        'data: {"type": "message-end", "delta": {"error": "Internal server error: RuntimeError: boom", '
        '"finish_reason": "ERROR"}}\n\ndata: [DONE]\n\n')
    assert echo.sim.running == 0 and not echo.sim.waiting


# ---- the engine: queue, metrics, step mode ---------------------------------------------------------------

def test_queue_full_is_a_429_in_coheres_envelope(app_client):
    c = app_client("--max-num-seqs", "1", "--max-waiting-queue-length", "0", "--time-to-first-token", "1s", env=ON)
    first = gevent.spawn(chat, c, {"max_tokens": 1})
    deadline = time.monotonic() + 2
    while c.sim.running != 1 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    for stream in (False, True):
        r = chat(c, {"stream": stream})
        assert (r.status_code, r.json()) == (429, {"message": "Failed to enqueue request, waiting requests queue "
                                                              "is full", "id": "r1"})
    assert first.get().status_code == 200


def test_requests_are_counted_as_chat_completions(echo):
    before = scrape(echo)
    chat(echo, {})
    chat(echo, {"stream": True})
    after = scrape(echo)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)
    assert delta("vllm:request_success_total", finished_reason="stop") == 2
    assert delta("vllm:prompt_tokens_total") == 16 and delta("vllm:generation_tokens_total") == 6


def test_step_mode(app_client):
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "2048", env=ON,
                   model=llama)
    events = sse_events(chat(c, {"model": llama, "stream": True, "max_tokens": 8}).text)
    end = events[-2]["delta"]
    assert end["finish_reason"] in ("COMPLETE", "MAX_TOKENS")
    n_in, n_out = int(end["usage"]["tokens"]["input_tokens"]), int(end["usage"]["tokens"]["output_tokens"])
    m = scrape(c)
    assert metric(m, "vllm:iteration_tokens_total_sum") == n_in + n_out    # one prefill step, then decodes
    assert metric(m, "vllm:iteration_tokens_total_count") == n_out
    assert metric(m, "vllm:time_to_first_token_seconds_count") == 1


# ---- the same events whatever the timing path (issue 32: schedules emitted by the server's hub) -----

SAME_BODIES = {
    "text": ({"max_tokens": 12}, ()),
    "logprobs": ({"max_tokens": 12, "logprobs": True}, ()),
    "thinking": ({"max_tokens": 40}, ("--reasoning-parser", "qwen3")),
    "tool call": ({"tools": [WEATHER], "tool_choice": "REQUIRED", "max_tokens": 60}, ()),
    "tool plan": ({"tools": [WEATHER], "tool_choice": "REQUIRED", "max_tokens": 60},
                  ("--reasoning-parser", "qwen3", "--no-cohere-is-reasoning-model")),
    "stream interval": ({"max_tokens": 40}, ("--reasoning-parser", "qwen3", "--stream-interval", "3")),
}


@pytest.mark.parametrize("name", SAME_BODIES)
def test_stream_events_do_not_depend_on_the_timing_path(app_client, name):
    """A stream with a constant inter-token latency hands its tokens to the hub as a schedule
    (the block-opening and -closing events rendered per token, in order): the events are those
    of the stream that waits for nothing, and of one waiting per token."""
    body, flags = SAME_BODIES[name]
    runs = {}
    for timing, timing_flags in TIMING_PATHS.items():
        r = chat(app_client(*flags, *timing_flags, env=ON), {**body, "seed": 7, "stream": True})
        assert r.status_code == 200, r.text
        events = sse_events(r.text)
        for e in events[:-1]:
            e.get("delta", {}).get("message", {}).get("tool_calls", {}).pop("id", None)
        runs[timing] = events
    assert runs["schedule from the first token"] == runs["all at once"] == runs["deadline per token"]
    kinds = [e["type"] for e in runs["all at once"][:-1]]
    assert kinds[0] == "message-start" and kinds[-1] == "message-end" and len(kinds) >= 5
