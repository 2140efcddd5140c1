"""bench/trace_compare.py: a traced run beside its replay, request by request.  The pure tables
on hand-made requests (exact values), and one short real comparison end to end.  Unit tier."""
from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
_spec = importlib.util.spec_from_file_location("trace_compare", os.path.join(ROOT, "bench", "trace_compare.py"))
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)


def _row(i, arrival, ttft, e2e=1.0, prompt=100):
    return (i, arrival, ttft, e2e, prompt)


def test_episodes_join_close_arrivals_and_drop_small_runs():
    rows = [_row(0, 0.0, 0.5), _row(1, 0.5, 0.6), _row(2, 1.2, 0.7),      # one run of three
            _row(3, 5.0, 0.9), _row(4, 5.5, 0.9),                          # two: too small
            _row(5, 9.0, 0.05)]                                            # under the threshold
    assert tc.episodes(rows, 0.2) == [{"start": 0.0, "end": 1.2, "n": 3, "max_ttft": 700.0}]
    assert tc.episodes(rows, 0.2, lo=0.4) == []                            # the window cuts the run


def test_windows_pair_real_and_replayed_requests():
    real = [_row(0, 0.0, 0.010, 1.010), _row(1, 1.0, 0.030, 2.030), _row(2, 12.0, 0.020, 1.020)]
    ours = [_row(0, 0.0, 0.020, 1.120), _row(1, 1.0, 0.020, 2.120), _row(2, 12.0, 0.020, 1.020)]
    w = tc.windows(real, ours, 10.0)
    assert [x["start"] for x in w] == [0.0, 10.0] and [x["n"] for x in w] == [2, 1]
    assert w[0]["ttft_real"] == pytest.approx(20.0) and w[0]["ttft_ours"] == pytest.approx(20.0)
    assert w[0]["decode_real"] == pytest.approx(1500.0) and w[0]["decode_ours"] == pytest.approx(1600.0)
    assert w[0]["decode_err"] == pytest.approx(100 * (1600 / 1500 - 1)) and w[1]["decode_err"] == pytest.approx(0.0)


def test_aligned_split_by_the_same_prompts_previous_request():
    rows = [_row(0, 0.0, 0.05, 2.0, 576), _row(1, 0.0, 0.05, 2.0, 570),
            _row(100, 1.0, 0.10, 2.0, 576),      # its prompt's previous request (0) still runs
            _row(101, 9.0, 0.06, 2.0, 570),
            _row(200, 10.0, 0.07, 2.0, 576)]     # request 100 finished 7 s before
    s = tc.aligned_split(rows, 0.5, 20.0)
    assert (s["aligned_n"], s["other_n"]) == (2, 1)
    assert s["aligned"] == pytest.approx(85.0) and s["other"] == pytest.approx(60.0)
    bands = {tuple(b["band_s"]): (b["n"], b["ttft"]) for b in s["by_predecessor"]}
    assert bands[(-1e9, 0.0)] == (1, pytest.approx(100.0)) and bands[(5.0, 1e9)] == (1, pytest.approx(70.0))
    assert bands[(0.0, 1.0)] == (0, None)


def test_a_traced_run_beside_its_replay(capsys):
    exp = next(e for e in tc.gt.load_experiments() if e["name"] == "20260217-155451-llama-2-7b-tp1-codegen")
    c = tc.compare(exp, width=300.0)
    assert [w["start"] for w in c["windows"]] == [0.0, 300.0, 600.0, 900.0, 1200.0]
    assert sum(w["n"] for w in c["windows"]) == 9000
    assert len(c["stages"]) == 2 and all(s["aligned_real"]["aligned_n"] + s["aligned_real"]["other_n"] > 0
                                         for s in c["stages"])
    tc.print_comparison(c)
    assert "block-aligned prompts" in capsys.readouterr().out


def test_late_requests_and_whether_the_server_paused():
    # (index, arrival, ttft, e2e, prompt): request 2 waits 30 ms longer on the real server, and
    # request 1, decoding all through that wait, took 30 ms longer too: a pause of everything
    real = [_row(0, 0.0, 0.02, 1.00), _row(1, 0.5, 0.02, 2.03), _row(2, 1.0, 0.05, 1.03), _row(3, 3.0, 0.02, 1.00)]
    ours = [_row(0, 0.0, 0.02, 1.00), _row(1, 0.5, 0.02, 2.00), _row(2, 1.0, 0.02, 1.00), _row(3, 3.0, 0.02, 1.00)]
    late = tc.late_requests(real, ours, 0.0, 10.0)
    assert (late["n"], late["total"]) == (1, 4)
    assert late["excess_ms"] == pytest.approx(30.0) and late["others_ms"] == pytest.approx(30.0)
    assert tc.late_requests(real, ours, 2.0, 10.0) == {"n": 0, "total": 1, "excess_ms": None, "others_ms": None}
