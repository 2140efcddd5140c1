"""Structured answers bounded before they are tokenized (issue: amplification sweep).

A ~300-byte body whose JSON schema has a 72 MB instance (70 x 256 strings of 4,000 characters)
was tokenized whole for every choice: tool-call arguments (which ``max_tokens`` does not cut)
held 9.5 M tokens a choice until ``--max-request-work`` refused them (n 3: 2.9 GB RSS, 15.8 s),
and a ``response_format`` answer cut at ``max_tokens`` 1 tokenized all of it first (1.3 GB,
3.7 s a choice).  Only the tokens the cut or the cap can use are tokenized now; the figures
asserted are characters handed to the tokenizer (machine-independent).
"""
from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
BIG = {"type": "array", "minItems": 70, "maxItems": 70,
       "items": {"type": "array", "minItems": 256, "maxItems": 256,
                 "items": {"type": "string", "minLength": 4000, "maxLength": 4000}}}
LIMIT = 1048576


@pytest.fixture(autouse=True)
def patient_sampler(monkeypatch):
    """Building the 72 MB instance takes 0.2-0.6 s on a loaded 2-core machine: the sampler's own
    time bound (0.5 s an instance, a 400 of its own) is not what these tests are about."""
    from generation.structured import schema_sampler
    monkeypatch.setattr(schema_sampler.SchemaSampler.__init__, "__defaults__", (30.0,))


@pytest.fixture
def counted(api, monkeypatch):
    """Characters ``encode_lossless`` is asked to tokenize, while the test runs."""
    tok = api.sim.tokenizer
    seen = [0]
    real = tok.encode_lossless

    def counting(text):
        seen[0] += len(text)
        return real(text)
    monkeypatch.setattr(tok, "encode_lossless", counting)
    return seen


def test_huge_tool_arguments_are_refused_without_tokenizing_each_choice(api, counted):
    params = {"type": "object", "required": ["a"], "properties": {"a": BIG}}
    r = api.post("/v1/chat/completions", json={
        "model": "test-model", "messages": USER, "max_tokens": 1, "n": 3, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": params}}]})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "n"
    assert "output tokens and logprob alternatives (n x max_tokens), more than the 1048576 one request may ask" \
        in err["message"]
    # one choice's arguments up to the cap (~8 characters a token here), not 3 x 72 MB
    assert counted[0] < 16 * LIMIT * 4 // 3, counted[0]


def test_a_cut_structured_answer_tokenizes_only_what_it_keeps(api, counted):
    r = api.post("/v1/chat/completions", json={
        "model": "test-model", "messages": USER, "max_tokens": 5, "n": 2, "seed": 7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": BIG}}})
    assert r.status_code == 200, r.text[:300]
    assert all(c["finish_reason"] == "length" for c in r.json()["choices"])
    assert counted[0] <= 2 * 65536, counted[0]        # one first prefix a choice, not 72 MB each


@pytest.mark.parametrize("max_tokens", [1, 300, 1024])      # 1024: --max-model-len, cut to the room left
def test_prefix_tokenizing_keeps_the_answer(api, max_tokens):
    """The cut answer is the whole text's first tokens, as before (the prefixes grow past the
    cut; a seed makes both runs draw the same instance)."""
    from generation.structured import tool_calls
    schema = {"type": "array", "minItems": 40, "maxItems": 40,
              "items": {"type": "string", "minLength": 3000, "maxLength": 4000}}
    body = {"model": "test-model", "messages": USER, "max_tokens": max_tokens, "seed": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
            "logprobs": True}
    new = api.post("/v1/chat/completions", json=body).json()["choices"][0]
    old_limit = tool_calls.PREFIX_CHARS
    try:
        tool_calls.PREFIX_CHARS = 1 << 62              # the whole text, as before
        whole = api.post("/v1/chat/completions", json=body).json()["choices"][0]
    finally:
        tool_calls.PREFIX_CHARS = old_limit
    assert new["message"]["content"] == whole["message"]["content"]
    assert [e["token"] for e in new["logprobs"]["content"]] == [e["token"] for e in whole["logprobs"]["content"]]
    assert new["finish_reason"] == whole["finish_reason"] == "length"


def test_echo_mode_refuses_a_prompt_it_cannot_fit_before_building_its_pieces(app_client, monkeypatch):
    """Echo mode: a prompt whose echo cannot fit (2 x prompt > --max-model-len) is refused by
    prepare; its lossless pieces (every token's text) are not built first."""
    c = app_client("--mode", "echo")
    built = []
    cls = type(c.app.extensions["simulator"].tokenizer)
    real = cls.encode_lossless
    monkeypatch.setattr(cls, "encode_lossless", lambda self, text: built.append(len(text)) or real(self, text))
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": ["hi there", "word " * 600], "max_tokens": 5})
    assert r.status_code == 400 and "maximum context length is 1024 tokens" in r.json()["error"]["message"]
    assert built == [8]                     # the first prompt's pieces only
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": [{"role": "user", "content": "word " * 600}],
                                             "max_tokens": 5})
    assert r.status_code == 400 and built == [8]


def test_echo_mode_answers_a_prompt_past_the_context_in_vllms_words(app_client):
    """A prompt longer than --max-model-len gets vLLM 0.34's "your prompt contains N input
    tokens" in echo mode too; one that fits but cannot be echoed, the seeds' 2 x prompt rule
    in the reference's words."""
    c = app_client("--mode", "echo", "--max-model-len", "64")
    msg = c.post("/v1/completions", json={"model": "test-model", "prompt": "word " * 100,
                                          "max_tokens": 8}).json()["error"]["message"]
    assert msg.startswith("This model's maximum context length is 64 tokens. However, your prompt contains 100 "
                          "input tokens, which exceeds this limit even without any output tokens.")
    msg = c.post("/v1/completions", json={"model": "test-model", "prompt": "word " * 40,
                                          "max_tokens": 50}).json()["error"]["message"]
    assert "However, you requested 80 tokens (40 in the messages, 40 in the completion)" in msg
