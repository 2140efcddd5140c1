"""The simulated vLLM engine: one process, one queue, one set of counters.

Flow of a request (DESIGN.md): a blueprint builds a :class:`GenerationRequest`;
:meth:`Simulator.prepare` validates it against the context window and decides every choice's
output (one :class:`Sequence` per choice); :meth:`Simulator.admit` places the sequences in
running slots or the FIFO waiting queue (429 when it is full); :meth:`Simulator.run` is a
generator that waits for the slot, sleeps the time to first token, then yields token indexes
one inter-token latency apart.  All waiting is ``gevent.sleep``; nothing blocks the hub.

Capacity mirrors vLLM's scheduler: ``--max-num-seqs`` sequences run at once, each choice of
``n`` and each prompt of a prompt array being its own sequence; ``--max-loras`` distinct LoRA
adapters may run at once (requests for others wait, and loaded adapters are preferred).
"""
from __future__ import annotations

import itertools
from bisect import insort
import random
import time
from collections import deque

import gevent
import gevent.queue
from gevent.event import Event
from gevent.hub import get_hub

from generation.errors import EnginePaused, InvalidParam, ModelNotFound, QueueFullError
from .request import ClientDisconnected, GenerationRequest, SeqState, Sequence  # noqa: F401 (re-exported)
from .outputs import OutputDecisions, context_error  # noqa: F401 (context_error re-exported)
from .admission import admit_spread, check_admission
from .engine_state import EngineState
from .freeze import sleep as timed_sleep
from .prompt_checks import PromptChecks
from .stream_interval import effective, grouped
from .token_schedule import TokenSchedule


def _waiting_priority(seq: Sequence) -> int:
    return seq.request.priority

monotonic = time.monotonic

# uuid4's fixed bits: version 4 (bits 76-79) and the RFC 4122 variant 0b10 (bits 62-63)
_UUID4_KEEP = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_UUID4_SET = (0x4 << 76) | (0x2 << 62)

HUB_SLICE = 0.002      # s: the longest a request's rendering runs before the hub gets a turn
STREAM_AHEAD = 256     # tokens the choices of a stream may produce ahead of its renderer


class Simulator(PromptChecks, OutputDecisions, EngineState):
    """The engine.  ``config`` is a :class:`generation.config.sim_config.SimConfig` (read live, so admin
    updates apply to later draws)."""

    def __init__(self, config, *, rng, tokenizer, sentences, responses, latency, metrics, loras,
                 tool_synthesizer=None, kv_cache=None, engine=None, reasoning=None):
        """Parts are built by :func:`app.build_simulator` (one explicit place, as vLLM's
        ``init_app_state``): ``rng`` the seeded ``random.Random`` every draw uses,
        ``tokenizer``, ``sentences`` (random-mode text, also padding for tool calls),
        ``responses`` (the response source: an object with ``respond(rng, prompt, max_tokens,
        room, ignore_eos) -> (pieces, ids, finish_reason)``, see :mod:`generation.content.sources`),
        ``latency``, ``metrics`` (a :class:`MetricsRecorder`, bound here to read the scheduler's
        state when scraped), ``loras``; optional ``tool_synthesizer``, ``kv_cache``
        (``--enable-kvcache``), ``engine`` (a :class:`~generation.engine.step_engine.StepEngine`:
        ``--latency-calculator step``, engine steps instead of per-request latencies) and
        ``reasoning`` (a :class:`generation.content.reasoning.ReasoningSpans`, ``--reasoning-parser``)."""
        self.config = config
        self.rng = rng
        self.tokenizer = tokenizer
        self.sentences = sentences
        self.responses = responses
        self.latency = latency
        self.metrics = metrics
        self.loras = loras
        self.tool_synthesizer = tool_synthesizer
        self.kv_cache = kv_cache
        self.engine = engine
        self.reasoning = reasoning
        self.response_store = None      # generation.adapters.response_store (VLLM_ENABLE_RESPONSES_API_STORE)
        self.running = 0
        self.running_seqs: set = set()        # for kv_cache_usage_perc without the step engine
        self.waiting: deque[Sequence] = deque()
        # prompt tokens of the sequences waiting or running before their first token (not kept in
        # step mode: its scheduler's), for --max-num-queued-tokens in O(1) per arrival
        self.prefill_tokens = 0
        self.metrics.bind(self)
        rank = getattr(config, "data_parallel_rank", -1)      # ranks behind one port draw apart
        self._id_bits = random.Random(f"{config.seed}-{config.port}" + (f"-{rank}" if rank > 0 else "")).getrandbits
        self.started = monotonic()
        self.server_load = 0                # requests in flight (--enable-server-load-tracking)
        self.dp_peers: tuple = ()           # every engine behind this one's DP endpoint (server.dp_api), itself too
        self.sleeping_tags: set = set()     # vLLM's executor.sleeping_tags: asleep while not empty

    # ---- naming ---------------------------------------------------------------------------
    def new_request_id(self) -> str:
        """A fresh request id shaped as vLLM's ``uuid4().hex`` (32 hex digits, version 4, RFC
        4122 variant), its random bits from a generator seeded with ``<seed>-<port>``, so the
        sequence is reproducible with ``--seed`` and differs between ranks (ports, and the rank).  About
        0.4 us; uuid5 per id cost 8.6 us (issue 13)."""
        return "%032x" % (self._id_bits(128) & _UUID4_KEEP | _UUID4_SET)

    def resolve_model(self, model) -> tuple[str, str | None]:
        """Map a request's ``model`` to ``(display name, lora name or None)``.

        ``model`` omitted, ``null`` or ``""`` is the first served model, as vLLM's
        ``_check_model`` / ``_get_model_name`` treat it.  Raises ModelNotFound (``The model `X`
        does not exist.``) for anything not served."""
        names = self.config.served_names
        if model in names or model is None or model == "":
            return names[0], None
        if isinstance(model, str) and model in self.loras.paths:
            return model, model
        raise ModelNotFound(model)

    # ---- scheduling -----------------------------------------------------------------------
    def admit(self, seqs: list[Sequence], received_at: float | None = None, limits: bool = True,
              spread=None) -> None:
        """Place every sequence in a running slot or the waiting queue, all or nothing.

        Raises QueueOverflow / MaxQueuedTokens (503) over ``--max-num-queued-reqs`` /
        ``--max-num-queued-tokens`` (:func:`~generation.engine.admission.check_admission`), QueueFullError (``Failed to
        enqueue request, waiting requests queue is full``) when the queue cannot take them,
        EnginePaused (503) while ``reject_new_requests`` (vLLM's ``_reject_add_while_paused``: a
        checkpoint prepare); nothing is admitted then.

        ``received_at`` (``time.monotonic`` seconds): when the request reached the server, if
        before now.  The sequences arrive then: under a burst of connections the server parses
        requests one after another, and that backlog then counts in the simulated times (queue,
        time to first token) instead of adding to them.  vLLM stamps arrival after parsing, but
        its API server's parsing is not what the simulator is asked to imitate.  ``limits=False``:
        no admission limits (vLLM's pooling routes do not check them).  ``spread`` (behind a DP
        endpoint): places each further engine request on an engine of its own choosing
        (:func:`~generation.engine.admission.admit_spread`)."""
        cfg = self.config
        if limits and (cfg.max_num_queued_reqs is not None or cfg.max_num_queued_tokens is not None):
            check_admission(self, sum(1 for s in seqs if s.prompt_index == 0))     # the request's n
        if self.reject_new_requests:
            raise EnginePaused()
        now = monotonic()
        if received_at is not None and received_at < now:
            now = received_at
        if spread is not None and len(seqs) > 1:
            admit_spread(self, seqs, now, spread)
        else:
            self.admit_here(seqs, now)

    def admit_here(self, seqs: list[Sequence], now: float) -> None:
        """:meth:`admit` on this engine, the limits checked (QueueFullError)."""
        if self.engine is not None:
            self._admit_to_engine(seqs, now)
            return
        cfg = self.config
        admitted = []
        for seq in seqs:
            seq.arrival = now
            if seq.finish_reason == "cache_threshold":
                seq.state = SeqState.INSTANT
                if self.kv_cache is not None:    # the reference stores and counts these too
                    self.kv_cache.start(seq)
                    self.kv_cache.finish(seq)
                continue
            if (self.running < cfg.max_num_seqs and not self.waiting and not self.scheduler_paused
                    and self.loras.can_run(seq.lora)):
                self._start(seq, now)
            elif len(self.waiting) < cfg.max_waiting_queue_length:
                seq.state = SeqState.WAITING
                seq.enqueued_at = now
                seq.event = Event()
                if cfg.scheduling_policy == "priority":     # lower first, FCFS within one priority
                    insort(self.waiting, seq, key=_waiting_priority)
                else:
                    self.waiting.append(seq)
            else:
                for s in admitted:
                    self.abort(s, record=False)     # the request is refused whole: nothing ran
                raise self.metrics.refused(QueueFullError())        # counted (vllm:admission_rejections)
            self.prefill_tokens += seq.prompt_len
            admitted.append(seq)

    def _admit_to_engine(self, seqs: list[Sequence], now: float) -> None:
        """Step mode: every sequence joins the engine's waiting queue (429 when the queue cannot
        take them all); the engine's steps decide when each runs."""
        engine = self.engine
        live = sum(1 for s in seqs if s.finish_reason != "cache_threshold")
        if live and engine.queued_beyond_batch() + live > self.config.max_waiting_queue_length:
            raise self.metrics.refused(QueueFullError())
        for seq in seqs:
            seq.arrival = now
            if seq.finish_reason == "cache_threshold":
                seq.state = SeqState.INSTANT
                if self.kv_cache is not None:
                    self.kv_cache.start(seq)
                    self.kv_cache.finish(seq)
                continue
            seq.state = SeqState.RUNNING          # in the engine (its queue or its batch)
            engine.add(seq, now)

    def _start(self, seq: Sequence, now: float) -> None:
        seq.state = SeqState.RUNNING
        seq.started_at = now
        self.running += 1
        self.running_seqs.add(seq)
        self.loras.acquire(seq.lora)
        if self.kv_cache is not None:
            self.kv_cache.start(seq)

    def _schedule(self) -> None:
        cfg = self.config
        waiting = self.waiting
        if self.scheduler_paused:                # /pause, /sleep: queued until resumed (vLLM's PauseState)
            return
        while waiting and self.running < cfg.max_num_seqs:
            pick = None
            for s in waiting:                        # pass 1: base model or loaded LoRA
                if s.lora is None or s.lora in self.loras.loaded:
                    pick = s
                    break
            if pick is None:
                for s in waiting:                    # pass 2: a LoRA that can be loaded
                    if self.loras.can_run(s.lora):
                        pick = s
                        break
            if pick is None:
                return
            waiting.remove(pick)
            now = monotonic()
            self._start(pick, now)             # queue time is observed when the request finishes
            pick.event.set()

    def _release(self, seq: Sequence) -> None:
        state = seq.state
        if self.engine is not None:
            self.engine.abort(seq)                # a no-op for a request the engine finished
            return
        if state == SeqState.RUNNING:
            self.running -= 1
            self.running_seqs.discard(seq)
            if not seq.first_token_at:
                self.prefill_tokens -= seq.prompt_len
            self.loras.release(seq.lora)
            if self.kv_cache is not None:
                self.kv_cache.finish(seq)
            self._schedule()
        elif state == SeqState.WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
            else:
                self.prefill_tokens -= seq.prompt_len

    def abort(self, seq: Sequence, record: bool = True, reason: str = "abort") -> None:
        """Abort a sequence (client gone, a sibling failed): leave the queue / free the slot; an
        admitted one is counted once (``MetricsRecorder.aborted``, as ``reason``: ``"error"`` for a
        500) unless ``record`` is false (taken back from a refused request, a 429)."""
        if seq.owner is not None and seq.owner is not self:     # on another DP engine
            return seq.owner.abort(seq, record, reason)
        if seq.state in (SeqState.RUNNING, SeqState.WAITING):
            seq.aborted_tokens = made = seq.made_tokens(self.config.inter_token_latency, monotonic())
            if record:
                self.metrics.aborted(seq, made, reason)
            self._release(seq)
        seq.state = SeqState.ABORTED

    # ---- running --------------------------------------------------------------------------
    def _wait_for_slot(self, seq: Sequence) -> None:
        if seq.state == SeqState.WAITING:
            seq.event.wait()
        if seq.state == SeqState.ABORTED:
            raise ClientDisconnected()

    def sleep_until(self, seq: Sequence, until: float) -> None:
        """Sleep in the calling greenlet until ``monotonic() >= until`` (a deadline that
        :meth:`run` yielded); raises ClientDisconnected if ``seq`` is aborted meanwhile."""
        self._sleep(seq, until)

    # Sleep until ``monotonic() >= until`` (never earlier, nor while a keep pause freezes the
    # sequence); :meth:`cancel` can cut it short (ClientDisconnected): generation.engine.freeze
    _sleep = staticmethod(timed_sleep)

    def cancel(self, seqs, reason: str = "abort") -> None:
        """The client went away (``reason`` "error": the server failed it): abort every unfinished
        sequence now (see :meth:`abort`) and wake their greenlets to raise ClientDisconnected."""
        hub = get_hub()
        for seq in seqs:
            if seq.state in (SeqState.RUNNING, SeqState.WAITING, SeqState.INSTANT):
                self.abort(seq, reason=reason)
                ev = seq.event
                if isinstance(ev, Event):
                    ev.set()
                elif ev is not None:
                    hub.loop.run_callback(ev.switch, None)

    def expects_delay(self, seqs) -> bool:
        """Whether running ``seqs`` will wait at all (then a disconnect watcher is worth it)."""
        c = self.config
        if self.engine is not None or any(s.state == SeqState.WAITING for s in seqs):
            return True
        return (c.time_to_first_token > 0 or c.inter_token_latency > 0 or c.prefill_overhead > 0
                or c.prefill_time_per_token > 0 or c.kv_cache_transfer_latency > 0
                or c.kv_cache_transfer_time_per_token > 0
                or (c.time_to_generate_image > 0 and any(s.request.send_image for s in seqs)))

    FLUSH = -1   # yielded by run() before it sleeps: chunks rendered so far should go out now

    def run(self, seq: Sequence, per_token: bool = True, blocks: bool = False, deadlines: bool = False, interval: int = 1,
            first_in_schedule: bool = False):
        """Generator: wait for the slot, sleep TTFT, then yield token indexes ``0..len-1``, one
        inter-token latency apart (absolute schedule, so lateness does not accumulate), and
        :attr:`FLUSH` before every sleep so that a renderer can write what it has in one go.
        With ``blocks``, tokens that are all due at once (zero inter-token latency) come as one
        ``range`` of indexes, so that a renderer can build their chunks in one go.

        With ``deadlines``, the generator does not sleep itself: where it would flush and sleep
        it yields the deadline instead (a ``float``, :func:`time.monotonic` seconds), and its
        driver resumes it once ``monotonic()`` has reached it (:meth:`sleep_until`, or a timer
        in the hub: see :mod:`server.sse_emitter`); it then raises ClientDisconnected if the
        sequence was aborted meanwhile.  With ``deadlines`` and a constant inter-token latency,
        tokens ``1..len-1`` come as one :class:`TokenSchedule` (its driver emits them and records
        their latencies); the generator then finishes the sequence, or raises ClientDisconnected
        if it was aborted meanwhile.

        With ``per_token=False`` (non-streaming) and a constant inter-token latency the decode
        phase is one sleep and nothing is yielded.  Closing the generator (client gone) or an
        exception aborts the sequence; :meth:`cancel` makes it raise ClientDisconnected.  ``interval``
        > 1 (the stream interval): the first token alone, then ``slice`` s of ``interval`` tokens,
        each one output (:func:`~generation.engine.stream_interval.grouped`).

        ``first_in_schedule`` (with ``deadlines``, for a renderer that renders token 0 from a
        schedule): when the first token is still to wait for and the inter-token latency is a
        positive constant, tokens ``0..len-1`` come as one TokenSchedule, yielded in place of the
        first deadline, and the driver emits the first token as it emits the others
        (:meth:`TokenSchedule.first_token` does its bookkeeping).  A burst's first tokens, due
        together, then cost what a later token costs instead of a generator's resumption each
        (issue 32: 1,000 first tokens took 28 ms, and the second tokens due 20 ms after them
        waited).  A schedule cut short before its first token (an ``/admin/config`` latency
        change) goes on per token, as below."""
        if seq.owner is not None and seq.owner is not self:     # on another DP engine: its run
            yield from seq.owner.run(seq, per_token, blocks, deadlines, interval, first_in_schedule)
            return
        try:
            if seq.state == SeqState.INSTANT:
                seq.finished_at = monotonic()
                self.metrics.finished(seq)
                seq.state = SeqState.DONE
                return
            if self.engine is not None:
                yield from self.engine.stream(seq, per_token, blocks, deadlines, self.step_schedule, interval)
                return
            self._wait_for_slot(seq)
            lat = self.latency
            metrics = self.metrics
            target = seq.started_at + lat.ttft(seq.prompt_len, seq.cached_tokens, self.running,
                                               seq.request.remote_prefill)
            wait = self._wait_until
            lag = metrics.token_lag
            n = len(seq.pieces)
            now = monotonic()
            # Admitted after its first token was due (it arrived while the server was parsing a
            # burst, see admit): that token goes now and the next ones one ITL apart from it,
            # not all at once to catch up.
            rebase = per_token and target <= now
            first = None            # tokens 0..n-1 as one schedule (first_in_schedule)
            if target > now:
                if first_in_schedule and deadlines and per_token and interval == 1 and n > 1:
                    itl = lat.constant_itl()
                    if itl is not None and itl > 0:
                        first = TokenSchedule(seq, 0, n, target, itl, target, metrics, lat)
                        first.on_first = self.first_token
                if first is not None:
                    seq.schedule = first        # a keep pause moves it (generation.engine.freeze)
                    yield first
                    seq.schedule = None
                    if seq.state == SeqState.ABORTED:
                        raise ClientDisconnected()
                    if first.next == 0:         # cut short before its first token: per token on
                        first = None
                else:
                    if deadlines or per_token:
                        yield target if deadlines else -1
                    target = wait(seq, target, deadlines)
                now = monotonic()
            if first is None:
                self.first_token(seq, now)
                if n:
                    lag(now - target)
                    if per_token:
                        yield 0
                if rebase:
                    target = now
                itl = lat.constant_itl()
            constant_itl = itl is not None
            # (a schedule from token 0 takes the last branch: interval 1, a positive constant ITL)
            if interval > 1 and per_token and n > 1:
                yield from grouped(self, seq, n, interval, target, now, deadlines, wait)
            elif n > 1 and constant_itl and (not per_token or itl <= 0):
                if not per_token:
                    target += itl * (n - 1)
                    now = monotonic()
                    if target > now:
                        target = wait(seq, target, False)     # (moved by a keep pause meanwhile)
                        now = monotonic()
                    lag(now - target)
                    metrics.lag.observe_n(0.0, n - 2)
                    metrics.observe_itl_n(itl, n - 1)
                else:                                    # zero ITL: every token is due now
                    if blocks:
                        yield range(1, n)
                    else:
                        for k in range(1, n):
                            yield k
                    metrics.lag.observe_n(0.0, n - 1)
                    metrics.observe_itl_n(0.0, n - 1)
            else:
                k0 = 1
                drawn = False       # whether token k0's deadline is already in target
                schedule = first
                if schedule is None and n > 1 and constant_itl and deadlines:   # the driver emits tokens 1..n-1
                    schedule = seq.schedule = TokenSchedule(seq, 1, n, target + itl, itl, now, metrics, lat)
                    yield schedule
                    seq.schedule = None
                    if seq.state == SeqState.ABORTED:
                        raise ClientDisconnected()
                if schedule is not None:
                    k0 = schedule.next
                    now = schedule.prev
                    if k0 >= n:     # all sent: the sequence ended with its last token
                        seq.finished_at = now
                    else:           # cut short by an /admin/config latency change: per token on,
                        target = schedule.deadline(k0)      # token k0 keeps the ITL it was drawn with
                        drawn = True
                itl_obs = metrics.itl.observe
                prev = now
                for k in range(k0, n):
                    if drawn:
                        drawn = False
                    else:
                        target += lat.itl(self.running)
                    now = monotonic()
                    if target > now:
                        if deadlines or per_token:
                            yield target if deadlines else -1
                        target = wait(seq, target, deadlines)
                        now = monotonic()
                    lag(now - target)
                    itl_obs(now - prev)
                    prev = now
                    if per_token:
                        yield k
            if seq.request.send_image:          # --omni: the image is generated after the tokens
                delay = lat.image_time()
                if delay > 0:
                    target = monotonic() + delay
                    if deadlines or per_token:
                        yield target if deadlines else -1
                    target = wait(seq, target, deadlines)
                    seq.finished_at = monotonic()
            if not seq.finished_at:
                seq.finished_at = monotonic()
            metrics.finished(seq)
        finally:
            if seq.state in (SeqState.RUNNING, SeqState.WAITING):
                if seq.finished_at:
                    self._release(seq)
                    seq.state = SeqState.DONE
                else:
                    self.abort(seq)
            elif seq.state == SeqState.INSTANT:
                seq.state = SeqState.DONE

    def first_token(self, seq: Sequence, now: float) -> None:
        """The bookkeeping of ``seq``'s first token, emitted at ``now``: by :meth:`run` itself, or by
        the driver of a schedule from token 0 (``first_in_schedule``; :meth:`TokenSchedule.first_token`)."""
        seq.first_token_at = now
        self.prefill_tokens -= seq.prompt_len

    def step_schedule(self, seq: Sequence, start: int, stop: int) -> TokenSchedule:
        """Tokens ``start..stop-1`` of ``seq`` as the engine emits them (``start == stop``: only
        the wait for the first token), for a driver that emits them itself."""
        return TokenSchedule.of_engine(seq, start, stop, self.engine, self.metrics, self.latency)

    def step_tokens(self, schedule: TokenSchedule):
        """Emit a step-driven ``schedule`` from the calling greenlet (see
        :meth:`generation.engine.step_engine.StepEngine.emit_in_greenlet`)."""
        return self.engine.emit_in_greenlet(schedule)

    def _wait_until(self, seq: Sequence, target: float, deadlines: bool) -> float:
        """Inside :meth:`run`, after it yielded ``target`` (``deadlines``: its driver has waited
        for it) or FLUSH: sleep until ``target`` in this greenlet unless the driver did; raises
        ClientDisconnected if the sequence was aborted meanwhile.  Returns ``target`` moved by a
        keep pause meanwhile (``seq.shift``, generation.engine.freeze), what the next deadlines
        follow from."""
        if not deadlines:
            self._sleep(seq, target)
        elif seq.state == SeqState.ABORTED:
            raise ClientDisconnected()
        shift = seq.shift
        if shift:
            seq.shift = 0.0
            return target + shift
        return target

    def run_to_end(self, seq: Sequence) -> None:
        """Non-streaming: the same timing as :meth:`run`, without waking per token when the
        inter-token latency is a constant."""
        for _ in self.run(seq, per_token=False):
            pass

    def stream(self, seqs: list[Sequence], flush: bool = False, blocks: bool = False, deadlines: bool = False,
               first_in_schedule: bool = False):
        """Generator of ``(sequence, token_index)`` in emission order over all ``seqs``;
        with ``flush``, also ``(sequence or None, FLUSH)`` whenever the next token is not ready;
        with ``blocks``, ``(sequence, range)`` for tokens due at once (see :meth:`run`);
        with ``deadlines`` and one sequence, ``(sequence, deadline)`` where it would flush and
        sleep (see :meth:`run`, ``first_in_schedule`` too; several sequences ignore both: they run
        in greenlets of their own);
        with a stream interval over 1 (the request's, clamped up to ``--stream-interval``),
        ``(sequence, slice)`` for tokens that go out as one output (see :meth:`run`).

        One sequence runs in the caller's greenlet; several run in their own greenlets and
        their tokens interleave as they are produced.  Closing the generator aborts every
        sequence still running or waiting."""
        interval = effective(seqs[0].request.stream_interval, self.config.stream_interval) if seqs else 1
        if len(seqs) == 1:
            seq = seqs[0]
            if flush:               # C-level pairing: no Python frame per token
                return zip(itertools.repeat(seq), self.run(seq, blocks=blocks, deadlines=deadlines, interval=interval,
                                                           first_in_schedule=first_in_schedule))
            return ((seq, k) for k in self.run(seq, blocks=blocks, interval=interval) if k != self.FLUSH)
        return self._stream_many(seqs, flush, blocks, interval)

    def _stream_many(self, seqs: list[Sequence], flush: bool, blocks: bool = False, interval: int = 1):
        q = gevent.queue.Queue()
        done = object()
        ahead = [0]             # tokens queued since the renderer last caught up

        def worker(s):
            try:
                for k in self.run(s, blocks=blocks, interval=interval):
                    q.put((s, k))
                    ahead[0] += len(k) if k.__class__ is range else 1
                    if ahead[0] > STREAM_AHEAD:      # tokens all due at once: the renderer's turn
                        gevent.sleep(HUB_SLICE)
            except ClientDisconnected:
                pass
            finally:
                q.put((s, done))

        greenlets = [gevent.spawn(worker, s) for s in seqs]
        monotonic = time.monotonic
        try:
            remaining = len(seqs)
            flush_by = monotonic() + HUB_SLICE
            while remaining:
                # A flush when nothing is ready, and at least every HUB_SLICE: the renderer then
                # writes what it has, and the server gives the hub a turn (many choices with
                # tokens all due at once would otherwise render their whole body in one go).
                if q.empty():
                    ahead[0] = 0
                if flush and (q.empty() or monotonic() >= flush_by):
                    yield None, -1
                    flush_by = monotonic() + HUB_SLICE
                s, k = q.get()
                if k is done:
                    remaining -= 1
                    continue
                if k != self.FLUSH:
                    yield s, k
            if any(s.state == SeqState.ABORTED for s in seqs):
                raise ClientDisconnected()
        finally:
            self._stop_all(greenlets, seqs)

    def _stop_all(self, greenlets, seqs) -> None:
        for g in greenlets:
            if not g.dead:
                g.kill(block=False)
        for s in seqs:
            if s.state in (SeqState.RUNNING, SeqState.WAITING):
                self.abort(s)

    def complete(self, seqs: list[Sequence]) -> None:
        """Run every sequence to its end (non-streaming); same timing as streaming."""
        if len(seqs) == 1:
            self.run_to_end(seqs[0])
            return

        def worker(s):
            try:
                self.run_to_end(s)
            except ClientDisconnected:
                pass

        greenlets = [gevent.spawn(worker, s) for s in seqs]
        try:
            gevent.joinall(greenlets, raise_error=True)
            if any(s.state == SeqState.ABORTED for s in seqs):
                raise ClientDisconnected()
        finally:
            self._stop_all(greenlets, seqs)
