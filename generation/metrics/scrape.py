"""The recorder's scrape-time collectors (split from :mod:`generation.metrics.recorder`, whose
:class:`~generation.metrics.recorder.MetricsRecorder` mixes them in): the scheduler's state --
running, waiting (and waiting by reason), KV-cache usage, sleep state, ``vllm:lora_requests_info``
-- and ``vllm:cache_config_info``, read when ``/metrics`` is scraped; the engine pushes nothing
for them on its hot path."""
from __future__ import annotations

import time

from prometheus_client.core import GaugeMetricFamily

LABELS = ("model_name", "engine")


class ScrapeCollectors:
    """Collectors of :class:`~generation.metrics.recorder.MetricsRecorder` (its ``sim``,
    ``config``, ``model_name``, ``engine``, ``shown``, ``lora_enabled`` and LoRA state)."""

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
        kv = 0.0 if sim is None else kv_cache_usage(sim)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
        yield from self._collect_sleep_and_lora(sim, lbl)

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
        # vLLM 0.34 sets this gauge only in record_sleep_state (AsyncLLM.sleep, wake_up when fully
        # awake, release_kv_cache_memory): a /resume or a checkpoint leaves it as it was
        sleep, level = getattr(sim, "recorded_sleep", (0, 0)) if sim is not None else (0, 0)
        sleeping = sleep == 1
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


class _Collector:
    """Adapts a generator function to prometheus_client's collector protocol."""

    def __init__(self, fn):
        self.collect = fn


def kv_cache_usage(sim) -> float:
    """``vllm:kv_cache_usage_perc`` of one simulator's engine now (0..1), as ``/metrics``, the ORCA
    load header, gRPC's ``GetLoads`` and the data-parallel balancer all read it: the step
    engine's blocks held, else the KV cache's (``--enable-kvcache``), else the blocks the
    running sequences' tokens fill (prompt plus the tokens emitted so far, estimated from the
    inter-token latency) over ``--kv-cache-size`` blocks, as vLLM reports blocks held by running
    requests."""
    engine = getattr(sim, "engine", None)
    if engine is not None:
        return float(engine.scheduler.usage())
    cfg = sim.config
    kv = sim.kv_cache
    if kv is not None:
        # the prefix cache's shared full prompt blocks (each held once), plus every running
        # sequence's own blocks past them: its partial last prompt block and the blocks of the
        # tokens emitted so far, as vLLM's pool holds them (kv.usage() alone left those out)
        held_blocks = len(kv.used)
        capacity = kv.capacity
    else:
        held_blocks = 0
        capacity = cfg.kv_cache_size
    if capacity <= 0 or (not sim.running_seqs and not held_blocks):
        return 0.0
    now = time.monotonic()
    bs = kv.block_size if kv is not None else cfg.block_size
    itl = cfg.inter_token_latency
    blocks = held_blocks
    for seq in sim.running_seqs:
        n = len(seq.pieces)
        first = seq.first_token_at
        if not first:
            out = 0
        elif itl > 0:
            out = min(n, 1 + int((now - first) / itl))
        else:
            out = n
        need = -(-(seq.prompt_len + out) // bs)
        if kv is not None:
            ref = getattr(seq, "kv_blocks", None)
            need -= len(ref[1]) if ref and ref[0] == kv.epoch else 0
        blocks += max(need, 0)
    return min(blocks / capacity, 1.0)
