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

import json
import math
from dataclasses import dataclass
from typing import Any

from .values import ConfigError, human_readable_int, parse_bool, parse_duration  # noqa: F401 - imported from here too
from .values import LoraModule, _lora_module  # noqa: F401 - imported from here too
from .reasoning_parsers import PARSERS
from .vllm_versions import NEWEST as NEWEST_VLLM


DEFAULT_MODEL = "test-model"

FAILURE_TYPES = ("rate_limit", "invalid_api_key", "context_length", "server_error", "invalid_request", "model_not_found")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
HASH_ALGOS = ("fnv64a_cbor", "sha256_cbor", "sha256")
MAX_LATENCY = 3600.0            # seconds: upper bound of every latency option (CLI, YAML, admin)
MAX_TIME_FACTOR = 1000.0
REASONING_PARSERS = tuple(PARSERS)      # vLLM 0.34's --reasoning-parser names (.reasoning_parsers)
ALL2ALL_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",     # vLLM 0.34's
                    "flashinfer_all2allv", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "moonep", "mori",
                    "mori_high_throughput", "mori_low_latency", "naive", "nixl_ep", "pplx", "passthrough")


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option.  ``type``: int | float | str | bool | duration (seconds) | list (of str) |
    ints (list of int) | size (int; ``8G``, ``500M``, ``2k`` as vLLM's ``human_readable_int``) |
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
    "reasoning": "Reasoning models (vLLM --reasoning-parser)",
    "faults": "Failure injection (simulator)",
    "metrics": "Metrics",
    "multimodal": "Multimodal",
    "parallel": "Parallelism (vLLM ParallelConfig)",
    "fleet": "Fleet: many simulated pods in one process (simulator)",
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
         Option("max-model-len", "size", 1024, "Context window (`32k` = 32,000 as vLLM reads it; `auto` or -1: the "
                "model's, as when not given)", unit="tokens"),
         Option("seed", "int", None, "Random seed", nullable=True),
         Option("mode", "str", "random", "Response source", choices=("random", "echo")),
         Option("response-length", "str", "histogram", "Random mode's length of an answer with a max-tokens "
                "cap: `histogram` (the spec's six buckets: many answers end with `stop` before the cap), `max` "
                "(every capped answer runs to its cap, `length`, as with ignore_eos) or `natural` (the shorter of "
                "the cap and the answer's own length, an uncapped answer's Normal(40, 20) but at least 20 tokens: "
                "a small real model's short answers run to the cap, its long caps end with `stop`; what vLLM's "
                "own tests expect)", choices=("histogram", "max", "natural")),
         Option("hf-config-path", "str", "", "Directory or file of the model's config.json: the default "
                "--max-model-len in every mode, and in step mode the architecture (else the Hugging Face cache, "
                "then the shipped presets)"),
         Option("quantization", "str", "", "Weight quantization (step mode: `fp8` halves the weights' bytes and "
                "doubles the FLOP/s; `awq`/`gptq`/`int4` 4-bit weights; `mxfp4` 4.25-bit MoE experts; `nvfp4`/"
                "`modelopt_fp4` 4.5-bit weights, W4A4 on the B200; empty: the checkpoint's own)"),
         Option("vllm-version", "str", NEWEST_VLLM, "vLLM release whose defaults apply where the flag is not "
                "given: --block-size (16 before 0.34, 64 from 0.34) and --gpu-memory-utilization (0.9 before 0.21, "
                "0.92 from 0.21, 1.0 from 0.34); in step mode always, in the default mode only when --vllm-version "
                "is given (without it the reference's 16-token blocks stay)"),
         Option("enforce-eager", "bool", False, "No CUDA graphs: every step runs eagerly (stored for step mode's "
                "timing)"),
         Option("cuda-graph-sizes", "ints", [], "Batch sizes captured as CUDA graphs (vLLM's "
                "`cudagraph_capture_sizes`; empty: vLLM's default sizes up to --max-cudagraph-capture-size; stored "
                "for step mode's timing)", aliases=("--cudagraph-capture-sizes",)),
         Option("max-cudagraph-capture-size", "int", None, "Largest batch captured as a CUDA graph (empty: "
                "vLLM's default, or the largest --cuda-graph-sizes; stored for step mode's timing)", nullable=True,
                unit="sequences"),
         Option("runner", "str", "auto", "vLLM's model runner: `pooling` serves an embedding, classification or "
                "scoring model (`/pooling`, `/classify`, `/score`, `/rerank`, `/v2/embed`) instead of generation "
                "(`auto` = `generate`; `draft` is served as `generate`)", choices=("auto", "generate", "pooling", "draft")),
         Option("convert", "str", "auto", "Pooling model kind with `--runner pooling`: `embed` (bi-encoder), "
                "`classify` (2 labels), `score` (cross-encoder, 1 label); `auto`/`none` = `embed`, `reward` is "
                "served as `embed`", choices=("auto", "none", "embed", "classify", "score", "reward")),
         Option("task", "str", "", "Deprecated vLLM spelling: `embed`/`embedding`, `classify`, `score`, `reward` set "
                "`--runner pooling` and its `--convert`; `generate`, `transcription`, `draft` the generation runner",
                choices=("", "auto", "generate", "transcription", "draft", "embed", "embedding", "classify", "score",
                         "reward")),
         Option("pooler-config", "json", None, "vLLM's PoolerConfig JSON (or `--pooler-config.task X`): `task` is "
                "the pooling model's `/pooling` task, its own (`embed`, `classify`) or its per-token one "
                "(`token_embed`, `token_classify`); its other fields are accepted and not modelled"))
_declare("server",
         Option("port", "int", 8000, "Port the server listens on"),
         Option("host", "str", "0.0.0.0", "Address the server binds to"),
         Option("api-key", "list", [], "Require `Authorization: Bearer KEY` (or `x-api-key`) on inference, "
                "admin and LoRA routes; several keys (`--api-key K1 K2`, as vLLM 0.34): any of them",
                env="VLLM_API_KEY", secret=True),
         Option("ssl-certfile", "str", "", "PEM certificate file: serve HTTPS"),
         Option("ssl-keyfile", "str", "", "PEM private key of --ssl-certfile"),
         Option("ssl-ca-certs", "str", "", "CA certificates file (client certificates)"),
         Option("ssl-cert-reqs", "int", 0, "Client certificates with --ssl-ca-certs: 0 not asked, 1 optional, 2 "
                "required (Python's `ssl.CERT_*`, as vLLM passes it to uvicorn)"),
         Option("ssl-ciphers", "str", "", "Cipher suites of HTTPS up to TLS 1.2 (an OpenSSL cipher list, "
                "`ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305`; empty: OpenSSL's default)"),
         Option("self-signed-certs", "bool", False, "Serve HTTPS with a certificate made at start-up"),
         Option("disable-log-requests", "bool", False, "No access log line per request (vLLM 0.34 spells it "
                "`--disable-uvicorn-access-log`; there `--disable-log-requests` is the negative of "
                "`--enable-log-requests`, its request-details log, off by default)",
                aliases=("--disable-uvicorn-access-log",)),
         Option("disable-access-log-for-endpoints", "str", "", "Comma-separated paths whose requests get no access "
                "log line (`/health,/metrics,/ping`: the path matched exactly, its query ignored)"),
         Option("log-error-stack", "bool", None, "Log each error response's exception with its stack trace "
                "(not given: on with VLLM_SERVER_DEV_MODE=1, as vLLM's default)", nullable=True),
         Option("log-http", "bool", False, "Log each request's method, URI, remote address, headers and body"),
         Option("log-level", "str", "info", "Log level", choices=LOG_LEVELS, aliases=("--uvicorn-log-level",)),
         Option("timeout-keep-alive", "int", 5, "Seconds an idle keep-alive connection stays open (vLLM's "
                "uvicorn default; 0: close after each response)", unit="s"),
         Option("shutdown-timeout", "float", 30.0, "Grace period for in-flight streams on SIGTERM",
                unit="s", maximum=MAX_LATENCY),
         Option("startup-duration", _D, 0.0, "/health/ready answers 503 for this long after start", unit="s"),
         Option("enable-sleep-mode", "bool", False, "Allow /sleep (with VLLM_SERVER_DEV_MODE=1)"),
         Option("checkpoint-prepare-on-startup", "bool", False, "Start with the process checkpoint prepared "
                "(GET /checkpoint/status 200 at once; needs --enable-sleep-mode)"),
         Option("enable-fault-tolerance", "bool", False, "Serve vLLM's /v1/fault_tolerance/apply and /status"),
         Option("profiler-config", "json", None, "vLLM's ProfilerConfig JSON (or `--profiler-config.profiler "
                "torch`): with a `profiler` (`torch`, `cuda`, `proton`), `POST /start_profile` and `POST "
                "/stop_profile` are served as vLLM serves them (nothing is profiled); its other fields are "
                "accepted and not modelled"),
         Option("enable-request-id-headers", "bool", False, "Use and return the X-Request-Id header"),
         Option("disable-fastapi-docs", "bool", False, "No FastAPI documentation routes: `/openapi.json`, "
                "`/docs`, `/docs/oauth2-redirect` and `/redoc` answer 404"),
         Option("enable-offline-docs", "bool", False, "`/docs` loads Swagger UI from `/static/` (vLLM's vendored "
                "files, not served here) instead of a CDN; no `/redoc`"),
         Option("max-request-body-size-mb", "int", 4, "Largest accepted request body", unit="MiB"),
         Option("worker-connections", "int", 10000, "Maximum simultaneous client connections (gevent worker)"),
         Option("grpc", "bool", False, "Serve vLLM's gRPC API (`vllm.grpc.engine.VllmEngine`, health, reflection) on "
                "--port instead of HTTP, as `vllm serve --grpc`"),
         Option("grpc-port", "int", 0, "Also serve the gRPC API on this port, beside HTTP on --port (0: off; the "
                "reference multiplexes both on one port)"))
_declare("frontend",
         Option("max-logprobs", "int", 20, "Largest `logprobs` / `top_logprobs` a request may ask (-1: no cap)"),
         Option("max-request-work", "int", 1048576, "Largest response one request may ask: choices x output "
                "tokens x (1 + top logprobs), plus echoed prompts and `prompt_logprobs` (0: no cap)", unit="tokens"),
         Option("enable-force-include-usage", "bool", False, "Every stream reports usage, as if "
                "`stream_options.include_usage` were set"),
         Option("sse-keep-alive-interval", "int", 0, "Chat completions and completions streams send the SSE "
                "comment `: keep-alive` after this many seconds without a write (queued, in prefill, between "
                "tokens), as vLLM from 0.29; 0: never; refused with --vllm-version before 0.29", unit="s"),
         Option("enable-per-request-metrics", "bool", False, "Chat and completion answers (a stream's usage "
                "chunk) carry vLLM 0.34's `metrics`: time to first token, generation and queue time, mean ITL, "
                "tokens per second, from the simulated timeline"),
         Option("default-embedding-dimensions", "int", 384, "Embedding size when the request gives none"),
         Option("enable-prompt-tokens-details", "bool", False, "`usage.prompt_tokens_details` "
                "on every answer, 0 included, with vLLM 0.34's fields (`cached_tokens`, `created_cache_tokens`, "
                "`multimodal_tokens`) as it serialises them per API (without it: left out, or the reference's "
                "`{cached_tokens: N}` with --enable-kvcache)"),
         Option("return-tokens-as-token-ids", "bool", False, "Logprob tokens are `token_id:N` (chat, "
                "completions), as the request field `return_tokens_as_token_ids`"),
         Option("return-sampling-mask", "bool", False, "`/inference/v1/generate` choices carry a "
                "`sampling_mask`: per output token, the ids its sampling could pick (after top-k / top-p)"),
         Option("logprobs-mode", "str", "raw_logprobs", "What logprobs report (vLLM's flag): `processed_*` "
                "after the sampling filters, so with --return-sampling-mask an alternative outside the mask "
                "shows -9999.0", choices=("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")),
         Option("tokens-only", "bool", False, "No detokenization (vLLM's token-in / token-out mode): "
                "`/inference/v1/generate` refuses stop strings and the `text` / `derender` output modes, "
                "and `POST /abort_requests` is served too"),
         Option("enable-server-load-tracking", "bool", False, "Serve `GET /load`: the number of requests "
                "in flight"),
         Option("enable-tokenizer-info-endpoint", "bool", False, "Serve `GET /tokenizer_info`"),
         Option("fingerprint-mode", "str", "full", "Chat and completion answers' `system_fingerprint`: `full` "
                "(`vllm-<version>[-tp<N>][-dp<N>]-<hash8>`), `hash` (`vllm-<version>-<hash8>`), `custom` "
                "(--fingerprint-value) or `none` (null)", choices=("full", "hash", "custom", "none")),
         Option("fingerprint-value", "str", "", "The `system_fingerprint` of --fingerprint-mode custom (empty: null)"),
         Option("cohere-is-reasoning-model", "bool", True, "`/cohere/v2/chat` (env VLLM_ENABLE_COHERE_API=1) answers "
                "reasoning as a `thinking` block (`--no-...`: as `tool_plan` and `tool-plan-delta` events, as older Command models)"))
_declare("scheduler",
         Option("max-num-seqs", "int", 5, "Maximum number of sequences running at once"),
         Option("max-waiting-queue-length", "int", 1000, "Capacity of the waiting queue; beyond it requests get 429"),
         Option("max-num-batched-tokens", "int", None, "Tokens per engine step (step mode; vLLM's default by "
                "GPU: 16384 from 160 GiB, 8192 from 70 GiB but A100s, else 2048)", nullable=True, unit="tokens"),
         Option("long-prefill-token-threshold", "int", 0, "Largest prefill chunk per step (step mode; 0: none, "
                "or 4% of --max-model-len with --max-num-partial-prefills > 1)", unit="tokens"),
         Option("max-num-partial-prefills", "int", 1, "Concurrent partial prefills (step mode; > 1 sets the "
                "long-prefill threshold as vLLM does)"),
         Option("enable-chunked-prefill", "bool", True, "Split a long prefill over several steps (step mode; "
                "--no-enable-chunked-prefill: a prompt is scheduled whole or waits, and --max-num-batched-tokens "
                "defaults to at least --max-model-len)"),
         Option("scheduler-reserve-full-isl", "bool", None, "Admit a waiting request only when the KV blocks "
                "of its whole prompt are free, not just its first chunk's (step mode; not given: on from "
                "--vllm-version 0.19, as vLLM's default)", nullable=True),
         Option("async-scheduling", "bool", None, "Schedule the next step while the current one runs (stored for "
                "step mode's timing; not given: the version's default)", nullable=True),
         Option("speculative-config", "json", None, "vLLM's SpeculativeConfig JSON (`method`, `model`, "
                "`num_speculative_tokens`, `rejection_sample_method: synthetic` with `synthetic_acceptance_rates` or "
                "`_length`): step mode verifies the drafts and emits the accepted ones (README: Speculative decoding)",
                nullable=True, aliases=("-sc",)),
         Option("spec-method", "str", "", "`--speculative-config`'s `method`"),
         Option("spec-model", "str", "", "`--speculative-config`'s `model`", aliases=("--speculative-model",)),
         Option("spec-tokens", "int", None, "`--speculative-config`'s `num_speculative_tokens`", nullable=True,
                aliases=("--num-speculative-tokens",)),
         Option("per-request-spec-decode-metrics", "str", "none", "Chat and completion answers of one choice (a "
                "stream's usage chunk) carry `metrics.speculative_decoding`: the request's acceptance histogram and "
                "draft counts (step mode; `detailed`: its per-step arrays too); needs --speculative-config",
                choices=("none", "summary", "detailed")),
         Option("max-num-queued-reqs", "int", None, "Most requests in flight (waiting or running; a request "
                "of `n` choices counts `n`): one more is refused with 503, vLLM 0.34's admission limit (empty: none)",
                nullable=True),
         Option("max-num-queued-tokens", "size", None, "Most prompt tokens of requests still in prefill (waiting, or "
                "running before their first token): while reached, a new request is refused with 503, vLLM 0.34's "
                "admission limit (empty: none; `8k` = 8,000 as vLLM reads it)", nullable=True, unit="tokens"),
         Option("stream-interval", "int", 1, "Tokens per streamed output, as vLLM's SchedulerConfig.stream_interval: a "
                "stream sends a request's first token at once, then its tokens in groups of this many, each group one "
                "chunk (its tokens' text, logprobs and token ids together) sent when its last token is made, and the "
                "rest with the finish; a request's `stream_interval` (chat, completions, generate's `sampling_params`; "
                "from --vllm-version 0.27) raises it for that request. The engine's metrics stay per token", unit="tokens"),
         Option("scheduling-policy", "str", "fcfs", "Order of the waiting queue: `fcfs`, or `priority` (the "
                "request field `priority`, lower first, then arrival; in step mode the lowest-priority running "
                "request is the one preempted)", choices=("fcfs", "priority")))
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
         Option("latency-calculator", "str", "", "Latency model: `step` times every request by engine steps "
                "(continuous batching on a GPU model); empty, the reference's legacy rule", admin=True,
                choices=("", "constant", "per-token", "step")),
         Option("gpu", "str", "H100", "GPU of the step-time model (step mode): H100, H200, A100-80GB, A100-40GB, "
                "L40S, ..., or a JSON description (`{\"name\": ..., \"flops\": ..., \"bandwidth\": ..., "
                "\"memory_gib\": ...}`, or a `.json` file)"),
         Option("step-time-profile", "str", "", "YAML/JSON file overriding the step-time constants, or a measured "
                "step-time table (step mode)"),
         Option("step-time-jitter", "float", 0.0, "Relative standard deviation of each step's time (step mode; "
                "seeded by --seed)", maximum=1.0),
         Option("kv-transfer-bandwidth", "float", 25.0, "KV transfer bandwidth of a remote prefill (step mode)",
                unit="GB/s"))
_declare("cache",
         Option("enable-kvcache", "bool", False, "Simulate the prefix KV cache and publish KV events"),
         Option("kv-cache-size", "int", 1024, "KV cache size", unit="blocks"),
         Option("global-cache-hit-threshold", "float", 0.0, "Default cache_hit_threshold for all requests",
                maximum=1.0),
         Option("block-size", "int", 16, "Tokens per KV block (KV events, prefix-cache hits, cache_config_info); "
                "not given: 16, or --vllm-version's default (64 from 0.34) in step mode or when --vllm-version is given",
                choices=(8, 16, 32, 64, 128), unit="tokens"),
         Option("gpu-memory-utilization", "float", 0.9, "Share of the GPU's memory vLLM uses (step mode: sizes "
                "the KV cache)", maximum=1.0),
         Option("num-gpu-blocks-override", "int", None, "KV cache size in blocks, instead of what the GPU's "
                "memory allows (step mode)", nullable=True, unit="blocks"),
         Option("kv-cache-memory-bytes", "size", None, "KV cache size per GPU, instead of what "
                "--gpu-memory-utilization leaves (step mode; `8G` = 8 GiB, `500M`, `2k` = 2,000 as vLLM reads them)",
                nullable=True, unit="bytes"),
         Option("enable-prefix-caching", "bool", True, "Reuse cached prompt blocks (step mode; "
                "--no-enable-prefix-caching: no lookups, no hits)"),
         Option("kv-offloading-size", "float", None, "CPU tier for KV blocks, summed over the tensor-parallel "
                "ranks (step mode: every full prompt block is written through to it, least recently used out "
                "first, a prefix hit there is reloaded, and with --enable-kvcache its stores and evictions are KV "
                "events of medium CPU; before --vllm-version 0.21.0 generated blocks too, ready only when their "
                "request finishes)", nullable=True, unit="GiB"),
         Option("cpu-offload-gb", "float", 0.0, "CPU space per GPU; step mode uses it as the CPU KV tier when "
                "--kv-offloading-size is not given (vLLM offloads weights there)", unit="GiB"),
         Option("kv-cache-dtype", "str", "auto", "KV cache data type (step mode: the fp8 and int8 kinds halve "
                "its bytes; fp8_ds_mla is sparse MLA's FP8 layout)",
                choices=("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                         "fp8_per_token_head", "int8_per_token_head")),
         Option("hash-seed", "str", "", "Seed of the KV block hashes", env="PYTHONHASHSEED"),
         Option("prefix-caching-hash-algo", "str", HASH_ALGOS[0], "KV block hash: the reference's FNV-1a 64 "
                "over CBOR, or vLLM's sha256_cbor or sha256 (pickle; vLLM's default)", choices=HASH_ALGOS),
         Option("zmq-endpoint", "str", "tcp://127.0.0.1:5557", "ZMQ endpoint the KV-event publisher connects to"),
         Option("event-batch-size", "int", 16, "Maximum KV events per ZMQ message"),
         Option("use-vllm-map-event-format", "bool", False, "Encode KV events as maps (vLLM 0.34's msgspec "
                "structs; on with `--kv-events-config`)"),
         Option("kv-events-replay-endpoint", "str", "", "ZMQ ROUTER endpoint serving replays of published "
                "KV-event batches (empty: off)"),
         Option("kv-events-replay-queue-size", "int", 1024, "Published batches kept for replay", unit="batches"),
         Option("kv-events-config", "json", None, "vLLM's KVEventsConfig JSON (`enable_kv_cache_events`, "
                "`publisher`, `endpoint`, `replay_endpoint`, `buffer_steps`, `topic`, ...): turns on the KV cache "
                "and its events as vLLM does; the flags above, when given, win")),
_declare("lora",
         Option("lora-modules", "lora", [], 'LoRA adapters: `name=path` or JSON {"name","path","base_model_name"}'),
         Option("max-loras", "int", 1, "Maximum number of LoRAs running at once"),
         Option("max-cpu-loras", "int", 0, "Maximum number of LoRAs kept loaded (0: --max-loras)"),
         Option("max-lora-rank", "int", 16, "Largest `r` of an adapter loaded from a local directory"))
_declare("tokenizer",
         Option("tokenizer", "str", "", "Local path of a Hugging Face tokenizer (directory or tokenizer.json)"),
         Option("force-dummy-tokenizer", "bool", False, "Always use the simulated tokenizer"),
         Option("tokenizers-cache-dir", "str", "", "Directory of downloaded tokenizers (empty: Hugging Face's "
                "default cache)"),
         Option("chat-template", "str", "", "Chat template: a Jinja file path or the template itself"),
         Option("default-chat-template-kwargs", "json", None, "Chat template kwargs every chat-templated "
                "request starts from (JSON object), under its own `chat_template_kwargs`, whose null or "
                "`\"auto\"` values do not override: `{\"enable_thinking\": false}` turns reasoning off unless a "
                "request asks for it (chat, batch chat, Messages, Responses, render, /tokenize; not pooling)",
                nullable=True),
         Option("trust-request-chat-template", "bool", False, "Accept a chat_template sent with a request "
                "(vLLM's flag; without it such requests get 400)"),
         Option("trust-request-mm-kwargs", "bool", False, "Accept a non-empty mm_processor_kwargs or "
                "media_io_kwargs sent with a request (vLLM 0.34's flag; without it such requests get 400)"),
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
_declare("reasoning",
         Option("reasoning-parser", "str", "", "Simulate a reasoning model: answers start with a reasoning span "
                "in the parser's markers, returned as each API's reasoning field (empty or `none`: no reasoning; `hf` "
                "and `beam` stop the start: their markers come from response_template metadata)",
                choices=("",) + REASONING_PARSERS),
         Option("reasoning-fraction", "float", 0.5, "Share of an answer's tokens spent reasoning (scaled by "
                "the request's effort; with --reasoning-parser)", maximum=1.0),
         Option("anthropic-disabled-thinking-effort", "str", "auto", "The `reasoning_effort` an Anthropic "
                "`thinking` `disabled` / `between_tools` sends the chat template (`auto`: `none`, or `low` where "
                "the template renders `none` like an effort, probed once)",
                choices=("auto", "none", "low", "medium", "high", "xhigh", "max")),
         Option("reasoning-effort-map", "json", None, "Rewrite a request's reasoning effort before the chat template "
                "and the reasoning parser see it (JSON object, e.g. `{\"medium\": \"low\"}`; chat, Messages and "
                "Responses); efforts it does not list pass through", nullable=True))
_declare("faults",
         Option("failure-injection-rate", "int", 0, "Requests that fail with an injected error", unit="%", admin=True),
         Option("failure-types", "list", [], "Injected failure types (default: all)", admin=True,
                choices=FAILURE_TYPES))
_declare("metrics",
         Option("fake-metrics", "json", None, "Report these values on /metrics instead of measured ones (JSON "
                "object; YAML: an object)", admin=True, nullable=True),
         Option("enable-mfu-metrics", "bool", False, "Count each step's FLOPs and bytes per GPU (step mode)"),
         Option("disable-log-stats", "bool", False, "Export none of the engine's `vllm:` families on /metrics, as "
                "vLLM builds no stat loggers (the API server's families, `http_*` and the emission lag stay)"),
         Option("fake-metrics-refresh-interval", _D, 0.1, "Time step of generator-valued fake metrics", unit="s"),
         Option("custom-histogram-buckets", "json", None, "vLLM's histogram bucket bounds by family (JSON object "
                "family -> strictly increasing positive bounds, e.g. `{\"time_to_first_token\": [0.1, 0.5, 1]}`): "
                "a family's list replaces its defaults in every histogram of the family, fake metrics too; families "
                "`request_latency`, `time_to_first_token`, `inter_token_latency`, `iteration_tokens`, "
                "`request_params_n`, `request_num_preemptions`, `request_tokens`, `kv_cache_residency`; "
                "refused with --vllm-version before 0.34"),
         Option("kv-cache-metrics", "bool", False, "vLLM's KV-cache residency histograms "
                "(`vllm:kv_block_lifetime_seconds`, `vllm:kv_block_idle_before_evict_seconds`, "
                "`vllm:kv_block_reuse_gap_seconds`) over a sample of the blocks; observed with "
                "--latency-calculator step (its KV block pool), empty otherwise"),
         Option("kv-cache-metrics-sample", "float", 0.01, "Share of the KV blocks --kv-cache-metrics follows, "
                "in (0, 1], drawn per allocation (seeded by --seed)"))
_declare("multimodal",
         Option("omni", "bool", False, "Chat responses may carry an image: `X-Send-Image: true` or "
                "--image-emission-rate"),
         Option("image-emission-rate", "int", 0, "Chat responses carrying an image without the header (--omni)",
                unit="%", admin=True),
         Option("mm-encoder-only", "bool", False, "Encoder-only multimodal mode: `!` tokens, chat "
                "`ec_transfer_params` per image, no /v1/embeddings, KV cache off"))
_declare("parallel",
         Option("data-parallel-size", "int", 1, "Number of data-parallel ranks (1..8 in one process; more with "
                "--data-parallel-size-local; step mode: a MoE model's experts shared out over TP x DP GPUs)"),
         Option("tensor-parallel-size", "int", 1, "GPUs per rank (step mode: splits the weights, heads and KV "
                "cache, adds all-reduces)"),
         Option("data-parallel-rank", "int", -1, "Rank of this process (-1 = unset)"),
         Option("data-parallel-external-lb", "bool", False, "Each rank its own endpoint, --port + rank (vLLM's "
                "external load balancing; without it one endpoint, --port, balances the ranks as vLLM's API server)"),
         Option("data-parallel-multi-port-external-lb", "bool", False, "vLLM's supervised layout: this node's "
                "--data-parallel-size-local ranks each on its own port (--port + local rank), one process each, and "
                "a supervisor's /health, /ready and /readyz on --data-parallel-supervisor-port"),
         Option("data-parallel-supervisor-port", "int", 9256, "Port of the supervisor's probes "
                "(--data-parallel-multi-port-external-lb)"),
         Option("all2all-backend", "str", "allgather_reducescatter", "A MoE model's expert-parallel exchange under "
                "DP (step mode: gathering every replica's tokens, or DeepEP-style kernels sending each token to its "
                "top-k experts)", choices=ALL2ALL_BACKENDS),
         Option("data-parallel-start-rank", "int", None, "This node's first data-parallel rank (vLLM's; with "
                "--data-parallel-size-local: its ranks' engine labels and KV-event ranks count from it)", nullable=True),
         Option("enable-dbo", "bool", False, "Dual-batch overlap (step mode: a MoE model's exchange under DP and "
                "-ep hidden behind the rest of a step large enough to split)"),
         Option("dbo-decode-token-threshold", "int", 32, "Tokens a decode-only step needs to be split", unit="tokens"),
         Option("dbo-prefill-token-threshold", "int", 512, "Tokens a step with a prompt needs to be split", unit="tokens"),
         Option("pipeline-parallel-size", "int", 1, "Pipeline stages, each of --tensor-parallel-size GPUs (step "
                "mode: a GPU holds a stage's layers and KV cache; a step is a rotation of pipelined micro-batches)"),
         Option("data-parallel-size-local", "int", None, "Data-parallel ranks this node runs, of "
                "--data-parallel-size (vLLM's; the others run elsewhere): this process serves these (1..8); step "
                "mode shares a MoE model's experts over TP x the whole --data-parallel-size", nullable=True),
         Option("enable-expert-parallel", "bool", False, "A MoE model's experts dealt out whole over the "
                "TP x DP GPUs instead of sliced over them (step mode: its fused-MoE kernels; vLLM's MFU estimate)"),
         Option("enable-eplb", "bool", False, "Expert-parallel load balancing (vLLM's checks; step mode: its "
                "redundant experts' weights on every GPU, a smaller KV cache)"),
         Option("eplb-config", "json", None, "vLLM's EPLBConfig JSON: `num_redundant_experts` (default the fewest "
                "that divide over TP x DP); its other keys are accepted", nullable=True),
         Option("decode-context-parallel-size", "int", 1, "Of the TP ranks, how many split each sequence's KV "
                "cache token by token (vLLM's DCP; step mode: the KV cache holds that many times the tokens, a "
                "block spans --block-size x DCP, attention reads a share and gathers its heads)"))
_declare("fleet",
         Option("fleet-size", "int", 0, "Serve this many independent simulated vLLM pods from one process, each "
                "with its own port, engine, KV cache, /metrics, KV-event topic and pod headers (0: one ordinary "
                "server; see README \"Many pods in one process\")", unit="pods"),
         Option("fleet-addresses", "str", "ports", "Where the fleet's pods listen: `ports` (pod i on --host at "
                "--port + i) or `loopback` (pod i on 127.1.0.1 + i at --port; its POD_IP)",
                choices=("ports", "loopback")),
         Option("fleet-control-port", "int", 0, "Port of the fleet's control API (GET/POST /fleet/pods, DELETE "
                "/fleet/pods/NAME, GET /fleet/stats, process /metrics) on --host; 0: none"),
         Option("fleet-startup-delay", _D, 0.0, "A pod added at run time answers 503 on every route, /health "
                "included, for this long (an autoscaler's scale-up delay)", unit="s", maximum=MAX_LATENCY))
_declare("environment",
         Option("pod-ip", "str", "", "Pod address (KV-event topic; unset with --enable-kvcache: this host's address)",
                env="POD_IP", cli=False, shown_as="IP"),
         Option("pod-name", "str", "", "Adds `x-inference-pod` / `x-inference-port` response headers",
                env="POD_NAME", cli=False, shown_as="PodName"),
         Option("pod-namespace", "str", "", "Adds the `x-inference-namespace` response header",
                env="POD_NAMESPACE", cli=False, shown_as="PodNameSpace"),
         Option("vllm-dev-mode", "bool", False, "`1` enables development routes (/sleep, /reset_prefix_cache, "
                "/reset_mm_cache, /reset_encoder_cache, /collective_rpc, /server_info) and the RL routes (/pause, "
                "/resume, /is_paused, /abort_requests, /get_world_size)", env="VLLM_SERVER_DEV_MODE", cli=False, shown_as="VllmDevMode"),
         Option("enable-responses-api-store", "bool", False, "`1` keeps Responses-API answers for "
                "GET /v1/responses/{id}, and allows `\"background\": true`", env="VLLM_ENABLE_RESPONSES_API_STORE", cli=False,
                shown_as="EnableResponsesApiStore"),
         Option("enable-cohere-api", "bool", False, "`1` serves Cohere's v2 chat API: `POST /cohere/v2/chat` and "
                "`/cohere/v2/chat/render` (vLLM also needs the `cohere` SDK installed; the simulator does not)",
                env="VLLM_ENABLE_COHERE_API", cli=False, shown_as="EnableCohereApi"))

ADMIN_KEYS = tuple(k for k, o in OPTIONS.items() if o.admin)

from .vllm_flags import ignored_flags  # noqa: E402 - the flags no option above declares

IGNORED_FLAGS: dict[str, str] = ignored_flags(OPTIONS)


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
            if key == "log-level" and isinstance(value, str):
                # vLLM 0.34's --log-level (LoggingConfig) takes CRITICAL ... DEBUG, NOTSET; uvicorn's lower case
                return "debug" if value.upper() == "NOTSET" else value.lower()
            if key == "reasoning-parser" and isinstance(value, str) and value.lower() == "none":
                return ""           # vLLM 0.34's parse_reasoning_parser: `none` (any case) is unset
            if key == "gpu" and isinstance(value, dict):
                return json.dumps(value)        # a YAML mapping describing a GPU (custom_gpu)
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
        if kind == "ints":                     # CLI: one value per item, or "1,2,4"; YAML: a list
            if value is None:
                return []
            items = value if isinstance(value, (list, tuple)) else [value]
            out = []
            for it in items:
                parts = [p for p in str(it).replace(",", " ").split()] if isinstance(it, str) else [it]
                for p in parts:
                    if isinstance(p, bool) or (isinstance(p, float) and not p.is_integer()):
                        raise ValueError(f"{p!r} is not an integer")
                    out.append(int(p))
            return out
        if kind == "size":
            if key == "max-model-len" and isinstance(value, str) and value.strip().lower() == "auto":
                return -1                      # vLLM's human_readable_int_or_auto
            return human_readable_int(value)
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
