"""Chat and completions in-process (the openai SDK and raw httpx over the WSGI transport); the
SDK happy paths also run against a real server (``any_api``).

Covers cases C01, C03, C05, C07, C08, C09, C14, C26 of ../shared/cases and the seeds'
echo/random rules.
"""
from __future__ import annotations

import openai
import pytest

from support import error_type_400

from generation.content.sources import SENTENCES
from generation.tokenization.tokenizer import SimulatedTokenizer
from support import sse_events

TOK = SimulatedTokenizer()
CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"


def client(base) -> openai.OpenAI:
    return base.openai(api_key="x", max_retries=0)


def is_sentence_text(text: str) -> bool:
    """Random-mode text is whole predefined sentences plus a token prefix of one more."""
    pieces = TOK.pieces(text)
    sentences = [TOK.pieces(s) for s in SENTENCES]
    i = 0
    while i < len(pieces):
        for sp in sentences:
            n = min(len(sp), len(pieces) - i)
            if pieces[i:i + n] == sp[:n]:
                i += n
                break
        else:
            return False
    return True


def post(base, path, body, **kw):
    return base.post(path, json=body, timeout=30, **kw)


# ---- SDK happy paths ------------------------------------------------------------------------
def test_sdk_chat_non_stream_and_stream(any_api):
    c = client(any_api)
    r = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "Hello there"}],
                                  max_tokens=10)
    assert r.object == "chat.completion" and r.model == "test-model"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert is_sentence_text(r.choices[0].message.content)
    assert r.usage.prompt_tokens == len(TOK.pieces("### user: Hello there\n"))
    assert 1 <= r.usage.completion_tokens <= 10
    assert r.usage.completion_tokens == len(TOK.pieces(r.choices[0].message.content))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    text, finish, usage = "", [], None
    for chunk in c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=10, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.finish_reason:
                finish.append(ch.finish_reason)
    assert len(finish) == 1 and is_sentence_text(text)
    assert usage.completion_tokens == len(TOK.pieces(text))


def test_sdk_completions_non_stream_and_stream(any_api):
    c = client(any_api)
    r = c.completions.create(model="test-model", prompt="This is a test.", max_tokens=7)
    assert r.object == "text_completion" and r.usage.prompt_tokens == 5
    assert is_sentence_text(r.choices[0].text)
    pieces = []
    for chunk in c.completions.create(model="test-model", prompt="This is a test.", max_tokens=7, stream=True):
        pieces += [ch.text for ch in chunk.choices]
    assert is_sentence_text("".join(pieces))


def test_sdk_models(app_client):
    base = app_client("--model", "Qwen/Qwen3-0.6B", "--served-model-name", "alias-a", "alias-b",
                      "--max-model-len", "2048", model=None)
    models = client(base).models.list()
    assert [m.id for m in models.data] == ["alias-a", "alias-b"]


# ---- C01: plain stream, no stream_options ---------------------------------------------------
@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": [{"role": "user", "content": "Test"}]}),
    (COMPL, {"prompt": "Test"}),
])
def test_c01_stream_without_stream_options(api, path, body):
    r = post(api, path, {"model": "test-model", "max_tokens": 20, "stream": True, **body})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c.get("usage") is None for c in chunks)
    assert sum(1 for c in chunks for ch in c["choices"] if ch.get("finish_reason")) == 1
    assert api.get("/health").status_code == 200


# ---- C03: include_usage -> one trailing usage chunk ----------------------------------------
@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": [{"role": "user", "content": "Hello there"}]}),
    (COMPL, {"prompt": "Hello there"}),
])
def test_c03_include_usage_trailer(api, path, body):
    r = post(api, path, {"model": "test-model", "max_tokens": 5, "stream": True,
                            "stream_options": {"include_usage": True}, **body})
    chunks = sse_events(r.text)[:-1]
    with_usage = [i for i, c in enumerate(chunks) if c.get("usage")]
    assert with_usage == [len(chunks) - 1]
    last = chunks[-1]
    assert last["choices"] == [] and last["id"] == chunks[0]["id"] and last["model"] == chunks[0]["model"]
    u = last["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 1 <= u["completion_tokens"] <= 5
    fin = [i for i, c in enumerate(chunks) if any(ch.get("finish_reason") for ch in c["choices"])]
    assert len(fin) == 1 and fin[0] < len(chunks) - 1 and len(chunks[fin[0]]["choices"]) == 1


# ---- C05: SSE framing ------------------------------------------------------------------------
@pytest.mark.parametrize("path,body,obj", [
    (CHAT, {"messages": [{"role": "user", "content": "hi"}]}, "chat.completion.chunk"),
    (COMPL, {"prompt": "hi"}, "text_completion"),
])
def test_c05_sse_framing(api, path, body, obj):
    with api.stream("POST", path, json={"model": "test-model", "max_tokens": 5, "stream": True, **body},
                      timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = sse_events(raw)[:-1]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == obj and isinstance(c["created"], int) and c["model"] == "test-model" for c in chunks)
    if path == CHAT:
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    nonstream = post(api, path, {"model": "test-model", "max_tokens": 5, **body})
    assert nonstream.headers["content-type"].startswith("application/json")


# ---- C07: context length ---------------------------------------------------------------------
def test_c07_context_length_error_envelope(app_client):
    base = app_client("--max-model-len", "64")
    prompt = " ".join(["word"] * 300)
    r = post(base, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8})
    assert r.status_code == 400
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400 and err["param"] is None
    assert "maximum context length is 64 tokens" in err["message"]
    p = len(TOK.pieces("### user: " + prompt + "\n"))
    assert f"your prompt contains {p} input tokens" in err["message"]        # vLLM 0.34's words
    # random mode caps max_tokens to the room left instead of rejecting (seeds), within the context
    # or past it (vLLM 0.34's TokenizeParams refuses the latter; the seeds come first)
    hi = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    for max_tokens in (64, 100):
        r = post(base, CHAT, {**hi, "max_tokens": max_tokens})
        assert r.status_code == 200
        u = r.json()["usage"]
        assert u["prompt_tokens"] + u["completion_tokens"] == 64
        assert r.json()["choices"][0]["finish_reason"] == "length"


def test_context_length_prompt_plus_one(app_client):
    base = app_client("--max-model-len", "10")
    ok = post(base, COMPL, {"model": "test-model", "prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9]})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 1
    bad = post(base, COMPL, {"model": "test-model", "prompt": list(range(10))})
    assert bad.status_code == 400 and "maximum context length is 10 tokens" in bad.json()["error"]["message"]
    stream = post(base, COMPL, {"model": "test-model", "prompt": list(range(10)), "stream": True})
    assert stream.status_code == 400 and stream.headers["content-type"].startswith("application/json")


# ---- C08: unknown model ----------------------------------------------------------------------
@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": [{"role": "user", "content": "hi"}]}),
    (CHAT, {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
    (COMPL, {"prompt": "hi"}),
])
def test_c08_unknown_model(api, path, body):
    r = post(api, path, {"model": "no-such-model", **body})
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["type"] == "NotFoundError" and err["code"] == 404
    assert err["message"] == "The model `no-such-model` does not exist."


def test_c08_sdk_raises_not_found(api):
    with pytest.raises(openai.NotFoundError):
        client(api).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


# ---- C09: /v1/models -------------------------------------------------------------------------
def test_c09_models_and_aliases(app_client):
    base = app_client("--model", "Qwen/Qwen3-0.6B", "--served-model-name", "alias-a", "alias-b",
                      "--max-model-len", "2048", model=None)
    body = base.get("/v1/models").json()
    assert body["object"] == "list"
    assert [d["id"] for d in body["data"]] == ["alias-a", "alias-b"]
    for d in body["data"]:
        assert d["object"] == "model" and d["owned_by"] == "vllm" and d["root"] == "Qwen/Qwen3-0.6B"
        assert d["parent"] is None and d["max_model_len"] == 2048 and isinstance(d["created"], int)
    r = post(base, CHAT, {"model": "alias-b", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["model"] == "alias-a"
    r = post(base, CHAT, {"model": "Qwen/Qwen3-0.6B", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404


# ---- C14: ignore_eos ---------------------------------------------------------------------------
@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}),
    (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 50}),
    (COMPL, {"prompt": "hi", "max_tokens": 50}),
])
def test_c14_ignore_eos_exact_length(api, path, body):
    r = post(api, path, {"model": "test-model", "ignore_eos": True, **body})
    assert r.json()["usage"]["completion_tokens"] == 50
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_c14_ignore_eos_stream_usage(api):
    r = post(api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50,
                            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    chunks = sse_events(r.text)[:-1]
    assert chunks[-1]["usage"]["completion_tokens"] == 50
    assert sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("content")) == 50


# ---- C26: prompt arrays ------------------------------------------------------------------------
def test_c26_prompt_array(api):
    prompts = ["A robot may not", "My name is"]
    r = post(api, COMPL, {"model": "test-model", "prompt": prompts, "max_tokens": 5, "ignore_eos": True})
    body = r.json()
    assert len(body["choices"]) == 2 and {c["index"] for c in body["choices"]} == {0, 1}
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["usage"]["completion_tokens"] == 10
    assert body["usage"]["prompt_tokens"] == sum(len(TOK.pieces(p)) for p in prompts)
    r = post(api, COMPL, {"model": "test-model", "prompt": prompts, "max_tokens": 5, "ignore_eos": True,
                             "stream": True, "stream_options": {"include_usage": True}})
    chunks = sse_events(r.text)[:-1]
    assert {ch["index"] for c in chunks for ch in c["choices"]} == {0, 1}
    finishes = [ch["index"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert sorted(finishes) == [0, 1]
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0]["usage"]["completion_tokens"] == 10


# ---- prompt forms and validation ------------------------------------------------------------
def test_completion_prompt_forms_echo(echo_api):
    b = echo_api
    r = post(b, COMPL, {"model": "test-model", "prompt": [1, 2, 3, 4]}).json()
    assert r["usage"]["prompt_tokens"] == 4 and r["choices"][0]["text"] == "1,2,3,4"
    r = post(b, COMPL, {"model": "test-model", "prompt": [[1, 2, 3], [10, 20], [7]]}).json()
    assert [c["text"] for c in r["choices"]] == ["1,2,3", "10,20", "7"] and r["usage"]["prompt_tokens"] == 6
    prompts = ["What is the weather like in New York today?", "I hear it's very cold."]
    r = post(b, COMPL, {"model": "test-model", "prompt": prompts, "n": 3}).json()
    assert len(r["choices"]) == 6
    assert [c["text"] for c in r["choices"]] == [prompts[i // 3] for i in range(6)]
    assert r["usage"]["prompt_tokens"] == 18 and r["usage"]["completion_tokens"] == 54


@pytest.mark.parametrize("prompt,msg", [
    ([], "You must pass at least one prompt (parameter=prompt)"),      # vLLM 0.34 renderers/base.py:581
    (None, "Either prompt or prompt_embeds must be provided and non-empty."),
    (["", "x", ""], "prompt must not contain an empty string"),
    ("", "Either prompt or prompt_embeds must be provided and non-empty."),
    ([[1, 2], [], [3]], "prompt must not contain an empty token-id array"),
    (123, "prompt must be a string, an array of strings, an array of token ids, or an array of arrays of token ids"),
    ([1, "a"], "prompt must be a string"),
    ([-1, 2], "prompt must be a string"),
])
def test_completion_bad_prompts(api, prompt, msg):
    r = post(api, COMPL, {"model": "test-model", "prompt": prompt})
    assert r.status_code == 400 and msg in r.json()["error"]["message"]
    assert api.get("/health").status_code == 200


@pytest.mark.parametrize("body,param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_completion_tokens": -1}, "max_tokens"),     # vLLM 0.34: SamplingParams' max_tokens refuses it
    ({"max_tokens": "ten"}, "body.max_tokens"),
    ({"max_tokens": 2.5}, "body.max_tokens"),
    ({"stream": "maybe"}, "body.stream"),
    ({"n": 0}, None),                     # vLLM's _verify_num_sequences names no parameter
    ({"temperature": "hot"}, "body.temperature"),
    ({"messages": "hi"}, "body.messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"ignore_eos": True}, "max_tokens"),
    ({"stream": True, "max_tokens": -1}, "max_tokens"),
])
def test_chat_validation_names_field(api, body, param):
    req = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], **body}
    r = post(api, CHAT, req)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == error_type_400(err["message"]) and err["code"] == 400
    assert err["param"] == param and (param or "n").split("[")[0].removeprefix("body.") in err["message"]


def test_malformed_json_and_nulls(api):
    r = api.post(CHAT, content=b'{"model": "test-model", "messages": [', timeout=10,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "Bad Request"     # vLLM's validation handler
    r = post(api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": None, "n": None, "stream": None, "stream_options": None,
                            "temperature": None, "tools": None, "stop": None})
    assert r.status_code == 200


def test_content_parts_and_history(api):
    r = post(api, CHAT, {"model": "test-model", "max_tokens": 3, "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "input_audio",
                                                                         "input_audio": {"data": "AAAA", "format": "wav"}},
                                     {"type": "video_url", "video_url": {"url": "http://x/v.mp4"}}]},
        {"role": "assistant", "content": "Hi", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]})
    assert r.status_code == 200
    expected = ("### system: Be brief.\n### user: Hello\n### assistant: Hi[f({})]\n### tool(call_1): 42\n")
    assert r.json()["usage"]["prompt_tokens"] == len(TOK.pieces(expected))


# ---- echo mode (seeds) ---------------------------------------------------------------------------
def test_echo_chat_returns_last_message_unmodified(echo_api):
    text = "Héllo | wörld, this is a test."
    r = post(echo_api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": text}]}).json()
    assert r["choices"][0]["message"]["content"] == text
    assert r["usage"]["completion_tokens"] == len(TOK.pieces(text))
    parts = [{"type": "text", "text": "Describe this"},
             {"type": "image_url", "image_url": {"url": "https://example.com/img.png"}}]
    r = post(echo_api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": parts}],
                                 "stream": True})
    text = "".join(ch["delta"].get("content", "") for c in sse_events(r.text)[:-1] for ch in c["choices"])
    assert text == "Describe this\nimage: https://example.com/img.png"


def test_echo_max_tokens_and_context_rules(app_client):
    base = app_client("--mode", "echo", "--max-model-len", "20")
    msgs = [{"role": "user", "content": "This is a test."}]          # 10 prompt tokens, echo 5
    r = post(base, CHAT, {"model": "test-model", "messages": msgs, "max_tokens": 5})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    r = post(base, CHAT, {"model": "test-model", "messages": msgs, "max_tokens": 8})
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert r.json()["choices"][0]["message"]["content"] == "This is a test."
    r = post(base, CHAT, {"model": "test-model", "messages": msgs, "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    long = [{"role": "user", "content": "This is a test, with more."}]      # 13 prompt tokens: 26 > 20
    r = post(base, CHAT, {"model": "test-model", "messages": long})
    assert r.status_code == 400 and "maximum context length is 20 tokens" in r.json()["error"]["message"]


def test_n_choices(api):
    r = post(api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": "This is a test."}],
                            "n": 3, "max_tokens": 4}).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert r["usage"]["prompt_tokens"] == 10
    assert r["usage"]["completion_tokens"] == sum(len(TOK.pieces(c["message"]["content"])) for c in r["choices"])
    r = post(api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": "x"}], "n": 2,
                            "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}})
    chunks = sse_events(r.text)[:-1]
    roles = [ch["index"] for c in chunks for ch in c["choices"] if ch["delta"].get("role")]
    assert sorted(roles) == [0, 1]
    assert sorted(ch["index"] for c in chunks for ch in c["choices"] if ch["finish_reason"]) == [0, 1]


def test_stop_sequences(echo_api):
    r = post(echo_api, CHAT, {"model": "test-model", "messages": [{"role": "user", "content": "one two three four"}],
                                 "stop": ["three"]}).json()
    assert r["choices"][0]["message"]["content"] == "one two "
    assert r["choices"][0]["finish_reason"] == "stop"


def test_seed_makes_runs_reproducible(app_client):
    a = app_client("--seed", "100", "--max-num-seqs", "6")
    b = app_client("--seed", "100", "--max-num-seqs", "7")
    body = {"model": "test-model", "prompt": "This is a test.", "max_tokens": 30}
    ta = [post(a, COMPL, body).json()["choices"][0]["text"] for _ in range(3)]
    tb = [post(b, COMPL, body).json()["choices"][0]["text"] for _ in range(3)]
    assert ta == tb


def test_health_and_unknown_route(api):
    assert api.get("/health").status_code == 200
    r = api.get("/v1/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = api.get(CHAT)
    assert r.status_code == 405


def test_stop_reason_names_the_matched_string(echo_api):
    r = post(echo_api, COMPL, {"model": "test-model", "prompt": "alpha beta gamma delta", "stop": ["delta", "beta"]})
    ch = r.json()["choices"][0]
    assert ch["text"] == "alpha " and ch["finish_reason"] == "stop" and ch["stop_reason"] == "beta"


def test_completion_echo_param_with_token_ids(api):
    r = post(api, COMPL, {"model": "test-model", "prompt": [11, 12, 13], "echo": True, "max_tokens": 2,
                             "logprobs": 0}).json()
    ch = r["choices"][0]
    assert ch["text"].startswith("11,12,13")
    assert "".join(ch["logprobs"]["tokens"]) == ch["text"]


@pytest.mark.parametrize("suffix", ["END", ""])
@pytest.mark.parametrize("extra,message", [
    ({}, "suffix is only supported for models with FIM completion rendering"),
    ({"prompt": ["def f(", "def g("]}, "suffix is only supported for models with FIM completion rendering"),
    ({"prompt": [1, 2, 3]}, "suffix requires text prompt input for FIM completion rendering"),
    ({"echo": True}, "Echo is unsupported with suffix."),
    ({"truncate_prompt_tokens": 3}, "suffix is not supported with truncate_prompt_tokens"),
])
def test_completion_suffix_is_refused_as_vllm_refuses_it(api, suffix, extra, message):
    """vLLM 0.34 answers any ``suffix`` (even empty) with a 400 naming it: only a
    fill-in-the-middle renderer (DeepSeek V4's) renders one (renderers/online_renderer.py,
    ``render_completion``), and FIM clients detect vLLM by that 400 to fall back to plain
    continuation.  The simulator had an older release's "suffix is not currently supported"."""
    r = post(api, COMPL, {"model": "test-model", "prompt": "def f(", "suffix": suffix, "max_tokens": 4, **extra})
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["message"], err["type"], err["param"]) == (message, "BadRequestError", "suffix")
    assert post(api, COMPL, {"model": "test-model", "prompt": "def f(", "suffix": None, "max_tokens": 4}).status_code == 200
