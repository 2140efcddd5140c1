"""Parsing of option values: Go durations, Go booleans, vLLM's human-readable integers, and the error
every option check raises.

A leaf module (imports nothing from the project) so that the configuration, the fake-metrics
specification and the admin route can all use it without import cycles.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the flag or rule.

    ``param``: the flag name (``time-to-first-token``) when one option is at fault, so that
    ``POST /admin/config`` can name the field in its 400 answer."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def global_dp_rank(cfg) -> int:
    """This process's data-parallel rank over the whole deployment: its own (0 unset) plus
    ``--data-parallel-start-rank``, the first rank of its node (vLLM's engine index: the
    ``engine`` label, the KV events' ``data_parallel_rank``).  Ports stay offset by the rank of
    the node's own ranks."""
    return max(getattr(cfg, "data_parallel_rank", 0) or 0, 0) + (getattr(cfg, "data_parallel_start_rank", None) or 0)


def rank_range(cfg) -> int:
    """How many data-parallel ranks a request may name (``X-data-parallel-rank``, gRPC's
    ``data_parallel_rank``): vLLM's ``InputProcessor.process_inputs`` range ``[0, N)``,
    ``--data-parallel-size``, or 1 with ``--data-parallel-external-lb`` (its
    ``local_engines_only``)."""
    return 1 if getattr(cfg, "data_parallel_external_lb", False) else cfg.data_parallel_size


def header_rank(value: str) -> int | None:
    """The rank an ``X-data-parallel-rank`` header names, as vLLM's ``_get_data_parallel_rank``
    reads it (Python's ``int``; None for anything else, which vLLM ignores); two headers reach WSGI
    joined (``1,0``), and Starlette's ``get`` reads the first."""
    try:
        return int(value.split(",", 1)[0])
    except ValueError:
        return None


def error_line(e: BaseException) -> str:
    """The one ``error:`` line a command line prints for ``e``, naming the flag at fault first
    when the message does not (``error: --mode: invalid mode 'bogus'``): ``python app.py``, the
    replay's and the fleet's."""
    msg, param = str(e), getattr(e, "param", None)
    named = param and re.search(rf"--{re.escape(param)}(?![\w-])", msg)     # not --x-local for --x
    return f"error: --{param}: {msg}" if param and not named else f"error: {msg}"


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
    if body[:1] in ("+", "-"):       # not `in "+-"`: "" is in every string
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


_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
BOOL_LITERALS = frozenset(_TRUE + _FALSE)


def parse_bool(value: Any) -> bool:
    """Go ``strconv.ParseBool`` semantics; raises ConfigError otherwise."""
    if isinstance(value, bool):
        return value
    s = str(value)
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ConfigError(f'invalid boolean value "{s}"')


# ---------------------------------------------------------------------------------------------
# vLLM's human-readable integers
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(value: Any) -> int:
    """An integer as vLLM's ``human_readable_int`` reads it: a plain integer, or a number with a
    decimal suffix (``k`` = 1,000, ``m``, ``g``, ``t``; ``25.6k`` = 25,600) or a binary one (``K``
    = 1,024, ``M``, ``G``, ``T``; no decimals: ``1.5G`` is refused).  Raises ValueError."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    if text[-1:] in _DECIMAL or text[-1:] in _BINARY:
        number, suffix = text[:-1], text[-1]
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if number.startswith("-"):      # vLLM's pattern takes no sign: not a size
            raise ValueError(f"{text!r} is negative")
        if not number.isdigit():
            raise ValueError(f"decimals are not allowed with binary suffixes like {suffix}; did you mean "
                             f"{number}{suffix.lower()}?")
        return int(number) * _BINARY[suffix]
    return int(text)


@dataclass
class LoraModule:
    name: str
    path: str = ""
    base_model_name: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "path": self.path, "base_model_name": self.base_model_name}


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
