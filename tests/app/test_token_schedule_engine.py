"""Token schedules in the engine (generation/engine/token_schedule.py TokenSchedule): a stream
with a constant inter-token latency hands its tokens to the server as one schedule instead of a
deadline per token.  On apps built by ``make_app``: when a schedule is made and cut, and the
stream bytes and metrics are the same whatever the timing path.  The hub emitter's side:
tests/unit/test_token_schedule_emitter.py.
"""
from __future__ import annotations

import time

import gevent
import gevent.socket
import httpx
import pytest

from generation.engine.token_schedule import scheduled_tokens
from generation.engine.request import SeqState
from generation.engine.simulator import ClientDisconnected
from generation.engine.token_schedule import TokenSchedule
from schemas.common import load
from support import make_app, metric, scrape, sse_events

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def seqs_for(app, endpoint: str, body: dict):
    """Prepared and admitted sequences of ``body`` on ``app``'s ``endpoint`` (its view name)."""
    sim = app.extensions["simulator"]
    schema, adapter_cls = app.view_functions[endpoint].generation
    adapter = adapter_cls(sim, load(schema, body))
    seqs = sim.prepare(adapter.build("test", False))
    sim.admit(seqs)
    return sim, seqs


# ---- the engine ------------------------------------------------------------------------------

def test_a_constant_inter_token_latency_is_one_schedule():
    app = make_app("--time-to-first-token", "5ms", "--inter-token-latency", "2ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    ttft = next(run)
    assert ttft.__class__ is float and ttft - seq.started_at == pytest.approx(0.005, abs=1e-9)
    sim.sleep_until(seq, ttft)
    assert next(run) == 0
    sched = next(run)
    assert sched.__class__ is TokenSchedule and (sched.next, sched.stop, sched.itl) == (1, 6, 0.002)
    assert [sched.deadline(k) - ttft for k in range(1, 6)] == pytest.approx([0.002 * k for k in range(1, 5 + 1)])
    sched.render = lambda k: b"<%d>" % k
    assert sched.due(sched.deadline(1) - 1e-6) is None                  # never before its deadline
    assert sched.due(sched.deadline(3)) == b"<1><2><3>"                  # late ones go out together
    assert sched.due(sched.deadline(5) + 1) == b"<4><5>" and sched.due(1e9) is None
    with pytest.raises(StopIteration):
        next(run)
    assert seq.state == SeqState.DONE and sim.running == 0


def test_a_first_token_still_to_wait_for_is_token_0_of_the_schedule():
    """first_in_schedule (issue 32): the first token is emitted as the later ones are, and its
    bookkeeping (first_token_at, the prefill count, its lag, no inter-token latency) is the
    schedule's."""
    app = make_app("--time-to-first-token", "5ms", "--inter-token-latency", "2ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True})
    lags, itls = [], []
    sim.metrics.token_lag, sim.metrics.itl.observe = lags.append, itls.append
    run = sim.run(seq, deadlines=True, first_in_schedule=True)
    sched = next(run)
    assert sched.__class__ is TokenSchedule and (sched.next, sched.stop, sched.itl) == (0, 4, 0.002)
    assert sched.deadline(0) - seq.started_at == pytest.approx(0.005, abs=1e-9)
    firsts = []
    sched.set_render(lambda k: b"<%d>" % k, lambda: firsts.append(1) or b"<role><0>")
    assert sched.due(sched.deadline(0) - 1e-6) is None and not seq.first_token_at
    prefill = sim.prefill_tokens
    t = sched.deadline(0) + 0.001
    assert sched.due(t) == b"<role><0>" and seq.first_token_at == t and firsts == [1]
    assert sim.prefill_tokens == prefill - seq.prompt_len and lags == [pytest.approx(0.001)] and itls == []
    assert sched.due(sched.deadline(3)) == b"<1><2><3>" and firsts == [1] and len(itls) == 3
    with pytest.raises(StopIteration):
        next(run)
    assert seq.state == SeqState.DONE and sim.running == 0 and seq.finished_at == sched.deadline(3)


def test_a_schedule_cut_before_its_first_token_goes_on_per_token_from_token_0():
    app = make_app("--time-to-first-token", "5ms", "--inter-token-latency", "30ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 3, "ignore_eos": True})
    run = sim.run(seq, deadlines=True, first_in_schedule=True)
    sched = next(run)
    sched.set_render(lambda k: b"<%d>" % k, lambda: b"<0>")
    sim.config.swap(sim.config.updated({"inter-token-latency": "40ms"}))
    assert sched.due(sched.deadline(0)) is None and sched.next == sched.stop == 0
    items = []
    for item in run:
        items.append(item)
        if item.__class__ is float:
            sim.sleep_until(seq, item)
    assert [x for x in items if x.__class__ is int] == [0, 1, 2] and items[0] == 0     # token 0 at once
    assert seq.first_token_at and seq.state == SeqState.DONE


def test_a_sequence_aborted_before_its_first_token_ends_in_client_disconnected():
    app = make_app("--time-to-first-token", "50ms", "--inter-token-latency", "10ms")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 5, "ignore_eos": True})
    run = sim.run(seq, deadlines=True, first_in_schedule=True)
    sched = next(run)
    sched.set_render(lambda k: b"x", lambda: b"first")
    gevent.spawn_later(0.01, sim.cancel, [seq])
    with pytest.raises(ClientDisconnected):
        list(scheduled_tokens(sim, sched))
    assert sched.next == 0 and sim.running == 0 and sim.prefill_tokens == 0
    with pytest.raises(ClientDisconnected):
        next(run)


@pytest.mark.parametrize("flags", [("--inter-token-latency-std-dev", "3ms"), ("--time-factor-under-load", "2")])
def test_a_varying_inter_token_latency_yields_a_deadline_per_token(flags):
    app = make_app("--inter-token-latency", "10ms", *flags)
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True})
    items = []
    for item in sim.run(seq, deadlines=True):
        items.append(item)
        if item.__class__ is float:
            sim.sleep_until(seq, item)
    assert [k for k in items if k.__class__ is int] == [0, 1, 2, 3]
    assert all(k.__class__ in (int, float) for k in items) and any(k.__class__ is float for k in items)


def test_a_sequence_aborted_during_its_schedule_ends_in_client_disconnected():
    app = make_app("--inter-token-latency", "50ms")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 5, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0
    sched = next(run)
    sched.render = lambda k: b"x"
    gevent.spawn_later(0.02, sim.cancel, [seq])
    t0 = time.monotonic()
    with pytest.raises(ClientDisconnected):
        list(scheduled_tokens(sim, sched))
    assert time.monotonic() - t0 < 0.045 and sim.running == 0
    with pytest.raises(ClientDisconnected):
        next(run)


def test_an_admin_latency_change_cuts_the_schedule_and_the_stream_goes_on_per_token():
    """docs/engine.md 3.7: in-flight requests draw from the current latencies."""
    app = make_app("--inter-token-latency", "30ms", "--seed", "3")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0
    sched = next(run)
    sched.render = lambda k: b"<%d>" % k
    sim.config.swap(sim.config.updated({"time-to-first-token": "7ms"}))   # not the ITL: goes on
    assert sched.due(sched.deadline(2)) == b"<1><2>"
    sim.config.swap(sim.config.updated({"inter-token-latency": "40ms"}))
    assert sched.due(sched.deadline(5)) is None and sched.next == sched.stop == 3
    items = []
    for item in run:     # token 3 keeps the ITL it was drawn with; 4 and 5 come one new ITL apart
        items.append(item)
        if item.__class__ is float:
            sim.sleep_until(seq, item)
    floats = [x for x in items if x.__class__ is float]
    assert [x for x in items if x.__class__ is int] == [3, 4, 5]
    assert floats[0] - sched.deadline(3) == pytest.approx(0.0, abs=1e-9)
    assert all(b - a == pytest.approx(0.04) for a, b in zip(floats, floats[1:]))
    assert seq.state == SeqState.DONE


def test_a_request_admitted_after_its_first_token_was_due_gets_the_next_ones_an_itl_apart():
    app = make_app("--time-to-first-token", "200ms", "--inter-token-latency", "20ms")
    sim = app.extensions["simulator"]
    schema, adapter_cls = app.view_functions["chat.create_chat_completion"].generation
    adapter = adapter_cls(sim, load(schema, {"model": "test-model", "messages": MSG, "max_tokens": 4,
                                             "ignore_eos": True}))
    seqs = sim.prepare(adapter.build("test", False))
    sim.admit(seqs, time.monotonic() - 0.5)          # arrived 0.5 s ago: TTFT long overdue
    seq = seqs[0]
    run = sim.run(seq, deadlines=True)
    assert next(run) == 0                            # no wait for the first token
    sched = next(run)
    assert sched.deadline(1) - seq.first_token_at == pytest.approx(0.02, abs=1e-9)
    sched.render = lambda k: b"x"
    assert sched.due(time.monotonic()) is None       # the next token is not overdue
    run.close()


def test_the_greenlet_path_stops_at_once_for_an_aborted_stream():
    app = make_app("--inter-token-latency", "20ms")
    sim, (seq,) = seqs_for(app, "chat.create_chat_completion",
                           {"model": "test-model", "messages": MSG, "max_tokens": 6, "ignore_eos": True})
    run = sim.run(seq, deadlines=True)
    next(run)
    sched = next(run)
    sched.render = lambda k: b"x"
    time.sleep(0.05)                                  # tokens 1-2 overdue
    sim.cancel([seq])
    with pytest.raises(ClientDisconnected):
        next(scheduled_tokens(sim, sched))
    assert sched.next == 1


# ---- the same bytes whatever the timing path ---------------------------------------------------

BODIES = {
    "chat": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "ignore_eos": True}),
    "chat logprobs": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "logprobs": True,
                             "top_logprobs": 2}),
    "chat usage, token ids": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 12, "return_token_ids": True,
                                     "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
    "chat tool call": (CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 60, "tools": TOOLS,
                              "tool_choice": "required"}),
    "completion": ("/v1/completions", {"model": "test-model", "prompt": "hello there", "max_tokens": 12}),
    "completion logprobs echo": ("/v1/completions", {"model": "test-model", "prompt": "hello there", "max_tokens": 12,
                                                     "logprobs": 2, "echo": True, "return_token_ids": True,
                                                     "stream_options": {"include_usage": True,
                                                                        "continuous_usage_stats": True}}),
}
TIMINGS = {"all at once": (), "schedule": ("--inter-token-latency", "1ms"),
           "schedule from the first token": ("--time-to-first-token", "2ms", "--inter-token-latency", "1ms"),
           "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms")}


def normalised_events(path: str, body: dict, flags: tuple) -> list:
    """The SSE events of one stream on a fresh app (same seed: same text), without ids and times."""
    client = httpx.Client(transport=httpx.WSGITransport(app=make_app("--seed", "11", *flags)), base_url="http://sim")
    r = client.post(path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    for e in events:
        if isinstance(e, dict):
            e.pop("id", None)
            e.pop("created", None)
            for c in e.get("choices") or ():
                for tc in (c.get("delta") or {}).get("tool_calls") or ():
                    tc.pop("id", None)
    return events


@pytest.mark.parametrize("name", BODIES)
def test_stream_bytes_do_not_depend_on_the_timing_path(name):
    path, body = BODIES[name]
    runs = {timing: normalised_events(path, body, flags) for timing, flags in TIMINGS.items()}
    assert runs["schedule"] == runs["all at once"]
    assert runs["schedule from the first token"] == runs["all at once"]
    assert runs["deadline per token"] == runs["all at once"]
    assert len(runs["schedule"]) > 4      # several token chunks (the last one closes the choice)


def test_schedule_metrics_count_every_token():
    from support import SimClient, INPROC_URL
    api = SimClient(INPROC_URL, app=make_app("--inter-token-latency", "3ms", "--time-to-first-token", "5ms"))
    before = scrape(api)
    r = api.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 10, "ignore_eos": True,
                             "stream": True})
    assert r.status_code == 200 and r.text.count('"delta":{"content":') == 10
    after = scrape(api)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)
    assert delta("vllm:inter_token_latency_seconds_count") == 9
    assert delta("vllm_sim:token_emission_lag_seconds_count") == 10
    # last token - first >= 9 ITL - the first token's lag: no token before its deadline
    assert (delta("vllm:inter_token_latency_seconds_sum") + delta("vllm_sim:token_emission_lag_seconds_sum")
            >= 9 * 0.003)
    assert delta("vllm:request_success_total", finished_reason="length") == 1
