"""The capacity planner: "given this trace and SLO (p99 TTFT, p99 ITL), how many pods of which
GPU and TP, with which router?"

For each configuration (GPU x tensor-parallel size x router) it searches the smallest pod count
that meets the SLO with fleet replays (:class:`~generation.fleet.replay.FleetReplay`): pod counts
double from ``min_pods`` until one meets the SLO, then a bisection between the last failing and
the first passing count.  A replay that cannot meet the p99 TTFT any more stops early
(``give_up_ttft``).  Configurations run in parallel over the machine's cores
(:mod:`multiprocessing`); a sweep too big for one machine is cut into shares
(``share=(index, count)``: configuration k goes to share ``k % count``), one per index of a
Kubernetes indexed Job (``deploy/kubernetes/plan-job.yaml``), each writing its rows as JSON,
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
                        gpus_per_pod=config["tp"], give_up_ttft=slo_ttft, keep_routed=False, seed=seed,
                        kv_transfer_bandwidth=cfg.kv_transfer_bandwidth)
    s = fleet.run().summary()
    ttft = s["ttft_s"]["p99"]
    itl = s["itl_s"]["p99"] or 0.0
    if s["gave_up"] or ttft is None:
        ttft = math.inf
    ok = not s["gave_up"] and s["unfinished"] == 0 and ttft <= slo_ttft and itl <= slo_itl
    return {"pods": pods, "ttft_p99": ttft, "itl_p99": itl, "ok": ok, "gave_up": s["gave_up"]}


def search(config: dict, trace, slo_ttft: float, slo_itl: float, *, server_args=(), min_pods: int = 1,
           max_pods: int = 256, seed: int = 0) -> dict:
    """The smallest pod count of ``config`` meeting the SLO (module docstring) and its row."""
    t0 = time.perf_counter()
    tried = {}

    def ok(n):
        if n not in tried:
            tried[n] = evaluate(config, trace, n, slo_ttft, slo_itl, server_args, seed)
        return tried[n]["ok"]

    lo, hi = min_pods - 1, min_pods            # lo fails (or is below the range), hi is tried
    while not ok(hi):
        lo = hi
        if hi >= max_pods:
            hi = None
            break
        hi = min(hi * 2, max_pods)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid
    span = (trace[-1].arrival - trace[0].arrival) if trace else 0.0
    best = tried[hi] if hi is not None else None
    row = dict(config, pods=hi, gpus=hi * config["tp"] if hi else None,
               gpu_hours=hi * config["tp"] * span / 3600.0 if hi else None,
               ttft_p99=best["ttft_p99"] if best else None, itl_p99=best["itl_p99"] if best else None,
               margin=min(1 - best["ttft_p99"] / slo_ttft, 1 - best["itl_p99"] / slo_itl) if best else None,
               replays=len(tried), seconds=round(time.perf_counter() - t0, 2))
    return row


def _work(args):
    config, trace, slo_ttft, slo_itl, kw = args
    try:
        return search(config, trace, slo_ttft, slo_itl, **kw)
    except Exception as e:              # a configuration that cannot run (TP > heads, no memory)
        return dict(config, pods=None, error=f"{type(e).__name__}: {e}")


def plan(trace, configs, slo_ttft: float, slo_itl: float, *, server_args=(), min_pods: int = 1,
         max_pods: int = 256, workers: int = 0, share: tuple[int, int] = (0, 1), seed: int = 0) -> list[dict]:
    """Rows for this share's configurations (``share = (index, count)``), searched on
    ``workers`` processes (0: every core).  Raises ValueError for an SLO or share that is not
    one."""
    if not (slo_ttft > 0 and slo_itl > 0):
        raise ValueError("--slo-ttft and --slo-itl must be positive seconds")
    index, count = share
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"share {index} of {count}: need 0 <= index < count")
    if not 1 <= min_pods <= max_pods:
        raise ValueError(f"need 1 <= --min-pods ({min_pods}) <= --max-pods ({max_pods})")
    mine = [c for k, c in enumerate(configs) if k % count == index]
    kw = dict(server_args=tuple(server_args), min_pods=min_pods, max_pods=max_pods, seed=seed)
    jobs = [(c, trace, slo_ttft, slo_itl, kw) for c in mine]
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(jobs) <= 1:
        return [_work(j) for j in jobs]
    ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    with ctx.Pool(min(workers, len(jobs))) as pool:
        return pool.map(_work, jobs, chunksize=1)


def merge(paths) -> list[dict]:
    """The rows of several shares' JSON files (each a list of rows, as ``plan --output``
    writes), in the configurations' order.  Raises ValueError naming a file that is not one."""
    rows = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a plan result ({e})") from None
        data = data.get("rows", data) if isinstance(data, dict) else data
        if not isinstance(data, list) or not all(isinstance(r, dict) and "gpu" in r for r in data):
            raise ValueError(f"{path}: not a plan result (a list of rows with gpu, tp, router)")
        rows.extend(data)
    return sort_rows(rows)


def sort_rows(rows) -> list[dict]:
    """Cheapest first: GPU-hours (configurations that met no count last), then pods."""
    return sorted(rows, key=lambda r: (r.get("gpu_hours") is None, r.get("gpu_hours") or 0, r.get("pods") or 0,
                                       r["gpu"], r["tp"], r["router"]))


def table(rows, slo_ttft: float | None = None, slo_itl: float | None = None) -> str:
    """The rows as a text table: configuration, pods, GPUs, GPU-hours, p99s, margin."""
    head = f"{'GPU':10s} {'TP':>2s} {'router':15s} {'pods':>5s} {'GPUs':>5s} {'GPU-h':>8s} " \
           f"{'TTFT p99':>9s} {'ITL p99':>8s} {'margin':>7s}"
    lines = [head, "-" * len(head)]
    ms = lambda v: "-" if v is None else ("inf" if v == math.inf else f"{1000 * v:.0f} ms")
    for r in rows:
        if r.get("error"):
            lines.append(f"{r['gpu']:10s} {r['tp']:>2d} {r['router']:15s} error: {r['error']}")
            continue
        met = r.get("pods") is not None
        pods = str(r["pods"]) if met else ">max"
        gpus = str(r["gpus"]) if met else "-"
        hours = f"{r['gpu_hours']:.2f}" if met else "-"
        margin = f"{100 * r['margin']:.0f} %" if met else "-"
        lines.append(f"{r['gpu']:10s} {r['tp']:>2d} {r['router']:15s} {pods:>5s} {gpus:>5s} {hours:>8s} "
                     f"{ms(r.get('ttft_p99')):>9s} {ms(r.get('itl_p99')):>8s} {margin:>7s}")
    return "\n".join(lines)
