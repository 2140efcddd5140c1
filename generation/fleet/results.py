"""What a fleet replay gives (:class:`FleetResult`): the pods, the finished requests as
columns (:class:`Records`), every inter-token latency, pods over time and GPU-hours; fleet and
per-pod summaries.  Times are seconds of virtual time."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generation.engine.pod_replay import ReplayResult

_PCT = ReplayResult().percentiles


class Records:
    """The fleet's finished requests as columns, sorted by arrival (stable): ``arrival``,
    ``ttft``, ``e2e`` (client seconds, float64 arrays), ``prompt_tokens``, ``output_tokens``,
    ``cached_tokens`` (int64 arrays) and ``pod_index`` into ``names``.  ``len``, indexing and
    iteration give one dict per request (the keys above and ``pod``, its name), as the list of
    dicts it replaces; 50 bytes a request instead of ~350."""

    KEYS = ("arrival", "ttft", "e2e", "prompt_tokens", "output_tokens", "cached_tokens")

    def __init__(self, parts, names):
        """``parts``: ``(pod index, arrival, first, last, prompt, output, cached)`` per pod (array-likes of
        equal length: client arrival, first and last token, seconds; tokens), in pod order."""
        self.names = list(names)
        f8, i8 = np.float64, np.int64
        cat = lambda k, dt: np.concatenate([np.asarray(p[k], dtype=dt) for p in parts]) if parts else np.zeros(0, dt)
        arrival, first, last = cat(1, f8), cat(2, f8), cat(3, f8)
        pod = np.concatenate([np.full(len(p[1]), p[0], dtype=np.int32) for p in parts]) if parts else np.zeros(0, np.int32)
        order = np.argsort(arrival, kind="stable")
        self.arrival = arrival[order]
        self.ttft = (first - arrival)[order]
        self.e2e = (last - arrival)[order]
        self.prompt_tokens = cat(4, i8)[order]
        self.output_tokens = cat(5, i8)[order]
        self.cached_tokens = cat(6, i8)[order]
        self.pod_index = pod[order]

    def __len__(self) -> int:
        return len(self.arrival)

    def __getitem__(self, i: int) -> dict:
        row = {k: getattr(self, k)[i].item() for k in self.KEYS}
        row["pod"] = self.names[int(self.pod_index[i])]
        return row

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


@dataclass
class FleetResult:
    """What a fleet replay gives: ``pods`` (every pod that lived, with its ``result``),
    ``records`` the finished requests by arrival (:class:`Records`: one dict per request,
    ``arrival``, ``ttft``, ``e2e`` in client seconds, ``prompt_tokens``, ``output_tokens``,
    ``cached_tokens``, ``pod``), ``itl`` every inter-token latency (the pods' own, read as one), ``timeline`` ``(time, ready, starting, draining)`` at each change and
    scrape, ``gpu_hours``, ``duration`` (seconds to the last token), ``unfinished`` (requests
    never finished: timed out, or larger than the cache), ``router``, ``decisions`` (the
    autoscaler's, when one ran) and ``prefill_decisions`` (P/D: the prefill pool's)."""
    pods: list
    records: "Records"
    itl: object
    timeline: list
    gpu_hours: float
    duration: float
    unfinished: int
    router: str
    gpus_per_pod: int = 1
    decisions: list = field(default_factory=list)
    gave_up: bool = False
    prefill_decisions: list = field(default_factory=list)

    def summary(self) -> dict:
        """Fleet percentiles (p50/p90/p99 of TTFT, ITL, E2E, seconds), throughput, the prefix
        cache's hit rate (cached prompt tokens over prompt tokens), preemptions, pods and
        GPU-hours."""
        recs = self.records
        out_tokens = int(recs.output_tokens.sum())
        prompt = int(recs.prompt_tokens.sum())
        d = self.duration
        return {"router": self.router, "requests": len(recs), "unfinished": self.unfinished,
                "duration_s": d, "output_tokens_per_s": out_tokens / d if d else 0.0,
                "requests_per_s": len(recs) / d if d else 0.0,
                "ttft_s": _PCT(recs.ttft.tolist()), "itl_s": _PCT(self.itl),
                "e2e_s": _PCT(recs.e2e.tolist()),
                "cache_hit_rate": int(recs.cached_tokens.sum()) / prompt if prompt else 0.0,
                "preemptions": sum(p.result.preemptions for p in self.pods),
                "pods_max": max((t[1] + t[2] + t[3] for t in self.timeline), default=len(self.pods)),
                "pods_total": len(self.pods), "gpu_hours": self.gpu_hours, "gave_up": self.gave_up}

    def per_pod(self) -> list[dict]:
        """One row per pod: name, role, requests routed and finished, TTFT / ITL / E2E p50 and
        p99 (client seconds, as the pod's own replay gives them), mean KV usage, preemptions,
        life (created, ready, removed; seconds)."""
        rows = []
        for p in self.pods:
            s = p.result.summary()
            rows.append({"pod": p.name, "role": p.role, "routed": getattr(p, "n_routed", len(p.routed)), "requests": s["requests"],
                         "ttft_p50": s["ttft_s"]["p50"], "ttft_p99": s["ttft_s"]["p99"],
                         "itl_p50": s["itl_s"]["p50"], "itl_p99": s["itl_s"]["p99"],
                         "e2e_p50": s["e2e_s"]["p50"], "e2e_p99": s["e2e_s"]["p99"],
                         "kv_usage_mean": s["kv_usage_mean"], "preemptions": s["preemptions"],
                         "created": p.created, "ready_at": p.ready_at, "removed_at": p.removed_at})
        return rows
