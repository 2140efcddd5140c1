"""N simulated vLLM pods on one virtual clock, behind a router and an autoscaler.

Each pod is the replay's own stepper (:class:`generation.engine.replay.PodReplay`): the
server's scheduler, KV block pool and step-time model, nothing re-implemented.  The fleet
advances every pod to each arrival (:meth:`PodReplay.advance_until`), lets the router pick a pod
from their state at that instant (:mod:`generation.fleet.routing`), and hands the request to
it; a pod's events between arrivals are its own.  A router that reads only the queues
(least-queue, prefix-approx) needs only the pods whose queue may be non-empty: a *quiet* pod
(:func:`_quiet`) is advanced when it is picked or at an event, several steps at once.  Because a pod sees exactly the requests
routed to it, at their arrival times, its result is the one
:func:`generation.engine.replay.replay` gives for those requests alone (the tests check it).

- **Autoscaler** (:mod:`generation.fleet.autoscaler`): at each scrape the ready pods' KV
  usage and queues are read; a scale-up adds a pod that is routable ``startup_delay`` seconds
  later; a scale-down takes the least loaded ready pod out of routing and removes it once its
  requests finished (drain).  Pods over time and GPU-hours (each pod from its creation to its
  removal, times its GPUs) are recorded.
- **P/D disaggregation** (``prefill_pods`` > 0): both pods are picked when the request
  arrives, the decode pod first, as llm-d's P/D profile handler does (``pd-profile-handler``,
  ``pkg/plugins/profile/pd_profile_handler.go`` of llm-d/llm-d-inference-scheduler: the decode
  profile runs first, then the decider chooses whether the prefill profile runs too; its
  ``docs/disagg_pd.md``: the request lands on the decode pod, whose sidecar sends the prefill
  to the chosen prefill pod and then the decode to its own vLLM).  The prefill pod computes the prompt and one token (vLLM's
  ``do_remote_decode``); when that answer is back at the sidecar, the chosen decode pod gets
  the request, waits for the KV of the prompt's blocks its own prefix cache lacks (``tokens x
  kv_bytes_per_token / kv_transfer_bandwidth`` seconds, as the server's step engine) and finds
  all but the last prompt token computed (``do_remote_prefill``); the blocks are then cached
  on the decode pod as a local prefill's are.  The client's first token is the decode
  pod's.  Each pool has its own router (the prefill pool's can be prefix-aware); the decider is
  llm-d's ``prefix-based-pd-decider`` with ``pd_threshold`` as its ``nonCachedTokens``: a
  request whose prompt tokens not cached on the picked decode pod are fewer is served by that
  pod alone (:meth:`FleetReplay._disaggregate`).  With an
  autoscaler each pool is scaled on its own pods' metrics (``prefill_autoscaler`` for the
  prefill pool), as WVA scales a P/D deployment's prefill and decode variants apart; a decode
  pod that drains still takes the requests it was picked for.

Times are seconds from the trace's start.  The router reads a pod's state between its events:
a step in flight shows the requests it scheduled as running.
"""
from __future__ import annotations

import heapq
import math
import random
from array import array
from dataclasses import replace

from generation.engine.pod_replay import PodReplay, ReplayResult, trace_block_hashes
from generation.engine.replay import TraceRequest
from generation.engine.replay_log import LatencyPool

from .results import FleetResult, Records


class Pod:
    """One simulated vLLM pod of the fleet: its :class:`PodReplay` (``replay``; its scheduler
    at ``replay.scheduler``), ``role`` (``serve``, ``prefill`` or ``decode``), and its life:
    ``created``, ``ready_at`` (routable from then), ``drain_at`` (no new requests from then) and
    ``removed_at`` (None while it lives).  ``routed`` lists ``(TraceRequest, arrival)`` as it
    was handed each (for accounting)."""

    def __init__(self, name: str, index: int, role: str, replay: PodReplay, created: float, ready_at: float):
        self.name = name
        self.index = index
        self.role = role
        self.replay = replay
        self.created = created
        self.ready_at = ready_at
        self.drain_at = None
        self.removed_at = None
        self.routed: list = []
        self.n_routed = 0               # requests routed to it (counted even without keep_routed)
        self.key = math.inf             # its next event (its entry in the fleet's event heap)
        self.hot = False                # in the fleet's list of pods advanced at each arrival
        self.pending = 0                # P/D decode pod: requests picked for it, their prefill not back yet
        self.itl_seen = 0               # give_up_itl: the runs of its ITLs counted so far
        self._waiting, self._arrivals, self._incoming = replay.scheduler.waiting, replay.arrivals, replay.incoming

    # what a router and an autoscaler read (the pod's /metrics and KV events)
    def queued(self) -> int:
        """Requests at the pod that are not running: ``vllm:num_requests_waiting`` and those
        still in its frontend or async planning."""
        return len(self._waiting) + len(self._arrivals) + len(self._incoming)

    def running(self) -> int:
        """``vllm:num_requests_running``."""
        return len(self.replay.scheduler.running)

    def kv_usage(self) -> float:
        """``vllm:kv_cache_usage_perc`` (0..1)."""
        return self.replay.scheduler.usage()

    def cached_prefix(self, hashes) -> int:
        """How many leading blocks of ``hashes`` the pod's prefix cache holds (what llm-d's
        KV-event indexer knows from ``BlockStored`` / ``BlockRemoved``)."""
        lookup = getattr(self.replay.scheduler.pool, "lookup", None)
        if not hashes or lookup is None:          # a pool that only counts: nothing cached yet
            return 0
        return len(lookup(hashes, len(hashes)))

    @property
    def result(self) -> ReplayResult:
        return self.replay.finish()


# A fleet's pods, at most: an idle pod holds about 11 KB (100,000 took 1.1 GB and 15 s before a
# request ran; a million, 10 GB), so a typo in --pods is refused, not swapped
MAX_PODS = 10_000


class FleetReplay:
    """Replay ``trace`` (TraceRequests by arrival) on a fleet (module docstring).

    ``new_pod(index, role)`` returns ``(scheduler, step_time)`` for a new pod (the server's
    :func:`~generation.engine.replay.scheduler_for` and step model: :func:`pod_factory`);
    ``pods`` the pods at the start (ready at 0); ``router`` a
    :class:`~generation.fleet.routing.Router`; ``autoscaler`` an
    :class:`~generation.fleet.autoscaler.Autoscaler` or None; ``prefill_pods`` > 0 with
    ``prefill_router`` for P/D (then ``pods`` are the decode pods, ``autoscaler`` scales them
    and ``prefill_autoscaler`` the prefill pool), ``kv_transfer_bandwidth`` bytes/s and
    ``pd_threshold`` tokens; ``gpus_per_pod`` (TP) for GPU-hours; ``jitter`` and
    ``seed`` the step-time jitter (each pod its own seeded stream); ``timeout`` a client's
    timeout (seconds, 0: none).  ``give_up_ttft`` > 0 (the planner's p99 TTFT SLO, seconds)
    stops the replay early once more than 1% of the trace's requests have waited longer than
    that for their first token (the p99 cannot be met any more; ``FleetResult.gave_up``);
    ``give_up_itl`` > 0 (the p99 ITL SLO, seconds) likewise once more than 1% of the
    inter-token latencies the trace's requests will have (``output_tokens - 1`` each) were longer.
    ``keep_routed`` lists each pod's requests (``Pod.routed``); ``compact`` keeps each pod's
    finished requests as columns and no row per step
    (:class:`~generation.engine.pod_replay.PodReplay`'s ``compact``: the same summaries and
    records, ~100 bytes a request instead of ~1 KB, and no 40 bytes a step); ``refresh_interval``
    > 0 has the router read the pods every that many seconds (GIE's refresh) instead of at
    each arrival.
    Raises ValueError for a fleet that cannot run."""

    @staticmethod
    def check(pods: int, prefill_pods: int = 0, autoscaler=None, prefill_autoscaler=None, pd_threshold: int = 0,
              kv_transfer_bandwidth: float = 25e9, refresh_interval: float = 0.0) -> None:
        """The settings' bounds, checked before any trace is read (the CLI calls it first).
        Raises ValueError naming the flag."""
        if not 1 <= pods <= MAX_PODS:
            raise ValueError(f"--pods must be from 1 to {MAX_PODS:,}, got {pods}")
        if not 0 <= prefill_pods <= MAX_PODS - pods:
            raise ValueError(f"--prefill-pods must be from 0 to {MAX_PODS - pods:,} (at most {MAX_PODS:,} pods "
                             f"in all), got {prefill_pods}")
        if not 0 <= refresh_interval < math.inf:      # NaN too
            raise ValueError(f"--router-refresh must be a finite number of seconds >= 0, got {refresh_interval}")
        for a in (autoscaler, prefill_autoscaler):
            if a is not None and a.policy.max_replicas > MAX_PODS:
                raise ValueError(f"--max-pods / maxReplicas must be at most {MAX_PODS:,}, got {a.policy.max_replicas}")
        if prefill_autoscaler is not None and not prefill_pods:
            raise ValueError("a prefill autoscaler needs --prefill-pods")
        for a, n, flag in ((autoscaler, pods, "--pods"), (prefill_autoscaler, prefill_pods, "--prefill-pods")):
            if a is not None and not (a.policy.min_replicas <= n <= a.policy.max_replicas):
                raise ValueError(f"{flag} {n} is outside the autoscaler's replicas "
                                 f"({a.policy.min_replicas}..{a.policy.max_replicas})")
        if pd_threshold < 0:            # llm-d's decider refuses a negative nonCachedTokens too
            raise ValueError(f"--pd-threshold cannot be negative, got {pd_threshold}")
        if not kv_transfer_bandwidth > 0:
            raise ValueError("--kv-transfer-bandwidth must be positive")

    def __init__(self, new_pod, trace, *, pods: int = 1, router=None, autoscaler=None, prefill_pods: int = 0,
                 prefill_router=None, kv_transfer_bandwidth: float = 25e9, pd_threshold: int = 0,
                 gpus_per_pod: int = 1, jitter: float = 0.0, seed: int = 0, timeout: float = 0.0,
                 keep_routed: bool = True, give_up_ttft: float = 0.0, give_up_itl: float = 0.0,
                 refresh_interval: float = 0.0,
                 compact: bool = False, prefill_autoscaler=None):
        from .routing import RoundRobin
        self.check(pods, prefill_pods, autoscaler, prefill_autoscaler, pd_threshold, kv_transfer_bandwidth,
                   refresh_interval)
        self.new_pod = new_pod
        self.trace = trace
        self.router = router or RoundRobin(seed)
        self.prefill_router = prefill_router or RoundRobin(seed + 1)
        self.autoscaler = autoscaler
        self.prefill_autoscaler = prefill_autoscaler
        self.pd = prefill_pods > 0
        self.kv_bw = kv_transfer_bandwidth
        self.pd_threshold = pd_threshold
        self.gpus_per_pod = gpus_per_pod
        self.jitter = jitter
        self.seed = seed
        self.timeout = timeout
        self.keep_routed = keep_routed
        self.compact = compact
        self.give_up_ttft = give_up_ttft
        self.give_up_itl = give_up_itl
        self.itl_late = 0               # ITLs longer than give_up_itl so far (runs up to each pod's itl_seen)
        self.lazy = prefill_pods == 0 and (refresh_interval > 0 or not self.router.reads_state)
        # a router that reads only the queues: a pod whose queue is empty and cannot fill is not
        # advanced at each arrival, only when it is picked or at an event (:meth:`_quiet`)
        self.quiet = prefill_pods == 0 and not self.lazy and getattr(self.router, "reads_queue_only", False)
        self.hot: list = []             # quiet mode: the pods advanced at each arrival
        self.refresh = refresh_interval if self.router.reads_state else math.inf
        self.next_refresh = 0.0
        self.late: set = set()          # requests seen without a first token past give_up_ttft
        self.gave_up = False
        self.pods: list[Pod] = []
        self.serving: list[Pod] = []    # routable decode/serve pods
        self.prefill: list[Pod] = []    # routable prefill pods
        self.starting: list[Pod] = []
        self.draining: list[Pod] = []
        self.heap1: list = []           # (next event, seq, pod): pods that take arrivals
        self.heap2: list = []           # decode pods (P/D): advanced after the prefill pods
        self.events: list = []          # (time, order, seq, kind, data)
        self.seq = 0
        self.timeline: list = []
        self.origin: dict = {}          # decode EngineRequest -> (the client's arrival, prefill's cache hits)
        self.pd_origin: dict = {}       # prefill EngineRequest -> (its TraceRequest, the decode pod picked)
        self.bs = None
        self.now = 0.0
        for _ in range(prefill_pods):
            self._add_pod("prefill", 0.0, 0.0)
        for _ in range(pods):
            self._add_pod("decode" if prefill_pods else "serve", 0.0, 0.0)
        self._mark(0.0)

    # ---- pods -----------------------------------------------------------------------------
    def _add_pod(self, role: str, created: float, ready_at: float) -> Pod:
        i = len(self.pods)
        sched, step_time = self.new_pod(i, role)
        self.bs = sched.block_size
        on_finished = self._handoff if role == "prefill" else None
        rng = random.Random(f"{self.seed}-pod{i}-steps") if self.jitter > 0 else None
        # each pod its own pauses and DP peers (pod 0 as a replay of its requests alone, as the server's rank 0)
        pr = PodReplay(sched, step_time, rng=rng, jitter=self.jitter, timeout=self.timeout, on_finished=on_finished,
                       compact=self.compact, pause_seed=f"{self.seed}-pod{i}" if i else self.seed)
        pod = Pod(f"{role}-{i}" if role != "serve" else f"pod-{i}", i, role, pr, created, ready_at)
        if role == "decode" and self.compact:   # the client's arrival and the prefill's hits, by finished row
            pod.client_arrival, pod.client_cached = array("d"), array("q")
            pr.on_finished = lambda req, now, seen_at, pod=pod: self._decoded(pod, req)
        pod.kv_bytes_per_token = getattr(step_time, "kv_bytes_per_token", 0)
        self.pods.append(pod)
        if ready_at <= created:
            (self.prefill if role == "prefill" else self.serving).append(pod)
        else:
            self.starting.append(pod)
            self._push(ready_at, 0, "ready", pod)
        return pod

    def _heap(self, pod: Pod) -> list:
        return self.heap2 if pod.role == "decode" else self.heap1

    def _resched(self, pod: Pod) -> None:
        k = pod.replay.next_event_time()
        pod.key = k
        if self.quiet:
            if not pod.hot:
                pod.hot = True
                self.hot.append(pod)
        elif k < math.inf:
            self.seq += 1
            heapq.heappush(self._heap(pod), (k, self.seq, pod))

    def _advance(self, heap: list, t: float) -> None:
        while heap and heap[0][0] < t:
            key, _, pod = heapq.heappop(heap)
            if key != pod.key:
                continue                 # stale: the pod was advanced or handed a request since
            pod.replay.advance_until(t)
            self._resched(pod)

    def _advance_hot(self, t: float) -> None:
        """Quiet mode, at an arrival at ``t``: advance the pods that may have a queue at ``t``;
        those that became quiet leave the list until they are handed a request."""
        keep = []
        for p in self.hot:
            if p.key < t:
                p.replay.advance_until(t)
                p.key = p.replay.next_event_time()
            if _quiet(p.replay):
                p.hot = False
            else:
                keep.append(p)
        self.hot = keep

    def _advance_all(self, t: float) -> None:
        """Quiet mode: every pod to ``t`` (an event that reads them all, or the end)."""
        for p in self.pods:
            if p.key < t:
                p.replay.advance_until(t)
                p.key = p.replay.next_event_time()

    def _push(self, t: float, order: int, kind: str, data) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, order, self.seq, kind, data))

    def _mark(self, t: float) -> None:
        self.timeline.append((t, len(self.serving) + len(self.prefill), len(self.starting), len(self.draining)))

    def _submit(self, pod: Pod, tr: TraceRequest, at: float, **kw):
        pod.n_routed += 1
        if self.keep_routed:
            pod.routed.append((tr, at))
        req = pod.replay.submit(tr, at, **kw)
        self._resched(pod)
        return req

    # ---- events ---------------------------------------------------------------------------
    def _arrive(self, tr: TraceRequest) -> None:
        """Route an arrival: to the pods, or with P/D to the decode pod the decode profile picks
        and, when the decider says so (:meth:`_disaggregate`), through the prefill pool."""
        dec = None
        if self.prefill:
            router = self.router                             # llm-d: the decode profile first
            hashes = trace_block_hashes(tr, self.bs) if router.uses_prefix or self.pd_threshold > 0 else None
            dec = router.pick(hashes if router.uses_prefix else None, self.serving)
            split = self._disaggregate(tr, dec, hashes)      # before the index learns this request
            router.routed(hashes if router.uses_prefix else None, dec)
            if not split:                                    # decode only: the picked pod prefills
                self._submit(dec, tr, tr.arrival)
                return
            router, pods = self.prefill_router, self.prefill
        else:
            router, pods = self.router, self.serving
        hashes = trace_block_hashes(tr, self.bs) if router.uses_prefix else None
        if self.lazy and tr.arrival >= self.next_refresh:     # the router's periodic refresh
            self._advance(self.heap1, tr.arrival)
            self.next_refresh = tr.arrival + self.refresh
        pod = router.pick(hashes, pods)
        if (self.lazy or self.quiet) and pod.key < tr.arrival:      # the pod itself is brought to now
            pod.replay.advance_until(tr.arrival)
        router.routed(hashes, pod)
        if pod.role == "prefill":       # vLLM's do_remote_decode: the prompt and one token
            req = self._submit(pod, replace(tr, output_tokens=1), tr.arrival)
            if req is not None:         # None: refused (past the context), as vLLM answers 400
                self.pd_origin[req] = (tr, dec)
                dec.pending += 1
        else:
            self._submit(pod, tr, tr.arrival)

    def _disaggregate(self, tr: TraceRequest, dec: Pod, hashes) -> bool:
        """llm-d's ``prefix-based-pd-decider`` (``pkg/plugins/profile/prefix_based_pd_decider.go``
        of llm-d/llm-d-inference-scheduler), its ``nonCachedTokens`` ``pd_threshold``: P/D always
        when it is 0; else not for a prompt shorter than it, nor when the prompt's tokens not
        cached on the decode pod ``dec`` (the prompt minus its matched blocks times the block
        size) are fewer.  The matched blocks are what the decode profile's prefix scorer knows:
        the router's own index (approximate) or the pod's block pool (precise); a decode router
        without a prefix scorer matches none, so the rule is the prompt's length."""
        threshold = self.pd_threshold
        if threshold <= 0:
            return True
        if tr.prompt_tokens < threshold:
            return False
        matched = 0
        router = self.router
        if hashes and router.uses_prefix:
            approx = getattr(router, "approx", None)
            matched = approx.match(hashes, dec) if approx is not None else dec.cached_prefix(hashes)
        return tr.prompt_tokens - matched * self.bs >= threshold

    def _handoff(self, req, now: float, seen_at: float) -> None:
        """A prefill pod's answer is back (``seen_at``): the decode side gets the request."""
        self._push(seen_at, 1, "handoff", req)

    def _decode(self, pre, at: float) -> None:
        """The decode side of a P/D request whose prefill answer came back at ``at``: to the
        decode pod picked at its arrival."""
        tr0, pod = self.pd_origin.pop(pre)
        pod.pending -= 1
        # the connector pulls the blocks the decode pod's own prefix cache does not hold
        local = min(pod.cached_prefix(trace_block_hashes(tr0, self.bs)), (pre.prompt_len - 1) // self.bs) * self.bs
        ready = at + (pre.prompt_len - local) * pod.kv_bytes_per_token / self.kv_bw
        req = self._submit(pod, replace(tr0, arrival=at), at, kv_ready_at=ready, prefix_hit=_remote_kv)
        if req is not None:
            self.origin[req] = (tr0.arrival, pre.cached_tokens)

    def _decoded(self, pod: Pod, req) -> None:
        """Compact P/D: a decode pod finished ``req`` (its row just added to the pod's columns);
        a request the decider kept on the pod alone has its own arrival and cache hits."""
        arrival, cached = self.origin.pop(req, None) or (req.arrival, req.cached_tokens)
        pod.client_arrival.append(arrival)
        pod.client_cached.append(cached)

    def _scaler(self, which: int):
        """``(autoscaler, pool, router, role)``: 0 the serving (or decode) pool, 1 the prefill pool."""
        if which:
            return self.prefill_autoscaler, self.prefill, self.prefill_router, "prefill"
        return self.autoscaler, self.serving, self.router, "decode" if self.pd else "serve"

    def _scrape(self, t: float, which: int) -> None:
        """A scrape of one pool: its autoscaler reads the pool's ready pods and scales it."""
        a, pool, router, role = self._scaler(which)
        metrics = [(p.kv_usage(), p.queued()) for p in pool]
        change = a.decide(t, metrics, len(pool) + sum(p.role == role for p in self.starting))
        if change > 0:
            for _ in range(change):
                self._add_pod(role, t, t + a.policy.startup_delay)
        elif change < 0 and len(pool) > 1:
            pod = min(reversed(pool), key=lambda p: p.queued() + p.running())
            pool.remove(pod)
            router.forget(pod)
            pod.drain_at = t
            self.draining.append(pod)
        self._mark(t)

    def _check_drained(self, t: float) -> None:
        for p in self.draining:
            if p.key < t:
                p.replay.advance_until(t)
                self._resched(p)
        done = [p for p in self.draining if p.replay.next_event_time() == math.inf and not p.pending]
        for p in done:
            self.draining.remove(p)
            p.removed_at = max(p.drain_at, p.replay.now)
        if done:
            self._mark(t)

    def _late(self, t: float) -> int:
        """Requests that arrived more than ``give_up_ttft`` before ``t`` and have no first
        token yet (a client waiting past the SLO), counted once each over the run."""
        limit = t - self.give_up_ttft
        late = self.late
        for p in self.pods:
            r = p.replay
            client = r.result.client
            for req in r.scheduler.waiting:
                if req.arrival < limit:
                    late.add(req)
            for req in r.scheduler.running:
                if req.arrival < limit and req not in client:
                    late.add(req)
            for item in r.arrivals:
                if item[2].arrival < limit:
                    late.add(item[2])
            for item in r.incoming:
                if item[0] < limit:
                    late.add(item[2])
        return len(late)

    def _late_itl(self) -> int:
        """Inter-token latencies longer than ``give_up_itl`` so far, over the pods that decode
        (each pod's runs counted once, the last one, which may still grow, at a later check)."""
        import numpy as np
        slo = self.give_up_itl
        for p in self.pods:
            itl = p.replay.result.itl
            end = len(itl.values) - 1
            if p.role == "prefill" or end <= p.itl_seen:
                continue
            v = np.frombuffer(itl.values, dtype=np.float64)[p.itl_seen:end]
            c = np.frombuffer(itl.counts, dtype=np.int64)[p.itl_seen:end]
            self.itl_late += int(c[v > slo].sum())
            p.itl_seen = end
            del v, c                    # no view left on the arrays: they grow again
        return self.itl_late

    def _busy(self) -> bool:
        return any(p.key < math.inf for p in self.pods if p.removed_at is None)

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> FleetResult:
        trace, n, i = self.trace, len(self.trace), 0
        events = self.events
        for which in (0, 1):
            if self._scaler(which)[0] is not None:
                self._push(self._scaler(which)[0].policy.scrape_interval, 2, "scrape", which)
        if (self.give_up_ttft > 0 or self.give_up_itl > 0) and n:
            allowed = n - math.ceil(0.99 * n)   # nearest-rank p99: this many may be late
            m = sum(max(1, tr.output_tokens) - 1 for tr in trace)     # ITLs if every request finishes
            check = max(0.25, self.give_up_ttft / 2)
            self._push(check, 3, "check", (allowed, check, m - math.ceil(0.99 * m), 0))
        inf = math.inf
        while True:
            ta = trace[i].arrival if i < n else inf
            te = events[0][0] if events else inf
            t = ta if ta < te else te
            if t == inf:
                if self.heap1:               # the prefill pods' last hand-offs
                    self._advance(self.heap1, inf)
                    if events:
                        continue
                break
            if self.quiet:
                if ta < te:
                    self._advance_hot(t)
                else:
                    self._advance_all(t)
            elif not (self.lazy and ta < te):
                self._advance(self.heap1, t)
            if events and events[0][0] < t:
                continue                     # a hand-off before t came out of a prefill pod
            if self.heap2:
                self._advance(self.heap2, t)
            self.now = t
            if te <= ta:
                _, _, _, kind, data = heapq.heappop(events)
                if kind == "handoff":
                    self._decode(data, t)
                elif kind == "ready":
                    self.starting.remove(data)
                    (self.prefill if data.role == "prefill" else self.serving).append(data)
                    self._mark(t)
                elif kind == "check":
                    if self.give_up_ttft > 0 and self._late(t) > data[0] or (
                            self.give_up_itl > 0 and data[3] % 4 == 0 and self._late_itl() > data[2]):
                        self.gave_up = True
                        break
                    if i < n or self._busy():
                        self._push(t + data[1], 3, "check", (*data[:3], data[3] + 1))
                elif kind == "scrape":
                    self._scrape(t, data)
                    if i < n or self._busy() or self.starting or any(e[3] != "scrape" for e in events):
                        self._push(t + self._scaler(data)[0].policy.scrape_interval, 2, "scrape", data)
            else:
                self._arrive(trace[i])
                i += 1
            if self.draining:
                self._check_drained(t)
        if not self.gave_up:
            self._advance(self.heap2, inf)
            self._advance(self.heap1, inf)
            if self.quiet:
                self._advance_all(inf)
        if self.draining:
            self._check_drained(self.now)
        return self._result()

    def _result(self) -> FleetResult:
        parts, itl = [], []
        end = 0.0
        for p in self.pods:
            res = p.replay.finish()
            end = max(end, res.duration)
            if p.role == "prefill":
                continue
            itl.append(res.itl)         # read as one, not copied
            d = res.done
            if d is not None:           # compact: the pod's columns (P/D: the client's arrival, the prefill's hits)
                arrival = p.client_arrival if p.role == "decode" else d.arrival
                cached = p.client_cached if p.role == "decode" else d.cached
                parts.append((p.index, arrival, d.first, d.last, d.prompt, d.output, cached))
                continue
            cols = ([], [], [], [], [], [])
            for r in res.requests:
                first, last = res.times(r)
                arrival, cached = self.origin.get(r, (r.arrival, r.cached_tokens))
                for c, v in zip(cols, (arrival, first, last, r.prompt_len, r.num_output, cached)):
                    c.append(v)
            parts.append((p.index, *cols))
        records = Records(parts, [p.name for p in self.pods])
        # the duration (throughput's divisor, GPU-hours' span): to the last token, not to the
        # autoscaler's scrape after it (up to --scrape-interval later)
        end = end or self.now
        gpu_s = sum(max(0.0, min(p.removed_at if p.removed_at is not None else end, end) - p.created)
                    for p in self.pods)
        self._mark(end)
        return FleetResult(self.pods, records, LatencyPool(itl), self.timeline, gpu_s * self.gpus_per_pod / 3600.0,
                           end, len(self.trace) - len(records), getattr(self.router, "name", "router"),
                           self.gpus_per_pod, list(self.autoscaler.decisions) if self.autoscaler else [],
                           self.gave_up, list(self.prefill_autoscaler.decisions) if self.prefill_autoscaler else [])


def _quiet(r: PodReplay) -> bool:
    """True when ``r``'s queue (:meth:`Pod.queued`) is empty and stays empty until it is handed
    a request: nothing waits or is in its frontend, and the blocks its running requests can
    still take (to their prompt plus output) are free, so that no step can preempt one back
    into the waiting queue.  Such a pod need not be advanced for a router that reads only the
    queues: its queue at any later instant is 0."""
    if r.arrivals or r.incoming:
        return False
    s = r.scheduler
    if s.waiting:
        return False
    bs = s.block_size
    need = 0
    for req in s.running:
        need += -(-(req.prompt_len + req.output_len) // bs) - req.blocks
    return need <= s.pool.num_free


def _remote_kv(req) -> int:
    """A decode pod's remote prefill: the prompt's KV came from the prefill pod, only the last
    token is computed (the server's step engine does the same)."""
    return req.prompt_len - 1


def pod_factory(server_args=()):
    """``(new_pod, cfg, settings)`` for the server flags ``server_args`` (``--gpu``, ``--model``,
    ``-tp``, ``--max-num-seqs``, ...; step mode): ``new_pod(index, role)`` gives a new pod's
    ``(scheduler, step_time)``: the server's own (:func:`~generation.engine.replay.scheduler_for`,
    :func:`~generation.engine.step_config.resolve_step_settings`), one scheduler and block pool
    per pod, the stateless step model shared.  Raises ConfigError naming the flag."""
    from generation.engine.replay import scheduler_for
    from generation.engine.step_config import load_step_config, resolve_step_settings
    cfg = load_step_config(server_args)     # --max-model-len defaults to the model's own, as the server's
    settings = resolve_step_settings(cfg)

    def new_pod(index: int, role: str):
        return scheduler_for(settings, cfg.max_model_len, cfg.max_loras, cfg.scheduling_policy), settings.step_time

    return new_pod, cfg, settings
