"""Simulator configuration: flags, YAML file, environment, validation.

Flag names, types, defaults and validation messages follow the reference simulator
(llm-d-inference-sim, engine.md section 1.4).  Precedence, lowest to highest:
built-in defaults < YAML file (``--config``) < environment (``SIM_MODEL``) < command line.

Durations are stored in seconds (float) and accept Go-style strings (``100ms``, ``1.5s``,
``2m30s``; bare ``0``) on the command line, in YAML and in ``POST /admin/config`` (where a
JSON integer means nanoseconds).  Booleans accept ``--flag``, ``--flag=false`` and
``--flag false``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

DEFAULT_MODEL = "test-model"

FAILURE_TYPES = ("rate_limit", "invalid_api_key", "context_length", "server_error",
                 "invalid_request", "model_not_found")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the flag or rule."""


# ---------------------------------------------------------------------------------------------
# Go duration strings
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(value: Any) -> float:
    """Parse a Go ``time.ParseDuration`` string into seconds.

    A bare number string (``"2000"``) is the reference's legacy format: milliseconds.
    A Python number is taken as seconds.  Raises ConfigError for a malformed string.
    """
    if isinstance(value, bool):
        raise ConfigError(f"time: invalid duration {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = 1.0
    body = s
    if body[:1] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if not body:
        raise ConfigError(f'time: invalid duration "{s}"')
    pos, total = 0, 0.0
    while pos < len(body):
        m = _DURATION_PART.match(body, pos)
        if not m:
            if pos == 0 and re.fullmatch(r"\d+(\.\d*)?", body):
                # Legacy (deprecated) reference format: a bare number means milliseconds.
                return sign * float(body) / 1000.0
            raise ConfigError(f'time: invalid duration "{s}"')
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Render seconds like Go's ``Duration.String()``: ``0s``, ``250ms``, ``1.5s``, ``1m30s``."""
    ns = int(round(seconds * 1e9))
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)

    def fmt(v: float) -> str:
        return f"{v:.9f}".rstrip("0").rstrip(".")

    if ns < 1000:
        out = f"{ns}ns"
    elif ns < 1_000_000:
        out = fmt(ns / 1e3) + "µs"
    elif ns < 1_000_000_000:
        out = fmt(ns / 1e6) + "ms"
    else:
        h, rem = divmod(ns, 3600 * 10**9)
        m, rem = divmod(rem, 60 * 10**9)
        sec = fmt(rem / 1e9)
        if h:
            out = f"{h}h{m}m{sec}s"
        elif m:
            out = f"{m}m{sec}s"
        else:
            out = f"{sec}s"
    return "-" + out if neg else out


def parse_bool(value: Any) -> bool:
    """Go ``strconv.ParseBool`` semantics; raises ConfigError otherwise."""
    if isinstance(value, bool):
        return value
    s = str(value)
    if s in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if s in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ConfigError(f'invalid boolean value "{s}"')


# ---------------------------------------------------------------------------------------------
@dataclass
class LoraModule:
    name: str
    path: str = ""
    base_model_name: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "path": self.path, "base_model_name": self.base_model_name}


@dataclass
class SimConfig:
    """All simulator options.  Field names are the flag names with ``-`` replaced by ``_``."""
    port: int = 8000
    host: str = "0.0.0.0"
    model: str = DEFAULT_MODEL
    served_model_name: list = field(default_factory=list)
    lora_modules: list = field(default_factory=list)      # list[LoraModule]
    max_loras: int = 1
    max_cpu_loras: int = 0
    max_model_len: int = 1024
    max_num_seqs: int = 5
    max_waiting_queue_length: int = 1000
    mode: str = "random"
    seed: int | None = None
    # latency (seconds)
    time_to_first_token: float = 0.0
    time_to_first_token_std_dev: float = 0.0
    inter_token_latency: float = 0.0
    inter_token_latency_std_dev: float = 0.0
    kv_cache_transfer_latency: float = 0.0
    kv_cache_transfer_latency_std_dev: float = 0.0
    prefill_overhead: float = 0.0
    prefill_time_per_token: float = 0.0
    prefill_time_std_dev: float = 0.0
    kv_cache_transfer_time_per_token: float = 0.0
    kv_cache_transfer_time_std_dev: float = 0.0
    time_to_generate_image: float = 0.0
    time_to_generate_image_std_dev: float = 0.0
    time_factor_under_load: float = 1.0
    latency_calculator: str = ""
    # tool calls
    max_tool_call_integer_param: int = 100
    min_tool_call_integer_param: int = 0
    max_tool_call_number_param: float = 100.0
    min_tool_call_number_param: float = 0.0
    max_tool_call_array_param_length: int = 5
    min_tool_call_array_param_length: int = 1
    tool_call_not_required_param_probability: int = 50
    object_tool_call_not_required_field_probability: int = 50
    tool_call_extra_call_probability: int = 45
    skip_tool_validation: bool = False
    # kv cache
    enable_kvcache: bool = False
    kv_cache_size: int = 1024
    global_cache_hit_threshold: float = 0.0
    block_size: int = 16
    hash_seed: str = ""
    zmq_endpoint: str = "tcp://127.0.0.1:5557"
    event_batch_size: int = 16
    use_vllm_map_event_format: bool = False
    # failures
    failure_injection_rate: int = 0
    failure_types: list = field(default_factory=list)
    # misc
    data_parallel_size: int = 1
    data_parallel_rank: int = -1
    startup_duration: float = 0.0
    enable_sleep_mode: bool = False
    enable_request_id_headers: bool = False
    default_embedding_dimensions: int = 384
    max_request_body_size_mb: int = 4
    force_dummy_tokenizer: bool = False
    tokenizer: str = ""
    omni: bool = False
    image_emission_rate: int = 0
    mm_encoder_only: bool = False
    worker_connections: int = 10000
    # SQLite response dataset (engine.md 9.2)
    dataset_path: str = ""
    dataset_table_name: str = "llmd"
    dataset_in_memory: bool = False
    # fake metrics (engine.md 5.4): the JSON object as given (None = real metrics)
    fake_metrics: dict | None = None
    fake_metrics_refresh_interval: float = 0.1
    # environment-derived (not flags)
    pod_ip: str = ""
    pod_name: str = ""
    pod_namespace: str = ""
    vllm_dev_mode: bool = False

    # ---- derived -----------------------------------------------------------------------------
    @property
    def served_names(self) -> list:
        return list(self.served_model_name) or [self.model]

    @property
    def display_model_name(self) -> str:
        return self.served_names[0]

    def validate(self) -> None:
        """Raise ConfigError with the reference's message for the first invalid value."""
        if self.port <= 0:
            raise ConfigError(f"invalid port '{self.port}'")
        if not self.model:
            raise ConfigError("model parameter is empty")
        for lm in self.lora_modules:
            if not lm.name:
                raise ConfigError("empty LoRA name")
            if lm.base_model_name and lm.base_model_name != self.model:
                raise ConfigError(f"unknown base model '{lm.base_model_name}' for LoRA '{lm.name}'")
        if self.max_loras < 1:
            raise ConfigError("max LoRAs cannot be less than 1")
        if self.max_cpu_loras and self.max_cpu_loras < self.max_loras:
            raise ConfigError("max CPU LoRAs cannot be less than max LoRAs")
        if self.max_model_len < 1:
            raise ConfigError("max model len cannot be less than 1")
        if self.max_num_seqs < 1:
            raise ConfigError("max num seqs cannot be less than 1")
        if self.max_waiting_queue_length < 0:
            raise ConfigError("max waiting queue size cannot be less than 0")
        if self.mode not in ("random", "echo"):
            raise ConfigError(f"invalid mode '{self.mode}', valid values are 'random' and 'echo'")
        self.validate_latencies()
        if self.max_tool_call_integer_param < self.min_tool_call_integer_param:
            raise ConfigError("MaxToolCallIntegerParam cannot be less than MinToolCallIntegerParam")
        if self.max_tool_call_number_param < self.min_tool_call_number_param:
            raise ConfigError("MaxToolCallNumberParam cannot be less than MinToolCallNumberParam")
        if self.min_tool_call_array_param_length < 0:
            raise ConfigError("MinToolCallArrayParamLength cannot be negative")
        if self.max_tool_call_array_param_length < self.min_tool_call_array_param_length:
            raise ConfigError("MaxToolCallArrayParamLength cannot be less than MinToolCallArrayParamLength")
        for attr, label in (("tool_call_not_required_param_probability", "ToolCallNotRequiredParamProbability"),
                            ("object_tool_call_not_required_field_probability",
                             "ObjectToolCallNotRequiredParamProbability"),
                            ("tool_call_extra_call_probability", "ToolCallExtraCallProbability")):
            if not 0 <= getattr(self, attr) <= 100:
                raise ConfigError(f"{label} should be between 0 and 100")
        if self.kv_cache_size < 0:
            raise ConfigError("KV cache size cannot be negative")
        if not 0 <= self.global_cache_hit_threshold <= 1:
            raise ConfigError("global cache hit threshold must be between in range [0, 1]")
        if self.block_size not in (8, 16, 32, 64, 128):
            raise ConfigError("token block size should be one of the following: 8, 16, 32, 64, 128")
        if self.event_batch_size < 1:
            raise ConfigError("event batch size cannot less than 1")
        self.validate_failures()
        if not 1 <= self.data_parallel_size <= 8:
            raise ConfigError("data parallel size must be between 1 and 8")
        if self.data_parallel_rank > 7:
            raise ConfigError("data parallel rank must be between 0 and 7")
        if self.default_embedding_dimensions < 1:
            raise ConfigError("default embedding dimensions must be at least 1")
        if not 1 <= self.max_request_body_size_mb <= 512:
            raise ConfigError(f"max-request-body-size-mb must be between 1 MB and 512 MB, "
                              f"got {self.max_request_body_size_mb}")
        if self.fake_metrics is not None:
            from .fake_metrics import parse_fake_metrics    # lazy: it imports this module
            parse_fake_metrics(self.fake_metrics, self.max_model_len)
            if self.fake_metrics_refresh_interval <= 0:
                raise ConfigError("fake metrics refresh interval must be positive")
        if not 0 <= self.image_emission_rate <= 100:
            raise ConfigError("image emission rate should be between 0 and 100")
        if self.enable_kvcache and not self.pod_ip:
            raise ConfigError("IP should be defined in the environment (POD_IP) for KV cache to work")
        self.validate_dataset()

    def validate_dataset(self) -> None:
        """Echo mode excludes a dataset; the file must exist and have the expected schema
        (engine.md 1.4, 9.2): the reference reports these at start-up too."""
        if not self.dataset_path:
            return
        if self.mode == "echo":
            raise ConfigError("dataset cannot be defined in echo mode")
        from data.dataset import DatasetError, verify_dataset
        try:
            verify_dataset(self.dataset_path, self.dataset_table_name)
        except DatasetError as e:
            raise ConfigError(str(e)) from None

    def validate_failures(self) -> None:
        if not 0 <= self.failure_injection_rate <= 100:
            raise ConfigError("failure injection rate should be between 0 and 100")
        for t in self.failure_types:
            if t not in FAILURE_TYPES:
                raise ConfigError(f"invalid failure type '{t}', valid types are: " + ", ".join(FAILURE_TYPES))

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
                raise ConfigError(msg)
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
                raise ConfigError(msg)
        if self.time_factor_under_load < 1.0:
            raise ConfigError("time factor under load cannot be less than 1.0")
        if self.latency_calculator not in ("", "constant", "per-token"):
            raise ConfigError(f"unknown latency-calculator {self.latency_calculator}, supported calculators "
                              f"are: constant and per-token")

    # ---- rendering ---------------------------------------------------------------------------
    def to_public_dict(self) -> dict:
        """The configuration as ``GET /admin/config`` shows it: flag names as keys, durations as
        Go duration strings."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in _ENV_FIELDS:
                continue
            key = f.name.replace("_", "-")
            val = getattr(self, f.name)
            spec = OPTIONS.get(key)
            if spec and spec.kind == "duration":
                val = format_duration(val)
            elif key == "lora-modules":
                val = [lm.to_json() for lm in val]
            out[key] = val
        out["IP"] = self.pod_ip
        out["DisplayModelName"] = self.display_model_name
        out["PodName"] = self.pod_name
        out["PodNameSpace"] = self.pod_namespace
        out["VllmDevMode"] = self.vllm_dev_mode
        if self.data_parallel_size > 1:
            out.pop("port", None)
        return out


_ENV_FIELDS = {"pod_ip", "pod_name", "pod_namespace", "vllm_dev_mode"}


# ---------------------------------------------------------------------------------------------
@dataclass
class Option:
    kind: str          # int | float | str | bool | duration | list | lora | json
    help: str


OPTIONS: dict[str, Option] = {
    "port": Option("int", "Port the server listens on"),
    "host": Option("str", "Address the server binds to"),
    "model": Option("str", "Model name (the real model path reported as `root`); env SIM_MODEL"),
    "served-model-name": Option("list", "Public model names (aliases); the first is reported in responses"),
    "lora-modules": Option("lora", 'LoRA adapters as JSON strings {"name","path","base_model_name"}'),
    "max-loras": Option("int", "Maximum number of LoRAs running at once"),
    "max-cpu-loras": Option("int", "Maximum number of LoRAs in CPU memory (validated only)"),
    "max-model-len": Option("int", "Context window in tokens"),
    "max-num-seqs": Option("int", "Maximum number of sequences running at once"),
    "max-waiting-queue-length": Option("int", "Capacity of the waiting queue; beyond it requests get 429"),
    "mode": Option("str", "Response source: random or echo"),
    "seed": Option("int", "Random seed (default: current time)"),
    "time-to-first-token": Option("duration", "Time to first token"),
    "time-to-first-token-std-dev": Option("duration", "Standard deviation of the time to first token"),
    "inter-token-latency": Option("duration", "Time between tokens"),
    "inter-token-latency-std-dev": Option("duration", "Standard deviation of the inter-token latency"),
    "kv-cache-transfer-latency": Option("duration", "KV transfer time for remote prefill (constant)"),
    "kv-cache-transfer-latency-std-dev": Option("duration", "Standard deviation of the KV transfer time"),
    "prefill-overhead": Option("duration", "Fixed prefill time (per-token calculator)"),
    "prefill-time-per-token": Option("duration", "Prefill time per uncached prompt token"),
    "prefill-time-std-dev": Option("duration", "Standard deviation of the prefill time"),
    "kv-cache-transfer-time-per-token": Option("duration", "KV transfer time per prompt token"),
    "kv-cache-transfer-time-std-dev": Option("duration", "Standard deviation of the per-token KV transfer"),
    "time-to-generate-image": Option("duration", "Extra time when an image is emitted (--omni)"),
    "time-to-generate-image-std-dev": Option("duration", "Standard deviation of the image time"),
    "time-factor-under-load": Option("float", "Latency multiplier when all sequences run (>= 1)"),
    "latency-calculator": Option("str", "constant, per-token, or empty for the legacy rule"),
    "max-tool-call-integer-param": Option("int", "Largest generated integer tool argument"),
    "min-tool-call-integer-param": Option("int", "Smallest generated integer tool argument"),
    "max-tool-call-number-param": Option("float", "Largest generated number tool argument"),
    "min-tool-call-number-param": Option("float", "Smallest generated number tool argument"),
    "max-tool-call-array-param-length": Option("int", "Longest generated array tool argument"),
    "min-tool-call-array-param-length": Option("int", "Shortest generated array tool argument"),
    "tool-call-not-required-param-probability": Option("int", "% chance an optional tool parameter is set"),
    "object-tool-call-not-required-field-probability": Option("int", "% chance an optional object field is set"),
    "tool-call-extra-call-probability": Option("int", "% chance of each extra tool call"),
    "skip-tool-validation": Option("bool", "Do not validate tool schemas"),
    "enable-kvcache": Option("bool", "Simulate the prefix KV cache and publish KV events"),
    "kv-cache-size": Option("int", "KV cache size in blocks"),
    "global-cache-hit-threshold": Option("float", "Default cache_hit_threshold for all requests"),
    "block-size": Option("int", "Tokens per KV block (8, 16, 32, 64, 128)"),
    "hash-seed": Option("str", "Seed of the KV block hashes; env PYTHONHASHSEED"),
    "zmq-endpoint": Option("str", "ZMQ endpoint the KV-event publisher connects to"),
    "event-batch-size": Option("int", "Maximum KV events per ZMQ message"),
    "use-vllm-map-event-format": Option("bool", "Encode KV events as maps"),
    "failure-injection-rate": Option("int", "% of requests that fail with an injected error"),
    "failure-types": Option("list", "Injected failure types (default: all)"),
    "data-parallel-size": Option("int", "Number of data-parallel ranks (1..8)"),
    "data-parallel-rank": Option("int", "Rank of this process (-1 = unset)"),
    "startup-duration": Option("duration", "/health/ready answers 503 for this long after start"),
    "enable-sleep-mode": Option("bool", "Allow /sleep (with VLLM_SERVER_DEV_MODE=1)"),
    "enable-request-id-headers": Option("bool", "Use and return the X-Request-Id header"),
    "default-embedding-dimensions": Option("int", "Embedding size when the request gives none"),
    "max-request-body-size-mb": Option("int", "Largest accepted request body, MiB"),
    "force-dummy-tokenizer": Option("bool", "Always use the simulated tokenizer"),
    "tokenizer": Option("str", "Local path of a Hugging Face tokenizer (directory or tokenizer.json)"),
    "omni": Option("bool", "Allow image output in chat responses"),
    "image-emission-rate": Option("int", "% of chat responses carrying an image (--omni)"),
    "mm-encoder-only": Option("bool", "Encoder-only multimodal mode"),
    "worker-connections": Option("int", "Maximum simultaneous client connections (gevent worker)"),
    "dataset-path": Option("str", "SQLite dataset of recorded responses (random mode)"),
    "dataset-table-name": Option("str", "Table of the dataset"),
    "dataset-in-memory": Option("bool", "Copy the dataset into memory at start-up"),
    "fake-metrics": Option("json", "Report these values on /metrics instead of measured ones (JSON object; "
                                   "YAML: an object)"),
    "fake-metrics-refresh-interval": Option("duration", "Time step of generator-valued fake metrics"),
}

# Flags vLLM or the reference accept and this simulator ignores.
IGNORED_OPTIONS = {"mm-processor-kwargs": "str", "ec-transfer-config": "str", "enforce-eager": "bool",
                   "enable-prefix-caching": "bool", "tensor-parallel-size": "int", "render-url": "str",
                   "render-timeout": "duration", "mm-render-timeout": "duration", "log-http": "bool",
                   "dataset-url": "str", "kv-events-replay-endpoint": "str",
                   "kv-events-replay-queue-size": "int", "ssl-certfile": "str",
                   "ssl-keyfile": "str", "self-signed-certs": "bool"}


def _attr(key: str) -> str:
    return key.replace("-", "_")


def coerce(key: str, value: Any, kind: str | None = None) -> Any:
    """Convert a YAML/JSON/CLI value for option ``key`` to its Python type.

    Raises ConfigError naming the option when the value does not fit."""
    kind = kind or OPTIONS[key].kind
    try:
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            v = float(value)
            if math.isnan(v):
                raise ValueError(value)
            return v
        if kind == "str":
            return "" if value is None else str(value)
        if kind == "bool":
            return parse_bool(value)
        if kind == "duration":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value) / 1000.0      # legacy: bare numbers are milliseconds
            return parse_duration(value)
        if kind == "list":
            if value is None:
                return []
            if isinstance(value, str):
                return [value]
            return [str(v) for v in value]
        if kind == "json":                     # CLI: one JSON string; YAML / admin: an object
            obj = json.loads(value) if isinstance(value, str) else value
            if obj is not None and not isinstance(obj, dict):
                raise ValueError("must be a JSON object")
            return obj
        if kind == "lora":
            items = value if isinstance(value, list) else [value]
            out = []
            for it in items:
                obj = json.loads(it) if isinstance(it, str) else it
                if not isinstance(obj, dict):
                    raise ValueError("LoRA module must be a JSON object")
                out.append(LoraModule(str(obj.get("name", "")), str(obj.get("path", "") or ""),
                                      str(obj.get("base_model_name", "") or "")))
            return out
    except ConfigError as e:
        raise ConfigError(f"invalid value for --{key}: {e}") from None
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"invalid value for --{key}: {value!r} ({e})") from None
    raise ConfigError(f"unknown option kind {kind}")


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit
        raise ConfigError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="app.py", description="vLLM simulator", argument_default=argparse.SUPPRESS,
                       allow_abbrev=False)
    p.add_argument("--config", help="YAML file whose keys are the flag names")
    for key, opt in list(OPTIONS.items()) + [(k, Option(v, "accepted and ignored"))
                                             for k, v in IGNORED_OPTIONS.items()]:
        text = opt.help.replace("%", "%%")        # argparse formats help with %
        if opt.kind == "bool":
            p.add_argument(f"--{key}", nargs="?", const="true", help=text)
        elif opt.kind in ("list", "lora"):
            p.add_argument(f"--{key}", nargs="*", help=text)
        else:
            p.add_argument(f"--{key}", help=text)
    for key in ("enable-sleep-mode", "mm-encoder-only", "omni", "enforce-eager", "enable-prefix-caching"):
        p.add_argument(f"--no-{key}", action="store_const", const="false", dest=key,
                       help=argparse.SUPPRESS)
    return p


def load_config(argv: list[str] | None = None, env: dict | None = None) -> SimConfig:
    """Build and validate the configuration from argv, the environment and an optional YAML file.

    Raises ConfigError with one line naming the flag or rule that failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    # `--flag true|false` as a separate token: argparse's nargs='?' already takes it.
    ns = {k.replace("_", "-"): v for k, v in vars(_build_parser().parse_args(argv)).items()}
    cfg = SimConfig()
    values: dict[str, Any] = {}
    path = ns.pop("config", None)
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                doc = yaml.safe_load(fh) or {}
        except OSError as e:
            raise ConfigError(f"failed to read configuration file: {e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"failed to unmarshal configuration: {e}") from None
        if not isinstance(doc, dict):
            raise ConfigError("failed to unmarshal configuration: top level must be a mapping")
        for key, val in doc.items():
            if key in OPTIONS:
                values[key] = coerce(key, val)
            elif key not in IGNORED_OPTIONS:
                raise ConfigError(f"failed to unmarshal configuration: unknown field \"{key}\"")
    if env.get("SIM_MODEL") and "model" not in ns:
        values["model"] = env["SIM_MODEL"]
    if env.get("PYTHONHASHSEED") and "hash-seed" not in ns:
        values["hash-seed"] = env["PYTHONHASHSEED"]
    for key, val in ns.items():
        if key in IGNORED_OPTIONS:
            continue
        values[key] = coerce(key, val)
    for key, val in values.items():
        setattr(cfg, _attr(key), val)
    cfg.pod_ip = env.get("POD_IP", "")
    cfg.pod_name = env.get("POD_NAME", "")
    cfg.pod_namespace = env.get("POD_NAMESPACE", "")
    cfg.vllm_dev_mode = env.get("VLLM_SERVER_DEV_MODE", "") == "1"
    if cfg.seed is None:
        cfg.seed = time.time_ns()
    cfg.validate()
    return cfg


def options_table() -> str:
    """Markdown table of the flags, for the README."""
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    d = SimConfig()
    for key, opt in OPTIONS.items():
        val = getattr(d, _attr(key))
        if opt.kind == "duration":
            val = format_duration(val)
        rows.append(f"| `--{key}` | `{val!r}` | {opt.help} |" if not isinstance(val, str)
                    else f"| `--{key}` | `{val}` | {opt.help} |")
    return "\n".join(rows)
