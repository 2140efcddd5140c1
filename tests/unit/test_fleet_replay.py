"""The fleet in virtual time (generation/fleet/replay.py): one pod equals the single-pod
replay, every pod's result equals a single-pod replay of the requests routed to it, per-pod
accounting adds up, P/D hands requests over with the KV transfer, and the autoscaler's pods
start late and drain.  Unit tier, virtual time, deterministic."""
from __future__ import annotations

import math
import os
import random

import pytest

from generation.engine.hardware import gpu_by_name, resolve_arch
from generation.engine.perf.step_model import build_step_model
from generation.engine.replay import TraceRequest, replay
from generation.engine.scheduler import Scheduler
from generation.fleet.autoscaler import Autoscaler, ScalingPolicy
from generation.fleet.replay import FleetReplay
from generation.fleet.routing import make_router

# the profile the replay goldens use: these tests check routing and scaling, not the fitted constants
GOLDEN = os.path.join(os.path.dirname(__file__), "..", "fixtures", "perf", "h100-golden.json")
STEP = build_step_model(gpu_by_name("H100"), resolve_arch("meta-llama/Llama-3.1-8B-Instruct")[0], profile_path=GOLDEN)


def sched(blocks=600):
    return Scheduler(num_gpu_blocks=blocks, block_size=16, max_num_seqs=32, max_num_batched_tokens=2048,
                     max_model_len=8192)


def new_pod(i, role):
    return sched(), STEP


def workload(n=240, rate=60.0, groups=12, seed=5):
    rng = random.Random(seed)
    t, out = 0.0, []
    for k in range(n):
        t += rng.expovariate(rate)
        out.append(TraceRequest(t, rng.randint(600, 1500), rng.randint(5, 60), f"g{rng.randrange(groups)}", 512,
                                prompt=f"s{k % 40}" if k % 2 else None))
    return out


def digest(res):
    reqs = sorted(res.requests, key=lambda r: (r.arrival, r.prompt_len))
    return (len(res.requests), len(res.steps), res.preemptions, res.duration, sum(res.itl),
            [(r.arrival, res.times(r), r.cached_tokens) for r in reqs])


def test_one_pod_is_the_single_pod_replay():
    trace = workload()
    res = FleetReplay(new_pod, trace, pods=1).run()
    alone = replay(sched(), STEP, trace)
    assert digest(res.pods[0].result) == digest(alone)
    s = res.summary()
    assert s["requests"] == 240 and s["unfinished"] == 0 and s["pods_total"] == 1
    assert s["ttft_s"] == alone.summary()["ttft_s"]
    assert res.gpu_hours == pytest.approx(alone.duration / 3600)


@pytest.mark.parametrize("router,refresh", [("least-queue", 0.0), ("prefix-precise", 0.0), ("prefix-approx", 0.0),
                                            ("weighted", 0.0), ("round-robin", 0.0), ("least-queue", 0.05)])
def test_each_pod_equals_a_single_pod_replay_of_its_requests(router, refresh):
    trace = workload()
    res = FleetReplay(new_pod, trace, pods=4, router=make_router(router, seed=1), refresh_interval=refresh).run()
    assert sum(len(p.routed) for p in res.pods) == 240
    assert all(p.routed for p in res.pods)
    for p in res.pods:
        mine = [tr for tr, _ in p.routed]
        assert [at for _, at in p.routed] == [tr.arrival for tr in mine]
        assert digest(p.result) == digest(replay(sched(), STEP, mine))
    # the fleet's records are the pods' requests
    assert len(res.records) == sum(len(p.result.requests) for p in res.pods) == 240
    assert sorted(r["pod"] for r in res.records) == sorted(p.name for p in res.pods for _ in p.result.requests)
    assert res.summary()["requests"] == 240


def test_prefix_aware_routing_hits_the_cache_more_than_round_robin():
    trace = workload(groups=40, rate=40.0)
    small = lambda i, role: (sched(blocks=200), STEP)   # each pod holds a few groups' prefixes
    rr = FleetReplay(small, trace, pods=4, router=make_router("round-robin")).run().summary()
    px = FleetReplay(small, trace, pods=4, router=make_router("prefix-precise")).run().summary()
    assert px["cache_hit_rate"] > rr["cache_hit_rate"] + 0.05


def test_pd_hands_each_request_to_a_decode_pod_after_the_kv_transfer():
    trace = workload(n=60, rate=20.0)
    bw = 10e9
    res = FleetReplay(new_pod, trace, pods=2, prefill_pods=2, router=make_router("least-queue"),
                      prefill_router=make_router("prefix-precise"), kv_transfer_bandwidth=bw).run()
    pre = [p for p in res.pods if p.role == "prefill"]
    dec = [p for p in res.pods if p.role == "decode"]
    assert [p.name for p in pre] == ["prefill-0", "prefill-1"] and len(dec) == 2
    assert sum(len(p.result.requests) for p in pre) == 60                # prompt + one token each
    assert all(r.num_output == 1 for p in pre for r in p.result.requests)
    decoded = [r for p in dec for r in p.result.requests]
    assert len(decoded) == 60 and res.summary()["requests"] == 60
    transfer = STEP.kv_bytes_per_token / bw
    local_hits = 0
    for p in dec:
        for tr, at in p.routed:
            req = next(r for r in p.result.requests if r.arrival == at and r.prompt_len == tr.prompt_tokens)
            # the transfer carries the blocks the decode pod's own prefix cache lacked
            local = round((at + tr.prompt_tokens * transfer - req.kv_ready_at) / transfer)
            assert local % 16 == 0 and 0 <= local < tr.prompt_tokens
            local_hits += local > 0
            assert req.cached_tokens == (tr.prompt_tokens - 1) // 16 * 16   # all but the last token remote
            assert req.first_scheduled >= req.kv_ready_at
    assert local_hits > 10            # the groups' system prompts, cached by earlier transfers
    by_arrival = {r["arrival"]: r for r in res.records}
    for p in pre:                     # the client's first token comes after its prefill answered
        for r in p.result.requests:
            assert by_arrival[r.arrival]["ttft"] > p.result.times(r)[1] - r.arrival


def _scaled(trace, policy):
    return FleetReplay(new_pod, trace, pods=1, router=make_router("least-queue"), autoscaler=Autoscaler(policy)).run()


def test_autoscaler_scale_up_waits_for_the_start_up_delay():
    trace = workload(n=500, rate=100.0)          # more than one pod can take
    policy = ScalingPolicy(scrape_interval=1.0, startup_delay=2.0, max_replicas=3, queue_length_threshold=5)
    res = _scaled(trace, policy)
    ups = [d for d in res.decisions if d[2] > 0]
    assert ups and (ups[0][3] == "all saturated" or ups[0][3].startswith("spare"))
    new = [p for p in res.pods if p.index > 0]
    assert 1 <= len(new) <= 2
    for p in new:
        assert p.ready_at == p.created + 2.0
        assert p.created in [d[0] for d in ups]
        assert all(at >= p.ready_at for _, at in p.routed)          # nothing before it is ready
        assert p.routed                                               # and then it serves
    assert res.summary()["requests"] == 500
    # timeline: a starting pod, then ready
    assert any(t[2] == 1 for t in res.timeline) and max(t[1] for t in res.timeline) == len(res.pods)


def test_scale_down_drains_without_losing_a_request():
    rng = random.Random(1)
    busy = [TraceRequest(i / 80.0, 800, 40) for i in range(400)]       # 5 s busy
    quiet = [TraceRequest(5.0 + i * 0.5 + rng.random() * 0.01, 200, 5) for i in range(40)]   # 20 s quiet
    policy = ScalingPolicy(scrape_interval=1.0, startup_delay=0.5, min_replicas=1, max_replicas=3,
                           queue_length_threshold=4, scale_down_stabilization=3.0)
    res = _scaled(busy + quiet, policy)
    assert res.summary()["requests"] == 440 and res.unfinished == 0
    downs = [d for d in res.decisions if d[2] < 0]
    assert downs
    removed = [p for p in res.pods if p.removed_at is not None]
    assert removed
    for p in removed:
        assert all(at < p.drain_at for _, at in p.routed)          # nothing routed once draining
        last = max(r.finished_at for r in p.result.requests)
        assert p.removed_at == max(p.drain_at, p.result.duration) and p.removed_at >= last
    # GPU-hours: each pod from its creation to its removal (or the end)
    end = res.duration
    expect = sum((p.removed_at if p.removed_at is not None else end) - p.created for p in res.pods) / 3600
    assert res.gpu_hours == pytest.approx(expect)
    assert res.gpu_hours < len(res.pods) * end / 3600


def test_the_planner_gives_up_early_on_a_hopeless_fleet():
    trace = workload(n=300, rate=150.0)
    res = FleetReplay(new_pod, trace, pods=1, give_up_ttft=0.05).run()
    assert res.gave_up and res.summary()["gave_up"]
    assert res.unfinished > 0 and res.duration < trace[-1].arrival


def test_the_planner_gives_up_early_when_the_itl_p99_is_lost():
    trace = workload(n=300, rate=60.0)
    res = FleetReplay(new_pod, trace, pods=1, give_up_itl=0.001).run()       # every decode step is longer
    assert res.gave_up and res.duration < trace[-1].arrival
    lax = FleetReplay(new_pod, trace, pods=1, give_up_itl=10.0).run()
    plain = FleetReplay(new_pod, trace, pods=1).run().summary()
    assert not lax.gave_up and all(lax.summary()[k] == plain[k] for k in ("requests", "ttft_s", "itl_s", "e2e_s"))


def test_a_fleet_that_cannot_run_names_the_flag():
    with pytest.raises(ValueError, match="--pods"):
        FleetReplay(new_pod, [], pods=0)
    with pytest.raises(ValueError, match="needs --prefill-pods"):
        FleetReplay(new_pod, [], pods=1, prefill_autoscaler=Autoscaler())
    with pytest.raises(ValueError, match="--prefill-pods 5 is outside"):
        FleetReplay(new_pod, [], pods=1, prefill_pods=5, prefill_autoscaler=Autoscaler(ScalingPolicy(max_replicas=4)))
    with pytest.raises(ValueError, match="outside the autoscaler's replicas"):
        FleetReplay(new_pod, [], pods=5, autoscaler=Autoscaler(ScalingPolicy(max_replicas=4)))
    assert math.isinf(FleetReplay(new_pod, [], pods=1).pods[0].replay.next_event_time())


def test_a_sessions_next_turn_follows_its_cache_with_prefix_aware_routing():
    import os
    from generation.fleet.traces import read_fleet_trace
    trace = read_fleet_trace(os.path.join(os.path.dirname(__file__), "..", "fixtures", "fleet", "sessions.jsonl"))
    res = FleetReplay(new_pod, trace, pods=2, router=make_router("prefix-precise")).run()
    where = {(tr.prompt, tr.prompt_tokens): p for p in res.pods for tr, _ in p.routed}
    assert where[("session:a", 600)] is where[("session:a", 900)]
    assert where[("session:7", 700)] is where[("session:a", 600)]         # the shared system prompt is there
    turn2 = next(r for p in res.pods for r in p.result.requests if r.prompt_len == 900)
    assert turn2.cached_tokens == 600 // 16 * 16                           # the first turn's prompt blocks


def test_quiet_pods_advanced_several_steps_at_once_give_the_same_pods():
    """least-queue reads only the queues: a pod whose queue is empty and cannot fill is advanced
    when picked or at an event, not at every arrival; on small caches (preemptions) every pod
    is still the single-pod replay of its requests, and the fleet the one advanced eagerly."""
    trace = workload(n=300, rate=80.0)
    small = lambda i, role: (sched(blocks=120), STEP)
    fleet = FleetReplay(small, trace, pods=3, router=make_router("least-queue", seed=2))
    assert fleet.quiet
    res = fleet.run()
    assert sum(p.result.preemptions for p in res.pods) > 0
    for p in res.pods:
        assert digest(p.result) == digest(replay(sched(blocks=120), STEP, [tr for tr, _ in p.routed]))
    eager_router = make_router("least-queue", seed=2)
    eager_router.reads_queue_only = False
    eager = FleetReplay(small, trace, pods=3, router=eager_router)
    assert not eager.quiet
    assert eager.run().summary() == res.summary()


@pytest.mark.parametrize("kind", ["serve", "pd", "autoscale"])
def test_compact_results_are_the_full_ones(kind):
    """``compact``: no EngineRequest kept once finished, no row per step; the same fleet and
    per-pod summaries and records."""
    trace = workload(n=300, rate=80.0)
    kw = {"serve": dict(pods=3, router=make_router("weighted", seed=1)),
          "pd": dict(pods=2, prefill_pods=2, router=make_router("least-queue"),
                     prefill_router=make_router("prefix-precise")),
          "autoscale": dict(pods=1, router=make_router("least-queue"),
                            autoscaler=Autoscaler(ScalingPolicy(scrape_interval=1.0, startup_delay=0.5,
                                                                max_replicas=3, queue_length_threshold=4)))}[kind]
    full = FleetReplay(new_pod, trace, **kw).run()
    kw = {k: (make_router(v.name, seed=1 if kind == "serve" else 0) if k == "router" else
              make_router("prefix-precise") if k == "prefill_router" else
              Autoscaler(v.policy) if k == "autoscaler" else v) for k, v in kw.items()}
    compact = FleetReplay(new_pod, trace, compact=True, **kw).run()
    assert compact.summary() == full.summary()
    assert compact.per_pod() == full.per_pod()
    assert list(compact.records) == list(full.records) and len(compact.records) == 300
    assert all(not p.result.requests and len(p.result.done) == len(q.result.requests)
               for p, q in zip(compact.pods, full.pods))


class _Recording:
    """A router that notes when it picked which pod (the fleet's clock) for which request."""

    def __init__(self, router, fleet_ref):
        self.router, self.fleet_ref, self.picks = router, fleet_ref, []
        self.uses_prefix, self.reads_state, self.name = router.uses_prefix, router.reads_state, router.name

    def pick(self, hashes, pods):
        pod = self.router.pick(hashes, pods)
        self.picks.append((self.fleet_ref[0].now, pod))
        return pod

    def routed(self, hashes, pod):
        self.router.routed(hashes, pod)

    def forget(self, pod):
        self.router.forget(pod)


def test_pd_picks_the_decode_pod_when_the_request_arrives():
    """llm-d's P/D profile handler runs the decode profile first, at the request's arrival, then
    the prefill profile; the decode pod gets the request once its prefill is back."""
    rng = random.Random(4)
    trace = [TraceRequest(i / 30.0 + rng.random() * 0.01, 600 + 7 * i, rng.randint(5, 60)) for i in range(80)]
    ref = [None]
    dec_router = _Recording(make_router("least-queue"), ref)
    fleet = ref[0] = FleetReplay(new_pod, trace, pods=3, prefill_pods=2, router=dec_router,
                                 prefill_router=make_router("prefix-precise"))
    res = fleet.run()
    assert [t for t, _ in dec_router.picks] == [tr.arrival for tr in trace]       # at arrival, each once
    picked = {tr.prompt_tokens: (tr.arrival, pod) for tr, (_, pod) in zip(trace, dec_router.picks)}
    dec = [p for p in res.pods if p.role == "decode"]
    assert sum(len(p.routed) for p in dec) == 80 and all(p.routed for p in dec)
    for p in dec:
        for tr, at in p.routed:                  # handed over after the prefill answered, to the pod picked
            arrival, pod = picked[tr.prompt_tokens]
            assert at > arrival and pod is p
    assert all(p.pending == 0 for p in dec) and res.summary()["requests"] == 80


def test_pd_pools_are_scaled_apart_and_a_draining_decode_pod_keeps_its_requests():
    busy = [TraceRequest(i / 60.0, 1500, 30) for i in range(360)]                  # 6 s busy
    quiet = [TraceRequest(6.0 + i * 0.5, 300, 5) for i in range(30)]               # 15 s quiet
    policy = ScalingPolicy(scrape_interval=1.0, startup_delay=0.5, max_replicas=3, queue_length_threshold=3,
                           scale_down_stabilization=2.0)
    res = FleetReplay(new_pod, busy + quiet, pods=1, prefill_pods=1, router=make_router("least-queue"),
                      prefill_router=make_router("least-queue"), autoscaler=Autoscaler(policy),
                      prefill_autoscaler=Autoscaler(policy)).run()
    assert res.summary()["requests"] == 390 and res.unfinished == 0
    roles = [p.role for p in res.pods]
    assert roles.count("prefill") > 1 and roles.count("decode") > 1                 # each pool grew
    assert any(d[2] > 0 for d in res.prefill_decisions) and any(d[2] > 0 for d in res.decisions)
    assert all(p.routed and all(at >= p.ready_at for _, at in p.routed) for p in res.pods if p.created > 0)
    for p in res.pods:
        if p.removed_at is not None:             # drained: removed once its last request (and hand-off) is done
            assert p.pending == 0 and all(r.finished_at <= p.removed_at for r in p.result.requests)


@pytest.mark.parametrize("decode_router", ["prefix-precise", "prefix-approx", "least-queue"])
def test_pd_decider_counts_the_prompt_tokens_not_cached_on_the_decode_pod(decode_router):
    """llm-d's prefix-based-pd-decider (nonCachedTokens = --pd-threshold): a prompt shorter than
    the threshold, or whose blocks the decode pod's prefix scorer finds cached but for fewer than
    the threshold's tokens, is served by the decode pod alone; the rest go through the prefill
    pool.  A decode router without a prefix scorer matches nothing: the prompt's length decides."""
    # one shared 1,024-token system prompt (64 blocks), each question 256 tokens: after the first
    # request a decode pod that has the prefix has 256 tokens left to compute
    trace = [TraceRequest(i * 0.5, 1024 + 256, 8, "sys", 1024) for i in range(20)]
    trace.append(TraceRequest(10.5, 300, 8))                      # short: never split
    res = FleetReplay(new_pod, trace, pods=1, prefill_pods=1, router=make_router(decode_router),
                      prefill_router=make_router("least-queue"), pd_threshold=512).run()
    pre = next(p for p in res.pods if p.role == "prefill")
    dec = next(p for p in res.pods if p.role == "decode")
    split = {at for tr, at in pre.routed}
    assert 300 not in {tr.prompt_tokens for tr, _ in pre.routed}
    if decode_router == "least-queue":         # no prefix scorer: every 1,280-token prompt is split
        assert len(pre.routed) == 20
    else:                                       # only the first: the decode pod holds the prefix after it
        assert split == {0.0}
        kept = [r for r in dec.result.requests if r.arrival in {i * 0.5 for i in range(1, 20)}]
        assert len(kept) == 19 and all(r.cached_tokens == 1024 for r in kept)     # the prefix, then its own prefill
    assert res.summary()["requests"] == 21 and res.unfinished == 0
    # compact results give the same records
    compact = FleetReplay(new_pod, trace, pods=1, prefill_pods=1, router=make_router(decode_router),
                          prefill_router=make_router("least-queue"), pd_threshold=512, compact=True).run()
    assert sorted((r["arrival"], r["ttft"]) for r in compact.records) == \
        sorted((r["arrival"], r["ttft"]) for r in res.records)


def test_pd_threshold_zero_splits_every_request_and_a_negative_one_is_refused():
    trace = [TraceRequest(i * 0.5, 1280, 8, "sys", 1024) for i in range(6)]
    res = FleetReplay(new_pod, trace, pods=1, prefill_pods=1, router=make_router("prefix-precise"),
                      prefill_router=make_router("least-queue")).run()
    assert len(next(p for p in res.pods if p.role == "prefill").routed) == 6
    with pytest.raises(ValueError, match="--pd-threshold cannot be negative"):
        FleetReplay(new_pod, trace, pods=1, prefill_pods=1, pd_threshold=-1)
