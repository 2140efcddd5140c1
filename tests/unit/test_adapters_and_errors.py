"""The Flask-free request pieces (issue 11 layer): typed requests from the schemas, the error
table, stop cuts and sequence states, limit checks, the Anthropic and Responses translations
to chat, usage sums and chunk frames."""
from __future__ import annotations

import json

import pytest

from blueprints.errors import STATUS, status_of
from generation.adapters import base
from generation.adapters import messages as am
from generation.adapters import responses as ar
from generation.adapters.protocol import (AnthropicMessage, AnthropicTool, AnthropicToolChoice, ChatCompletionRequest,
                                          MessagesRequest, StreamOptions, TextConfig, TextFormat)
from generation.engine.request import GenerationRequest, Prompt, SeqState, Sequence
from generation.errors import (APIError, ContextLengthError, InjectedError, InvalidParam, ModelNotFound, QueueFullError,
                               UnsupportedMediaType)
from schemas.chat import chat_request_schema
from schemas.common import load

MSG = [{"role": "user", "content": "hello there"}]


# ---- typed requests and the error table -------------------------------------------------------------

def test_schema_loads_typed_request():
    req = load(chat_request_schema, {"model": "m", "messages": MSG, "n": 2, "stream_options": {"include_usage": True}})
    assert isinstance(req, ChatCompletionRequest)
    assert req.n == 2 and req.messages == MSG and req.stream_options == StreamOptions(include_usage=True)
    assert req.max_tokens is None and req.tools is None


@pytest.mark.parametrize("err,status", [
    (InvalidParam("x", "f"), 400), (ContextLengthError("x"), 400), (UnsupportedMediaType(), 400),
    (ModelNotFound("m"), 404), (QueueFullError(), 429), (InjectedError("x", 503), 503),
    (APIError("x", 422), 422), (RuntimeError("bug"), 500)])
def test_error_table(err, status):
    assert status_of(err) == status


def test_every_domain_error_has_a_row():
    for cls in (InvalidParam, ContextLengthError, UnsupportedMediaType, ModelNotFound, QueueFullError):
        assert cls in STATUS


# ---- pure units ----------------------------------------------------------------------------------------

def _seq(pieces, ids=None):
    seq = Sequence(GenerationRequest(request_id="r", model="m"), 0, 0, Prompt([1]))
    seq.pieces = list(pieces)
    seq.ids = list(ids or range(len(pieces)))
    return seq


def test_cut_at_stop_earliest_then_first_listed():
    seq = _seq(["Hello", " wor", "ld", "!"])
    assert seq.cut_at_stop(["ld", "o w"]) == "o w"
    # vLLM 0.34's detokenizer: the tokens through the one completing the string stay (" wor"),
    # the text is cut before the string
    assert seq.pieces == ["Hell", ""] and seq.ids == [0, 1] and seq.stop_reason == "o w" and seq.finish_reason == "stop"
    seq = _seq(["Hello", " wor", "ld", "!"])
    assert seq.cut_at_stop(["o w"], include=True) == "o w" and seq.pieces == ["Hello", " w"] and seq.ids == [0, 1]
    seq = _seq(["abc"])       # one token completes both: the one ending first in the text
    assert seq.cut_at_stop(["bc", "b"]) == "b" and seq.pieces == ["a"]
    seq = _seq(["abc"])       # both end at once: the one listed first
    assert seq.cut_at_stop(["bc", "c"]) == "bc" and seq.pieces == ["a"]
    seq = _seq(["abc"])
    seq.finish_reason = "length"
    assert seq.cut_at_stop(["zz", ""]) is None and seq.pieces == ["abc"] and seq.finish_reason == "length"


def test_cut_at_token_keeps_the_token_not_its_text():
    """vLLM 0.34 skips a stop-terminated sequence's last token when detokenizing, unless
    include_stop_str_in_output: the token counts, its text is not returned."""
    seq = _seq(["I ", "am ", "fine", "!"], [5, 6, 7, 8])
    assert seq.cut_at_token([7]) == 7 and seq.pieces == ["I ", "am ", ""] and seq.ids == [5, 6, 7]
    seq = _seq(["I ", "am ", "fine", "!"], [5, 6, 7, 8])
    assert seq.cut_at_token([7], include=True) == 7 and seq.pieces == ["I ", "am ", "fine"]


def test_the_stop_string_completed_first_wins():
    """vLLM 0.34's detokenizer looks for the stop strings after each token, in the text it
    added: the first string a token completes ends the output, even where a longer one began
    earlier (it was the earliest-starting match: "abcdef" over "cd" below, the whole output cut);
    of strings one token completes, the one that ends first in the text, then the one listed
    first (check_stop_strings: "Prefer the stop string that completes earliest in the text";
    the simulator took the one listed first)."""
    seq = _seq(["ab", "cd", "ef", "gh"])
    assert seq.cut_at_stop(["abcdef", "cd"]) == "cd" and seq.pieces == ["ab", ""] and seq.ids == [0, 1]
    seq = _seq(["x", "abc"])
    assert seq.cut_at_stop(["bc", "ab"]) == "ab" and seq.pieces == ["x", ""]
    seq = _seq(["x", "abc"])
    assert seq.cut_at_stop(["ab", "bc"]) == "ab" and seq.pieces == ["x", ""]
    seq = _seq(["ab", "cd", "ef"])
    assert seq.cut_at_stop(["x" * 10, "abcdef"]) == "abcdef" and seq.ids == [0, 1, 2]


def test_stops_wait_for_min_tokens():
    """vLLM 0.34 looks for stop strings once the output holds more than min_tokens tokens, in
    the text since (a string may begin earlier), and its check_stop ignores stop tokens until
    min_tokens: a stop among the first tokens no longer ends the output."""
    seq = _seq(["a ", "b ", "a ", "b ", "c"])
    assert seq.cut_at_stop(["a b"], min_tokens=2) == "a b" and seq.pieces == ["a ", "b ", "", ""]
    seq = _seq(["a ", "b ", "a ", "b ", "c"])
    assert seq.cut_at_stop(["b a"], min_tokens=2) == "b a" and seq.ids == [0, 1, 2]     # ends in token 2
    seq = _seq(["a ", "b ", "c"])
    assert seq.cut_at_stop(["a"], min_tokens=1) is None and seq.pieces == ["a ", "b ", "c"]
    seq = _seq(["I ", "am ", "fine", "!"], [5, 7, 7, 8])
    assert seq.cut_at_token([7], min_tokens=3) == 7 and seq.ids == [5, 7, 7]
    seq = _seq(["I ", "am ", "fine", "!"], [5, 7, 7, 8])
    assert seq.cut_at_token([7], min_tokens=2) == 7 and seq.ids == [5, 7]
    seq = _seq(["I ", "am "], [5, 7])
    assert seq.cut_at_token([5], min_tokens=2) is None and seq.ids == [5, 7]


def test_seq_state_is_a_str_enum():
    seq = _seq([])
    assert seq.state is SeqState.NEW and seq.state == "new"
    assert [s.value for s in SeqState] == ["new", "waiting", "running", "instant", "done", "aborted"]


def test_check_limits():
    base.check_limits(5, True, 3)
    for args, param, msg in [((5, False, 0), None, "n must be at least 1, got 0."),    # vLLM names no parameter
                             ((0, False, None), "max_tokens", "max_tokens must be at least 1, got 0."),
                             ((None, True, None), "max_tokens", "Ignore_eos is true")]:
        with pytest.raises(InvalidParam) as e:
            base.check_limits(*args)
        assert e.value.param == param and e.value.message.startswith(msg)


def test_anthropic_translation():
    body = MessagesRequest(
        system=[{"type": "text", "text": "be brief"}],
        messages=[AnthropicMessage("user", "hi"),
                  AnthropicMessage("assistant", [{"type": "text", "text": "calling"},
                                                 {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": 2}}]),
                  AnthropicMessage("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                                            {"type": "image", "source": {"type": "url", "url": "http://x/i.png"}}]),
                  AnthropicMessage("user", [{"type": "thinking", "thinking": "..."}])])
    assert am.to_chat_messages(body) == [
        {"role": "system", "content": "be brief"},         # text blocks joined, as vLLM does
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "calling",
         # vLLM 0.34's _convert_tool_use_block: json.dumps(input), the client's key order and spacing
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"b": 1, "a": 2}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/i.png"}}]},
    ]
    assert am.to_chat_tools([AnthropicTool(name="f", input_schema={"type": "object"}, description="d")]) == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "description": "d"}}]
    assert am.to_chat_tools([]) is None
    # vLLM 0.34's validate_input_schema (anthropic/protocol.py): a schema without type is an object's
    assert am.to_chat_tools([AnthropicTool(name="g", input_schema={"properties": {}})]) == [
        {"type": "function", "function": {"name": "g", "parameters": {"properties": {}, "type": "object"}}}]
    assert am.to_chat_tool_choice(AnthropicToolChoice("any")) == "required"
    assert am.to_chat_tool_choice(AnthropicToolChoice("tool", "f")) == {"type": "function", "function": {"name": "f"}}
    assert am.to_chat_tool_choice(None) is None


def test_anthropic_translation_of_tool_results_and_empty_blocks():
    """vLLM 0.34's _convert_messages / _convert_user_tool_result (anthropic/serving.py): a user's
    tool_result is a tool message (text items joined by newlines, "" without content) and its
    images a user message after it; an assistant's is a "Tool result: ..." text part; empty text
    blocks are dropped, an empty string content is kept, an assistant message without content too
    (with its thinking as reasoning)."""
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    body = MessagesRequest(messages=[
        AnthropicMessage("user", ""),
        AnthropicMessage("assistant", [{"type": "thinking", "thinking": "..."}]),
        AnthropicMessage("user", [{"type": "tool_result", "tool_use_id": "t1",
                                   "content": [{"type": "text", "text": "a"}, img, {"type": "text", "text": "b"}]},
                                  {"type": "tool_result", "tool_use_id": "t2"},
                                  {"type": "text", "text": ""}]),
        AnthropicMessage("assistant", [{"type": "tool_result", "tool_use_id": "t3", "content": "42"},
                                       {"type": "text", "text": "ok"}])])
    assert am.to_chat_messages(body) == [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": None, "reasoning": "..."},      # thinking: its reasoning
        {"role": "tool", "tool_call_id": "t1", "content": "a\nb"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "tool", "tool_call_id": "t2", "content": ""},
        {"role": "assistant", "content": [{"type": "text", "text": "Tool result: 42"}, {"type": "text", "text": "ok"}]},
    ]


def test_responses_translation():
    inp = [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                        {"type": "input_image", "image_url": "http://i"}]},
           {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
           {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    assert ar.to_chat_messages(inp) == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "http://i"}}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert ar.echo_text(inp) == "ok" and ar.echo_text(inp[:1]) == "a\nimage: http://i"
    tools = ar.to_chat_tools([{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    assert tools == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert ar.chat_tool_choice(tools, None, False) == ("required", True)
    assert ar.chat_tool_choice(tools, "auto", True) == ("none", False)
    assert ar.to_response_format(TextConfig(TextFormat("json_schema", name="n", schema={"type": "object"}))) == \
        {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}
    assert ar.to_response_format(TextConfig(TextFormat("text"))) is None
    assert ar.to_response_format(None) is None


def test_usage_counts_each_prompt_once_and_sums_completions():
    req = GenerationRequest(request_id="r", model="m", n=2)
    seqs = []
    for i, (pi, plen, cached, comp) in enumerate([(0, 5, 2, 3), (0, 5, 2, 4), (1, 7, 0, 1), (1, 7, 0, 0)]):
        s = Sequence(req, i, pi, Prompt(list(range(plen))))
        s.cached_tokens, s.completion_tokens = cached, comp
        seqs.append(s)
    ref = base.PromptDetails("cached", 4)
    assert base.request_usage(seqs, ref) == {"prompt_tokens": 12, "total_tokens": 20, "completion_tokens": 8,
                                             "prompt_tokens_details": {"cached_tokens": 2}}
    # vLLM 0.34 (--enable-prompt-tokens-details), blocks of 4: written = 4 - 2 and 4 - 0 tokens
    vllm = base.PromptDetails("vllm", 4)
    details = lambda **kw: base.request_usage(seqs, vllm, **kw)["prompt_tokens_details"]     # noqa: E731
    assert details() == {"cached_tokens": 2, "created_cache_tokens": 6, "multimodal_tokens": None}
    assert details(final_chunk=True) == {"cached_tokens": 2, "created_cache_tokens": 6}
    assert details(final_chunk=True, mm={"image": 3}) == {"cached_tokens": 2, "created_cache_tokens": 6,
                                                          "multimodal_tokens": {"image": 3}}
    assert details(api="completion") == {"cached_tokens": 2, "created_cache_tokens": None, "multimodal_tokens": None}
    assert details(api="completion", final_chunk=True) == {"cached_tokens": 2}
    assert base.prompt_tokens_details(base.PromptDetails("vllm", 0), seqs) == \
        {"cached_tokens": 2, "created_cache_tokens": 0, "multimodal_tokens": None}      # no prefix cache
    for s in seqs:
        s.finish_reason = "cache_threshold"
    assert "prompt_tokens_details" not in base.request_usage(seqs, ref)


def test_chunk_frame_continuous_usage():
    req = GenerationRequest(request_id="r", model="m")
    seqs = [Sequence(req, 0, 0, Prompt([1, 2, 3]))]
    frame = base.ChunkFrame("cmpl-r", "text_completion", "m", seqs, continuous=True)
    assert frame.heads[0].endswith(b'"model":"m","choices":[{"index":0')
    # vLLM 0.34 sets every token chunk's kv_transfer_params (null): completion/serving.py
    assert frame.tail(1) == (b',"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1},'
                             b'"kv_transfer_params":null}\n\n')
    assert base.ChunkFrame("c", "o", "m", seqs, continuous=False).tail(1) == base.KV_END
    # chat's running usage sets completion_tokens_details: null, or the reasoning tokens so far
    chat = base.ChunkFrame("chatcmpl-r", "chat.completion.chunk", "m", seqs, continuous=True, chat=True)
    assert chat.usage(0, 2) == (b',"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,'
                                b'"completion_tokens_details":null}')
    seqs[0].reasoning_span = (1, 4, 5)
    chat = base.ChunkFrame("chatcmpl-r", "chat.completion.chunk", "m", seqs, continuous=True, chat=True,
                           spans=[seqs[0].reasoning_span])
    running = [json.loads(chat.usage(0, 1)[len(b',"usage":'):])["completion_tokens_details"] for _ in range(6)]
    assert running == [{"reasoning_tokens": n} for n in (0, 1, 2, 3, 3, 3)]     # tokens 1..3 between the markers
