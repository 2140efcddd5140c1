"""Plots of fleet replays (matplotlib, PNG): one replay over time, and routers side by side."""
from __future__ import annotations


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_fleet(result, path: str, title: str = "") -> None:
    """TTFT by arrival, each pod's KV usage over time, and the pods over time (ready,
    starting, draining) of a :class:`~generation.fleet.replay.FleetResult`."""
    plt = _plt()
    fig, (a, k, n) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    recs = result.records
    a.plot([r["arrival"] for r in recs], [1000 * r["ttft"] for r in recs], ".", ms=2)
    a.set_ylabel("TTFT (ms)")
    a.set_yscale("log")
    a.set_title(title or f"{result.router}: {len(recs)} requests")
    for p in result.pods:
        steps = list(p.result.steps)
        if len(steps) > 2000:               # a readable line: every n-th step
            steps = steps[::len(steps) // 2000]
        k.plot([s[0] for s in steps], [100 * s[1] for s in steps], lw=0.6)
    k.set_ylabel("KV usage per pod (%)")
    tl = result.timeline
    xs = [t[0] for t in tl]
    n.step(xs, [t[1] for t in tl], where="post", label="ready")
    n.step(xs, [t[2] for t in tl], where="post", label="starting")
    n.step(xs, [t[3] for t in tl], where="post", label="draining")
    n.set_ylabel("pods")
    n.set_xlabel("time (s)")
    n.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(rows, path: str, title: str = "") -> None:
    """Bars per router: prefix-cache hit rate, output throughput, TTFT p50 / p99 (rows of
    :meth:`FleetResult.summary`)."""
    plt = _plt()
    names = [r["router"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    axes[0].bar(names, [100 * r["cache_hit_rate"] for r in rows], color="tab:green")
    axes[0].set_ylabel("prefix cache hit rate (%)")
    axes[1].bar(names, [r["output_tokens_per_s"] for r in rows], color="tab:blue")
    axes[1].set_ylabel("output tokens / s")
    x = range(len(rows))
    axes[2].bar([i - 0.2 for i in x], [1000 * r["ttft_s"]["p50"] for r in rows], width=0.4, label="p50")
    axes[2].bar([i + 0.2 for i in x], [1000 * r["ttft_s"]["p99"] for r in rows], width=0.4, label="p99")
    axes[2].set_xticks(list(x), names)
    axes[2].set_ylabel("TTFT (ms)")
    axes[2].set_yscale("log")
    axes[2].legend()
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
