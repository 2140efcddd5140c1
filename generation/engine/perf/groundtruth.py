"""Real vLLM runs as the step engine's training and test data, replayed and scored the way the
peer benchmark (inference-sim/sim-to-real-accuracy-validation) scores simulators.

The data is ``bench/sim_to_real/`` (a compact copy of the collected ground truth; sources in its
``SOURCES.md``): 59 experiments of vLLM v0.15.1 with ``inference-perf`` load, 16 of them with
per-request traces.  This module

1. rebuilds an experiment's workload (:func:`workload`): the per-request trace where one exists
   (arrival, prompt tokens), else the experiment's stages as inference-perf's load generator draws them (seeded,
   :func:`stage_arrivals`);
   inference-perf's ``shared_prefix`` data: 10 groups x 10 prompts, each a group's system prompt
   and a question of its own, cycled in a shuffled order (prompts repeat every 100 requests, so
   the prefix cache holds most of a prompt once it was seen), each prompt's length drawn around
   the nominal one with the traces' spread (:data:`PROMPT_SD`), ``ignore_eos`` outputs of exactly
   ``output_len`` tokens;
2. replays it through the scheduler and a step-time model in virtual time (:func:`simulate`),
   with inference-perf's 300 s client timeout (a timed-out request is aborted and counted as a
   failure, as the real runs' ``has_error``);
3. scores it (:func:`score`): requests bucketed into stages by arrival (a request at a boundary
   belongs to the earlier stage); per stage and overall (``"-1"``) the mean / p90 / p99 of E2E
   and TTFT and the mean per-request ITL ``(e2e - ttft) / (output - 1)``, in ms; the absolute
   percentage error against each measured value.

Measured ITL: inference-perf's figure divides the decode time by the output tokens it counted by
re-tokenizing the text, which is below the tokens vLLM generated for some tokenizers (Llama-2:
~195-210 of 247, Llama-3.1: ~237).  :func:`score` reports the peer's definition (``itl_mean``)
and, as ``itl_mean_counted``, the same decode time divided the way the measurement divides it
(the measured mean count, recovered as ``(e2e - ttft) / itl + 1``).
"""
from __future__ import annotations

import csv
import functools
import gzip
import json
import math
import os
import random
from dataclasses import dataclass, field

DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "sim_to_real")
CLIENT_TIMEOUT = 300.0          # s: inference-perf's request timeout in these runs (has_error at ~300 s)
PROMPT_GROUPS, PROMPTS_PER_GROUP = 10, 10     # what inference-perf ran (results/config.yaml of every traced run)
# Tokens per nominal prompt token: random token ids decoded to text and tokenized again by the
# server.  Fitted on the 16 traces' prompt lengths (mean measured / (system + question)): 1.045-1.051.
PROMPT_EXPANSION = 1.048
# Spread of the prompts' lengths (tokens, one standard deviation): the texts differ, and so do
# their token counts.  Measured on the same 16 traces: per-request input tokens, pooled 7.4
# (5.5-9.7 by run).  It matters for MoE models: the fused-MoE kernel variant a step runs depends on
# its exact token count (:class:`~generation.engine.perf.step_model.MoeJit`), and equal prompts
# reach fewer variants than real ones.
PROMPT_SD = 7.4
VLLM_VERSION = "0.15.1"          # every run of the data
CPU_OFFLOAD_GIB = 8             # the runs marked cpu_offload used an 8 GiB CPU KV tier
METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean")


def data_dir(path: str | None = None) -> str:
    return os.path.abspath(path or os.environ.get("SIM_TO_REAL_DATA") or DATA_DIR)


# an experiment's fields the harness and the fit read (README: Fidelity, "your own runs")
REQUIRED_FIELDS = ("name", "model", "hardware", "tp", "model_config", "max_num_seqs", "max_num_batched_tokens",
                   "max_model_len", "stages", "shared_prefix", "actual")
COUNT_FIELDS = ("tp", "max_num_seqs", "max_num_batched_tokens", "max_model_len")
MAX_REQUESTS = 1_000_000            # a run's requests, as the replay's own bound (held in memory)
SHARED_PREFIX_FIELDS = ("system_prompt_len", "question_len", "output_len")
TRACE_COLUMNS = ("arrival_us", "input_tokens", "output_tokens", "has_error", "ttft_s", "e2e_s")


def load_experiments(path: str | None = None) -> list[dict]:
    """The experiments (``experiments.json``), each with ``groups`` (``default16``, ``main38``,
    ``trainval``; optional, ``[]``) and ``actual`` metrics per stage ("0", "1", ... and "-1"
    overall, ms), checked (:func:`check_experiments`).  Raises ValueError naming the file, the
    experiment and what is wrong (a missing folder or file too)."""
    folder = data_dir(path)
    file = os.path.join(folder, "experiments.json")
    if not os.path.isfile(file):
        raise ValueError(f"{file}: no such file (the data folder holds experiments.json, model_configs/ and "
                         f"the traces it names)")
    try:
        with open(file, encoding="utf-8") as fh:
            exps = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError(f"{file}: not JSON ({e})") from None
    check_experiments(exps, file)
    return exps


def check_experiments(exps, file: str = "experiments.json") -> None:
    """A user's own runs fail here in one line, not as a KeyError deep in a replay: ``exps`` is a
    list of objects with :data:`REQUIRED_FIELDS` (``shared_prefix`` with
    :data:`SHARED_PREFIX_FIELDS`: the workload is inference-perf's shared-prefix one, a trace's
    output lengths included), ``stages`` a non-empty list of ``{rate, duration}``, the model's
    ``model_configs/<model_config>/config.json`` and a ``trace`` file present.  ``groups`` and
    ``workload`` default to ``[]`` and ``""``; the counts positive integers, ``actual``'s stages
    the run's own with every metric of :data:`METRICS` a number, a trace a gzipped CSV with
    :data:`TRACE_COLUMNS`.  Raises ValueError."""
    if not isinstance(exps, list) or not all(isinstance(e, dict) for e in exps):
        raise ValueError(f"{file}: a list of experiment objects, got {type(exps).__name__}")
    from generation.config.values import ConfigError
    from .hardware import gpu_by_name
    folder = os.path.dirname(file)
    names: set = set()
    for i, e in enumerate(exps):
        who = f"{file}: experiment {i}" + (f" ({e['name']})" if isinstance(e.get("name"), str) else "")
        missing = [k for k in REQUIRED_FIELDS if k not in e]
        if missing:
            raise ValueError(f"{who}: missing {', '.join(missing)} (README: Fidelity, fitting your own runs)")
        for k in ("name", "model", "hardware", "model_config") + (("trace",) if e.get("trace") is not None else ()):
            if not isinstance(e[k], str) or not e[k]:
                raise ValueError(f"{who}: {k} must be a non-empty string, got {e[k]!r}")
        if e["name"] in names:
            raise ValueError(f"{who}: a second run named {e['name']!r}")
        names.add(e["name"])
        for k, ok, want in (("cpu_offload", lambda v: isinstance(v, bool), "true or false"),
                            ("gpu_mem_util", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                             and 0 < v <= 1, "a number in (0, 1]"),
                            ("kv_blocks", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                             "a positive integer"),
                            ("precision", lambda v: isinstance(v, str), "a string such as FP16 or FP8")):
            if e.get(k) is not None and not ok(e[k]):
                raise ValueError(f"{who}: {k} must be {want}, got {e[k]!r}")
        sp = e["shared_prefix"]
        if not isinstance(sp, dict) or any(isinstance(sp.get(k), bool) or not isinstance(sp.get(k), int)
                                           or sp[k] < (1 if k == "output_len" else 0) for k in SHARED_PREFIX_FIELDS):
            raise ValueError(f"{who}: shared_prefix needs integer {', '.join(SHARED_PREFIX_FIELDS)} (output_len at "
                             f"least 1, the others at least 0)")
        try:
            gpu_by_name(GPU_NAMES.get(e["hardware"], e["hardware"]))
        except ConfigError as err:
            raise ValueError(f"{who}: hardware: {str(err).removeprefix('--gpu: ')}") from None
        if sp["system_prompt_len"] + sp["question_len"] >= e["max_model_len"]:
            raise ValueError(f"{who}: shared_prefix's prompt ({sp['system_prompt_len']} + {sp['question_len']} "
                             f"tokens) does not fit max_model_len {e['max_model_len']}")
        if not isinstance(e["stages"], list) or not e["stages"] or not all(
                isinstance(st, dict) and all(isinstance(st.get(k), (int, float)) and not isinstance(st.get(k), bool)
                                             and st[k] > 0 for k in ("rate", "duration")) for st in e["stages"]):
            raise ValueError(f"{who}: stages must be a non-empty list of {{rate, duration}}, both positive")
        if sum(st["rate"] * st["duration"] for st in e["stages"]) > MAX_REQUESTS:
            raise ValueError(f"{who}: stages come to more than {MAX_REQUESTS:,} requests (rate x duration)")
        for k in COUNT_FIELDS:
            if isinstance(e[k], bool) or not isinstance(e[k], int) or e[k] < 1:
                raise ValueError(f"{who}: {k} must be a positive integer, got {e[k]!r}")
        stages = {"-1", *map(str, range(len(e["stages"])))}
        if not isinstance(e["actual"], dict) or not e["actual"]:
            raise ValueError(f"{who}: actual must map stages (\"0\", ..., \"-1\") to metrics")
        for st, metrics in e["actual"].items():
            if st not in stages:
                raise ValueError(f"{who}: actual has stage {st!r}, not one of its {len(e['stages'])} stages' "
                                 f"(\"0\", ..., \"-1\" for the whole run)")
            bad = [m for m in METRICS if not isinstance(metrics, dict) or isinstance(metrics.get(m), bool)
                   or not isinstance(metrics.get(m), (int, float)) or not 0 < metrics[m] < math.inf]
            if bad:
                raise ValueError(f"{who}: actual[{st!r}] needs positive numbers (ms) for {', '.join(bad)}")
        config = os.path.join(folder, "model_configs", str(e["model_config"]), "config.json")
        if not os.path.isfile(config):
            raise ValueError(f"{who}: no {config}")
        if e.get("trace"):
            trace = os.path.join(folder, e["trace"])
            if not os.path.isfile(trace):
                raise ValueError(f"{who}: no trace file {trace}")
            try:
                with gzip.open(trace, "rt") as fh:
                    head = next(csv.reader(fh), [])
            except (OSError, EOFError, UnicodeDecodeError) as err:
                raise ValueError(f"{who}: trace {trace}: not a gzipped CSV ({err})") from None
            missing = [c for c in TRACE_COLUMNS if c not in head]
            if missing:
                raise ValueError(f"{who}: trace {trace}: no column {', '.join(missing)}")
        e.setdefault("groups", [])
        e.setdefault("workload", "")


def model_config_path(exp: dict, path: str | None = None) -> str:
    return os.path.join(data_dir(path), "model_configs", exp["model_config"], "config.json")


GPU_NAMES = {"H100": "H100", "A100-80GB": "A100-80GB", "L40S": "L40S"}


@dataclass
class Req:
    """One request of a rebuilt workload: ``arrival`` s, ``prompt_tokens``, ``output_tokens``,
    ``group`` (its system prompt's group), ``prompt`` (its prompt's identity: equal prompts
    share every block), ``system_tokens`` (tokens of the group's shared system prompt), ``stage``
    (its load stage's index)."""
    arrival: float
    prompt_tokens: int
    output_tokens: int
    group: int
    prompt: int
    system_tokens: int
    stage: int = 0


def trace_rows(exp: dict, path: str | None = None, limit: int | None = None) -> list[dict]:
    """The rows of a traced experiment's per-request trace (``index``, ``arrival_us``,
    ``input_tokens``, ``output_tokens``, ``has_error``, ``e2e_s``, ``ttft_s``; strings), in order;
    the first ``limit`` only when given.  The rows are shared between calls: read, don't change."""
    rows = _read_trace(os.path.join(data_dir(path), exp["trace"]))
    return list(rows) if limit is None else list(rows[:limit])


@functools.lru_cache(maxsize=4)
def _read_trace(file: str) -> tuple:
    """The rows of a trace, checked once as read (a user's trace failed deep in a replay): at
    least one successful request; integers ``arrival_us``, ``input_tokens``, ``output_tokens``,
    ``has_error`` 0 or 1, numbers ``ttft_s`` and ``e2e_s`` (a failed request's may be empty).  Raises ValueError naming the file and
    line."""
    # a grid search replays each run several times (fit --jit: 30 replays of 3 traces); parsing
    # a trace's CSV again each time took a fifth of it.  4 traces of up to 17,000 rows: ~40 MB
    try:
        with gzip.open(file, "rt") as fh:
            rows = tuple(csv.DictReader(fh))
    except (OSError, EOFError, UnicodeDecodeError) as err:      # a truncated or foreign file
        raise ValueError(f"trace {file}: not a whole gzipped CSV ({err})") from None
    last = -1
    for line, r in enumerate(rows, 2):
        try:
            for k in ("arrival_us", "input_tokens", "output_tokens"):
                if int(r[k]) < 0:
                    raise ValueError(f"{k} is negative")
            if int(r["arrival_us"]) < last:
                raise ValueError("arrivals go back in time (the rows are in arrival order)")
            last = int(r["arrival_us"])
            if r["has_error"] not in ("0", "1"):
                raise ValueError(f"has_error must be 0 or 1, got {r['has_error']!r}")
            if r["has_error"] == "0":          # a failed one may have no times
                ttft, e2e = float(r["ttft_s"]), float(r["e2e_s"])
                if not 0 <= ttft <= e2e < math.inf:
                    raise ValueError(f"need 0 <= ttft_s <= e2e_s, got {ttft} and {e2e}")
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"trace {file}:{line}: {err}") from None
    if not any(r["has_error"] == "0" for r in rows):
        raise ValueError(f"trace {file}: no successful request (has_error 0)")
    return rows


def trace_times(exp: dict, path: str | None = None) -> list[tuple]:
    """A traced experiment's successful requests as ``(index, arrival, ttft, e2e, prompt
    tokens)``, times in seconds, arrivals from the first request's; ``index`` the row's."""
    rows = trace_rows(exp, path)
    t0 = int(rows[0]["arrival_us"])
    return [(i, (int(r["arrival_us"]) - t0) / 1e6, float(r["ttft_s"]), float(r["e2e_s"]), int(r["input_tokens"]))
            for i, r in enumerate(rows) if r["has_error"] == "0"]


def workload(exp: dict, *, seed: int = 0, duration_scale: float = 1.0, path: str | None = None) -> list[Req]:
    """The experiment's requests (module docstring).  ``duration_scale`` < 1 keeps the first part
    of each stage (for quick checks)."""
    sp = exp["shared_prefix"]
    sys_len = sp["system_prompt_len"]
    out_len = sp["output_len"]
    rng = random.Random(f"{seed}-{exp['name']}")
    order = list(range(PROMPT_GROUPS * PROMPTS_PER_GROUP))
    rng.shuffle(order)
    nominal = round((sys_len + sp["question_len"]) * PROMPT_EXPANSION)
    sys_tokens = round(sys_len * PROMPT_EXPANSION)
    spread = random.Random(f"{seed}-{exp['name']}-lengths")    # apart: the arrivals stay as they were
    length = [max(sys_tokens + 1, nominal + round(spread.gauss(0.0, PROMPT_SD))) for _ in order]
    reqs: list[Req] = []
    if exp.get("trace"):
        cut = _stage_cuts(exp, duration_scale)
        rows = trace_rows(exp, path)
        lengths: dict[int, int] = {}
        for i, r in enumerate(rows):           # a prompt's length, from its successful requests
            if r["has_error"] == "0":
                lengths.setdefault(i % len(order), int(r["input_tokens"]))
        for i, r in enumerate(rows):
            arrival = int(r["arrival_us"]) / 1e6
            if duration_scale < 1.0 and not any(a <= arrival <= b for a, b in cut):
                continue
            p = order[i % len(order)]
            n = int(r["input_tokens"]) if r["has_error"] == "0" else lengths.get(i % len(order), nominal)
            reqs.append(Req(arrival, n, out_len, p // PROMPTS_PER_GROUP, p, sys_tokens))
        return reqs
    t0 = 0.0
    i = 0
    for k, s in enumerate(exp["stages"]):
        for t in stage_arrivals(rng, s["rate"], s["duration"]):
            if t > s["duration"] * duration_scale:
                break
            p = order[i % len(order)]
            reqs.append(Req(t0 + t, length[p], out_len, p // PROMPTS_PER_GROUP, p, sys_tokens, k))
            i += 1
        t0 += s["duration"]
    return reqs


def stage_arrivals(rng: random.Random, rate: float, duration: float) -> list[float]:
    """One load stage's arrival times (s from the stage's start), as inference-perf's load
    generator makes them: exactly ``int(rate * duration)`` requests (its ``run_stage``), spaced
    by exponential gaps scaled so that they sum to ``duration`` (its ``ConstantLoadTimer``; the
    last request arrives at the stage's end).  The traces agree: every stage holds exactly that
    many requests over its whole duration, with exponential gaps (coefficient of variation
    0.98-1.02) and no once-a-second pattern (which its ``PoissonLoadTimer`` would leave).  A
    Poisson process instead would also draw the stage's count, and so its load: +-1.8% (one
    standard deviation) at 3,000 requests, which moves a near-saturated stage's tail."""
    n = int(rate * duration)
    gaps = [rng.expovariate(rate) for _ in range(n)]
    scale = duration / sum(gaps) if n else 0.0
    out, t = [], 0.0
    for g in gaps:
        t += g * scale
        out.append(t)
    return out


def _stage_cuts(exp: dict, scale: float) -> list[tuple[float, float]]:
    out, t = [], 0.0
    for s in exp["stages"]:
        out.append((t, t + s["duration"] * scale))
        t += s["duration"]
    return out


@dataclass
class Outcome:
    """One replayed request: arrival, ttft, e2e (s), generated tokens; ``failed`` when it timed
    out (aborted at ``CLIENT_TIMEOUT``)."""
    arrival: float
    ttft: float
    e2e: float
    output_tokens: int
    failed: bool = False


@dataclass
class Simulation:
    outcomes: list = field(default_factory=list)
    steps: int = 0
    preemptions: int = 0
    wall_s: float = 0.0


def stage_of(arrival: float, stages: list[dict]) -> int:
    """The stage a request belongs to by arrival: cumulative durations, a request at a boundary
    in the earlier stage, one past every boundary in the last (the peer's bucketing)."""
    t = 0.0
    for i, s in enumerate(stages):
        t += s["duration"]
        if arrival <= t:
            return i
    return len(stages) - 1


def _pct(values: list, p: float) -> float:
    """numpy's default (linear) percentile, as the peer computes it."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def metrics_of(outcomes: list[Outcome]) -> dict:
    """E2E / TTFT mean, p90, p99 and the mean per-request ITL of the successful ``outcomes``
    (ms), with ``count`` and ``failures``."""
    ok = [o for o in outcomes if not o.failed]
    if not ok:
        return {"count": 0, "failures": len(outcomes)}
    e2e = [1000 * o.e2e for o in ok]
    ttft = [1000 * o.ttft for o in ok]
    itl = [1000 * (o.e2e - o.ttft) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1]
    return {"e2e_mean": sum(e2e) / len(e2e), "e2e_p90": _pct(e2e, 90), "e2e_p99": _pct(e2e, 99),
            "ttft_mean": sum(ttft) / len(ttft), "ttft_p90": _pct(ttft, 90), "ttft_p99": _pct(ttft, 99),
            "itl_mean": sum(itl) / len(itl) if itl else float("nan"),
            "decode_ms_mean": (sum(e2e) - sum(ttft)) / len(ok),
            "count": len(ok), "failures": len(outcomes) - len(ok)}


def windowed_actual(exp: dict, duration_scale: float, path: str | None = None) -> dict | None:
    """The measured metrics over the requests a partial replay keeps (``duration_scale`` < 1: the
    first part of each stage), for a traced experiment; None otherwise (the full stages' figures
    are all there is).  A stage's first minutes are not its average: a MoE engine's compile stalls
    all fall there, so a partial replay scored against the whole stage is biased.  E2E and TTFT
    come from the trace's requests (the same bucketing and percentiles as :func:`metrics_of`; on
    the whole run they equal ``actual``); the ITL is the stage's measured one scaled by the trace's
    own ITL ratio of window to stage (the peer's ITL divides by a count the trace does not hold)."""
    if duration_scale >= 1.0 or not exp.get("trace"):
        return None
    rows = [r for r in trace_rows(exp, path) if r["has_error"] == "0"]
    cut = _stage_cuts(exp, duration_scale)
    stages = exp["stages"]
    whole: dict[str, list] = {str(i): [] for i in range(len(stages))}
    kept: dict[str, list] = {str(i): [] for i in range(len(stages))}
    for r in rows:
        arrival = int(r["arrival_us"]) / 1e6
        o = Outcome(arrival, float(r["ttft_s"]), float(r["e2e_s"]), int(r["output_tokens"]))
        st = str(stage_of(arrival, stages))
        whole[st].append(o)
        if any(a <= arrival <= b for a, b in cut):
            kept[st].append(o)
    whole["-1"] = [o for v in list(whole.values()) for o in v]
    kept["-1"] = [o for v in list(kept.values()) for o in v]
    out = {}
    for stage, act in exp["actual"].items():
        w, k = metrics_of(whole.get(stage, [])), metrics_of(kept.get(stage, []))
        if not k.get("count"):
            continue
        new = dict(act)
        for m in ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99"):
            if m in act:
                new[m] = k[m]
        if act.get("itl_mean") and w.get("itl_mean"):
            new["itl_mean"] = act["itl_mean"] * k["itl_mean"] / w["itl_mean"]
        out[stage] = new
    return out


def predicted(exp: dict, sim: Simulation) -> dict:
    """Per stage ("0", "1", ...) and overall ("-1"): :func:`metrics_of` of the replay."""
    stages = exp["stages"]
    buckets: dict[str, list] = {str(i): [] for i in range(len(stages))}
    for o in sim.outcomes:
        buckets[str(stage_of(o.arrival, stages))].append(o)
    out = {k: metrics_of(v) for k, v in buckets.items()}
    out["-1"] = metrics_of(sim.outcomes)
    return out


def score(exp: dict, pred: dict) -> list[dict]:
    """One record per (stage, metric) the experiment measured: ``stage``, ``metric``,
    ``predicted``, ``actual``, ``ape`` (absolute percentage error).  Also ``itl_mean_counted``
    (the module docstring): the decode time divided by the measured output count."""
    recs = []
    for stage, act in exp["actual"].items():
        p = pred.get(stage) or {}
        for m in METRICS:
            a = act.get(m)
            if a is None or not p.get("count"):
                continue
            v = p.get(m, float("nan"))
            recs.append({"stage": stage, "metric": m, "predicted": v, "actual": a,
                         "ape": abs(v - a) / a * 100 if a else float("nan")})
        a_itl = act.get("itl_mean")
        if a_itl and p.get("count"):
            counted = (act["e2e_mean"] - act["ttft_mean"]) / a_itl + 1
            v = p["decode_ms_mean"] / (counted - 1)
            recs.append({"stage": stage, "metric": "itl_mean_counted", "predicted": v, "actual": a_itl,
                         "ape": abs(v - a_itl) / a_itl * 100})
    return recs


def engine_flags(exp: dict, path: str | None = None) -> list[str]:
    """The ``vllm serve`` flags of the experiment, as the simulator's command line takes them
    (the logged KV block count where the data has it)."""
    flags = ["--model", exp["model"], "--hf-config-path", model_config_path(exp, path),
             "--gpu", GPU_NAMES.get(exp["hardware"], exp["hardware"]),
             "--tensor-parallel-size", str(exp["tp"]), "--max-num-seqs", str(exp["max_num_seqs"]),
             "--max-num-batched-tokens", str(exp["max_num_batched_tokens"]),
             "--max-model-len", str(exp["max_model_len"]),
             "--gpu-memory-utilization", str(exp.get("gpu_mem_util") or 0.9), "--block-size", "16",
             "--vllm-version", VLLM_VERSION]
    if exp.get("cpu_offload"):
        flags += ["--kv-offloading-size", str(CPU_OFFLOAD_GIB)]
    if exp.get("kv_blocks"):
        flags += ["--num-gpu-blocks-override", str(exp["kv_blocks"])]
    return flags


def build(exp: dict, constants=None, path: str | None = None):
    """``(settings, step model)`` for the experiment: the flags resolved as the server resolves
    them (:func:`~generation.engine.step_config.resolve_step_settings`), and a
    :class:`~.step_model.StepModel` with ``constants`` (default: the GPU's fitted profile)."""
    from generation.config.cli import load_config
    from ..step_config import resolve_step_settings
    from .step_model import StepModel
    cfg = load_config(["--latency-calculator", "step", *engine_flags(exp, path)], env={})
    settings = resolve_step_settings(cfg)
    quant = "fp8" if str(exp.get("precision", "")).upper() == "FP8" else ""
    # the server's CUDA graphs (vLLM's default: twice max_num_seqs), with these constants
    model = StepModel(settings.gpu, settings.arch, tp=exp["tp"], quantization=quant, constants=constants,
                      max_cudagraph_capture_size=settings.step_time.max_graph)
    model.vllm_version = settings.step_time.vllm_version        # its kernels' defaults (MoE tiles)
    return cfg, settings, model


STAGE_POLL = 1.0       # s: inference-perf's run_stage checks the finished count once a second
STAGE_LEAD = 1.0       # s: and a stage's timer starts one second after its requests are queued


def staged_replay(sched, model, trace: list, stages_of: list[int], stages: list[dict], seed: int = 0):
    """:func:`~generation.engine.replay.replay` of an inference-perf run of several stages, each
    started as its load generator starts it: after the previous stage's last request has
    finished (seen at its next once-a-second check, :data:`STAGE_POLL`) and
    :data:`STAGE_LEAD` later.  So a stage begins on an idle server, not on the previous one's
    tail.  ``trace`` (TraceRequests, arrivals on the nominal clock: stage k from the sum of the
    earlier durations) and ``stages_of`` (each one's stage index) are in arrival order; the
    result's arrivals are on the shifted clock, never before a stage's nominal start, so that
    :func:`stage_of` buckets them as before.  The traces show these pauses: 4.2-7.1 s
    between a stage's last arrival and the next one's first."""
    from dataclasses import replace
    from ..pod_replay import PodReplay
    pod = PodReplay(sched, model, timeout=CLIENT_TIMEOUT, pause_seed=seed)
    nominal, start, i = 0.0, 0.0, 0
    for k, s in enumerate(stages):
        while i < len(trace) and stages_of[i] == k:
            tr = trace[i]
            at = tr.arrival - nominal + start
            pod.submit(replace(tr, arrival=at), at)
            i += 1
        pod.advance_until(math.inf)
        done = max(pod.now, pod.seen_at, start)
        start += math.ceil((done - start) / STAGE_POLL) * STAGE_POLL + STAGE_LEAD
        nominal += s["duration"]
        start = max(start, nominal)         # a shortened stage (duration_scale < 1) keeps its bucket
    return pod.finish()


def simulate(exp: dict, constants=None, *, seed: int = 0, duration_scale: float = 1.0,
             path: str | None = None) -> Simulation:
    """Replay the experiment's workload (:func:`workload`) through the scheduler and the step
    model in virtual time, with the client timeout; returns each request's outcome."""
    import time
    from ..replay import TraceRequest, replay, scheduler_for
    t = time.perf_counter()
    cfg, settings, model = build(exp, constants, path)
    reqs = workload(exp, seed=seed, duration_scale=duration_scale, path=path)
    trace = [TraceRequest(r.arrival, min(r.prompt_tokens, cfg.max_model_len - r.output_tokens), r.output_tokens,
                          prefix_group=str(r.group), prefix_tokens=r.system_tokens, prompt=str(r.prompt))
             for r in reqs]
    sched = scheduler_for(settings, cfg.max_model_len)
    if exp.get("trace") or len(exp["stages"]) < 2:
        res = replay(sched, model, trace, timeout=CLIENT_TIMEOUT, pause_seed=seed)
    else:
        res = staged_replay(sched, model, trace, [r.stage for r in reqs], exp["stages"], seed)
    sim = Simulation(steps=len(res.steps), preemptions=res.preemptions)
    for er in res.requests:
        first, last = res.times(er)
        sim.outcomes.append(Outcome(er.arrival, first - er.arrival, last - er.arrival, er.num_output))
    for er in res.timed_out:
        sim.outcomes.append(Outcome(er.arrival, float("nan"), CLIENT_TIMEOUT, 0, failed=True))
    sim.wall_s = time.perf_counter() - t
    return sim
