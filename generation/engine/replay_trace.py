"""A replay's load (:mod:`generation.engine.replay`): the trace format, the synthetic load and
the checks of both before anything is simulated.

A trace is JSON Lines, one :class:`TraceRequest` a line (:func:`read_trace`); a synthetic load is
Poisson arrivals of fixed lengths (:func:`synthetic_trace`).  Bad input raises ValueError naming
the flag, or the file and line.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(slots=True)
class TraceRequest:
    """One request of a trace: ``arrival`` seconds, ``prompt_tokens``, ``output_tokens``, and an
    optional shared prefix (``prefix_group``, ``prefix_tokens``); ``prompt`` names the prompt's
    content within its group: requests with the same group and prompt repeat the whole prompt
    (every full block is shared, as a benchmark cycling through a fixed set of prompts)."""
    arrival: float
    prompt_tokens: int
    output_tokens: int
    prefix_group: str | None = None
    prefix_tokens: int = 0
    priority: int = 0                   # --scheduling-policy priority: lower runs first
    prompt: str | None = None


MAX_TRACE_REQUESTS = 1_000_000     # a replay holds every request in memory (~600 bytes each)
MAX_TRACE_SPAN = 1e8               # seconds from the first arrival to the last (BurstGPT's 121 days fit)


def synthetic_trace(num_requests: int, prompt_tokens: int, output_tokens: int, rate: float = 0.0,
                    seed: int = 0) -> list[TraceRequest]:
    """``num_requests`` requests of fixed lengths; Poisson arrivals at ``rate`` per second
    (seeded), or all at time 0 when ``rate`` is 0.  Raises ValueError naming the flag for
    values no load can have (see :func:`check_synthetic`)."""
    check_synthetic(num_requests, prompt_tokens, output_tokens, rate)
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(num_requests):
        if rate > 0:
            t += rng.expovariate(rate)
        out.append(TraceRequest(t, prompt_tokens, output_tokens))
    return out


def _count(v) -> bool:
    """An integer (a JSON integer, or a float with no fraction), not a boolean."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def check_synthetic(num_requests, prompt_tokens, output_tokens, rate=0.0, concurrency=0,
                    max_model_len: int | None = None) -> None:
    """The synthetic load's flags: ``--num-requests`` 1 .. :data:`MAX_TRACE_REQUESTS`,
    ``--prompt-tokens`` and ``--output-tokens`` at least 1 (the prompt within ``max_model_len``
    when given, as vLLM's input processor requires; an output past the context is cut by the
    scheduler), ``--rate`` a finite number >= 0, ``--concurrency`` >= 0.  ``--rate -1`` /
    ``nan`` and ``--concurrency -5`` were accepted, ``--num-requests 1000000000`` grew without
    bound.  Raises ValueError naming the flag."""
    if not _count(num_requests) or not 1 <= num_requests <= MAX_TRACE_REQUESTS:
        raise ValueError(f"--num-requests must be from 1 to {MAX_TRACE_REQUESTS:,} (a replay holds every request "
                         f"in memory), got {num_requests}")
    for flag, v in (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)):
        if not _count(v) or v < 1:
            raise ValueError(f"{flag} must be an integer of at least 1, got {v}")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
        raise ValueError(f"--rate must be a finite number of requests per second, at least 0, got {rate}")
    if not _count(concurrency) or concurrency < 0:
        raise ValueError(f"--concurrency must be an integer of at least 0, got {concurrency}")
    if max_model_len is not None and prompt_tokens > max_model_len:
        raise ValueError(f"--prompt-tokens {prompt_tokens} is longer than --max-model-len {max_model_len}")


def check_plot_path(path: str | None) -> None:
    """``--plot``: matplotlib is installed and ``path`` can be written, checked before the
    simulation (an unwritable path was a traceback after the whole run).  Raises ValueError."""
    if not path:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install matplotlib)") from None
    check_output_path(path, "--plot")


def check_output_path(path: str | None, flag: str) -> None:
    """An output file's flag (``--plot``, ``--per-request``, ``--output``): ``path`` can be
    written, checked before the run (a missing folder was an ``[Errno 2]`` after the whole
    replay, naming no flag); a file that was not there is not left behind.  Raises ValueError
    naming ``flag``."""
    if not path:
        return
    import os
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot be written ({e.strerror or e})") from None
    if not existed:
        os.remove(path)


def _trace_request(d, max_model_len: int | None) -> TraceRequest:
    """One decoded trace line as a TraceRequest; raises ValueError saying what is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"a trace line is a JSON object, not {type(d).__name__}")
    arrival = d.get("arrival", 0.0)
    if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not math.isfinite(arrival) \
            or arrival < 0:
        raise ValueError(f"arrival must be a finite number of seconds, at least 0, got {arrival!r}")
    for key in ("prompt_tokens", "output_tokens"):
        if key not in d:
            raise ValueError(f"{key} is required")
    vals = {}
    for key, low in (("prompt_tokens", 1), ("output_tokens", 1), ("prefix_tokens", 0), ("priority", None)):
        v = d.get(key, 0)
        if not _count(v) or (low is not None and v < low):
            raise ValueError(f"{key} must be an integer" + (f" of at least {low}" if low is not None else "")
                             + f", got {v!r}")
        vals[key] = int(v)
    group = d.get("prefix_group")
    if group is not None and not isinstance(group, str):
        raise ValueError(f"prefix_group must be a string, got {group!r}")
    prompt = d.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string naming the prompt, got {prompt!r}")
    session = d.get("session_id")
    if session is not None:             # a conversation's turns: each prompt extends the one before
        if isinstance(session, bool) or not isinstance(session, (str, int)):
            raise ValueError(f"session_id must be a string or an integer, got {session!r}")
        if prompt is None:
            prompt = f"session:{session}"
    if vals["prefix_tokens"] > vals["prompt_tokens"]:
        raise ValueError(f"prefix_tokens {vals['prefix_tokens']} is more than prompt_tokens {vals['prompt_tokens']}")
    if max_model_len is not None and vals["prompt_tokens"] > max_model_len:
        raise ValueError(f"prompt_tokens {vals['prompt_tokens']} is longer than --max-model-len {max_model_len} "
                         f"(vLLM refuses such a prompt)")
    return TraceRequest(float(arrival), vals["prompt_tokens"], vals["output_tokens"], group,
                        vals["prefix_tokens"], vals["priority"], prompt)


def read_trace(path: str, max_model_len: int | None = None, extra: dict | None = None) -> list[TraceRequest]:
    """A JSON Lines trace (see the module docstring), by arrival.  ``extra``: fields a caller
    adds to the format, name -> ``handler(value, trace_request)`` (it raises ValueError for a bad
    value; the fleet's ``session_id``).  Raises ValueError ``FILE:LINE: ...`` for
    a line that is not a trace request: not JSON (``NaN`` arrivals and nesting past 1,024 levels
    included: orjson's parser), not an object, a field of the wrong type, a negative or
    non-finite arrival, token counts below 1, a prefix longer than the prompt, or (with
    ``max_model_len``) a prompt longer than the context (1e12 prompt tokens were dropped after
    36 s of CPU; an output past the context is cut by the scheduler).  A UTF-8 byte-order mark is
    skipped.  A file that cannot be opened: ValueError ``--trace FILE: cannot read (...)``.  At
    most :data:`MAX_TRACE_REQUESTS` requests (every one is held in memory: 10 M
    lines died at 6 GB)."""
    import orjson
    out = []
    try:
        f = open(path, "rb")             # decoded line by line: a bad byte is named by its line
    except OSError as e:                # the flag's value named, not Python's errno line
        raise ValueError(f"--trace {path}: cannot read ({e.strerror or e})") from None
    with f:
        for i, raw in enumerate(f, 1):
            if i == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]               # a UTF-8 byte-order mark
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:     # was one "error: 'utf-8' codec ..." line naming no file
                raise ValueError(f"{path}:{i}: not a trace request (not UTF-8 text: {e.reason} at byte "
                                 f"{e.start + 1} of the line)") from None
            line = line.strip()
            if not line:
                continue
            if len(out) >= MAX_TRACE_REQUESTS:
                raise ValueError(f"{path}:{i}: more than {MAX_TRACE_REQUESTS:,} requests (a replay holds every "
                                 f"request in memory); split the trace")
            try:
                d = orjson.loads(line)
                found = [(k, d.pop(k)) for k in extra if k in d] if extra and isinstance(d, dict) else ()
                tr = _trace_request(d, max_model_len)
                for k, v in found:
                    extra[k](v, tr)
                out.append(tr)
            except orjson.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not a trace request (not JSON: {e})") from None
            except ValueError as e:
                raise ValueError(f"{path}:{i}: not a trace request ({e})") from None
    out.sort(key=lambda r: r.arrival)
    if out and out[-1].arrival - out[0].arrival > MAX_TRACE_SPAN:
        # no real load spans that: past ~1e15 s a millisecond no longer adds to the clock (TTFTs
        # of 0), and a fleet's autoscaler scrapes every 15 s to the last arrival
        raise ValueError(f"{path}: the trace spans {out[-1].arrival - out[0].arrival:.6g} s, more than "
                         f"{MAX_TRACE_SPAN:,.0f} s (about 3 years)")
    return out
