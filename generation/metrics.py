"""vLLM's Prometheus metrics, recorded from measured times (engine.md section 5, vLLM v1 names).

With ``--fake-metrics`` the exported registry holds chosen values instead
(:mod:`generation.fake_metrics`); the measured ones are still recorded, unexported.

Every series carries ``model_name`` = the first served model name.  Request-level values are
observed when a sequence finishes successfully; aborted and rejected requests record nothing.
Histograms are hot (per token for inter-token latency and the simulator's own emission lag, a
dozen per request otherwise): they use :class:`FastHistogram`, a ``prometheus_client`` custom
collector whose ``observe`` is one ``bisect`` and two additions, instead of the locked
``Histogram`` child whose observe scans every bucket.
"""
from __future__ import annotations

import bisect
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
disable_created_metrics()   # vLLM exports no *_created series

LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
               0.1, 0.25, 0.5, 1.0)


def buckets_1_2_5(max_value: int) -> list[float]:
    """vLLM's 1-2-5 buckets up to ``max_value``: 1, 2, 5, 10, 20, 50, ..."""
    out, e = [], 1
    while True:
        for m in (1, 2, 5):
            v = m * e
            if v > max_value:
                return out
            out.append(float(v))
        e *= 10


class FastHistogram:
    """A single-series histogram for hot paths, exported through prometheus_client's
    custom-collector API.  Not thread-safe by design: the simulator is one gevent thread."""

    def __init__(self, name: str, documentation: str, buckets, labels: dict):
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.labels = labels

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_n(self, value: float, n: int) -> None:
        """``n`` observations of the same value."""
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def alias(self, name: str, documentation: str) -> "FastHistogram":
        """The same observations exported under a second name (vLLM's deprecated aliases)."""
        other = FastHistogram(name, documentation, (), self.labels)
        other.source = self
        return other

    source = None

    def collect(self):
        if self.source is not None:
            self.bounds, self.counts, self.sum = self.source.bounds, self.source.counts, self.source.sum
        fam = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        cum, acc = [], 0
        for b, c in zip(self.bounds + [float("inf")], self.counts):
            acc += c
            cum.append((_le(b), acc))
        fam.add_metric(list(self.labels.values()), cum, self.sum)
        yield fam


def _le(b: float) -> str:
    return floatToGoString(b)


class MetricsRecorder:
    """Owns the Prometheus registry of one simulator and the hooks the engine calls."""

    def __init__(self, config):
        self.config = config
        self.model_name = config.display_model_name
        r = self.registry = CollectorRegistry(auto_describe=True)
        lbl = ["model_name"]
        m = self.model_name

        def hist(name, doc, buckets):
            h = FastHistogram(name, doc, buckets, {"model_name": m})
            r.register(h)
            return h

        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             lbl, registry=r).labels(m)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             lbl, registry=r).labels(m)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                              lbl, registry=r).labels(m)
        self.lora_info = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                               ["max_lora", "running_lora_adapters", "waiting_lora_adapters"], registry=r)
        self._lora_state = None
        self.lora_info.labels(str(config.max_loras), "", "").set(time.time())
        cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                           ["block_size", "num_gpu_blocks"], registry=r)
        cache_info.labels(str(config.block_size), str(config.kv_cache_size)).set(1)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of "
                                      "number of queried tokens.", lbl, registry=r).labels(m)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                                   "cached tokens.", lbl, registry=r).labels(m)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     lbl, registry=r).labels(m)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         lbl, registry=r).labels(m)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               ["model_name", "finished_reason"], registry=r)
        self._success = {}
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
        labels = {"model_name": m}
        self.itl = FastHistogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency "
                                 "in seconds.", TPOT_BUCKETS, labels)
        self.tpot = self.itl.alias("vllm:time_per_output_token_seconds", "Histogram of time per output "
                                   "token in seconds (deprecated alias of inter_token_latency).")
        self.lag = FastHistogram("vllm_sim:token_emission_lag_seconds",
                                 "Simulator-specific: actual token emission time minus its scheduled time. "
                                 "Large values mean the simulator, not the simulated model, is the "
                                 "bottleneck.", LAG_BUCKETS, labels)
        for h in (self.itl, self.tpot, self.lag):
            r.register(h)
        self.token_lag = self.lag.observe
        self.fake = None
        if getattr(config, "fake_metrics", None) is not None:
            # Fake metrics (engine.md 5.4): real recording goes on unexported; /metrics exports
            # the fake values, the constant cache config and the simulator's own lag histogram.
            from .fake_metrics import FakeMetricsCollector   # lazy: it imports this module
            docs = {fam.name: fam.documentation for fam in r.collect()}
            self.real_registry = r
            self.fake = FakeMetricsCollector(config, docs)
            self.registry = CollectorRegistry(auto_describe=True)
            for c in (cache_info, self.fake, self.lag):
                self.registry.register(c)

    # ---- engine hooks ----------------------------------------------------------------------
    def running_changed(self, sim) -> None:
        self.running.set(sim.running)
        if sim.loras.paths:
            self._update_lora_info(sim)

    def waiting_changed(self, sim) -> None:
        self.waiting.set(len(sim.waiting))
        if sim.loras.paths:
            self._update_lora_info(sim)

    def _update_lora_info(self, sim) -> None:
        running = sorted({n for n, c in sim.loras.loaded.items() if c > 0})
        waiting = sorted({s.lora for s in sim.waiting if s.lora})
        state = (",".join(running), ",".join(waiting))
        if state != self._lora_state:
            self._lora_state = state
            self.lora_info.labels(str(self.config.max_loras), *state).set(time.time())

    def finished(self, sim, seq) -> None:
        """A sequence completed successfully: observe its measured timings and token counts."""
        reason = seq.finish_reason
        c = self._success.get(reason)
        if c is None:
            c = self._success[reason] = self.success.labels(self.model_name, reason)
        c.inc()
        p = seq.prompt_len
        n = seq.completion_tokens
        self.prompt_tokens.inc(p)
        self.generation_tokens.inc(n)
        self.prompt_hist.observe(p)
        self.gen_hist.observe(n)
        self.max_gen_hist.observe(n)
        if seq.request.max_tokens is not None:
            self.params_max_tokens.observe(seq.request.max_tokens)
        if reason == "cache_threshold":
            return
        start = seq.started_at or seq.arrival
        first = seq.first_token_at or seq.finished_at
        end = seq.finished_at
        self.queue.observe(max(start - seq.arrival, 0.0))
        self.ttft.observe(first - seq.arrival)
        self.e2e.observe(end - seq.arrival)
        self.inference.observe(end - start)
        self.prefill.observe(first - start)
        decode = end - first
        self.decode.observe(decode)
        tokens = len(seq.pieces)
        if tokens > 1:
            self.request_tpot.observe(decode / (tokens - 1))

    def observe_itl_n(self, seconds: float, n: int) -> None:
        """``n`` inter-token gaps of the same length (constant ITL, non-streaming)."""
        self.itl.observe_n(seconds, n)
