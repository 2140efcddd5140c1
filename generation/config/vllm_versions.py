"""The vLLM releases whose defaults the simulator knows (``--vllm-version``), and what each
release gives a setting the user did not set.

Sources (vLLM's own history; docs/engine-model.md section 7):

- KV block size: ``CacheConfig.DEFAULT_BLOCK_SIZE`` is 16 up to 0.33 and 64 from 0.34.0 (unless the
  attention backend asks for another size).
- ``gpu_memory_utilization``: 0.9 for most of vLLM's history (0.15.1, the sim-to-real runs'
  release, included); 0.92 from 0.21.0, when CUDA-graph memory profiling became the default
  (vllm-project/vllm#38284, "correspondingly increases the default --gpu-memory-utilization to
  0.92"; the start-up log reads "CUDA graph memory profiling is enabled (default since v0.21.0)");
  1.0 from 0.34.0 with the extensible KV cache, on by default on CUDA and ROCm (the KV cache is
  sized from the memory actually free after CUDA-graph capture).

- ``scheduler_reserve_full_isl`` (the scheduler admits a waiting request only when its whole
  sequence's KV blocks are free, not just its first chunk's): vllm-project/vllm#37307 (March
  2026) added it, ``SchedulerConfig``'s default ``True``; the simulator has it on from 0.19.0, the
  first release with it (the 0.17.0 and 0.18.0 sdists' ``vllm/config/scheduler.py`` lack the
  field, 0.19.0's has it, default ``True``) (:func:`reserve_full_isl`), and off for 0.15.1's runs.
- The CPU KV tier's store semantics (``--kv-offloading-size``: the ``OffloadingConnector``), read
  from the sdists of each release: up to 0.20.x a request's stores complete (its blocks become
  loadable, announced and evictable) only when it finishes or is preempted, and every full block
  it computes is offered, its generated ones too (0.15.1's
  ``distributed/kv_transfer/kv_connector/v1/offloading_connector.py``: ``complete_store`` on
  ``finished_sending`` and in ``build_connector_meta`` for the preempted; 0.20.2's
  ``offloading/scheduler.py`` still so); 0.21.0 completes each store job on the worker's report
  (``update_connector_output``: ``completed_jobs``) (:data:`OFFLOAD_STORES_PER_JOB_FROM`); 0.23.0
  offers only prompt blocks (``offload_prompt_only``, default ``True``: vllm-project/vllm#43797).
  Within the older semantics, 0.18.0 stopped evicting a block that the store itself offers
  (``prepare_store``'s ``protected``; 0.17.0's ``lru_manager.py`` has none)
  (:data:`OFFLOAD_PROTECTS_OFFERED_FROM`), and 0.20.0 announces a store with ``block_size`` 0
  (0.19.0: the offloaded block size) (:data:`OFFLOAD_EVENT_BLOCK_SIZE_0_FROM`).  The simulator
  models the older semantics below 0.21.0 (:mod:`generation.engine.cpu_tier_v015`) and 0.34's
  from 0.21.0 on (0.21 and 0.22 offered generated blocks too: not modelled).

- Flags newer than a release (:data:`FLAGS_FROM`, :func:`newer_flags`): an older vLLM's
  parser does not know them, so ``vllm serve`` stops with argparse's ``unrecognized arguments``.
  ``--sse-keep-alive-interval`` (vllm-project/vllm#51034): absent from the 0.27.0 sdist's
  ``vllm/entrypoints/openai/cli_args.py``, present in 0.34.0's ``entrypoints/common/cli_args.py``;
  the releases between are not at hand.  0.29.0 is its first release by the public record: a
  backport of #51034 onto 0.28.0 was still needed for the flag to exist (syv-ai/qwen38-27b-rtx3090
  #85, #115), and a release digest of 0.29.0 lists it among that release's new arguments (vllm-cli
  v0.5.0.0's notes: "new in v0.29.0 against v0.28").
  ``--custom-histogram-buckets``: absent from the 0.27.0 sdist's ``vllm/engine/arg_utils.py``,
  present in 0.34.0's (with ``vllm/v1/metrics/buckets.py``); the releases between are not at hand,
  so 0.34.0 is its first release here.

Which mode takes them (:func:`apply_version_defaults`): step mode always (it imitates vLLM's
engine, so ``--vllm-version``'s default, 0.34.0, gives 64-token blocks); the reference's default
mode only when ``--vllm-version`` is given, since the reference's users (its KV events, its
``cache_config_info``, its test cases) expect its 16-token blocks when nothing is said.

A leaf module: the configuration (loading) and step mode (:mod:`generation.engine.step_config`)
read it; the performance model may read :func:`parse_version` of ``cfg.vllm_version`` to pick its
own version-dependent constants.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .values import ConfigError

from generation import VLLM_VERSION as NEWEST      # the --vllm-version default (0.34.0)

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[0-9A-Za-z][0-9A-Za-z.+-]*)?")


@dataclass(frozen=True)
class VersionDefaults:
    """What a release gives a setting the user left out: ``block_size`` (tokens per KV block)
    and ``gpu_memory_utilization`` (the share of the GPU's memory vLLM sizes its KV cache from)."""
    block_size: int
    gpu_memory_utilization: float


# (first release, defaults from it on), oldest first
_CHANGES = (
    ((0, 0, 0), VersionDefaults(16, 0.9)),
    ((0, 21, 0), VersionDefaults(16, 0.92)),
    ((0, 34, 0), VersionDefaults(64, 1.0)),
)


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.15.1"`` -> ``(0, 15, 1)``; a missing patch is 0 (``"0.33"``), a leading ``v`` and a
    pre-release or local suffix (``0.34.0rc1``, ``0.15.1+cu128``) are accepted and dropped.
    Raises ConfigError (``param`` ``vllm-version``) for anything else, or for a release newer than
    :data:`NEWEST`, whose defaults the simulator cannot know."""
    version = _parse(text)
    if version is None:
        raise ConfigError(f"invalid vllm-version '{text}': expected a release such as 0.15.1 or {NEWEST}",
                          "vllm-version")
    if version > _parse(NEWEST):
        raise ConfigError(f"vllm-version {text} is newer than the newest release whose defaults the simulator "
                          f"knows ({NEWEST}); give {NEWEST} or an older one", "vllm-version")
    return version


def _parse(text: str):
    m = _VERSION.fullmatch(str(text).strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def version_defaults(text: str) -> VersionDefaults:
    """The defaults of release ``text`` (see the module docstring).  Raises ConfigError as
    :func:`parse_version`."""
    version = parse_version(text)
    found = _CHANGES[0][1]
    for first, defaults in _CHANGES:
        if version >= first:
            found = defaults
    return found


RESERVE_FULL_ISL_FROM = (0, 19, 0)       # scheduler_reserve_full_isl on by default (vllm#37307)
OFFLOAD_STORES_PER_JOB_FROM = (0, 21, 0)  # CPU-tier stores complete per job, not at the request's finish
OFFLOAD_PROTECTS_OFFERED_FROM = (0, 18, 0)  # prepare_store never evicts a block it is offered
OFFLOAD_EVENT_BLOCK_SIZE_0_FROM = (0, 20, 0)  # the CPU tier's BlockStored carries block_size 0


# vLLM flags the simulator serves that older releases lack: name -> first release with it
FLAGS_FROM = {
    "sse-keep-alive-interval": (0, 29, 0),      # vllm#51034 (see the module docstring)
    "custom-histogram-buckets": (0, 34, 0),     # ObservabilityConfig (see the module docstring)
}


# /metrics families that not every release exposes by default, read from the sdists' sources
# (``vllm/v1/metrics/loggers.py``, ``vllm/parser/metrics.py``, ``vllm/renderers/metrics.py``,
# ``vllm/entrypoints/serve/dev/sleep/metrics.py``): name -> (first release with it, first release
# without it or None).  The releases between 0.27.0 and 0.34.0 are not at hand: a family that
# 0.27.0's sources lack and 0.34.0's have is shown from 0.34.0 on (the first release that shows
# it in a source), unless the public record pins an earlier one: vllm:request_num_preemptions
# (vllm#49984) was merged in the first half of September 2026, when 0.30.0 was being released
# (out by 2026-09-23), so 0.31.0 is the first release certain to have it.  Families not listed
# are in every release from 0.17.0 to 0.34.0.
METRICS_SINCE = {
    "vllm:prompt_tokens_recomputed": ((0, 0, 0), (0, 20, 0)),        # 0.17.0-0.19.0
    "vllm:inter_token_latency_seconds": ((0, 10, 2), None),          # vllm#24110
    "vllm:num_requests_waiting_by_reason": ((0, 20, 0), None),
    "vllm:tool_call_parser_invocations": ((0, 24, 0), None),         # vllm/parser/metrics.py
    "vllm:admission_rejections": ((0, 34, 0), None),
    "vllm:prompt_tokens_cached_by_source": ((0, 34, 0), None),
    "vllm:request_num_preemptions": ((0, 31, 0), None),
    "vllm:request_render_duration_seconds": ((0, 34, 0), None),     # vllm/renderers/metrics.py
    "vllm:sleep_mode_operation_duration_seconds": ((0, 34, 0), None),
    "vllm:sleep_mode_operations_in_flight": ((0, 34, 0), None),
    # vllm/v1/metrics/perf.py's PerfMetricsProm (and its two byte counters), registered whatever
    # --enable-mfu-metrics says; added after vllm#30738 (December 2025, the log line only), in
    # the first sdist at hand (0.17.0), no earlier release pinned
    "vllm:estimated_flops_per_gpu": ((0, 17, 0), None),
    # the OffloadingConnector's (generation.metrics.kv_offload; only with a CPU KV tier): the
    # deprecated vllm:kv_offload_total_bytes / _total_time / _size{transfer_type} in every sdist at
    # hand (0.17.0 on, no earlier release pinned), exported by default in all of them; the flat
    # load / store families (the first, load_bytes, gates the six) from 0.24.0; the allocation
    # failures and the two lookup delays from 0.26.0 (0.24.0 lacks them, 0.25.0 is not at hand);
    # the config info from 0.34.0 (0.27.0 lacks it)
    "vllm:kv_offload_total_bytes": ((0, 17, 0), None),
    "vllm:kv_offload_load_bytes": ((0, 24, 0), None),
    "vllm:kv_offload_allocation_failure": ((0, 26, 0), None),
    "vllm:kv_offload_config_info": ((0, 34, 0), None),
    # the realtime route's WebSocketMetricsMiddleware (its three families; the gauge gates them):
    # read in 0.34.0, the only sdist at hand that has the realtime route's metrics
    "vllm:websocket_connections_active": ((0, 34, 0), None),
}
# vllm:time_per_output_token_seconds (the inter-token latency's old name): deprecated from 0.10.2
# (vllm#24110, its help text then ends "DEPRECATED: Use vllm:inter_token_latency_seconds
# instead."; TPOT_DEPRECATED_FROM), hidden from 0.12 unless --show-hidden-metrics-for-version names the previous
# minor release (vllm#29330), removed by vllm#32661 (January 2026, after 0.14.0 was out): in no
# sdist at hand (0.17.0 on).
TPOT_DEPRECATED_FROM = (0, 10, 2)
TPOT_HIDDEN_FROM = (0, 12, 0)
TPOT_REMOVED_FROM = (0, 15, 0)


def exposes(cfg, name: str) -> bool:
    """Whether release ``cfg.vllm_version`` exposes /metrics family ``name`` (:data:`METRICS_SINCE`;
    ``vllm:time_per_output_token_seconds`` as :data:`TPOT_HIDDEN_FROM` says).  Raises
    ConfigError as :func:`parse_version`."""
    version = parse_version(cfg.vllm_version)
    if name == "vllm:time_per_output_token_seconds":
        if version < TPOT_HIDDEN_FROM:
            return True
        return version < TPOT_REMOVED_FROM and flag_given(cfg, "show-hidden-metrics-for-version")
    first, gone = METRICS_SINCE.get(name, ((0, 0, 0), None))
    return version >= first and (gone is None or version < gone)


def newer_flags(cfg) -> list[str]:
    """The flags of :data:`FLAGS_FROM` that ``cfg`` (a SimConfig) was given under a
    ``--vllm-version`` before their first release: that release's ``vllm serve`` stops on them
    (argparse's ``unrecognized arguments``, :func:`generation.config.cli.load_config`)."""
    version = parse_version(cfg.vllm_version)
    return [name for name, first in FLAGS_FROM.items() if version < first and given(cfg, name)]


def reserve_full_isl(cfg) -> bool:
    """Whether step mode's scheduler admits a waiting request only when its whole sequence's KV
    blocks are free (vLLM's ``--scheduler-reserve-full-isl``): the flag when given, else on from
    :data:`RESERVE_FULL_ISL_FROM`.  Raises ConfigError as :func:`parse_version`."""
    flag = getattr(cfg, "scheduler_reserve_full_isl", None)
    if flag is not None:
        return bool(flag)
    return parse_version(cfg.vllm_version) >= RESERVE_FULL_ISL_FROM


def apply_version_defaults(cfg, step: bool) -> None:
    """Give ``cfg`` (a SimConfig) the ``--block-size`` and ``--gpu-memory-utilization`` of its
    ``--vllm-version`` where the user did not set them (``cfg.explicit``): always when ``step``
    (step mode), otherwise only when ``--vllm-version`` itself was given; else the reference's
    16 tokens and 0.9 stay.  vLLM's rule is ``CacheConfig._apply_block_size_default``
    (``vllm/config/cache.py``: ``block_size`` None -> ``DEFAULT_BLOCK_SIZE``).  Every user of
    the block size (KV events' ``block_size``, prefix-cache hits in whole blocks,
    ``cache_config_info``) reads ``cfg.block_size`` afterwards.  Raises ConfigError as
    :func:`parse_version`."""
    if not step and not given(cfg, "vllm-version"):
        return
    defaults = version_defaults(cfg.vllm_version)
    if not given(cfg, "block-size"):
        cfg.block_size = defaults.block_size
    if not given(cfg, "gpu-memory-utilization"):
        cfg.gpu_memory_utilization = defaults.gpu_memory_utilization


def given(cfg, name: str) -> bool:
    """Whether option ``name`` was set (command line, YAML, environment, or a SimConfig keyword)."""
    explicit = getattr(cfg, "explicit", ())
    return name in explicit or name.replace("-", "_") in explicit


def flag_given(cfg, name: str) -> bool:
    """Whether option ``name`` was set, or vLLM flag ``name`` was given and accepted without
    effect (``cfg.ignored_flags``: ``--tool-call-parser``, ``--enable-lora``, ...)."""
    return given(cfg, name) or name in getattr(cfg, "ignored_flags", ())
