"""``--latency-calculator step``: the live server's engine steps, on the real clock, in the hub.

One :class:`StepEngine` per rank runs vLLM V1's scheduler (:mod:`generation.engine.scheduler`)
step after step: each step's duration comes from the step-time model
(:mod:`generation.engine.step_time`), and at its end every sequence in it emits its token at the
same instant.  One libev timer per step drives every stream (not one per stream): the step's
callback tells each sequence that emitted (``EngineRequest.notify``), which either sends the
chunk from the hub (:class:`~server.sse_emitter.HubEmitter`) or wakes the request's greenlet.

Steps chain on the modelled timeline: a step starts when the previous one ends (not when the
loop got round to it), and runs while the previous step's tokens are being sent, as vLLM V1's
engine core steps while its frontend streams the last outputs; a late loop delays emission, and
the next steps catch up.  But the hub's own work sets a floor: the timeline does not run more
than :data:`~.step_pacing.STEP_LEAD` ahead of when the hub would have sent the last step's tokens
(:func:`~.step_pacing.step_end`), counting the CPU time the hub spent (on the sends, and on
requests and stream ends in between), not the time a busy machine kept the process waiting.  So
when the hub's work is slower than the steps (hundreds of streams of 10 ms steps), the engine
waits for it instead of running ahead on a timeline that no client sees, and the lag does not
accumulate; the step times (ITL, TPOT, ...) are then those the clients measure.  A stall of the
process alone (a busy machine) is caught up, as before, and does not stretch the timeline, which
keeps the figures of a busy machine those of the model, up to a point: the timeline never runs
more than :data:`~.step_pacing.STALL_LEAD` (100 ms) ahead of the sends as they happened, so that a
process the machine starves for long does not send ever later tokens.  The time steps waited is
``vllm_sim:engine_step_wait_seconds_total``.  An idle engine starts its next step when a request
arrives (after the frontend overhead, as vLLM's API server
tokenizes before the engine sees a request).  All callbacks run in the hub and never block, but
for the end of a step: libev's epoll waits in whole milliseconds, rounded up (and 1 ms at
least), so a timer fires 0-1 ms late, and that was in every token's emission lag; the step's
timer is armed :data:`END_LEAD` early and its callback sleeps the rest (at most that long, a
precise ``nanosleep``), so the step ends on time to within ~0.1 ms.  The per-step work is
O(requests in the step).
"""
from __future__ import annotations

import logging
import math
import random
import time

from gevent.hub import Waiter, get_hub

from .request import ClientDisconnected, SeqState
from .scheduler import EngineRequest, Scheduler
from .perf.stalls import dp_lockstep
from .spec_decode import spec_step_time
from .step_pacing import STALL_LEAD, step_end
from .stream_interval import ready

log = logging.getLogger("vllm_sim")
monotonic = time.monotonic
thread_time = time.thread_time      # CPU time of the hub's thread (every greenlet runs on it)
FLUSH = -1          # Simulator.FLUSH: what was rendered so far goes out before this greenlet waits
END_LEAD = 0.0011   # s: a step's end timer fires this early (libev's lateness, 0-1 ms) and waits the rest
BACKDATE = 0.0022    # s: how far a request's queue time and an idle engine's step may lie in the past (libev)
EMIT_LAG_WEIGHT = 0.1  # a step's weight in the running mean of the emission lag (about the last 10 steps)
try:                # the hub may not yield: the blocking sleep, whether or not gevent patched time
    from gevent.monkey import get_original
    _sleep = get_original("time", "sleep")
except ImportError:                      # pragma: no cover - gevent is a dependency
    _sleep = time.sleep


class StepEngine:
    """The engine of one rank in step mode.

    ``scheduler`` a :class:`Scheduler`; ``step_time`` an object with ``step_time(num_decode,
    decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context) -> seconds``,
    ``frontend_time() -> seconds`` and ``kv_bytes_per_token``; ``metrics`` the
    :class:`~generation.metrics.recorder.MetricsRecorder`; ``kv_cache`` the prefix cache (or None);
    ``rng`` a seeded ``random.Random`` for the step-time jitter (relative standard deviation
    ``jitter``); ``kv_transfer_bandwidth`` bytes/s of a remote prefill's KV transfer;
    ``pause_seed`` seeds the engine's pauses (the step model's ``pauses``, when it has them)."""

    def __init__(self, scheduler: Scheduler, step_time, metrics, *, kv_cache=None, rng=None, jitter: float = 0.0,
                 kv_transfer_bandwidth: float = 25e9, description: str = "", pause_seed: int | str = 0):
        self.scheduler = scheduler
        self.spec = scheduler.spec          # speculative decoding (its SpecDecode), or None
        self.step_time = step_time
        self.metrics = metrics
        self.kv_cache = kv_cache
        self.prefix_cache = None          # the pool as a prefix cache (Simulator.kv_cache)
        if kv_cache is not None:
            from .step_cache import StepPrefixCache
            self.prefix_cache = StepPrefixCache(scheduler, kv_cache)
            self.prefix_cache.stepping = lambda: self.busy
        self.rng = rng
        self.jitter = jitter
        self.kv_transfer_bandwidth = kv_transfer_bandwidth
        self.description = description
        self.frontend = step_time.frontend_time()
        # the modelled API server (generation.engine.perf.step_model.Frontend): its CPU admits
        # requests one after another; its output latency is added on the way in (the same TTFT
        # and E2E as the replay's, where it is added on the way out)
        self.fe = step_time.frontend() if hasattr(step_time, "frontend") else None
        self.busy = False           # a step is running (its timer armed) or about to start
        self.timer = None
        self.plan = None
        self.last_end = 0.0
        self.kicked_at = None       # the earliest queue time of the requests that kicked an idle engine
        # when the hub would have handed the last step's tokens to the kernel had it had the CPU
        # all along (monotonic s): its CPU time counts, not the time the machine took it away
        self.hub_free = 0.0
        self.hub_cpu = thread_time()            # the hub's thread CPU time when hub_free was set
        self.sent_at = 0.0          # when the last step's tokens were actually all handed over
        # the server's own emission (a step's end to its tokens handed to the sockets, seconds,
        # a running mean): the modelled frontend's output latency already covers it, so a
        # request's first token is held that much less (at most fe_out) instead of both adding up
        self.emit_lag = 0.0
        self.steps = 0
        self.pending = 0            # requests in their frontend delay, not yet queued
        self.delayed: set = set()   # those in the frontend delay (staged ones are in staged)
        self.pending_tokens = 0     # their prompt tokens (the waiting queue's uncached tokens to be)
        self.async_scheduling = bool(getattr(step_time, "async_scheduling", False))
        scheduler.hold_finished_slots = self.async_scheduling
        self.jit = step_time.moe_jit(scheduler.max_num_batched_tokens) if hasattr(step_time, "moe_jit") else None
        # the engine's pauses (EnginePauses: host-side hiccups), seeded as the replay's
        self.pauses = step_time.pauses(random.Random(f"{pause_seed}-pauses")) if hasattr(step_time, "pauses") else None
        # a DP MoE rank waits for its peers' steps (DpLockstep), drawn from its own seed
        self.lockstep = dp_lockstep(step_time, random.Random(f"{pause_seed}-dp-lockstep"))
        self.staged: list = []      # (request, queued at) that arrived during the running step
        self.stuck_head = None      # the last request warned of as larger than the pool (_warn_stuck)
        # the server's sends of pre-rendered chunks (server.sse_emitter.StepSends.presend):
        # called with a step's emitted requests as soon as the step is complete, before the
        # next step is planned (vLLM's frontend streams while its engine core plans); returns
        # them in the order their notifications go out
        self.presend = None
        # --enable-mfu-metrics: vLLM's per-step work estimate (generation.engine.perf.mfu.PerfCounters)
        self.perf = None
        scheduler.on_prefilled = self._on_prefilled
        scheduler.on_preempt = self._on_preempt
        scheduler.on_external = self._on_external
        self._hub = None

    # ---- requests ----------------------------------------------------------------------
    def set_pause_state(self, state: str) -> None:
        """vLLM's ``Scheduler.set_pause_state`` (``/pause``, ``/sleep``; see
        :class:`~generation.engine.engine_state.EngineState`): ``paused_new`` admits no waiting
        request, ``paused_all`` plans no step (the running requests are frozen after the step in
        progress); ``unpaused`` steps again, the requests queued meanwhile included."""
        self.scheduler.pause_state = state
        if state == "unpaused":
            self.kick()

    def waiting_count(self) -> int:
        """Requests waiting: in the queue, or still in their frontend delay."""
        return len(self.scheduler.waiting) + self.pending

    def in_flight(self) -> list:
        """Every request not ended: running, queued, staged or still in its frontend delay
        (an abort_requests or a checkpoint's wait must find one that arrived a few ms ago)."""
        sched = self.scheduler
        return [*sched.running, *sched.waiting, *(req for req, _ in self.staged), *self.delayed]

    def queued_beyond_batch(self) -> int:
        """Waiting requests that the batch's free seats (``--max-num-seqs``) cannot take: what
        ``--max-waiting-queue-length`` bounds (a request that can run at once never counts)."""
        sched = self.scheduler
        return max(0, self.waiting_count() - (sched.max_num_seqs - len(sched.running)))

    def add(self, seq, arrival: float) -> EngineRequest:
        """Queue ``seq`` (arrived at ``arrival``, monotonic seconds); returns its request."""
        req_ = seq.request
        n = len(seq.pieces)
        output_len = 1 if req_.remote_decode else max(n, 1)
        req = EngineRequest(seq.prompt_len, output_len, seq=seq, lora=seq.lora, arrival=arrival,
                            priority=req_.priority)
        if self.prefix_cache is not None:
            req.block_hashes = self.prefix_cache.block_hashes(seq)
        if req_.remote_prefill:       # P/D decode side: the KV of the blocks not cached here comes over the network
            req.prefix_hit = _remote_kv
            local = 0
            if req.block_hashes is not None:        # None without prefix caching (or asleep)
                bs = self.scheduler.block_size
                local = len(self.scheduler.pool.lookup(req.block_hashes, (seq.prompt_len - 1) // bs)) * bs
            req.kv_ready_at = arrival + (seq.prompt_len - local) * self.step_time.kv_bytes_per_token \
                / self.kv_transfer_bandwidth
        seq.engine_req = req
        seq.arrival = arrival
        fe = self.fe
        at = ((fe.admit(arrival, seq.prompt_len) + max(0.0, fe.c.fe_out - self.emit_lag)) if fe is not None
              else arrival + self.frontend)
        if at > monotonic():
            self.pending += 1
            self.pending_tokens += req.prompt_len
            self._enqueue_at(req, at)
        else:
            self._enqueue(req, at)
        return req

    def _enqueue_at(self, req, at: float) -> None:
        self.delayed.add(req)
        loop = self._loop()
        loop.update_now()           # libev counts ``after`` from its cached clock, stale on a busy loop
        timer = loop.timer(max(0.0, at - monotonic()))
        timer.start(self._enqueue_later, req, timer, at)

    def _enqueue_later(self, req, timer, at: float) -> None:
        timer.close()
        if monotonic() < at:        # never early: the frontend delay is a floor
            self._enqueue_at(req, at)
            return
        self.delayed.discard(req)
        self.pending -= 1
        self.pending_tokens -= req.prompt_len
        if req.state == EngineRequest.ABORTED:
            return
        # libev fires a timer up to a whole ms late: the request joins at its modelled time
        # (a little in the past), not at the timer's, unless the loop was held up for longer
        self._enqueue(req, max(at, monotonic() - BACKDATE))

    def _enqueue(self, req: EngineRequest, now: float) -> None:
        if self.async_scheduling and self.plan is not None:
            # vLLM's async scheduling planned the next step when this one started: a request
            # that arrives now waits for the plan after it (as the replay's cutoff)
            self.staged.append((req, now))
            self.pending += 1
            self.pending_tokens += req.prompt_len
            return
        self.scheduler.add(req, now)
        self.kick(now)

    def abort(self, seq) -> None:
        req = getattr(seq, "engine_req", None)
        self.delayed.discard(req)
        if req is not None and req.state in (EngineRequest.WAITING, EngineRequest.RUNNING):
            self.scheduler.abort(req)
            self.kick()           # freed blocks may admit waiting requests
        elif req is not None:
            req.state = EngineRequest.ABORTED if req.state != EngineRequest.DONE else req.state

    # ---- prefix cache ------------------------------------------------------------------
    def _on_prefilled(self, req: EngineRequest) -> None:
        seq = req.seq
        if seq is not None and not seq.request.remote_prefill:   # a remote prefill's hits: the local ones
            seq.cached_tokens = req.cached_tokens                  # (StepPrefixCache), the rest transferred


    def _on_external(self, req: EngineRequest, queried: int, hit: int) -> None:
        """The CPU tier's lookup (``--kv-offloading-size``), as vLLM counts its offloading
        connector's: ``vllm:external_prefix_cache_queries`` / ``_hits``."""
        self.metrics.external_queries.value += queried
        self.metrics.external_hits.value += hit

    def _on_preempt(self, req: EngineRequest) -> None:
        req.stored = False              # recomputed later: its blocks are stored again
        self.metrics.preemptions.value += 1

    # ---- steps -------------------------------------------------------------------------
    def _loop(self):
        hub = self._hub
        if hub is None:
            hub = self._hub = get_hub()
        return hub.loop

    def kick(self, at: float | None = None) -> None:
        """Start stepping if idle (or only waiting for a KV transfer), once this turn of the loop
        is over: requests admitted in the same turn join the same step.  ``at``: when the
        request that kicks it joined the queue (monotonic s, at most :data:`BACKDATE` ago); an
        idle engine's step starts then, not after the callback's turn."""
        if at is not None and (self.kicked_at is None or at < self.kicked_at):
            self.kicked_at = at
        if not self.busy or (self.plan is None and self.timer is not None):
            self.busy = True
            self._loop().run_callback(self._start_step)

    def _start_step(self) -> None:
        if self.plan is None and self.timer is not None:     # waiting for a KV transfer: plan now
            self.timer.close()
            self.timer = None
        now = monotonic()
        at, self.kicked_at = self.kicked_at, None
        self._plan_step(now if at is None else max(min(at, now), now - BACKDATE, self.last_end), True)

    def _plan_step(self, start: float, joining: bool = False) -> None:
        sched = self.scheduler
        if self.staged and not sched.has_work():     # an idle engine plans for them at once
            self._unstage()
        if not sched.has_work() or sched.pause_state == "paused_all":   # keep: frozen until resumed
            self._idle()
            return
        plan = sched.schedule(start)
        if self.staged:                  # arrived during the step that just ended: the next plan's
            self._unstage()
            if not plan.scheduled:
                plan = sched.schedule(start)
        if not plan.scheduled:
            self.plan = None
            if sched.pause_state != "unpaused":      # only queued requests: they wait for the resume
                self._idle()
                return
            wake = min((r.kv_ready_at for r in sched.waiting if r.kv_ready_at > start), default=0.0)
            if wake:                     # only KV transfers in flight: wait for the first
                self._arm(wake, self._transfer_done)
            else:                        # nothing fits: a request larger than the pool heads the queue
                self._idle()
                self._warn_stuck()
            return
        st = self.step_time
        if self.spec is not None:        # speculative decoding: the drafts' tokens and the drafter
            dt = spec_step_time(st, plan, sched.spec_draft, sched.spec_k)
        else:
            dt = st.step_time(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                              plan.prefill_pairs, plan.prefill_context)
        reload = plan.kv_reload_tokens
        if reload and hasattr(st, "reload_per_token"):   # a CPU KV tier's blocks come back over PCIe
            dt += reload * st.reload_per_token
        if self.lockstep is not None:    # (before the compiles: its peers compile theirs as it does, once)
            dt = self.lockstep.step(dt, start, joining)
        if self.jit is not None:     # a fused-MoE kernel variant's first eager step: its compile
            dt += self.jit.stall(plan.num_decode + plan.prefill_tokens + plan.spec_tokens)
        if self.pauses is not None:
            dt += self.pauses.stall(start, dt)
        if self.jitter > 0 and self.rng is not None:
            dt *= max(0.5, 1.0 + self.rng.gauss(0.0, self.jitter))
        plan.end = start + dt
        self.plan = plan
        self._arm(plan.end, self._end_step)

    def _warn_stuck(self) -> None:
        """The waiting queue's head needs more KV blocks than the pool has (a tiny
        ``--num-gpu-blocks-override``: vLLM's start-up check counts the null block, its pool does
        not hand it out): vLLM retries it every step and never schedules it, and first come first
        served holds every request behind it (vllm-project/vllm#39734).  The engine waits the same
        way (until the client aborts it); one warning per such request says why."""
        sched = self.scheduler
        if not sched.waiting:
            return
        req = sched.waiting[0]
        need = sched.blocks_for(min(req.num_tokens, sched.max_model_len))
        if need <= sched.pool.num_blocks or req is self.stuck_head:
            return
        self.stuck_head = req
        log.warning("step engine: a request of %d tokens needs %d KV blocks, the cache has %d for tokens (one of "
                    "its blocks is vLLM's null block): vLLM never schedules it, and the %d requests queued behind "
                    "it wait too (vllm-project/vllm#39734)", req.num_tokens, need, sched.pool.num_blocks,
                    len(sched.waiting) - 1)

    def _idle(self) -> None:
        self.busy = False
        if self.prefix_cache is not None:    # events held for a step that did not come
            self.prefix_cache.step_end()

    def _unstage(self) -> None:
        staged, self.staged = self.staged, []
        self.pending -= len(staged)
        self.pending_tokens -= sum(req.prompt_len for req, _ in staged)
        for req, at in staged:
            if req.state != EngineRequest.ABORTED:
                self.scheduler.add(req, at)

    def _arm(self, deadline: float, callback) -> None:
        loop = self._loop()
        loop.update_now()
        lead = END_LEAD if callback == self._end_step else 0.0
        timer = self.timer = loop.timer(max(0.0, deadline - lead - monotonic()))
        timer.start(callback, deadline)

    def end_timer_due(self) -> float:
        """When the running step's end timer fires (``monotonic`` s: its end less END_LEAD), or
        inf between steps: other work on the hub should not start just before it."""
        plan = self.plan
        return plan.end - END_LEAD if plan is not None else math.inf

    def _transfer_done(self, deadline: float) -> None:
        self.timer.close()
        self._plan_step(max(deadline, monotonic()), True)       # idle until now: it joins its DP peers

    def _end_step(self, deadline: float) -> None:
        self.timer.close()
        self.timer = None
        loop = self._loop()
        loop.update_now()
        now = monotonic()
        if deadline - now > 2 * END_LEAD:        # (libev's cached clock was stale: wait again)
            self._arm(deadline, self._end_step)
            return
        cpu = thread_time()
        plan = self.plan
        self.plan = None
        self.steps += 1
        end = step_end(step_end(plan.end, self.hub_free), self.sent_at, STALL_LEAD)
        if end != plan.end:              # the hub was still sending the previous step's tokens
            self.metrics.step_wait.value += end - plan.end
        self.last_end = end
        # the hub's work since the last step (requests, stream ends) delays this step's sends
        start = max(end, self.hub_free + (cpu - self.hub_cpu))
        # The step's bookkeeping (0.2-0.6 ms at 256 requests) runs in the timer's lead, before
        # the sleep to its end: nothing else runs until the sleep ends (a blocking one), and the
        # step's sends then leave at its end instead of after the bookkeeping (issue 32).
        if self.perf is not None:        # vLLM's estimated_*_per_gpu counters, from the step's requests
            self.perf.observe(plan)      # before complete() moves their computed tokens on
        emitted = self.scheduler.complete(plan, end)
        if self.prefix_cache is not None:    # the step's KV events: one batch, as vLLM's
            self.prefix_cache.step_end()
        now = monotonic()
        if now < deadline:               # never early: armed END_LEAD early, the rest is slept here
            while now < deadline:
                _sleep(deadline - now)
                now = monotonic()
            loop.update_now()
        notified = emitted
        if self.presend is not None and emitted:
            notified = self.presend(emitted)       # the streams' ticks in the order it returns
        if self.fe is not None and emitted:     # streaming the step's tokens takes the frontend's CPU
            self.fe.emit(end, len(emitted))
        self._record(plan, emitted)
        self._plan_step(end)             # the next step starts where this one ended
        for req in notified:             # after planning: a stream's end may admit new requests
            notify = req.notify
            if notify is not None:
                notify(req)
        self.hub_cpu = done = thread_time()
        self.hub_free = start + (done - cpu)
        self.sent_at = sent = monotonic()
        if emitted:
            self.emit_lag += EMIT_LAG_WEIGHT * ((sent - end) - self.emit_lag)

    def _record(self, plan, emitted) -> None:
        """Per step, as vLLM's IterationStats: ``iteration_tokens_total`` gets the step's prompt
        tokens plus its generated tokens (a request's accepted drafts too); the token counters
        their tokens (the prompts of the requests whose first token this is, and every token
        made: ``MetricsRecorder.engine_tokens``); one inter-token latency per request output after
        its first (this step's end minus its previous output: one for a step's accepted drafts,
        as vLLM observes one per output), observed once per distinct gap."""
        m = self.metrics
        m.iteration_tokens.observe(plan.prefill_tokens + len(emitted) + plan.accepted)
        m.engine_tokens(emitted)
        end = plan.end
        gaps: dict = {}
        for req in emitted:
            prev = req.prev_token
            if prev is not None:
                gap = end - prev
                gaps[gap] = gaps.get(gap, 0) + 1
        observe_n = m.itl.observe_n
        for gap, count in gaps.items():
            observe_n(gap, count)

    # ---- streams ------------------------------------------------------------------------
    def stream(self, seq, per_token: bool, blocks: bool, deadlines: bool, schedule_for, interval: int = 1):
        """``Simulator.run`` in step mode: a generator of token indexes (``range`` s of tokens
        emitted together with ``blocks``), FLUSH (-1) before this greenlet waits, and with
        ``deadlines`` :class:`~generation.engine.token_schedule.TokenSchedule` s that the driver
        emits as the steps produce them (``schedule_for(seq, start, stop)``; an empty one is the
        wait for the first token).  The sequence's times are the engine's step ends; raises
        ClientDisconnected when it is aborted meanwhile.

        ``interval`` > 1 (the stream interval): the first token goes alone, later ones are held
        until ``interval`` of them are unsent or the request ended, then go as one
        ``slice(start, stop)`` (:func:`~generation.engine.stream_interval.ready`); a schedule
        applies the same rule per step (:meth:`TokenSchedule.emitted`)."""
        engine = self
        req = seq.engine_req
        n = len(seq.pieces)
        lag = self.metrics.token_lag
        spec = self.spec is not None
        if req.num_output == 0 and req.state != req.DONE:
            if deadlines:
                yield schedule_for(seq, 0, 0)
            else:
                if per_token:
                    yield FLUSH
                engine.wait(seq, req, 0)
            if seq.state == SeqState.ABORTED:
                raise ClientDisconnected()
        if per_token:
            k = 0
            while k < n:
                avail = engine.available(seq, req)
                upto = avail if interval == 1 else ready(k, avail, n, interval)
                if upto > k:
                    now = monotonic()
                    for _ in range(upto - k):
                        lag(now - req.last_token)
                    if (interval > 1 or spec) and upto - k > 1:     # a step's drafts: one output
                        yield slice(k, upto)
                    elif blocks and upto - k > 1:
                        yield range(k, upto)
                    else:
                        for j in range(k, upto):
                            yield j
                    k = upto
                    continue
                if deadlines:
                    schedule = schedule_for(seq, k, n)
                    schedule.interval = interval
                    yield schedule
                    k = schedule.next
                else:
                    yield FLUSH
                    engine.wait(seq, req, avail)
                if seq.state == SeqState.ABORTED:
                    raise ClientDisconnected()
        while req.state != req.DONE:          # non-streaming, or a prefill-only answer's end
            engine.wait(seq, req, req.num_output)
            if seq.state == SeqState.ABORTED:
                raise ClientDisconnected()
        seq.started_at = req.first_scheduled
        seq.first_token_at = req.first_token
        seq.finished_at = req.finished_at
        self.metrics.finished(seq)

    def emit_in_greenlet(self, schedule):
        """Emit a step-driven ``schedule`` from the calling greenlet: each step's chunks once the
        engine emitted them; raises ClientDisconnected if the sequence is aborted meanwhile."""
        seq, req, engine = schedule.seq, schedule.seq.engine_req, self
        if schedule.stop == schedule.start:
            engine.wait(seq, req, 0)
        have = schedule.next
        while schedule.next < schedule.stop:
            if seq.state == SeqState.ABORTED:
                raise ClientDisconnected()
            engine.wait(seq, req, have)
            data = schedule.due(monotonic())
            if data is not None:
                yield data
                have = schedule.next
            else:                       # held by the stream interval: wait for the next step's
                have = req.num_output
        if seq.state == SeqState.ABORTED:
            raise ClientDisconnected()

    # ---- waiting for tokens (greenlet-driven streams) -------------------------------------
    def wait(self, seq, req: EngineRequest, have: int) -> None:
        """Block the calling greenlet until ``req`` has emitted more than ``have`` tokens, has
        finished, or ``seq`` was aborted (``Simulator.cancel`` switches ``seq.event``)."""
        if req.num_output > have or req.state in (EngineRequest.DONE, EngineRequest.ABORTED):
            return
        waiter = Waiter(get_hub())
        seq.event = waiter
        req.notify = lambda _r: waiter.switch(None)
        try:
            waiter.get()
        finally:
            req.notify = None
            seq.event = None

    def available(self, seq, req: EngineRequest) -> int:
        """Tokens of ``seq`` that can be sent now."""
        if req.state == EngineRequest.DONE:
            return len(seq.pieces)
        return min(req.num_output, len(seq.pieces))


def _remote_kv(req: EngineRequest) -> int:
    return req.prompt_len - 1            # pulled from the prefill pod: only the last token is computed


def kv_capacity_summary(num_gpu_blocks: int, block_size: int, max_model_len: int) -> tuple[int, float]:
    """``(GPU KV cache size in tokens, maximum concurrency for max_model_len-token requests)`` as
    vLLM logs them at start-up."""
    tokens = num_gpu_blocks * block_size
    per_req = math.ceil(max_model_len / block_size) * block_size
    return tokens, tokens / per_req if per_req else 0.0
