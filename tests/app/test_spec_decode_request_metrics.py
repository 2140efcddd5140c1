"""``--per-request-spec-decode-metrics`` through the Flask app: chat and completions answers of
one choice carry vLLM 0.34's ``metrics.speculative_decoding`` (a body and a stream's usage
chunk), with the exact counts of a deterministic synthetic acceptance; nothing with ``n`` 2,
several prompts, a stop string, the Responses API, level ``none`` or without step mode; a level
without a speculative config stops the start-up, as in vLLM."""
from __future__ import annotations

import json

import httpx
import pytest

from generation.config.values import ConfigError
from support import make_app, streamed

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "Hello there"}]
STEP = ("--latency-calculator", "step", "--seed", "5")
USAGE = {"stream_options": {"include_usage": True}}


def config(rates) -> str:
    return json.dumps({"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
                       "synthetic_acceptance_rates": rates})


ALL, FIRST = config([1, 1, 1]), config([1, 0, 0])
TIMES = dict.fromkeys(("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms",
                       "tokens_per_second"))
# 10 tokens, every draft accepted: the prefill's token, then three verify steps of 1 + 3
ALL_10 = {"mean_acceptance_length": 4.0, "draft_acceptance_rate": 1.0, "acceptance_histogram": [0, 0, 0, 3],
          "num_spec_steps": 3, "num_accepted_draft_tokens": 9, "num_draft_tokens": 9, "num_spec_tokens": 3}
# 7 tokens, only each step's first draft accepted: the prefill's token, then three steps of 1 + 1
FIRST_7 = {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 1 / 3, "acceptance_histogram": [0, 3, 0, 0],
           "num_spec_steps": 3, "num_accepted_draft_tokens": 3, "num_draft_tokens": 9, "num_spec_tokens": 3}
FIRST_7_STEPS = {"per_step_accepted": [1, 1, 1], "per_step_drafted": [3, 3, 3]}


def client(*flags) -> httpx.Client:
    return httpx.Client(transport=httpx.WSGITransport(app=make_app(*flags)), base_url="http://sim")


def spec_client(spec, level, *flags) -> httpx.Client:
    return client(*STEP, "--speculative-config", spec, "--per-request-spec-decode-metrics", level, *flags)


def chat(tokens=10, **extra) -> dict:
    return {"model": "test-model", "messages": MSG, "max_tokens": tokens, "ignore_eos": True, "seed": 11, **extra}


def completion(tokens=10, **extra) -> dict:
    return {"model": "test-model", "prompt": "Hello", "max_tokens": tokens, "ignore_eos": True, "seed": 11, **extra}


def usage_chunk(c, path, body) -> dict:
    events = streamed(c, path, {**body, **USAGE})
    assert all("metrics" not in e for e in events[:-1])
    return events[-1]


@pytest.mark.parametrize("path, body", [(CHAT, chat), (COMPLETIONS, completion)])
def test_summary_in_a_body_beside_null_times(path, body):
    got = spec_client(ALL, "summary").post(path, json=body()).json()
    # vLLM's bare PerRequestMetrics() and SpeculativeDecodingMetrics, model_dump'd: their nulls stay
    assert got["metrics"] == {**TIMES, "speculative_decoding": {**ALL_10, "per_step_accepted": None,
                                                                 "per_step_drafted": None}}
    assert got["usage"]["completion_tokens"] == 10


@pytest.mark.parametrize("path, body", [(CHAT, chat), (COMPLETIONS, completion)])
def test_summary_in_a_streams_usage_chunk_leaves_the_nulls_out(path, body):
    c = spec_client(ALL, "summary")
    last = usage_chunk(c, path, body())
    assert last["choices"] == [] and last["metrics"] == {"speculative_decoding": ALL_10}
    assert all("metrics" not in e for e in streamed(c, path, body()))       # no usage chunk, no metrics


@pytest.mark.parametrize("path, body", [(CHAT, chat), (COMPLETIONS, completion)])
def test_detailed_adds_the_per_step_arrays(path, body):
    c = spec_client(FIRST, "detailed")
    assert c.post(path, json=body(7)).json()["metrics"] == {**TIMES,
                                                            "speculative_decoding": {**FIRST_7, **FIRST_7_STEPS}}
    assert usage_chunk(c, path, body(7))["metrics"] == {"speculative_decoding": {**FIRST_7, **FIRST_7_STEPS}}


def test_a_request_that_never_verifies_still_reports_its_record():
    got = spec_client(FIRST, "detailed").post(COMPLETIONS, json=completion(1)).json()
    assert got["metrics"]["speculative_decoding"] == {
        "mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0, "acceptance_histogram": [0, 0, 0, 0],
        "num_spec_steps": 0, "num_accepted_draft_tokens": 0, "num_draft_tokens": 0, "num_spec_tokens": 3,
        "per_step_accepted": None, "per_step_drafted": None}


def test_with_per_request_metrics_the_times_ride_along():
    c = spec_client(ALL, "summary", "--enable-per-request-metrics")
    metrics = c.post(CHAT, json=chat()).json()["metrics"]
    assert list(metrics) == [*TIMES, "speculative_decoding"]
    assert metrics["time_to_first_token_ms"] > 0 and metrics["mean_itl_ms"] > 0
    assert metrics["speculative_decoding"] == {**ALL_10, "per_step_accepted": None, "per_step_drafted": None}
    last = usage_chunk(c, COMPLETIONS, completion())["metrics"]
    assert last["speculative_decoding"] == ALL_10 and last["tokens_per_second"] > 0


def test_n_2_and_several_prompts_carry_none():
    for flags in ((), ("--enable-per-request-metrics",)):
        c = spec_client(ALL, "detailed", *flags)
        assert c.post(CHAT, json=chat(n=2)).json()["metrics"] is None       # a body's null, as vLLM's
        assert c.post(COMPLETIONS, json=completion(n=2)).json()["metrics"] is None
        assert c.post(COMPLETIONS, json=completion(prompt=["Hello", "Bye"])).json()["metrics"] is None
        assert "metrics" not in usage_chunk(c, CHAT, chat(n=2))
        assert "metrics" not in usage_chunk(c, COMPLETIONS, completion(prompt=["Hello", "Bye"]))


def test_a_stop_string_ends_the_answer_before_the_record_arrives():
    c = spec_client(FIRST, "summary")
    whole = c.post(COMPLETIONS, json=completion(7)).json()
    assert whole["metrics"]["speculative_decoding"]["num_spec_steps"] == 3
    text = whole["choices"][0]["text"]
    stop = text.split()[2]
    got = c.post(COMPLETIONS, json=completion(7, stop=[stop])).json()
    assert got["choices"][0]["stop_reason"] == stop and got["metrics"] is None
    assert "metrics" not in usage_chunk(c, COMPLETIONS, completion(7, stop=[stop]))


def test_the_responses_api_has_no_spec_decode_metrics():
    c = spec_client(ALL, "summary", "--enable-per-request-metrics")
    got = c.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 5}).json()
    assert got["metrics"]["speculative_decoding"] is None           # vLLM's responses serving never sets it


def test_level_none_and_no_step_mode_change_nothing():
    plain = client(*STEP, "--speculative-config", ALL)
    for c in (plain, client(*STEP, "--speculative-config", ALL, "--per-request-spec-decode-metrics", "none"),
              client("--speculative-config", ALL, "--per-request-spec-decode-metrics", "summary")):
        assert c.post(CHAT, json=chat()).json()["metrics"] is None
        assert "metrics" not in usage_chunk(c, COMPLETIONS, completion())
    c = client(*STEP, "--speculative-config", ALL, "--enable-per-request-metrics")
    assert c.post(CHAT, json=chat()).json()["metrics"]["speculative_decoding"] is None
    assert "speculative_decoding" not in usage_chunk(c, CHAT, chat())["metrics"]


@pytest.mark.parametrize("mode", [STEP, ()])
@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_a_level_without_a_speculative_config_stops_the_start_up(mode, level):
    with pytest.raises(ConfigError, match=r"requires speculative decoding to be enabled \(via --speculative-config"):
        make_app(*mode, "--per-request-spec-decode-metrics", level)
    make_app(*mode, "--per-request-spec-decode-metrics", "none")
    make_app(*mode, "--spec-method", "ngram", "--spec-tokens", "2", "--per-request-spec-decode-metrics", level)


def test_the_generate_route_carries_the_record_too():
    """/inference/v1/generate (vLLM 0.34's token_in_token_out serving): ``metrics`` is
    ``PerRequestMetrics(speculative_decoding=...)`` for one choice, whatever the timing flag: its
    times null in a body, left out of the stream's usage chunk; none with ``n`` 2."""
    c = client(*STEP, "--speculative-config", ALL, "--per-request-spec-decode-metrics", "summary")
    base = {"model": "test-model", "token_ids": [1, 2, 3, 4],
            "sampling_params": {"max_tokens": 10, "ignore_eos": True}}
    body = c.post("/inference/v1/generate", json=base).json()
    assert body["metrics"] == {**TIMES, "speculative_decoding": {**ALL_10, "per_step_accepted": None,
                                                                  "per_step_drafted": None}}
    text = c.post("/inference/v1/generate", json={**base, "output_mode": "text"}).json()
    assert text["metrics"]["speculative_decoding"]["acceptance_histogram"] == [0, 0, 0, 3]
    r = c.post("/inference/v1/generate", json={**base, "stream": True, **USAGE})
    last = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")][-1]
    assert last["metrics"] == {"speculative_decoding": ALL_10} and last["choices"] == []
    two = c.post("/inference/v1/generate", json={**base, "sampling_params": {**base["sampling_params"], "n": 2}})
    assert "metrics" not in two.json() or two.json()["metrics"] is None
