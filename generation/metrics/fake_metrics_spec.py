"""The ``--fake-metrics`` option value: its keys, syntax and validation (reference engine.md 5.4).

Pure parsing, so that the configuration can validate the option at start-up and
``POST /admin/config`` can validate updates without importing the collector
(:mod:`generation.metrics.fake_metrics`, which exports the values).  Imports only leaf modules.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .buckets import histogram_buckets
from generation.config.values import ConfigError, parse_duration

FUNCTIONS = ("oscillate", "ramp", "rampreset", "squarewave")
# ``loras`` entries: each is a ``vllm:lora_requests_info`` series written on every scrape.  The
# reference has no bound; 300,000 (a 1.2 MB admin update) made every scrape a 27 MB, 1.8 s hold
# of the hub.  vLLM itself writes one series per scrape.
MAX_LORA_ENTRIES = 1000
FINISH_REASONS = ("stop", "length", "tool_calls", "remote_decode", "cache_threshold")

GAUGES = {                       # key -> metric name
    "running-requests": "vllm:num_requests_running",
    "waiting-requests": "vllm:num_requests_waiting",
    "kv-cache-usage": "vllm:kv_cache_usage_perc",
}
HISTOGRAMS = {                   # key -> (metric names, bucket family: generation.metrics.buckets)
    "ttft-buckets-values": (("vllm:time_to_first_token_seconds",), "time_to_first_token"),
    "tpot-buckets-values": (("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"),
                            "inter_token_latency"),
    "request-tpot-buckets-values": (("vllm:request_time_per_output_token_seconds",), "inter_token_latency"),
    "e2erl-buckets-values": (("vllm:e2e_request_latency_seconds",), "request_latency"),
    "queue-time-buckets-values": (("vllm:request_queue_time_seconds",), "request_latency"),
    "inf-time-buckets-values": (("vllm:request_inference_time_seconds",), "request_latency"),
    "prefill-time-buckets-values": (("vllm:request_prefill_time_seconds",), "request_latency"),
    "decode-time-buckets-values": (("vllm:request_decode_time_seconds",), "request_latency"),
    "request-prompt-tokens": (("vllm:request_prompt_tokens",), "request_tokens"),
    "request-generation-tokens": (("vllm:request_generation_tokens",), "request_tokens"),
    "request-max-generation-tokens": (("vllm:request_max_num_generation_tokens",), "request_tokens"),
    "request-params-max-tokens": (("vllm:request_params_max_tokens",), "request_tokens"),
}
TOKEN_TOTALS = {                 # total key -> (histogram key, counter name without _total)
    "total-prompt-tokens": ("request-prompt-tokens", "vllm:prompt_tokens"),
    "total-generation-tokens": ("request-generation-tokens", "vllm:generation_tokens"),
}
_PREFIX_COUNTERS = {"prefix-cache-hits": "vllm:prefix_cache_hits",
                    "prefix-cache-queries": "vllm:prefix_cache_queries"}
COUNTERS = ("prefix-cache-hits", "prefix-cache-queries", "total-prompt-tokens", "total-generation-tokens")
KEYS = frozenset(GAUGES) | frozenset(HISTOGRAMS) | frozenset(COUNTERS) | {"loras", "request-success-total"}

# The reference's own wording for the TTFT / TPOT arrays.
_HIST_LABEL = {"ttft-buckets-values": "time-to-first-token", "tpot-buckets-values": "time-per-output-token"}


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Generator:
    """A time-varying value ``<name>:<start>:<end>:<period>`` (reference engine.md 5.4).

    ``value(t_ns)`` at ``t_ns`` nanoseconds since the generator was set:

    * oscillate:  mid + amp * sin(2 pi t / period), mid = (start+end)/2, amp = (end-start)/2
    * ramp:       start + (t/period) * (end-start) while t < period, then end
    * rampreset:  start + ((t mod period)/period) * (end-start)
    * squarewave: start while (t mod period) < period/2, else end
    """
    name: str
    start: float
    end: float
    period_ns: int

    def value(self, t_ns: int) -> float:
        p = self.period_ns
        if self.name == "oscillate":
            amp = (self.end - self.start) / 2
            return (self.start + self.end) / 2 + amp * math.sin(2 * math.pi * t_ns / p)
        if self.name == "ramp":
            if t_ns >= p:
                return self.end
            return self.start + (t_ns / p) * (self.end - self.start)
        if self.name == "rampreset":
            return self.start + ((t_ns % p) / p) * (self.end - self.start)
        return self.start if t_ns % p < p // 2 else self.end     # squarewave


_FLOAT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_BARE_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


def _parse_go_float(s: str) -> float:
    if not _FLOAT.fullmatch(s):
        raise ConfigError(f'strconv.ParseFloat: parsing "{s}": invalid syntax')
    return float(s)


def _parse_go_duration_ns(s: str) -> int:
    """Go ``time.ParseDuration`` (strict: a unit-less number other than 0 is an error)."""
    if _BARE_NUMBER.fullmatch(s) and float(s) != 0:
        raise ConfigError(f'time: missing unit in duration "{s}"')
    return int(round(parse_duration(s) * 1e9))


def parse_generator(text: str) -> Generator:
    """Parse ``"<fn>:<start>:<end>:<period>"``.  Raises ConfigError with the reference's
    ``unknown format in fake metric generation function: ...`` message.  The function name
    and the ranges are checked by :func:`parse_fake_metrics`."""
    parts = text.split(":")
    try:
        if len(parts) != 4:
            raise ConfigError("need func:start:end:period in fake metric generation function")
        start = _parse_go_float(parts[1])
        end = _parse_go_float(parts[2])
        period = _parse_go_duration_ns(parts[3])
    except ConfigError as e:
        raise ConfigError(f"unknown format in fake metric generation function: {e}") from None
    return Generator(parts[0], start, end, period)


def _validate_generator(g: Generator) -> None:
    if g.name not in FUNCTIONS:
        raise ConfigError(f"invalid fake metrics generation function {g.name}, must be one of the following: "
                          + ", ".join(FUNCTIONS))
    if g.start < 0 or g.end < 0 or g.period_ns < 0:
        raise ConfigError("invalid fake metrics generation parameter: start and end must not be negative")
    if g.period_ns <= 0:
        raise ConfigError("invalid fake metrics generation parameter: period must be positive")


# ---------------------------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _gauge_value(key: str, raw: Any) -> float | Generator:
    if _is_number(raw):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(_parse_go_float(raw.strip()))      # YAML may quote a number
        except ConfigError:
            return parse_generator(raw)
    raise ConfigError(f"fake metrics {key} must be a number or a \"func:start:end:period\" string")


def _lora_entry(raw: Any) -> tuple[str, str, float]:
    if isinstance(raw, str):                     # YAML form: a JSON string per entry
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as e:        # the entry quoted at most 100 characters
            shown = repr(raw) if len(raw) <= 100 else repr(raw[:100]) + "..."
            raise ConfigError(f"fake metrics loras: invalid JSON entry {shown}: "
                              f"{e if isinstance(e, ValueError) else 'nested too deeply'}") from None
    if not isinstance(raw, dict):
        raise ConfigError('fake metrics loras entries must be objects {"running","waiting","timestamp"}')
    running, waiting, ts = raw.get("running", ""), raw.get("waiting", ""), raw.get("timestamp", 0)
    if not isinstance(running, str) or not isinstance(waiting, str):
        raise ConfigError("fake metrics loras: running and waiting must be comma-separated strings")
    if not _is_number(ts):
        raise ConfigError("fake metrics loras: timestamp must be a number (unix seconds)")
    return running, waiting, float(ts)


def histogram_bounds(key: str, max_model_len: int, overrides: dict | None = None) -> tuple:
    """Upper bounds (without +Inf) of the histogram a ``*-buckets-values`` key fills: its family's,
    ``overrides`` (``--custom-histogram-buckets``) first, as the measured histograms'."""
    return tuple(histogram_buckets(HISTOGRAMS[key][1], max_model_len, overrides))


def parse_fake_metrics(obj: Any, max_model_len: int, partial: bool = False, overrides: dict | None = None) -> dict:
    """Validate a fake-metrics object (CLI/admin JSON or YAML) and return its present keys
    with parsed values: gauges -> float | Generator, ``loras`` -> [(running, waiting, ts)],
    bucket arrays -> [int], ``request-success-total`` -> {reason: int} (missing reasons 0),
    counters -> int.  Null values are dropped (an update leaves them unchanged).

    ``partial`` (an update checked on its own) skips the rule that involves two keys
    (prefix hits with queries); the merged object is checked in full.  ``overrides``
    (``--custom-histogram-buckets``) sets the bucket arrays' lengths.
    Raises ConfigError with the reference's messages (engine.md 5.4), in its order."""
    if not isinstance(obj, dict):
        raise ConfigError("fake metrics must be a JSON object")
    unknown = sorted(k for k in obj if k not in KEYS)
    if unknown:
        raise ConfigError(f"unknown fake metrics field '{unknown[0]}', valid fields are: "
                          + ", ".join(sorted(KEYS)))
    raw = {k: v for k, v in obj.items() if v is not None}
    out: dict[str, Any] = {}
    for key in GAUGES:
        if key in raw:
            out[key] = _gauge_value(key, raw[key])
    for key in ("running-requests", "waiting-requests"):
        if isinstance(out.get(key), float) and out[key] < 0:
            raise ConfigError("fake metrics request counters cannot be negative")
    kv = out.get("kv-cache-usage")
    if isinstance(kv, float) and not 0 <= kv <= 1:
        raise ConfigError("fake metrics KV cache usage must be between 0 and 1")
    for key in GAUGES:
        if isinstance(out.get(key), Generator):
            _validate_generator(out[key])
    if isinstance(kv, Generator) and not (0 <= kv.start <= 1 and 0 <= kv.end <= 1):
        raise ConfigError("fake metrics KV cache usage start and end must be between 0 and 1")

    if "loras" in raw:
        if not isinstance(raw["loras"], list):
            raise ConfigError("fake metrics loras must be a list")
        if len(raw["loras"]) > MAX_LORA_ENTRIES:
            raise ConfigError(f"fake metrics loras: at most {MAX_LORA_ENTRIES} entries, got {len(raw['loras'])}")
        out["loras"] = [_lora_entry(e) for e in raw["loras"]]

    for key in HISTOGRAMS:
        if key not in raw:
            continue
        counts = raw[key]
        if not isinstance(counts, list) or not all(_is_int(c) for c in counts):
            raise ConfigError(f"fake metrics {key} must be a list of integers")
        n_buckets = len(histogram_bounds(key, max_model_len, overrides)) + 1
        label = _HIST_LABEL.get(key)
        if len(counts) > n_buckets:
            raise ConfigError(f"fake {label} array is too long" if label else
                              f"fake metrics {key} array is too long (at most {n_buckets} values)")
        if any(c < 0 for c in counts):
            raise ConfigError(f"{label} fake metrics should contain only non-negative values" if label else
                              f"fake metrics {key} cannot contain negative values")
        out[key] = list(counts)

    if "request-success-total" in raw:
        rst = raw["request-success-total"]
        if not isinstance(rst, dict):
            raise ConfigError("fake metrics request-success-total must be an object {finish_reason: count}")
        for reason, count in rst.items():
            if not _is_int(count):
                raise ConfigError(f"fake metrics request-success-total.{reason} must be an integer")
            if count < 0:
                raise ConfigError(f"fake metrics request-success-total.{reason} cannot be negative, got {count}")
            if reason not in FINISH_REASONS:
                raise ConfigError(f"invalid finish reason in request-success-total: {reason} "
                                  f"(valid reasons: [{' '.join(FINISH_REASONS)}])")
        out["request-success-total"] = {r: int(rst.get(r, 0)) for r in FINISH_REASONS} if rst else {}

    for key in COUNTERS:
        if key in raw:
            v = raw[key]
            if not _is_int(v):
                raise ConfigError(f"fake metrics {key} must be an integer")
            if v < 0:
                raise ConfigError(f"fake metrics {key} cannot be negative")
            out[key] = v
    hits, queries = out.get("prefix-cache-hits"), out.get("prefix-cache-queries")
    if not partial and (hits is None) != (queries is None):
        raise ConfigError("fake metrics prefix-cache-hits and prefix-cache-queries must be specified together")
    if hits is not None and queries is not None and hits > queries:
        raise ConfigError("fake metrics prefix-cache-hits cannot exceed prefix-cache-queries")
    return out


def merge_fake_metrics(old: dict, update: dict) -> dict:
    """The configuration object after a partial update: present non-null keys replace."""
    merged = dict(old)
    merged.update({k: v for k, v in update.items() if v is not None})
    return merged
