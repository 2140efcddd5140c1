"""A real server's streams across a dev-mode ``/sleep`` (vLLM 0.34's ``EngineCore.sleep`` pauses
the scheduler first): the hub emits them (server/sse_emitter.py), so what reaches the socket is
checked here.  ``mode=keep`` freezes a step-mode stream until ``/wake_up``, ``abort`` (default)
ends it with vLLM's abort chunk, and a request sent while asleep is answered after the wake-up."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from support import sse_events

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
BODY = {"model": "test-model", "prompt": "hi", "max_tokens": 4000, "ignore_eos": True, "stream": True}


class Reader(threading.Thread):
    """A stream read as it comes: ``lines`` grows with every ``data:`` line."""

    def __init__(self, base: str, body: dict):
        super().__init__(daemon=True)
        self.base, self.body, self.lines = base, body, []

    def run(self):
        with httpx.stream("POST", self.base + "/v1/completions", json=self.body, timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.lines.append(line)


def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def step_server(sim_server):
    return sim_server("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "8192",
                      "--enable-sleep-mode", env=DEV)


def test_keep_freezes_a_stream_and_abort_ends_it(step_server):
    base = step_server
    reader = Reader(base, BODY)
    reader.start()
    wait_for(lambda: len(reader.lines) >= 20)
    r = httpx.post(base + "/sleep", params={"mode": "keep", "level": "0"})
    assert r.json() == {"status": "sleeping", "level": 0}
    time.sleep(0.3)                                     # what the step in progress made is sent
    frozen = len(reader.lines)
    time.sleep(0.5)
    assert len(reader.lines) == frozen and reader.is_alive()
    assert httpx.post(base + "/wake_up").json() == {"status": "awake", "tags": None}
    wait_for(lambda: len(reader.lines) > frozen + 10)
    assert httpx.post(base + "/sleep").json() == {"status": "sleeping", "level": 1}     # abort
    reader.join(10)
    events = sse_events("\n\n".join(reader.lines) + "\n\n")
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "abort"
    assert frozen + 10 < len(events) - 1 < 4000
    # asleep: a new request is queued, answered after the wake-up
    out = {}
    t = threading.Thread(target=lambda: out.update(r=httpx.post(base + "/v1/completions", timeout=30, json={
        **BODY, "max_tokens": 3, "stream": False})))
    t.start()
    time.sleep(0.5)
    assert "r" not in out
    httpx.post(base + "/wake_up")
    t.join(10)
    assert out["r"].status_code == 200 and out["r"].json()["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("itl_flags", [(), ("--inter-token-latency-std-dev", "2ms")],
                         ids=["token-schedule", "per-token-deadlines"])
def test_keep_freezes_a_default_model_stream_until_resume(sim_server, itl_flags):
    """The default latency model too (generation.engine.freeze): vLLM's PAUSED_ALL plans no step,
    so a keep pause stops the hub's stream (its TokenSchedule, or its per-token deadlines when
    the latency varies) until ``/resume``, then it goes on to its end, later by the pause."""
    base = sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "10ms", *itl_flags,
                      "--max-model-len", "8192", "--enable-sleep-mode", env=DEV)
    reader = Reader(base, {**BODY, "max_tokens": 150})             # 1.5 s alone: 1.25 s left at the pause
    reader.start()
    wait_for(lambda: len(reader.lines) >= 20)
    assert httpx.post(base + "/pause", params={"mode": "keep"}).json() == {"status": "paused"}
    time.sleep(0.3)                                     # what was on its way is read
    frozen = len(reader.lines)
    time.sleep(0.5)
    assert len(reader.lines) == frozen < 150 and reader.is_alive()
    assert httpx.post(base + "/resume").json() == {"status": "resumed"}
    reader.join(15)
    events = sse_events("\n\n".join(reader.lines) + "\n\n")
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert len(events) - 1 == 150


def test_keep_holds_a_default_model_first_token_by_the_pause(sim_server):
    """A keep pause during the first token's wait (the hub's schedule from token 0) moves the
    first token by the pause: the server's own TTFT sum says so (vLLM's prefill step waits too)."""
    from support import metric, scrape
    base = sim_server("--time-to-first-token", "1s", "--inter-token-latency", "20ms", "--enable-sleep-mode",
                      env=DEV)
    before = metric(scrape(base), "vllm:time_to_first_token_seconds_sum")
    reader = Reader(base, {**BODY, "max_tokens": 5})
    reader.start()
    time.sleep(0.3)
    assert httpx.post(base + "/pause", params={"mode": "keep"}).json() == {"status": "paused"}
    time.sleep(1.0)
    assert not reader.lines and reader.is_alive()
    httpx.post(base + "/resume")
    reader.join(15)
    assert len(reader.lines) == 6                      # 5 tokens and [DONE]
    assert metric(scrape(base), "vllm:time_to_first_token_seconds_sum") - before >= 1.0 + 0.9
