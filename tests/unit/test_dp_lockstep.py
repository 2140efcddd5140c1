"""A data-parallel MoE engine's steps in lockstep with its peers (vLLM's ``DPEngineCoreProc``):
the step lasts the busiest rank's time, each peer drawn from the rank's own recent steps
(:class:`generation.engine.perf.stalls.DpLockstep`), in the replay and the live engine alike.
Unit tier, virtual time, fixed seeds."""
from __future__ import annotations

import random

import pytest

from generation.engine.perf.stalls import DpLockstep, dp_lockstep
from generation.engine.pod_replay import PodReplay
from generation.engine.replay import TraceRequest, replay, scheduler_for
from generation.engine.step_config import load_step_config, resolve_step_settings

R1 = "deepseek-ai/DeepSeek-R1"


def settings(model, *extra):
    cfg = load_step_config(["--model", model, "--max-model-len", "8192", *extra])
    return cfg, resolve_step_settings(cfg)


class Fixed:
    """A ``random.Random`` stand-in whose ``random()`` is ``u``."""

    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


def test_a_step_takes_the_maximum_of_its_peers_drawn_as_one_order_statistic():
    lock, t = DpLockstep(3, Fixed(0.5)), 0.0          # two peers, busy all along: index floor(n * 0.5 ** (1/2))
    for dt, expected in ((0.02, 0.02),                # no history yet: its own time
                         (0.01, 0.02),                # n 1: index 0, the 20 ms step
                         (0.03, 0.03),                # n 2, sorted [10, 20]: index 1 (20 ms) < its own 30
                         (0.005, 0.03)):              # n 3, [10, 20, 30]: index 2
        assert lock.step(dt, t) == expected
        t += expected
    assert [r[0] for r in lock.recent] == [0.02, 0.01, 0.03, 0.005] and lock.ordered == [0.005, 0.01, 0.02, 0.03]


def test_idle_peers_add_nothing():
    """Each peer has work with the share of the time this rank had (the window's lockstep time
    over the time since its first step); the peers' maximum is a dummy batch, adding nothing,
    when the uniform's k-th root falls below the chance that a peer is idle."""
    lock = DpLockstep(3, Fixed(0.25))                 # two peers: 0.25 ** (1/2) = 0.5
    assert lock.step(0.1, 0.0) == 0.1
    assert lock.step(0.01, 0.1) == 0.1                # busy 0.1 s of 0.1: 0.5 - 0 > 0, the 100 ms step
    assert lock.step(0.01, 0.6) == 0.01               # busy 0.2 s of 0.6: 0.5 - (1 - 1/3) < 0, a dummy
    assert lock.busy_time == pytest.approx(0.21)


def test_an_idle_rank_joins_its_drawn_peers_at_a_point_of_their_step():
    """After idle (its dummy batches ran in step with its peers), a step starts when the group's
    running step ends: the drawn peers' maximum (as for any step), met at a uniform point of
    it; the step itself then runs from the group's next boundary."""
    lock = DpLockstep(3, Fixed(0.25))                 # busy all along: 0.25 ** (1/2) = 0.5, the 100 ms step
    lock.step(0.1, 0.0)
    assert lock.step(0.01, 0.1, joining=True) == pytest.approx(0.25 * 0.1 + 0.01)
    idle = DpLockstep(3, Fixed(0.25))
    idle.step(0.1, 0.0)
    assert idle.step(0.01, 10.0, joining=True) == 0.01   # busy 1% of the time: the peers are idle too


def test_the_window_keeps_the_last_steps_only():
    lock = DpLockstep(2, Fixed(0.0))
    for k in range(DpLockstep.WINDOW + 10):
        lock.step(float(k), float(k * k))
    assert len(lock.recent) == len(lock.ordered) == DpLockstep.WINDOW
    assert lock.ordered[0] == 10.0 and lock.ordered == sorted(r[0] for r in lock.recent)
    assert lock.busy_time == pytest.approx(sum(range(10, DpLockstep.WINDOW + 10)))


@pytest.mark.parametrize("busy", [1.0, 0.3])
def test_a_group_stalls_on_some_peers_prefill_as_often_as_independent_ranks_would(busy):
    """Ranks whose steps carry a prompt chunk one time in ten, busy ``busy`` of the time: in a
    group of 16, a step waits for one with the chance that any of the 15 peers is busy in a
    prompt chunk, or the rank itself is."""
    lock, draw, t, out = DpLockstep(16, random.Random(0)), random.Random(1), 0.0, []
    for _ in range(20000):
        out.append(lock.step(0.12 if draw.random() < 0.1 else 0.02, t))
        t += out[-1] / busy
    out = out[DpLockstep.WINDOW:]
    assert sum(x > 0.1 for x in out) / len(out) == pytest.approx(1 - 0.9 * (1 - 0.1 * busy) ** 15, abs=0.015)


def test_only_moe_models_under_data_parallelism_step_in_lockstep():
    assert dp_lockstep(settings(R1, "--gpu", "H200", "-dp", "8")[1].step_time, random.Random(0)).exponent == 1 / 7
    # the whole deployment's ranks: -dp 16 over two nodes of 8
    st = settings(R1, "--gpu", "H200", "-dp", "16", "-dpl", "8", "-ep")[1].step_time
    assert dp_lockstep(st, random.Random(0)).exponent == 1 / 15
    assert dp_lockstep(settings(R1, "--gpu", "H200", "-tp", "8")[1].step_time, random.Random(0)) is None
    # a dense model's DP ranks are independent engines in vLLM
    dense = settings("meta-llama/Llama-3.1-8B-Instruct", "-dp", "4")[1].step_time
    assert dp_lockstep(dense, random.Random(0)) is None


def r1_replay(flags, lockstep=True, rate=1.0, n=150):
    cfg, st = settings(R1, "--gpu", "H200", *flags)
    rng, t, trace = random.Random(3), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        trace.append(TraceRequest(t, 1024, 128))
    if lockstep:
        return replay(scheduler_for(st, cfg.max_model_len), st.step_time, trace)
    original = PodReplay.__init__

    def without(self, *a, **kw):
        original(self, *a, **kw)
        self.lockstep = None
    PodReplay.__init__ = without
    try:
        return replay(scheduler_for(st, cfg.max_model_len), st.step_time, trace)
    finally:
        PodReplay.__init__ = original


def tpot(res):
    vals = sorted((r.finished_at - r.first_token) / (r.num_output - 1) for r in res.requests)
    return vals[len(vals) // 2]


def test_peers_prompts_slow_a_ranks_decodes_in_the_replay():
    """DeepSeek-R1 at DP 8 on H200s, 1 request/s a rank: a rank's decodes wait out its seven
    peers' prompt chunks (each a draw from its own steps), so its TPOT is well above what the
    rank alone would take; the replay's pure decode groups (PodReplay._run_group) and the
    step-by-step loop draw the same peers."""
    alone, group = r1_replay(("-dp", "8"), lockstep=False), r1_replay(("-dp", "8"))
    assert tpot(group) > 1.3 * tpot(alone)
    waited = group.summary()["dp_lockstep"]
    assert 0 < waited["steps_waited"] <= len(group.steps) and waited["seconds_waited"] > 0
    assert "dp_lockstep" not in alone.summary()
    original = PodReplay._run_group
    PodReplay._run_group = lambda self, t: False
    try:
        step_by_step = r1_replay(("-dp", "8"))
    finally:
        PodReplay._run_group = original
    assert [r.finished_at for r in step_by_step.requests] == [r.finished_at for r in group.requests]


def test_the_live_engine_of_a_dp_moe_rank_waits_for_its_peers(app_client):
    """The server's step engine (one process per rank) draws its peers as the replay does, and a
    request through it is served; a dense model's rank has no peers to wait for."""
    c = app_client("--model", R1, "--latency-calculator", "step", "--gpu", "H200", "-dp", "8",
                   "--data-parallel-rank", "0", "--max-model-len", "8192", model=None)
    engine = c.sim.engine
    assert isinstance(engine.lockstep, DpLockstep) and engine.lockstep.exponent == 1 / 7
    r = c.post("/v1/completions", json={"model": R1, "prompt": "hi", "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    assert len(engine.lockstep.recent) == engine.steps >= 4 and engine.lockstep.busy_time > 0
    dense = app_client("--latency-calculator", "step", "-dp", "2", "--data-parallel-rank", "0")
    assert dense.sim.engine.lockstep is None


def test_each_dp_rank_draws_its_own_peers_and_pauses():
    from app import engine_seed
    from generation.config.cli import load_config
    seeds = [engine_seed(load_config(["-dp", "16", "-dpl", "8", "--data-parallel-start-rank", str(s),
                                      "--data-parallel-rank", str(r), "--seed", "5"], env={}))
             for s, r in ((0, 0), (0, 3), (8, 0))]
    assert seeds == [5, "5-rank3", "5-rank8"]


def test_a_nodes_ranks_wait_for_the_longest_step_a_peer_runs(tmp_path, monkeypatch):
    """The server's ranks of one node share a board (dp_board): a step waits for the longest
    step a local peer is running (its own time), a finished or idle peer adds nothing, and only
    the other nodes' ranks are drawn (none at -dp 2 on one node)."""
    from generation.engine import dp_board
    monkeypatch.setenv(dp_board.BOARD_ENV, "")
    monkeypatch.setattr(dp_board.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(dp_board.os.path, "isdir", lambda p: False)     # not /dev/shm: the test's folder
    orphan, live = tmp_path / "vllm-sim-dp-999-x", tmp_path / "vllm-sim-dp-1-y"
    orphan.write_bytes(b"")
    live.write_bytes(b"")
    held = open(live, "rb")                               # a live server (any PID namespace) holds its lock
    dp_board.fcntl.flock(held, dp_board.fcntl.LOCK_SH)
    path = dp_board.create_board(2)
    held.close()
    assert path.startswith(str(tmp_path)) and dp_board.os.environ[dp_board.BOARD_ENV] == path
    assert not orphan.exists() and live.exists()          # a killed server's board goes, a live one's stays
    dp_board._remove_orphans(str(tmp_path))
    assert dp_board.os.path.exists(path)                  # this process holds its own
    a, b = DpLockstep(2, Fixed(0.99)), DpLockstep(2, Fixed(0.99))
    a.attach(dp_board.attach_board(2), 0)
    b.attach(dp_board.attach_board(2), 1)
    assert a.exponent == b.exponent == 0.0                 # both ranks on the board: none drawn
    assert a.step(0.2, 10.0) == 0.2                        # a prompt chunk on rank 0, 10.0 .. 10.2
    assert b.step(0.01, 10.05) == 0.2                      # rank 1's decode waits for it
    assert b.step(0.01, 10.25) == 0.01                     # rank 0's step is over
    assert a.step(0.3, 10.3) == 0.3                        # rank 0 again, 10.3 .. 10.6
    assert b.step(0.01, 10.4, joining=True) == pytest.approx(0.21)     # idle rank 1 joins at 10.6
    assert list(a.board[1]) == [10.4, pytest.approx(10.61), 0.01]
    assert dp_board.attach_board(3) is None                # a board of another size: drawn as before
    # four local ranks of 16: the other 12 are drawn
    c = DpLockstep(16, Fixed(0.5))
    c.attach(dp_board.np.zeros((4, 3)), 2)
    assert c.exponent == 1 / 12


def test_no_board_on_a_read_only_file_system(monkeypatch, caplog):
    """A pod with a read-only root file system and no /dev/shm: the ranks start, without a board,
    and draw their local peers as the other nodes' (a warning says so)."""
    import logging
    from generation.engine import dp_board

    def refuse(*a, **kw):
        raise OSError(30, "Read-only file system")
    monkeypatch.setenv(dp_board.BOARD_ENV, "")
    monkeypatch.setattr(dp_board.tempfile, "mkstemp", refuse)
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        assert dp_board.create_board(2) is None
    assert dp_board.attach_board(2) is None
    assert "no board for the ranks' lockstep ([Errno 30] Read-only file system)" in caplog.text


def test_a_fleets_dp_moe_pods_draw_their_peers_apart():
    """Each pod of a fleet replay is a DP rank of its own: its peers come from a stream of its own
    (every pod had drawn the same uniforms), seeded by the fleet's seed."""
    from generation.fleet.replay import FleetReplay, pod_factory
    new_pod = pod_factory(["--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "-dp", "4", "--max-model-len", "8192"])[0]
    trace = [TraceRequest(0.1 * i, 256, 8) for i in range(8)]
    fleet = FleetReplay(new_pod, trace, pods=2, seed=3)
    a, b = (p.replay.lockstep.rng for p in fleet.pods)
    assert a.random() != b.random()
    assert fleet.run().summary()["requests"] == 8
