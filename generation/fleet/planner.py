"""The capacity planner: "given this trace and SLO (p99 TTFT, p99 ITL), how many pods of which
GPU and TP, with which router?"

For each configuration (GPU x tensor-parallel size x router) it searches the smallest pod count
that meets the SLO with fleet replays (:class:`~generation.fleet.replay.FleetReplay`): pod counts
double from ``min_pods`` until one meets the SLO, then a bisection between the last failing and
the first passing count.  A replay that cannot meet the p99 TTFT or ITL any more stops early
(``give_up_ttft``, ``give_up_itl``: more than 1 % of the requests, or of the inter-token
latencies, already over the SLO), so a failing count costs less than a passing one.  On a trace
of :data:`STAGED_MIN` requests or more, the search is first run on the trace's first eighth
(:data:`PREFIX_SHARE` of its span: cheap replays), and the whole trace's search then starts at
that answer, galloping away from it (+1, +2, +4, ... while failing; -1, -2, -4, ... while
passing) before bisecting: two or three replays of the whole trace around the answer instead of
the doubling's larger fleets.  The answer is the same rule's, the fewest pods that pass with one
fewer failing, whichever count the search starts from.  The replays run in parallel over the machine's cores
(:mod:`multiprocessing`): the configurations side by side and, with more cores than
configurations, several pod counts of one configuration per round; a sweep too big for one machine is cut into shares
(``share=(index, count)``: configuration k goes to share ``k % count``), one per index of a
Kubernetes indexed Job (``deploy/kubernetes/plan/plan-job.yaml``), each writing its rows as JSON,
and :func:`merge` joins the shares' files into one table.

A row: the configuration, ``pods`` needed (None: not met within ``max_pods``), ``gpus``
(pods x TP), ``gpu_hours`` (GPUs x the trace's span), the p99 TTFT and ITL at that count, and
the SLO ``margin`` (the smaller of ``1 - p99 / SLO`` over the two metrics: 0.12 means 12 %
headroom), and the replays it took.
"""
from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import os
import re
import time

from .replay import FleetReplay, pod_factory
from .routing import make_router


def configurations(gpus, tps, routers) -> list[dict]:
    """Every ``{"gpu", "tp", "router"}`` combination, in a fixed order (the shares' order)."""
    return [{"gpu": g, "tp": int(t), "router": r} for g, t, r in itertools.product(gpus, tps, routers)]


def evaluate(config: dict, trace, pods: int, slo_ttft: float, slo_itl: float, server_args=(), seed: int = 0,
             _cache={}) -> dict:
    """One fleet replay of ``trace`` with ``pods`` pods of ``config``: ``{"pods", "ttft_p99",
    "itl_p99", "ok", "gave_up"}`` (seconds; ``ok`` when both p99s are within the SLO and every
    request finished)."""
    key = (config["gpu"], config["tp"], tuple(server_args))
    if key not in _cache:
        _cache[key] = pod_factory(["--gpu", config["gpu"], "--tensor-parallel-size", str(config["tp"]),
                                   *server_args])
    new_pod, cfg, _ = _cache[key]
    fleet = FleetReplay(new_pod, trace, pods=pods, router=make_router(config["router"], seed=seed),
                        gpus_per_pod=config["tp"], give_up_ttft=slo_ttft, give_up_itl=slo_itl, keep_routed=False,
                        compact=True, seed=seed,
                        kv_transfer_bandwidth=cfg.kv_transfer_bandwidth * 1e9)
    s = fleet.run().summary()
    ttft = s["ttft_s"]["p99"]
    itl = s["itl_s"]["p99"] or 0.0
    if s["gave_up"] or ttft is None:
        ttft = math.inf
    ok = not s["gave_up"] and s["unfinished"] == 0 and ttft <= slo_ttft and itl <= slo_itl
    return {"pods": pods, "ttft_p99": ttft, "itl_p99": itl, "ok": ok, "gave_up": s["gave_up"]}


STAGED_MIN = 2000          # requests: a trace this long is first searched on its prefix
PREFIX_SHARE = 0.125       # of the trace's span: the prefix searched first


class _Search:
    """The pod-count search of one configuration, a round at a time: :meth:`candidates` gives
    the counts to replay next (the doubling phase's next power, or ``m`` points evenly inside
    the bisection's interval: one point is the midpoint), :meth:`update` takes
    their results.  ``hi`` the fewest pods seen to pass, ``lo`` the most seen to fail below
    it.  ``guess``: start there instead and gallop (module docstring); ``length``: the
    replays are of the trace's first ``length`` requests (None: all)."""

    def __init__(self, config: dict, min_pods: int, max_pods: int, guess: int | None = None,
                 length: int | None = None):
        self.config, self.min_pods, self.max_pods = config, min_pods, max_pods
        self.tried: dict = {}
        self.lo, self.hi = min_pods - 1, None
        self.error = None
        self.guess = None if guess is None else min(max(guess, min_pods), max_pods)
        self.length = length

    @property
    def done(self) -> bool:
        if self.error is not None:
            return True
        if self.hi is not None:
            return self.hi - self.lo <= 1
        return self.max_pods in self.tried           # even the most pods failed

    def candidates(self, m: int) -> list[int]:
        if self.done:
            return []
        g = self.guess
        if g is not None:       # galloping from the guess, one at a time, until both sides are known
            if not self.tried:
                return [g]
            if self.hi is None:                       # all failed so far: up, by 1, 2, 4, ...
                return [min(self.lo + max(1, self.lo - g + 1), self.max_pods)]
            if self.lo == self.min_pods - 1:          # all passed so far: down, by 1, 2, 4, ...
                return [max(self.hi - max(1, g - self.hi + 1), self.min_pods)]
        elif self.hi is None:   # doubling from min_pods, one at a time: a larger fleet costs more to
            # replay, and a failing one gives up early
            return [min(max(self.tried) * 2, self.max_pods) if self.tried else self.min_pods]
        span = self.hi - self.lo
        return sorted({self.lo + span * j // (m + 1) for j in range(1, m + 1)} - {self.lo, self.hi})

    def update(self, n: int, result: dict) -> None:
        if "error" in result:
            self.error = result["error"]
            return
        self.tried[n] = result
        passing = [k for k, r in self.tried.items() if r["ok"]]
        self.hi = min(passing) if passing else None
        self.lo = max([k for k, r in self.tried.items() if not r["ok"] and (self.hi is None or k < self.hi)]
                      + [self.min_pods - 1])

    def row(self, trace, slo_ttft: float, slo_itl: float) -> dict:
        config = self.config
        if self.error is not None:
            return dict(config, pods=None, error=self.error)
        hi = self.hi
        span = (trace[-1].arrival - trace[0].arrival) if trace else 0.0
        best = self.tried[hi] if hi is not None else None
        return dict(config, pods=hi, gpus=hi * config["tp"] if hi else None,
                    gpu_hours=hi * config["tp"] * span / 3600.0 if hi else None,
                    ttft_p99=best["ttft_p99"] if best else None, itl_p99=best["itl_p99"] if best else None,
                    margin=min(1 - best["ttft_p99"] / slo_ttft, 1 - best["itl_p99"] / slo_itl) if best else None,
                    replays=len(self.tried),
                    seconds=round(sum(r.get("seconds", 0.0) for r in self.tried.values()), 2))


class _Staged:
    """A configuration's search in two stages (module docstring): ``prefix`` (a :class:`_Search`
    on the trace's first ``prefix_len`` requests; None for a short trace), then ``full`` (the
    whole trace, from the prefix's answer).  :attr:`current` is the stage searching now."""

    def __init__(self, config: dict, min_pods: int, max_pods: int, trace):
        self.config, self.min_pods, self.max_pods = config, min_pods, max_pods
        self.prefix = self.full = None
        if len(trace) >= STAGED_MIN:
            cut = trace[0].arrival + PREFIX_SHARE * (trace[-1].arrival - trace[0].arrival)
            k = sum(1 for tr in trace if tr.arrival < cut)
            if 0 < k < len(trace):
                self.prefix = _Search(config, min_pods, max_pods, length=k)
        if self.prefix is None:
            self.full = _Search(config, min_pods, max_pods)

    @property
    def current(self) -> _Search:
        if self.full is None and self.prefix.done:
            p = self.prefix
            self.full = _Search(self.config, self.min_pods, self.max_pods, guess=p.hi)   # None: doubling
            self.full.error = p.error
        return self.full if self.full is not None else self.prefix

    @property
    def done(self) -> bool:
        return self.current.done

    def row(self, trace, slo_ttft: float, slo_itl: float) -> dict:
        row = self.current.row(trace, slo_ttft, slo_itl)
        if self.prefix is not None and "error" not in row:
            row["replays"] += len(self.prefix.tried)
            row["seconds"] = round(row["seconds"] + sum(r.get("seconds", 0.0) for r in self.prefix.tried.values()), 2)
            row["prefix_pods"] = self.prefix.hi
        return row


def search(config: dict, trace, slo_ttft: float, slo_itl: float, *, server_args=(), min_pods: int = 1,
           max_pods: int = 256, seed: int = 0) -> dict:
    """The smallest pod count of ``config`` meeting the SLO (module docstring) and its row, one
    replay at a time (doubling, then bisection)."""
    s = _Staged(config, min_pods, max_pods, trace)
    while not s.done:
        c = s.current
        part = trace if c.length is None else trace[:c.length]
        for n in c.candidates(1):
            c.update(n, _evaluate_safe(config, part, n, slo_ttft, slo_itl, server_args, seed))
    return s.row(trace, slo_ttft, slo_itl)


def _evaluate_safe(config, trace, pods, slo_ttft, slo_itl, server_args, seed) -> dict:
    t0 = time.perf_counter()
    try:
        r = evaluate(config, trace, pods, slo_ttft, slo_itl, server_args, seed)
    except Exception as e:              # a configuration that cannot run (TP > heads, no memory)
        return {"error": f"{type(e).__name__}: {e}"}
    r.setdefault("seconds", time.perf_counter() - t0)
    return r


_TRACE = None                           # the trace, inherited by the pool's processes


def _init(trace) -> None:
    global _TRACE
    _TRACE = trace


def _init_worker(trace) -> None:
    """A pool process: the parent alone handles Ctrl-C (it terminates the pool); a worker that
    took the KeyboardInterrupt itself would die mid-task and leave ``pool.map`` waiting."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init(trace)


def _task(args) -> dict:
    config, pods, slo_ttft, slo_itl, server_args, seed, length = args
    trace = _TRACE if length is None else _TRACE[:length]
    return _evaluate_safe(config, trace, pods, slo_ttft, slo_itl, server_args, seed)


def _whole(args) -> dict:
    config, slo_ttft, slo_itl, kw = args
    return search(config, _TRACE, slo_ttft, slo_itl, **kw)


def plan(trace, configs, slo_ttft: float, slo_itl: float, *, server_args=(), min_pods: int = 1,
         max_pods: int = 256, workers: int = 0, share: tuple[int, int] = (0, 1), seed: int = 0) -> list[dict]:
    """Rows for this share's configurations (``share = (index, count)``), searched on
    ``workers`` processes (0: every core).  With at least as many configurations as processes
    each process searches whole configurations, one after another; with fewer, every round
    replays the next pod counts of every configuration still searching at once, as many per
    configuration as there are processes for it (:class:`_Search`).  Raises ValueError for an
    SLO or share that is not one."""
    if not (slo_ttft > 0 and slo_itl > 0):
        raise ValueError("--slo-ttft and --slo-itl must be positive seconds")
    index, count = share
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"share {index} of {count}: need 0 <= index < count")
    if not 1 <= min_pods <= max_pods:
        raise ValueError(f"need 1 <= --min-pods ({min_pods}) <= --max-pods ({max_pods})")
    searches = [_Staged(c, min_pods, max_pods, trace) for k, c in enumerate(configs) if k % count == index]
    workers = workers or os.cpu_count() or 1
    pool = None
    if workers > 1 and searches:
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        pool = ctx.Pool(workers, initializer=_init_worker, initargs=(trace,))
    else:
        _init(trace)
    try:
        if pool is not None and len(searches) >= workers:
            kw = dict(server_args=tuple(server_args), min_pods=min_pods, max_pods=max_pods, seed=seed)
            return pool.map(_whole, [(s.config, slo_ttft, slo_itl, kw) for s in searches], chunksize=1)
        while True:
            active = [s.current for s in searches if not s.done]
            if not active:
                break
            m = max(1, workers // len(active))
            tasks = [(s, n) for s in active for n in s.candidates(m)]
            args = [(s.config, n, slo_ttft, slo_itl, tuple(server_args), seed, s.length) for s, n in tasks]
            results = pool.map(_task, args, chunksize=1) if pool is not None else [_task(a) for a in args]
            for (s, n), r in zip(tasks, results):
                s.update(n, r)
    except BaseException:           # Ctrl-C, SIGTERM's SystemExit: stop the replays in flight, not wait for them
        if pool is not None:
            pool.terminate()
            pool.join()
            pool = None
        raise
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return [s.row(trace, slo_ttft, slo_itl) for s in searches]


def merge(paths) -> list[dict]:
    """The rows of several shares' JSON files (each a list of rows, as ``plan --output``
    writes), cheapest first (:func:`sort_rows`).  Raises ValueError naming a file that is not one,
    or a configuration that two files hold (a share given twice duplicated its rows)."""
    rows = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a plan result ({e})") from None
        data = data.get("rows", data) if isinstance(data, dict) else data
        if not isinstance(data, list) or not all(
                isinstance(r, dict) and isinstance(r.get("gpu"), str) and isinstance(r.get("tp"), int)
                and not isinstance(r.get("tp"), bool) and isinstance(r.get("router"), str)
                and all(r.get(k) is None or (isinstance(r[k], (int, float)) and not isinstance(r[k], bool))
                        for k in ("pods", "gpus", "gpu_hours", "ttft_p99", "itl_p99", "margin", "cost"))
                for r in data):
            raise ValueError(f"{path}: not a plan result (a list of rows with gpu, tp, router)")
        rows.extend(data)
    seen = set()
    for r in rows:              # the same share given twice (or two plans of one configuration)
        key = (r["gpu"], r.get("tp"), r.get("router"))
        if key in seen:
            raise ValueError(f"configuration {key[0]} TP {key[1]} {key[2]} comes twice: give each share's result once")
        seen.add(key)
    return sort_rows(rows)


def sort_rows(rows) -> list[dict]:
    """Cheapest first: the cost where the rows are priced (:func:`price_rows`), else GPU-hours
    (configurations that met no count last), then pods."""
    return sorted(rows, key=lambda r: (r.get("gpu_hours") is None, r.get("cost", r.get("gpu_hours")) or 0,
                                       r.get("gpu_hours") or 0, r.get("pods") or 0, r["gpu"], r["tp"], r["router"]))


def parse_gpu_prices(text: str) -> dict[str, float]:
    """``--gpu-prices``: ``NAME=PRICE,...`` (a price an hour of one GPU, in any currency) keyed by
    the GPU's own name (``a100`` and ``A100-80GB`` are one GPU; a name the simulator does not
    know is kept as given, for a GPU a ``.json`` description names).  Raises ValueError naming
    the flag and the entry (a GPU priced twice included)."""
    from generation.config.values import ConfigError
    from generation.engine.perf.hardware import gpu_by_name
    prices = {}
    for entry in (x.strip() for x in text.split(",") if x.strip()):
        name, eq, value = entry.rpartition("=")
        name = name.strip()
        try:
            price = float(value) if eq and name else math.nan
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price >= 0):
            raise ValueError(f"--gpu-prices: {entry!r} is not GPU=PRICE with a price of at least 0")
        try:
            name = gpu_by_name(name).name
        except ConfigError as e:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
                raise ValueError(re.sub(r"^--gpu\b", "--gpu-prices", str(e))) from None
        if name in prices:
            raise ValueError(f"--gpu-prices: {name} is priced twice")
        prices[name] = price
    return prices


def price_for(prices: dict[str, float], gpu: str) -> float:
    """The price of ``gpu`` (a ``--gpus`` entry) in ``prices`` (:func:`parse_gpu_prices`).
    Raises ValueError when it has none."""
    from generation.engine.perf.hardware import gpu_by_name
    name = gpu_by_name(gpu).name
    if name not in prices:
        raise ValueError(f"--gpu-prices: no price for {gpu} (give {name}=PRICE)")
    return prices[name]


def price_rows(rows, prices: dict[str, float]) -> None:
    """Each planned row's ``cost``: its GPU-hours at its GPU's price an hour."""
    for r in rows:
        if r.get("gpu_hours") is not None and not r.get("error"):
            r["cost"] = r["gpu_hours"] * price_for(prices, r["gpu"])


THIN_MARGIN = 0.05       # table(): a margin below this gets a note


def table(rows, slo_ttft: float | None = None, slo_itl: float | None = None) -> str:
    """The rows as a text table: configuration, pods, GPUs, GPU-hours, cost (priced rows), p99s, margin; a note
    under it when a configuration's margin is below :data:`THIN_MARGIN`."""
    priced = any("cost" in r for r in rows)
    w = max([10] + [len(str(r["gpu"])) for r in rows])         # a long alias or a description's file
    head = f"{'GPU':{w}s} {'TP':>2s} {'router':15s} {'pods':>5s} {'GPUs':>5s} {'GPU-h':>8s} " \
           + (f"{'cost':>9s} " if priced else "") + f"{'TTFT p99':>9s} {'ITL p99':>8s} {'margin':>7s}"
    lines = [head, "-" * len(head)]
    ms = lambda v: "-" if v is None else ("inf" if v == math.inf else f"{1000 * v:.0f} ms")
    for r in rows:
        if r.get("error"):
            lines.append(f"{r['gpu']:{w}s} {r['tp']:>2d} {r['router']:15s} error: {r['error']}")
            continue
        met = r.get("pods") is not None
        pods = str(r["pods"]) if met else ">max"
        gpus = str(r["gpus"]) if met else "-"
        hours = f"{r['gpu_hours']:.2f}" if met else "-"
        margin = f"{100 * r['margin']:.0f} %" if met else "-"
        cost = (f"{r['cost']:9.2f} " if "cost" in r else f"{'-':>9s} ") if priced else ""
        lines.append(f"{r['gpu']:{w}s} {r['tp']:>2d} {r['router']:15s} {pods:>5s} {gpus:>5s} {hours:>8s} {cost}"
                     f"{ms(r.get('ttft_p99')):>9s} {ms(r.get('itl_p99')):>8s} {margin:>7s}")
    thin = [r for r in rows if r.get("pods") is not None and r.get("margin") is not None and r["margin"] < THIN_MARGIN]
    if thin:        # a p99 near the SLO is not monotone in the pods (one replay's draw of which requests wait)
        lines.append(f"note: {len(thin)} configuration(s) with a margin under {100 * THIN_MARGIN:.0f} %: near the SLO a "
                     f"replay's p99 goes up and down with the pod count, so a pod or two fewer may pass too (try "
                     f"`python -m generation.fleet replay --pods N` with the trace)")
    return "\n".join(lines)
