"""vLLM's Prometheus metrics, as current vLLM (v1 engine, ``vllm/v1/metrics/loggers.py``) exports
them: names, types, label names, buckets.

Every ``vllm:*`` series carries ``model_name`` (the first served name) and ``engine`` (the
data-parallel rank, ``--data-parallel-rank``, 0 when unset).

Two ways values get here:

* **read at scrape time** (custom collectors): the scheduler's state -- running, waiting (and
  waiting by reason), KV-cache usage, sleep state, ``vllm:lora_requests_info``.  The engine pushes
  nothing for them on its hot path.
* **recorded when a sequence finishes successfully** (:meth:`MetricsRecorder.finished`): token
  counters, request histograms and ``request_success_total``.  Aborted and rejected requests
  record nothing.  Per-token values (inter-token latency, the simulator's own emission lag) go
  into :class:`FastHistogram`, whose ``observe`` is one ``bisect`` and two additions.

With ``--fake-metrics`` the exported registry holds chosen values instead
(:meth:`MetricsRecorder.use_fake`, :mod:`generation.metrics.fake_metrics`); the measured ones are still
recorded, unexported.  This module imports neither the config module nor fake_metrics.

Simulator choices (README, "Metrics"):

* finish reasons are vLLM's (``stop``, ``length``, ``abort``, ``error``, ``repetition``), each
  series created at 0: a tool-call answer counts as ``stop``, a P/D prefill answer
  (``remote_decode``) as ``length`` (vLLM's prefill node stops at max_tokens=1), a
  ``cache_threshold`` refusal as ``abort``;
* a request the client abandons after admission is counted (:meth:`MetricsRecorder.aborted`):
  its prompt once prefilled, the tokens made until then and ``finished_reason="abort"``
  (``"error"`` when the server failed it), so that the success counter adds up to the
  requests sent (released vLLM counts the tokens but not the abort: its issue 31503);
* without engine steps (every calculator but ``step``), ``vllm:iteration_tokens_total`` gets, per
  finished sequence, one prefill step of its computed prompt tokens plus its first token, and one
  1-token step per further output token, and nothing is preempted (``vllm:num_preemptions``
  stays 0); with ``--latency-calculator step`` both come from the engine's real steps
  (:mod:`generation.engine.step_engine`), as do the running / waiting gauges,
  ``vllm:kv_cache_usage_perc`` (blocks held / blocks) and the token counters: each step's tokens
  count in ``vllm:generation_tokens`` as it ends, a prompt in ``vllm:prompt_tokens`` when its
  first token comes out, as vLLM's ``IterationStats`` count them (without steps a sequence's
  tokens are counted when it ends, the reference's way);
* ``vllm:lora_requests_info`` keeps the current adapter state and at most
  ``max(--max-cpu-loras, --max-loras)`` recent ones (vLLM and the reference keep every state
  ever seen, which made ``/metrics`` grow without bound);
* what ``--vllm-version``'s release exports (:data:`generation.config.vllm_versions.METRICS_SINCE`):
  ``vllm:prompt_tokens_recomputed`` up to 0.19, ``vllm:num_requests_waiting_by_reason`` from
  0.20, ``vllm:request_num_preemptions`` from 0.31, ``vllm:admission_rejections`` and
  ``vllm:prompt_tokens_cached_by_source`` from 0.34; ``vllm:time_per_output_token_seconds`` (the
  ITL's old name, which the reference simulator still exports) only before 0.12 (or before 0.15
  with ``--show-hidden-metrics-for-version``), as vLLM;
* ``vllm:lora_requests_info`` only with LoRA (``--enable-lora``, ``--lora-modules``, or an
  adapter loaded at run time), as vLLM registers it only with a LoRA config.
"""
from __future__ import annotations

import bisect
import os
import time
from collections import OrderedDict
from functools import partial

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client import gc_collector, platform_collector, process_collector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .buckets import REQUEST_LATENCY_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, buckets_1_2_5  # noqa: F401
from .series import FastCounter, FastHistogram, LabelledHistogram, SampledHistogram  # noqa: F401 - imported from here too

ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
               0.1, 0.25, 0.5, 1.0)
# prometheus_client's own metric classes (none here: every family is a custom collector, whose
# _created samples MetricsRecorder writes itself, as vLLM's Counter and Histogram objects have them)
disable_created_metrics()
# what vLLM's /metrics has besides its own families: prometheus_client's default registry's
# collectors (python_gc_*, python_info, process_*), first, as that registry holds them
DEFAULT_COLLECTORS = (gc_collector.GC_COLLECTOR, platform_collector.PLATFORM_COLLECTOR,
                      process_collector.PROCESS_COLLECTOR)
# vllm:request_render_duration_seconds (vllm/renderers/metrics.py)
RENDER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# vllm:sleep_mode_operation_duration_seconds (vllm/entrypoints/serve/dev/sleep/metrics.py)
SLEEP_OP_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
# vllm:tool_call_parser_invocations' label values (vllm/parser/metrics.py), every combination made at start
PARSER_MODES = ("streaming", "non_streaming")
PARSER_OUTCOMES = ("tool_call", "no_tool_call")
PARSER_REQUEST_TYPES = ("chat_completions", "responses", "other")

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")      # vLLM's FinishReason
_REASON = {"tool_calls": "stop", "remote_decode": "length", "cache_threshold": "abort"}
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
LABELS = ("model_name", "engine")


# per request (vLLM 0.34's REQUEST_NUM_PREEMPTIONS_BUCKETS, vllm/v1/metrics/buckets.py: the
# first bucket holds the never-preempted requests with the once-preempted ones)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
# vllm:prompt_tokens_cached_by_source's tiers (vLLM 0.34's CacheHitSource, in its order)
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


class MetricsRecorder:
    """Owns the Prometheus registry of one simulator: the hooks the engine calls when a
    sequence finishes, and the collectors that read the engine's state at scrape time
    (:meth:`bind` gives them the simulator)."""

    def __init__(self, config):
        from generation.config.vllm_versions import TPOT_DEPRECATED_FROM, exposes, flag_given, parse_version
        self.config = config
        # families --vllm-version's release exposes (generation.config.vllm_versions.METRICS_SINCE)
        shown = self.shown = {name: exposes(config, name) for name in (
            "vllm:prompt_tokens_recomputed", "vllm:num_requests_waiting_by_reason", "vllm:admission_rejections",
            "vllm:prompt_tokens_cached_by_source", "vllm:request_num_preemptions",
            "vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds")}
        # vLLM registers vllm:lora_requests_info only with a LoRA config (--enable-lora; vLLM
        # refuses --lora-modules without it); here also once an adapter is registered at run time
        self.lora_enabled = flag_given(config, "enable-lora") or bool(getattr(config, "lora_modules", None))
        self.model_name = config.display_model_name
        self.engine = str(max(getattr(config, "data_parallel_rank", 0) or 0, 0))
        self.sim = None
        self.fake = None
        self.started = time.time()      # the counters' _created (vLLM makes its series at start-up)
        self.steps = False          # step mode: iteration_tokens_total is observed per engine step
        lv = self._lv = {"model_name": self.model_name, "engine": self.engine}
        self.histograms: list[FastHistogram] = []

        def hist(name, doc, buckets):
            h = FastHistogram(name, doc, buckets, lv)
            if shown.get(name, True):           # observed either way, exported if the release has it
                self.histograms.append(h)
            return h

        # counters (plain ints: exported by _collect_counters)
        self.prompt_tokens = FastCounter()
        self.generation_tokens = FastCounter()
        self.prefix_queries = FastCounter()
        self.prefix_hits = FastCounter()
        # vLLM's KV connector prefix cache (step mode: the CPU tier of --kv-offloading-size), in tokens
        self.external_queries = FastCounter()
        self.external_hits = FastCounter()
        self.preemptions = FastCounter()
        # vLLM 0.34's vllm:admission_rejections{reason}: requests refused by a queue limit
        self.admission_rejections = {"max_num_queued_reqs": FastCounter(), "max_num_queued_tokens": FastCounter()}
        # vLLM's multimodal processor cache (vllm:mm_cache_queries / _hits, in items): no such cache
        # is simulated, so both stay 0 (vLLM's test_metrics_exist reads them for multimodal models)
        self.mm_cache_queries = FastCounter()
        self.mm_cache_hits = FastCounter()
        self.step_wait = FastCounter()          # seconds (step mode: StepEngine.step_end)
        self.prompt_cached = FastCounter()
        self.prompt_recomputed = FastCounter()
        self.by_source = {s: FastCounter() for s in PROMPT_SOURCES}
        self.success = {r: FastCounter() for r in FINISH_REASONS}

        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         TTFT_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        REQUEST_LATENCY_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds",
                          "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        self.request_tpot = hist("vllm:request_time_per_output_token_seconds",
                                 "Histogram of time_per_output_token_seconds per request.", TPOT_BUCKETS)
        b125 = buckets_1_2_5(config.max_model_len)
        self.prompt_hist = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", b125)
        self.gen_hist = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", b125)
        self.max_gen_hist = hist("vllm:request_max_num_generation_tokens",
                                 "Histogram of maximum number of requested generation tokens.", b125)
        self.params_max_tokens = hist("vllm:request_params_max_tokens",
                                      "Histogram of the max_tokens request parameter.", b125)
        self.params_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS)
        self.iteration_tokens = hist("vllm:iteration_tokens_total",
                                     "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS)
        self.kv_computed = hist("vllm:request_prefill_kv_computed_tokens",
                                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                                b125)
        self.request_preemptions = hist("vllm:request_num_preemptions",
                                        "Histogram of the number of times a request was preempted.",
                                        PREEMPTION_BUCKETS)
        # finished() shares a bisection between histograms of one set of bounds
        assert self.prompt_hist.bounds == self.kv_computed.bounds == self.gen_hist.bounds == \
            self.max_gen_hist.bounds == self.params_max_tokens.bounds
        assert self.queue.bounds == self.e2e.bounds == self.inference.bounds == self.prefill.bounds
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        TPOT_BUCKETS)
        # the ITL's old name, in releases before vLLM 0.12 (generation.config.vllm_versions.TPOT_HIDDEN_FROM),
        # with each release's help text
        deprecated = parse_version(config.vllm_version) >= TPOT_DEPRECATED_FROM
        self.tpot = self.itl.alias("vllm:time_per_output_token_seconds", "Histogram of time per output token in "
                                   "seconds." + ("DEPRECATED: Use vllm:inter_token_latency_seconds instead."
                                                 if deprecated else ""))
        if shown["vllm:time_per_output_token_seconds"]:
            self.histograms.append(self.tpot)
        # VLLM_SIM_LAG_SAMPLES=FILE (benches): every emission lag also kept, and written to FILE at exit
        lag_cls = partial(SampledHistogram, os.environ["VLLM_SIM_LAG_SAMPLES"]) \
            if os.environ.get("VLLM_SIM_LAG_SAMPLES") else FastHistogram
        self.lag = lag_cls("vllm_sim:token_emission_lag_seconds",
                           "Simulator-specific: actual token emission time minus its scheduled time. "
                           "Large values mean the simulator, not the simulated model, is the "
                           "bottleneck.", LAG_BUCKETS, lv)
        self.token_lag = self.lag.observe

        # vllm:request_render_duration_seconds{model_name, request_type}: registered by vLLM at
        # its first observation, a series per request type ("chat", "completion") at its first
        self.render_duration = LabelledHistogram(
            "vllm:request_render_duration_seconds",
            "Time spent rendering a request, including chat templating, tokenization, and multimodal "
            "preprocessing.", RENDER_BUCKETS, {"model_name": self.model_name}, "request_type") \
            if exposes(config, "vllm:request_render_duration_seconds") else None
        # vllm:tool_call_parser_invocations{model_name, mode, outcome, request_type}: with
        # --tool-call-parser, every combination at 0 from the start (MetricsRecorder.parsed)
        self.parser_calls = {(m, o, t): FastCounter() for m in PARSER_MODES for o in PARSER_OUTCOMES
                             for t in PARSER_REQUEST_TYPES} \
            if flag_given(config, "tool-call-parser") and exposes(config, "vllm:tool_call_parser_invocations") \
            else None
        # vLLM 0.34's sleep-mode operation metrics (dev mode's /sleep, /wake_up,
        # /release_kv_cache_memory): registered at the first operation (sleep_operation)
        self.sleep_ops = None
        self.shown_sleep_ops = exposes(config, "vllm:sleep_mode_operation_duration_seconds")

        self._lora_states: OrderedDict = OrderedDict()     # (running, waiting) -> unix time set
        self._lora_states[("", "")] = time.time()
        self._lora_last = ("", "")

        r = self.registry = CollectorRegistry(auto_describe=False)
        self.real_registry = r
        small = self._small_registry = CollectorRegistry(auto_describe=False)
        for c in DEFAULT_COLLECTORS:
            r.register(c)
            small.register(c)
        for fn in (self._collect_state, self._collect_config_info, self._collect_counters):
            r.register(_Collector(fn))
            small.register(_Collector(fn))
        for h in self.histograms:
            r.register(h)
        if self.render_duration is not None:
            r.register(self.render_duration)
        r.register(_Collector(self._collect_sleep_ops))
        r.register(self.lag)

    # ---- wiring ----------------------------------------------------------------------------
    def bind(self, sim) -> None:
        """Give the scrape-time collectors the simulator whose state they read."""
        self.sim = sim

    def docs(self) -> dict:
        """``{metric family name: help text}`` of the real registry (fake metrics reuse them)."""
        return {fam.name: fam.documentation for fam in self.real_registry.collect()}

    def use_fake(self, collector) -> None:
        """Export ``collector``'s chosen values (``--fake-metrics``) instead of the real ones;
        the constant cache config and the simulator's own lag histogram stay real."""
        self.fake = collector
        self.registry = CollectorRegistry(auto_describe=False)
        for c in DEFAULT_COLLECTORS:
            self.registry.register(c)
        self.registry.register(_Collector(self._collect_config_info))
        self.registry.register(collector)
        self.registry.register(self.lag)

    def render(self) -> bytes:
        """The ``/metrics`` body (Prometheus text format 0.0.4), the same text as
        ``generate_latest(self.registry)`` but with histograms written from prebuilt label
        strings: about 4x cheaper, so a scrape does not stall the streams (issue 13)."""
        if self.registry is not self.real_registry:          # fake metrics
            return generate_latest(self.registry)
        out = [generate_latest(self._small_registry).decode()]
        for h in self.histograms:
            h.render_into(out)
        if self.render_duration is not None:
            self.render_duration.render_into(out)
        if self.sleep_ops is not None:
            out.append(generate_latest(_Collector(self._collect_sleep_ops)).decode())
        self.lag.render_into(out)
        return "".join(out).encode()

    # ---- scrape-time collectors --------------------------------------------------------------
    def _gauge(self, name, doc, value, extra=None):
        names = list(LABELS) + ([k for k, _ in extra] if extra else [])
        fam = GaugeMetricFamily(name, doc, labels=names)
        fam.add_metric([self.model_name, self.engine] + ([v for _, v in extra] if extra else []), value)
        return fam

    def _collect_state(self):
        sim = self.sim
        lbl = [self.model_name, self.engine]
        engine = getattr(sim, "engine", None)
        if engine is not None:
            yield from self._collect_engine_state(engine, lbl)
            return
        running = sim.running if sim else 0
        waiting = list(sim.waiting) if sim else []
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(waiting))
        deferred = 0
        if waiting and sim.loras.paths:
            loras = sim.loras
            deferred = sum(1 for s in waiting if s.lora and s.lora not in loras.loaded and not loras.can_run(s.lora))
        if self.shown["vllm:num_requests_waiting_by_reason"]:
            yield self._waiting_family(lbl, len(waiting) - deferred, deferred)
        if sim is None:
            kv = 0.0
        elif sim.kv_cache is not None:
            kv = sim.kv_cache.usage()
        else:
            kv = self._running_kv_usage(sim, time.monotonic())
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
        yield from self._collect_sleep_and_lora(sim, lbl)

    @staticmethod
    def _running_kv_usage(sim, now: float) -> float:
        """``vllm:kv_cache_usage_perc`` without the step engine: the blocks the running
        sequences' tokens fill (prompt plus the tokens emitted so far, estimated from the
        inter-token latency) over the cache's ``--kv-cache-size`` blocks, as vLLM reports blocks
        held by running requests."""
        cfg = sim.config
        if not sim.running_seqs or cfg.kv_cache_size <= 0:
            return 0.0
        bs = cfg.block_size
        itl = cfg.inter_token_latency
        blocks = 0
        for seq in sim.running_seqs:
            n = len(seq.pieces)
            first = seq.first_token_at
            if not first:
                out = 0
            elif itl > 0:
                out = min(n, 1 + int((now - first) / itl))
            else:
                out = n
            blocks += -(-(seq.prompt_len + out) // bs)
        return min(blocks / cfg.kv_cache_size, 1.0)

    def _waiting_family(self, lbl, capacity: int, deferred: int):
        fam = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.", labels=list(LABELS) + ["reason"])
        fam.add_metric(lbl + ["capacity"], capacity)
        fam.add_metric(lbl + ["deferred"], deferred)
        return fam

    def _collect_engine_state(self, engine, lbl):
        """Step mode: the scheduler's own state (docs/engine-model.md section 5): running and
        waiting requests, waiting by reason (deferred: a KV transfer in flight, or a LoRA
        adapter the batch cannot take), KV usage from the blocks held."""
        sched = engine.scheduler
        now = time.monotonic()
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                          len(sched.running))
        waiting = len(sched.waiting) + engine.pending
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        loras = {r.lora for r in sched.running if r.lora}
        full = sched.max_loras and len(loras) >= sched.max_loras
        deferred = sum(1 for r in sched.waiting
                       if r.kv_ready_at > now or (full and r.lora and r.lora not in loras))
        if self.shown["vllm:num_requests_waiting_by_reason"]:
            yield self._waiting_family(lbl, waiting - deferred, deferred)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", sched.usage())
        yield from self._collect_sleep_and_lora(self.sim, lbl)

    def _collect_sleep_and_lora(self, sim, lbl):
        sleeping = bool(sim and sim.sleeping)
        level = getattr(sim, "sleep_level", 1) if sleeping else 0
        fam = GaugeMetricFamily(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            labels=list(LABELS) + ["sleep_state"])
        fam.add_metric(lbl + ["awake"], 0 if sleeping else 1)
        fam.add_metric(lbl + ["weights_offloaded"], 1 if level == 1 else 0)
        fam.add_metric(lbl + ["discard_all"], 1 if level == 2 else 0)
        yield fam
        if self.lora_enabled or (sim is not None and sim.loras.paths):
            yield self._lora_family()

    def _lora_family(self):
        sim = self.sim
        if sim is not None:
            engine = getattr(sim, "engine", None)
            if engine is not None:
                sched = engine.scheduler
                running = ",".join(sorted({r.lora for r in sched.running if r.lora}))
                waiting = ",".join(sorted({r.lora for r in sched.waiting if r.lora}))
            else:
                running = ",".join(sorted(n for n, c in sim.loras.loaded.items() if c > 0))
                waiting = ",".join(sorted({s.lora for s in sim.waiting if s.lora}))
            state = (running, waiting)
            if state != self._lora_last:
                states = self._lora_states
                states.pop(state, None)
                states[state] = time.time()
                self._lora_last = state
                cap = sim.loras.resident          # max(--max-cpu-loras, --max-loras): adapters in memory
                while len(states) > cap:
                    states.popitem(last=False)
        # vLLM's three labels, no engine nor model_name (vllm/v1/metrics/loggers.py; vLLM refuses
        # LoRA with more than one engine, and each data-parallel rank here has its own /metrics)
        fam = GaugeMetricFamily("vllm:lora_requests_info", "Running stats on lora requests.",
                                labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"])
        max_lora = str(self.config.max_loras)
        for (running, waiting), ts in self._lora_states.items():
            fam.add_metric([max_lora, waiting, running], ts)
        return fam

    def refused(self, error, reason: str = "max_num_queued_reqs"):
        """Count a request refused by a queue limit (vLLM 0.34's
        ``vllm:admission_rejections{reason}``: ``max_num_queued_reqs`` for the waiting queue's
        429 and ``--max-num-queued-reqs``, ``max_num_queued_tokens``); returns ``error`` (what
        the caller raises)."""
        self.admission_rejections[reason].inc()
        return error

    def rendered(self, request_type: str, seconds: float) -> None:
        """A request rendered (chat templating and tokenization) in ``seconds``:
        ``vllm:request_render_duration_seconds{request_type}``, ``"chat"`` or ``"completion"``,
        as vLLM 0.34's ``OnlineRenderer.render_chat`` / ``render_completion`` observe it once a
        render succeeds (vllm/renderers/online_renderer.py)."""
        h = self.render_duration
        if h is not None:
            h.child(request_type).observe(seconds)

    def parsed(self, seq) -> None:
        """vLLM's tool parser ran over sequence ``seq``'s output (``--tool-call-parser``; the
        request's ``tool_parser``: its request type when the parser parses it, see
        :func:`generation.adapters.base.tool_parser_type`): ``vllm:tool_call_parser_invocations``
        once for a non-streaming choice, once per streamed output of a stream (vLLM's parser
        runs per delta: vllm/parser/abstract_parser.py ``extract_tool_calls`` and
        ``extract_tool_calls_streaming``), from the output that ends the reasoning span on when
        the answer has one; outcome ``tool_call`` for an answer with tool calls (every delta of
        it: the simulated answer has nothing around its calls)."""
        req = seq.request
        n = len(seq.pieces)
        called = "tool_call" if seq.tool_calls else "no_tool_call"
        if not req.stream:
            self.parser_calls[("non_streaming", called, req.tool_parser)].value += 1
            return
        if not n:
            return                  # vLLM sends an output without tokens unparsed
        from generation.engine.stream_interval import effective
        interval = effective(req.stream_interval, self.config.stream_interval)

        def output(k):              # the stream's output carrying token k (the first goes alone)
            return 0 if k == 0 else 1 + (k - 1) // interval
        first = 0
        span = seq.reasoning_span
        if span is not None:
            r1, c0 = span[1], span[2]
            if c0 == r1:            # cut inside the reasoning: the end marker never came
                return
            first = output(c0 - 1)
        self.parser_calls[("streaming", called, req.tool_parser)].value += output(n - 1) + 1 - first

    def sleep_operation(self, operation: str, seconds: float) -> None:
        """A dev-mode sleep-mode operation (``sleep``, ``release_kv_cache_memory``, ``wake``)
        took ``seconds``: vLLM 0.34's ``vllm:sleep_mode_operation_duration_seconds`` and
        ``vllm:sleep_mode_operations_in_flight`` (``serve/dev/sleep/metrics.py``), both made at
        the first operation, a series per operation at its first."""
        if not self.shown_sleep_ops:
            return
        ops = self.sleep_ops
        if ops is None:
            ops = self.sleep_ops = LabelledHistogram(
                "vllm:sleep_mode_operation_duration_seconds", "Duration of one sleep-mode operation.",
                SLEEP_OP_BUCKETS, {}, "operation")
        ops.child(operation).observe(seconds)

    def _collect_sleep_ops(self):
        ops = self.sleep_ops
        if ops is None:
            return
        yield from ops.collect()
        # the operations are instant here: none is ever in flight at a scrape
        fam = GaugeMetricFamily("vllm:sleep_mode_operations_in_flight", "Sleep-mode operations currently awaited.",
                                labels=["operation"])
        for operation in ops.children:
            fam.add_metric([operation], 0)
        yield fam

    def _collect_config_info(self):
        """``vllm:cache_config_info``: a gauge at 1 labelled with every CacheConfig field
        (:func:`cache_config_metrics_info`) and ``engine``, as vLLM's
        ``PrometheusStatLogger.log_metrics_info("cache_config", ...)``."""
        from .cache_config_info import cache_config_metrics_info
        info = cache_config_metrics_info(self.config)
        fam = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                labels=[*info, "engine"])
        fam.add_metric([*info.values(), self.engine], 1)
        yield fam

    def _collect_counters(self):
        lbl = [self.model_name, self.engine]
        created = self.started
        for name, doc, c in (
                ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", self.preemptions),
                ("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
                ("vllm:generation_tokens", "Number of generation tokens processed.", self.generation_tokens),
                ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                 self.prompt_cached),
                ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                 self.prefix_queries),
                ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                 self.prefix_hits),
                ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector "
                 "cross-instance cache sharing, in terms of number of queried tokens.", self.external_queries),
                ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector "
                 "cross-instance cache sharing, in terms of number of cached tokens.", self.external_hits),
                ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.",
                 self.mm_cache_queries),
                ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.",
                 self.mm_cache_hits),
                ("vllm_sim:engine_step_wait_seconds", "Simulator-specific: time engine steps were held "
                 "past their modelled end because the previous step's tokens were still being sent "
                 "(--latency-calculator step). Growing means the simulator, not the simulated model, "
                 "sets the pace.", self.step_wait)):
            fam = CounterMetricFamily(name, doc, labels=list(LABELS))
            fam.add_metric(lbl, c.value, created)
            yield fam
            if name == "vllm:prompt_tokens_cached" and self.shown["vllm:prompt_tokens_recomputed"]:
                # vLLM 0.17-0.19: the last prompt token, recomputed when the whole prompt was
                # cached; the simulator always leaves one token to compute (0)
                fam = CounterMetricFamily("vllm:prompt_tokens_recomputed",
                                          "Number of cached tokens recomputed for forward pass.", labels=list(LABELS))
                fam.add_metric(lbl, self.prompt_recomputed.value, created)
                yield fam
        if self.shown["vllm:admission_rejections"]:
            fam = CounterMetricFamily("vllm:admission_rejections",
                                      "Number of admission attempts rejected by a queue limit, by reason.",
                                      labels=["model_name", "reason"])
            for reason, c in self.admission_rejections.items():
                fam.add_metric([self.model_name, reason], c.value, created)
            yield fam
        if self.shown["vllm:prompt_tokens_cached_by_source"]:
            # vLLM counts at admission the local prefix-cache hits as "device" and the KV
            # connector's by its tier; the simulator's one connector tier is the CPU tier of
            # --kv-offloading-size (step mode), "host": the sum is prefix_cache_hits +
            # external_prefix_cache_hits, as vLLM's help says
            fam = CounterMetricFamily(
                "vllm:prompt_tokens_cached_by_source",
                "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
                "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
                "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
                "vllm:external_prefix_cache_hits.", labels=list(LABELS) + ["source"])
            hits = {"device": self.prefix_hits.value, "host": self.external_hits.value}
            for source in CACHE_HIT_SOURCES:
                fam.add_metric(lbl + [source], hits.get(source, 0), created)
            yield fam
        fam = CounterMetricFamily("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                                  labels=list(LABELS) + ["source"])
        for source, c in self.by_source.items():
            fam.add_metric(lbl + [source], c.value, created)
        yield fam
        fam = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                  labels=list(LABELS) + ["finished_reason"])
        for reason, c in self.success.items():
            fam.add_metric(lbl + [reason], c.value, created)
        yield fam
        if self.parser_calls is not None:
            fam = CounterMetricFamily("vllm:tool_call_parser_invocations",
                                      "Total number of ToolParser invocations. Non-streaming increments once per "
                                      "choice; streaming increments once per delta.",
                                      labels=["model_name", "mode", "outcome", "request_type"])
            for (mode, outcome, rtype), c in self.parser_calls.items():
                fam.add_metric([self.model_name, mode, outcome, rtype], c.value, created)
            yield fam

    # ---- engine hooks ----------------------------------------------------------------------
    def finished(self, seq) -> None:
        """A sequence completed successfully: observe its measured timings and token counts.
        About 15 histogram observations per request, each a bisection and two adds inlined
        here (issue 32: no list of pairs built per request); observations of one value on the
        same bounds share their bisection (the prompt and its computed part when nothing was
        cached, the generated tokens' two histograms, the six durations' equal values)."""
        reason = seq.finish_reason
        counter = self.success.get(_REASON.get(reason, reason))
        (counter or self.success["stop"]).value += 1
        req = seq.request
        if req.tool_parser is not None and reason != "cache_threshold":
            self.parsed(seq)
        p = seq.prompt_len
        n = seq.completion_tokens
        engine_req = getattr(seq, "engine_req", None)
        if self.steps and engine_req is not None:
            computed = self._prompt_split(seq)[0]   # the steps counted its tokens (engine_tokens),
            # but for those the answer has beyond the engine's (a do_remote_decode answer's: one step)
            self.generation_tokens.value += max(0, n - engine_req.num_output)
        else:
            self.generation_tokens.value += n
            computed = self._count_prompt(seq)
        bl = bisect.bisect_left
        h = self.prompt_hist
        i = bl(h.bounds, p)
        h.counts[i] += 1
        h.sum += p
        h = self.kv_computed                        # the same bounds as prompt_hist
        h.counts[i if computed == p else bl(h.bounds, computed)] += 1
        h.sum += computed
        if not getattr(req, "pooling", False):      # vLLM: no sampling params, no generation histograms
            max_tokens = req.max_tokens
            if max_tokens is None:
                max_tokens = max(self.config.max_model_len - p, 0)
            h = self.gen_hist
            i = bl(h.bounds, n)
            h.counts[i] += 1
            h.sum += n
            h = self.max_gen_hist                   # the same bounds and value
            h.counts[i] += 1
            h.sum += n
            h = self.params_max_tokens
            h.counts[i if max_tokens == n else bl(h.bounds, max_tokens)] += 1
            h.sum += max_tokens
            rn = req.n
            if seq.index % max(rn, 1) == 0:         # one observation per prompt, as vLLM's parent request
                h = self.params_n
                h.counts[bl(h.bounds, rn)] += 1
                h.sum += rn
        preemptions = engine_req.preemptions if engine_req is not None else 0
        h = self.request_preemptions
        h.counts[bl(h.bounds, preemptions)] += 1
        h.sum += preemptions
        if reason == "cache_threshold":
            return
        if not self.steps:                          # step mode: the engine observes its real steps
            it = self.iteration_tokens
            if n > 1:
                it.observe_n(1, n - 1)
            v = computed + 1                        # the prefill step: its prompt tokens and the first token
            it.counts[bl(it.bounds, v)] += 1
            it.sum += v
        arrival = seq.arrival
        start = seq.started_at or arrival
        end = seq.finished_at
        first = seq.first_token_at or end
        # vLLM's queue time runs from the engine core's QUEUED event (the step engine's queueing,
        # after the modelled frontend), e2e and TTFT from the API server's arrival
        queued = engine_req.queued_at if engine_req is not None and self.steps else arrival
        # durations never below 0, whatever the clocks' stamps (a histogram of seconds has no negatives)
        queue = start - queued
        queue = 0.0 if 0.0 > queue else queue      # max(queue, 0.0), as max() decides
        e2e = end - arrival
        e2e = 0.0 if 0.0 > e2e else e2e
        h = self.queue
        iq = bl(h.bounds, queue)
        h.counts[iq] += 1
        h.sum += queue
        h = self.e2e                                # queue, e2e, inference, prefill, decode: one set of bounds
        ie = bl(h.bounds, e2e)
        h.counts[ie] += 1
        h.sum += e2e
        h = self.ttft
        v = first - arrival
        v = 0.0 if 0.0 > v else v
        h.counts[bl(h.bounds, v)] += 1
        h.sum += v
        v = end - start
        v = 0.0 if 0.0 > v else v
        h = self.inference
        h.counts[ie if v == e2e else bl(h.bounds, v)] += 1
        h.sum += v
        v = first - start
        v = 0.0 if 0.0 > v else v
        h = self.prefill
        h.counts[iq if v == queue else bl(h.bounds, v)] += 1
        h.sum += v
        decode = end - first
        v = 0.0 if 0.0 > decode else decode
        h = self.decode
        h.counts[bl(h.bounds, v)] += 1
        h.sum += v
        tokens = len(seq.pieces)
        h = self.request_tpot                       # vLLM: 0 for an answer of one token or none
        v = decode / (tokens - 1) if tokens > 1 else 0.0
        h.counts[bl(h.bounds, v)] += 1
        h.sum += v

    def aborted(self, seq, produced: int, reason: str = "abort") -> None:
        """A sequence the client abandoned (disconnect, gRPC ``Abort``) after it was admitted:
        its prompt tokens if its prefill was done (``produced`` > 0, or the step engine computed
        them) and the ``produced`` tokens it had generated, as vLLM counts tokens as each engine
        step makes them, and one ``request_success{finished_reason="abort"}`` (vLLM declares that
        series for client aborts; vLLM issue 31503 / 55634: its abort path skips the count, the
        open fix records it), so that successes + aborts + errors add up to the requests sent.
        ``reason`` ``"error"``: the server failed the request (a 500), counted under vLLM's
        ``error`` finish reason instead.  No per-request histogram is observed (no complete
        timings exist)."""
        self.success[reason].value += 1
        engine_req = getattr(seq, "engine_req", None)
        if self.steps and engine_req is not None:
            return                                  # the steps counted its tokens (engine_tokens)
        prefilled = produced > 0 or (engine_req is not None and engine_req.num_computed >= seq.prompt_len)
        self.generation_tokens.value += produced
        if not prefilled:
            return
        self._count_prompt(seq)

    def engine_tokens(self, emitted) -> None:
        """Step mode, once per engine step (:meth:`StepEngine._record
        <generation.engine.step_engine.StepEngine._record>`), as vLLM's ``IterationStats``: each
        token the step emitted counts in ``vllm:generation_tokens``, and a request's prompt in
        ``vllm:prompt_tokens`` (and by source) when its first token comes out; :meth:`finished`
        and :meth:`aborted` then count neither again.  ``emitted``: the step's EngineRequests
        (their ``seq``: the Sequence; a token past the answer's own, the one an empty answer's
        step still makes, is not counted, so the counters equal the usage the clients got)."""
        made = 0
        for req in emitted:
            seq = req.seq
            if seq is None:
                made += 1
                continue
            if req.num_output <= seq.completion_tokens:
                made += 1
            if req.num_output == 1:
                self._count_prompt(seq)
        self.generation_tokens.value += made

    @staticmethod
    def _prompt_split(seq) -> tuple[int, int, int]:
        """``(computed here, prefix-cache hit, KV transfer)`` tokens of ``seq``'s prompt: a remote
        prefill's KV, or (step mode) the blocks its engine request reloaded from the CPU tier,
        which vLLM's offloading connector counts as ``external_kv_transfer``."""
        p = seq.prompt_len
        cached = min(seq.cached_tokens, p)
        if getattr(seq.request, "remote_prefill", False):
            return 0, cached, p - cached
        engine_req = getattr(seq, "engine_req", None)
        external = min(engine_req.reloaded_tokens, cached) if engine_req is not None else 0
        return p - cached, cached - external, external

    def _count_prompt(self, seq) -> int:
        """Count the prompt's tokens, by source (computed here, a prefix-cache hit, or a remote
        prefill's KV transfer), as vLLM's ``prompt_tokens`` and ``prompt_tokens_by_source``;
        returns the tokens computed here."""
        computed, cached, external = self._prompt_split(seq)
        self.prompt_tokens.value += seq.prompt_len
        src = self.by_source
        src["local_compute"].value += computed
        src["local_cache_hit"].value += cached
        src["external_kv_transfer"].value += external
        self.prompt_cached.value += cached + external
        return computed

    def observe_itl_n(self, seconds: float, n: int) -> None:
        """``n`` inter-token gaps of the same length (constant ITL, non-streaming)."""
        self.itl.observe_n(seconds, n)


class _Collector:
    """Adapts a generator function to prometheus_client's collector protocol."""

    def __init__(self, fn):
        self.collect = fn

