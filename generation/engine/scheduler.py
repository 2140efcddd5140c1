"""vLLM V1's scheduler, step by step, without a clock: which requests run in an engine step and
how many tokens each computes (docs/engine-model.md section 1, ``vllm/v1/core/sched/scheduler.py``).

One step:

1. **running requests first**, in order, while the token budget (``--max-num-batched-tokens``)
   lasts: a decoding request takes 1 token, a request in prefill the rest of its prompt, capped
   by the budget (chunked prefill), by ``--long-prefill-token-threshold`` when > 0 and by
   ``max_model_len - 1 - computed``.  Blocks are allocated lazily, for the tokens computed so far
   plus this step's;
2. a running request that cannot get its blocks **preempts the newest running request** (FCFS:
   ``running.pop()``), which frees its blocks, forgets its computed tokens and goes back to the
   **head** of the waiting queue; this repeats until the request fits or has preempted itself
   (then the running pass stops).  Recompute is the only mode;
3. **waiting requests**, FCFS, are admitted while budget remains, ``running < --max-num-seqs``
   (with async scheduling the requests that finished in the step just ended still count:
   ``hold_finished_slots``), and no request was preempted in this step; a request whose blocks
   cannot be allocated stops admission (head-of-line blocking), as does one needing more blocks
   than the pool has (vLLM retries it forever, vllm-project/vllm#39734); with ``reserve_full_isl``
   (vLLM 0.19+) its whole sequence's blocks must be free, not only its first chunk's.  The prefix
   cache gives a new request its computed tokens (block-aligned, at most ``num_tokens - 1``); a
   resumed request prefills its prompt and the tokens it already generated again, minus hits;
4. at the step's end every request whose computed tokens reached its length emits one token,
   all at the same instant (:meth:`Scheduler.complete`), and the full blocks each prefill chunk
   computed are cached (named by their hashes, ``on_cached``), chunk by chunk; the full blocks
   of generated tokens are cached when the request releases its blocks (finished, preempted,
   aborted).

With speculative decoding (``spec``, :mod:`generation.engine.spec_decode`) a decode is scheduled
with its drafts and lookahead blocks, and emits the accepted ones and the bonus token at once
(``_verified``); decodes then take the general path, and the replay's group decoding stays off.

With ``policy="priority"`` (``--scheduling-policy priority``) the waiting queue is ordered by
(priority, arrival), lower first, and the request preempted is the running one with the largest
(priority, arrival), even if it was scheduled earlier in this step (its tokens go back to the
budget), as vLLM's scheduler does.

The blocks live in a :class:`~generation.engine.block_pool.BlockPool`: a prefix block shared by
running requests is held once, and freed blocks keep their content until they are handed out
again (evicted least recently freed first), as vLLM's prefix cache.

vLLM's switches: without prefix caching (``enable_prefix_caching=False``) a request's block
hashes are dropped when it is queued: no lookups, no hits, nothing cached.  Without chunked
prefill (``enable_chunked_prefill=False``) a waiting request whose prompt (after its cache hits,
capped by the long-prefill threshold) exceeds the step's remaining budget is not split: admission
stops there, as vLLM V1's scheduler ``break``s.  With a CPU tier (``num_cpu_blocks``), full blocks
are written through to it (vLLM's offloading connector: 0.34's in the pool's module docstring,
0.15.1's, which also writes generated blocks and holds a finished request's blocks until its
writes complete, in :mod:`~generation.engine.cpu_tier_v015`); a new request's hits there, after its
GPU hits, count as computed and are reloaded in the step that admits it (``kv_reload_tokens``).

The caller owns time: :meth:`Scheduler.schedule` builds a :class:`StepPlan` (with the aggregates a
step-time model needs: :mod:`generation.engine.step_time`), the caller decides when the step ends,
then calls :meth:`Scheduler.complete`.  The same code runs the live server
(:mod:`generation.engine.step_engine`) and the virtual-clock replay
(:mod:`generation.engine.replay`).  Everything is O(requests in the step) per step; the replay
turns on :meth:`Scheduler.decode_in_groups` (:mod:`generation.engine.fast_decode`), which makes
a step O(events) with the same results.
"""
from __future__ import annotations

from collections import deque

from .block_pool import BlockPool
from .engine_request import EngineRequest, StepPlan  # noqa: F401 - imported from here too
from .spec_decode import RequestSpecMetrics
from .waiting_queue import PriorityQueue, priority_key


class Scheduler:
    """The waiting queue, the running batch and the KV blocks of one engine.

    ``num_gpu_blocks`` blocks of ``block_size`` tokens; ``max_num_seqs`` running requests at most;
    ``max_num_batched_tokens`` tokens per step; ``long_prefill_token_threshold`` (0: none) caps a
    prefill chunk; ``max_model_len`` caps a sequence; ``max_loras`` distinct LoRA adapters per
    batch (requests for another adapter are skipped over, as vLLM's scheduler skips them).
    ``on_preempt(req)`` / ``on_prefilled(req)`` tell the caller when a request is preempted and
    first completes its prompt;
    ``on_cached(req, start, end)`` that its blocks ``[start, end)`` were computed and cached, and
    ``on_prefix(req, hit_tokens)`` / ``on_external(req, queried, hit_tokens)`` of each query of
    the prefix cache / CPU tier (a request's first scheduling; vLLM's connector stats);
    ``on_release(req)`` just before a request's blocks are freed (it may extend
    ``req.block_hashes`` to the generated tokens, whose full blocks are then cached too).
    ``pool`` the :class:`BlockPool` (default: a new one of ``num_gpu_blocks``, with a CPU tier of
    ``num_cpu_blocks``); ``policy`` ``fcfs`` or ``priority``; ``enable_prefix_caching`` and
    ``enable_chunked_prefill``, ``reserve_full_isl`` (``scheduler_reserve_full_isl``) vLLM's
    switches (see the module docstring)."""

    def __init__(self, *, num_gpu_blocks: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, long_prefill_token_threshold: int = 0, max_loras: int = 0,
                 on_preempt=None, on_prefilled=None, on_cached=None, on_prefix=None, on_release=None,
                 pool=None, policy: str = "fcfs", enable_prefix_caching: bool = True,
                 enable_chunked_prefill: bool = True, num_cpu_blocks: int = 0, reserve_full_isl: bool = False):
        self.pool = pool if pool is not None else BlockPool(num_gpu_blocks, num_cpu_blocks=num_cpu_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.enable_chunked_prefill = enable_chunked_prefill
        self.reserve_full_isl = reserve_full_isl
        self.num_gpu_blocks, self.block_size, self.max_num_seqs = num_gpu_blocks, block_size, max_num_seqs
        self.max_num_batched_tokens, self.max_model_len = max_num_batched_tokens, max_model_len
        self.long_prefill_token_threshold, self.max_loras = long_prefill_token_threshold, max_loras
        self.running: list[EngineRequest] = []
        self.priority = policy == "priority"
        self.waiting = PriorityQueue() if self.priority else deque()
        # prompt tokens of the requests here (waiting or running) before their first token, kept
        # as they come, emit it and leave: --max-num-queued-tokens reads it per arrival, O(1)
        self.prefill_tokens = 0
        self.num_preemptions = 0
        self.on_preempt, self.on_prefilled, self.on_cached = on_preempt, on_prefilled, on_cached
        self.on_prefix, self.on_release = on_prefix, on_release
        self.on_external = None             # (req, queried, hit tokens): the CPU tier's lookup (a connector's)
        self.lazy = None                    # the replay's group decoding (decode_in_groups)
        # async scheduling (hold_finished_slots): a request that finished in step k still counts
        # against max_num_seqs when step k + 1 is planned (vLLM processes k's output only then)
        self.hold_finished_slots, self.held_slots, self.held_until = False, 0, -1.0
        # speculative decoding (generation.engine.spec_decode): the config, the acceptance draws'
        # seeded rng, the drafter's cost, and the drafts verified so far: drafts by how many of their
        # tokens were accepted, and draft tokens (vLLM's counters derive from them: spec_counts)
        self.spec = self.spec_rng = self.spec_draft = None
        self.spec_k = 0                     # drafts each decode carries into the next step
        self.spec_multi: list = []          # requests whose last step emitted more than one token
        self.spec_hist: list = []
        self.spec_drafted = 0
        self.spec_lookup = None             # num_speculative_tokens_per_batch_size: batch size -> drafts
        # --per-request-spec-decode-metrics: None ("none": no record at all), "summary" or "detailed";
        # each request then carries a RequestSpecMetrics from add() on, observed by _verified
        self.spec_request_metrics = None

    def speculate(self, spec, rng, draft=None) -> None:
        """Decode with ``spec``'s drafts (a :class:`~generation.engine.spec_decode.SpecDecode`):
        their acceptance drawn from ``rng`` (``random()``), ``draft`` the drafter's cost
        (:class:`~generation.engine.spec_decode.DraftCost`, or None), the drafts per batch size
        from its dynamic schedule, if any, up to ``max_num_seqs``."""
        self.spec, self.spec_rng, self.spec_draft = spec, rng, draft
        self.spec_hist = [0] * (spec.num_speculative_tokens + 1)
        self.spec_k = spec.num_speculative_tokens
        self.spec_lookup = spec.drafts_by_batch(self.max_num_seqs)

    def decode_in_groups(self, on: bool = True, on_late=None) -> None:
        """Advance decoding requests as a group between events (the replay's fast path,
        :mod:`generation.engine.fast_decode`): same results, O(events) per step.  While on,
        anchored requests' ``num_computed``, ``num_output``, ``prev_token`` and ``last_token``
        are stale and :meth:`complete` lists only the requests that need their own handling;
        ``on_late(req)`` is called when such a request is brought up to date and its last token
        was the last step's without being listed in it (an abort, a step of the scheduler's own
        code, the end), for the caller's bookkeeping of when the client saw it.  ``on=False``
        brings every request up to date and turns it off."""
        if self.lazy is not None:
            self.lazy.settle()
            self.lazy = None
        if on and self.spec is None:        # drafts are accepted per request and step: token by token
            from .fast_decode import LazyDecode
            self.lazy = LazyDecode(self, StepPlan, EngineRequest, on_late)

    # ---- state --------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks nobody holds (cached or empty)."""
        return self.pool.num_free

    @property
    def used_blocks(self) -> int:
        return self.pool.num_held

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: blocks held by requests over the cache (0..1)."""
        return self.pool.usage()

    # vLLM's PauseState (EngineState.pause_scheduler): "paused_new" admits no waiting request
    pause_state = "unpaused"

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def add(self, req: EngineRequest, now: float) -> None:
        """Queue a request (FCFS, at the tail).  Without prefix caching its block hashes are
        dropped: it neither finds nor leaves cached blocks."""
        if not self.enable_prefix_caching:
            req.block_hashes = None
        req.state = EngineRequest.WAITING
        req.queued_at = now
        if self.spec_request_metrics is not None and req.spec_metrics is None:      # vLLM's add_request
            req.spec_metrics = RequestSpecMetrics(self.spec.num_speculative_tokens,
                                                  self.spec_request_metrics == "detailed")
        self.waiting.append(req)
        self.prefill_tokens += req.prompt_len

    def abort(self, req: EngineRequest) -> None:
        """Remove a request wherever it is, releasing its blocks (client gone)."""
        if self.lazy is not None:
            self.lazy.drop(req)
        if req.state == EngineRequest.RUNNING:
            self.running.remove(req)
            self._free(req)
            if not req.num_output:
                self.prefill_tokens -= req.prompt_len
        elif req.state == EngineRequest.WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass                                # not queued yet (the frontend's delay): never counted
            else:
                if not req.num_output:
                    self.prefill_tokens -= req.prompt_len
            self._free(req)
        req.state = EngineRequest.ABORTED

    def _free(self, req: EngineRequest, preempted: bool = False) -> None:
        if req.blocks:
            if self.on_release is not None and req.block_hashes is not None:
                self.on_release(req)
                self._cache_blocks((req,))      # its generated tokens' full blocks too
            pool = self.pool    # vLLM 0.15.1's CPU tier holds a finished request's blocks until written
            if not (pool.stores_at_finish and pool.end_request(req, preempted)):
                pool.free(req.block_ids)
            req.block_ids = []
            req.blocks = 0
        req.num_cached_blocks = 0

    def _preempt(self, req: EngineRequest, plan: StepPlan) -> None:
        self._free(req, preempted=True)
        req.num_computed = 0
        req.preemptions += 1
        req.state = EngineRequest.WAITING
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        plan.preempted.append(req)
        if self.on_preempt is not None:
            self.on_preempt(req)

    def _chunk(self, req: EngineRequest, budget: int) -> int:
        n = req.num_tokens - req.num_computed
        t = self.long_prefill_token_threshold
        if 0 < t < n:
            n = t
        if n > budget:
            n = budget
        room = self.max_model_len - 1 - req.num_computed
        if n > room:
            n = max(room, 1 if req.num_computed < req.num_tokens else 0)
        return n

    # ---- one step ----------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        """Plan the next step at ``now``: allocate blocks, preempt, admit.  The plan is empty
        when nothing can run (no work, or only requests waiting for a KV transfer)."""
        if self.pool.kv_metrics is not None:     # --kv-cache-metrics: blocks handed out or touched at ``now``
            self.pool.kv_metrics.now = now
        if self.lazy is not None:
            plan = self.lazy.schedule(now)
            if plan is not None:
                return plan
        plan = StepPlan()
        plan.start = now
        budget = self.max_num_batched_tokens
        running = self.running
        scheduled = plan.scheduled
        append = scheduled.append
        bs = self.block_size
        last_room = self.max_model_len - 1
        decode = decode_context = 0
        pool = self.pool
        at_finish = pool.stores_at_finish        # vLLM 0.15.1's CPU tier: offer each full generated block
        i = 0
        spec = self.spec
        for req in (running if spec is None else ()):   # decodes that need no new block: the common case
            c = req.num_computed
            if budget <= 0 or req.prompt_len + req.num_output - c != 1 or not req.num_output or c >= last_room:
                break
            if c >= req.blocks * bs:             # a block boundary: one more block
                if not pool.num_free:
                    break
                if at_finish:
                    pool.store_blocks(req, req.blocks)
                req.block_ids += pool.allocate(1)
                req.blocks += 1
            append((req, 1))
            decode_context += c + 1
            budget -= 1
            i += 1
        decode = i
        if spec is not None:                     # a decode's tokens with its drafts, its KV lookahead
            k1, ahead = 1 + self.spec_k, spec.lookahead + bs - 1
        while i < len(running) and budget > 0:   # the rest, with chunks and preemption
            req = running[i]
            c = req.num_computed
            if req.prompt_len + req.num_output - c == 1 and req.num_output and c < last_room:
                n = 1
                if spec is not None:                        # its drafts too, as the budget and length allow
                    n = k1 if k1 < budget else budget
                    if n > last_room - c:
                        n = last_room - c
                    need = (c + n + ahead) // bs - req.blocks
                else:
                    need = (c + bs) // bs - req.blocks      # a decode: one token, maybe one block
                if need > 0 and need > pool.num_free:
                    ok, i, back = self._make_room(req, need, plan, i)
                    if back:                                # scheduled victims (priority policy)
                        budget += back[0]
                        decode -= back[1]
                        decode_context -= back[2]
                    if not ok:
                        break                               # it preempted itself: the pass ends
                if need > 0:
                    if at_finish:
                        pool.store_blocks(req, req.blocks)
                    req.block_ids += pool.allocate(need)
                    req.blocks += need
                append((req, n))
                decode += 1
                decode_context += c + 1
                budget -= n
                if n > 1:
                    d = n - 1
                    plan.spec_tokens += d
                    plan.spec_pairs += d * (c + 1) + d * (d + 1) / 2
                i += 1
                continue
            n = self._chunk(req, budget)
            if n <= 0:
                i += 1
                continue
            need = -(-(c + n) // bs) - req.blocks
            if need > pool.num_free:
                ok, i, back = self._make_room(req, need, plan, i)
                if back:
                    budget += back[0]
                    decode -= back[1]
                    decode_context -= back[2]
                if not ok:
                    break
            if need > 0:
                req.block_ids += pool.allocate(need)
                req.blocks += need
            plan.add(req, n)
            budget -= n
            i += 1
        plan.num_decode += decode
        plan.decode_context += decode_context
        if not plan.preempted and self.waiting:
            self._admit(plan, budget, now)
        if self.spec_lookup is not None and plan.scheduled:    # dynamic: the drafts this batch size proposes
            lookup = self.spec_lookup
            self.spec_k = lookup[min(len(plan.scheduled), len(lookup) - 1)]
        return plan

    def _make_room(self, req: EngineRequest, need: int, plan: StepPlan, i: int):
        """Preempt running requests until ``need`` blocks are free for ``req`` (running[i]): the
        newest (FCFS), or the one with the largest (priority, arrival).  Returns (False when
        ``req`` itself was preempted, the index of ``req`` now, and None or what the victims
        already scheduled in this step gave back: ``(tokens, decodes, decode context)``)."""
        running = self.running
        back = None
        while need > self.pool.num_free:
            if self.priority:
                victim = max(running, key=priority_key)
                k = running.index(victim)
                del running[k]
                if k < i:                     # scheduled earlier in this step: unschedule it
                    i -= 1
                    back = self._unschedule(victim, plan, back)
            else:
                victim = running.pop()
            self._preempt(victim, plan)
            if victim is req:
                return False, i, back
        return True, i, back

    @staticmethod
    def _unschedule(victim: EngineRequest, plan: StepPlan, back):
        tokens, decodes, context = back or (0, 0, 0)
        for k, (r, n) in enumerate(plan.scheduled):
            if r is victim:
                del plan.scheduled[k]
                tokens += n
                if victim in plan.chunks:
                    plan.chunks.remove(victim)
                    c = victim.num_computed
                    plan.num_chunks -= 1
                    plan.prefill_tokens -= n
                    plan.prefill_pairs -= n * (c + n / 2)
                    plan.prefill_context -= c
                    plan.prefill_sq -= n * n
                else:
                    decodes += 1
                    c = victim.num_computed
                    context += c + 1
                    if n > 1:                     # its drafts (speculative decoding)
                        d = n - 1
                        plan.spec_tokens -= d
                        plan.spec_pairs -= d * (c + 1) + d * (d + 1) / 2
                break
        return tokens, decodes, context

    def _admit(self, plan: StepPlan, budget: int, now: float) -> None:
        if self.pause_state != "unpaused":
            return
        waiting = self.waiting
        running = self.running
        bs = self.block_size
        pool = self.pool
        max_loras = self.max_loras
        loras = None                                     # the batch's adapters: built when a LoRA request asks
        cpu = pool.num_cpu_blocks
        chunked = self.enable_chunked_prefill
        skipped = []
        # places still held (above); none when the step would be empty: vLLM replans at once
        held = self.held_slots if now <= self.held_until and running else 0
        while waiting and budget > 0 and len(running) + held < self.max_num_seqs:
            req = waiting[0]
            if req.kv_ready_at > now:                   # deferred: its KV transfer; vLLM holds its
                if not req.block_ids:                   # blocks meanwhile (WAITING_FOR_REMOTE_KVS)
                    n = -(-min(req.num_tokens, self.max_model_len) // bs)
                    if n <= pool.num_free:
                        req.block_ids, req.blocks = pool.allocate(n), n
                skipped.append(waiting.popleft())
                continue
            if req.block_ids and not req.num_computed:  # the transfer's blocks: allocated afresh below
                pool.free(req.block_ids)
                req.block_ids, req.blocks = [], 0
            if max_loras and req.lora:
                if loras is None:
                    loras = {r.lora for r in running if r.lora}
                if req.lora not in loras and len(loras) >= max_loras:
                    skipped.append(waiting.popleft())   # deferred: the LoRA budget
                    continue
            if -(-min(req.num_tokens, self.max_model_len) // bs) > pool.num_blocks:
                break       # never fits (without the gate vLLM would preempt it at the limit, forever)
            hits = ()
            reload = looked = 0                          # blocks found in the CPU tier; whether it was queried
            if req.num_computed == 0:
                hit = 0
                if req.block_hashes is not None:         # the prefix cache: blocks to hold again
                    most = (req.num_tokens - 1) // bs
                    hits = pool.lookup(req.block_hashes, most)
                    if cpu:
                        reload, looked = pool.lookup_cpu(req.block_hashes, len(hits), most - len(hits)), 1
                    hit = (len(hits) + reload) * bs
                if req.prefix_hit is not None:           # a remote prefill's KV: the rest, past the local hits
                    hit = max(hit, min(req.prefix_hit(req), req.num_tokens - 1) // bs * bs)
                req.num_computed = hit
            if chunked:
                n = self._chunk(req, budget)
            else:                                        # whole, or not now (vLLM: break)
                n = self._chunk(req, req.num_tokens)
                if n > budget:
                    req.num_computed = 0
                    break
            need = -(-(req.num_computed + n) // bs) - len(hits)
            taken = pool.count_free(hits) if hits else 0  # hits nobody holds leave the free blocks
            # vLLM's full_sequence_must_fit: the whole sequence's blocks must be free, not this chunk's
            whole = (-(-min(req.num_tokens, self.max_model_len) // bs) - len(hits)) if self.reserve_full_isl else need
            if (whole if whole > need else need) + taken > pool.num_free:
                req.num_computed = 0                     # a waiting request holds no blocks
                break                                    # head-of-line blocking
            waiting.popleft()
            # vLLM offers the blocks again from 0, or past a reload (0.15.1: a resumed request's index stays)
            if looked and (reload or not pool.stores_at_finish):
                req.cpu_stored = len(hits) + reload if reload else 0
            if req.first_scheduled is None:
                req.cached_tokens = req.num_computed
                req.reloaded_tokens = reload * bs
                if self.on_prefix is not None:           # the GPU prefix cache's query and hits
                    self.on_prefix(req, len(hits) * bs if req.block_hashes is not None else req.num_computed)
                if cpu and self.on_external is not None and req.block_hashes is not None:   # past the GPU hits
                    self.on_external(req, req.num_tokens - len(hits) * bs, reload * bs)
            if reload:
                pool.reload_cpu(req.block_hashes[len(hits):len(hits) + reload])
                plan.kv_reload_tokens += reload * bs
            if hits:
                pool.touch(hits)
                req.block_ids = list(hits)
                req.num_cached_blocks = len(hits)
            if need > 0:
                req.block_ids += pool.allocate(need)
            req.blocks = len(req.block_ids)
            req.state = EngineRequest.RUNNING
            if req.first_scheduled is None:
                req.first_scheduled = now
            running.append(req)
            if loras is not None and req.lora:
                loras.add(req.lora)
            plan.add(req, n)
            budget -= n
        if skipped:
            waiting.extendleft(reversed(skipped))

    def complete(self, plan: StepPlan, end: float) -> list[EngineRequest]:
        """The step ended at ``end``: advance every scheduled request; those that reached their
        length emit one token at ``end`` (returned, in batch order); finished ones leave the
        batch and free their blocks; the CPU tier's writes of the step before are done (idle:
        this step's too)."""
        if plan.group is not None:
            emitted = self.lazy.complete(plan, end)
            if self.pool.cpu_inflight:
                self.pool.end_cpu_step(not self.running)
            return emitted
        plan.end = end
        if self.spec_multi:                 # last step's tokens beyond one a request: counted, over
            for req in self.spec_multi:
                req.new_tokens = 1
            self.spec_multi.clear()
        emitted = []
        append = emitted.append
        finished = False
        on_prefilled = self.on_prefilled
        running_state = EngineRequest.RUNNING
        for req, n in plan.scheduled:
            if req.state != running_state:
                continue                                 # aborted during the step
            c = req.num_computed = req.num_computed + n
            known = req.prompt_len + req.num_output
            if c != known:
                if c < known:
                    continue                             # a chunk of a longer prefill
                out = self._verified(req, c - known, plan)   # drafts: the accepted ones and the bonus
            else:
                if not req.stored and on_prefilled is not None:
                    req.stored = True
                    on_prefilled(req)
                out = req.num_output = req.num_output + 1
            if req.first_token is None:
                req.first_token = end
                self.prefill_tokens -= req.prompt_len
            req.prev_token = req.last_token
            req.last_token = end
            append(req)
            if out >= req.output_len:
                req.state = EngineRequest.DONE
                req.finished_at = end
                finished = True
        if plan.chunks:
            self._cache_blocks(plan.chunks)
        if finished:
            keep = []
            for req in self.running:
                if req.state == EngineRequest.DONE:
                    self._free(req)
                else:
                    keep.append(req)
            if self.hold_finished_slots:
                self.held_slots, self.held_until = len(self.running) - len(keep), end
            self.running[:] = keep
        if self.lazy is not None:
            self.lazy.after_slow_step(end)
        if self.pool.cpu_inflight:
            self.pool.end_cpu_step(not self.running)
        return emitted

    def _verified(self, req: EngineRequest, drafts: int, plan: StepPlan) -> int:
        """``req``'s ``drafts`` draft tokens were verified in ``plan``'s step: draw how many are
        accepted, roll its computed tokens back past the rejected ones, count them (vLLM's
        SpecDecodingStats, and the request's own RequestSpecMetrics when it has one), and emit the
        accepted drafts and the bonus token, none past its length (``new_tokens``, until the next
        step's completion; ``plan.accepted``); returns its tokens emitted now."""
        u, rates, accepted = self.spec_rng.random(), self.spec.rates, 0
        while accepted < drafts and u < rates[accepted]:     # SpecDecode.accepted, inline (per request)
            accepted += 1
        req.num_computed -= drafts - accepted
        self.spec_hist[accepted] += 1
        self.spec_drafted += drafts
        if req.spec_metrics is not None:            # --per-request-spec-decode-metrics
            req.spec_metrics.observe(drafts, accepted)
        before = req.num_output
        out = before + 1 + accepted
        if out > req.output_len:
            out = req.output_len
        req.num_output = out
        if out - before > 1:
            req.new_tokens = out - before
            plan.accepted += out - before - 1
            self.spec_multi.append(req)
        return out

    @property
    def spec_counts(self) -> list:
        """vLLM's ``SpecDecodingStats`` so far: ``[drafts, draft tokens, accepted tokens]``."""
        hist = self.spec_hist
        return [sum(hist), self.spec_drafted, sum(j * n for j, n in enumerate(hist))]

    @property
    def spec_per_pos(self) -> list:
        """Accepted tokens at each draft position so far: position ``i`` by every draft that
        had more than ``i`` accepted."""
        out, above = [], 0
        for n in reversed(self.spec_hist[1:]):
            above += n
            out.append(above)
        return out[::-1]

    def _cache_blocks(self, reqs) -> None:
        """Name the full blocks the step's prefill chunks computed by their hashes (vLLM's
        ``cache_blocks`` after each step) and write them through to the CPU tier
        (:meth:`BlockPool.cache_requests`); ``on_cached`` hears of each run of new ones."""
        self.pool.cache_requests(reqs, self.block_size, self.on_cached)
