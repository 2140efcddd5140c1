"""The replay command line's input (issue 31 items 14-16): every impossible trace line or flag
is ``error: FILE:LINE: ...`` (or ``error: --flag ...``) and exit status 2 before anything is
simulated, never a hang, a traceback or a silent acceptance; a trace is bounded in size."""
from __future__ import annotations

import time

import pytest

from generation.engine import replay as rp
from generation.engine import replay_trace

GOOD = '{"arrival": 0.5, "prompt_tokens": 100, "output_tokens": 10}'


def run(capsys, *argv) -> tuple[int, str, str]:
    code = rp.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def trace(tmp_path, *lines: str, raw: bytes | None = None):
    p = tmp_path / "trace.jsonl"
    if raw is not None:
        p.write_bytes(raw)
    else:
        p.write_text("\n".join(lines) + "\n")
    return str(p)


@pytest.mark.parametrize("line,why", [
    ('{"arrival": NaN, "prompt_tokens": 10, "output_tokens": 2}', "not JSON"),            # hung forever
    ('{"arrival": 1e400, "prompt_tokens": 10, "output_tokens": 2}', "not JSON"),
    ('{"arrival": -1, "prompt_tokens": 10, "output_tokens": 2}', "arrival must be a finite number of seconds, at least 0, got -1"),
    ('{"arrival": true, "prompt_tokens": 10, "output_tokens": 2}', "arrival must be a finite number"),
    ('{"arrival": 0, "prompt_tokens": -5, "output_tokens": 2}', "prompt_tokens must be an integer of at least 1, got -5"),
    ('{"arrival": 0, "prompt_tokens": true, "output_tokens": 2}', "prompt_tokens must be an integer of at least 1, got True"),
    ('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 0}', "output_tokens must be an integer of at least 1, got 0"),
    ('{"arrival": 0, "prompt_tokens": 10.5, "output_tokens": 2}', "prompt_tokens must be an integer"),
    ('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 2, "priority": false}', "priority must be an integer, got False"),
    ('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 2, "prefix_tokens": 11, "prefix_group": "g"}',
     "prefix_tokens 11 is more than prompt_tokens 10"),
    ('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 2, "prefix_group": 5}', "prefix_group must be a string"),
    ('{"arrival": 0, "prompt_tokens": 1000000000000, "output_tokens": 2}',                 # 36 s of CPU, then dropped
     "prompt_tokens 1000000000000 is longer than --max-model-len 2048"),
    ('{"arrival": 0, "prompt_tokens": 2049, "output_tokens": 10}', "prompt_tokens 2049 is longer than --max-model-len 2048"),
    ("[1, 2, 3]", "a trace line is a JSON object, not list"),                              # a traceback
    ("[" * 100000 + "]" * 100000, "not JSON"),                                              # RecursionError
    ('{"arrival": 0, "output_tokens": 2}', "prompt_tokens is required"),
])
def test_an_impossible_line_is_named_with_its_file_and_line(tmp_path, capsys, line, why):
    path = trace(tmp_path, GOOD, line)
    t0 = time.monotonic()
    code, out, err = run(capsys, "--trace", path, "--max-model-len", "2048")
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}:2: not a trace request ("), err
    assert why in err, err
    assert "Traceback" not in err
    assert time.monotonic() - t0 < 5


def test_a_trace_that_cannot_be_read_names_the_flag(tmp_path, capsys):
    for path, why in ((tmp_path / "missing.jsonl", "No such file or directory"), (tmp_path, "Is a directory")):
        code, out, err = run(capsys, "--trace", str(path), "--max-model-len", "2048")
        assert (code, out) == (2, "")
        assert err == f"error: --trace {path}: cannot read ({why})\n"


def test_a_byte_order_mark_is_skipped(tmp_path, capsys):
    path = trace(tmp_path, raw=b"\xef\xbb\xbf" + GOOD.encode() + b"\n" + GOOD.encode() + b"\n")
    code, out, err = run(capsys, "--trace", path, "--json", "--max-model-len", "2048")
    assert code == 0, err
    assert '"requests": 2' in out


@pytest.mark.parametrize("flags,why", [
    (("--rate", "-1"), "--rate must be a finite number of requests per second, at least 0, got -1.0"),
    (("--rate", "nan"), "--rate must be a finite number"),
    (("--rate", "inf"), "--rate must be a finite number"),
    (("--concurrency", "-5"), "--concurrency must be an integer of at least 0, got -5"),
    (("--num-requests", "1000000000"), "--num-requests must be from 1 to 1,000,000"),
    (("--num-requests", "0"), "--num-requests must be from 1 to 1,000,000"),
    (("--prompt-tokens", "0"), "--prompt-tokens must be an integer of at least 1, got 0"),
    (("--output-tokens", "-3"), "--output-tokens must be an integer of at least 1, got -3"),
    (("--prompt-tokens", "2049", "--output-tokens", "100"), "--prompt-tokens 2049 is longer than --max-model-len 2048"),
])
def test_an_impossible_flag_is_refused_before_simulating(capsys, flags, why):
    code, out, err = run(capsys, "--max-model-len", "2048", *flags)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and why in err, err


def test_an_unwritable_plot_path_is_refused_before_simulating(tmp_path, capsys):
    t0 = time.monotonic()
    code, out, err = run(capsys, "--max-model-len", "2048", "--num-requests", "50000", "--plot",
                         str(tmp_path / "missing" / "dir" / "plot.png"))
    assert code == 2 and out == ""
    assert err.startswith(f"error: --plot {tmp_path}/missing/dir/plot.png: cannot be written"), err
    assert time.monotonic() - t0 < 3                 # not after a 50,000-request simulation
    ok = tmp_path / "plot.png"
    code, out, err = run(capsys, "--max-model-len", "2048", "--num-requests", "5", "--plot", str(ok))
    assert code == 0, err
    assert ok.stat().st_size > 1000


def test_a_trace_is_bounded(tmp_path, capsys, monkeypatch):
    """Memory grew ~800 bytes per line (10 M lines died at 6 GB): past MAX_TRACE_REQUESTS the
    line that goes over is named (the bound is lowered here to keep the test short)."""
    monkeypatch.setattr(replay_trace, "MAX_TRACE_REQUESTS", 3)     # the trace's module (the replay's name too)
    path = trace(tmp_path, GOOD, "", GOOD, GOOD, GOOD)
    code, out, err = run(capsys, "--trace", path)
    assert code == 2
    assert err == f"error: {path}:5: more than 3 requests (a replay holds every request in memory); split the trace\n"
    assert len(rp.read_trace(trace(tmp_path, GOOD, GOOD, GOOD))) == 3
