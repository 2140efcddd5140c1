"""Streamed event bodies field for field, in vLLM 0.34's order (key lists of each chunk kind).

vLLM dumps a chat or completions chunk ``model_dump_json(exclude_unset=True)``: every field its
serving code passes to the model is sent, ``null`` included, in the model's field order; its
usage chunk drops nulls (``exclude_none``).  Sources (vLLM 0.34.0): ``openai/chat_completion/
serving.py`` (``chat_completion_stream_generator`` l. 497-508, the role chunk l. 605-660, token
chunks l. 800-860, the usage chunk l. 914), ``chat_completion/protocol.py`` l. 170-205
(``ChatCompletionResponseStreamChoice``, ``ChatCompletionStreamResponse``),
``chat_completion/stream_processor.py`` l. 50 and 75-92, ``completion/serving.py`` l. 343-626,
``completion/protocol.py`` l. 725-760, ``generate/base/protocol.py`` l. 337 (``DeltaToolCall``),
``anthropic/protocol.py`` l. 56, 420, 441 and ``anthropic/serving.py`` l. 1040-1300,
``scale_out/token_in_token_out/serving.py`` l. 680-888 and ``protocol.py`` l. 547-613.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from support import TIMING_PATHS, named_events, sse_events

CHAT, COMPL, MSGS, GEN = "/v1/chat/completions", "/v1/completions", "/v1/messages", "/inference/v1/generate"
MSG = [{"role": "user", "content": "Hello there"}]
HEAD = ["id", "object", "created", "model", "choices"]
CHAT_ROLE = [*HEAD, "prompt_token_ids", "prompt_text"]
CHAT_TOKEN_CHOICE = ["index", "delta", "logprobs", "finish_reason", "token_ids"]
CHAT_FINISH_CHOICE = ["index", "delta", "logprobs", "finish_reason", "stop_reason", "token_ids", "weight_versions"]
COMPL_CHOICE = ["index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids",
                "weight_versions"]
RUNNING = ["prompt_tokens", "total_tokens", "completion_tokens"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chunks(c, path: str, **body) -> list:
    r = c.post(path, json={"model": "test-model", "stream": True, **body})
    assert r.status_code == 200, r.text
    assert r.text.endswith("data: [DONE]\n\n")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    return events[:-1]


def keys(d: dict) -> list:
    return list(d)


# ---- chat ------------------------------------------------------------------------------------------

def test_chat_chunks_carry_the_fields_vllm_sets(api):
    *role_and_tokens, last = chunks(api, CHAT, messages=MSG, max_tokens=3, ignore_eos=True)
    role, *tokens = role_and_tokens
    assert keys(role) == CHAT_ROLE and role["prompt_token_ids"] is None and role["prompt_text"] is None
    assert role["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}]
    assert len(tokens) == 2
    for ch in tokens:
        assert keys(ch) == [*HEAD, "kv_transfer_params"] and ch["kv_transfer_params"] is None
        (choice,) = ch["choices"]
        assert keys(choice) == CHAT_TOKEN_CHOICE and keys(choice["delta"]) == ["content"]
        assert (choice["logprobs"], choice["finish_reason"], choice["token_ids"]) == (None, None, None)
    # the fingerprint on the finishing chunk (no usage chunk follows), before kv_transfer_params
    assert keys(last) == [*HEAD, "system_fingerprint", "kv_transfer_params"]
    (choice,) = last["choices"]
    assert keys(choice) == CHAT_FINISH_CHOICE
    assert (choice["finish_reason"], choice["stop_reason"], choice["token_ids"], choice["weight_versions"]) == (
        "length", None, None, None)


def test_chat_continuous_usage_token_ids_and_n(app_client):
    """Each role chunk (one per choice) carries the prompt's ids with ``return_token_ids``; the
    running usage sets ``completion_tokens_details`` (null without a reasoning parser); the usage
    chunk drops nulls."""
    c = app_client("--enable-prompt-tokens-details")
    evs = chunks(c, CHAT, messages=MSG, max_tokens=2, ignore_eos=True, n=2, return_token_ids=True,
                 stream_options={"include_usage": True, "continuous_usage_stats": True})
    roles, tokens, usage = evs[:2], evs[2:-1], evs[-1]
    p = roles[0]["usage"]["prompt_tokens"]
    for i, role in enumerate(roles):
        assert keys(role) == [*HEAD, "usage", "prompt_token_ids", "prompt_text"]
        assert role["choices"][0]["index"] == i and role["prompt_token_ids"] and len(role["prompt_token_ids"]) == p
        assert keys(role["usage"]) == [*RUNNING, "prompt_tokens_details", "completion_tokens_details"]
        assert role["usage"]["completion_tokens_details"] is None
    assert len(tokens) == 4
    for ch in tokens:
        assert keys(ch) == [*HEAD, "usage", "kv_transfer_params"]
        assert keys(ch["usage"]) == [*RUNNING, "completion_tokens_details"]
        (choice,) = ch["choices"]
        assert len(choice["token_ids"]) == 1
        assert keys(choice) == (CHAT_FINISH_CHOICE if choice["finish_reason"] else CHAT_TOKEN_CHOICE)
    assert keys(usage) == [*HEAD, "usage", "system_fingerprint"] and usage["choices"] == []
    assert keys(usage["usage"]) == [*RUNNING, "prompt_tokens_details"]


@pytest.mark.parametrize("timing", list(TIMING_PATHS))
def test_chat_stream_bytes_do_not_depend_on_the_timing_path(app_client, timing):
    """The role chunk's prompt ids and each chunk's fields, whether the stream waits for nothing,
    runs a token schedule from its first token (the hub renders token 0 with the role chunk) or
    waits per token."""
    c = app_client("--seed", "3", *TIMING_PATHS[timing])
    body = {"messages": MSG, "max_tokens": 4, "ignore_eos": True, "return_token_ids": True, "seed": 5}
    evs = chunks(c, CHAT, **body)
    assert keys(evs[0]) == CHAT_ROLE and evs[0]["prompt_token_ids"]
    assert [keys(ch["choices"][0]) for ch in evs[1:]] == [CHAT_TOKEN_CHOICE] * 3 + [CHAT_FINISH_CHOICE]
    assert all(len(ch["choices"][0]["token_ids"]) == 1 for ch in evs[1:])
    plain = chunks(app_client("--seed", "3"), CHAT, **body)
    assert [{k: v for k, v in ch.items() if k not in ("id", "created")} for ch in evs] == [
        {k: v for k, v in ch.items() if k not in ("id", "created")} for ch in plain]


def test_chat_reasoning_parser_counts_reasoning_tokens_as_it_runs(app_client):
    c = app_client("--reasoning-parser", "qwen3")
    evs = chunks(c, CHAT, messages=MSG, max_tokens=8, ignore_eos=True,
                 stream_options={"include_usage": True, "continuous_usage_stats": True})
    running = [ch["usage"]["completion_tokens_details"]["reasoning_tokens"] for ch in evs]
    assert running[0] == 0 and running == sorted(running) and running[-1] == running[-2] > 0
    assert keys(evs[-1]["usage"]) == [*RUNNING, "completion_tokens_details"]


def test_chat_hidden_reasoning_hides_logprobs_and_token_ids(app_client):
    """``include_reasoning: false`` with a parser: vLLM drops every chunk's logprobs and token
    ids (``ChatStreamProcessor.hide_metadata``)."""
    c = app_client("--reasoning-parser", "qwen3")
    evs = chunks(c, CHAT, messages=MSG, max_tokens=8, ignore_eos=True, include_reasoning=False, logprobs=True,
                 return_token_ids=True)
    for ch in evs[1:]:
        (choice,) = ch["choices"]
        assert choice["logprobs"] is None and choice["token_ids"] is None and "reasoning" not in choice["delta"]


def test_chat_echo_chunk_sets_no_token_fields(api):
    evs = chunks(api, CHAT, messages=[{"role": "assistant", "content": "so far"}], add_generation_prompt=False,
                 echo=True, max_tokens=2)
    assert keys(evs[0]) == CHAT_ROLE
    assert keys(evs[1]) == HEAD and evs[1]["choices"] == [
        {"index": 0, "delta": {"content": "so far"}, "logprobs": None, "finish_reason": None}]
    assert keys(evs[2]) in ([*HEAD, "kv_transfer_params"], [*HEAD, "system_fingerprint", "kv_transfer_params"])


def test_chat_tool_call_deltas_in_delta_tool_call_order(api):
    """``"required"``: vLLM's ``extract_required_tool_call_streaming`` (tool_parsers/streaming.py
    l. 281-290) builds later entries with ``DeltaFunctionCall(name=None, arguments=...)``, so the
    ``exclude_unset`` dump keeps ``"name": null``; per-path shapes: test_stream_tool_call_paths."""
    evs = chunks(api, CHAT, messages=MSG, tools=[WEATHER], tool_choice="required", max_tokens=50)
    calls = [tc for ch in evs[1:] for tc in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert keys(calls[0]) == ["id", "type", "index", "function"]
    assert keys(calls[0]["function"]) == ["name", "arguments"] and calls[0]["function"]["name"] == "get_weather"
    assert all(keys(tc) == ["index", "function"] and tc["function"]["name"] is None and
               keys(tc["function"]) == ["name", "arguments"] for tc in calls[1:])
    assert keys(evs[-1]["choices"][0]) == CHAT_FINISH_CHOICE


# ---- completions -----------------------------------------------------------------------------------

def test_completion_chunks_carry_every_choice_field(api):
    *tokens, last = chunks(api, COMPL, prompt="Hello there", max_tokens=3, ignore_eos=True, n=1)
    for ch in tokens:
        assert keys(ch) == [*HEAD, "kv_transfer_params"] and ch["kv_transfer_params"] is None
        (choice,) = ch["choices"]
        assert keys(choice) == COMPL_CHOICE
        assert [choice[k] for k in COMPL_CHOICE[2:]] == [None] * 6
    assert keys(last) == [*HEAD, "system_fingerprint", "kv_transfer_params"]
    assert keys(last["choices"][0]) == COMPL_CHOICE and last["choices"][0]["finish_reason"] == "length"


def test_completion_continuous_usage_and_the_usage_chunk(api):
    evs = chunks(api, COMPL, prompt="Hello there", max_tokens=3, ignore_eos=True, return_token_ids=True,
                 stream_options={"include_usage": True, "continuous_usage_stats": True})
    *tokens, usage = evs
    for k, ch in enumerate(tokens):
        assert keys(ch) == [*HEAD, "usage", "kv_transfer_params"] and keys(ch["usage"]) == RUNNING
        (choice,) = ch["choices"]
        assert keys(choice) == COMPL_CHOICE and len(choice["token_ids"]) == 1
        assert (choice["prompt_token_ids"] is not None) == (k == 0)        # a choice's first chunk
    assert keys(usage) == [*HEAD, "usage", "system_fingerprint"] and keys(usage["usage"]) == RUNNING


def test_completion_echo_with_token_ids_echoes_no_prompt_text(api):
    """vLLM 0.34 sets ``prompt_text = ""`` when ``echo`` meets ``return_token_ids``
    (completion/serving.py l. 420 streamed, l. 660 not): the prompt's ids and logprobs, no
    text."""
    body = {"prompt": "Hello there", "max_tokens": 2, "ignore_eos": True, "echo": True, "logprobs": 0,
            "return_token_ids": True}
    first = chunks(api, COMPL, **body)[0]["choices"][0]
    assert not first["text"].startswith("Hello") and first["logprobs"]["tokens"][:2] == ["Hello ", "there"]
    assert first["logprobs"]["text_offset"][:3] == [0, 6, 11]
    whole = api.post(COMPL, json={"model": "test-model", **body}).json()["choices"][0]
    assert not whole["text"].startswith("Hello") and whole["logprobs"]["tokens"][:2] == ["Hello ", "there"]
    plain = chunks(api, COMPL, **{**body, "return_token_ids": False})[0]["choices"][0]
    assert plain["text"].startswith("Hello there")


# ---- Anthropic messages ----------------------------------------------------------------------------

def test_messages_events_in_anthropic_stream_event_order(app_client):
    c = app_client("--enable-prompt-tokens-details")
    r = c.post(MSGS, json={"model": "test-model", "max_tokens": 3, "ignore_eos": True, "messages": MSG,
                           "stream": True})
    events = named_events(r.text)
    assert [n for n, _ in events] == ["message_start", "content_block_start", *["content_block_delta"] * 3,
                                      "content_block_stop", "message_delta", "message_stop"]      # no ping
    start = events[0][1]
    assert keys(start) == ["type", "message"]
    assert keys(start["message"]) == ["id", "type", "role", "content", "model", "stop_reason", "stop_sequence",
                                      "usage"]
    usage_keys = ["input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
    assert keys(start["message"]["usage"]) == usage_keys
    assert events[1][1] == {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}
    assert keys(events[1][1]) == ["type", "content_block", "index"]
    for _, d in events[2:5]:
        assert keys(d) == ["type", "delta", "index"] and keys(d["delta"]) == ["type", "text"]
    assert keys(events[5][1]) == ["type", "index"]
    assert keys(events[6][1]) == ["type", "delta", "usage"] and keys(events[6][1]["usage"]) == usage_keys
    assert events[7][1] == {"type": "message_stop"}
    whole = c.post(MSGS, json={"model": "test-model", "max_tokens": 3, "messages": MSG}).json()
    assert keys(whole["usage"]) == usage_keys


def test_messages_tool_use_blocks_in_order(api):
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    r = api.post(MSGS, json={"model": "test-model", "max_tokens": 50, "messages": MSG, "tools": [tool],
                             "tool_choice": {"type": "any"}, "stream": True})
    events = named_events(r.text)
    starts = [d for n, d in events if n == "content_block_start"]
    assert keys(starts[0]) == ["type", "content_block", "index"]
    assert keys(starts[0]["content_block"]) == ["type", "id", "name", "input"]
    deltas = [d for n, d in events if n == "content_block_delta"]
    assert deltas and all(keys(d) == ["type", "delta", "index"] and keys(d["delta"]) == ["type", "partial_json"]
                          for d in deltas)


# ---- /inference/v1/generate's text levels ----------------------------------------------------------

GEN_CHOICE = ["index", "finish_reason", "stop_reason", "token_ids", "routed_experts", "sampling_mask",
              "weight_versions"]


@pytest.mark.parametrize("mode,field", [("text", "text"), ("derender", "delta")])
def test_generate_text_levels_dump_the_whole_stream_response(api, mode, field):
    body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 3, "ignore_eos": True}, "output_mode": mode,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    *tokens, usage = chunks(api, GEN, **body)
    assert len(tokens) == 3
    for k, ch in enumerate(tokens):
        assert keys(ch) == ["request_id", "usage", "output_mode", "choices"] and ch["output_mode"] == mode
        assert ch["usage"] == {"prompt_tokens": 3, "total_tokens": 4 + k, "completion_tokens": 1 + k,
                               "completion_tokens_details": None}
        (choice,) = ch["choices"]
        assert keys(choice) == [*GEN_CHOICE, field, "logprobs"]
    if mode == "derender":
        assert keys(tokens[0]["choices"][0]["delta"]) == ["role", "content"]
        assert keys(tokens[1]["choices"][0]["delta"]) == ["content"]
    assert keys(usage) == ["request_id", "usage", "output_mode", "choices"] and usage["choices"] == []
    assert keys(usage["usage"]) == RUNNING
    # no running usage unless asked: usage null
    (ch, *_) = chunks(api, GEN, **{**body, "stream_options": None})
    assert ch["usage"] is None


def test_generate_ignores_force_include_usage(app_client):
    """vLLM 0.34's generate stream reads ``stream_options`` alone (``should_include_usage(...,
    False)``, token_in_token_out/serving.py l. 702)."""
    c = app_client("--enable-force-include-usage")
    evs = chunks(c, GEN, token_ids=[1, 2, 3], sampling_params={"max_tokens": 2, "ignore_eos": True})
    assert all(ch["choices"] for ch in evs)
    assert chunks(c, CHAT, messages=MSG, max_tokens=2)[-1]["choices"] == []      # chat: forced


# ---- Responses API ---------------------------------------------------------------------------------

def test_responses_events_in_the_sdk_models_field_order(api):
    """vLLM dumps the openai SDK's event models (responses/api_router.py l. 34-44), whose fields are
    alphabetical; the text part is ResponseOutputText (annotations, text, type, logprobs), opened
    with logprobs [] and closed with null without include (streaming_events.py l. 839-960)."""
    r = api.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 3,
                                        "stream": True})
    events = named_events(r.text)
    for name, d in events:
        assert keys(d) == sorted(d) and d["type"] == name
    by = {n: d for n, d in events}
    assert keys(by["response.output_text.delta"]) == ["content_index", "delta", "item_id", "logprobs", "output_index",
                                                      "sequence_number", "type"]
    assert by["response.content_part.added"]["part"] == {"annotations": [], "text": "", "type": "output_text",
                                                         "logprobs": []}
    assert keys(by["response.content_part.done"]["part"]) == ["annotations", "text", "type", "logprobs"]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))


def test_responses_function_call_argument_deltas_in_order(api):
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    r = api.post("/v1/responses", json={"model": "test-model", "input": "hi", "tools": [tool], "stream": True})
    events = named_events(r.text)
    deltas = [d for n, d in events if n == "response.function_call_arguments.delta"]
    assert deltas and all(keys(d) == ["delta", "item_id", "output_index", "sequence_number", "type"] for d in deltas)
    (done,) = [d for n, d in events if n == "response.function_call_arguments.done"]
    assert keys(done) == sorted(done)


# ---- speech to text --------------------------------------------------------------------------------

def test_transcription_chunks_set_delta_then_the_finish(app_client):
    """speech_to_text/base/serving.py l. 720-860 (dumped exclude_unset): a choice is its delta,
    the last one's adds finish_reason and stop_reason; the usage chunk drops nulls."""
    buf = io.BytesIO()
    t = np.arange(8000) / 16000
    sf.write(buf, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV", subtype="PCM_16")
    r = app_client("--seed", "7").post("/v1/audio/transcriptions", files={"file": ("a.wav", buf.getvalue(), "audio/wav")},
                                       data={"model": "test-model", "stream": "true", "language": "en",
                                             "stream_include_usage": "true", "stream_continuous_usage_stats": "true"})
    *tokens, usage, done = sse_events(r.text)
    assert done == "[DONE]" and tokens
    for ch in tokens:
        assert keys(ch) == [*HEAD, "usage"] and ch["object"] == "transcription.chunk" and keys(ch["usage"]) == RUNNING
    assert [keys(ch["choices"][0]) for ch in tokens] == [["delta"]] * (len(tokens) - 1) + [
        ["delta", "finish_reason", "stop_reason"]]
    assert keys(usage) == [*HEAD, "usage"] and usage["choices"] == []
