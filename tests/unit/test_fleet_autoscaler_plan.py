"""The fleet's autoscaler rules (WVA's saturation analyzer), its YAML, the trace readers
(JSON Lines with sessions, Azure LLM inference and BurstGPT CSV), and the capacity planner
(bisection, shares, merge) with its command line.  Unit tier, virtual time, no network."""
from __future__ import annotations

import json
import os

import pytest

from generation.fleet.autoscaler import Autoscaler, ScalingPolicy, load_policy
from generation.fleet.traces import detect_format, prefix_workload, read_fleet_trace

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fleet")


def test_saturated_pods_scale_up():
    a = Autoscaler(ScalingPolicy(max_replicas=4))
    assert a.decide(15, [(0.75, 0), (0.2, 12)], 2) == 1          # both saturated (KV, queue)
    assert a.decisions[-1][3] == "all saturated"
    assert a.decide(30, [(0.65, 0), (0.65, 0)], 2) == 1          # spare KV 0.05 < 0.1
    assert a.decisions[-1][3].startswith("spare kv")
    assert a.decide(45, [(0.1, 8), (0.1, 8)], 2) == 1            # spare queue 2 < 3
    assert a.decide(60, [(0.1, 1), (0.2, 2)], 2) == 0            # room left
    assert a.decide(75, [(0.9, 20)] * 4, 4) == 0                 # at max_replicas
    assert a.decisions[-1][3] == "saturated at max_replicas"
    big = Autoscaler(ScalingPolicy(scale_up_step=3, max_replicas=4))
    assert big.decide(0, [(0.9, 0)], 2) == 2                     # capped by max_replicas


def test_scale_down_after_the_stabilization_window():
    a = Autoscaler(ScalingPolicy(scale_down_stabilization=30, scrape_interval=15))
    quiet = [(0.1, 0)] * 3
    assert [a.decide(t, quiet, 3) for t in (0, 15, 30)] == [0, 0, -1]
    assert [d[3] for d in a.decisions] == ["stabilizing", "stabilizing", "spare capacity"]
    assert a.decide(45, quiet, 2) == 0                           # the window starts again
    assert a.decide(60, [(0.5, 0), (0.5, 0)], 2) == 0            # one pod fewer would be saturated
    assert a.decide(75, [(0.1, 0)], 1) == 0                      # min_replicas
    b = Autoscaler(ScalingPolicy(scale_down_stabilization=30))
    b.decide(0, quiet, 3)
    b.decide(15, [(0.9, 0)] * 3, 3)                              # a burst resets the window
    assert b.decide(30, quiet, 3) == 0 and b.calm_since == 30


def test_a_users_yaml_with_wva_keys(tmp_path):
    p = tmp_path / "wva.yaml"
    p.write_text("autoscaler:\n  kvCacheThreshold: 0.8\n  queueLengthThreshold: 5\n  maxReplicas: 9\n"
                 "  startup_delay: 30\n")
    pol = load_policy(str(p), scrape_interval=5, min_replicas=None)
    assert (pol.kv_cache_threshold, pol.queue_length_threshold, pol.max_replicas, pol.startup_delay,
            pol.scrape_interval, pol.min_replicas) == (0.8, 5.0, 9, 30.0, 5, 1)
    p.write_text("kvCacheTreshold: 0.8\n")
    with pytest.raises(ValueError, match="unknown key 'kvCacheTreshold' \\(WVA's keys: kvCacheThreshold, "):
        load_policy(str(p))
    p.write_text("kvCacheThreshold: high\n")
    with pytest.raises(ValueError, match="kvCacheThreshold must be a number"):
        load_policy(str(p))
    with pytest.raises(ValueError, match=r"need 1 <= --min-pods / minReplicas \(5\) <= --max-pods / maxReplicas \(2\)"):
        load_policy(None, min_replicas=5, max_replicas=2)
    p.write_text("kvCacheThreshold: 2\n")           # a YAML-only setting: its WVA key
    with pytest.raises(ValueError, match=r"kvCacheThreshold must be in \(0, 1\], got 2"):
        load_policy(str(p))


def test_azure_and_burstgpt_traces():
    az = os.path.join(FIX, "azure_code_sample.csv")
    bg = os.path.join(FIX, "burstgpt_sample.csv")
    assert detect_format(az) == "azure" and detect_format(bg) == "burstgpt"
    reqs = read_fleet_trace(az)
    assert [(round(r.arrival, 6), r.prompt_tokens, r.output_tokens) for r in reqs][:3] == \
        [(0.0, 4808, 10), (4.314579, 3180, 8), (4.56941, 110, 27)]
    assert len(reqs) == 6
    counts: dict = {}
    cut = read_fleet_trace(az, start=4.0, duration=4.0, speedup=2.0, max_model_len=4096, counts=counts)
    # from 4.31 s: the 7433-token prompt is past the context; arrivals halved from the window's start
    assert [(r.prompt_tokens, r.output_tokens) for r in cut] == [(3180, 8), (110, 27), (20, 1)]
    assert counts == {"refused": 1}
    assert cut[0].arrival == pytest.approx(0.314579 / 2)
    b = read_fleet_trace(bg)                                     # the failed request (0 tokens) skipped
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in b] == \
        [(0.0, 472, 18), (113.0, 417, 217), (135.0, 1360, 343), (135.0, 56, 12)]


def test_sessions_name_their_blocks_so_later_turns_hit_the_cache():
    from generation.engine.replay import trace_block_hashes
    reqs = read_fleet_trace(os.path.join(FIX, "sessions.jsonl"))
    assert [r.prompt for r in reqs] == ["session:a", "session:7", "session:a", None]
    first, _, later, plain = [trace_block_hashes(r, 16) for r in reqs]
    assert later[:len(first)] == first and first[:16] == [("sys", i) for i in range(16)]
    assert plain is None


def test_bad_traces_name_the_line(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,x\n")
    with pytest.raises(ValueError, match=r"t.csv:2: not a trace row"):
        read_fleet_trace(str(p))
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a known trace"):
        read_fleet_trace(str(p))
    j = tmp_path / "t.jsonl"
    j.write_text('{"arrival": 0, "prompt_tokens": 5, "output_tokens": 1, "session_id": [1]}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:1: .*session_id"):
        read_fleet_trace(str(j))


def test_prefix_workload_is_seeded_sessions_under_shared_prompts():
    a = prefix_workload(5, 10, groups=4, turns=2, seed=1)
    assert a == prefix_workload(5, 10, groups=4, turns=2, seed=1) != prefix_workload(5, 10, groups=4, turns=2, seed=2)
    assert {r.prefix_group for r in a} <= {f"sys{i}" for i in range(4)}
    turns = {}
    for r in a:
        turns.setdefault(r.prompt, []).append(r)
    assert all(len(v) == 2 and v[1].prompt_tokens == v[0].prompt_tokens + 128 + 256 for v in turns.values())


SERVER = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096"]


def test_the_planner_bisects_to_the_fewest_pods(monkeypatch):
    from generation.fleet import planner
    calls = []

    def fake(config, trace, pods, slo_ttft, slo_itl, server_args=(), seed=0):
        calls.append(pods)
        need = 13 if config["router"] == "round-robin" else 9
        ok = pods >= need
        return {"pods": pods, "ttft_p99": 0.5 * need / pods, "itl_p99": 0.01, "ok": ok, "gave_up": not ok}

    monkeypatch.setattr(planner, "evaluate", fake)
    from generation.engine.replay import TraceRequest
    trace = [TraceRequest(0.0, 10, 1), TraceRequest(3600.0, 10, 1)]
    row = planner.search({"gpu": "H100", "tp": 2, "router": "round-robin"}, trace, 1.0, 0.05)
    assert calls == [1, 2, 4, 8, 16, 12, 14, 13]
    assert (row["pods"], row["gpus"], row["gpu_hours"], row["replays"]) == (13, 26, 26.0, 8)
    assert row["margin"] == pytest.approx(min(1 - 0.5, 1 - 0.01 / 0.05))
    none = planner.search({"gpu": "H100", "tp": 1, "router": "weighted"}, trace, 1.0, 0.05, max_pods=8)
    assert none["pods"] is None and none["gpu_hours"] is None
    configs = planner.configurations(["H100", "A100"], [1, 2], ["round-robin", "weighted"])
    assert len(configs) == 8
    shares = [planner.plan(trace, configs, 1.0, 0.05, share=(i, 3), workers=1) for i in range(3)]
    assert sorted(len(s) for s in shares) == [2, 3, 3]
    assert sorted((r["gpu"], r["tp"], r["router"]) for s in shares for r in s) == \
        sorted((c["gpu"], c["tp"], c["router"]) for c in configs)


@pytest.mark.parametrize("prefix_need,full_need", [(7, 9), (12, 9), (9, 9), (1, 5), (300, 9)])
def test_a_long_trace_is_bracketed_on_its_prefix_then_galloped_from_there(monkeypatch, prefix_need, full_need):
    """A trace of STAGED_MIN requests or more: the search first runs on its first eighth, then
    the whole trace's search starts at that answer and gallops to the same answer the doubling
    and bisection give, with few replays of the whole trace."""
    from generation.engine.replay import TraceRequest
    from generation.fleet import planner
    trace = [TraceRequest(i * 1.0, 10, 2) for i in range(4000)]
    calls = []

    def fake(config, part, pods, slo_ttft, slo_itl, server_args=(), seed=0):
        need = full_need if len(part) == len(trace) else prefix_need
        calls.append((len(part), pods))
        return {"pods": pods, "ttft_p99": 0.1, "itl_p99": 0.01, "ok": pods >= need, "gave_up": pods < need}

    monkeypatch.setattr(planner, "evaluate", fake)
    row = planner.search({"gpu": "H100", "tp": 1, "router": "least-queue"}, trace, 1.0, 0.05)
    assert row["pods"] == full_need and row["prefix_pods"] == (prefix_need if prefix_need <= 256 else None)
    assert {n for n, _ in calls} == {500, 4000}                           # the first eighth, then the whole
    full = [p for n, p in calls if n == 4000]
    assert full_need in full and full_need - 1 in full and len(full) <= (8 if prefix_need > 256 else 6)
    assert row["replays"] == len(calls)
    monkeypatch.setattr(planner, "STAGED_MIN", 10**9)                     # the plain search: the same answer
    assert planner.search({"gpu": "H100", "tp": 1, "router": "least-queue"}, trace, 1.0, 0.05)["pods"] == full_need


def test_plan_shares_and_merge_on_the_command_line(tmp_path, capsys):
    from generation.fleet.cli import main
    outs = []
    for i in range(2):
        out = tmp_path / f"share-{i}.json"
        assert main(["plan", "--trace", os.path.join(FIX, "azure_code_sample.csv"), "--slo-ttft", "2",
                     "--slo-itl", "0.1", "--gpus", "H100", "--routers", "round-robin,least-queue",
                     "--share", f"{i}/2", "--output", str(out), "--workers", "1", *SERVER]) == 0
        outs.append(str(out))
        assert json.loads(out.read_text())["share"] == [i, 2]
    capsys.readouterr()
    assert main(["merge", *outs]) == 0
    text = capsys.readouterr().out
    assert "round-robin" in text and "least-queue" in text and "margin" in text
    rows = json.loads(open(outs[0]).read())["rows"]
    assert rows[0]["pods"] == 1 and rows[0]["gpu"] == "H100"
    assert main(["merge", outs[0], outs[0]]) == 2          # a share given twice: its rows were doubled
    assert "comes twice: give each share's result once" in capsys.readouterr().err


def test_cli_errors_are_one_line(capsys):
    from generation.fleet.cli import main
    assert main(["replay", "--pods", "2", *SERVER]) == 2
    assert "give --trace FILE or --prefix-heavy" in capsys.readouterr().err
    assert main(["plan", "--trace", os.path.join(FIX, "burstgpt_sample.csv"), "--slo-ttft", "0", "--slo-itl",
                 "0.1", *SERVER]) == 2
    assert "--slo-ttft" in capsys.readouterr().err
    assert main(["replay", "--prefix-heavy", "--rate", "2", "--seconds", "2", "--router", "nope", *SERVER]) == 2
    assert "--router must be one of" in capsys.readouterr().err
    # every prompt past the context: said, with the flag to raise (not "no request in that window")
    assert main(["replay", "--trace", os.path.join(FIX, "azure_code_sample.csv"), "--pods", "1", *SERVER,
                 "--max-model-len", "16"]) == 2
    assert "6 request(s) refused: prompt past --max-model-len 16; raise --max-model-len" in capsys.readouterr().err


def test_cli_checks_before_running(tmp_path, capsys):
    """A fresh user's findings: each of these ran (a synthetic load of 10^13 requests grew
    without bound; a default --prefix-heavy run replayed nothing and said nothing; plan printed
    an unknown GPU as a row and exited 0; --plot failed after the run) or named the wrong flag."""
    from generation.fleet.cli import main
    trace = os.path.join(FIX, "sessions.jsonl")
    cases = [
        (["replay", "--prefix-heavy", "--rate", "1e12", "--seconds", "10", *SERVER],
         "--rate x --seconds x --turns must come to at most 1,000,000 requests"),
        (["replay", "--prefix-heavy", "--rate", "2", "--seconds", "2", *SERVER, "--max-model-len", "1024"],
         "the synthetic load has no request to replay (1 request(s) refused: prompt (--system-tokens + "
         "--question-tokens, and the turns before it) past --max-model-len 1024; raise --max-model-len)"),
        (["replay", "--trace", trace, "--prefix-heavy", *SERVER], "give --trace FILE or --prefix-heavy, not both"),
        (["replay", "--trace", str(tmp_path), *SERVER], f"--trace {tmp_path}: a directory, not a file"),
        (["replay", "--trace", trace, "--pods", "100000", *SERVER], "--pods must be from 1 to 10,000, got 100000"),
        (["replay", "--trace", trace, "--plot", str(tmp_path / "no" / "x.png"), *SERVER], "--plot "),
        (["replay", "--trace", trace, "--prefill-pods", "1", "--prefill-router", "nope", *SERVER],
         "--prefill-router must be one of"),
        (["replay", "--trace", trace, "--autoscale", "--startup-delay", "-1", *SERVER],
         "autoscaler: --startup-delay / startupDelay must be >= 0, got -1"),
    ]
    for gpus, tp, workers, said in (("H999", "1", "1", "--gpus: unknown GPU 'H999'"),
                                    (",", "1", "1", "--gpus names no configuration"),
                                    ("H100", "0", "1", "--tp sizes must be at least 1"),
                                    ("H100", "1", "-1", "--workers must be at least 0"),
                                    ("H100", "3", "1", "error: no configuration could be planned (ConfigError: "
                                                       "Total number of attention heads (32) must be divisible")):
        cases.append((["plan", "--trace", trace, "--slo-ttft", "1", "--slo-itl", "0.1", "--gpus", gpus, "--tp", tp,
                       "--workers", workers, "--max-pods", "2", *SERVER], said))
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "no").exists()


def test_cli_replay_prints_fleet_and_pods(tmp_path, capsys):
    from generation.fleet.cli import main
    assert main(["replay", "--trace", os.path.join(FIX, "sessions.jsonl"), "--pods", "2", "--router",
                 "prefix-precise", "--json", *SERVER]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fleet"]["requests"] == 4 and len(out["pods"]) == 2
    assert sum(p["requests"] for p in out["pods"]) == 4


def test_cli_pd_reads_the_kv_transfer_bandwidth_in_gb_per_s(capsys):
    """--kv-transfer-bandwidth is GB/s (the server's option): 25 GB/s moves a 600-token prompt of
    Llama-3.1-8B (128 KiB a token) in ~3 ms, not in hours; both pools scale with --autoscale."""
    from generation.fleet.cli import main
    assert main(["replay", "--trace", os.path.join(FIX, "sessions.jsonl"), "--pods", "1", "--prefill-pods", "1",
                 "--autoscale", "--json", *SERVER]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fleet"]["requests"] == 4 and out["fleet"]["e2e_s"]["p99"] < 5.0
    assert [p["role"] for p in out["pods"]] == ["prefill", "decode"]


def test_a_round_of_the_search_spreads_pod_counts_over_the_processes():
    from generation.fleet.planner import _Search
    s = _Search({"gpu": "H100", "tp": 1, "router": "round-robin"}, 1, 64)
    res = lambda ok: {"ok": ok, "ttft_p99": 0.1, "itl_p99": 0.01}
    for n in (1, 2, 4, 8):                               # doubling, one at a time
        assert s.candidates(3) == [n]
        s.update(n, res(False))
    assert s.candidates(3) == [16]
    s.update(16, res(True))
    assert (s.lo, s.hi) == (8, 16) and s.candidates(3) == [10, 12, 14]   # evenly inside (8, 16)
    for n, ok in ((10, False), (12, True), (14, True)):
        s.update(n, res(ok))
    assert (s.lo, s.hi) == (10, 12)
    assert s.candidates(3) == [11]
    s.update(11, res(True))
    assert s.done and s.hi == 11 and s.candidates(3) == []
    s.update(0, {"error": "ValueError: no"})
    assert s.row([], 1.0, 1.0)["error"] == "ValueError: no"


def test_a_thin_margin_gets_a_note():
    from generation.fleet.planner import table
    row = {"gpu": "H100", "tp": 1, "router": "round-robin", "pods": 11, "gpus": 11, "gpu_hours": 1.0,
           "ttft_p99": 0.493, "itl_p99": 0.02, "margin": 0.014}
    assert table([row]).splitlines()[-1].startswith("note: 1 configuration(s) with a margin under 5 %: ")
    assert "note" not in table([dict(row, margin=0.2)])


def test_gpu_prices_give_a_cost_column_and_the_cheapest_first(tmp_path, capsys):
    """``--gpu-prices``: each planned row's GPU-hours at its GPU's price, the table sorted by it
    (two H100s at 1.0 an hour beat one H200 at 3.0), carried through ``merge``; every GPU in
    ``--gpus`` must be priced before anything runs."""
    from generation.fleet.planner import parse_gpu_prices, price_rows, sort_rows, table
    assert parse_gpu_prices("h100=2.5, a100=1.25,L4=0") == {"H100": 2.5, "A100-80GB": 1.25, "L4": 0.0}
    rows = [{"gpu": "H200", "tp": 1, "router": "rr", "pods": 1, "gpus": 1, "gpu_hours": 1.0, "margin": 0.5},
            {"gpu": "h100", "tp": 1, "router": "rr", "pods": 2, "gpus": 2, "gpu_hours": 2.0, "margin": 0.5},
            {"gpu": "L4", "tp": 1, "router": "rr", "pods": None}]
    price_rows(rows, parse_gpu_prices("H200=3,H100=1,L4=0.5"))
    assert [(r["gpu"], r.get("cost")) for r in sort_rows(rows)] == [("h100", 2.0), ("H200", 3.0), ("L4", None)]
    lines = table(sort_rows(rows)).splitlines()
    assert lines[0].split()[6] == "cost" and lines[2].split()[6] == "2.00" and lines[4].split()[6] == "-"
    from generation.fleet.cli import main
    trace = os.path.join(FIX, "azure_code_sample.csv")
    base = ["plan", "--trace", trace, "--slo-ttft", "2", "--slo-itl", "0.1", "--workers", "1", *SERVER]
    out = tmp_path / "plan.json"
    assert main([*base, "--gpus", "H100", "--gpu-prices", "H100=2", "--output", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["cost"] == pytest.approx(2 * row["gpu_hours"])
    capsys.readouterr()
    assert main(["merge", str(out)]) == 0 and " cost " in capsys.readouterr().out
    # a GPU a description names is priced by that name
    desc = tmp_path / "rtx.json"
    desc.write_text(json.dumps({"name": "RTX-5090", "flops": 209.5e12, "bandwidth": 1.792e12, "memory_gib": 31.5}))
    assert main([*base, "--gpus", f"H100,{desc}", "--gpu-prices", "H100=2,RTX-5090=0.5", "--output", str(out)]) == 0
    assert {r["gpu"]: r["cost"] / r["gpu_hours"] for r in json.loads(out.read_text())["rows"]} == \
        {"H100": 2.0, str(desc): 0.5}
    for flags, said in ((["--gpu", "L4"], "plan takes its GPUs from --gpus and its TP sizes from --tp, not --gpu"),
                        (["-tp", "2"], "not --tensor-parallel-size; give --tp"),
                        (["--gpus", 'H100,{"name": "x"}'], "--gpus: 'flops' is a required property (--gpus is split at "
                                                           "commas: give a GPU's description in a .json file)")):
        assert main([*base, *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err
    for prices, said in (("H100=2", "--gpu-prices: no price for L4 (give L4=PRICE)"),
                         ("H100=-1,L4=1", "--gpu-prices: 'H100=-1' is not GPU=PRICE with a price of at least 0"),
                         ("H100", "--gpu-prices: 'H100' is not GPU=PRICE"),
                         ("H100=1,L4=1,X100=1", "--gpu-prices: X100 is not a GPU of --gpus (H100, L4)"),
                         ("H100=1,h100=2", "--gpu-prices: H100 is priced twice"),
                         ("H100=1,L4=1,a/b=1", "--gpu-prices: unknown GPU 'a/b'")):
        assert main([*base, "--gpus", "H100,L4", "--gpu-prices", prices]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err


def test_hostile_traces_and_settings_are_one_line_errors(tmp_path, capsys):
    """A fresh user's findings: a trace spanning 1e300 s never finished with --autoscale (a scrape
    every 15 s to its end), a nanosecond scrape interval never finished, NaN refresh and 20,000
    pods ran, negative CSV counts and non-UTF-8 bytes said the wrong thing, a plan result without
    ``tp`` was a traceback; the settings are checked before the trace is read."""
    from generation.fleet.cli import main
    far = tmp_path / "far.jsonl"
    far.write_text('{"arrival": 0, "prompt_tokens": 8, "output_tokens": 2}\n'
                   '{"arrival": 1e300, "prompt_tokens": 8, "output_tokens": 2}\n')
    neg = tmp_path / "neg.csv"
    neg.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-5,10\n")
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b'{"arrival": 0, "prompt_tokens": 8, "output_tokens": 2}\n\xff\xfe\n')
    badrows = tmp_path / "rows.json"
    badrows.write_text('{"rows": [{"gpu": 1}]}')
    cases = [
        (["replay", "--trace", str(far), "--autoscale", *SERVER], "the trace spans 1e+300 s"),
        (["replay", "--trace", str(far), "--pods", "0", *SERVER], "--pods must be from 1 to 10,000, got 0"),
        (["replay", "--trace", os.path.join(FIX, "azure_code_sample.csv"), "--autoscale", "--scrape-interval",
          "1e-9", *SERVER], "from 0.01 to 86,400 seconds"),
        (["replay", "--trace", str(far), "--router-refresh", "nan", *SERVER], "--router-refresh must be a finite"),
        (["replay", "--trace", str(far), "--pods", "10000", "--prefill-pods", "10000", *SERVER],
         "at most 10,000 pods in all"),
        (["replay", "--trace", str(neg), *SERVER], "neg.csv:2: a token count is negative"),
        (["replay", "--trace", str(raw), *SERVER], "not UTF-8 text"),
        (["merge", str(badrows)], "not a plan result"),
    ]
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (argv, err)


def test_json_counts_each_pods_routed_requests(capsys):
    from generation.fleet.cli import main
    assert main(["replay", "--trace", os.path.join(FIX, "azure_code_sample.csv"), "--pods", "2", "--router",
                 "round-robin", "--json", *SERVER]) == 0
    pods = json.loads(capsys.readouterr().out)["pods"]
    assert [p["routed"] for p in pods] == [p["requests"] for p in pods] and all(p["routed"] > 0 for p in pods)
