"""The replay refuses what vLLM refuses, repeats itself by default, and keeps its records compactly
(issue 32, item 4): a prompt that fills ``--max-model-len`` is counted as rejected (vLLM's 400),
not run, and an output past the context is cut to it (vLLM 0.34's ``get_max_tokens``); ``--seed`` defaults to a fixed value; the inter-token latencies and the step log
are arrays whose percentiles are exactly those of the lists they replace."""
from __future__ import annotations

import contextlib
import io
import json
import random

import pytest

from generation.engine.replay import ReplayResult, TraceRequest, main, replay
from generation.engine.replay_log import Latencies, LatencyPool, StepLog, StepStats
from generation.engine.scheduler import Scheduler


class FixedStep:
    def step_time(self, num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context):
        return 0.001 + 1e-6 * (num_decode + prefill_tokens)

    def frontend_time(self):
        return 0.0


def sched(max_model_len=100):
    return Scheduler(num_gpu_blocks=1000, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048,
                     max_model_len=max_model_len)


def test_a_prompt_past_the_context_is_refused_and_an_output_cut():
    trace = [TraceRequest(0.0, 32, 68), TraceRequest(0.0, 32, 69), TraceRequest(0.1, 100, 1),
             TraceRequest(0.1, 99, 5)]
    res = replay(sched(), FixedStep(), trace)
    # 32 + 68 = 100 fits exactly; 32 + 69 makes 68, as vLLM 0.34 cuts max_tokens to the room left;
    # a prompt of 100 leaves none (vLLM's 400); 99 leaves one token
    assert sorted(r.num_output for r in res.requests) == [1, 68, 68]
    assert res.rejected == [trace[2]] and res.summary()["rejected"] == 1


def test_a_closed_loop_replaces_a_refused_request_at_once():
    trace = [TraceRequest(0.0, 32 if i % 3 else 100, 8) for i in range(30)]
    res = replay(sched(), FixedStep(), trace, concurrency=4)
    assert (len(res.requests), len(res.rejected)) == (20, 10)
    assert max(step[2] for step in res.steps) == 4


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "--json", "--no-progress"])
    return rc, json.loads(out.getvalue()), err.getvalue()


def test_the_command_line_counts_refused_requests_and_says_why():
    rc, s, err = run_cli("--num-requests", "5", "--prompt-tokens", "1000", "--output-tokens", "100")
    assert rc == 0 and (s["requests"], s["rejected"]) == (5, 0)
    assert "5 of 5 requests need more than --max-model-len 1024 tokens (prompt + output): their outputs are cut" in err
    rc, s, err = run_cli("--num-requests", "5", "--prompt-tokens", "1024", "--output-tokens", "1")
    assert rc == 0 and (s["requests"], s["rejected"]) == (0, 5)
    assert "5 of 5 requests have prompts of --max-model-len 1024 tokens or more: refused" in err


def test_two_runs_without_a_seed_agree():
    argv = ("--rate", "50", "--num-requests", "30", "--prompt-tokens", "100", "--output-tokens", "20",
            "--step-time-jitter", "0.2")
    assert run_cli(*argv)[1] == run_cli(*argv)[1]
    assert run_cli(*argv)[1] != run_cli(*argv, "--seed", "5")[1]


def test_latencies_are_the_list_they_replace():
    rng = random.Random(3)
    values = [rng.choice([0.01, 0.02, 0.015, rng.random()]) for _ in range(2000)]
    lat = Latencies()
    for v in values[:1000]:
        lat.append(v)
    for v in values[1000:]:
        lat.add(v, 1)
    lat.add(0.5, 0)
    assert len(lat) == 2000 and list(lat) == values and lat == values and lat[1234] == values[1234]
    assert len(lat.values) < 2000                                  # runs of equal values are one entry
    res = ReplayResult()
    for ps in ((50, 90, 99), (0, 1, 99.9, 100)):
        assert lat.percentiles(ps) == res.percentiles(values, ps)
    assert Latencies().percentiles() == {"p50": None, "p90": None, "p99": None}
    merged = Latencies(values[:700])                               # a fleet's pods merged, runs kept
    merged.extend(Latencies(values[700:]))
    assert merged == values and merged.percentiles() == lat.percentiles()
    parts = [Latencies(values[:700]), Latencies(), Latencies(values[700:1500]), Latencies(values[1500:])]
    pool = LatencyPool(parts)                                      # the pods read as one, not copied
    assert len(pool) == 2000 and list(pool) == values and pool.sum() == pytest.approx(sum(values))
    for ps in ((50, 90, 99), (0, 1, 99.9, 100)):
        assert pool.percentiles(ps) == res.percentiles(values, ps)
        assert pool.percentiles(ps, bins=3) == res.percentiles(values, ps)   # few ranges: more sorted in each
    assert LatencyPool([Latencies()]).percentiles() == {"p50": None, "p90": None, "p99": None}


def test_the_step_log_reads_as_tuples():
    log = StepLog()
    log.append((0.5, 0.25, 3, 1, 40))
    log.append((0.75, 0.5, 4, 0, 4))
    assert len(log) == 2 and log[1] == (0.75, 0.5, 4, 0, 4) and list(log)[0] == (0.5, 0.25, 3, 1, 40)
    assert log[-1][2] == 4 and list(log.usage) == [0.25, 0.5] and log[::2] == [(0.5, 0.25, 3, 1, 40)]


def test_the_compact_step_log_keeps_the_summary_and_samples():
    rows = [(0.1 * i, (i % 7) / 10, i % 3, 0, 10) for i in range(1, 40)]
    full, stats = StepLog(rows), StepStats(every=1.0)
    for r in rows:
        stats.append(r)
    assert len(stats) == len(full) == 39 and stats.usage_peak == max(full.usage)
    assert stats.usage_sum / len(stats) == pytest.approx(sum(full.usage) / len(full), rel=1e-15)
    assert [t for t, _ in stats] == pytest.approx([0.1, 1.1, 2.1, 3.1])    # the first step of every second
