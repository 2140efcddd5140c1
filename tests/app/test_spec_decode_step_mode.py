"""Speculative decoding through the Flask app (``--speculative-config`` in step mode): a step's
accepted drafts and bonus token reach the client as one chunk on every API, the answer is the
one the same seed gives without drafts, usage and vLLM's token counters count every token, the
``vllm:spec_decode_*`` families count the drafts (and exist, at 0, without step mode), and a
config vLLM refuses stops the start-up."""
from __future__ import annotations

import json

import httpx
import pytest

from generation.config.values import ConfigError
from support import make_app, metric, metric_values, scrape, streamed as stream

CHAT, COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/completions", "/v1/messages"
MSG = [{"role": "user", "content": "Hello there"}]
STEP = ("--latency-calculator", "step", "--seed", "5")
# every draft accepted: each decode step emits 4 tokens
ALL = json.dumps({"method": "eagle3", "model": "x/eagle3", "num_speculative_tokens": 3,
                  "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1, 1, 1]})


def client(*flags) -> httpx.Client:
    return httpx.Client(transport=httpx.WSGITransport(app=make_app(*flags)), base_url="http://sim")


def token_ids(events) -> list:
    return [c["token_ids"] for e in events for c in e["choices"] if c.get("token_ids")]


def chat(**extra) -> dict:
    return {"messages": MSG, "max_tokens": 10, "ignore_eos": True, "seed": 11, "return_token_ids": True, **extra}


def test_a_steps_accepted_drafts_are_one_chunk_and_the_answer_is_unchanged():
    spec = client(*STEP, "--speculative-config", ALL)
    ids = token_ids(stream(spec, CHAT, chat()))
    assert [len(i) for i in ids] == [1, 4, 4, 1]      # the prefill's token, then 1 + 3 drafts a step
    plain = token_ids(stream(client(*STEP), CHAT, chat()))
    assert [t for i in ids for t in i] == [t for i in plain for t in i]
    entries = token_ids(stream(spec, COMPLETIONS, {"prompt": "Hello", "max_tokens": 10, "ignore_eos": True,
                                                   "return_token_ids": True}))
    assert [len(i) for i in entries] == [1, 4, 4, 1]


def test_non_streaming_answers_and_usage_count_every_token():
    body = {"model": "test-model", "messages": MSG, "max_tokens": 10, "ignore_eos": True, "seed": 3}
    got = client(*STEP, "--speculative-config", ALL).post(CHAT, json=body).json()
    plain = client(*STEP).post(CHAT, json=body).json()
    assert got["usage"] == plain["usage"] and got["usage"]["completion_tokens"] == 10
    assert got["choices"] == plain["choices"]


def test_anthropic_messages_stream_a_step_as_one_delta():
    def deltas(*flags):
        r = client(*flags).post(MESSAGES, json={"model": "test-model", "max_tokens": 9, "stream": True,
                                                "messages": MSG})
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        return ([e["delta"]["text"] for e in events if e["type"] == "content_block_delta"],
                [e for e in events if e["type"] == "message_delta"][0]["usage"])
    plain, usage = deltas(*STEP)
    grouped, spec_usage = deltas(*STEP, "--speculative-config", ALL)
    assert len(plain) == 4 and grouped == [plain[0], "".join(plain[1:])]       # the answer's end at 4 tokens
    assert spec_usage == usage


def test_the_spec_decode_families_count_the_drafts():
    spec = client(*STEP, "--speculative-config", ALL)
    stream(spec, CHAT, chat())
    m = scrape(spec)
    # three decode steps of 3 drafts each, all accepted (the last step's past max_tokens too, as vLLM)
    assert metric(m, "vllm:spec_decode_num_drafts_total") == 3
    assert metric(m, "vllm:spec_decode_num_draft_tokens_total") == 9
    assert metric(m, "vllm:spec_decode_num_accepted_tokens_total") == 9
    assert [metric(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(3)] \
        == [3, 3, 3]
    assert metric(m, "vllm:generation_tokens_total") == 10
    assert metric(m, "vllm:inter_token_latency_seconds_count") == 3          # one per step with tokens, as vLLM
    assert metric(m, "vllm:iteration_tokens_total_sum") == 10 + metric(m, "vllm:prompt_tokens_total")


def test_the_families_exist_only_with_a_config_and_stay_0_without_steps():
    m = scrape(client("--speculative-config", ALL))
    assert metric(m, "vllm:spec_decode_num_drafts_total") == 0
    assert metric_values(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total") == [0, 0, 0]
    assert metric_values(scrape(client(*STEP)), "vllm:spec_decode_num_drafts_total") == []


@pytest.mark.parametrize("flags, message", [
    (("--speculative-config", '{"method": "ngram"}'), "num_speculative_tokens must be provided"),
    (("--spec-method", "ngram", "--spec-tokens", "0"), "greater than zero"),
    (("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}', "--spec-tokens", "2"),
     "mutually exclusive"),
])
@pytest.mark.parametrize("mode", [STEP, ()])
def test_a_config_vllm_refuses_stops_the_start_up(flags, message, mode):
    with pytest.raises(ConfigError, match=message):
        make_app(*mode, *flags)
