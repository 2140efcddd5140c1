"""vLLM's KV-offload metrics (``vllm:kv_offload_*``) for step mode's CPU KV tier, as vLLM's
``OffloadingConnector`` exports them with a CPU offload configured (vLLM 0.34:
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py``, ``OffloadPromMetrics``;
the worker's reports in ``offloading/worker.py`` and ``offloading/common.py``; the config-info
labels in ``vllm/v1/kv_offload/base.py`` and ``cpu/common.py``, ``CPUOffloadingInfo``).

**When.**  vLLM builds these families only with an offloading connector (``--kv-offloading-size``);
here also with ``--cpu-offload-gb`` in step mode, which the simulator takes as its CPU KV tier
(:func:`configured`).  Without either, no family and no cost: the block pool calls this object
only from its CPU-tier paths.  Without step mode the families exist and stay empty (no steps, no
transfers).

**What is observed** (one *job* = one request's transfer in one direction, vLLM's transfer job):

- a **store** (GPU -> CPU) is one request's new blocks accepted by the tier in one step
  (``prepare_store``'s ``keys_to_store``); it is counted when its write completes, at the end of
  the step after it (``BlockPool.end_cpu_step``, vLLM's worker report at ``get_finished``).  vLLM
  0.15-0.20's tier (:mod:`generation.engine.cpu_tier_v015`) counts it when it is accepted, a
  step early (its writes complete only with the request);
- a **load** (CPU -> GPU) is the run of blocks one request reloads when it is admitted (the
  scheduler's ``kv_reload_tokens``), counted then;
- an **allocation failure** is a store the tier refused (too few evictable blocks: vLLM's
  ``prepare_store`` returning None), counted each time it is offered and refused.

Each of the ``tp`` workers transfers its own share of a block, ``block_bytes`` (block size x
one GPU's KV bytes per token), and reports it; vLLM sums the workers' reports
(``DirectionalTransferStats.aggregate``), so a job of ``n`` blocks adds ``tp x n x block_bytes``
bytes to ``vllm:kv_offload_{load,store}_bytes``, ``tp`` observations of ``n x block_bytes`` to
``..._size`` (bytes), and ``tp x`` one worker's time to ``..._time`` (seconds).  A worker's time
is its bytes over the PCIe bandwidth the step model reloads at
(:data:`generation.engine.perf.step_model.PCIE_BANDWIDTH`, 25 GB/s): the reload is timed so in
the step; a store, which the step model does not time (it overlaps the next step), is given the
same bandwidth.  vLLM measures both with CUDA events.

**Families**, in vLLM 0.34's order, each with ``model_name`` and ``engine``:
``vllm:kv_offload_total_bytes`` / ``_total_time`` / ``_size`` (deprecated, ``transfer_type``
``CPU_to_GPU`` or ``GPU_to_CPU``; exported by default, no ``--show-hidden-metrics-for-version``
needed; from 0.24 both directions' series exist from start-up at 0, before that each appears with
its first transfer); ``vllm:kv_offload_load_bytes``, ``_load_time``, ``_load_size``,
``_store_bytes``, ``_store_time``, ``_store_size`` (0.24 on; a series appears with its first
transfer, as vLLM binds its labels then); ``vllm:kv_offload_lookup_sync_delay_seconds`` and
``_lookup_async_delay_seconds`` (0.26 on): **exported empty**: vLLM times each lookup call with
``time.monotonic``, and the simulator's lookups take no modelled time, so there is nothing honest
to observe; ``vllm:kv_offload_allocation_failure`` (0.26 on); ``vllm:kv_offload_config_info``
(0.34 on), one series from the engine's first step: ``cpu_num_chunks`` (the tier's blocks: one
block per chunk, vLLM's default), ``cpu_blocks_per_chunk`` 1, ``cpu_kv_cache_size_bytes``
(blocks x the bytes of a block on all ranks; vLLM pads each chunk to the page size, which the
simulator's tier sizing does not), ``cpu_kv_cache_size_tokens`` (blocks x max_model_len //
blocks per max_model_len request).  Left out: the CPU spec's own families
(``vllm:kv_offload_cpu_cache_usage_perc``, ``_cpu_cache_{read,write}_usage_perc``,
``_cpu_allocation_size``, ``_stores_skipped``), which the simulator does not model.

Times are computed from bytes, never read from a clock; ``_created`` samples are the unix time a
series was made (start-up, or its first observation), as prometheus_client stamps them.
A leaf module but for prometheus_client: the recorder (:mod:`generation.metrics.recorder`)
builds and registers it, the app attaches it to the pool (:meth:`KVOffloadMetrics.attach`).
"""
from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from .series import FastHistogram

LOAD, STORE = "CPU_to_GPU", "GPU_to_CPU"        # vLLM's deprecated transfer_type values
TRANSFER_SIZE_BUCKETS = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)     # bytes
LOOKUP_SYNC_BUCKETS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1)   # seconds
LOOKUP_ASYNC_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10)          # seconds

# the first family of each release group, as generation.config.vllm_versions.METRICS_SINCE gates it
DEPRECATED = "vllm:kv_offload_total_bytes"      # with _total_time and _size
FLAT = "vllm:kv_offload_load_bytes"             # the six load / store families
CONNECTOR = "vllm:kv_offload_allocation_failure"    # with the two lookup-delay families
CONFIG_INFO = "vllm:kv_offload_config_info"
GATED = (DEPRECATED, FLAT, CONNECTOR, CONFIG_INFO)

_DOCS = {
    "load_bytes": "Total bytes loaded from offload storage to GPU.",
    "load_time": "Total load time from offload storage to GPU, in seconds.",
    "load_size": "Histogram of KV offload load operation size, in bytes.",
    "store_bytes": "Total bytes stored from GPU to offload storage.",
    "store_time": "Total store time from GPU to offload storage, in seconds.",
    "store_size": "Histogram of KV offload store operation size, in bytes.",
}
_INFO_DOC = ("Static configuration of the KV offload managers of this engine instance. The configured offloading "
             "spec declares the label names, and each manager fills the values, so a series appears from the "
             "first scheduler step of its engine. A manager reports one series for each configuration it holds, "
             "and a label of its own tells the series apart. Each engine reports its own configuration, not the "
             "instance total.")
INFO_LABELS = ("cpu_num_chunks", "cpu_blocks_per_chunk", "cpu_kv_cache_size_bytes", "cpu_kv_cache_size_tokens")


def configured(config) -> bool:
    """Whether ``config`` (a SimConfig) has a CPU KV tier, so that vLLM would build these
    families: ``--kv-offloading-size``, or ``--cpu-offload-gb`` in step mode (module docstring)."""
    if getattr(config, "kv_offloading_size", None) is not None:
        return True
    return getattr(config, "latency_calculator", None) == "step" and (getattr(config, "cpu_offload_gb", 0) or 0) > 0


def transfer(blocks: int, block_bytes: int, tp: int, bandwidth: float):
    """One job of ``blocks`` blocks over ``tp`` workers: ``(bytes, seconds, size)``, the bytes and
    seconds every worker's report adds up to, and one worker's size observation in bytes
    (observed ``tp`` times).  ``block_bytes``: one worker's bytes per block; ``bandwidth``: one
    worker's, in bytes/s."""
    size = blocks * block_bytes
    return tp * size, tp * (size / bandwidth), size


def config_info(num_blocks: int, block_size: int, block_bytes: int, tp: int, max_model_len: int) -> dict:
    """``vllm:kv_offload_config_info``'s label values (``CPUOffloadingInfo``) for a tier of
    ``num_blocks`` blocks of ``block_size`` tokens, ``block_bytes`` per worker over ``tp`` workers,
    one chunk per block.  ``cpu_kv_cache_size_tokens`` is "None" without a ``max_model_len``."""
    per_request = -(-max_model_len // block_size) if max_model_len > 0 else 0
    return {"cpu_num_chunks": str(num_blocks), "cpu_blocks_per_chunk": "1",
            "cpu_kv_cache_size_bytes": str(num_blocks * block_bytes * tp),
            "cpu_kv_cache_size_tokens": str(num_blocks * max_model_len // per_request) if per_request else "None"}


class _Direction:
    """One direction's totals: ``bytes`` (int), ``seconds``; ``size``, the flat histogram of
    ``name`` (None until the first job) and ``created``, its series' stamp; ``old_size`` and
    ``old_created``, the deprecated family's series of transfer_type ``transfer_type``."""
    __slots__ = ("name", "transfer_type", "bytes", "seconds", "size", "created", "old_size", "old_created")

    def __init__(self, name: str, transfer_type: str):
        self.name, self.transfer_type = name, transfer_type
        self.bytes, self.seconds = 0, 0.0
        self.size = self.old_size = None
        self.created = self.old_created = None


class KVOffloadMetrics:
    """The ``vllm:kv_offload_*`` families of one engine (module docstring).  ``labels``:
    ``{"model_name": ..., "engine": ...}``; ``shown``: the families of :data:`GATED` the release
    exports (``{name: bool}``).  Observed through :meth:`stored`, :meth:`loaded`,
    :meth:`refused` once :meth:`attach` gave it a tier; exported by :meth:`collect`."""

    def __init__(self, labels: dict, shown: dict):
        self.labels = dict(labels)
        self.shown = shown
        self.block_bytes = 0            # one worker's bytes per block (attach)
        self.tp = 1
        self.info = None                # config_info's label values (attach)
        self.engine = None              # the step engine: config_info shows from its first step
        self.failures = 0
        self.failures_created = None
        self.bandwidth = 1.0            # one worker's bytes/s (attach)
        self.dirs = {LOAD: _Direction("load", LOAD), STORE: _Direction("store", STORE)}
        if shown.get(FLAT, True):       # 0.24 on: the deprecated series are made at start-up
            for d in self.dirs.values():
                self._old_series(d)

    def attach(self, pool, engine, block_size: int, block_bytes: int, tp: int, max_model_len: int,
               bandwidth: float) -> None:
        """Observe ``pool``'s CPU tier (its ``kv_offload``), blocks of ``block_size`` tokens and
        ``block_bytes`` per worker over ``tp`` workers moved at ``bandwidth`` bytes/s each;
        ``engine`` (with ``steps``) tells when the config-info series appears."""
        self.block_bytes, self.tp, self.engine = block_bytes, max(int(tp), 1), engine
        self.bandwidth = bandwidth
        self.info = config_info(pool.num_cpu_blocks, block_size, block_bytes, self.tp, max_model_len)
        pool.kv_offload = self

    # ---- observations (the block pool's CPU-tier paths) ---------------------------------------
    def stored(self, blocks: int) -> None:
        """A store job of ``blocks`` blocks (GPU -> CPU) completed."""
        self._job(self.dirs[STORE], blocks)

    def loaded(self, blocks: int) -> None:
        """A load job of ``blocks`` blocks (CPU -> GPU) completed."""
        self._job(self.dirs[LOAD], blocks)

    def refused(self) -> None:
        """The tier refused a store (vLLM's ``prepare_store`` returned None)."""
        if self.failures_created is None:
            self.failures_created = time.time()
        self.failures += 1

    def _job(self, d: _Direction, blocks: int) -> None:
        if blocks <= 0:
            return
        nbytes, seconds, size = transfer(blocks, self.block_bytes, self.tp, self.bandwidth)
        if d.size is None:
            d.created = time.time()
            key = f"{d.name}_size"
            d.size = FastHistogram(f"vllm:kv_offload_{key}", _DOCS[key], TRANSFER_SIZE_BUCKETS, self.labels,
                                   created=d.created)
        if d.old_size is None:
            self._old_series(d)
        d.bytes += nbytes
        d.seconds += seconds
        d.size.observe_n(size, self.tp)
        d.old_size.observe_n(size, self.tp)

    def _old_series(self, d: _Direction) -> None:
        d.old_created = time.time()
        d.old_size = FastHistogram("vllm:kv_offload_size", "", TRANSFER_SIZE_BUCKETS,
                                   {**self.labels, "transfer_type": d.transfer_type}, created=d.old_created)

    # ---- export ----------------------------------------------------------------------------------
    def collect(self):
        """The families, in vLLM 0.34's registration order, as prometheus_client collects them."""
        names, values = list(self.labels), list(self.labels.values())
        shown = self.shown.get
        if shown(DEPRECATED, True):
            old = [(t, d) for t, d in self.dirs.items() if d.old_size is not None]
            for name, doc, value in (
                    ("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector", "bytes"),
                    ("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations",
                     "seconds")):
                fam = CounterMetricFamily(name, doc, labels=names + ["transfer_type"])
                for t, d in old:
                    fam.add_metric(values + [t], getattr(d, value), d.old_created)
                yield fam
            fam = HistogramMetricFamily("vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes.",
                                        labels=names + ["transfer_type"])
            for t, d in old:
                d.old_size.add_to(fam)
            yield fam
        if shown(FLAT, True):
            for d in self.dirs.values():
                for suffix, value in (("bytes", d.bytes), ("time", d.seconds)):
                    key = f"{d.name}_{suffix}"
                    fam = CounterMetricFamily(f"vllm:kv_offload_{key}", _DOCS[key], labels=names)
                    if d.size is not None:
                        fam.add_metric(values, value, d.created)
                    yield fam
                key = f"{d.name}_size"
                fam = HistogramMetricFamily(f"vllm:kv_offload_{key}", _DOCS[key], labels=names)
                if d.size is not None:
                    d.size.add_to(fam)
                yield fam
        if shown(CONNECTOR, True):
            yield HistogramMetricFamily("vllm:kv_offload_lookup_sync_delay_seconds",
                                        "Histogram of the time spent in a single offload lookup call, in seconds.",
                                        labels=names)
            yield HistogramMetricFamily("vllm:kv_offload_lookup_async_delay_seconds",
                                        "Histogram of time between a request's offload lookup first deferring and "
                                        "the following lookup resolving, or request finish, in seconds.",
                                        labels=names)
            fam = CounterMetricFamily(CONNECTOR, "Number of KV offload store allocation attempts that failed.",
                                      labels=names)
            if self.failures_created is not None:
                fam.add_metric(values, self.failures, self.failures_created)
            yield fam
        if shown(CONFIG_INFO, True):
            fam = GaugeMetricFamily(CONFIG_INFO, _INFO_DOC, labels=names + list(INFO_LABELS))
            if self.info is not None and self.engine is not None and self.engine.steps:
                fam.add_metric(values + [self.info[k] for k in INFO_LABELS], 1.0)
            yield fam

