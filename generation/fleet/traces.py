"""Traces for the fleet: the replay's JSON Lines, with session ids, and the public CSV traces
(Azure LLM inference, BurstGPT), read into :class:`~generation.engine.replay.TraceRequest` s.

- **JSON Lines** (:func:`generation.engine.replay.read_trace`'s format): ``arrival``,
  ``prompt_tokens``, ``output_tokens``, optional ``prefix_group`` / ``prefix_tokens`` (a shared
  system prompt), ``prompt`` (a repeated prompt) and ``session_id``: the turns of one
  conversation, each prompt extending the one before, so a later turn finds the earlier turn's
  prompt blocks cached on the pod that served it.  A session is read as the request's ``prompt``
  name (``"session:<id>"``), so its blocks are named by the group's prefix, then the session
  (:func:`generation.engine.replay.trace_block_hashes`), by the single-pod replay as by the fleet.
- **Azure LLM inference traces** (AzurePublicDataset ``AzureLLMInferenceTrace_{code,conv}*.csv``):
  ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``), ``ContextTokens``, ``GeneratedTokens``.
- **BurstGPT** (``BurstGPT_*.csv``): ``Timestamp`` (seconds), ``Model``, ``Request tokens``,
  ``Response tokens``, ``Total tokens``, ``Log Type``; failed requests (0 response tokens) are
  skipped, as BurstGPT's own replays skip them.

Arrivals start at 0 (the first request's time is subtracted); ``start`` / ``duration`` cut a
window (seconds from the first request) and ``speedup`` divides the times (a 2x busier day).
Errors are ValueError ``FILE:LINE: ...``.
"""
from __future__ import annotations

import csv
import datetime as _dt
import math
import os
import random

from generation.engine.replay import MAX_TRACE_REQUESTS, TraceRequest, read_trace
from generation.engine.replay_trace import MAX_TRACE_SPAN

FORMATS = ("jsonl", "azure", "burstgpt")


def detect_format(path: str) -> str:
    """``jsonl``, ``azure`` or ``burstgpt`` from the file's first line (a CSV header names its
    columns).  Raises ValueError for a header that is neither."""
    with open(path, encoding="utf-8-sig") as f:
        first = f.readline().strip()
    if first.startswith("{") or path.endswith((".jsonl", ".json")):
        return "jsonl"
    cols = {c.strip().lower() for c in first.split(",")}
    if {"timestamp", "contexttokens", "generatedtokens"} <= cols:
        return "azure"
    if {"timestamp", "request tokens", "response tokens"} <= cols:
        return "burstgpt"
    raise ValueError(f"{path}: not a known trace (JSON Lines, or a CSV with the columns of an Azure LLM inference "
                     f"trace: TIMESTAMP,ContextTokens,GeneratedTokens, or BurstGPT: Timestamp,Request tokens,"
                     f"Response tokens); its first line is {first[:80]!r}")


def _azure_time(text: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (7 fractional digits, as the traces write) in seconds."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    t = _dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
    return t + (float("0." + frac) if frac else 0.0)


def _read_csv(path: str, fmt: str) -> list[TraceRequest]:
    out = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        cols = {c.strip().lower(): c for c in (reader.fieldnames or [])}
        if fmt == "azure":
            ct, cp, co = cols.get("timestamp"), cols.get("contexttokens"), cols.get("generatedtokens")
        else:
            ct, cp, co = cols.get("timestamp"), cols.get("request tokens"), cols.get("response tokens")
        if not (ct and cp and co):
            raise ValueError(f"{path}: the {fmt} columns are missing (found {reader.fieldnames})")
        for i, row in enumerate(reader, 2):
            if len(out) >= MAX_TRACE_REQUESTS:
                raise ValueError(f"{path}:{i}: more than {MAX_TRACE_REQUESTS:,} requests; cut a window "
                                 f"(--start / --duration)")
            try:
                t = _azure_time(row[ct]) if fmt == "azure" else float(row[ct])
                p, o = int(float(row[cp])), int(float(row[co]))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{i}: not a trace row ({e})") from None
            if not math.isfinite(t):
                raise ValueError(f"{path}:{i}: the timestamp is not finite")
            if p < 0 or o < 0:
                raise ValueError(f"{path}:{i}: a token count is negative ({p}, {o})")
            if p < 1 or o < 1:          # a failed request (BurstGPT logs them with 0 tokens)
                continue
            out.append(TraceRequest(t, p, o))
    return out


def read_fleet_trace(path: str, fmt: str = "auto", *, start: float = 0.0, duration: float = 0.0,
                     speedup: float = 1.0, max_model_len: int | None = None,
                     counts: dict | None = None) -> list[TraceRequest]:
    """The requests of ``path`` by arrival, arrivals from 0 (module docstring).  ``fmt``:
    ``auto`` (from the first line) or one of :data:`FORMATS`; ``start`` / ``duration`` seconds
    (0: to the end) cut a window of the trace, ``speedup`` > 0 divides its times; with
    ``max_model_len`` a request longer than the context (prompt + output) has its output cut to
    fit and a prompt longer than it is dropped (vLLM refuses it; ``counts["refused"]`` gets how
    many were).  Raises ValueError naming the file and line, or the argument."""
    if not os.path.isfile(path):
        raise ValueError(f"--trace {path}: " + ("a directory, not a file" if os.path.isdir(path) else "no such file"))
    try:
        if fmt == "auto":
            fmt = detect_format(path)
    except UnicodeDecodeError as e:
        raise ValueError(f"--trace {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if fmt not in FORMATS:
        raise ValueError(f"--trace-format must be one of auto, {', '.join(FORMATS)}; got {fmt!r}")
    if not (math.isfinite(speedup) and speedup > 0):
        raise ValueError(f"--speedup must be a positive number, got {speedup}")
    if start < 0 or duration < 0:
        raise ValueError("--start and --duration must be at least 0 seconds")
    try:
        reqs = read_trace(path) if fmt == "jsonl" else _read_csv(path, fmt)
    except UnicodeDecodeError as e:         # a byte past the first line
        raise ValueError(f"--trace {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    reqs.sort(key=lambda r: r.arrival)
    if not reqs:
        return reqs
    t0 = reqs[0].arrival + start
    end = t0 + duration if duration > 0 else math.inf
    out = []
    for r in reqs:
        if r.arrival < t0 or r.arrival >= end:
            continue
        r.arrival = (r.arrival - t0) / speedup
        out.append(r)
    if out and out[-1].arrival > MAX_TRACE_SPAN:
        # a span this long replays no real load: past ~1e15 s a millisecond no longer adds to the
        # clock (TTFTs of 0), and the autoscaler's scrapes every 15 s until the last arrival never end
        raise ValueError(f"{path}: the trace spans {out[-1].arrival:.6g} s, more than {MAX_TRACE_SPAN:,.0f} s "
                         f"(cut a window with --start / --duration, or raise --speedup)")
    out, refused = fit_context(out, max_model_len)
    if counts is not None:
        counts["refused"] = refused
    return out


def fit_context(reqs: list, max_model_len: int | None) -> tuple[list, int]:
    """``(kept, refused)``: ``reqs`` without those whose prompt fills ``max_model_len`` or more
    (vLLM refuses them), the others' outputs cut to what the context leaves (a client's
    ``max_tokens`` past it is vLLM's 400 too; a trace records what the server produced).  None:
    all kept."""
    if max_model_len is None:
        return reqs, 0
    kept = []
    for r in reqs:
        if r.prompt_tokens >= max_model_len:
            continue
        if r.prompt_tokens + r.output_tokens > max_model_len:
            r.output_tokens = max_model_len - r.prompt_tokens
        kept.append(r)
    return kept, len(reqs) - len(kept)


def prefix_workload(rate: float, duration: float, *, groups: int = 64, system_tokens: int = 2048,
                    question_tokens: int = 256, output_tokens: int = 128, turns: int = 1, think: float = 5.0,
                    seed: int = 0) -> list[TraceRequest]:
    """A prefix-heavy load: Poisson conversations at ``rate`` per second for ``duration``
    seconds, each under one of ``groups`` long system prompts (``system_tokens``, the
    ``prefix_group``), with ``turns`` turns ``think`` seconds apart (exponential), each turn's
    prompt the conversation so far plus a new ``question_tokens`` question (a session:
    ``prompt`` names it).  Seeded; sorted by arrival.  What users measure prefix-aware routing
    with (llm-d's "shared prefix" benchmark: many groups of long shared system prompts)."""
    rng = random.Random(seed)
    out, t, n = [], 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        g = f"sys{rng.randrange(groups)}"
        context, at = system_tokens, t
        for k in range(turns):
            prompt = context + question_tokens
            out.append(TraceRequest(at, prompt, output_tokens, g, system_tokens, prompt=f"s{n}"))
            context = prompt + output_tokens
            at += rng.expovariate(1.0 / think) if think > 0 else 0.0
        n += 1
    out.sort(key=lambda r: r.arrival)
    return out


def write_jsonl(reqs, path: str) -> None:
    """Write TraceRequests as the replay's JSON Lines (sessions as their ``prompt``)."""
    import json
    with open(path, "w", encoding="utf-8") as f:
        for r in reqs:
            d = {"arrival": round(r.arrival, 6), "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}
            if r.prefix_group is not None:
                d["prefix_group"], d["prefix_tokens"] = r.prefix_group, r.prefix_tokens
            if r.prompt is not None:
                d["prompt"] = r.prompt
            if r.priority:
                d["priority"] = r.priority
            f.write(json.dumps(d) + "\n")
