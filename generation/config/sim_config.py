"""The simulator's configuration object (:class:`SimConfig`): every option as an attribute,
validated together, with the values derived from them.
"""
from __future__ import annotations

import copy
import math
import re
from typing import Any

from generation.metrics.fake_metrics_spec import parse_fake_metrics
from generation.metrics.buckets import check_custom_buckets
from .values import ConfigError, format_duration
from .options import FAILURE_TYPES, OPTIONS, Option, coerce
from .reasoning_effort import check_effort_map
from .reasoning_parsers import PARSERS
from .vllm_versions import parse_version


# ---------------------------------------------------------------------------------------------
def host_address() -> str:
    """This host's address for the KV-event topic when ``POD_IP`` is not set: what its hostname
    resolves to (a Kubernetes pod's IP), else 127.0.0.1."""
    import socket
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


# the pooling tasks each pooling model kind supports, its own first (vLLM's supported tasks of an
# embedding model, a sequence classifier and a cross-encoder)
POOLING_TASKS = {"embed": ("embed", "token_embed"), "classify": ("classify", "token_classify"),
                 "score": ("classify", "token_classify")}
# vLLM 0.34's PoolingTask literal, and its removed tasks' messages (vllm/tasks.py)
POOLING_TASK_NAMES = ("embed", "classify", "token_embed", "token_classify", "plugin", "embed&token_classify")
REMOVED_POOLING_TASKS = {"score": "`score` task was removed; use `classify` instead.",
                         "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead."}
# PoolerConfig's fields and their types (vllm/config/pooler.py; None allowed for each but the
# two booleans with defaults): accepted and type-checked; only `task` is modelled
_POOLING_TYPES = ("CLS", "LAST", "MEAN", "ALL", "STEP")
POOLER_CONFIG_FIELDS = {
    "task": str, "pooling_type": _POOLING_TYPES, "seq_pooling_type": _POOLING_TYPES[:3],
    "tok_pooling_type": _POOLING_TYPES[3:], "use_activation": bool, "enable_flash_late_interaction": bool,
    "dimensions": int, "enable_chunked_processing": bool, "max_embed_len": int, "logit_mean": float,
    "logit_sigma": float, "step_tag_id": int, "returned_token_ids": list}
POOLER_CONFIG_KEYS = tuple(POOLER_CONFIG_FIELDS)


def _pooler_field_problem(key: str, value) -> str | None:
    """Why ``value`` is not a valid PoolerConfig ``key`` (None: it is)."""
    kind = POOLER_CONFIG_FIELDS[key]
    if value is None:
        return "must not be null" if key in ("enable_flash_late_interaction", "enable_chunked_processing") else None
    if isinstance(kind, tuple):
        return None if value in kind else f"must be one of {', '.join(kind)}"
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is list:
        ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    return None if ok else f"must be {'a list of integers' if kind is list else kind.__name__}"


PROFILER_KINDS = (None, "torch", "cuda", "proton")      # vLLM 0.34's ProfilerKind (config/profiler.py)


def check_pooler_config(obj, kind: str | None) -> None:
    """``--pooler-config`` as vLLM 0.34 reads it: an object of PoolerConfig's fields, ``task`` one
    of its pooling tasks and not a removed one, and (for a pooling model) one the model supports:
    ``Unsupported task: 'classify' Supported tasks: ('embed', 'token_embed')``, the RuntimeError
    vLLM's ``get_pooling_task`` raises at start-up.  Raises ConfigError naming ``pooler-config``."""
    if not obj:                         # None, or {} (the flag's JSON type takes objects only)
        return
    task = obj.get("task")
    if "normalize" in obj:              # PoolerConfig's before-validator, ahead of the fields' checks
        raise ConfigError("Parameter `normalize` was removed; use `use_activation` instead.", "pooler-config")
    if isinstance(task, str) and task in REMOVED_POOLING_TASKS:
        raise ConfigError(REMOVED_POOLING_TASKS[task], "pooler-config")
    for key, value in obj.items():
        if key not in POOLER_CONFIG_FIELDS:
            raise ConfigError(f"invalid value for --pooler-config: unknown field {key!r} (known: "
                              f"{', '.join(POOLER_CONFIG_KEYS)})", "pooler-config")
        problem = None if key == "task" else _pooler_field_problem(key, value)
        if problem:
            raise ConfigError(f"invalid value for --pooler-config: {key} {problem}, got {value!r}", "pooler-config")
    if obj.get("logit_sigma") == 0:         # PoolerConfig.__post_init__
        raise ConfigError("logit_sigma cannot be 0 (division by zero)", "pooler-config")
    if task is None:
        return
    if task not in POOLING_TASK_NAMES:
        raise ConfigError(f"invalid value for --pooler-config: task must be one of "
                          f"{', '.join(POOLING_TASK_NAMES)}, got {task!r}", "pooler-config")
    if kind is not None and task not in POOLING_TASKS[kind]:
        raise ConfigError(f"Unsupported task: {task!r} Supported tasks: {POOLING_TASKS[kind]}", "pooler-config")


MAX_FLEET_PODS = 1024     # pods one process holds, at start-up and after scaling (~0.4 MiB and an fd each)


# Floats whose rule has a lower bound ``(bound, inclusive)`` beside the generic ones (a negative
# relative deviation, utilization or bandwidth was accepted; vLLM's CacheConfig has
# gpu_memory_utilization gt=0)
FLOAT_MINIMUM = {"step-time-jitter": (0.0, True), "gpu-memory-utilization": (0.0, False),
                 "kv-transfer-bandwidth": (0.0, False)}


class SimConfig:
    """All simulator options as attributes named like the flags with ``-`` -> ``_``.

    One live instance is shared by the engine and its parts.  It is never modified field by
    field at run time: ``POST /admin/config`` builds a validated :meth:`updated` copy and
    :meth:`swap` installs all of its values in one step."""

    def __init__(self, **values: Any):
        for o in OPTIONS.values():
            setattr(self, o.attr, copy.deepcopy(o.default))
        self.ignored_flags: list[str] = []         # vLLM flags given and ignored (start-up log)
        self.vllm_env: dict[str, str] = {}         # VLLM_* variables set, no *KEY* (load_config)
        self.deprecations: list[str] = []          # old flag dialects read (start-up log)
        self.explicit: frozenset = frozenset(values)    # options given, not defaulted (load_config sets it)
        self.step = None                           # step mode's resolved settings (generation.engine.step_config)
        self.spec_decode = None                    # --speculative-config resolved (generation.engine.spec_decode)
        self.kv_events_topic: str | None = None    # --kv-events-config's topic (None: the reference's)
        self.model_vocab_size: int | None = None   # the model's config.json vocab_size (model_config.py)
        self.model_architecture: str | None = None  # its architectures[0]: None when no config.json is read
        self.model_types: tuple = ()               # its model_type and its text_config's (model_config.py)
        self.tokenizer_loaded: str = ""            # the model's own tokenizer, when load_tokenizer found it
        for k, v in values.items():
            if k not in _ATTRS:
                raise TypeError(f"unknown option {k!r}")
            setattr(self, k, v)

    def __repr__(self) -> str:
        return "SimConfig(" + ", ".join(f"{o.attr}={getattr(self, o.attr)!r}" for o in OPTIONS.values()) + ")"

    # ---- derived -----------------------------------------------------------------------------
    @property
    def served_names(self) -> list:
        return list(self.served_model_name) or [self.model]

    @property
    def display_model_name(self) -> str:
        return self.served_names[0]

    @property
    def pooling_task(self) -> str | None:
        """``/pooling``'s task: ``--pooler-config``'s ``task`` when it gives one, else the pooling
        model's own (``embed``, or ``classify`` for a classifier or cross-encoder), as vLLM's
        ``ModelConfig.get_pooling_task``; None for the generation runner."""
        kind = self.pooling_kind
        if kind is None:
            return None
        task = (self.pooler_config or {}).get("task")
        return task or POOLING_TASKS[kind][0]

    @property
    def profiler(self) -> str | None:
        """``--profiler-config``'s ``profiler`` (``torch``, ``cuda``, ``proton``) or None: with one,
        vLLM registers ``/start_profile`` and ``/stop_profile`` (``serve/profile/api_router.py``)."""
        return (self.profiler_config or {}).get("profiler")

    @property
    def pooling_kind(self) -> str | None:
        """The pooling model served (vLLM's ``--runner pooling`` with its ``--convert``): ``embed``
        (a bi-encoder), ``classify`` (a 2-label classifier), ``score`` (a cross-encoder: one label),
        or None for the generation runner.  ``--runner auto`` is ``pooling`` when ``--convert``
        names a pooling kind or the deprecated ``--task`` a pooling task, as vLLM resolves it."""
        task = {"embedding": "embed", "reward": "embed"}.get(self.task, self.task)
        convert = {"auto": None, "none": None, "reward": "embed"}.get(self.convert, self.convert)
        runner = self.runner
        if runner == "auto":
            runner = "pooling" if (convert or task in ("embed", "classify", "score")) else "generate"
        if runner != "pooling":
            return None
        return convert or (task if task in ("embed", "classify", "score") else "embed")

    # ---- run-time updates --------------------------------------------------------------------
    pod_ip_guessed = False           # POD_IP was not set: the KV-event topic has host_address()

    def kv_topic(self) -> str:
        """The ZMQ topic of the KV events: ``--kv-events-config``'s ``topic`` when it gave one
        (vLLM's default ``""`` included), else the reference's ``kv@<POD_IP>:<port>@<model>``."""
        if self.kv_events_topic is not None:
            return self.kv_events_topic
        return f"kv@{self.pod_ip}:{self.port}@{self.model}"

    def copy(self, share_step: bool = False) -> "SimConfig":      # share_step: the resolved, read-only
        new = object.__new__(SimConfig)                               # step settings shared, not copied
        new.__dict__ = copy.deepcopy(self.__dict__, {id(self.step): self.step} if share_step else None)
        return new

    def updated(self, changes: dict) -> "SimConfig":
        """A validated copy with ``changes`` (flag name -> JSON value; ``_`` for ``-`` too, as on
        the command line) applied; only admin keys (``Option.admin``).  Durations: a Go string or a JSON number of nanoseconds.  Raises
        ConfigError (``param`` = the flag at fault) and leaves this object unchanged."""
        trial = self.copy()
        for key, value in changes.items():
            if isinstance(key, str) and key not in OPTIONS and key.replace("_", "-") in OPTIONS:
                key = key.replace("_", "-")     # the flag's other spelling, as the command line and YAML take it
            opt = OPTIONS.get(key)
            if opt is None or not opt.admin:
                raise ConfigError(f"field '{key}' is not admin-configurable", key)
            try:
                if opt.type == "duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    v = value / 1e9                 # JSON numbers are nanoseconds
                    if not math.isfinite(v):
                        raise ConfigError(f"invalid value for --{key}: must be a finite duration", key)
                else:
                    v = coerce(key, value)
            except OverflowError:
                raise ConfigError(f'field "{key}": invalid value for --{key}: out of range', key) from None
            except ConfigError as e:
                raise ConfigError(f'field "{key}": {e}', key) from None
            setattr(trial, opt.attr, v)
        if (trial.latency_calculator == "step") != (self.latency_calculator == "step"):
            raise ConfigError("field \"latency-calculator\": step mode is chosen at start-up (the engine is built "
                              "then); restart with or without --latency-calculator step", "latency-calculator")
        trial.validate()
        return trial

    def swap(self, new: "SimConfig") -> None:
        """Install every value of ``new`` at once (one assignment: a reader sees all old or all
        new values, never a mix)."""
        self.__dict__ = new.__dict__

    # ---- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError with the reference's message for the first invalid value.

        Files (dataset, certificates) are checked where they are opened, not here."""
        if not 0 < self.port <= 65535:
            raise ConfigError(f"invalid port '{self.port}'", "port")
        if not self.model:
            raise ConfigError("model parameter is empty", "model")
        for lm in self.lora_modules:
            if not lm.name:
                raise ConfigError("empty LoRA name", "lora-modules")
            if lm.base_model_name and lm.base_model_name != self.model:
                raise ConfigError(f"unknown base model '{lm.base_model_name}' for LoRA '{lm.name}'",
                                  "lora-modules")
        check_pooler_config(self.pooler_config, self.pooling_kind)
        if self.profiler not in PROFILER_KINDS:      # vLLM's ProfilerConfig.profiler: ProfilerKind | None
            raise ConfigError(f"invalid value for --profiler-config: profiler must be one of "
                              f"{', '.join(map(repr, PROFILER_KINDS[1:]))} or null, got {self.profiler!r}",
                              "profiler-config")
        if self.max_loras < 1:
            raise ConfigError("max LoRAs cannot be less than 1", "max-loras")
        if self.max_cpu_loras and self.max_cpu_loras < self.max_loras:
            raise ConfigError("max CPU LoRAs cannot be less than max LoRAs", "max-cpu-loras")
        if self.max_model_len < 1:
            raise ConfigError("max model len cannot be less than 1", "max-model-len")
        if self.checkpoint_prepare_on_startup and not self.enable_sleep_mode:
            raise ConfigError("checkpoint_prepare_on_startup requires enable_sleep_mode", "checkpoint-prepare-on-startup")
        if self.max_num_seqs < 1:
            raise ConfigError("max num seqs cannot be less than 1", "max-num-seqs")
        if self.stream_interval < 1:         # vLLM's SchedulerConfig: Field(default=1, ge=1)
            raise ConfigError("stream interval cannot be less than 1", "stream-interval")
        if self.max_waiting_queue_length < 0:
            raise ConfigError("max waiting queue size cannot be less than 0", "max-waiting-queue-length")
        for name in ("max-num-queued-reqs", "max-num-queued-tokens"):     # vLLM's Field(ge=0)
            v = getattr(self, name.replace("-", "_"))
            if v is not None and v < 0:
                raise ConfigError(f"--{name} must be at least 0", name)
        check_effort_map(self.reasoning_effort_map)     # vLLM 0.34's validate_reasoning_effort_map
        if not 0.0 <= self.reasoning_fraction <= 1.0:
            raise ConfigError("reasoning fraction must be between 0 and 1", "reasoning-fraction")
        refused = PARSERS[self.reasoning_parser].refused if self.reasoning_parser in PARSERS else ""
        if refused:         # vLLM's own start-up check of the response-template parsers
            raise ConfigError(f"--reasoning-parser {self.reasoning_parser} {refused}", "reasoning-parser")
        if self.mode not in ("random", "echo"):
            hint = " (the step engine is --latency-calculator step)" if self.mode == "step" else ""
            raise ConfigError(f"invalid mode '{self.mode}', valid values are 'random' and 'echo'{hint}", "mode")
        self.validate_latencies()
        self._validate_tools()
        if self.kv_cache_size < 0:
            raise ConfigError("KV cache size cannot be negative", "kv-cache-size")
        if not 0 <= self.global_cache_hit_threshold <= 1:
            raise ConfigError("global cache hit threshold must be between in range [0, 1]",
                              "global-cache-hit-threshold")
        if self.block_size not in (8, 16, 32, 64, 128):
            raise ConfigError("token block size should be one of the following: 8, 16, 32, 64, 128", "block-size")
        if self.event_batch_size < 1:
            raise ConfigError("event batch size cannot less than 1", "event-batch-size")
        self._validate_kv_events()
        self._validate_engine_flags()
        try:        # vLLM's ObservabilityConfig validators, their messages; bounds stored as floats
            self.custom_histogram_buckets = check_custom_buckets(self.custom_histogram_buckets)
        except ValueError as e:
            raise ConfigError(str(e), "custom-histogram-buckets") from None
        sample = self.kv_cache_metrics_sample      # vLLM's Field(gt=0, le=1), checked with the flag off too
        if not 0 < sample <= 1:                    # pydantic's words, on one line
            rule = "greater than 0 [type=greater_than" if sample <= 0 else \
                "less than or equal to 1 [type=less_than_equal"
            raise ConfigError(f"1 validation error for ObservabilityConfig: kv_cache_metrics_sample: Input should be "
                              f"{rule}, input_value={sample!r}, input_type=float]", "kv-cache-metrics-sample")
        if self.fake_metrics is not None:
            try:
                parse_fake_metrics(self.fake_metrics, self.max_model_len,
                                   overrides=self.custom_histogram_buckets)
            except ConfigError as e:
                raise ConfigError(str(e), "fake-metrics") from None
            if self.fake_metrics_refresh_interval <= 0:
                raise ConfigError("fake metrics refresh interval must be positive", "fake-metrics-refresh-interval")
        self.validate_failures()
        if not 1 <= self.data_parallel_size <= 8:
            raise ConfigError("data parallel size must be between 1 and 8 (more: --data-parallel-size-local)", "data-parallel-size")
        if self.tensor_parallel_size < 1:     # vLLM refuses it in every mode (the step engine's words)
            raise ConfigError("tensor parallel size cannot be less than 1", "tensor-parallel-size")
        if self.data_parallel_rank > 7:
            raise ConfigError("data parallel rank must be between 0 and 7", "data-parallel-rank")
        if self.ssl_cert_reqs not in (0, 1, 2):
            raise ConfigError("--ssl-cert-reqs must be 0 (CERT_NONE), 1 (CERT_OPTIONAL) or 2 (CERT_REQUIRED)",
                              "ssl-cert-reqs")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            missing = "ssl-keyfile" if self.ssl_certfile else "ssl-certfile"     # name it (case C37)
            raise ConfigError(f"--{missing} is missing: both ssl-certfile and ssl-keyfile must be provided "
                              f"together", missing)
        if self.self_signed_certs and self.ssl_certfile:
            raise ConfigError("cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile",
                              "self-signed-certs")
        if not 0 <= self.grpc_port <= 65535:
            raise ConfigError(f"invalid gRPC port '{self.grpc_port}'", "grpc-port")
        if self.grpc_port and (self.grpc or self.grpc_port == self.port):
            raise ConfigError("--grpc-port must differ from --port and needs HTTP (without --grpc)", "grpc-port")
        if self.grpc and self.data_parallel_size > 1:
            raise ConfigError("--grpc serves one engine: use --grpc-port beside HTTP with --data-parallel-size",
                              "grpc")
        self._validate_fleet()
        if (self.grpc or self.grpc_port) and self.mm_encoder_only:
            raise ConfigError("gRPC is not served in --mm-encoder-only mode (as the reference)", "grpc")
        if self.dataset_url and not self.dataset_path:
            raise ConfigError("dataset-path is required when dataset-url is set", "dataset-path")
        if (self.dataset_path or self.dataset_url) and self.mode == "echo":
            raise ConfigError("dataset cannot be defined in echo mode", "mode")
        if self.default_embedding_dimensions < 1:
            raise ConfigError("default embedding dimensions must be at least 1", "default-embedding-dimensions")
        if not 0 <= self.image_emission_rate <= 100:
            raise ConfigError("image emission rate should be between 0 and 100", "image-emission-rate")
        if not 1 <= self.max_request_body_size_mb <= 512:
            raise ConfigError(f"max-request-body-size-mb must be between 1 MB and 512 MB, "
                              f"got {self.max_request_body_size_mb}", "max-request-body-size-mb")
        if self.max_logprobs < -1:
            raise ConfigError("max-logprobs cannot be less than -1", "max-logprobs")
        if self.max_request_work < 0:
            raise ConfigError("max-request-work cannot be negative", "max-request-work")
        if self.worker_connections < 1:
            raise ConfigError("worker-connections cannot be less than 1", "worker-connections")
        if self.timeout_keep_alive < 0:
            raise ConfigError("timeout-keep-alive cannot be negative", "timeout-keep-alive")
        if self.sse_keep_alive_interval < 0:       # vLLM's validate_parsed_serve_args (less its "Error: ")
            raise ConfigError("--sse-keep-alive-interval must be a non-negative integer (0 disables keep-alive "
                              "comments).", "sse-keep-alive-interval")
        if self.enable_per_request_metrics and self.disable_log_stats:
            # vLLM's validate_parsed_serve_args: the per-request times come from the engine's stats
            raise ConfigError("--enable-per-request-metrics requires engine statistics logging; remove "
                              "--disable-log-stats to enable per-request metrics.", "enable-per-request-metrics")
        self._validate_generic()
        if self.enable_kvcache and not self.pod_ip and self.kv_events_topic is None and not self.fleet_size:
            # The reference refuses to start here; vLLM needs no POD_IP, and a user's case starts
            # `--enable-kvcache` without one.  The topic's address is then this host's (in a
            # Kubernetes pod its hostname resolves to the pod's IP), named in the start-up lines.
            self.pod_ip, self.pod_ip_guessed = host_address(), True

    def _validate_engine_flags(self) -> None:
        """vLLM's engine flags that step mode reads (``--vllm-version``, the CPU KV tier, the KV
        cache's size in bytes, the CUDA-graph sizes): their bounds, with vLLM's message where
        vLLM has one."""
        parse_version(self.vllm_version)
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 1:
            raise ConfigError(f"kv-cache-memory-bytes must be positive, got {self.kv_cache_memory_bytes}",
                              "kv-cache-memory-bytes")
        if self.kv_offloading_size is not None and self.kv_offloading_size <= 0:
            raise ConfigError(f"kv-offloading-size must be positive (GiB), got {self.kv_offloading_size:g}",
                              "kv-offloading-size")
        if self.cpu_offload_gb < 0:
            raise ConfigError(f"cpu-offload-gb cannot be negative, got {self.cpu_offload_gb:g}", "cpu-offload-gb")
        bad = [n for n in self.cuda_graph_sizes if n < 1]
        if bad:
            raise ConfigError(f"cuda-graph-sizes must be positive batch sizes, got {bad[0]}", "cuda-graph-sizes")
        cap = self.max_cudagraph_capture_size
        if cap is not None and cap < 0:
            raise ConfigError(f"max-cudagraph-capture-size cannot be negative, got {cap}", "max-cudagraph-capture-size")
        if cap is not None and self.cuda_graph_sizes and cap != max(self.cuda_graph_sizes):
            raise ConfigError(f"customized max_cudagraph_capture_size(={cap}) should be consistent with the max "
                              f"value of cudagraph_capture_sizes(={max(self.cuda_graph_sizes)})",
                              "max-cudagraph-capture-size")

    @property
    def vllm_release(self) -> tuple:
        """``--vllm-version`` as ``(major, minor, patch)`` (``(0, 34, 0)``)."""
        return parse_version(self.vllm_version)

    def _validate_generic(self) -> None:
        """Rules every option of a type follows: choices, finite and non-negative durations and
        floats within their declared maximum (and :data:`FLOAT_MINIMUM`'s lower bounds)."""
        for o in OPTIONS.values():
            v = getattr(self, o.attr)
            if o.choices and o.type in ("str", "int") and v not in o.choices:
                raise ConfigError(f"invalid {o.name} '{v}', valid values are: "
                                  + ", ".join(repr(c) if c == "" else str(c) for c in o.choices), o.name)
            if o.type in ("duration", "float") and v is not None:
                if not math.isfinite(v):
                    raise ConfigError(f"{o.name} must be finite", o.name)
                if (o.type == "duration" or o.name == "shutdown-timeout") and v < 0:
                    raise ConfigError(f"{o.name} cannot be negative", o.name)
                if o.maximum is not None and v > o.maximum:
                    shown = format_duration(o.maximum) if o.type == "duration" else f"{o.maximum:g}"
                    raise ConfigError(f"{o.name} cannot be more than {shown}", o.name)
                low = FLOAT_MINIMUM.get(o.name)
                if low is not None and (v < low[0] or (v == low[0] and not low[1])):
                    raise ConfigError(f"{o.name} must be {'at least' if low[1] else 'more than'} {low[0]:g}, got {v:g}",
                                      o.name)

    def _validate_tools(self) -> None:
        if self.max_tool_call_integer_param < self.min_tool_call_integer_param:
            raise ConfigError("MaxToolCallIntegerParam cannot be less than MinToolCallIntegerParam",
                              "max-tool-call-integer-param")
        if self.max_tool_call_number_param < self.min_tool_call_number_param:
            raise ConfigError("MaxToolCallNumberParam cannot be less than MinToolCallNumberParam",
                              "max-tool-call-number-param")
        if self.min_tool_call_array_param_length < 0:
            raise ConfigError("MinToolCallArrayParamLength cannot be negative", "min-tool-call-array-param-length")
        if self.max_tool_call_array_param_length < self.min_tool_call_array_param_length:
            raise ConfigError("MaxToolCallArrayParamLength cannot be less than MinToolCallArrayParamLength",
                              "max-tool-call-array-param-length")
        for attr, label in (("tool_call_not_required_param_probability", "ToolCallNotRequiredParamProbability"),
                            ("object_tool_call_not_required_field_probability",
                             "ObjectToolCallNotRequiredParamProbability"),
                            ("tool_call_extra_call_probability", "ToolCallExtraCallProbability")):
            if not 0 <= getattr(self, attr) <= 100:
                raise ConfigError(f"{label} should be between 0 and 100", attr.replace("_", "-"))

    def _validate_fleet(self) -> None:
        """``--fleet-size``: bounds; the flags of one engine per process (DP layouts, gRPC) refused beside it."""
        if not 0 <= self.fleet_size <= MAX_FLEET_PODS:
            raise ConfigError(f"fleet size must be between 0 and {MAX_FLEET_PODS}, got {self.fleet_size}", "fleet-size")
        if not 0 <= self.fleet_control_port <= 65535:
            raise ConfigError(f"invalid fleet control port '{self.fleet_control_port}'", "fleet-control-port")
        if self.fleet_startup_delay < 0:
            raise ConfigError("fleet startup delay cannot be negative", "fleet-startup-delay")
        if not self.fleet_size:
            if self.fleet_control_port:       # a fleet's flag: without one it would be silently ignored
                raise ConfigError("--fleet-control-port needs --fleet-size", "fleet-control-port")
            return
        if self.data_parallel_size > 1 and (self.data_parallel_external_lb or self.data_parallel_rank >= 0):
            raise ConfigError("--fleet-size serves each pod on one port: a pod's data-parallel ranks share it "
                              "(no --data-parallel-external-lb / --data-parallel-rank)", "fleet-size")
        if self.grpc or self.grpc_port:
            raise ConfigError("--fleet-size serves HTTP only (no --grpc / --grpc-port)", "fleet-size")
        if self.fleet_control_port and self.fleet_addresses == "ports" and \
                self.port <= self.fleet_control_port < self.port + self.fleet_size:
            raise ConfigError(f"--fleet-control-port {self.fleet_control_port} is one of the pods' ports "
                              f"({self.port}..{self.port + self.fleet_size - 1})", "fleet-control-port")

    def _validate_kv_events(self) -> None:
        """Replay queue size and the replay/publisher port collision rule (engine.md 1.4)."""
        if not self.kv_events_replay_endpoint:
            return
        if self.kv_events_replay_queue_size < 1:
            raise ConfigError("kv-events-replay-queue-size cannot be less than 1", "kv-events-replay-queue-size")
        zmq_port, replay_port = _endpoint_port(self.zmq_endpoint), _endpoint_port(self.kv_events_replay_endpoint)
        r = self.data_parallel_size - 1
        if zmq_port is not None and replay_port is not None and \
                zmq_port <= replay_port + r and replay_port <= zmq_port + r:
            raise ConfigError(f"zmq-endpoint ({self.zmq_endpoint}) and kv-events-replay-endpoint "
                              f"({self.kv_events_replay_endpoint}) ports collide once offset by data-parallel "
                              f"rank", "kv-events-replay-endpoint")

    def validate_failures(self) -> None:
        if not 0 <= self.failure_injection_rate <= 100:
            raise ConfigError("failure injection rate should be between 0 and 100", "failure-injection-rate")
        for t in self.failure_types:
            if t not in FAILURE_TYPES:
                raise ConfigError(f"invalid failure type '{t}', valid types are: " + ", ".join(FAILURE_TYPES),
                                  "failure-types")

    def validate_latencies(self) -> None:
        checks = [
            ("time_to_first_token", "time to first token cannot be negative"),
            ("time_to_first_token_std_dev", "time to first token standard deviation cannot be negative"),
            ("inter_token_latency", "inter token latency cannot be negative"),
            ("inter_token_latency_std_dev", "inter token latency standard deviation cannot be negative"),
            ("kv_cache_transfer_latency", "kv-cache transfer time cannot be negative"),
            ("kv_cache_transfer_latency_std_dev", "kv-cache transfer time standard deviation cannot be negative"),
            ("prefill_overhead", "prefill overhead cannot be negative"),
            ("prefill_time_per_token", "prefill time per token cannot be negative"),
            ("prefill_time_std_dev", "prefill time standard deviation cannot be negative"),
            ("kv_cache_transfer_time_per_token", "kv-cache transfer time per token cannot be negative"),
            ("kv_cache_transfer_time_std_dev", "kv-cache transfer time standard deviation cannot be negative"),
            ("time_to_generate_image", "time to generate image cannot be negative"),
            ("time_to_generate_image_std_dev", "time to generate image standard deviation cannot be negative"),
        ]
        for attr, msg in checks:
            if getattr(self, attr) < 0:
                raise ConfigError(msg, attr.replace("_", "-"))
        pairs = [
            ("time_to_first_token", "time to first token standard deviation cannot be more than 30% of "
                                    "time to first token"),
            ("inter_token_latency", "inter token latency standard deviation cannot be more than 30% of "
                                    "inter token latency"),
            ("kv_cache_transfer_latency", "kv-cache transfer standard deviation cannot be more than 30% of "
                                          "kv-cache transfer"),
            ("time_to_generate_image", "time to generate image standard deviation cannot be more than 30% "
                                       "of time to generate image"),
        ]
        for attr, msg in pairs:
            if getattr(self, attr + "_std_dev") > 0.3 * getattr(self, attr) + 1e-12:
                raise ConfigError(msg, (attr + "_std_dev").replace("_", "-"))
        if self.time_factor_under_load < 1.0:
            raise ConfigError("time factor under load cannot be less than 1.0", "time-factor-under-load")
        if self.latency_calculator not in ("", "constant", "per-token", "step"):
            raise ConfigError(f"unknown latency-calculator {self.latency_calculator}, supported calculators "
                              f"are: constant, per-token and step", "latency-calculator")

    # ---- rendering ---------------------------------------------------------------------------
    def to_public_dict(self) -> dict:
        """The configuration as ``GET /admin/config`` shows it: flag names as keys, durations as
        Go duration strings, secrets masked, environment values under the reference's names."""
        out: dict[str, Any] = {}
        for o in OPTIONS.values():
            if not o.cli:
                continue
            out[o.name] = _public_value(o, getattr(self, o.attr))
        out["DisplayModelName"] = self.display_model_name
        for o in OPTIONS.values():
            if not o.cli:
                out[o.shown_as] = getattr(self, o.attr)
        if self.data_parallel_size > 1:
            out.pop("port", None)
        return out


def _public_value(o: Option, val: Any) -> Any:
    if o.secret:
        return "***" if val else ""
    if o.type == "duration":
        return format_duration(val)
    if o.type == "lora":
        return [lm.to_json() for lm in val]
    return val


_ATTRS = {o.attr for o in OPTIONS.values()}


def _endpoint_port(endpoint: str) -> int | None:
    m = re.search(r":(\d+)$", endpoint or "")
    return int(m.group(1)) if m else None


def ignored_flags(config: SimConfig) -> list[str]:
    """The vLLM flags given on the command line or in YAML that this simulator ignores, in the
    order given (``--dtype``, ``-tp`` ...), for the start-up log (:data:`METRICS_ONLY_FLAGS` apart)."""
    return [f"--{n}" for n in getattr(config, "ignored_flags", [])]


# Accepted vLLM flags that add a /metrics family (the flags table notes each; --tool-call-parser
# also makes a derender ask for its parse_context): logged apart from the ignored ones ("no meaning": a pasted `--tool-call-parser hermes` read as off)
METRICS_ONLY_FLAGS = {"enable-auto-tool-choice": "vllm:tool_call_parser_invocations",
                      "tool-call-parser": "vllm:tool_call_parser_invocations", "enable-lora": "vllm:lora_requests_info"}


# vLLM's flags that take effect only with --latency-calculator step (the engine model)
STEP_ONLY = ("gpu-memory-utilization", "max-num-batched-tokens", "quantization", "tensor-parallel-size",
             "kv-cache-dtype", "num-gpu-blocks-override", "hf-config-path", "long-prefill-token-threshold",
             "max-num-partial-prefills", "gpu", "step-time-profile", "step-time-jitter", "kv-transfer-bandwidth",
             "enforce-eager", "cuda-graph-sizes", "max-cudagraph-capture-size",
             "enable-chunked-prefill", "async-scheduling", "kv-cache-memory-bytes", "enable-prefix-caching",
             "kv-offloading-size", "cpu-offload-gb", "kv-cache-metrics",    # (its families stay empty)
             "speculative-config", "spec-method", "spec-model", "spec-tokens", "per-request-spec-decode-metrics",
             "pipeline-parallel-size", "enable-expert-parallel", "decode-context-parallel-size")


# the default latency model's flags: with --latency-calculator step the step model times every
# request (its TTFT and inter-token latencies come from the steps), so they do nothing then
LATENCY_ONLY = ("time-to-first-token", "time-to-first-token-std-dev", "inter-token-latency",
                "inter-token-latency-std-dev", "prefill-overhead", "prefill-time-per-token", "prefill-time-std-dev",
                "kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev", "kv-cache-transfer-time-per-token",
                "kv-cache-transfer-time-std-dev", "time-factor-under-load")


def latency_only_flags(config: SimConfig) -> list[str]:
    """The default latency model's flags given with ``--latency-calculator step`` (the step model
    replaces them), for one start-up log line: the converse of :func:`step_only_flags`."""
    if config.latency_calculator != "step":
        return []
    given = getattr(config, "explicit", frozenset())
    return [f"--{n}" for n in LATENCY_ONLY if n in given]


def step_only_flags(config: SimConfig) -> list[str]:
    """The step-mode flags given while another latency calculator is in use (they have no
    effect then), for one start-up log line."""
    if config.latency_calculator == "step":
        return []
    given = getattr(config, "explicit", frozenset())
    return [f"--{n}" for n in STEP_ONLY if n in given]

