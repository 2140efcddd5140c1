"""The replay's command line, a public interface other harnesses score (issue 28 item 5):
``python -m generation.engine.replay`` with ``--per-request`` JSON Lines, the server's engine
flags (``-tp``, ``--vllm-version``, ...), ``--max-waiting-queue-length`` with its rejected
count, progress on stderr for long runs, and where the plot went."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generation.config.cli import load_config
from generation.engine.replay import _Watch, main, replay, scheduler_for, synthetic_trace
from generation.engine.step_config import resolve_step_settings

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--num-requests", "3", "--prompt-tokens", "100", "--output-tokens", "4", "--no-progress"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_per_request_file_has_one_record_per_finished_request(tmp_path, capsys):
    path = tmp_path / "per.jsonl"
    rc, out, err = run(capsys, *SMALL, "--json", "--per-request", str(path))
    assert rc == 0 and json.loads(out)["requests"] == 3
    assert err == f"per-request timings (3 requests): {path}\n"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 3
    for rec in records:
        assert list(rec) == ["arrival", "prompt_tokens", "output_tokens", "ttft", "e2e", "itl", "cached_tokens",
                             "preemptions"]
        assert (rec["arrival"], rec["prompt_tokens"], rec["output_tokens"], rec["preemptions"]) == (0.0, 100, 4, 0)
        assert 0 < rec["ttft"] < rec["e2e"]
        assert rec["e2e"] == pytest.approx(rec["ttft"] + 3 * rec["itl"], rel=1e-9)   # mean ITL over 3 gaps


def test_a_one_token_answer_has_no_itl(tmp_path, capsys):
    path = tmp_path / "per.jsonl"
    rc, _, _ = run(capsys, "--num-requests", "1", "--prompt-tokens", "100", "--output-tokens", "1", "--no-progress", "--json",
                   "--per-request", str(path))
    assert rc == 0 and json.loads(path.read_text())["itl"] is None


def test_max_waiting_queue_length_rejects_as_the_server_does(capsys):
    # 200 requests at once, 4 seats: 4 take the seats at once, 10 wait beyond them, 186 are refused
    flood = ["--num-requests", "200", "--prompt-tokens", "100", "--max-num-seqs", "4", "--no-progress", "--json"]
    rc, out, _ = run(capsys, *flood, "--max-waiting-queue-length", "10")
    s = json.loads(out)
    assert rc == 0 and (s["requests"], s["rejected"]) == (14, 186)
    rc, out, _ = run(capsys, *flood)                 # vLLM has no such limit: only when given
    s = json.loads(out)
    assert (s["requests"], s["rejected"]) == (200, 0)
    rc, out, _ = run(capsys, *flood[:-1], "--max-waiting-queue-length", "10")
    assert "14 requests in " in out and ", 186 rejected (--max-waiting-queue-length 10)" in out


def test_engine_flags_the_fidelity_data_needs_are_accepted(capsys):
    rc, out, err = run(capsys, *SMALL, "--gpu", "A100-80GB", "-tp", "2", "--max-num-seqs", "64",
                       "--max-num-batched-tokens", "2048", "--max-model-len", "4096", "--gpu-memory-utilization",
                       "0.9", "--vllm-version", "0.15.1", "--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert rc == 0 and err == ""
    assert out.splitlines()[0].startswith("step engine: gpu=A100-80GB model=meta-llama/Llama-3.1-8B-Instruct")
    assert "max-num-seqs=64 max-num-batched-tokens=2048" in out and "vLLM 0.15.1 defaults" in out
    assert "blocks of 16)" in out
    rc, out, _ = run(capsys, *SMALL, "--num-gpu-blocks-override", "500", "--tensor-parallel-size", "2",
                     "--no-enable-prefix-caching", "--kv-offloading-size", "4")
    assert rc == 0 and "GPU KV cache size: 32,000 tokens (500 blocks of 64)" in out
    assert "CPU KV cache (offloading): 32,768 tokens (512 blocks)" in out      # 4 GiB / (64 x 64 KiB x 2 ranks)


def test_errors_are_one_line_and_exit_2(capsys):
    rc, _, err = run(capsys, *SMALL, "--vllm-version", "9.0")
    # the flag named first, as the server names it (``python app.py`` prints the same line)
    assert rc == 2 and err.startswith("error: --vllm-version: vllm-version 9.0 is newer than") and err.count("\n") == 1
    rc, _, err = run(capsys, *SMALL, "--per-request", "/nonexistent-dir/x.jsonl")
    # checked before the run, the flag named (it was an [Errno 2] after the whole replay)
    assert rc == 2 and err == ("error: --per-request /nonexistent-dir/x.jsonl: cannot be written (No such file or "
                               "directory)\n")


def test_the_default_prompt_fits_the_default_context(tmp_path, capsys):
    """Without --prompt-tokens the prompt is 1024 tokens or what --max-model-len leaves beside the
    output: a bare ``python -m generation.engine.replay`` (the simulator's 1024-token context for
    a name without a config) refused all 200 of its requests."""
    for extra, prompt in (((), 1000), (("--max-model-len", "4096"), 1024)):
        path = tmp_path / "r.jsonl"
        rc, out, err = run(capsys, "--num-requests", "2", "--output-tokens", "24", "--no-progress", "--json",
                           "--per-request", str(path), *extra)
        assert rc == 0 and json.loads(out)["requests"] == 2 and "refused" not in err
        assert [json.loads(x)["prompt_tokens"] for x in path.read_text().splitlines()] == [prompt, prompt]


def test_the_plot_has_ttft_and_tpot_on_their_own_axes_and_its_path_is_said(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    rc, _, err = run(capsys, *SMALL, "--plot", str(path))
    assert rc == 0 and err == f"plot: {path}\n" and path.stat().st_size > 10_000


def test_progress_lines_on_a_long_run(capsys):
    cfg = load_config(["--latency-calculator", "step", "--max-model-len", "2048"], env={})
    st = resolve_step_settings(cfg)
    sched = scheduler_for(st, cfg.max_model_len)
    trace = synthetic_trace(2, 10, 1100)            # 1,100 steps (within the context: vLLM refuses more)
    watch = _Watch(sched, len(trace), None, progress=True)
    watch.next_line = 0.0                           # as if 10 s had passed
    result = replay(sched, st.step_time, trace)
    watch.close()
    assert len(result.requests) == 2
    assert capsys.readouterr().err.startswith("replay: 0/2 requests, ")
    assert watch.done == 2


def test_python_dash_m_keeps_working(tmp_path):
    r = subprocess.run([sys.executable, "-m", "generation.engine.replay", *SMALL, "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["requests"] == 3
    r = subprocess.run([sys.executable, "-m", "generation.engine.replay", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--per-request FILE" in r.stdout and "-tp" in r.stdout


def test_a_closed_loop_sends_the_next_request_when_the_client_got_the_last_token():
    # a benchmark's client sends its next request once it has read the answer's end: after the
    # frontend's output latency, not at the engine's step end (the fleet's P/D hand-off, too)
    from generation.config.cli import load_config
    from generation.engine.replay import TraceRequest, replay, scheduler_for
    from generation.engine.step_config import resolve_step_settings
    cfg = load_config(["--latency-calculator", "step", "--max-model-len", "2048"])
    st = resolve_step_settings(cfg)
    res = replay(scheduler_for(st, cfg.max_model_len), st.step_time,
                 [TraceRequest(0.0, 200, 20) for _ in range(6)], concurrency=2)
    reqs = sorted(res.requests, key=lambda r: r.arrival)
    ends = sorted(res.times(r)[1] for r in reqs[:4])
    assert [r.arrival for r in reqs[2:]] == ends
    assert all(res.times(r)[1] > r.finished_at for r in reqs)        # the client's end is later


def test_a_sessions_turns_share_their_blocks_in_the_replay_as_in_the_fleet(tmp_path):
    # session_id was read by the fleet's trace reader alone: the single-pod replay ignored it
    # (no hits), so one pod of the fleet and the replay gave different figures for one trace
    import json
    from generation.engine.replay import read_trace
    from generation.fleet.traces import read_fleet_trace
    path = tmp_path / "sessions.jsonl"
    lines, t = [], 0.0
    for s in range(3):
        for turn in range(3):
            lines.append({"arrival": t, "prompt_tokens": 300 + 200 * turn, "output_tokens": 20, "session_id": f"s{s}"})
            t += 0.5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(str(path), 4096)
    assert [r.prompt for r in trace[:3]] == ["session:s0"] * 3
    assert trace == read_fleet_trace(str(path))
    from generation.config.cli import load_config
    from generation.engine.replay import replay, scheduler_for
    from generation.engine.step_config import resolve_step_settings
    cfg = load_config(["--latency-calculator", "step", "--max-model-len", "4096"])
    st = resolve_step_settings(cfg)
    res = replay(scheduler_for(st, cfg.max_model_len), st.step_time, trace)
    later = [r.cached_tokens for r in sorted(res.requests, key=lambda r: r.arrival)][1:3]
    assert later == [256, 448]          # the earlier turns' prompt blocks (64 tokens each)


def test_a_moe_replay_says_how_many_kernel_compiles_it_paid(capsys):
    """A MoE engine's first eager steps compile fused-MoE kernels (0.75 s each, README: Fidelity)
    and own a short replay's TTFT tail: the summary counts them, the JSON too; a dense model's
    says nothing."""
    moe = ["--model", "mistralai/Mixtral-8x7B-v0.1", "-tp", "2", "--max-model-len", "4096",
           "--num-requests", "20", "--rate", "5", "--prompt-tokens", "1500", "--output-tokens", "4", "--no-progress"]
    rc, out, _ = run(capsys, *moe, "--json")
    n = json.loads(out)["moe_kernel_compiles"]
    assert rc == 0 and n >= 1
    rc, out, _ = run(capsys, *moe)
    assert f"  MoE kernel compiles: {n} of 750 ms, at the first eager step" in out
    rc, out, _ = run(capsys, *SMALL)
    assert rc == 0 and "MoE kernel compiles" not in out


def test_the_replay_takes_the_models_context_length_as_the_server_does(capsys, monkeypatch):
    """Without --max-model-len a known model's own context length applies (the server's and vLLM's
    default), so a 2,000-token prompt is served; a name without a config keeps 1,024."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, _ = run(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--num-requests", "2",
                     "--prompt-tokens", "2000", "--output-tokens", "4", "--no-progress", "--json")
    assert rc == 0 and json.loads(out)["requests"] == 2
    rc, _, err = run(capsys, "--num-requests", "2", "--prompt-tokens", "2000", "--output-tokens", "4", "--no-progress")
    assert rc == 2 and "is longer than --max-model-len 1024" in err
