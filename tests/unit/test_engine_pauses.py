"""The engine's pauses (generation.engine.perf.step_model.EnginePauses): a seeded Poisson process
of host-side hiccups that hold every request in flight, fitted on the traced runs' TTFT p99
(``python -m generation.engine.perf.fit --pauses``)."""
from __future__ import annotations

import json
import os
import random

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.engine.perf.step_model import EnginePauses, PerfConstants
from generation.engine.replay import replay
from generation.engine.step_config import resolve_step_settings

from test_replay_golden import GOLDEN_PROFILE, _clients, _digest, _sched, _trace


def test_back_to_back_steps_lose_rate_times_length_of_their_time():
    p = EnginePauses(0.5, 0.02, random.Random(0))
    t = extra = 0.0
    while t < 4000.0:
        e = p.stall(t, 0.01)
        extra += e
        t += 0.01 + e
    assert extra == pytest.approx(0.5 * 4000 * 0.02, rel=0.05)


def test_a_step_planned_during_a_pause_waits_out_the_rest_of_it():
    p = EnginePauses(1.0, 0.05, random.Random(3))
    p.next = 10.0
    assert p.stall(9.0, 0.5) == 0.0                  # none begins before the step ends
    assert p.stall(10.02, 0.01) == pytest.approx(0.03)   # began at 10.0: 30 ms of it left
    assert p.next > 10.0
    p.next = 20.0
    p.stall(25.0, 0.01)                               # those over while the engine was idle: skipped
    assert p.next + 0.05 > 25.0


def test_the_same_seed_draws_the_same_pauses():
    a, b = EnginePauses(2.0, 0.01, random.Random("7-pauses")), EnginePauses(2.0, 0.01, random.Random("7-pauses"))
    assert [a.stall(0.1 * i, 0.05) for i in range(500)] == [b.stall(0.1 * i, 0.05) for i in range(500)]


def test_a_profile_refuses_pauses_that_hold_the_engine_half_the_time():
    PerfConstants(pause_rate=0.1, t_pause=0.03).validate()
    for bad in (dict(pause_rate=10.0, t_pause=0.05), dict(pause_rate=1e6, t_pause=1e-7),
                dict(pause_rate=-1.0, t_pause=0.01)):
        with pytest.raises(ConfigError, match="pause_rate|t_pause"):
            PerfConstants(**bad).validate()


@pytest.fixture(scope="module")
def paused_model(tmp_path_factory):
    with open(GOLDEN_PROFILE.format("h100"), encoding="utf-8") as fh:
        doc = json.load(fh)
    doc["constants"].update(pause_rate=2.0, t_pause=0.03)
    path = os.path.join(tmp_path_factory.mktemp("profile"), "h100-paused.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    argv = ["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--gpu", "H100",
            "--max-model-len", "8192", "--seed", "0", "--step-time-profile", path]
    return resolve_step_settings(load_config(argv)).step_time


def test_pauses_lengthen_the_tail_and_group_decoding_still_matches_token_by_token(paused_model):
    plain_model = resolve_step_settings(load_config(
        ["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--gpu", "H100", "--max-model-len",
         "8192", "--seed", "0", "--step-time-profile", GOLDEN_PROFILE.format("h100")])).step_time
    trace = _trace(5, 400, 20.0, prompt=(64, 900), output=(20, 200), groups=2, prompts=2)
    for kw in (dict(), dict(num_gpu_blocks=300, max_num_seqs=16)):
        fast = replay(_sched(**kw), paused_model, trace, pause_seed=4)
        slow = replay(_sched(**kw), paused_model, trace, group_decode=False, pause_seed=4)
        assert _digest(fast) == _digest(slow) and _clients(fast) == _clients(slow)
    paused = replay(_sched(), paused_model, trace, pause_seed=4)
    again = replay(_sched(), paused_model, trace, pause_seed=4)
    other = replay(_sched(), paused_model, trace, pause_seed=5)
    plain = replay(_sched(), plain_model, trace)
    assert _digest(paused) == _digest(again) and _digest(paused) != _digest(other)
    assert paused.duration > plain.duration
    ttft = lambda res: sorted(res.times(r)[0] - r.arrival for r in res.requests)    # noqa: E731
    assert sum(ttft(paused)) > sum(ttft(plain))
    assert ttft(paused)[-4] > ttft(plain)[-4]        # the p99


def test_a_step_of_years_draws_its_pauses_at_once():
    """A GPU described a million times too slow made steps of years, and the pauses were drawn
    one by one through them (the server's hub froze): past MAX_PAUSE_DRAWS, their expected number."""
    import random as _random
    import time as _time
    from generation.engine.perf.stalls import EnginePauses
    p = EnginePauses(0.2, 0.025, _random.Random(0))
    t0 = _time.perf_counter()
    extra = p.stall(0.0, 1e9)
    assert _time.perf_counter() - t0 < 0.5 and extra == pytest.approx(0.2 * 0.025 * 1e9, rel=1e-3)
