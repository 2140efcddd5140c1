"""Dev-mode ``/sleep`` as vLLM 0.34 pauses the scheduler (``v1/engine/core.py``:
``EngineCore.sleep`` calls ``pause_scheduler(mode, clear_cache=level >= 1)`` first;
``EngineCore.wake_up`` resumes once the executor has nothing asleep): ``mode=abort`` (default)
aborts the requests in flight, ``wait`` answers once the running ones have finished, ``keep``
freezes them (both latency models); a request sent while asleep is queued, not refused (a sleep leaves
``reject_new_requests`` alone, unlike ``/pause``), and runs after the full ``/wake_up``.  Both
the default latency model and ``--latency-calculator step``."""
from __future__ import annotations

import time

import gevent
import pytest

from support import metric, scrape, sse_events

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "4096")
CLOCK = ("--time-to-first-token", "50ms", "--inter-token-latency", "20ms")
MODES = {"default": CLOCK, "step": STEP}
MSG = [{"role": "user", "content": "Hello there"}]


def chat(c, **extra):
    return c.post("/v1/chat/completions", json={"model": "test-model", "messages": MSG, "ignore_eos": True, **extra})


def running(c) -> int:
    engine = c.sim.engine
    return len(engine.scheduler.running) if engine is not None else c.sim.running


def waiting(c) -> int:
    engine = c.sim.engine
    return len(engine.scheduler.waiting) if engine is not None else len(c.sim.waiting)


def until(cond, timeout: float = 5.0) -> None:
    deadline = gevent.get_hub().loop.now() + timeout
    while not cond():
        assert gevent.get_hub().loop.now() < deadline, "timed out"
        gevent.sleep(0.01)


@pytest.fixture(params=sorted(MODES))
def sleepy(request, app_client):
    return app_client(*MODES[request.param], "--enable-sleep-mode", env=DEV)


def test_sleep_aborts_streams_in_flight_and_queues_new_requests(sleepy):
    c = sleepy
    before = scrape(c)
    job = gevent.spawn(chat, c, max_tokens=900, stream=True, stream_options={"include_usage": True})
    until(lambda: running(c) == 1)
    gevent.sleep(0.2)
    r = c.post("/sleep")                                   # level 1, mode abort
    assert (r.status_code, r.json()) == (200, {"status": "sleeping", "level": 1})
    job.join(5)
    events = sse_events(job.value.text)
    fin, usage, done = events[-3:]
    # vLLM's aborted stream: a final chunk with no new text, finish_reason abort, then usage
    assert fin["choices"] == [{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "abort",
                               "stop_reason": None, "token_ids": None, "weight_versions": None}]
    assert done == "[DONE]" and 1 <= usage["usage"]["completion_tokens"] < 900
    assert (running(c), waiting(c)) == (0, 0)
    # asleep: a new request is accepted and waits in the queue (no 503)
    queued = gevent.spawn(chat, c, max_tokens=3)
    until(lambda: waiting(c) == 1)
    gevent.sleep(0.2)
    assert not queued.ready() and running(c) == 0
    m = scrape(c)
    assert (metric(m, "vllm:num_requests_waiting"), metric(m, "vllm:num_requests_running")) == (1, 0)
    assert (c.get("/is_sleeping").json(), c.get("/is_paused").json()) == ({"is_sleeping": True},
                                                                         {"is_paused": True})
    assert c.post("/wake_up").json() == {"status": "awake", "tags": None}
    queued.join(5)
    d = queued.value.json()
    assert (queued.value.status_code, d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]) == \
        (200, "length", 3)
    m = scrape(c)

    def more(name, **labels):
        return metric(m, name, **labels) - metric(before, name, **labels)
    assert (more("vllm:request_success_total", finished_reason="abort"),
            more("vllm:request_success_total", finished_reason="length")) == (1, 1)
    assert more("vllm:request_queue_time_seconds_sum") >= 0.2        # the queued one's wait while asleep


def test_sleep_wait_answers_once_the_running_requests_have_finished(sleepy):
    c = sleepy
    job = gevent.spawn(chat, c, max_tokens=20)
    until(lambda: running(c) == 1)
    r = c.post("/sleep", params={"mode": "wait", "level": "0"})
    assert job.ready()                                     # drained before the answer
    assert (r.status_code, r.json()) == (200, {"status": "sleeping", "level": 0})
    d = job.value.json()
    assert (d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]) == ("length", 20)
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    assert c.post("/wake_up").json() == {"status": "awake", "tags": None}
    assert c.get("/is_sleeping").json() == {"is_sleeping": False}


def test_sleep_keep_freezes_the_running_requests_in_step_mode(app_client):
    c = app_client(*STEP, "--enable-sleep-mode", env=DEV)
    job = gevent.spawn(chat, c, max_tokens=300)
    until(lambda: running(c) == 1 and c.sim.engine.scheduler.running[0].num_output >= 5)
    assert c.post("/sleep", params={"mode": "keep", "level": "0"}).json() == {"status": "sleeping", "level": 0}
    gevent.sleep(0.05)                                     # the step in progress ends
    req = c.sim.engine.scheduler.running[0]
    made = req.num_output
    gevent.sleep(0.3)
    assert (req.num_output, job.ready(), c.sim.engine.busy) == (made, False, False)    # no step while paused
    assert made < 300
    assert c.post("/wake_up").json() == {"status": "awake", "tags": None}
    job.join(10)
    d = job.value.json()
    assert (d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]) == ("length", 300)


def e2e_sum(c) -> float:
    return metric(scrape(c), "vllm:e2e_request_latency_seconds_sum")


@pytest.mark.parametrize("route", ["sleep", "pause"])
@pytest.mark.parametrize("stream", [False, True])
def test_keep_freezes_the_running_requests_in_the_default_model(app_client, route, stream):
    """vLLM 0.34's PAUSED_ALL plans no step (``EngineCore.pause_scheduler`` mode ``keep``), so a
    running request emits nothing until the resume (``/wake_up``, ``/resume``), then goes on: the
    default latency model used to let it run to its end, its token times fixed when it started
    (generation.engine.freeze now moves what is left of them by the pause).  A new request waits
    for the resume, as in vLLM."""
    c = app_client(*CLOCK, "--enable-sleep-mode", env=DEV)
    before = e2e_sum(c)
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    job = gevent.spawn(chat, c, max_tokens=30, **extra)          # 50 ms + 29 x 20 ms alone
    until(lambda: running(c) == 1)
    gevent.sleep(0.1)
    if route == "sleep":
        assert c.post("/sleep", params={"mode": "keep", "level": "0"}).json() == {"status": "sleeping", "level": 0}
    else:
        assert c.post("/pause", params={"mode": "keep"}).json() == {"status": "paused"}
    (seq,) = c.sim.running_seqs
    made = seq.made_tokens(0.02, time.monotonic())
    queued = gevent.spawn(chat, c, max_tokens=2)
    gevent.sleep(0.8)
    assert not job.ready() and not queued.ready() and waiting(c) == 1 and running(c) == 1
    assert seq.made_tokens(0.02, time.monotonic()) == made < 30        # nothing made while frozen
    c.post("/wake_up" if route == "sleep" else "/resume")
    job.join(10)
    queued.join(10)
    r = job.value
    usage = sse_events(r.text)[-2]["usage"] if stream else r.json()["usage"]
    assert (r.status_code, usage["completion_tokens"]) == (200, 30)
    assert queued.value.json()["usage"]["completion_tokens"] == 2
    assert e2e_sum(c) - before >= 0.8 + 0.6          # the pause and its 30 tokens' own time, at least
    assert seq.shift == 0.0 and seq.lost >= 0.8      # the pause went into its deadlines, once


def test_a_level_0_sleep_is_woken_by_any_wake_up(app_client):
    """Level 0 puts no executor memory to sleep: vLLM's ``wake_up`` is then fully awake whatever
    its tags (``scheduling`` is dropped from them), and resumes the scheduler."""
    c = app_client(*CLOCK, "--enable-sleep-mode", env=DEV)
    for tags in (["weights"], ["scheduling"], ["kv_cache", "scheduling"]):
        c.post("/sleep", params={"level": "0"})
        assert c.get("/is_sleeping").json() == {"is_sleeping": True}
        assert c.post("/wake_up", params={"tags": tags}).json() == {"status": "awake", "tags": tags}
        assert c.get("/is_sleeping").json() == {"is_sleeping": False}
    c.post("/sleep", params={"level": "2"})
    assert c.post("/wake_up", params={"tags": "scheduling"}).json() == {"status": "sleeping",
                                                                        "tags": ["scheduling"]}
    assert c.post("/wake_up", params={"tags": ["scheduling", "weights"]}).json() == {
        "status": "sleeping", "tags": ["scheduling", "weights"]}
    assert c.post("/wake_up", params={"tags": "kv_cache"}).json() == {"status": "awake", "tags": ["kv_cache"]}
    assert chat(c, max_tokens=2).json()["usage"]["completion_tokens"] == 2


def sleep_gauge(c) -> list:
    m = scrape(c)
    return [metric(m, "vllm:engine_sleep_state", sleep_state=s) for s in ("awake", "weights_offloaded", "discard_all")]


def test_engine_sleep_state_follows_record_sleep_state(app_client):
    """vLLM 0.34 sets the gauge in ``AsyncLLM.sleep`` (1, level), ``release_kv_cache_memory``
    (1, 0) and a ``wake_up`` that left nothing asleep (0, 0); ``/resume`` records nothing."""
    c = app_client(*CLOCK, "--enable-sleep-mode", env=DEV)
    assert sleep_gauge(c) == [1, 0, 0]
    c.post("/sleep", params={"level": "2"})
    assert sleep_gauge(c) == [0, 0, 1]
    c.post("/wake_up", params={"tags": "weights"})
    assert sleep_gauge(c) == [0, 0, 1]                     # partly awake: not recorded
    c.post("/wake_up")
    assert sleep_gauge(c) == [1, 0, 0]
    c.post("/sleep", params={"level": "1"})
    assert sleep_gauge(c) == [0, 1, 0]
    c.post("/resume")                                      # the scheduler resumes; the weights still sleep
    assert (c.get("/is_sleeping").json(), c.get("/is_paused").json(), sleep_gauge(c)) == \
        ({"is_sleeping": True}, {"is_paused": False}, [0, 1, 0])
    c.post("/wake_up")
    c.post("/sleep", params={"level": "0"})
    c.post("/resume")
    assert (c.get("/is_sleeping").json(), sleep_gauge(c)) == ({"is_sleeping": False}, [0, 0, 0])
    c.post("/wake_up")
    assert sleep_gauge(c) == [1, 0, 0]


def test_a_sleep_keeps_a_pause_refusing_new_requests(app_client):
    """``/pause`` (abort) sets vLLM's ``reject_new_requests``; a ``/sleep`` after it leaves it set
    (503s) until the full ``/wake_up`` resumes the scheduler."""
    c = app_client(*CLOCK, "--enable-sleep-mode", env=DEV)
    c.post("/pause")
    c.post("/sleep", params={"level": "1"})
    r = chat(c, max_tokens=2)
    assert (r.status_code, r.json()["error"]["code"]) == (503, 503)
    c.post("/wake_up")
    assert chat(c, max_tokens=2).status_code == 200


def test_a_sleeps_abort_leaves_a_request_still_in_the_api_servers_delay_queued(app_client):
    """vLLM 0.34's ``EngineCore.sleep`` aborts what its scheduler holds (``pause_scheduler``:
    ``scheduler.finish_requests(None, FINISHED_ABORTED)``); a request the API server has not yet
    handed to the engine core reaches it after the sleep and is queued like any request sent
    while asleep, to run after the wake-up.  The step engine's modelled frontend delay held
    such a request, and the sleep aborted it."""
    c = app_client(*STEP, "--enable-sleep-mode", env=DEV)
    engine = c.sim.engine
    saved = engine.fe, engine.frontend
    engine.fe, engine.frontend = None, 0.3       # a 7 ms delay is missed by a loaded machine's spin
    try:
        job = gevent.spawn(c.post, "/inference/v1/generate",
                           json={"model": "test-model", "token_ids": [1, 2, 3], "request_id": "late-1",
                                 "sampling_params": {"max_tokens": 5, "ignore_eos": True}})
        until(lambda: engine.delayed)
    finally:
        engine.fe, engine.frontend = saved
    assert engine.delayed and not engine.scheduler.waiting and not engine.scheduler.running
    assert c.post("/sleep").json() == {"status": "sleeping", "level": 1}          # mode abort
    until(lambda: waiting(c) == 1)                         # through its delay: queued while asleep
    gevent.sleep(0.2)
    assert not job.ready() and running(c) == 0
    assert c.post("/wake_up").json() == {"status": "awake", "tags": None}
    job.join(5)
    assert job.value.status_code == 200
    assert job.value.json()["choices"][0]["finish_reason"] == "length"
    assert len(job.value.json()["choices"][0]["token_ids"]) == 5
