"""One pod's engine in virtual time, stepped from outside (:class:`PodReplay`), and what it
records (:class:`ReplayResult`): the loop of :func:`generation.engine.replay.replay` as an
object, so that the single-pod replay and a fleet of pods on one clock
(:mod:`generation.fleet`) run the same code with the server's scheduler, KV block pool and step
model.  Pure logic on a virtual clock (seconds)."""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from .block_pool import CountingPool
from .replay_log import Finished, Latencies, StepLog, StepStats
from .scheduler import EngineRequest, Scheduler
from .perf.stalls import dp_lockstep
from .spec_decode import spec_step_time
from .step_pacing import STEP_LEAD


@dataclass
class ReplayResult:
    """Per-request timings (seconds) and per-step samples of one replay.  ``requests`` are the
    finished EngineRequests; ``client`` maps each to ``(first token, last token)`` as its client
    received them (the frontend's output latency and queueing added; the engine's times when the
    model has no frontend); ``timed_out`` the requests aborted at the client's timeout;
    ``rejected`` the trace requests refused for a prompt that fills ``max_model_len`` (vLLM's
    400); ``unfinished`` the EngineRequests still queued or running when the replay ended (a
    request needing more KV blocks than the pool has, and those behind it: vLLM never schedules
    them either).  ``itl`` holds every inter-token latency and ``steps`` one row per step,
    compactly (:mod:`generation.engine.replay_log`: they read like lists)."""
    requests: list = field(default_factory=list)      # finished EngineRequests
    itl: Latencies = field(default_factory=Latencies)  # every inter-token latency, seconds
    steps: StepLog = field(default_factory=StepLog)   # (end time, KV usage, running, waiting, tokens)
    preemptions: int = 0
    duration: float = 0.0
    client: dict = field(default_factory=dict)        # EngineRequest -> [first token, last token] at the client
    timed_out: list = field(default_factory=list)
    frontend_busy: float = 0.0                        # the frontend's CPU seconds
    rejected: list = field(default_factory=list)      # TraceRequests past the context, refused
    done: Finished | None = None                      # compact: the finished requests as columns
    unfinished: list = field(default_factory=list)    # EngineRequests never finished (queued, running)
    jit_stalls: int = 0                               # MoE kernel compiles (MoeJit), t_jit seconds each
    dp_wait: tuple | None = None                      # DP lockstep: (steps that waited for a peer, seconds added)

    def times(self, req) -> tuple[float, float]:
        """``(first token, last token)`` of a finished request as its client saw them."""
        seen = self.client.get(req)
        return (seen[0], seen[1]) if seen else (req.first_token, req.finished_at)

    def percentiles(self, values, ps=(50, 90, 99)) -> dict:
        if hasattr(values, "percentiles"):      # Latencies, LatencyPool
            return values.percentiles(ps)
        if not values:
            return {f"p{p}": None for p in ps}
        v = sorted(values)
        return {f"p{p}": v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))] for p in ps}

    def summary(self) -> dict:
        """TTFT, ITL, TPOT and e2e percentiles (seconds, as the clients saw them), throughput
        (output tokens / s), preemptions, timed-out requests, the mean and peak KV usage and a
        MoE engine's kernel compiles."""
        d = self.done
        if d is not None:               # compact: the same values from the columns
            n = len(d)
            ttft = [f - a for a, f in zip(d.arrival, d.first)]
            e2e = [last - a for a, last in zip(d.arrival, d.last)]
            tpot = [(last - f) / (o - 1) for f, last, o in zip(d.first, d.last, d.output) if o > 1]
            out_tokens = sum(d.output)
        else:
            reqs = self.requests
            n = len(reqs)
            seen = [self.times(r) for r in reqs]
            ttft = [f - r.arrival for r, (f, _) in zip(reqs, seen)]
            e2e = [last - r.arrival for r, (_, last) in zip(reqs, seen)]
            tpot = [(last - f) / (r.num_output - 1) for r, (f, last) in zip(reqs, seen) if r.num_output > 1]
            out_tokens = sum(r.num_output for r in reqs)
        steps = self.steps
        if isinstance(steps, StepStats):
            mean = steps.usage_sum / len(steps) if steps else 0.0
            peak = steps.usage_peak
        else:
            usage = steps.usage if isinstance(steps, StepLog) else [s[1] for s in steps]
            mean = sum(usage) / len(usage) if usage else 0.0
            peak = max(usage) if usage else 0.0
        return {"requests": n, "duration_s": self.duration,
                "output_tokens_per_s": out_tokens / self.duration if self.duration else 0.0,
                "requests_per_s": n / self.duration if self.duration else 0.0,
                "ttft_s": self.percentiles(ttft), "itl_s": self.percentiles(self.itl),
                "tpot_s": self.percentiles(tpot), "e2e_s": self.percentiles(e2e),
                "preemptions": self.preemptions, "steps": len(self.steps), "timed_out": len(self.timed_out),
                "rejected": len(self.rejected), "unfinished": len(self.unfinished),
                "kv_usage_mean": mean, "kv_usage_peak": peak, "moe_kernel_compiles": self.jit_stalls,
                **({"dp_lockstep": {"steps_waited": self.dp_wait[0], "seconds_waited": self.dp_wait[1]}}
                   if self.dp_wait is not None else {})}


def trace_block_hashes(tr, block_size: int) -> list | None:
    """The names of a trace request's full prompt blocks that other requests can share (None:
    nothing shared): with ``prompt``, the group's ``prefix_tokens`` blocks named by the group and
    the rest by the prompt (a repeated prompt, or a session whose later turns extend it); with
    only ``prefix_group``, the group's prefix blocks.  What a pod's prefix cache and a
    prefix-aware router (:mod:`generation.fleet.routing`) look up."""
    if tr.prompt is not None:           # a repeated prompt: its group's prefix, then its own blocks
        shared = tr.prefix_tokens // block_size
        return [(tr.prefix_group, i) if i < shared else (tr.prefix_group, tr.prompt, i)
                for i in range(tr.prompt_tokens // block_size)]
    if tr.prefix_group is not None:     # the group's prefix blocks, named by the group
        return [(tr.prefix_group, i) for i in range(tr.prefix_tokens // block_size)]
    return None


class PodReplay:
    """One pod's engine in virtual time, stepped from outside: the loop of :func:`replay` as an
    object, so that a fleet (:mod:`generation.fleet`) can run many pods on one clock and route
    each arrival from the pods' current state.

    :meth:`submit` queues a request arriving at ``at`` (seconds); :meth:`advance_until` runs
    every event of this pod strictly before ``t`` (step plans at their start, step completions
    at their end, idle jumps to the next arrival); :meth:`next_event_time` is when the pod next
    does something (``inf``: idle).  The rule that keeps a stepped pod identical to
    :func:`replay`: every request arriving at ``t`` or earlier is submitted before the pod is
    advanced past ``t`` (a plan made at ``now`` reads the arrivals up to ``now``, a completion
    at ``end`` admits the frontend's arrivals up to ``end``).  :func:`replay` submits the whole
    trace and advances to infinity; :meth:`finish` returns the :class:`ReplayResult`.

    ``on_finished(req, now, seen_at)`` is called for each request as it finishes (its last
    token at ``now`` on the engine, ``seen_at`` at the client); the closed loop of
    :func:`replay` and a P/D fleet's hand-offs use it.  ``compact``: keep no EngineRequest once
    finished and no row per step (the result's ``done`` columns and a
    :class:`~generation.engine.replay_log.StepStats`: the same summary, ~50 bytes a request
    instead of ~600, none a step instead of 40; a fleet's long replays).  ``pause_seed`` seeds
    the engine's pauses (:class:`~generation.engine.perf.step_model.EnginePauses`, when the step
    model has them).  Other arguments as :func:`replay`."""

    def __init__(self, scheduler: Scheduler, step_time, *, frontend: float | None = None,
                 rng: random.Random | None = None, jitter: float = 0.0, emission_cost: float = 0.0,
                 timeout: float = 0.0, max_steps: int = 10_000_000, on_finished=None, group_decode: bool = True,
                 compact: bool = False, pause_seed: int | str = 0):
        self.scheduler = scheduler
        self.step_time = step_time
        self.rng = rng
        self.jitter = jitter
        self.emission_cost = emission_cost
        self.timeout = timeout
        self.max_steps = max_steps
        self.on_finished = on_finished
        self.fe = None
        if frontend is None and hasattr(step_time, "frontend"):
            self.fe = step_time.frontend()
        self.fixed_fe = step_time.frontend_time() if frontend is None else frontend
        self.async_sched = bool(getattr(step_time, "async_scheduling", False))
        scheduler.hold_finished_slots = self.async_sched
        # this engine's fused-MoE kernels: a variant's first eager step stalls on its compile
        self.jit = step_time.moe_jit(scheduler.max_num_batched_tokens) if hasattr(step_time, "moe_jit") else None
        # the engine's pauses (EnginePauses), drawn from their own seed: the same for any jitter
        self.pauses = step_time.pauses(random.Random(f"{pause_seed}-pauses")) if hasattr(step_time, "pauses") else None
        # a DP MoE rank waits for its peers' steps (DpLockstep), drawn from its own seed
        self.lockstep = dp_lockstep(step_time, random.Random(f"{pause_seed}-dp-lockstep"))
        self.result = ReplayResult()
        if compact:                         # no row per step, no EngineRequest kept once finished
            self.result.steps = StepStats()
            self.result.done = Finished()
        self.bs = scheduler.block_size
        self.arrivals: list = []            # heap of (time into the queue, index, EngineRequest)
        self.deadlines: list = []           # heap of (arrival + timeout, index, EngineRequest)
        self.incoming: deque = deque()      # (arrival, index, EngineRequest) not yet through the frontend
        self.order = 0
        self.now = 0.0
        self.prev_start = None              # start of the step that just ended (async planning)
        self.emitted_at = 0.0               # when the last step's tokens were out (emission_cost)
        self.steps = 0
        self.plan = None                    # the step in flight: planned, ends at self.end
        self.end = 0.0
        self.idle = False                   # the last plan was empty: the next event is a wake-up
        self.stuck = False                  # nothing can ever run until a new request comes
        self.seen_at = 0.0                  # when the last step's tokens reached the clients
        # block_pool.CountingPool: while no request has block hashes, count the blocks (same
        # results); the first request with hashes brings the pool back (real ids for those held)
        self.group_decode = group_decode
        self.counting = None
        if group_decode and CountingPool.usable(scheduler.pool):
            self.counting = scheduler.pool = CountingPool(scheduler.pool)
        scheduler.decode_in_groups(group_decode, self._late)    # fast_decode: decoding requests as a group
        steps = self.result.steps           # a step's row: one C call into the StepLog's array
        self._log = steps.rows.extend if isinstance(steps, StepLog) else steps.append
        self.stats = steps if isinstance(steps, StepStats) else None

    def _late(self, req: EngineRequest) -> None:
        """fast_decode: ``req``'s last token, the last step's, was not listed: its client saw it then."""
        times = self.result.client.get(req)
        if times is not None:
            times[1] = self.seen_at

    def submit(self, tr, at: float, *, kv_ready_at: float = 0.0, prefix_hit=None):
        """Queue ``tr`` arriving at ``at`` (not before the pod's last event); returns its
        EngineRequest, or None when it is refused: a prompt that fills ``max_model_len`` (vLLM's
        400; listed in the result's ``rejected``); an output past what the context leaves is cut
        to it, as vLLM 0.34's ``get_max_tokens`` cuts ``max_tokens``.  ``kv_ready_at`` / ``prefix_hit``: a
        P/D decode side's remote KV (the request is not scheduled before its transfer ends, and
        finds ``prefix_hit(req)`` tokens computed, those the pod's own prefix cache holds among
        them; its blocks are cached like a local prefill's), as the server's step engine queues
        a remote prefill."""
        scheduler = self.scheduler
        room = scheduler.max_model_len - tr.prompt_tokens
        if room < 1:
            self.result.rejected.append(tr)
            return None
        req = EngineRequest(tr.prompt_tokens, min(tr.output_tokens, room), arrival=at, group=tr.prefix_group,
                            prefix_len=tr.prefix_tokens, priority=tr.priority, kv_ready_at=kv_ready_at)
        # a remote prefill's KV (P/D) is what the local prefix cache does not hold, and its blocks
        # are cached once loaded, as vLLM's connector path does (local hits first, then the
        # connector's ``get_num_new_matched_tokens`` for the rest)
        req.prefix_hit = prefix_hit
        req.block_hashes = trace_block_hashes(tr, self.bs)
        if self.counting is not None and req.block_hashes is not None and scheduler.enable_prefix_caching:
            scheduler.pool = self.counting.restore([*scheduler.running, *scheduler.waiting])
            self.counting = None
        if self.fe is not None:             # the frontend's CPU takes requests in arrival order
            self.incoming.append((at, self.order, req))
        else:
            heapq.heappush(self.arrivals, (at + self.fixed_fe, self.order, req))
        if self.timeout > 0:
            heapq.heappush(self.deadlines, (at + self.timeout, self.order, req))
        self.order += 1
        self.stuck = False
        return req

    def _wake(self) -> float:
        """When an idle pod (its last plan empty) next tries: its next arrival, frontend
        arrival or KV transfer; ``inf`` when none."""
        now, arrivals, incoming = self.now, self.arrivals, self.incoming
        nxt = [arrivals[0][0]] if arrivals else []
        if incoming:
            nxt.append(incoming[0][0])
        nxt += [r.kv_ready_at for r in self.scheduler.waiting if r.kv_ready_at > now]
        return max(now, min(nxt)) if nxt else math.inf

    def next_event_time(self) -> float:
        """When this pod next plans or completes a step (seconds); ``inf`` when it has nothing
        to do until a request is submitted."""
        if self.plan is not None:
            return self.end
        if self.stuck or self.steps >= self.max_steps:
            return math.inf
        if self.idle:
            return self._wake()
        if self.arrivals or self.incoming or self.scheduler.has_work():
            return self.now
        return math.inf

    def advance_until(self, t: float = math.inf) -> None:
        """Run this pod's events before ``t`` (all of them with ``t`` = ``inf``)."""
        scheduler = self.scheduler
        fe = self.fe
        result = self.result
        arrivals, deadlines, incoming = self.arrivals, self.deadlines, self.incoming
        running, waiting = scheduler.running, scheduler.waiting
        step_time = self.step_time.step_time
        reload_cost = getattr(self.step_time, "reload_per_token", 0.0)
        jitter = self.jitter if self.rng is not None else 0.0
        jit = self.jit
        pauses = self.pauses
        lockstep = self.lockstep
        while True:
            if self.plan is not None:                       # the step in flight ends
                if self.end >= t:
                    return
                if self.plan.group is not None and self._run_group(t):
                    continue
                self._complete()
            if self.stuck or not (arrivals or incoming or running or waiting) or self.steps >= self.max_steps:
                return
            if self.idle:                                   # nothing ran: wake at the next event
                wake = self._wake()
                if wake >= t:
                    return
                self.idle = False
                self.now = wake
            now = self.now
            if now >= t:
                return
            if incoming and incoming[0][0] <= now:
                while incoming and incoming[0][0] <= now:
                    at, i, req = incoming.popleft()
                    heapq.heappush(arrivals, (fe.admit(at, req.prompt_len), i, req))
            if deadlines and deadlines[0][0] <= now:
                while deadlines and deadlines[0][0] <= now:
                    _, _, req = heapq.heappop(deadlines)
                    if req.state in (EngineRequest.WAITING, EngineRequest.RUNNING):   # queued, or not yet
                        scheduler.abort(req)
                        result.timed_out.append(req)
            if arrivals:
                cutoff = self.prev_start if (self.async_sched and self.prev_start is not None) else now
                while arrivals and arrivals[0][0] <= cutoff:
                    at, _, req = heapq.heappop(arrivals)
                    if req.state == EngineRequest.ABORTED:
                        continue
                    scheduler.add(req, at)
            plan = scheduler.schedule(now)
            if not plan.scheduled and not plan.num_decode:
                self.prev_start = None
                if self._wake() == math.inf:
                    self.stuck = True       # nothing can ever run (a request larger than the cache)
                    return
                self.idle = True
                continue
            if scheduler.spec is not None:  # speculative decoding: the drafts' tokens and the drafter
                dt = spec_step_time(self.step_time, plan, scheduler.spec_draft, scheduler.spec_k)
            else:
                dt = step_time(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                               plan.prefill_pairs, plan.prefill_context)
            if plan.kv_reload_tokens and reload_cost:
                dt += plan.kv_reload_tokens * reload_cost
            if lockstep is not None:        # (before the compiles: the peers compile theirs as it does, once)
                dt = lockstep.step(dt, now, self.prev_start is None)    # after idle: it joins the peers
            if jit is not None:
                dt += jit.stall(plan.num_decode + plan.prefill_tokens + plan.spec_tokens)
            if pauses is not None:
                dt += pauses.stall(now, dt)
            if jitter > 0:
                dt *= max(0.5, 1.0 + self.rng.gauss(0.0, jitter))
            self.prev_start = now
            self.plan = plan
            end = now + dt                  # step_pacing.step_end, inlined (every step)
            lead = self.emitted_at - STEP_LEAD
            self.end = lead if lead > end else end

    def _run_group(self, t: float) -> bool:
        """Run the steps in flight and after it that are *pure* group steps, in one loop: steps
        of :mod:`~generation.engine.fast_decode` that only decode the anchored requests (no
        prefill chunk, no admission, no request's first or last token or odd ITL, nothing due in
        the frontend, the deadlines or the arrivals, before ``t``).  Each does exactly what
        :meth:`_complete`, :meth:`LazyDecode.complete`, this loop and
        :meth:`LazyDecode.schedule` do for such a step (a block boundary's block allocated in
        batch order), without their calls and lists; the first step that is not pure is left to
        them.  Returns False when the step in flight is not pure (nothing done), or when the
        scheduler's ``complete`` or ``schedule`` is wrapped (the replay command's progress counts
        its steps there)."""
        lz = self.scheduler.lazy
        plan = self.plan
        if lz is None or plan.scheduled or lz.odd or lz.g in lz.fin:
            return False
        own = getattr(self.scheduler, "__dict__", {})
        if "complete" in own or "schedule" in own:          # wrapped: each step must go through it
            return False
        s = self.scheduler
        running, waiting, pool = s.running, s.waiting, s.pool
        anchor, cross, fin = lz.anchor, lz.cross, lz.fin
        fe, result, stats = self.fe, self.result, self.stats
        arrivals, deadlines, incoming = self.arrivals, self.deadlines, self.incoming
        itl = result.itl
        step_time = self.step_time.step_time
        jitter = self.jitter if self.rng is not None else 0.0
        async_sched = self.async_sched
        budget = s.max_num_batched_tokens
        pauses = self.pauses
        lockstep = self.lockstep
        while True:
            # ---- complete `plan` (LazyDecode.complete, then _complete, for a pure group step)
            end = self.end
            d = plan.group
            g = lz.g
            prev_end = lz.t_last
            lz.ctx += d
            lz.g = g = g + 1
            lz.t_prev, lz.t_last = prev_end, end
            plan.end = end
            self.plan = None
            self.now = end
            if pool.cpu_inflight:                   # the CPU tier's step end (Scheduler.complete's)
                pool.end_cpu_step(not running)
            itl.add(end - prev_end, d)
            if self.emission_cost:
                self.emitted_at = max(end, self.emitted_at) + self.emission_cost * d
            if fe is not None:
                while incoming and incoming[0][0] <= end:
                    at, i, req = incoming.popleft()
                    heapq.heappush(arrivals, (fe.admit(at, req.prompt_len), i, req))
            self.seen_at = fe.emit(end, d) if (fe is not None and d) else end
            self.steps += 1
            if stats is None:
                self._log((end, pool.usage(), len(running), len(waiting), plan.num_tokens))
            else:
                stats.add(end, pool.usage())
            # ---- plan the next step at `now` = end, if it is pure too (else advance_until does)
            now = end
            if (now >= t or self.steps >= self.max_steps or not running or lz.pre or lz.odd
                    or (incoming and incoming[0][0] <= now) or (deadlines and deadlines[0][0] <= now)):
                return True
            if arrivals and arrivals[0][0] <= (self.prev_start if (async_sched and self.prev_start is not None)
                                               else now):
                return True
            n = len(anchor)
            if n != len(running) or budget - n < 0 or (waiting and budget - n > 0) or g in fin:
                return True
            need = cross.get(g)
            if need:
                need = [r for r in need if r in anchor]
                if len(need) > pool.num_free:
                    return True                 # a preemption: the scheduler's own code
            cross.pop(g, None)
            if need:
                lz.grow(need, g)
            plan.start = now                    # the plan object again: nothing else holds it
            plan.group = plan.num_decode = n
            plan.decode_context = lz.ctx + n
            lz.group_steps += 1
            dt = step_time(n, plan.decode_context, plan.num_chunks, plan.prefill_tokens, plan.prefill_pairs,
                           plan.prefill_context)
            if lockstep is not None:
                dt = lockstep.step(dt, now)
            if self.jit is not None and n > self.jit.max_graph:     # (a graph-sized step: no call)
                dt += self.jit.stall(n)
            if pauses is not None and (pauses.next is None or pauses.next < now + dt):     # (none due: no call)
                dt += pauses.stall(now, dt)
            if jitter > 0:
                dt *= max(0.5, 1.0 + self.rng.gauss(0.0, jitter))
            self.prev_start = now
            self.plan = plan
            e = now + dt
            lead = self.emitted_at - STEP_LEAD
            self.end = lead if lead > e else e
            if self.end >= t or lz.odd or g in fin:
                return True

    def _complete(self) -> None:
        """The step in flight ends at ``self.end``: its tokens out, the frontend's arrivals
        during it admitted first."""
        scheduler, fe, result, incoming = self.scheduler, self.fe, self.result, self.incoming
        client = result.client
        done = result.done
        plan, now = self.plan, self.end
        self.plan = None
        self.now = now
        emitted = scheduler.complete(plan, now)
        # fast_decode: `emitted` lists the requests needing their own handling; `lazy` more emitted
        # a token each, ITL `now - prev_end`
        lazy = emitted.lazy if type(emitted) is not list else 0
        n_out = len(emitted) + lazy
        if lazy:
            result.itl.add(now - emitted.prev_end, lazy)
        if self.emission_cost:     # the frontend sends one step's tokens after the previous step's
            self.emitted_at = max(now, self.emitted_at) + self.emission_cost * n_out
        if fe is not None:
            # the frontend's CPU serves in time order: requests that arrived during the step
            # are preprocessed before the step's outputs, which exist only at its end
            while incoming and incoming[0][0] <= now:
                at, i, req = incoming.popleft()
                heapq.heappush(self.arrivals, (fe.admit(at, req.prompt_len), i, req))
        seen_at = self.seen_at = fe.emit(now, n_out) if (fe is not None and n_out) else now
        self.steps += 1
        for req in emitted:
            if req.prev_token is not None:
                result.itl.append(now - req.prev_token)
            times = client.get(req)
            if times is None:
                client[req] = [seen_at, seen_at]
            else:
                times[1] = seen_at
            if req.state == EngineRequest.DONE:
                if done is None:
                    result.requests.append(req)
                else:
                    times = client.pop(req)
                    done.add(req, times[0], times[1])
                if self.on_finished is not None:
                    self.on_finished(req, now, seen_at)
        stats = self.stats
        if stats is None:
            self._log((now, scheduler.pool.usage(), len(scheduler.running), len(scheduler.waiting), plan.num_tokens))
        else:                       # compact: no row, the running totals
            stats.add(now, scheduler.pool.usage())

    def finish(self) -> ReplayResult:
        """The result so far, its totals filled in (preemptions, the requests not finished,
        duration, the frontend's CPU)."""
        scheduler = self.scheduler
        if self.plan is None:               # fast_decode: every request up to date (it stays on)
            scheduler.decode_in_groups(self.group_decode, self._late)
        if self.counting is not None:       # the block pool back, real ids for the blocks held
            scheduler.pool = self.counting.restore([*scheduler.running, *scheduler.waiting])
            self.counting = None
        result = self.result
        result.preemptions = self.scheduler.num_preemptions
        result.unfinished = [*scheduler.running, *scheduler.waiting]
        result.duration = self.now
        if self.fe is not None:
            result.frontend_busy = self.fe.busy
        if self.jit is not None:
            result.jit_stalls = self.jit.stalls
        if self.lockstep is not None:
            result.dp_wait = (self.lockstep.waits, self.lockstep.waited)
        return result
