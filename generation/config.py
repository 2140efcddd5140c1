"""Simulator configuration: every option declared once, and everything derived from that.

Each option is one :class:`Option` in :data:`OPTIONS` (name = the vLLM / reference flag name,
type, default, unit, help, group, environment variable, admin-settable or not, bounds).  The
command line (argparse), the ``--config`` YAML file, the environment, ``GET/POST /admin/config``
and the README flags table (:func:`options_table`) are all generated from it.  Groups follow
vLLM's config classes (ModelConfig, SchedulerConfig, CacheConfig, ...) plus the simulator's own
(latency, tools, faults).

Reading: ``config.<flag_name_with_underscores>`` (``config.max_num_seqs``).  Durations are
stored in seconds (float) and accept Go-style strings (``100ms``, ``1.5s``, ``2m30s``; bare
``0``; a bare number is the reference's legacy milliseconds) on the command line, in YAML and in
``POST /admin/config`` (where a JSON number means nanoseconds).  Booleans accept ``--flag``,
``--flag=false``, ``--flag false`` and ``--no-flag``.

Precedence, lowest to highest (reference engine.md 1.3/1.4): built-in defaults < YAML file <
environment (``SIM_MODEL``, ``PYTHONHASHSEED``, ``VLLM_API_KEY``) < command line.
Validation messages are the reference's (engine.md 1.4) where it has the option.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from .fake_metrics_spec import parse_fake_metrics
from .option_values import (BOOL_LITERALS, ConfigError, format_duration, parse_bool,  # noqa: F401
                            parse_duration)

DEFAULT_MODEL = "test-model"

FAILURE_TYPES = ("rate_limit", "invalid_api_key", "context_length", "server_error",
                 "invalid_request", "model_not_found")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
HASH_ALGOS = ("fnv64a_cbor", "sha256_cbor")
MAX_LATENCY = 3600.0            # seconds: upper bound of every latency option (CLI, YAML, admin)
MAX_TIME_FACTOR = 1000.0


# ---------------------------------------------------------------------------------------------
@dataclass
class LoraModule:
    name: str
    path: str = ""
    base_model_name: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "path": self.path, "base_model_name": self.base_model_name}


@dataclass(frozen=True)
class Option:
    """One option.  ``type``: int | float | str | bool | duration (seconds) | list (of str) |
    lora (list of LoraModule) | json (object or None).  ``env``: environment variable that sets
    it (beats YAML, loses to the command line).  ``admin``: settable at run time through
    ``POST /admin/config``.  ``cli=False``: environment only (``POD_IP``...), shown by
    ``GET /admin/config`` under ``shown_as``.  ``maximum``: inclusive upper bound (floats and
    durations; every float and duration must also be finite).  ``secret``: masked when shown."""
    name: str
    type: str
    default: Any
    help: str
    group: str = ""
    unit: str = ""
    env: str | None = None
    admin: bool = False
    choices: tuple = ()
    aliases: tuple = ()
    maximum: float | None = None
    cli: bool = True
    shown_as: str | None = None
    secret: bool = False
    nullable: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")


GROUPS = {   # group -> title (vLLM's config class where there is one)
    "model": "Model (vLLM ModelConfig)",
    "server": "Server and deployment (vLLM frontend)",
    "frontend": "OpenAI API behaviour (vLLM frontend)",
    "scheduler": "Scheduler (vLLM SchedulerConfig)",
    "latency": "Latency (simulator)",
    "cache": "KV cache and KV events (vLLM CacheConfig, KVEventsConfig)",
    "lora": "LoRA (vLLM LoRAConfig)",
    "tokenizer": "Tokenizer and rendering",
    "dataset": "Response dataset (simulator)",
    "tools": "Tool-call synthesis (simulator)",
    "faults": "Failure injection (simulator)",
    "metrics": "Metrics",
    "multimodal": "Multimodal",
    "parallel": "Parallelism (vLLM ParallelConfig)",
    "environment": "Environment only",
}

OPTIONS: dict[str, Option] = {}


def _declare(group: str, *options: Option) -> None:
    for o in options:
        OPTIONS[o.name] = Option(**{**o.__dict__, "group": group})


_D = "duration"
_lat = dict(type=_D, default=0.0, unit="s", admin=True, maximum=MAX_LATENCY)

_declare("model",
         Option("model", "str", DEFAULT_MODEL, "Model name (the real model path reported as `root`); also "
                "the first positional argument", env="SIM_MODEL"),
         Option("served-model-name", "list", [], "Public model names (aliases); the first is reported in "
                "responses"),
         Option("max-model-len", "int", 1024, "Context window", unit="tokens"),
         Option("seed", "int", None, "Random seed", nullable=True),
         Option("mode", "str", "random", "Response source", choices=("random", "echo")))
_declare("server",
         Option("port", "int", 8000, "Port the server listens on"),
         Option("host", "str", "0.0.0.0", "Address the server binds to"),
         Option("api-key", "str", "", "Require `Authorization: Bearer KEY` (or `x-api-key`) on inference, "
                "admin and LoRA routes", env="VLLM_API_KEY", secret=True),
         Option("ssl-certfile", "str", "", "PEM certificate file: serve HTTPS"),
         Option("ssl-keyfile", "str", "", "PEM private key of --ssl-certfile"),
         Option("ssl-ca-certs", "str", "", "CA certificates file (client certificates)"),
         Option("self-signed-certs", "bool", False, "Serve HTTPS with a certificate made at start-up"),
         Option("disable-log-requests", "bool", False, "No access log line per request"),
         Option("log-http", "bool", False, "Log each request's method, URI, remote address, headers and body"),
         Option("log-level", "str", "info", "Log level", choices=LOG_LEVELS, aliases=("--uvicorn-log-level",)),
         Option("timeout-keep-alive", "int", 5, "Seconds an idle keep-alive connection stays open (vLLM's "
                "uvicorn default; 0: close after each response)", unit="s"),
         Option("shutdown-timeout", "float", 30.0, "Grace period for in-flight streams on SIGTERM",
                unit="s", maximum=MAX_LATENCY),
         Option("startup-duration", _D, 0.0, "/health/ready answers 503 for this long after start",
                unit="s"),
         Option("enable-sleep-mode", "bool", False, "Allow /sleep (with VLLM_SERVER_DEV_MODE=1)"),
         Option("enable-request-id-headers", "bool", False, "Use and return the X-Request-Id header"),
         Option("max-request-body-size-mb", "int", 4, "Largest accepted request body", unit="MiB"),
         Option("worker-connections", "int", 10000, "Maximum simultaneous client connections (gevent worker)"))
_declare("frontend",
         Option("max-logprobs", "int", 20, "Largest `logprobs` / `top_logprobs` a request may ask (-1: no cap)"),
         Option("enable-force-include-usage", "bool", False, "Every stream reports usage, as if "
                "`stream_options.include_usage` were set"),
         Option("default-embedding-dimensions", "int", 384, "Embedding size when the request gives none"))
_declare("scheduler",
         Option("max-num-seqs", "int", 5, "Maximum number of sequences running at once"),
         Option("max-waiting-queue-length", "int", 1000, "Capacity of the waiting queue; beyond it requests "
                "get 429"))
_declare("latency",
         Option("time-to-first-token", help="Time to first token", **_lat),
         Option("time-to-first-token-std-dev", help="Standard deviation of the time to first token", **_lat),
         Option("inter-token-latency", help="Time between tokens", **_lat),
         Option("inter-token-latency-std-dev", help="Standard deviation of the inter-token latency", **_lat),
         Option("kv-cache-transfer-latency", help="KV transfer time for remote prefill (constant)", **_lat),
         Option("kv-cache-transfer-latency-std-dev", help="Standard deviation of the KV transfer time", **_lat),
         Option("prefill-overhead", help="Fixed prefill time (per-token calculator)", **_lat),
         Option("prefill-time-per-token", help="Prefill time per uncached prompt token", **_lat),
         Option("prefill-time-std-dev", help="Standard deviation of the prefill time", **_lat),
         Option("kv-cache-transfer-time-per-token", help="KV transfer time per prompt token", **_lat),
         Option("kv-cache-transfer-time-std-dev", help="Standard deviation of the per-token KV transfer", **_lat),
         Option("time-to-generate-image", help="Extra time when an image is emitted (--omni)", **_lat),
         Option("time-to-generate-image-std-dev", help="Standard deviation of the image time", **_lat),
         Option("time-factor-under-load", "float", 1.0, "Latency multiplier when all sequences run (>= 1)",
                admin=True, maximum=MAX_TIME_FACTOR),
         Option("latency-calculator", "str", "", "`constant`, `per-token`, or empty for the legacy rule",
                admin=True, choices=("", "constant", "per-token")))
_declare("cache",
         Option("enable-kvcache", "bool", False, "Simulate the prefix KV cache and publish KV events"),
         Option("kv-cache-size", "int", 1024, "KV cache size", unit="blocks"),
         Option("global-cache-hit-threshold", "float", 0.0, "Default cache_hit_threshold for all requests",
                maximum=1.0),
         Option("block-size", "int", 16, "Tokens per KV block", choices=(8, 16, 32, 64, 128), unit="tokens"),
         Option("hash-seed", "str", "", "Seed of the KV block hashes", env="PYTHONHASHSEED"),
         Option("prefix-caching-hash-algo", "str", HASH_ALGOS[0], "KV block hash: the reference's FNV-1a 64 "
                "over CBOR, or vLLM's sha256_cbor", choices=HASH_ALGOS),
         Option("zmq-endpoint", "str", "tcp://127.0.0.1:5557", "ZMQ endpoint the KV-event publisher connects to"),
         Option("event-batch-size", "int", 16, "Maximum KV events per ZMQ message"),
         Option("use-vllm-map-event-format", "bool", False, "Encode KV events as maps"),
         Option("kv-events-replay-endpoint", "str", "", "ZMQ ROUTER endpoint serving replays of published "
                "KV-event batches (empty: off)"),
         Option("kv-events-replay-queue-size", "int", 1024, "Published batches kept for replay", unit="batches"))
_declare("lora",
         Option("lora-modules", "lora", [], 'LoRA adapters: `name=path` or JSON {"name","path","base_model_name"}'),
         Option("max-loras", "int", 1, "Maximum number of LoRAs running at once"),
         Option("max-cpu-loras", "int", 0, "Maximum number of LoRAs kept loaded (0: --max-loras)"))
_declare("tokenizer",
         Option("tokenizer", "str", "", "Local path of a Hugging Face tokenizer (directory or tokenizer.json)"),
         Option("force-dummy-tokenizer", "bool", False, "Always use the simulated tokenizer"),
         Option("tokenizers-cache-dir", "str", "", "Directory of downloaded tokenizers (empty: Hugging Face's "
                "default cache)"),
         Option("chat-template", "str", "", "Chat template: a Jinja file path or the template itself"),
         Option("trust-request-chat-template", "bool", False, "Accept a chat_template sent with a request "
                "(vLLM's flag; without it such requests get 400)"),
         Option("render-url", "str", "", "vLLM render service that tokenizes prompts (empty: tokenize locally)"),
         Option("render-timeout", _D, 30.0, "Timeout of a render-service call", unit="s"),
         Option("mm-render-timeout", _D, 60.0, "Timeout of a render-service call with images", unit="s"))
_declare("dataset",
         Option("dataset-path", "str", "", "SQLite dataset of recorded responses (random mode)"),
         Option("dataset-url", "str", "", "Download the dataset from here when --dataset-path does not exist"),
         Option("dataset-table-name", "str", "llmd", "Table of the dataset"),
         Option("dataset-in-memory", "bool", False, "Copy the dataset into memory at start-up"))
_declare("tools",
         Option("max-tool-call-integer-param", "int", 100, "Largest generated integer tool argument"),
         Option("min-tool-call-integer-param", "int", 0, "Smallest generated integer tool argument"),
         Option("max-tool-call-number-param", "float", 100.0, "Largest generated number tool argument"),
         Option("min-tool-call-number-param", "float", 0.0, "Smallest generated number tool argument"),
         Option("max-tool-call-array-param-length", "int", 5, "Longest generated array tool argument"),
         Option("min-tool-call-array-param-length", "int", 1, "Shortest generated array tool argument"),
         Option("tool-call-not-required-param-probability", "int", 50, "Chance an optional tool parameter is set",
                unit="%"),
         Option("object-tool-call-not-required-field-probability", "int", 50, "Chance an optional object field "
                "is set", unit="%"),
         Option("tool-call-extra-call-probability", "int", 45, "Chance of each extra tool call", unit="%"),
         Option("skip-tool-validation", "bool", False, "Do not validate tool schemas"))
_declare("faults",
         Option("failure-injection-rate", "int", 0, "Requests that fail with an injected error", unit="%",
                admin=True),
         Option("failure-types", "list", [], "Injected failure types (default: all)", admin=True,
                choices=FAILURE_TYPES))
_declare("metrics",
         Option("fake-metrics", "json", None, "Report these values on /metrics instead of measured ones (JSON "
                "object; YAML: an object)", admin=True, nullable=True),
         Option("fake-metrics-refresh-interval", _D, 0.1, "Time step of generator-valued fake metrics", unit="s"))
_declare("multimodal",
         Option("omni", "bool", False, "Allow image output in chat responses"),
         Option("image-emission-rate", "int", 0, "Chat responses carrying an image (--omni)", unit="%", admin=True),
         Option("mm-encoder-only", "bool", False, "Encoder-only multimodal mode"))
_declare("parallel",
         Option("data-parallel-size", "int", 1, "Number of data-parallel ranks (1..8)"),
         Option("data-parallel-rank", "int", -1, "Rank of this process (-1 = unset)"))
_declare("environment",
         Option("pod-ip", "str", "", "Pod address (KV-event topic; required with --enable-kvcache)",
                env="POD_IP", cli=False, shown_as="IP"),
         Option("pod-name", "str", "", "Adds `x-inference-pod` / `x-inference-port` response headers",
                env="POD_NAME", cli=False, shown_as="PodName"),
         Option("pod-namespace", "str", "", "Adds the `x-inference-namespace` response header",
                env="POD_NAMESPACE", cli=False, shown_as="PodNameSpace"),
         Option("vllm-dev-mode", "bool", False, "`1` enables development routes (/sleep)",
                env="VLLM_SERVER_DEV_MODE", cli=False, shown_as="VllmDevMode"))

ADMIN_KEYS = tuple(k for k, o in OPTIONS.items() if o.admin)

# vLLM `serve` (and reference) flags accepted and ignored: name -> takes a value (False: a
# boolean switch).  Aliases (`-tp`) map to the long name in _IGNORED_ALIASES.
IGNORED_FLAGS: dict[str, bool] = {
    # model / loading
    "dtype": True, "trust-remote-code": False, "quantization": True, "revision": True,
    "code-revision": True, "tokenizer-revision": True, "tokenizer-mode": True, "download-dir": True,
    "load-format": True, "config-format": True, "hf-config-path": True, "hf-token": True,
    "hf-overrides": True, "generation-config": True, "override-generation-config": True, "task": True,
    "runner": True, "convert": True, "model-impl": True, "max-seq-len-to-capture": True,
    "disable-sliding-window": False, "skip-tokenizer-init": False, "enforce-eager": False,
    "compilation-config": True, "logits-processors": True, "allowed-local-media-path": True,
    # memory / cache / scheduler
    "gpu-memory-utilization": True, "kv-cache-dtype": True, "swap-space": True, "cpu-offload-gb": True,
    "num-gpu-blocks-override": True, "enable-prefix-caching": False, "max-num-batched-tokens": True,
    "enable-chunked-prefill": False, "max-num-partial-prefills": True,
    "long-prefill-token-threshold": True, "scheduling-policy": True, "async-scheduling": False,
    "kv-transfer-config": True, "kv-events-config": True, "ec-transfer-config": True,
    "speculative-config": True, "num-scheduler-steps": True, "calculate-kv-scales": False,
    # parallelism
    "tensor-parallel-size": True, "pipeline-parallel-size": True, "distributed-executor-backend": True,
    "enable-expert-parallel": False, "data-parallel-address": True, "data-parallel-rpc-port": True,
    "data-parallel-size-local": True, "data-parallel-start-rank": True, "data-parallel-backend": True,
    "api-server-count": True, "headless": False, "disable-custom-all-reduce": False,
    "worker-cls": True, "enable-eplb": False,
    # LoRA
    "enable-lora": False, "max-lora-rank": True, "lora-dtype": True, "fully-sharded-loras": False,
    "enable-lora-bias": False, "long-lora-scaling-factors": True,
    # tools / reasoning / structured output
    "enable-auto-tool-choice": False, "tool-call-parser": True, "tool-parser-plugin": True,
    "reasoning-parser": True, "guided-decoding-backend": True, "structured-outputs-config": True,
    "tool-server": True, "exclude-tools-when-tool-choice-none": False,
    # frontend / logging
    "disable-log-stats": False, "enable-log-requests": False, "enable-log-outputs": False,
    "max-log-len": True, "disable-uvicorn-access-log": False, "disable-fastapi-docs": False,
    "enable-prompt-tokens-details": False, "enable-server-load-tracking": False,
    "enable-tokenizer-info-endpoint": False, "return-tokens-as-token-ids": False,
    "disable-frontend-multiprocessing": False, "response-role": True,
    "chat-template-content-format": True, "allowed-origins": True, "allowed-methods": True,
    "allowed-headers": True, "allow-credentials": False, "root-path": True, "middleware": True,
    "uds": True, "ssl-cert-reqs": True, "enable-ssl-refresh": False, "h11-max-incomplete-event-size": True,
    "h11-max-header-count": True, "otlp-traces-endpoint": True, "collect-detailed-traces": True,
    "limit-mm-per-prompt": True, "mm-processor-kwargs": True, "mm-processor-cache-gb": True,
    "max-parallel-loading-workers": True, "model-loader-extra-config": True, "use-tqdm-on-load": False,
    "logits-processor-pattern": True, "quantization-param-path": True, "num-lookahead-slots": True,
    "preemption-mode": True, "scheduler-delay-factor": True, "max-long-partial-prefills": True,
    "disable-cascade-attn": False, "tokenizer-pool-size": True, "enable-prompt-embeds": False,
    "max-context-len-to-capture": True, "use-v2-block-manager": False, "worker-use-ray": False,
    "ray-workers-use-nsight": False, "attention-backend": True, "cuda-graph-sizes": True,
    "max-cudagraph-capture-size": True, "kv-cache-memory-bytes": True, "kv-offloading-size": True,
    "kv-offloading-backend": True, "lora-extra-vocab-size": True, "speculative-model": True,
    "num-speculative-tokens": True, "disable-mm-preprocessor-cache": False, "pooler-config": True,
    "override-pooler-config": True, "show-hidden-metrics-for-version": True, "enable-mfu-metrics": False,
    "pt-load-map-location": True, "safetensors-load-strategy": True, "disable-chunked-mm-input": False,
}
_IGNORED_ALIASES = {"-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size", "-q": "quantization",
                    "-O": "compilation-config"}
_OPTION_ALIASES = {"-dp": "data-parallel-size"}     # vLLM's short forms of real options


# ---------------------------------------------------------------------------------------------
def coerce(key: str, value: Any, kind: str | None = None) -> Any:
    """Convert a YAML/JSON/CLI value for option ``key`` to its Python type.

    Floats and durations must be finite.  Raises ConfigError naming the option (``param`` =
    ``key``) when the value does not fit."""
    opt = OPTIONS.get(key)
    kind = kind or opt.type
    try:
        if value is None and opt is not None and opt.nullable:
            return None
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            v = float(value)
            if not math.isfinite(v):
                raise ValueError("must be a finite number")
            return v
        if kind == "str":
            return "" if value is None else str(value)
        if kind == "bool":
            return parse_bool(value)
        if kind == "duration":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                v = float(value) / 1000.0      # legacy: bare numbers are milliseconds
            else:
                v = parse_duration(value)
            if not math.isfinite(v):
                raise ValueError("must be a finite duration")
            return v
        if kind == "list":
            if value is None:
                return []
            if isinstance(value, str):
                return [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError("must be a list")
            return [str(v) for v in value]
        if kind == "json":                     # CLI: one JSON string; YAML / admin: an object
            obj = json.loads(value) if isinstance(value, str) else value
            if obj is not None and not isinstance(obj, dict):
                raise ValueError("must be a JSON object")
            return obj
        if kind == "lora":
            return [_lora_module(it) for it in (value if isinstance(value, list) else [value])]
    except ConfigError as e:
        raise ConfigError(f"invalid value for --{key}: {e}", key) from None
    except (ValueError, TypeError, OverflowError, json.JSONDecodeError) as e:
        raise ConfigError(f"invalid value for --{key}: {value!r} ({e})", key) from None
    raise ConfigError(f"unknown option kind {kind}")


def _lora_module(item: Any) -> LoraModule:
    """vLLM's two forms: ``name=path`` or a JSON object ``{"name","path","base_model_name"}``."""
    if isinstance(item, str) and not item.lstrip().startswith("{"):
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError("expected name=path or a JSON object")
        return LoraModule(name.strip(), path.strip())
    obj = json.loads(item) if isinstance(item, str) else item
    if not isinstance(obj, dict):
        raise ValueError("LoRA module must be a JSON object")
    return LoraModule(str(obj.get("name", "")), str(obj.get("path", "") or ""),
                      str(obj.get("base_model_name", "") or ""))


# ---------------------------------------------------------------------------------------------
class SimConfig:
    """All simulator options as attributes named like the flags with ``-`` -> ``_``.

    One live instance is shared by the engine and its parts.  It is never modified field by
    field at run time: ``POST /admin/config`` builds a validated :meth:`updated` copy and
    :meth:`swap` installs all of its values in one step."""

    def __init__(self, **values: Any):
        for o in OPTIONS.values():
            setattr(self, o.attr, copy.deepcopy(o.default))
        self.ignored_flags: list[str] = []         # vLLM flags given and ignored (start-up log)
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

    # ---- run-time updates --------------------------------------------------------------------
    def copy(self) -> "SimConfig":
        new = object.__new__(SimConfig)
        new.__dict__ = copy.deepcopy(self.__dict__)
        return new

    def updated(self, changes: dict) -> "SimConfig":
        """A validated copy with ``changes`` (flag name -> JSON value) applied; only admin keys
        (``Option.admin``).  Durations: a Go string or a JSON number of nanoseconds.  Raises
        ConfigError (``param`` = the flag at fault) and leaves this object unchanged."""
        trial = self.copy()
        for key, value in changes.items():
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
        if self.max_loras < 1:
            raise ConfigError("max LoRAs cannot be less than 1", "max-loras")
        if self.max_cpu_loras and self.max_cpu_loras < self.max_loras:
            raise ConfigError("max CPU LoRAs cannot be less than max LoRAs", "max-cpu-loras")
        if self.max_model_len < 1:
            raise ConfigError("max model len cannot be less than 1", "max-model-len")
        if self.max_num_seqs < 1:
            raise ConfigError("max num seqs cannot be less than 1", "max-num-seqs")
        if self.max_waiting_queue_length < 0:
            raise ConfigError("max waiting queue size cannot be less than 0", "max-waiting-queue-length")
        if self.mode not in ("random", "echo"):
            raise ConfigError(f"invalid mode '{self.mode}', valid values are 'random' and 'echo'", "mode")
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
        if self.fake_metrics is not None:
            try:
                parse_fake_metrics(self.fake_metrics, self.max_model_len)
            except ConfigError as e:
                raise ConfigError(str(e), "fake-metrics") from None
            if self.fake_metrics_refresh_interval <= 0:
                raise ConfigError("fake metrics refresh interval must be positive", "fake-metrics-refresh-interval")
        self.validate_failures()
        if not 1 <= self.data_parallel_size <= 8:
            raise ConfigError("data parallel size must be between 1 and 8", "data-parallel-size")
        if self.data_parallel_rank > 7:
            raise ConfigError("data parallel rank must be between 0 and 7", "data-parallel-rank")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            missing = "ssl-keyfile" if self.ssl_certfile else "ssl-certfile"     # name it (case C37)
            raise ConfigError(f"--{missing} is missing: both ssl-certfile and ssl-keyfile must be provided "
                              f"together", missing)
        if self.self_signed_certs and self.ssl_certfile:
            raise ConfigError("cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile",
                              "self-signed-certs")
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
        if self.worker_connections < 1:
            raise ConfigError("worker-connections cannot be less than 1", "worker-connections")
        if self.timeout_keep_alive < 0:
            raise ConfigError("timeout-keep-alive cannot be negative", "timeout-keep-alive")
        self._validate_generic()
        if self.enable_kvcache and not self.pod_ip:
            raise ConfigError("IP should be defined in the environment (POD_IP) for KV cache to work", "pod-ip")

    def _validate_generic(self) -> None:
        """Rules every option of a type follows: choices, finite and non-negative durations and
        floats within their declared maximum."""
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
        if self.latency_calculator not in ("", "constant", "per-token"):
            raise ConfigError(f"unknown latency-calculator {self.latency_calculator}, supported calculators "
                              f"are: constant and per-token", "latency-calculator")

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
    order given (``--dtype``, ``-tp`` ...), for the one start-up log line."""
    return [f"--{n}" for n in getattr(config, "ignored_flags", [])]


# ---------------------------------------------------------------------------------------------
class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit
        raise ConfigError(message)


def _default_text(o: Option) -> str:
    """The default as the help text and the README show it."""
    if o.name == "seed":
        return "current time"
    if o.secret or o.default in ("", [], None):
        return "none"
    if o.type == "duration":
        return format_duration(o.default)
    if o.type == "bool":
        return "true" if o.default else "false"
    return str(o.default)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line: ``[serve] [MODEL] [--flag value ...]``, generated from OPTIONS."""
    p = _OneLineParser(prog=prog, usage="%(prog)s [serve] [MODEL] [--flag VALUE ...]", description="vLLM simulator: serves vLLM's OpenAI-compatible API with "
                       "simulated generation.", argument_default=argparse.SUPPRESS, allow_abbrev=False)
    p.add_argument("model_tag", nargs="?", metavar="MODEL", help="Model name (as `vllm serve MODEL`); "
                   "overrides --model")
    p.add_argument("--config", help="YAML file whose keys are the flag names")
    for group, title in GROUPS.items():
        opts = [o for o in OPTIONS.values() if o.group == group and o.cli]
        if not opts:
            continue
        g = p.add_argument_group(title)
        for o in opts:
            text = o.help
            if o.choices:
                text += " (choices: " + ", ".join(repr(c) if c == "" else str(c) for c in o.choices) + ")"
            if o.env:
                text += f" [env {o.env}]"
            if o.admin:
                text += " [admin]"
            unit = f" {o.unit}" if o.unit and o.type != "duration" else ""
            text += f" (default: {_default_text(o)}{unit})"
            names = _flag_names(o)
            if o.type in ("list", "lora"):
                g.add_argument(*names, dest=o.name, nargs="*", help=text.replace("%", "%%"))
            else:
                g.add_argument(*names, dest=o.name, metavar="BOOL" if o.type == "bool" else o.type.upper(),
                               help=text.replace("%", "%%"))
                if o.type == "bool":
                    g.add_argument(f"--no-{o.name}", action="store_const", const="false", dest=o.name,
                                   help=argparse.SUPPRESS)
    g = p.add_argument_group("vLLM flags accepted and ignored", "Listed in one start-up log line.")
    for name, takes_value in IGNORED_FLAGS.items():
        names = [f"--{name}"] + [a for a, n in _IGNORED_ALIASES.items() if n == name]
        g.add_argument(*names, dest="ignored:" + name, metavar="X" if takes_value else "BOOL",
                       help=argparse.SUPPRESS)
        if not takes_value:
            g.add_argument(f"--no-{name}", action="store_const", const="false", dest="ignored:" + name,
                           help=argparse.SUPPRESS)
    return p


def _flag_names(o: Option) -> list[str]:
    return [f"--{o.name}", *o.aliases] + [a for a, n in _OPTION_ALIASES.items() if n == o.name]


_BOOL_FLAGS = {f for o in OPTIONS.values() if o.type == "bool" and o.cli for f in _flag_names(o)} | \
    {f"--{n}" for n, v in IGNORED_FLAGS.items() if not v}
_VALUE_FLAGS = {f for o in OPTIONS.values() if o.cli and o.type not in ("bool", "list", "lora")
                for f in _flag_names(o)} | {"--config"} | \
    {f"--{n}" for n, v in IGNORED_FLAGS.items() if v} | \
    {a for a, n in _IGNORED_ALIASES.items() if IGNORED_FLAGS[n]}
_ALL_FLAGS = _BOOL_FLAGS | _VALUE_FLAGS | {"-h", "--help"} | set(_IGNORED_ALIASES) | \
    {f for o in OPTIONS.values() if o.cli for f in _flag_names(o)} | \
    {f"--no-{o.name}" for o in OPTIONS.values() if o.type == "bool"} | {f"--no-{n}" for n in IGNORED_FLAGS}


def _normalise(argv: list[str]) -> list[str]:
    """Joins flags and values where argparse would guess wrong:

    * a boolean switch takes the next token only when it is a boolean literal (``--flag false``),
      so ``--enforce-eager MODEL`` keeps MODEL positional;
    * a value that starts with ``-`` (``--time-to-first-token -1s``) stays the flag's value, so
      that validation can name the flag instead of argparse saying "expected one argument"."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok == "--":
            out.extend(argv[i:])
            break
        if tok in _BOOL_FLAGS:
            if nxt in BOOL_LITERALS:
                out.append(f"{tok}={nxt}")
                i += 2
                continue
            out.append(f"{tok}=true")
        elif tok in _VALUE_FLAGS and nxt is not None and nxt.startswith("-") and nxt not in _ALL_FLAGS:
            out.append(f"{tok}={nxt}")
            i += 2
            continue
        else:
            out.append(tok)
        i += 1
    return out


def _read_yaml(path: str) -> dict:
    import yaml          # only --config needs it (about 30 ms of start-up otherwise)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as e:
        raise ConfigError(f"failed to read configuration file: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"failed to unmarshal configuration: {e}".replace("\n", " ")) from None
    if not isinstance(doc, dict):
        raise ConfigError("failed to unmarshal configuration: top level must be a mapping")
    return doc


def load_config(argv: list[str] | None = None, env: dict | None = None) -> SimConfig:
    """Build and validate the configuration from argv, the environment and an optional YAML file.

    ``argv`` may start with ``serve`` (``vllm serve`` style) and carry the model positionally.
    Raises ConfigError with one line naming the flag or rule that failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    env = dict(os.environ if env is None else env)
    ns = vars(build_parser().parse_args(_normalise(argv)))
    ignored = [k.split(":", 1)[1] for k in ns if k.startswith("ignored:")]
    ns = {k: v for k, v in ns.items() if not k.startswith("ignored:")}
    if ns.get("model_tag") is not None:
        ns["model"] = ns.pop("model_tag")
    ns.pop("model_tag", None)
    values: dict[str, Any] = {}
    path = ns.pop("config", None)
    if path:
        for key, val in _read_yaml(path).items():
            o = OPTIONS.get(key)
            if o is not None and o.cli:
                values[key] = coerce(key, val)
            elif key in IGNORED_FLAGS:
                ignored.append(key)
            else:
                raise ConfigError(f"failed to unmarshal configuration: unknown field \"{key}\"")
    for o in OPTIONS.values():
        if o.env and o.name not in ns:
            raw = env.get(o.env)
            if o.cli and raw:                   # an empty variable does not override
                values[o.name] = coerce(o.name, raw)
            elif not o.cli:
                values[o.name] = (raw == "1") if o.type == "bool" else coerce(o.name, raw or "")
    for key, val in ns.items():
        values[key] = coerce(key, val)
    cfg = SimConfig()
    for key, val in values.items():
        setattr(cfg, OPTIONS[key].attr, val)
    cfg.ignored_flags = list(dict.fromkeys(ignored))
    if cfg.seed is None:
        cfg.seed = time.time_ns()
    cfg.validate()
    return cfg


# ---------------------------------------------------------------------------------------------
def options_table() -> str:
    """Markdown table of the flags for the README, one section per group (generated: the README
    holds exactly this text between its ``flags-table`` markers)."""
    out = []
    for group, title in GROUPS.items():
        opts = [o for o in OPTIONS.values() if o.group == group]
        if not opts:
            continue
        out += [f"**{title}**", "", "| flag | type | default | meaning |", "|---|---|---|---|"]
        for o in opts:
            flag = f"`--{o.name}`" if o.cli else f"env `{o.env}`"
            if o.aliases:
                flag += " (" + ", ".join(f"`{a}`" for a in o.aliases) + ")"
            kind = o.type + (f" ({o.unit})" if o.unit else "")
            text = o.help.replace("|", "\\|")
            if o.choices:
                text += ": " + ", ".join(f"`{c}`" if c != "" else "empty" for c in o.choices)
            if o.maximum is not None:
                text += f"; at most {format_duration(o.maximum) if o.type == 'duration' else f'{o.maximum:g}'}"
            notes = [f"env `{o.env}`" for _ in [0] if o.env and o.cli] + (["admin"] if o.admin else [])
            if notes:
                text += " (" + ", ".join(notes) + ")"
            out.append(f"| {flag} | {kind} | `{_default_text(o)}` | {text} |")
        out.append("")
    ignored = ", ".join(f"`--{n}`" for n in IGNORED_FLAGS)
    aliases = ", ".join(f"`{a}`" for a in _IGNORED_ALIASES)
    out.append(f"**Accepted and ignored** (one start-up log line lists those given): {ignored}; "
               f"short forms {aliases}.")
    return "\n".join(out)
