"""Routing policies of a simulated fleet, named after the scorers users deploy in llm-d's
inference scheduler and the Gateway API Inference Extension (GIE) endpoint picker.

A router picks one pod for each request from the pods' state at the request's arrival (the
pods are advanced to that instant first: :class:`~generation.fleet.replay.FleetReplay`):

- ``round-robin``: the next pod in turn;
- ``least-queue`` (GIE's ``queue-scorer``): fewest requests queued at the pod (the engine's
  waiting queue and the requests still in its frontend); ``least-running``: fewest running;
- ``lowest-kv`` (``kv-cache-utilization-scorer``): lowest ``vllm:kv_cache_usage_perc``;
- ``prefix-precise`` (llm-d's precise ``prefix-cache-scorer``): the longest leading run of the
  request's prompt blocks cached on the pod, read from the pod's block pool, as llm-d's KV-event
  indexer reads the pods' ``BlockStored`` / ``BlockRemoved`` events;
- ``prefix-approx`` (GIE's approximate ``prefix-cache-scorer``): the same score from the
  router's own LRU of the blocks it routed to each pod (``lru_blocks`` per pod; it does not know
  what the pod evicted);
- ``weighted`` (the scheduling profile's weighted sum): ``sum w_i score_i`` over ``prefix``
  (precise or approximate), ``queue``, ``kv`` and ``running`` scorers, each in [0, 1]
  (llm-d's default profile weighs prefix 3, queue 2, kv 2);
- ``vllm-dp``: vLLM's own balancer over its data-parallel engines (``vllm serve -dp N`` behind
  one endpoint, :func:`vllm_dp_score`), the pods as its ranks.

Scores follow GIE: the queue and running scorers are ``(max - q) / (max - min)`` over the
candidates (1 when all are equal), the KV scorer ``1 - usage``, the prefix scorer the share of
the prompt's blocks matched.  The highest total wins; ties go to a seeded random pick among
them (GIE's max-score picker).  P/D disaggregation is the fleet's (a prefill pool and a decode
pool, each with its own router: :class:`~generation.fleet.replay.FleetReplay`).
"""
from __future__ import annotations

import random
from collections import OrderedDict

ROUTERS = ("round-robin", "least-queue", "least-running", "lowest-kv", "prefix-precise", "prefix-approx",
           "weighted", "vllm-dp")
DEFAULT_WEIGHTS = {"prefix": 3.0, "queue": 2.0, "kv": 2.0}


class Router:
    """Picks a pod for a request.  ``pick(hashes, pods)``: ``hashes`` the request's prompt
    block names (:func:`~generation.engine.replay.trace_block_hashes`; None when nothing is
    shared), ``pods`` the candidates (:class:`~generation.fleet.replay.Pod`, with ``queued()``,
    ``running()``, ``kv_usage()`` and ``cached_prefix(hashes)``), non-empty; returns one.
    ``routed(hashes, pod)`` tells it where the request went (the approximate prefix index
    learns from it)."""
    name = "router"
    uses_prefix = False                 # reads the requests' block names
    reads_state = True                  # reads the pods' state (round-robin does not)
    reads_queue_only = False            # of the pods' state, reads only queued() (the fleet's quiet pods)

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def pick(self, hashes, pods):
        raise NotImplementedError

    def routed(self, hashes, pod) -> None:
        pass

    def forget(self, pod) -> None:
        """``pod`` left the fleet."""

    def _best(self, pods, scores):
        top = max(scores)
        best = [p for p, s in zip(pods, scores) if s >= top - 1e-12]
        return best[0] if len(best) == 1 else best[self.rng.randrange(len(best))]


class RoundRobin(Router):
    name = "round-robin"
    reads_state = False

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.turn = 0

    def pick(self, hashes, pods):
        pod = pods[self.turn % len(pods)]
        self.turn += 1
        return pod


def vllm_dp_score(waiting: float, running: float, kv_usage: float, in_flight: float = 0) -> float:
    """vLLM 0.34's load score of a data-parallel engine (``DPLBAsyncMPClient.get_core_engine_for_request``,
    ``vllm/v1/engine/core_client.py``; the lowest wins): the larger of the API server's requests in
    flight there and the engine's ``waiting + running``, plus ``waiting x 6 x (kv_usage - 0.5)``
    past half a full KV cache (a queue on a KV-bound engine drains slowly)."""
    score = max(in_flight, waiting + running)
    if waiting and kv_usage > 0.5:
        score += waiting * 6.0 * (kv_usage - 0.5)
    return score


class VllmDataParallel(Router):
    """``vllm-dp``: the pods as the engines of ``vllm serve -dp N``, each request to the lowest
    :func:`vllm_dp_score`, the scan starting one pod further each request (ties in turn).  vLLM
    reads its coordinator's counts, published every 100 ms, and floors them with its own exact
    count in flight; the fleet reads each pod's exactly at the arrival, which is that floor."""
    name = "vllm-dp"

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.start = 0

    def pick(self, hashes, pods):
        n = len(pods)
        best, best_score = pods[0], float("inf")
        for i in range(n):
            pod = pods[(self.start + i) % n]
            waiting = pod.queued()
            score = vllm_dp_score(waiting, pod.running(), pod.kv_usage() if waiting else 0.0)
            if score < best_score:
                best, best_score = pod, score
        self.start = (self.start + 1) % n
        return best


def spread_score(values) -> list[float]:
    """GIE's queue scorer: ``(max - v) / (max - min)``, 1 for all when they are equal."""
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    return [(hi - v) / (hi - lo) for v in values]


class ApproxPrefixIndex:
    """The router's own record of the prompt blocks it sent to each pod: an LRU of
    ``lru_blocks`` block names per pod (GIE's approximate prefix plugin), not told of
    evictions."""

    def __init__(self, lru_blocks: int = 31250):
        self.lru_blocks = lru_blocks
        self.index: dict = {}            # pod name -> OrderedDict of block names

    def match(self, hashes, pod) -> int:
        lru = self.index.get(pod.name)
        if not lru or not hashes:
            return 0
        n = 0
        for h in hashes:
            if h not in lru:
                break
            n += 1
        return n

    def add(self, hashes, pod) -> None:
        if not hashes:
            return
        lru = self.index.setdefault(pod.name, OrderedDict())
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        while len(lru) > self.lru_blocks:
            lru.popitem(last=False)

    def forget(self, pod) -> None:
        self.index.pop(pod.name, None)


class Weighted(Router):
    """``sum w_i score_i`` over the scorers named in ``weights`` (``prefix``, ``queue``,
    ``kv``, ``running``); ``precise`` chooses the prefix scorer's source (the pods' block pools,
    or the router's LRU of ``lru_blocks`` per pod).  A single scorer is a plain policy."""

    def __init__(self, weights: dict | None = None, *, precise: bool = True, lru_blocks: int = 31250,
                 seed: int = 0, name: str = "weighted"):
        super().__init__(seed)
        self.weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
        bad = set(self.weights) - {"prefix", "queue", "kv", "running"}
        if bad:
            raise ValueError(f"--router-weights: unknown scorer {sorted(bad)[0]!r} (prefix, queue, kv, running)")
        self.precise = precise
        self.uses_prefix = bool(self.weights.get("prefix"))
        self.approx = None if precise else ApproxPrefixIndex(lru_blocks)
        self.name = name
        used = {k for k, v in self.weights.items() if v}
        self.queue_only = self.weights["queue"] if used == {"queue"} else 0.0
        self.reads_queue_only = bool(used) and used <= ({"queue"} if precise else {"queue", "prefix"})

    def pick(self, hashes, pods):
        if len(pods) == 1:
            return pods[0]
        if self.queue_only:         # least-queue: the scores below, without the lists of floats
            w = self.queue_only
            qs = [p.queued() for p in pods]
            lo, hi = min(qs), max(qs)
            if hi == lo:
                best = pods
            else:
                top = w - 1e-12     # the best total is w (score 1 at the minimum)
                best = [p for p, q in zip(pods, qs) if q == lo or w * ((hi - q) / (hi - lo)) >= top]
            return best[0] if len(best) == 1 else best[self.rng.randrange(len(best))]
        w = self.weights
        total = [0.0] * len(pods)
        if w.get("prefix") and hashes:
            n = len(hashes)
            for k, p in enumerate(pods):
                m = p.cached_prefix(hashes) if self.precise else self.approx.match(hashes, p)
                total[k] += w["prefix"] * m / n
        if w.get("queue"):
            for k, s in enumerate(spread_score([p.queued() for p in pods])):
                total[k] += w["queue"] * s
        if w.get("running"):
            for k, s in enumerate(spread_score([p.running() for p in pods])):
                total[k] += w["running"] * s
        if w.get("kv"):
            for k, p in enumerate(pods):
                total[k] += w["kv"] * (1.0 - p.kv_usage())
        return self._best(pods, total)

    def routed(self, hashes, pod) -> None:
        if self.approx is not None:
            self.approx.add(hashes, pod)

    def forget(self, pod) -> None:
        if self.approx is not None:
            self.approx.forget(pod)


def parse_weights(text: str) -> dict:
    """``prefix=3,queue=2,kv=2`` as a dict; raises ValueError naming ``--router-weights``."""
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        try:
            out[k.strip()] = float(v)
        except ValueError:
            sep = ""
        if not sep or out[k.strip()] < 0:
            raise ValueError(f"--router-weights: {part!r} is not scorer=weight (a number >= 0)")
    return out


def make_router(name: str, *, seed: int = 0, weights: dict | None = None, precise: bool = True,
                lru_blocks: int = 31250, flag: str = "--router") -> Router:
    """The router called ``name`` (one of :data:`ROUTERS`).  The prefix scorers alone still
    break ties by load (a small queue weight), as a deployed profile pairs them with a load
    scorer; ``weighted`` takes ``weights`` (default :data:`DEFAULT_WEIGHTS`) and ``precise``.
    Raises ValueError naming ``flag``."""
    if name == "round-robin":
        return RoundRobin(seed)
    if name == "least-queue":
        return Weighted({"queue": 1.0}, seed=seed, name=name)
    if name == "least-running":
        return Weighted({"running": 1.0}, seed=seed, name=name)
    if name == "lowest-kv":
        return Weighted({"kv": 1.0}, seed=seed, name=name)
    if name == "prefix-precise":
        return Weighted({"prefix": 1.0, "queue": 0.01}, precise=True, seed=seed, name=name)
    if name == "prefix-approx":
        return Weighted({"prefix": 1.0, "queue": 0.01}, precise=False, lru_blocks=lru_blocks, seed=seed, name=name)
    if name == "weighted":
        return Weighted(weights, precise=precise, lru_blocks=lru_blocks, seed=seed, name=name)
    if name == "vllm-dp":
        return VllmDataParallel(seed)
    raise ValueError(f"{flag} must be one of {', '.join(ROUTERS)}; got {name!r}")
