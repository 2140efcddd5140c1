"""The fidelity harness (bench/engine_fidelity.py, generation/engine/perf/groundtruth.py): the
workloads it rebuilds, the peer benchmark's scoring, and a short replay of a real run end to end.
A check that the harness works, not an accuracy gate (the figures are in the README, from
``python bench/engine_fidelity.py``).  Unit tier, virtual time, seconds."""
from __future__ import annotations

import importlib.util
import os
import statistics

import pytest

from generation.engine.perf import groundtruth as gt

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXPS = {e["name"]: e for e in gt.load_experiments()}
TRACED = "20260217-155451-llama-2-7b-tp1-codegen"
REBUILT = "16-llama-3-1-8b-tp1-general-1"


def test_the_shipped_data():
    assert len(EXPS) == 59
    groups = [g for e in EXPS.values() for g in e["groups"]]
    assert (groups.count("main38"), groups.count("default16"), groups.count("trainval")) == (38, 16, 13)
    assert sum(1 for e in EXPS.values() if e.get("trace")) == 16


def test_a_traced_workload_keeps_its_arrivals_and_prompts():
    reqs = gt.workload(EXPS[TRACED])
    assert len(reqs) == 9000
    assert reqs[0].arrival == 0.0 and reqs[1].arrival == pytest.approx(0.05349)
    assert {r.output_tokens for r in reqs} == {247}             # ignore_eos: max_tokens exactly
    assert reqs[0].prompt_tokens == 591
    assert len({r.prompt for r in reqs}) == 100                 # inference-perf's 10 x 10 prompts, cycled
    assert [r.prompt for r in reqs[:100]] == [r.prompt for r in reqs[100:200]]
    assert {r.group for r in reqs} == set(range(10)) and {r.system_tokens for r in reqs} == {105}


def test_a_rebuilt_workload_is_inference_perfs_load_per_stage():
    e = EXPS[REBUILT]                                          # 8 req/s for 600 s, then 20 req/s
    reqs = gt.workload(e, seed=0)
    assert reqs == gt.workload(e, seed=0) and reqs != gt.workload(e, seed=1)
    s0 = [r for r in reqs if r.arrival <= 600]
    assert len(s0) == 4800 and len(reqs) - len(s0) == 12000    # rate x duration, exactly
    assert s0[-1].arrival == pytest.approx(600.0) and reqs[-1].arrival == pytest.approx(1200.0)
    assert {r.stage for r in s0} == {0} and {r.stage for r in reqs[len(s0):]} == {1}
    gaps = [b.arrival - a.arrival for a, b in zip(s0, s0[1:])]
    assert 0.95 < statistics.pstdev(gaps) / statistics.fmean(gaps) < 1.05      # exponential gaps
    assert len({r.prompt for r in reqs}) == 100                 # inference-perf's 10 x 10 prompts
    per_prompt = {r.prompt: r.prompt_tokens for r in reqs}
    assert all(per_prompt[r.prompt] == r.prompt_tokens for r in reqs)   # a prompt keeps its length
    nominal = round(547 * gt.PROMPT_EXPANSION)
    spread = sorted(per_prompt.values())
    assert abs(sum(spread) / 100 - nominal) < 3 and 4 < statistics.pstdev(spread) < 11   # the traces' sd 7.4
    short = gt.workload(e, duration_scale=0.1)
    assert max(r.arrival for r in short if r.arrival <= 600) <= 60


def test_scoring_is_the_peer_benchmarks():
    stages = [{"rate": 1, "duration": 10}, {"rate": 2, "duration": 10}]
    assert [gt.stage_of(t, stages) for t in (0, 10, 10.001, 20, 25)] == [0, 0, 1, 1, 1]
    assert gt._pct([1, 2, 3, 4], 90) == pytest.approx(3.7)      # numpy's linear percentile
    outs = [gt.Outcome(1.0, 0.1, 1.1, 11), gt.Outcome(12.0, 0.3, 2.3, 11),
            gt.Outcome(13.0, float("nan"), 300.0, 0, failed=True)]
    exp = {"stages": stages, "actual": {"0": {"e2e_mean": 1000.0, "ttft_mean": 100.0, "itl_mean": 100.0},
                                        "-1": {"e2e_mean": 1000.0, "ttft_mean": 100.0, "itl_mean": 100.0}}}
    pred = gt.predicted(exp, gt.Simulation(outcomes=outs))
    assert pred["0"]["e2e_mean"] == pytest.approx(1100) and pred["0"]["itl_mean"] == pytest.approx(100)
    assert pred["1"]["count"] == 1 and pred["1"]["failures"] == 1
    assert pred["-1"]["ttft_mean"] == pytest.approx(200) and pred["-1"]["count"] == 2
    recs = {(r["stage"], r["metric"]): r["ape"] for r in gt.score(exp, pred)}
    assert recs[("0", "e2e_mean")] == pytest.approx(10.0) and recs[("-1", "ttft_mean")] == pytest.approx(100.0)
    # measured ITL divides by the output inference-perf counted: here (1000-100)/100 + 1 = 10 tokens
    assert recs[("0", "itl_mean_counted")] == pytest.approx(abs(1000 / 9 - 100))


def test_a_short_replay_of_a_real_run_scores():
    e = EXPS[REBUILT]
    sim = gt.simulate(e, duration_scale=0.05)
    pred = gt.predicted(e, sim)
    assert pred["0"]["count"] > 150 and pred["-1"]["failures"] == 0
    recs = gt.score(e, pred)
    assert {r["metric"] for r in recs} >= set(gt.METRICS)
    assert all(r["ape"] == r["ape"] for r in recs)             # every record scored


def test_the_bench_prints_the_tables(capsys):
    spec = importlib.util.spec_from_file_location("engine_fidelity", os.path.join(ROOT, "bench", "engine_fidelity.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--set", REBUILT, "--scale", "0.03", "--jobs", "1", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "vllm-sim (this)" in out and "blis-trained-physics" in out and "MAPE (%) by GPU" in out
    assert "the median of 2 seeded replays" in out
    assert "the median's own noise: the mean MAPE over 200 resamples of the seeds" in out
    assert "ttft_p99: its mean's points by GPU and model" in out


def test_tail_shares_split_a_metrics_mean_by_gpu_model_and_first_stage():
    spec = importlib.util.spec_from_file_location("engine_fidelity", os.path.join(ROOT, "bench", "engine_fidelity.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    exps = [{"name": "a", "hardware": "H100", "model": "org/M", "stages": [{}, {}]},
            {"name": "b", "hardware": "L40S", "model": "org/N", "stages": [{}]}]
    rec = lambda stage, ape: {"stage": stage, "metric": "ttft_p99", "ape": ape}     # noqa: E731
    results = {"a": {"records": [rec("0", 40.0), rec("1", 8.0), rec("-1", 12.0),
                                 {"stage": "0", "metric": "e2e_mean", "ape": 99.0}]},
               "b": {"records": [rec("0", 20.0)]}}
    # four ttft_p99 records: each adds its error / 4; a single-stage run's stage 0 is not a first stage
    assert bench.tail_shares(exps, results, "ttft_p99") == {("H100", "M"): (10.0, 5.0), ("L40S", "N"): (0.0, 5.0)}


def test_the_prediction_is_the_median_over_seeds():
    spec = importlib.util.spec_from_file_location("engine_fidelity", os.path.join(ROOT, "bench", "engine_fidelity.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    preds = [{"0": {"ttft_p99": v, "count": 10}} for v in (70.0, 900.0, 80.0)]
    assert bench.median_prediction(preds) == {"0": {"ttft_p99": 80.0, "count": 10}}
    # a seed whose stage timed out whole has its counts alone: the other seeds give the figures
    preds = [{"0": {"count": 0, "failures": 5}}, {"0": {"ttft_p99": 70.0, "count": 10, "failures": 0}},
             {"0": {"ttft_p99": 90.0, "count": 12, "failures": 0}}]
    assert bench.median_prediction(preds) == {"0": {"count": 10, "failures": 0, "ttft_p99": 80.0}}
    # --estimator relative-median: the best single figure under a relative error leans low
    preds = [{"0": {"ttft_p99": v, "count": 10}} for v in (70.0, 900.0, 80.0)]
    assert bench.median_prediction(preds, bench.relative_median) == {"0": {"ttft_p99": 70.0, "count": 10}}
    assert bench.relative_median([0.0, 2.0, 5.0]) == 2.0          # a value not positive: the median
    assert len(bench.select(gt.load_experiments(), "main38")) == 38
    assert len(bench.select(gt.load_experiments(), "test")) == 31


def test_the_seed_bootstrap_band():
    """engine_fidelity.seed_bootstrap: the 10th-90th percentile of the mean MAPE over resamples of
    the seeds, with replacement; seeded, so the same band every time."""
    spec = importlib.util.spec_from_file_location("engine_fidelity", os.path.join(ROOT, "bench", "engine_fidelity.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rec = lambda metric, pred, actual=100.0: {"stage": "0", "metric": metric, "predicted": pred, "actual": actual}  # noqa: E731
    seeds = [[rec("ttft_p99", 100.0), rec("e2e_mean", e)] for e in (90.0, 110.0, 100.0)]
    seeds[2] = seeds[2][1:]                  # a seed without the TTFT record: left out of its median
    results = {"a": {"records": [rec("ttft_p99", 100.0), rec("e2e_mean", 100.0)], "seed_records": seeds}}
    band = bench.seed_bootstrap(results, ("ttft_p99", "e2e_mean"))
    assert band["ttft_p99"] == (0.0, 0.0)                      # every seed agrees with the measurement
    low, high = band["e2e_mean"]
    assert (low, high) == (0.0, 10.0)                          # a resample's median is 90, 100 or 110
    assert bench.seed_bootstrap(results, ("ttft_p99", "e2e_mean")) == band
    one = {"a": {"records": results["a"]["records"], "seed_records": seeds[:1]}}
    assert all(v != v for v in bench.seed_bootstrap(one, ("e2e_mean",))["e2e_mean"])   # nan: one seed


def test_a_partial_replay_is_scored_against_the_same_requests():
    e = EXPS[TRACED]
    assert gt.windowed_actual(e, 1.0) is None and gt.windowed_actual(EXPS[REBUILT], 0.3) is None
    whole = gt.windowed_actual(e, 0.99999)            # every request kept: the measured figures
    for st, act in e["actual"].items():
        for m in ("e2e_mean", "e2e_p90", "ttft_mean", "ttft_p99", "itl_mean"):
            assert whole[st][m] == pytest.approx(act[m], rel=1e-2)   # the peer's percentiles differ a little
    part = gt.windowed_actual(e, 0.3)
    assert set(part) == set(e["actual"]) and part["0"]["ttft_mean"] != e["actual"]["0"]["ttft_mean"]


def test_itl_by_requests_in_flight():
    """bench/engine_concurrency.py's arithmetic: a request's decode ITL and the mean count in
    flight over its decode (8 instants, the last at its end, where it no longer counts)."""
    spec = importlib.util.spec_from_file_location("engine_concurrency",
                                                  os.path.join(ROOT, "bench", "engine_concurrency.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    counts, itls = bench.itl_by_concurrency([0.0, 0.0, 0.0, 5.0], [0.1, 0.1, 0.1, 0.1], [1.1, 1.1, 1.1, 0.5],
                                            [101, 101, 101, 10])
    assert sorted(counts.tolist()) == [2.625, 2.625, 2.625]     # the 10-token request is left out
    assert itls.tolist() == pytest.approx([10.0, 10.0, 10.0])
    bins = bench.binned(counts, itls)
    assert list(bins) == [0] and bins[0][1] == 3 and bins[0][0] == pytest.approx(10.0)
    two = {0: (10.0, 40), 10: (12.0, 40)}
    assert bench.slope(two, [0, 10]) == pytest.approx(200.0)    # 2 ms over 10 in flight


def test_the_replicate_floor():
    """bench/engine_replicates.py: the best single figure under a relative error is the 1/y-weighted
    median, and the floor is its errors summed over the group records, over the set's records."""
    spec = importlib.util.spec_from_file_location("engine_replicates",
                                                  os.path.join(ROOT, "bench", "engine_replicates.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    best, cost = bench.best_constant([75.0, 78.0, 78.0, 253.0, 256.0])
    assert best == 78.0 and cost == pytest.approx(3 / 75 + 175 / 253 + 178 / 256)
    assert bench.best_constant([100.0]) == (100.0, 0.0)
    base = {"model": "m", "hardware": "H100", "tp": 1, "precision": "FP16", "workload": "general",
            "stages": [{"rate": 8, "duration": 600}]}
    exps = [dict(base, name="a", actual={"0": {"ttft_p99": 50.0}}),
            dict(base, name="b", cpu_offload=True, actual={"0": {"ttft_p99": 100.0}}),
            dict(base, name="c", model="other", actual={"0": {"ttft_p99": 10.0}})]
    floor, groups = bench.replicate_floor(exps)
    assert [names for names, _ in groups] == [["a", "b"]]
    assert floor == {"ttft_p99": pytest.approx(100 * 0.5 / 3)}     # best 50: |50 - 100| / 100, over 3 records
    assert bench.replicate_floor(exps, same_offload=True)[0] == {"ttft_p99": 0.0}


def test_the_harness_builds_the_step_model_the_server_builds():
    """The harness's StepModel (``groundtruth.build``) and the server's (``resolve_step_settings``)
    for the same ``vllm serve`` flags: the same CUDA graphs (vLLM's default of twice
    ``max_num_seqs``: 256 here) and the same MoE kernels compiled at start-up."""
    cfg, settings, model = gt.build(EXPS["31-mixtral-8x7b-tp4-general-4"])
    server = settings.step_time
    assert model.max_graph == server.max_graph == 256
    assert model.moe_jit(2048).compiled == server.moe_jit(2048).compiled


def test_the_simulated_floor_scores_each_draw_against_the_others_median():
    """bench/engine_replicates.py --simulated: each untraced experiment's draws, one at a time
    against the median of the others, on the records the experiment measured; a traced one has no
    draw to vary and counts 0 over its records."""
    spec = importlib.util.spec_from_file_location("engine_replicates",
                                                  os.path.join(ROOT, "bench", "engine_replicates.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    exps = [EXPS[REBUILT], EXPS[TRACED]]
    floor, rows = bench.simulated_floor(exps, seeds=3, scale=0.03)
    assert {name for name, *_ in rows} == {REBUILT}
    assert {(stage, m) for _, stage, m, _ in rows} == {(st, m) for st, act in EXPS[REBUILT]["actual"].items()
                                                      for m in gt.METRICS if act.get(m)}
    records = sum(1 for e in exps for act in e["actual"].values() if act.get("ttft_p99"))
    assert floor["ttft_p99"] == pytest.approx(sum(a for _, _, m, a in rows if m == "ttft_p99") / records)
    assert all(a >= 0.0 for *_, a in rows) and floor["ttft_p99"] > 0.0
    assert bench.simulated_floor(exps, seeds=3, scale=0.03) == (floor, rows)       # seeded: the same
    with pytest.raises(ValueError):
        bench.simulated_floor(exps, seeds=2)


def test_a_stage_starts_once_the_one_before_it_has_finished():
    """inference-perf's run_stage: the next stage's clock starts at the first once-a-second
    check after the previous stage's last request finished, plus one second (never before its
    nominal start); the requests keep their offsets within their stage."""
    import math
    from generation.engine.replay import TraceRequest, scheduler_for
    e = EXPS[REBUILT]
    cfg, settings, model = gt.build(e)
    stages = [{"rate": 2, "duration": 2}, {"rate": 2, "duration": 2}]
    nominal = [0.5, 1.0, 1.9, 2.3, 3.0]                      # three in stage 0, two in stage 1
    trace = [TraceRequest(t, 2000, 300, prefix_group=str(i), prompt=str(i)) for i, t in enumerate(nominal)]
    res = gt.staged_replay(scheduler_for(settings, cfg.max_model_len), model, trace, [0, 0, 0, 1, 1], stages)
    by_arrival = sorted(res.requests, key=lambda r: r.arrival)
    assert [r.arrival for r in by_arrival[:3]] == nominal[:3]
    done = max(res.times(r)[1] for r in by_arrival[:3])
    assert done > 4.0                                          # 300 tokens each: past the nominal start
    start = math.ceil(done) + 1.0
    assert [r.arrival for r in by_arrival[3:]] == pytest.approx([start + 0.3, start + 1.0])


def _own_runs(tmp_path, names=(REBUILT,), drop=()):
    """A user's data folder: ``names`` copied from the shipped data, without ``groups`` (and
    without the fields in ``drop``)."""
    import json
    import shutil
    folder = tmp_path / "my-runs"
    (folder / "model_configs").mkdir(parents=True)
    runs = []
    for n in names:
        e = {k: v for k, v in EXPS[n].items() if k not in ("groups", *drop)}
        shutil.copytree(os.path.join(gt.data_dir(), "model_configs", e["model_config"]),
                        folder / "model_configs" / e["model_config"], dirs_exist_ok=True)
        runs.append(e)
    (folder / "experiments.json").write_text(json.dumps(runs))
    return str(folder)


def _bench():
    spec = importlib.util.spec_from_file_location("engine_fidelity", os.path.join(ROOT, "bench", "engine_fidelity.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_your_own_runs_without_groups_are_all_of_every_set(tmp_path, capsys, monkeypatch):
    """A fresh user's own runs: without ``groups`` the fit and the bench took none of them (or
    stopped on a KeyError); now they are the training data and every set."""
    from generation.engine.perf.fit import training_runs
    monkeypatch.setenv("SIM_TO_REAL_DATA", gt.data_dir())   # restored afterwards: --data sets it in-process
    data = _own_runs(tmp_path)
    exps = gt.load_experiments(data)
    assert [e["name"] for e in training_runs(exps, "H100")] == [REBUILT] and exps[0]["groups"] == []
    assert _bench().main(["--data", data, "--scale", "0.03", "--jobs", "1", "--seeds", "1"]) == 0
    assert f"1 experiments replayed" in capsys.readouterr().out


def test_a_users_data_folder_fails_in_one_line(tmp_path, capsys, monkeypatch):
    from generation.engine.perf.fit import main as fit
    monkeypatch.setenv("SIM_TO_REAL_DATA", gt.data_dir())   # restored afterwards: --data sets it in-process
    bad = _own_runs(tmp_path, drop=("shared_prefix",))
    cases = [
        (["--data", str(tmp_path / "nope")], "experiments.json: no such file"),
        (["--data", bad], f"experiment 0 ({REBUILT}): missing shared_prefix (README: Fidelity"),
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
        (["--scale", "-1"], "--scale must be in (0, 1]"),
        (["--profile", str(tmp_path / "none.json")], "--profile: performance profile "),
    ]
    for argv, said in cases:
        assert _bench().main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and err.count("\n") == 1, (argv, err)
    import json
    for name, change, said in (("m", lambda e: e.pop("model"), "missing model"),
                               ("t", lambda e: e.update(tp="one"), "tp must be a positive integer, got 'one'"),
                               ("a", lambda e: e["actual"]["-1"].update(e2e_mean="3284"),
                                "actual['-1'] needs positive numbers (ms) for e2e_mean"),
                               ("s", lambda e: e["actual"].update({"7": e["actual"]["-1"]}),
                                "actual has stage '7', not one of its 2 stages'"),
                               ("h", lambda e: e.update(hardware=100), "hardware must be a non-empty string, got 100"),
                               ("r", lambda e: e["stages"][0].update(rate=-8),
                                "stages must be a non-empty list of {rate, duration}, both positive"),
                               ("o", lambda e: e["shared_prefix"].update(output_len=-1), "shared_prefix needs integer"),
                               ("c", lambda e: e.update(cpu_offload="yes"), "cpu_offload must be true or false"),
                               ("z", lambda e: e["actual"]["0"].update(ttft_mean=0),
                                "actual['0'] needs positive numbers (ms) for ttft_mean"),
                               ("g", lambda e: e.update(hardware="H1000"), "hardware: unknown GPU 'H1000'"),
                               ("q", lambda e: e["stages"][0].update(rate=1e7),
                                "stages come to more than 1,000,000 requests"),
                               ("l", lambda e: e.update(max_model_len=10), "shared_prefix's prompt (100 + 447 tokens) does not fit max_model_len 10")):
        folder = _own_runs(tmp_path / f"bad-{name}")
        exps = json.loads(open(os.path.join(folder, "experiments.json")).read())
        change(exps[0])
        with open(os.path.join(folder, "experiments.json"), "w") as fh:
            json.dump(exps, fh)
        assert fit(["--data", folder]) == 2
        err = capsys.readouterr().err
        assert f"experiment 0 ({REBUILT}): {said}" in err and err.count("\n") == 1, err
    (tmp_path / "list.json").write_text("{}")
    os.makedirs(tmp_path / "obj")
    (tmp_path / "obj" / "experiments.json").write_text('{"name": "x"}')
    assert fit(["--data", str(tmp_path / "obj")]) == 2
    assert "experiments.json: a list of experiment objects, got dict" in capsys.readouterr().err
    assert fit(["--data", _own_runs(tmp_path / "a"), "--gpu", "L40S"]) == 2
    assert "--gpu L40S: no run of it in" in capsys.readouterr().err
    assert fit(["--scale", "0"]) == 2 and "--scale must be in (0, 1]" in capsys.readouterr().err


TRACE_HEAD = "arrival_us,input_tokens,output_tokens,has_error,ttft_s,e2e_s\n"


@pytest.mark.parametrize("rows,said", [
    ("1,10,5,0,0.1,0.5\n2,abc,5,0,0.1,0.5\n", ":3: invalid literal for int"),
    ("1,10,5,1,,300\n", ": no successful request"),
    ("5,10,5,0,0.1,0.5\n4,10,5,0,0.1,0.5\n", ":3: arrivals go back in time"),
    ("5,10,5,0,0.9,0.5\n", ":2: need 0 <= ttft_s <= e2e_s"),
])
def test_a_users_trace_is_checked_as_read(tmp_path, rows, said):
    import gzip
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(TRACE_HEAD + rows)
    with pytest.raises(ValueError, match=f"trace {path}{said}"):
        gt._read_trace(str(path))


def test_a_truncated_trace_is_one_error(tmp_path):
    import gzip
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(TRACE_HEAD.encode() * 200)[:40])
    with pytest.raises(ValueError, match="not a whole gzipped CSV"):
        gt._read_trace(str(path))


def test_a_profile_for_another_gpu_is_said_and_a_bad_json_one_is_one_line(tmp_path, caplog):
    import logging

    from generation.config.values import ConfigError
    from generation.engine.perf.hardware import gpu_by_name
    from generation.engine.perf.model_arch import preset
    from generation.engine.perf.step_model import build_step_model
    good = tmp_path / "a100.json"
    good.write_text('{"gpu": "A100-80GB", "constants": {"t0": 1e-5}}')
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        build_step_model(gpu_by_name("H100"), preset("meta-llama/Llama-3.1-8B-Instruct"), profile_path=str(good))
    assert f"step-time profile {good} was fitted for A100-80GB, used here on H100" in caplog.text
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": ')
    with pytest.raises(ConfigError, match=r"not JSON \(Expecting value: line 1"):
        build_step_model(gpu_by_name("H100"), preset("meta-llama/Llama-3.1-8B-Instruct"), profile_path=str(bad))
