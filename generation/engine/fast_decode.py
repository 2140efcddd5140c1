"""Decoding requests advanced as a group: the replay's fast path through the scheduler (issue 32,
item 4), with the token-by-token engine's results to the last bit.

Between events the running batch of a step engine changes only in that every decoding request's
context grows by one token per step.  :class:`LazyDecode` keeps such requests *anchored*: their
``num_computed``, ``num_output``, ``prev_token`` and ``last_token`` hold the values of the step
they were anchored at (``g0``), and the true values are those plus the number of steps run since
(``g - g0``), the tokens emitted at the ends of those steps.  A step then costs the scheduler
O(1 + events), not O(running requests):

- the step's aggregates come from counts: ``num_decode`` is the batch size and
  ``decode_context`` a running sum (each step adds the batch size);
- the events are keyed by the step they happen in, computed when a request is anchored: a
  **block boundary** (the step whose context reaches the blocks it holds: one block is allocated,
  in batch order, as :meth:`Scheduler.schedule` allocates it) and its **last token** (the
  request is brought up to date, finishes and frees its blocks in batch order);
- **admission** is the scheduler's own :meth:`Scheduler._admit`, after the batch's decodes, with
  the budget they leave: prefix-cache lookups, chunking and head-of-line blocking unchanged;
- every anchored request emits one token per step at the step's end, so their inter-token
  latencies are one value per step (``end - previous end``) times their count: the step's
  :class:`Emitted` lists only the requests that need their own handling (a first token, a
  finish, a first decode whose previous token was not at the previous step's end) and carries
  the count of the others (``lazy``) and the previous step's end (``prev_end``).

A step that is not of that shape runs the scheduler's own code on up-to-date requests
(:meth:`LazyDecode.settle` first; the requests are anchored again after it): a prefill that is
not at the batch's tail (after every decoding request), a batch larger than the token budget, a
block boundary with too few free blocks (preemption).  The same code and callbacks run; what is not done is the per-request arithmetic of
steps that change nothing but counters.

Only the replay turns it on (:meth:`Scheduler.decode_in_groups`); the live server's
:class:`~generation.engine.step_engine.StepEngine` does not (it streams every token of every
request, so it needs every request up to date at every step).  While it is on, the anchored
requests' four fields above are stale (the rest are exact), ``plan.scheduled`` of a group step
lists only the requests it admitted, and :meth:`Scheduler.complete` returns an :class:`Emitted`.
"""
from __future__ import annotations


class Emitted(list):
    """The requests of a group step that need their own handling (in batch order, up to date),
    plus ``lazy``: how many other requests emitted a token at the step's end, each at
    ``end - prev_end`` seconds after its previous one (the previous step's end)."""
    __slots__ = ("lazy", "prev_end")         # set by LazyDecode.complete (no __init__: a call less a step)


class LazyDecode:
    """The anchored decoding requests of one :class:`~generation.engine.scheduler.Scheduler`
    (module docstring).  ``g`` counts the group steps run; ``anchor`` maps a request to
    ``(g0, rank)`` (rank: its place in the batch, increasing with admission); ``cross`` and
    ``fin`` map a step to the requests that need a block in it / emit their last token in it;
    ``ctx`` is the anchored requests' computed tokens, summed; ``t_last`` / ``t_prev`` the ends
    of the last two steps (seconds, the caller's clock)."""

    __slots__ = ("s", "g", "anchor", "cross", "fin", "odd", "ctx", "t_last", "t_prev", "rank", "bs",
                 "pre", "on_late", "group_steps", "slow_steps", "plan_cls", "RUNNING", "DONE")

    def __init__(self, scheduler, plan_cls, request_cls, on_late=None) -> None:
        self.s = scheduler
        self.plan_cls = plan_cls      # the scheduler's StepPlan and EngineRequest (no import: no cycle)
        self.RUNNING, self.DONE = request_cls.RUNNING, request_cls.DONE
        self.on_late = on_late        # callable(req): brought up to date, its last token the last step's, unlisted
        self.g = 0
        self.anchor: dict = {}
        self.cross: dict = {}
        self.fin: dict = {}
        self.odd: list = []
        self.ctx = 0
        self.t_last = None
        self.t_prev = None
        self.rank = 0
        self.bs = scheduler.block_size
        self.pre: list = []           # running requests in prefill, in batch order, after every anchored one
        self.group_steps = 0          # steps run as a group / by the scheduler's own code (for benches)
        self.slow_steps = 0

    # ---- anchoring ---------------------------------------------------------------------------
    def _anchor(self, req) -> bool:
        """Anchor an up-to-date decoding request at step ``g``.  (One whose context reaches
        ``max_model_len - 1`` still computes one token a step in :meth:`Scheduler.schedule`, as a
        one-token chunk with a decode's aggregates, so it is anchored too; a replay refuses such
        requests anyway.)"""
        c = req.num_computed
        left = req.output_len - req.num_output          # tokens still to emit, >= 1
        g = self.g
        self.anchor[req] = (g, self.rank)
        self.rank += 1
        self.ctx += c
        f = g + left - 1                                # the step that emits its last token
        k = g + req.blocks * self.bs - c                # the step whose context needs one more block
        if k <= f:
            b = self.cross.get(k)
            if b is None:
                self.cross[k] = [req]
            else:
                b.append(req)
        b = self.fin.get(f)
        if b is None:
            self.fin[f] = [req]
        else:
            b.append(req)
        if req.last_token != self.t_last:               # its next token's ITL is its own
            self.odd.append(req)
        return True

    def _bring_up(self, req, g0: int) -> int:
        """Bring an anchored request's fields up to step ``g``; returns the steps it ran since
        (its last token then was the last step's)."""
        n = self.g - g0
        if n:
            req.num_computed += n
            req.num_output += n
            req.prev_token = self.t_prev if n > 1 else req.last_token
            req.last_token = self.t_last
        return n

    def settle(self) -> None:
        """Bring every anchored request up to date and forget the anchors (before the scheduler's
        own code runs a step, and at the end); ``on_late`` hears of each that emitted a token at
        the last step without being listed in its :class:`Emitted`."""
        bring = self._bring_up
        late = self.on_late
        for req, (g0, _) in self.anchor.items():
            if bring(req, g0) and late is not None:
                late(req)
        self.anchor.clear()
        self.cross.clear()
        self.fin.clear()
        self.odd = []
        self.pre = []
        self.ctx = 0

    def drop(self, req) -> None:
        """``req`` leaves (aborted): up to date (``on_late``) and no longer anchored."""
        if req in self.pre:
            self.pre.remove(req)
        if req not in self.anchor:
            return
        g0, _ = self.anchor.pop(req)
        if self._bring_up(req, g0) and self.on_late is not None:
            self.on_late(req)
        self.ctx -= req.num_computed

    def after_slow_step(self, end: float) -> None:
        """The scheduler's own code ran a step ending at ``end``: anchor the running requests that
        are decoding, in batch order."""
        self.slow_steps += 1
        self.t_prev, self.t_last = self.t_last, end
        anchor = self._anchor
        pre = self.pre
        st_running = self.RUNNING
        for req in self.s.running:
            if req.state == st_running and req.num_output and req.num_computed == req.num_tokens - 1 and anchor(req):
                continue
            pre.append(req)             # in prefill (or stuck at the context's end: the next step checks)

    # ---- one step ----------------------------------------------------------------------------
    def grow(self, need: list, g: int) -> None:
        """Give each request of ``need`` (those whose next token at group step ``g`` crosses a
        block boundary; the pool has the blocks) its next block, in the scheduler's order, and
        file it under the group step of its next crossing, if it runs that long."""
        anchor, cross, bs, pool = self.anchor, self.cross, self.bs, self.s.pool
        if len(need) > 1:
            need.sort(key=lambda r: anchor[r][1])
        at_finish = pool.stores_at_finish        # vLLM 0.15.1's CPU tier: offer the full block
        for req in need:
            if at_finish:
                pool.store_blocks(req, req.blocks)
            req.block_ids += pool.allocate(1)
            req.blocks += 1
            k = g + bs
            if k <= anchor[req][0] + req.output_len - req.num_output - 1:
                b = cross.get(k)
                if b is None:
                    cross[k] = [req]
                else:
                    b.append(req)

    def schedule(self, now: float):
        """A group step's :class:`StepPlan` at ``now``, or None when this step needs the
        scheduler's own code (every request is then up to date)."""
        s = self.s
        running = s.running
        anchor = self.anchor
        d = len(anchor)
        pre = self.pre
        budget = s.max_num_batched_tokens - d
        if d + len(pre) != len(running) or budget < 0:
            self.settle()
            return None
        pool = s.pool
        blocks = 0
        chunks = None
        if pre:                     # prefills after every decode (the batch's tail): their chunks in order
            k = len(running) - len(pre)
            bs = self.bs
            chunks = []
            for i, req in enumerate(pre):
                if running[k + i] is not req:
                    self.settle()
                    return None
                if budget <= 0:
                    break
                n = s._chunk(req, budget)
                if n <= 0:
                    self.settle()
                    return None
                chunks.append((req, n))
                blocks += -(-(req.num_computed + n) // bs) - req.blocks
                budget -= n
        g = self.g
        need = self.cross.pop(g, None)
        if need:
            need = [r for r in need if r in anchor]
        if (len(need) if need else 0) + blocks > pool.num_free:     # a preemption: the scheduler's own code
            if need:
                self.cross[g] = need
            self.settle()
            return None
        if need:
            self.grow(need, g)
        plan = self.plan_cls()
        plan.start = now
        plan.group = d
        plan.num_decode = d
        plan.decode_context = self.ctx + d
        if chunks:
            for req, n in chunks:
                need = -(-(req.num_computed + n) // self.bs) - req.blocks
                if need > 0:
                    req.block_ids += pool.allocate(need)
                    req.blocks += need
                plan.add(req, n)
        if s.waiting and budget > 0:
            s._admit(plan, budget, now)
        self.group_steps += 1
        return plan

    def complete(self, plan, end: float) -> Emitted:
        """The group step ``plan`` ended at ``end`` (:meth:`Scheduler.complete`'s contract)."""
        s = self.s
        g = self.g
        anchor = self.anchor
        st_running, st_done = self.RUNNING, self.DONE
        out = Emitted()
        out.prev_end = self.t_last
        finished = []
        own = self.fin.pop(g, None)
        if self.odd:
            own = self.odd if own is None else own + self.odd
            self.odd = []
        handled = 0
        if own is not None:
            own = [r for r in dict.fromkeys(own) if r in anchor]
            if len(own) > 1:
                own.sort(key=lambda r: anchor[r][1])
            handled = len(own)
            for req in own:
                g0, rank = anchor[req]
                self._bring_up(req, g0)
                c = req.num_computed = req.num_computed + 1
                o = req.num_output = req.num_output + 1
                req.prev_token = req.last_token
                req.last_token = end
                out.append(req)
                if o >= req.output_len:
                    req.state = st_done
                    req.finished_at = end
                    finished.append(req)
                    del anchor[req]
                    self.ctx -= c                       # its tokens, this step's included (the += below)
                else:
                    anchor[req] = (g + 1, rank)
        out.lazy = plan.group - handled
        self.ctx += plan.group
        new = None
        if plan.scheduled:                              # prefills and admissions: Scheduler.complete's rules
            on_prefilled = s.on_prefilled
            pre = self.pre
            for req, n in plan.scheduled:
                if req.state != st_running:
                    continue
                c = req.num_computed = req.num_computed + n
                if c < req.prompt_len + req.num_output:
                    if not pre or req not in pre:       # admitted now, in prefill after this step
                        pre.append(req)
                    continue
                if pre and req in pre:
                    pre.remove(req)
                if not req.stored and on_prefilled is not None:
                    req.stored = True
                    on_prefilled(req)
                o = req.num_output = req.num_output + 1
                if req.first_token is None:
                    req.first_token = end
                    s.prefill_tokens -= req.prompt_len
                req.prev_token = req.last_token
                req.last_token = end
                out.append(req)
                if o >= req.output_len:
                    req.state = st_done
                    req.finished_at = end
                    finished.append(req)
                elif new is None:
                    new = [req]
                else:
                    new.append(req)
            if plan.chunks:
                s._cache_blocks(plan.chunks)
        if finished:
            free = s._free
            for req in finished:                        # batch order, as the scheduler frees them
                free(req)
            remove = s.running.remove
            for req in finished:
                remove(req)
            if s.hold_finished_slots:
                s.held_slots, s.held_until = len(finished), end
        self.g = g + 1
        self.t_prev, self.t_last = self.t_last, end
        if new is not None:
            anchor_one = self._anchor
            for req in new:
                if not anchor_one(req):
                    self.pre.append(req)                # the next step's checks send it to the scheduler
        plan.end = end
        return out
