"""vLLM's Prometheus metrics, as current vLLM (v1 engine, ``vllm/v1/metrics/loggers.py``) exports
them: names, types, label names, buckets.

Every ``vllm:*`` series carries ``model_name`` (the first served name) and ``engine`` (the
data-parallel rank, ``--data-parallel-rank``, 0 when unset).

Two ways values get here:

* **read at scrape time** (custom collectors, :mod:`generation.metrics.scrape`): the scheduler's
  state -- running, waiting (and waiting by reason), KV-cache usage, sleep state,
  ``vllm:lora_requests_info``.  The engine pushes nothing for them on its hot path.
* **recorded when a sequence finishes successfully** (:meth:`MetricsRecorder.finished`): token
  counters, request histograms and ``request_success_total``.  Aborted and rejected requests
  record nothing.  Per-token values (inter-token latency, the simulator's own emission lag) go
  into :class:`FastHistogram`, whose ``observe`` is one ``bisect`` and two additions.  The API
  server's own families (:mod:`generation.metrics.frontend`: admission rejections, render
  duration, tool-parser invocations, sleep-mode operations) are observed once per request.

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
  ``vllm:prompt_tokens_cached_by_source`` from 0.34, ``vllm:estimated_*_per_gpu`` (``--enable-mfu-metrics``,
  counted by step mode's engine, else 0) from 0.17; ``vllm:time_per_output_token_seconds`` (the
  ITL's old name, which the reference simulator still exports) only before 0.12 (or before 0.15
  with ``--show-hidden-metrics-for-version``), as vLLM;
* ``vllm:kv_block_lifetime_seconds``, ``vllm:kv_block_idle_before_evict_seconds`` and
  ``vllm:kv_block_reuse_gap_seconds`` only with ``--kv-cache-metrics``, observed from the step
  engine's block pool (:mod:`generation.metrics.kv_residency`; empty without step mode);
* ``vllm:kv_offload_*`` (vLLM's ``OffloadingConnector``) only with a CPU KV tier
  (``--kv-offloading-size``, or ``--cpu-offload-gb`` in step mode), first, as vLLM builds them
  before the scheduler's families, observed from the step engine's CPU tier
  (:mod:`generation.metrics.kv_offload`; empty without step mode);
* ``vllm:spec_decode_*`` only with a speculative config (:mod:`generation.metrics.spec_decode`);
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
from prometheus_client.core import CounterMetricFamily

from .buckets import (ITERATION_TOKEN_BUCKETS, PARAMS_N_BUCKETS, PREEMPTION_BUCKETS,  # noqa: F401
                      REQUEST_LATENCY_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, buckets_1_2_5, histogram_buckets)
from .frontend import FrontendMetrics
from .http import HTTPMetrics
from .websocket import websocket_metrics
from .kv_offload import GATED as KV_OFFLOAD_FAMILIES, KVOffloadMetrics, configured as kv_offload_configured
from .kv_residency import FAMILIES as KV_RESIDENCY_FAMILIES, KVResidency
from .spec_decode import SpecDecodeMetrics
from .token_counts import TokenCounting
from .scrape import LABELS, ScrapeCollectors, _Collector
from .series import FastCounter, FastHistogram, SampledHistogram  # noqa: F401 - imported from here too

LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
               0.1, 0.25, 0.5, 1.0)
# prometheus_client's own metric classes (none here: every family is a custom collector, whose
# _created samples MetricsRecorder writes itself, as vLLM's Counter and Histogram objects have them)
disable_created_metrics()
# what vLLM's /metrics has besides its own families: prometheus_client's default registry's
# collectors (python_gc_*, python_info, process_*), first, as that registry holds them
DEFAULT_COLLECTORS = (gc_collector.GC_COLLECTOR, platform_collector.PLATFORM_COLLECTOR,
                      process_collector.PROCESS_COLLECTOR)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")      # vLLM's FinishReason
_REASON = {"tool_calls": "stop", "remote_decode": "length", "cache_threshold": "abort"}
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


# vllm:prompt_tokens_cached_by_source's tiers (vLLM 0.34's CacheHitSource, in its order)
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


class MetricsRecorder(ScrapeCollectors, FrontendMetrics, TokenCounting):
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
            "vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
            "vllm:estimated_flops_per_gpu")}
        # vLLM registers vllm:lora_requests_info only with a LoRA config (--enable-lora; vLLM
        # refuses --lora-modules without it); here also once an adapter is registered at run time
        self.lora_enabled = flag_given(config, "enable-lora") or bool(getattr(config, "lora_modules", None))
        self.model_name = config.display_model_name
        # vLLM's engine index, every node's ranks counted (config.values.global_dp_rank: not imported here)
        self.engine = str(max(getattr(config, "data_parallel_rank", 0) or 0, 0)
                          + (getattr(config, "data_parallel_start_rank", None) or 0))
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
        # vLLM's PerfMetricsProm (vllm/v1/metrics/perf.py): per-GPU FLOPs and bytes read / written,
        # added per engine step with --enable-mfu-metrics in step mode (generation.engine.perf.mfu),
        # exported at 0 otherwise, as vLLM registers them whatever the flag
        self.perf_flops = FastCounter()
        self.perf_read = FastCounter()
        self.perf_write = FastCounter()

        # each histogram's bounds: its vLLM 0.34 bucket family's (vllm/v1/metrics/loggers.py), or
        # --custom-histogram-buckets' list for the family (fixed at start-up)
        def family(name):
            return histogram_buckets(name, config.max_model_len, getattr(config, "custom_histogram_buckets", None))

        latency = family("request_latency")
        itl = family("inter_token_latency")
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         family("time_to_first_token"))
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        latency)
        self.queue = hist("vllm:request_queue_time_seconds",
                          "Histogram of time spent in WAITING phase for request.", latency)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", latency)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", latency)
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.", latency)
        self.request_tpot = hist("vllm:request_time_per_output_token_seconds",
                                 "Histogram of time_per_output_token_seconds per request.", itl)
        b125 = family("request_tokens")
        self.prompt_hist = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", b125)
        self.gen_hist = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", b125)
        self.max_gen_hist = hist("vllm:request_max_num_generation_tokens",
                                 "Histogram of maximum number of requested generation tokens.", b125)
        self.params_max_tokens = hist("vllm:request_params_max_tokens",
                                      "Histogram of the max_tokens request parameter.", b125)
        self.params_n = hist("vllm:request_params_n", "Histogram of the n request parameter.",
                             family("request_params_n"))
        self.iteration_tokens = hist("vllm:iteration_tokens_total",
                                     "Histogram of number of tokens per engine_step.",
                                     family("iteration_tokens"))
        self.kv_computed = hist("vllm:request_prefill_kv_computed_tokens",
                                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                                b125)
        self.request_preemptions = hist("vllm:request_num_preemptions",
                                        "Histogram of the number of times a request was preempted.",
                                        family("request_num_preemptions"))
        # finished() shares a bisection between histograms of one set of bounds
        assert self.prompt_hist.bounds == self.kv_computed.bounds == self.gen_hist.bounds == \
            self.max_gen_hist.bounds == self.params_max_tokens.bounds
        assert self.queue.bounds == self.e2e.bounds == self.inference.bounds == self.prefill.bounds
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        itl)
        # the ITL's old name, in releases before vLLM 0.12 (generation.config.vllm_versions.TPOT_HIDDEN_FROM),
        # with each release's help text
        deprecated = parse_version(config.vllm_version) >= TPOT_DEPRECATED_FROM
        self.tpot = self.itl.alias("vllm:time_per_output_token_seconds", "Histogram of time per output token in "
                                   "seconds." + ("DEPRECATED: Use vllm:inter_token_latency_seconds instead."
                                                 if deprecated else ""))
        if shown["vllm:time_per_output_token_seconds"]:
            self.histograms.append(self.tpot)
        # --kv-cache-metrics: vLLM's three residency histograms (vllm#27793: every release at hand), made only
        # with the flag as vLLM makes them, observed by the collector the step engine's block pool
        # calls (generation.metrics.kv_residency; None without the flag)
        self.kv_residency = None
        if getattr(config, "kv_cache_metrics", False):
            residency = family("kv_cache_residency")
            self.kv_residency = KVResidency(config.kv_cache_metrics_sample, config.seed,
                                            *(hist(name, doc, residency) for name, doc in KV_RESIDENCY_FAMILIES))
        # vLLM's OffloadingConnector families (vllm:kv_offload_*), only with a CPU KV tier configured,
        # observed by step mode's block pool (generation.metrics.kv_offload; None without a tier)
        self.kv_offload = KVOffloadMetrics(lv, {name: exposes(config, name) for name in KV_OFFLOAD_FAMILIES}) \
            if kv_offload_configured(config) else None
        spec = getattr(config, "spec_decode", None)        # vllm:spec_decode_*, with a speculative config
        self.spec_decode = SpecDecodeMetrics(lv, spec.num_speculative_tokens) if spec is not None else None
        # VLLM_SIM_LAG_SAMPLES=FILE (benches): every emission lag also kept, and written to FILE at exit
        lag_cls = partial(SampledHistogram, os.environ["VLLM_SIM_LAG_SAMPLES"]) \
            if os.environ.get("VLLM_SIM_LAG_SAMPLES") else FastHistogram
        self.lag = lag_cls("vllm_sim:token_emission_lag_seconds",
                           "Simulator-specific: actual token emission time minus its scheduled time. "
                           "Large values mean the simulator, not the simulated model, is the "
                           "bottleneck.", LAG_BUCKETS, lv)
        self.token_lag = self.lag.observe

        self._init_frontend(config)

        self._lora_states: OrderedDict = OrderedDict()     # (running, waiting) -> unix time set
        self._lora_states[("", "")] = time.time()
        self._lora_last = ("", "")

        r = self.registry = CollectorRegistry(auto_describe=False)
        self.real_registry = r
        small = self._small_registry = CollectorRegistry(auto_describe=False)
        for c in DEFAULT_COLLECTORS:
            r.register(c)
            small.register(c)
        # --disable-log-stats: vLLM's AsyncLLM builds no StatLoggerManager (vllm/v1/engine/async_llm.py),
        # so the engine's families are never registered; the API server's own ones stay (render
        # duration, tool-parser invocations, sleep mode, http_*), and so do the simulator's
        self.log_stats = not getattr(config, "disable_log_stats", False)
        engine_fns = (self._collect_state, self._collect_config_info, self._collect_counters)
        if not self.log_stats:
            self.histograms = []
            engine_fns = (lambda: self._parser_family(self.started),)
        else:       # vLLM builds its spec-decode and KV connector families before the scheduler's
            for c in (c for c in (self.spec_decode, self.kv_offload) if c is not None):
                r.register(c)
                small.register(c)
        for fn in engine_fns:
            r.register(_Collector(fn))
            small.register(_Collector(fn))
        for h in self.histograms:
            r.register(h)
        if self.render_duration is not None:
            r.register(self.render_duration)
        r.register(_Collector(self._collect_sleep_ops))
        r.register(self.lag)
        self.websocket = websocket_metrics(config, self.started, r)     # vLLM's realtime route's
        # prometheus-fastapi-instrumentator's http_* families (vLLM registers them last, when its
        # middleware stack is built at start-up), observed by the server's WSGI layers
        self.http = HTTPMetrics()
        r.register(self.http)

    # ---- wiring ----------------------------------------------------------------------------
    def bind(self, sim) -> None:
        """Give the scrape-time collectors the simulator whose state they read."""
        self.sim = sim

    def docs(self) -> dict:
        """``{metric family name: help text}`` of the real registry (fake metrics reuse them)."""
        return {fam.name: fam.documentation for fam in self.real_registry.collect()}

    def use_fake(self, collector) -> None:
        """Export ``collector``'s chosen values (``--fake-metrics``) instead of the real ones;
        the constant cache config, the simulator's own lag histogram and the HTTP middleware's
        ``http_*`` families stay real."""
        self.fake = collector
        self.registry = CollectorRegistry(auto_describe=False)
        for c in DEFAULT_COLLECTORS:
            self.registry.register(c)
        self.registry.register(_Collector(self._collect_config_info))
        self.registry.register(collector)
        self.registry.register(self.lag)
        self.registry.register(self.websocket)
        self.registry.register(self.http)

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
        if self.sleep_ops is not None or self.weight_ops is not None:
            out.append(generate_latest(_Collector(self._collect_sleep_ops)).decode())
        for part in (self.lag, self.websocket, self.http):     # as registered
            part.render_into(out)
        return "".join(out).encode()

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
        if self.shown["vllm:estimated_flops_per_gpu"]:
            for name, what, c in (("flops", "floating point operations", self.perf_flops),
                                  ("read_bytes", "bytes read from memory", self.perf_read),
                                  ("write_bytes", "bytes written to memory", self.perf_write)):
                fam = CounterMetricFamily(f"vllm:estimated_{name}_per_gpu", f"Estimated number of {what} per GPU "
                                          "(for Model Flops Utilization calculations).", labels=list(LABELS))
                fam.add_metric(lbl, c.value, created)
                yield fam
        yield from self._parser_family(created)
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
            # vLLM's SamplingParams.max_tokens: get_max_tokens caps the request's value to the room
            # the context leaves (entrypoints/serve/utils/api_utils.py), the room when it gives none
            room = max(self.config.max_model_len - p, 0)
            max_tokens = req.max_tokens
            if max_tokens is None or max_tokens > room:
                max_tokens = room
            h = self.gen_hist
            i = bl(h.bounds, n)
            h.counts[i] += 1
            h.sum += n
            h = self.params_max_tokens
            h.counts[i if max_tokens == n else bl(h.bounds, max_tokens)] += 1
            h.sum += max_tokens
            rn = req.n
            if rn <= 1:
                h = self.max_gen_hist               # the same bounds and value
                h.counts[i] += 1
                h.sum += n
                h = self.params_n
                h.counts[bl(h.bounds, rn)] += 1
                h.sum += rn
            else:
                # vLLM's ParentRequest.observe_finished_request: one observation per prompt, when
                # its last choice finishes, of n and of the most tokens a choice generated
                left = req.__dict__.setdefault("_choices_left", {})
                k = seq.prompt_index
                todo, most = left.get(k, (rn, 0))
                todo, most = todo - 1, max(most, n)
                left[k] = (todo, most)
                if todo == 0:
                    h = self.max_gen_hist
                    h.counts[bl(h.bounds, most)] += 1
                    h.sum += most
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
        # vLLM observes the time to first token in the step that makes it (IterationStats
        # .update_from_output), whether or not the request is aborted later
        if engine_req is not None and self.steps:
            first = engine_req.first_token
        else:
            first = seq.first_token_at if produced > 0 else None
        if first:
            v = first - seq.arrival
            self.ttft.observe(0.0 if 0.0 > v else v)
        if self.steps and engine_req is not None:
            return                                  # the steps counted its tokens (engine_tokens)
        prefilled = produced > 0 or (engine_req is not None and engine_req.num_computed >= seq.prompt_len)
        self.generation_tokens.value += produced
        if not prefilled:
            return
        computed = self._count_prompt(seq)
        if produced > 0:                            # its steps, as finished() counts them without the step engine
            it = self.iteration_tokens
            if produced > 1:
                it.observe_n(1, produced - 1)
            it.observe(computed + 1)

    def observe_itl_n(self, seconds: float, n: int) -> None:
        """``n`` inter-token gaps of the same length (constant ITL, non-streaming)."""
        self.itl.observe_n(seconds, n)
