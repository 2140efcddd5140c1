"""The fleet's routers (generation/fleet/routing.py): each policy's choice from given pod
states, GIE's score normalisation, the approximate prefix index's LRU, and the flags' errors.
Unit tier, no clock."""
from __future__ import annotations

import pytest

from generation.engine.block_pool import BlockPool
from generation.fleet.routing import ApproxPrefixIndex, make_router, parse_weights, spread_score


class FakePod:
    def __init__(self, name, queued=0, running=0, kv=0.0, cached=()):
        self.name, self._q, self._r, self._kv, self.cached = name, queued, running, kv, list(cached)

    def queued(self):
        return self._q

    def running(self):
        return self._r

    def kv_usage(self):
        return self._kv

    def cached_prefix(self, hashes):
        n = 0
        for h in hashes:
            if h not in self.cached:
                break
            n += 1
        return n


def test_round_robin_takes_turns():
    pods = [FakePod(f"p{i}", queued=10 * i) for i in range(3)]
    r = make_router("round-robin")
    assert [r.pick(None, pods).name for _ in range(5)] == ["p0", "p1", "p2", "p0", "p1"]
    assert not r.uses_prefix


def test_load_scorers_pick_the_least_loaded():
    pods = [FakePod("a", queued=5, running=3, kv=0.5), FakePod("b", queued=2, running=9, kv=0.9),
            FakePod("c", queued=7, running=1, kv=0.2)]
    assert make_router("least-queue").pick(None, pods).name == "b"
    assert make_router("least-running").pick(None, pods).name == "c"
    assert make_router("lowest-kv").pick(None, pods).name == "c"


def test_vllm_dp_is_vllm_034s_balancer_score():
    from generation.fleet.routing import vllm_dp_score
    assert vllm_dp_score(3, 1, 0.9) == pytest.approx(4 + 3 * 6 * 0.4)
    assert vllm_dp_score(3, 1, 0.5) == 4 and vllm_dp_score(0, 2, 1.0, in_flight=5) == 5
    # a: 8 + 5 x 6 x 0.0 = 8; b: 11 + 2 x 6 x 0.4 = 15.8; c: 8 + 7 x 6 x 0 = 8 (tie with a: a first in turn)
    pods = [FakePod("a", queued=5, running=3, kv=0.5), FakePod("b", queued=2, running=9, kv=0.9),
            FakePod("c", queued=7, running=1, kv=0.2)]
    r = make_router("vllm-dp")
    assert [r.pick(None, pods).name for _ in range(3)] == ["a", "c", "c"]
    idle = [FakePod(f"p{i}") for i in range(3)]
    assert [r.pick(None, idle).name for _ in range(4)] == ["p0", "p1", "p2", "p0"]


def test_ties_are_a_seeded_random_pick():
    pods = [FakePod(f"p{i}") for i in range(4)]
    picks = [make_router("least-queue", seed=3).pick(None, pods).name for _ in range(2)]
    assert picks[0] == picks[1]                              # the same seed, the same pick
    r = make_router("least-queue", seed=3)
    assert len({r.pick(None, pods).name for _ in range(40)}) == 4   # spread over the tied pods


def test_gie_queue_score_is_normalised_over_the_candidates():
    assert spread_score([2, 4, 6]) == [1.0, 0.5, 0.0]
    assert spread_score([3, 3]) == [1.0, 1.0]


def test_precise_prefix_reads_each_pods_block_pool():
    hashes = [("g", i) for i in range(4)]
    pods = [FakePod("a", cached=hashes[:1]), FakePod("b", cached=hashes[:3], queued=4), FakePod("c")]
    r = make_router("prefix-precise")
    assert r.uses_prefix and r.pick(hashes, pods).name == "b"
    # no shared prefix: the small queue weight decides
    assert r.pick(None, pods).name in ("a", "c")


def test_the_pod_view_of_a_real_block_pool():
    from generation.engine.replay import PodReplay
    from generation.engine.scheduler import Scheduler
    from generation.fleet.replay import Pod

    class Step:
        def step_time(self, *a):
            return 0.01

        def frontend_time(self):
            return 0.0

    sched = Scheduler(num_gpu_blocks=8, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64)
    pool: BlockPool = sched.pool
    ids = pool.allocate(2)
    pool.cache(ids[0], ("g", 0))
    pool.cache(ids[1], ("g", 1))
    pod = Pod("p", 0, "serve", PodReplay(sched, Step()), 0.0, 0.0)
    assert pod.cached_prefix([("g", 0), ("g", 1), ("g", 2)]) == 2
    assert pod.cached_prefix([("g", 5), ("g", 1)]) == 0     # a leading run only
    assert pod.kv_usage() == 0.25 and pod.queued() == 0 and pod.running() == 0


def test_approximate_prefix_index_learns_what_it_routed_and_forgets_lru():
    idx = ApproxPrefixIndex(lru_blocks=3)
    a, b = FakePod("a"), FakePod("b")
    idx.add([1, 2], a)
    assert idx.match([1, 2, 3], a) == 2 and idx.match([1, 2], b) == 0
    idx.add([3, 4], a)                                       # 4 blocks in an LRU of 3: block 1 goes
    assert idx.match([1, 2], a) == 0 and idx.match([2, 3, 4], a) == 3
    r = make_router("prefix-approx")
    pods = [FakePod("x"), FakePod("y")]
    first = r.pick([9, 8], pods)
    r.routed([9, 8], first)
    assert all(r.pick([9, 8], pods) is first for _ in range(5))   # the same prefix follows


def test_weighted_sum_of_scorers():
    hashes = [("g", i) for i in range(4)]
    # a: prefix 4/4, busiest queue; b: no prefix, empty queue, low KV
    pods = [FakePod("a", queued=10, kv=0.5, cached=hashes), FakePod("b", queued=0, kv=0.1)]
    # prefix 3 x 1 + queue 2 x 0 + kv 2 x 0.5 = 4.0  vs  0 + 2 x 1 + 2 x 0.9 = 3.8
    assert make_router("weighted").pick(hashes, pods).name == "a"
    assert make_router("weighted", weights={"prefix": 1, "queue": 2, "kv": 2}).pick(hashes, pods).name == "b"


def test_bad_router_flags_name_the_flag():
    with pytest.raises(ValueError, match="--router must be one of"):
        make_router("random")
    with pytest.raises(ValueError, match="--router-weights"):
        parse_weights("prefix=x")
    with pytest.raises(ValueError, match="unknown scorer 'gpu'"):
        make_router("weighted", weights={"gpu": 1.0})
    assert parse_weights("prefix=3, queue=1") == {"prefix": 3.0, "queue": 1.0}
