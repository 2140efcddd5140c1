"""The per-request work budget (``--max-request-work``, issue 23 item 3), in-process.

``n`` x ``max_tokens`` x ``top_logprobs`` once ran 94 s and 5.8 GB on the hub: a request whose
response would hold more than the budget's output entries (choices x output tokens x (1 + top
logprobs), echoed prompts and ``prompt_logprobs`` included) is a 400 naming the fields, before
anything is admitted or tokenized; what the budget allows renders with turns for the hub.
"""
from __future__ import annotations

import json
import os
import time

import gevent
import orjson
import pytest

from blueprints.common import Pacer, dumps_paced
from generation.tokenization.tokenizer import _malloc_trim
from support.hub_probe import Ticker, rss_mb

USER = [{"role": "user", "content": "hi"}]
LIMIT = 1048576






def idle(sim) -> bool:
    return sim.running == 0 and not sim.waiting


@pytest.mark.parametrize("path,body,param,units", [
    ("/v1/chat/completions", {"messages": USER, "n": 1005, "max_tokens": 1000, "ignore_eos": True,
                              "logprobs": True, "top_logprobs": 20}, "n", 1005 * 1000 * 21),
    ("/v1/chat/completions", {"messages": USER, "n": 300, "max_completion_tokens": 1000, "ignore_eos": True,
                              "logprobs": True, "top_logprobs": 20}, "n", 300 * 1000 * 21),
    ("/v1/completions", {"prompt": "hi", "n": 1000, "max_tokens": 1000, "logprobs": 5}, "n", 1000 * 1000 * 6),
    ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"n": 1005, "max_tokens": 1000,
                                                                          "logprobs": 20}},
     "sampling_params.n", 1005 * 1000 * 21),
])
def test_output_side_past_the_budget_is_a_400_before_admission(api, path, body, param, units):
    before = api.sim.metrics.prompt_tokens_total if hasattr(api.sim.metrics, "prompt_tokens_total") else None
    t0 = time.monotonic()
    r = api.post(path, json={"model": "test-model", **body})
    assert time.monotonic() - t0 < 1.0
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == param
    assert f"asks for {units} output tokens and logprob alternatives" in err["message"]
    assert f"more than the {LIMIT} one request may ask (--max-request-work)" in err["message"]
    assert idle(api.sim)
    if before is not None:
        assert api.sim.metrics.prompt_tokens_total == before


def test_echo_and_prompt_logprobs_count_per_choice(api):
    """1,005 prompts x echo x prompt_logprobs 20 stalled the hub 11 s: the prompt side counts."""
    prompt = "hello world " * 40                  # 80 simulated tokens (+ the start token)
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": [prompt] * 1005, "echo": True,
                                          "prompt_logprobs": 20, "max_tokens": 1})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "prompt"
    assert "echoed prompt tokens" in err["message"] and "prompt_logprobs" in err["message"]
    assert idle(api.sim)


def test_budget_counts_chat_prompt_logprobs(app_client):
    c = app_client("--max-request-work", "500")
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": [
        {"role": "user", "content": "word " * 100}], "max_tokens": 1, "prompt_logprobs": 5})
    assert r.status_code == 400 and "prompt tokens x (1 + prompt_logprobs)" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "max_tokens"
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "max_tokens": 1,
                                             "prompt_logprobs": 5})
    assert r.status_code == 200, r.text


def test_budget_of_zero_means_no_cap_and_negative_is_refused(app_client):
    c = app_client("--max-request-work", "0", "--max-num-seqs", "2000")
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "n": 1005, "max_tokens": 2,
                                             "ignore_eos": True})
    assert r.status_code == 200 and len(r.json()["choices"]) == 1005
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises((ConfigError, SystemExit)):
        load_config(["--max-request-work", "-1"])


def test_max_tokens_beyond_the_context_counts_as_the_context(api):
    """The simulator caps max_tokens at the room left, so the pre-check counts at most the
    context."""
    for max_tokens in (1024, 10 ** 9):
        r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "n": 16,
                                                   "max_tokens": max_tokens})
        assert r.status_code == 200, r.text[:300]


def test_the_largest_allowed_response_holds_the_hub_a_few_ms(app_client):
    """48 choices x 1,000 tokens x 21 entries (64 MB of JSON) is within the budget: it renders
    in under a second, a greenlet beside it is never held for long, a concurrent ``/health``
    answers meanwhile (non-streaming: the whole body is rendered on the request's greenlet), and
    memory comes back."""
    c = app_client("--max-num-seqs", "64")
    body = {"model": "test-model", "messages": USER, "n": 48, "max_tokens": 1000, "ignore_eos": True,
            "logprobs": True, "top_logprobs": 20}
    c.post("/v1/chat/completions", json={**body, "n": 1})       # warm the logprob memo
    base = rss_mb()
    waits = []

    def probe():
        while True:
            t0 = time.monotonic()
            assert c.get("/health").status_code == 200
            waits.append(time.monotonic() - t0)
            gevent.sleep(0.01)
    for stream in (False, True):
        tick = Ticker()
        g = gevent.spawn(probe) if not stream else None
        gevent.sleep(0.02)
        cpu0 = sum(os.times()[:2])
        r = c.post("/v1/chat/completions", json={**body, "stream": stream})
        took = sum(os.times()[:2]) - cpu0        # CPU seconds: 0.6-1.1 idle (14.5 before the memo)
        gap = tick.stop()
        if g is not None:
            g.kill()
        assert r.status_code == 200
        assert len(r.content) > 60_000_000
        assert took < 5.0, took
        assert gap < 0.5, (stream, gap, took)       # 0.03 / 0.05 s on an idle machine
        del r
    assert len(waits) >= 3 and max(waits) < 0.5, waits
    # the response's objects are freed, not kept: glibc keeps freed chunks in its arenas for the
    # next allocations (+40-266 MB seen untrimmed, the most with both cores busy), so trim first
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    assert rss_mb() - base < 250, (base, rss_mb())
    assert idle(c.sim)


@pytest.mark.parametrize("doc", [
    {"a": [1, 2, {"b": [{"c": list(range(200))}] * 3}], "e": {}, "f": [], "g": "x\u00e9", "h": None},
    [{"k": {"l": {"m": {"n": list(range(1000))}}}}],
    {"choices": [{"logprobs": {"content": [{"token": "t", "top_logprobs": [{"x": 1.5}] * 3}] * 300}}] * 5},
    "plain", 5, [],
])
def test_paced_serialisation_is_orjsons_bytes(doc):
    assert b"".join(dumps_paced(doc, Pacer())) == orjson.dumps(doc)
    assert json.loads(b"".join(dumps_paced(doc, Pacer()))) == json.loads(orjson.dumps(doc))
