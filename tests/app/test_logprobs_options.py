"""Logprobs, completions echo, continuous usage stats (OpenAI shapes, deterministic values)."""
from __future__ import annotations

from support import sse_events
from generation.tokenization.tokenizer import SimulatedTokenizer

TOK = SimulatedTokenizer()
U = "This is a test."


def client(base):
    return base.openai(api_key="x", max_retries=0)


def test_chat_logprobs_non_stream_sdk(echo_api):
    r = client(echo_api).chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": U}], logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert [e.token for e in content] == TOK.pieces(U)
    assert [e.logprob for e in content] == [-1.0, -1.1, -1.2, -1.0, -1.1]
    for e in content:
        assert e.bytes == list(e.token.encode())
        assert [t.token for t in e.top_logprobs] == [e.token, e.token + "_1"]
        assert e.top_logprobs[1].logprob == e.logprob - 0.5
    r = client(echo_api).chat.completions.create(model="test-model", messages=[{"role": "user", "content": U}])
    assert r.choices[0].logprobs is None


def test_chat_logprobs_stream(echo_api):
    r = echo_api.post("/v1/chat/completions", json={
        "model": "test-model", "messages": [{"role": "user", "content": U}], "stream": True, "logprobs": True,
        "top_logprobs": 2})
    chunks = [c for c in sse_events(r.text)[:-1] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(chunks) == 5
    for pos, c in enumerate(chunks):
        entry = c["choices"][0]["logprobs"]["content"][0]
        assert entry["token"] == c["choices"][0]["delta"]["content"]
        assert entry["logprob"] == [-1.0, -1.1, -1.2][pos % 3]
        assert len(entry["top_logprobs"]) == 2
    r = echo_api.post("/v1/chat/completions", json={
        "model": "test-model", "messages": [{"role": "user", "content": U}], "stream": True})
    assert all(ch.get("logprobs") is None for c in sse_events(r.text)[:-1] for ch in c["choices"])


def test_completion_logprobs_and_echo(echo_api):
    c = client(echo_api)
    r = c.completions.create(model="test-model", prompt=U, logprobs=2)
    lp = r.choices[0].logprobs
    assert lp.tokens == TOK.pieces(U) and lp.token_logprobs == [-1.0, -1.1, -1.2, -1.0, -1.1]
    assert all(len(d) == 2 for d in lp.top_logprobs)
    assert lp.text_offset == [0, 5, 8, 10, 14]
    r = c.completions.create(model="test-model", prompt=U, echo=True, max_tokens=5)
    assert r.choices[0].text == U + U
    chunks = list(c.completions.create(model="test-model", prompt=U, logprobs=1, stream=True))
    toks = [ch.choices[0].logprobs.tokens[0] for ch in chunks if ch.choices and ch.choices[0].text]
    assert toks == TOK.pieces(U)


def test_random_mode_logprobs_deterministic(app_client):
    base = app_client("--seed", "7", "--max-num-seqs", "3")
    body = {"model": "test-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8,
            "logprobs": True, "top_logprobs": 3}
    r = base.post("/v1/chat/completions", json=body).json()
    content = r["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == r["choices"][0]["message"]["content"]
    assert all(e["logprob"] <= 0 and len(e["top_logprobs"]) == 3 for e in content)


def test_continuous_usage_stats(api):
    r = api.post("/v1/chat/completions", json={
        "model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = sse_events(r.text)[:-1]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [c["usage"]["completion_tokens"] for c in content] == [1, 2, 3, 4]
    assert all(c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"]
               for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_token_id_names_set_the_text_offsets(echo_api):
    """With ``return_tokens_as_token_ids`` a completions token is reported as ``token_id:N`` and
    vLLM 0.34's ``_create_completion_logprobs`` advances ``text_offset`` by that string's length
    (``last_token_len = len(token)``), not the token's text; a stream's next chunk starts where
    the last reported token ended (``next_text_offsets``), the echoed prompt's tokens included."""
    body = {"model": "test-model", "prompt": "one two three", "max_tokens": 3, "logprobs": 0,
            "return_tokens_as_token_ids": True}
    names = ["token_id:3666714845", "token_id:1552033323", "token_id:2290484163"]     # 19 characters each
    lps = echo_api.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
    assert lps["tokens"] == names and lps["text_offset"] == [0, 19, 38]
    lps = echo_api.post("/v1/completions", json={**body, "echo": True}).json()["choices"][0]["logprobs"]
    assert lps["tokens"] == names * 2 and lps["text_offset"] == [0, 19, 38, 57, 76, 95]

    def streamed(**extra):
        r = echo_api.post("/v1/completions", json={**body, "stream": True, **extra})
        return [e["choices"][0]["logprobs"]["text_offset"] for e in sse_events(r.text) if isinstance(e, dict)]
    assert streamed() == [[0], [19], [38]]
    assert streamed(echo=True) == [[0, 19, 38, 57], [76], [95]]
    assert streamed(stream_interval=2) == [[0], [19, 38]]
    # the token's own text without the option: "one ", "two ", "three"
    assert echo_api.post("/v1/completions", json={**body, "return_tokens_as_token_ids": False}).json()[
        "choices"][0]["logprobs"]["text_offset"] == [0, 4, 8]
