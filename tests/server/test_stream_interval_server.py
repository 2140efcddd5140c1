"""The stream interval on a real server (``python app.py --stream-interval 4``), where streams are
emitted from the hub (:mod:`server.sse_emitter`): a group leaves when its last token is due, the
first token alone at the time to first token, and the server's histograms stay per token.  Lower
bounds sit just under the configured time, upper bounds well above it (a loaded 2-core machine);
a run during which a separate process saw the machine stall is taken again."""
from __future__ import annotations

import time

import httpx

from support import metric, scrape, sse_events
from support.hub_probe import StallWitness

CHAT = "/v1/chat/completions"
BODY = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
        "ignore_eos": True, "stream": True, "return_token_ids": True}


def chunk_times(base: str, body: dict) -> list:
    """``[(seconds after the request, token count)]`` of the token chunks, taken again (three
    tries) while the machine stalled over 0.1 s."""
    for _ in range(3):
        witness = StallWitness()
        t0 = time.monotonic()
        out = []
        with httpx.stream("POST", base + CHAT, json=body, timeout=60) as r:
            assert r.status_code == 200
            buf = ""
            for text in r.iter_text():
                buf += text
                while "\n\n" in buf:
                    event, buf = buf.split("\n\n", 1)
                    if event.startswith("data: {"):
                        for c in sse_events(event + "\n\n")[0]["choices"]:
                            if c.get("token_ids"):
                                out.append((time.monotonic() - t0, len(c["token_ids"])))
        if witness.stop() <= 0.1:
            break
    return out


def test_groups_leave_when_their_last_token_is_due(sim_server):
    """TTFT 200 ms, ITL 50 ms: token 0 at 0.2 s, tokens 1-4 at 0.4 s, 5-8 at 0.6 s, 9 at 0.65 s."""
    base = sim_server("--stream-interval", "4", "--time-to-first-token", "200ms", "--inter-token-latency", "50ms")
    before = scrape(base)
    chunks = chunk_times(base, BODY)
    after = scrape(base)
    assert [n for _, n in chunks] == [1, 4, 4, 1]
    t = [s for s, _ in chunks]
    assert 0.19 <= t[0] <= 0.5
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert 0.19 <= gaps[0] <= 0.45 and 0.19 <= gaps[1] <= 0.45, gaps        # 4 x 50 ms
    assert 0.045 <= gaps[2] <= 0.3, gaps                                    # the last token alone
    n = metric(after, "vllm:inter_token_latency_seconds_count") - metric(before, "vllm:inter_token_latency_seconds_count")
    s = metric(after, "vllm:inter_token_latency_seconds_sum") - metric(before, "vllm:inter_token_latency_seconds_sum")
    assert n == 9 and 9 * 0.049 <= s <= 9 * 0.05 + 0.3                   # per token, not per chunk
    # a request's own interval above the server's, from the same hub emitter
    assert [n for _, n in chunk_times(base, {**BODY, "stream_interval": 6})] == [1, 6, 3]


def test_step_mode_groups_from_the_hub(sim_server):
    base = sim_server("--latency-calculator", "step", "--stream-interval", "4")
    before = scrape(base)
    chunks = chunk_times(base, {**BODY, "max_tokens": 14})
    after = scrape(base)
    assert [n for _, n in chunks] == [1, 4, 4, 4, 1]
    n = metric(after, "vllm:inter_token_latency_seconds_count") - metric(before, "vllm:inter_token_latency_seconds_count")
    assert n == 13


def test_step_mode_sends_a_steps_accepted_drafts_as_one_chunk_from_the_hub(sim_server):
    """Speculative decoding: every draft accepted, each decode step emits 4 tokens, one output
    each (the hub renders no chunk ahead for them); one inter-token latency per step, as vLLM's
    IterationStats observes one per request output."""
    spec = ('{"method": "eagle3", "model": "x/eagle3", "num_speculative_tokens": 3, '
            '"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1, 1, 1]}')
    base = sim_server("--latency-calculator", "step", "--speculative-config", spec)
    before = scrape(base)
    chunks = chunk_times(base, {**BODY, "max_tokens": 14})
    after = scrape(base)
    assert [n for _, n in chunks] == [1, 4, 4, 4, 1]
    n = metric(after, "vllm:inter_token_latency_seconds_count") - metric(before, "vllm:inter_token_latency_seconds_count")
    assert n == 4
    assert metric(after, "vllm:spec_decode_num_accepted_tokens_total") == 12
