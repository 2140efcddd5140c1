"""Fake metrics: ``/metrics`` reports chosen values instead of measured ones (reference
engine.md section 5.4, api.md 5.13).

Users point dashboards and autoscalers at the simulator and configure, with
``--fake-metrics '<JSON object>'`` (or the ``fake-metrics`` YAML object), what vLLM's metrics
say, without generating load:

* ``running-requests``, ``waiting-requests``, ``kv-cache-usage``: a number, or a generator
  ``"<fn>:<start>:<end>:<period>"`` with ``fn`` in oscillate | ramp | rampreset | squarewave,
  evaluated from the time since it was set (see :class:`Generator`);
* ``loras``: ``vllm:lora_requests_info`` series, ``{"running": "a,b", "waiting": "c",
  "timestamp": <unix s>}`` each (JSON strings in YAML, as the reference);
* ``*-buckets-values`` and ``request-*-tokens``: per-bucket counts (not cumulative) of a
  histogram; ``total-prompt-tokens`` / ``total-generation-tokens`` override the token counters
  otherwise derived from the token histograms;
* ``request-success-total`` (finish reason -> count), ``prefix-cache-hits`` +
  ``prefix-cache-queries``.

Choices where the reference is silent or quirky (documented in the README):

* Generators are evaluated lazily at scrape time, ``f(now - set_time)``, with the time quantised
  to ``--fake-metrics-refresh-interval`` (the reference re-evaluates on a ticker of that
  interval); a generator set by an update starts again at t = 0.
* With fake metrics on, ``/metrics`` reports ONLY fake values for every ``vllm:*`` series,
  including the token histograms/counters and ``request_success_total`` (the reference still
  adds real requests to those: a quirk).  Unset histograms/counters have no series; unset
  gauges are 0.  The simulator's own ``vllm_sim:token_emission_lag_seconds`` stays real.
* Fake running-requests do not feed the latency load factor.
* Unknown keys and too-long bucket arrays are errors (the reference ignores unknown keys and
  folds extra counts into ``+Inf`` except for TTFT / TPOT).
"""
from __future__ import annotations

import math
import time
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# Parsing and validation live in fake_metrics_spec (the configuration imports it, not this module);
# the names are re-exported here for existing callers.
from .fake_metrics_spec import GAUGES, HISTOGRAMS, TOKEN_TOTALS, _PREFIX_COUNTERS, Generator, histogram_bounds, merge_fake_metrics, parse_fake_metrics, parse_generator

__all__ = ["FakeMetricsCollector", "Generator", "materialise", "merge_fake_metrics", "parse_fake_metrics",
           "parse_generator"]


def materialise(counts: list, bounds) -> tuple[list, float, int]:
    """Per-bucket ``counts`` over ``bounds`` (upper bounds without +Inf) as the reference
    observes them: ``counts[i]`` samples of value ``bounds[i]`` (``bounds[-1] + 1`` for the
    +Inf bucket).  Returns ``(cumulative [(le, count)] including +Inf, sum, total)``, total =
    sum of the observed values truncated to integers (the reference's derived token total).
    Example: [10, 20, 30] on 1, 2, 5, ... -> cumulative 10, 30, 60, ...; sum 200; total 200."""
    padded = list(counts) + [0] * (len(bounds) + 1 - len(counts))
    cum, acc, total_sum, total = [], 0, 0.0, 0
    for i, (le, c) in enumerate(zip(list(bounds) + [math.inf], padded)):
        v = bounds[i] if i < len(bounds) else bounds[-1] + 1
        acc += c
        total_sum += c * v
        total += c * int(v)
        cum.append((floatToGoString(le), acc))
    return cum, total_sum, total


# ---------------------------------------------------------------------------------------------
class FakeMetricsCollector:
    """A ``prometheus_client`` custom collector exporting the fake values of every ``vllm:*``
    series except ``vllm:cache_config_info`` (which stays real and constant).

    Every series carries ``model_name`` and ``engine`` (the data-parallel rank), as the real
    ones do.  Gauges are evaluated at scrape time; histograms, counters and LoRA series are rebuilt from
    the stored configuration.  ``update(spec)`` applies a parsed partial update (engine.md 5.4
    runtime-update rules).  ``clock`` returns monotonic nanoseconds (tests may inject one)."""

    def __init__(self, config, docs: dict, clock: Callable[[], int] = time.monotonic_ns):
        self.config = config
        self.model = config.display_model_name
        self.engine = str(max(getattr(config, "data_parallel_rank", 0) or 0, 0)      # config.values.global_dp_rank
                          + (getattr(config, "data_parallel_start_rank", None) or 0))
        self.docs = docs
        self.clock = clock
        self.gauges: dict[str, tuple[float | Generator, int]] = {k: (0.0, clock()) for k in GAUGES}
        self.histograms: dict[str, list] = {}
        self.totals: dict[str, int] = {}          # counter name -> value
        self.prefix: dict[str, int] = {}
        self.success: dict[str, int] = {}
        self.loras: list = []
        spec = parse_fake_metrics(config.fake_metrics or {}, config.max_model_len,
                                  overrides=config.custom_histogram_buckets)
        spec.setdefault("loras", [])              # the default empty-adapters series
        self.update(spec)

    def update(self, spec: dict) -> None:
        """Apply a parsed (validated) partial update: present gauges replace values or
        generators (a generator restarts at t = 0), present arrays / maps / lists replace the
        old series (empty clears them).  A token counter is reset to the explicit total when
        one is given, else to the total derived from a newly given histogram."""
        now = self.clock()
        for key in GAUGES:
            if key in spec:
                self.gauges[key] = (spec[key], now)
        for key in HISTOGRAMS:
            if key in spec:
                self.histograms[key] = spec[key]
        for total_key, (hist_key, counter) in TOKEN_TOTALS.items():
            if total_key in spec:
                self.totals[counter] = spec[total_key]
            elif hist_key in spec:
                if spec[hist_key]:
                    bounds = histogram_bounds(hist_key, self.config.max_model_len,
                                              self.config.custom_histogram_buckets)
                    self.totals[counter] = materialise(spec[hist_key], bounds)[2]
                else:
                    self.totals.pop(counter, None)
        for key in ("prefix-cache-hits", "prefix-cache-queries"):
            if key in spec:
                self.prefix[key] = spec[key]
        if "request-success-total" in spec:
            self.success = dict(spec["request-success-total"])
        if "loras" in spec:
            self.loras = spec["loras"] or [("", "", time.time())]

    def gauge_value(self, key: str) -> float:
        """Current value of a gauge: the fixed number, or its generator at the time since it was
        set, quantised to ``--fake-metrics-refresh-interval``; request counts are truncated."""
        value, since = self.gauges[key]
        if not isinstance(value, Generator):
            return value
        t = self.clock() - since
        step = int(self.config.fake_metrics_refresh_interval * 1e9)
        if step > 0:
            t -= t % step
        v = value.value(t)
        return float(int(v)) if key != "kv-cache-usage" else v

    def describe(self):
        return []        # families vary with updates: describe nothing, collect decides

    def collect(self):
        m = self.model
        e = self.engine
        for key, name in GAUGES.items():
            fam = GaugeMetricFamily(name, self.docs.get(name, name), labels=["model_name", "engine"])
            fam.add_metric([m, e], self.gauge_value(key))
            yield fam
        fam = GaugeMetricFamily("vllm:lora_requests_info",
                                self.docs.get("vllm:lora_requests_info", "Running stats on lora requests."),
                                labels=["max_lora", "running_lora_adapters", "waiting_lora_adapters"])
        for running, waiting, ts in self.loras:        # vLLM's three labels (recorder.py)
            fam.add_metric([str(self.config.max_loras), running, waiting], ts)
        yield fam
        counters = [(_PREFIX_COUNTERS[k], v) for k, v in self.prefix.items()] + list(self.totals.items())
        for name, v in counters:
            fam = CounterMetricFamily(name, self.docs.get(name, name), labels=["model_name", "engine"])
            fam.add_metric([m, e], v)
            yield fam
        if self.success:
            fam = CounterMetricFamily("vllm:request_success", self.docs.get("vllm:request_success", ""),
                                      labels=["model_name", "engine", "finished_reason"])
            for reason, v in self.success.items():
                fam.add_metric([m, e, reason], v)
            yield fam
        for key, counts in self.histograms.items():
            if not counts:
                continue
            bounds = histogram_bounds(key, self.config.max_model_len, self.config.custom_histogram_buckets)
            cum, total_sum, _ = materialise(counts, bounds)
            for name in HISTOGRAMS[key][0]:
                if name not in self.docs:       # a family --vllm-version's release does not export
                    continue
                fam = HistogramMetricFamily(name, self.docs.get(name, name), labels=["model_name", "engine"])
                fam.add_metric([m, e], cum, total_sum)
                yield fam
