"""``python -m generation.fleet``: a fleet of simulated vLLM pods in virtual time.

Subcommands (other flags are the server's: ``--gpu``, ``--model``, ``-tp``, ``--max-model-len``,
``--max-num-seqs``, ...; every pod gets them):

- ``replay``: a trace (``--trace``: JSON Lines, an Azure LLM inference CSV or a BurstGPT CSV)
  or a synthetic prefix-heavy load (``--prefix-heavy``) on ``--pods`` pods behind ``--router``,
  optionally P/D (``--prefill-pods``) or autoscaled (``--autoscale``); prints fleet and per-pod
  percentiles, pods and GPU-hours, and draws ``--plot``;
- ``plan``: the pods each configuration (``--gpus`` x ``--tp`` x ``--routers``) needs to meet
  ``--slo-ttft`` / ``--slo-itl`` (p99, seconds) on a trace; ``--share I/N`` (or the indexed
  Job's ``JOB_COMPLETION_INDEX`` with ``--shares N``) plans one share and ``--output`` writes
  its rows;
- ``merge``: the shares' ``--output`` files as one table;
- ``trace``: write a synthetic prefix-heavy trace as JSON Lines.

Exit status 0, or 2 with one ``error:`` line for a bad flag, configuration or trace.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time


def _trace_args(p, required: bool = False) -> None:
    p.add_argument("--trace", required=required, help="JSON Lines (arrival, prompt_tokens, output_tokens, "
                   "prefix_group, prefix_tokens, session_id), Azure LLM inference CSV or BurstGPT CSV")
    p.add_argument("--trace-format", default="auto", help="auto (default), jsonl, azure or burstgpt")
    p.add_argument("--start", type=float, default=0.0, help="skip this many seconds of the trace")
    p.add_argument("--duration", type=float, default=0.0, help="take this many seconds of the trace (0: all)")
    p.add_argument("--speedup", type=float, default=1.0, help="divide the trace's times by this")


def _synthetic_args(p) -> None:
    p.add_argument("--prefix-heavy", action="store_true", help="a synthetic load instead of --trace: "
                   "conversations under long shared system prompts")
    p.add_argument("--rate", type=float, default=20.0, help="synthetic: conversations per second")
    p.add_argument("--seconds", type=float, default=60.0, help="synthetic: seconds of arrivals")
    p.add_argument("--groups", type=int, default=64, help="synthetic: system prompts")
    p.add_argument("--system-tokens", type=int, default=2048)
    p.add_argument("--question-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--turns", type=int, default=1, help="synthetic: turns per conversation (a session)")


def _load_trace(args, max_model_len: int | None):
    """The requests to replay; a trace's or the synthetic load's prompts that fill
    ``--max-model-len`` are refused as vLLM refuses them, said on stderr (or in the error when
    none is left).  The synthetic load is at most ``MAX_TRACE_REQUESTS`` requests."""
    from .traces import fit_context, prefix_workload, read_fleet_trace
    if getattr(args, "trace", None) and getattr(args, "prefix_heavy", False):
        raise ValueError("give --trace FILE or --prefix-heavy, not both")
    if getattr(args, "trace", None):
        counts: dict = {}
        trace = read_fleet_trace(args.trace, args.trace_format, start=args.start, duration=args.duration,
                                 speedup=args.speedup, max_model_len=max_model_len, counts=counts)
        refused = counts.get("refused", 0)
        if refused:
            said = f"{refused} request(s) refused: prompt past --max-model-len {max_model_len}"
            if not trace:
                raise ValueError(f"the trace has no request to replay ({said}; raise --max-model-len)")
            print(said, file=sys.stderr)
        return trace
    if getattr(args, "prefix_heavy", False):
        for flag, v in (("--rate", args.rate), ("--seconds", args.seconds)):
            if not v > 0:
                raise ValueError(f"{flag} must be positive, got {v}")
        for flag, v in (("--groups", args.groups), ("--system-tokens", args.system_tokens),
                        ("--question-tokens", args.question_tokens), ("--output-tokens", args.output_tokens),
                        ("--turns", args.turns)):
            if v < 1:
                raise ValueError(f"{flag} must be at least 1, got {v}")
        from generation.engine.replay_trace import MAX_TRACE_REQUESTS
        expected = args.rate * args.seconds * args.turns
        if expected > MAX_TRACE_REQUESTS:     # the load is built in memory before anything runs
            raise ValueError(f"--rate x --seconds x --turns must come to at most {MAX_TRACE_REQUESTS:,} requests (a "
                             f"replay holds every request in memory), got {expected:,.0f}")
        trace, refused = fit_context(prefix_workload(
            args.rate, args.seconds, groups=args.groups, system_tokens=args.system_tokens,
            question_tokens=args.question_tokens, output_tokens=args.output_tokens, turns=args.turns,
            seed=args.seed), max_model_len)
        if refused:
            said = (f"{refused} request(s) refused: prompt (--system-tokens + --question-tokens, and the turns before "
                    f"it) past --max-model-len {max_model_len}")
            if not trace:
                raise ValueError(f"the synthetic load has no request to replay ({said}; raise --max-model-len)")
            print(said, file=sys.stderr)
        return trace
    raise ValueError("give --trace FILE or --prefix-heavy")


def _ms(d: dict) -> str:
    return "  ".join(f"{k} {1000 * v:.1f} ms" if v is not None else f"{k} -" for k, v in d.items())


def cmd_replay(args, rest) -> int:
    from .autoscaler import Autoscaler, load_policy
    from .replay import FleetReplay, pod_factory
    from .routing import make_router, parse_weights
    from generation.engine.replay_trace import check_plot_path
    check_plot_path(args.plot)          # before the run, not a traceback after it
    new_pod, cfg, settings = pod_factory(rest)
    weights = parse_weights(args.router_weights) if args.router_weights else None
    router = make_router(args.router, seed=args.seed, weights=weights, precise=not args.approx)
    prefill_router = make_router(args.prefill_router, seed=args.seed + 1, weights=weights, precise=not args.approx,
                                 flag="--prefill-router")
    if args.approx and "weighted" not in (args.router, args.prefill_router if args.prefill_pods else None):
        print("warning: --approx applies to the weighted router only (prefix-approx is the approximate "
              "prefix router)", file=sys.stderr)
    scaler = pre_scaler = None
    if args.autoscale or args.autoscaler_config:
        policy = load_policy(args.autoscaler_config, scrape_interval=args.scrape_interval,
                             startup_delay=args.startup_delay, min_replicas=args.min_pods, max_replicas=args.max_pods)
        scaler = Autoscaler(policy)
        if args.prefill_pods:           # P/D: the prefill pool scaled apart, on the same rules
            pre_scaler = Autoscaler(policy)
    FleetReplay.check(args.pods, args.prefill_pods, scaler, pre_scaler, args.pd_threshold,
                      cfg.kv_transfer_bandwidth * 1e9, args.router_refresh)     # the flags, before the trace
    trace = _load_trace(args, cfg.max_model_len)
    if not trace:
        raise ValueError("the trace has no request in that window")
    tp = cfg.tensor_parallel_size
    t0 = time.perf_counter()
    fleet = FleetReplay(new_pod, trace, pods=args.pods, router=router, autoscaler=scaler,
                        prefill_pods=args.prefill_pods, prefill_router=prefill_router,
                        kv_transfer_bandwidth=cfg.kv_transfer_bandwidth * 1e9, pd_threshold=args.pd_threshold,
                        gpus_per_pod=tp, jitter=cfg.step_time_jitter, seed=args.seed, keep_routed=False,
                        refresh_interval=args.router_refresh, prefill_autoscaler=pre_scaler, compact=True)
    import gc
    gc.disable()        # a replay makes no reference cycles: the collector's passes only cost time
    try:
        result = fleet.run()
    finally:
        gc.enable()
    wall = time.perf_counter() - t0
    s = result.summary()
    s["wall_s"] = wall
    if args.json:
        print(json.dumps({"fleet": s, "pods": result.per_pod(), "timeline": result.timeline}, indent=2))
    else:
        for line in settings.summary(cfg.max_model_len):
            print(line)
        print(f"fleet: {s['requests']} requests ({s['unfinished']} unfinished) in {s['duration_s']:.1f} s on "
              f"{s['pods_total']} pods (at most {s['pods_max']} at once, router {s['router']}): "
              f"{s['output_tokens_per_s']:.0f} output tokens/s, prefix cache hit rate "
              f"{100 * s['cache_hit_rate']:.1f} %, {s['preemptions']} preemptions, {s['gpu_hours']:.2f} GPU-hours "
              f"(replayed in {wall:.1f} s)")
        for k in ("ttft_s", "itl_s", "e2e_s"):
            print(f"  {k[:-2].upper():5s} {_ms(s[k])}")
        if args.per_pod or len(result.pods) <= 16:
            print(f"  {'pod':12s} {'reqs':>6s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p99':>8s} {'E2E p99':>9s} "
                  f"{'KV mean':>8s} {'life (s)':>16s}")
            for r in result.per_pod():
                f = lambda v: "-" if v is None else f"{1000 * v:.0f} ms"
                end = "end" if r["removed_at"] is None else f"{r['removed_at']:.0f}"   # kept to the end
                print(f"  {r['pod']:12s} {r['requests']:>6d} {f(r['ttft_p50']):>9s} {f(r['ttft_p99']):>9s} "
                      f"{f(r['itl_p99']):>8s} {f(r['e2e_p99']):>9s} {100 * r['kv_usage_mean']:>7.1f}% "
                      f"{r['created']:>7.0f}..{end:<7s}")
        for name, decisions in (("autoscaler", result.decisions), ("prefill autoscaler", result.prefill_decisions)):
            if decisions:
                ups = sum(1 for d in decisions if d[2] > 0)
                downs = sum(1 for d in decisions if d[2] < 0)
                print(f"  {name}: {ups} scale-ups, {downs} scale-downs over {len(decisions)} scrapes")
    if args.plot:
        from .plot import plot_fleet
        plot_fleet(result, args.plot, f"{settings.gpu.name} {settings.arch.name}, router {s['router']}")
        print(f"plot: {os.path.abspath(args.plot)}", file=sys.stderr)
    return 0


def _share(args) -> tuple[int, int]:
    if args.share:
        i, sep, n = args.share.partition("/")
        try:
            return int(i), int(n)
        except ValueError:
            raise ValueError(f"--share must be INDEX/COUNT, got {args.share!r}") from None
    if args.shares > 1:
        idx = os.environ.get("JOB_COMPLETION_INDEX")
        if idx is None:
            raise ValueError("--shares needs --share INDEX/COUNT or JOB_COMPLETION_INDEX (an indexed Job)")
        return int(idx), args.shares
    return 0, 1


def cmd_plan(args, rest) -> int:
    from .planner import configurations, plan, sort_rows, table
    from generation.config.cli import load_config
    # the server flags, parsed once before forking; each configuration's GPU and TP are resolved
    # in its own replays (one that cannot run, a model too big for the GPU, is a row's error)
    cfg = load_config(["--latency-calculator", "step", *rest])
    for key, flag in (("gpu", "--gpus"), ("tensor-parallel-size", "--tp")):
        if key in cfg.explicit:         # each configuration sets it: a server flag would override every row's
            raise ValueError(f"plan takes its GPUs from --gpus and its TP sizes from --tp, not --{key}; "
                             f"give {flag}")
    trace = _load_trace(args, cfg.max_model_len)
    if not trace:
        raise ValueError("the trace has no request in that window")
    split = lambda v: [x.strip() for x in v.split(",") if x.strip()]
    try:
        tps = [int(x) for x in split(args.tp)]
    except ValueError:
        raise ValueError(f"--tp must be integers separated by commas, got {args.tp!r}") from None
    from generation.config.values import ConfigError
    from generation.engine.perf.hardware import GPUS, gpu_by_name
    for flag, v in (("--gpus", split(args.gpus)), ("--tp", tps), ("--routers", split(args.routers))):
        if not v:
            raise ValueError(f"{flag} names no configuration, got {getattr(args, flag[2:])!r}")
    for g in split(args.gpus):          # a name no pod can have is the command line's error, not a row's
        try:
            gpu_by_name(g)
        except ConfigError as e:
            hint = " (--gpus is split at commas: give a GPU's description in a .json file)" if "{" in args.gpus else ""
            raise ValueError(re.sub(r"^--gpu\b", "--gpus", str(e)) + hint) from None
    prices = None
    if args.gpu_prices:             # every GPU priced before the replays run
        from .planner import parse_gpu_prices, price_for
        prices = parse_gpu_prices(args.gpu_prices)
        for g in split(args.gpus):
            price_for(prices, g)
        planned = {gpu_by_name(g).name for g in split(args.gpus)}
        for name in prices:             # a name neither a GPU here nor one a description of --gpus gives: a slip
            if name not in planned and name.lower() not in {k.lower() for k in GPUS}:
                raise ValueError(f"--gpu-prices: {name} is not a GPU of --gpus ({', '.join(sorted(planned))})")
    if any(t < 1 for t in tps):
        raise ValueError(f"--tp sizes must be at least 1, got {args.tp!r}")
    if args.workers < 0:
        raise ValueError(f"--workers must be at least 0 (0: every core), got {args.workers}")
    configs = configurations(split(args.gpus), tps, split(args.routers))
    from .routing import ROUTERS
    for c in configs:
        if c["router"] not in ROUTERS:
            raise ValueError(f"--routers: {c['router']!r} is not one of {', '.join(ROUTERS)}")
    share = _share(args)
    from generation.engine.replay_trace import check_output_path
    check_output_path(args.output, "--output")
    t0 = time.perf_counter()
    rows = plan(trace, configs, args.slo_ttft, args.slo_itl, server_args=rest, min_pods=args.min_pods,
                max_pods=args.max_pods, workers=args.workers, share=share, seed=args.seed)
    if prices is not None:
        from .planner import price_rows
        price_rows(rows, prices)
    rows = sort_rows(rows)
    wall = time.perf_counter() - t0
    span = trace[-1].arrival - trace[0].arrival
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"share": list(share), "slo_ttft": args.slo_ttft, "slo_itl": args.slo_itl, "rows": rows},
                      f, indent=1, default=str)
        print(f"rows: {os.path.abspath(args.output)}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(f"{len(trace)} requests over {span:.0f} s; SLO p99 TTFT {1000 * args.slo_ttft:.0f} ms, "
              f"p99 ITL {1000 * args.slo_itl:.0f} ms; {len(rows)} configurations"
              + (f" (share {share[0]} of {share[1]})" if share[1] > 1 else "")
              + f", {sum(r.get('replays', 0) for r in rows)} replays in {wall:.1f} s on "
                f"{args.workers or os.cpu_count()} processes")
        print(table(rows))
    if rows and all(r.get("error") for r in rows):     # nothing planned: a configuration the model cannot have
        print(f"error: no configuration could be planned ({rows[0]['error']})", file=sys.stderr)
        return 2
    return 0


def cmd_merge(args, rest) -> int:
    from .planner import merge, table
    if rest:
        raise ValueError(f"merge takes result files only, not {rest[0]}")
    rows = merge(args.files)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f, indent=1, default=str)
    print(json.dumps(rows, indent=2, default=str) if args.json else table(rows))
    return 0


def cmd_trace(args, rest) -> int:
    from .traces import write_jsonl
    if rest:
        raise ValueError(f"unknown flag {rest[0]}")
    args.prefix_heavy = True
    reqs = _load_trace(args, None)
    write_jsonl(reqs, args.output)
    print(f"{len(reqs)} requests: {os.path.abspath(args.output)}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m generation.fleet",
                                description="A fleet of simulated vLLM pods in virtual time: replay, plan, merge, trace.",
                                epilog="Other flags are the server's (--gpu, --model, -tp, --max-model-len, ...).",
                                allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="replay a trace on a fleet", allow_abbrev=False,
                       epilog="Other flags are the server's, given to every pod: --gpu, --model, -tp, --max-model-len, "
                              "--max-num-seqs, --kv-transfer-bandwidth (P/D, GB/s), ...")
    _trace_args(r)
    _synthetic_args(r)
    r.add_argument("--pods", type=int, default=4, help="pods at the start (decode pods with --prefill-pods)")
    r.add_argument("--router", default="round-robin", help="round-robin, least-queue, least-running, lowest-kv, "
                   "prefix-precise, prefix-approx, weighted, vllm-dp (vllm serve -dp N's own balancer)")
    r.add_argument("--router-weights", help="weighted: scorer=weight,... (prefix, queue, kv, running); "
                   "default prefix=3,queue=2,kv=2")
    r.add_argument("--router-refresh", type=float, default=0.0, help="seconds between the router's reads of the "
                   "pods' state (GIE refreshes every 0.05 s); 0: the state at each arrival")
    r.add_argument("--approx", action="store_true", help="weighted: the approximate prefix scorer")
    r.add_argument("--prefill-pods", type=int, default=0, help="P/D: prefill pods (0: no disaggregation)")
    r.add_argument("--prefill-router", default="prefix-precise", help="P/D: the prefill pool's router")
    r.add_argument("--pd-threshold", type=int, default=0,
                   help="P/D: llm-d's prefix-based-pd-decider nonCachedTokens: a request whose prompt tokens not "
                        "cached on the picked decode pod are fewer is served by that pod alone (0: every request "
                        "through the prefill pool)")
    r.add_argument("--autoscale", action="store_true", help="WVA's saturation autoscaler")
    r.add_argument("--autoscaler-config", help="YAML thresholds (WVA's keys: kvCacheThreshold, ...)")
    r.add_argument("--scrape-interval", type=float, default=None, help="autoscaler: seconds (default 15)")
    r.add_argument("--startup-delay", type=float, default=None, help="autoscaler: a new pod's start (default 60 s)")
    r.add_argument("--min-pods", type=int, default=None, help="autoscaler: min replicas (default 1)")
    r.add_argument("--max-pods", type=int, default=None, help="autoscaler: max replicas (default 64)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true")
    r.add_argument("--per-pod", action="store_true", help="the per-pod table even for more than 16 pods")
    r.add_argument("--plot", help="write a PNG here")
    r.set_defaults(func=cmd_replay)
    pl = sub.add_parser("plan", help="pods needed per configuration for an SLO", allow_abbrev=False)
    _trace_args(pl, required=True)
    pl.add_argument("--slo-ttft", type=float, required=True, help="p99 TTFT, seconds")
    pl.add_argument("--slo-itl", type=float, required=True, help="p99 ITL, seconds")
    pl.add_argument("--gpus", default="H100", help="GPU types, comma-separated")
    pl.add_argument("--tp", default="1", help="tensor-parallel sizes, comma-separated")
    pl.add_argument("--routers", default="round-robin", help="routers, comma-separated")
    pl.add_argument("--gpu-prices", default="", help="price of a GPU-hour by GPU (H100=2.99,A100-80GB=1.79): "
                                                    "a cost column, cheapest first")
    pl.add_argument("--min-pods", type=int, default=1)
    pl.add_argument("--max-pods", type=int, default=256)
    pl.add_argument("--workers", type=int, default=0, help="processes (0: every core)")
    pl.add_argument("--share", help="INDEX/COUNT: plan this share of the configurations")
    pl.add_argument("--shares", type=int, default=1, help="with JOB_COMPLETION_INDEX: the share count")
    pl.add_argument("--output", help="write the rows as JSON here (for merge)")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plan)
    m = sub.add_parser("merge", help="join the shares' plan results", allow_abbrev=False)
    m.add_argument("files", nargs="+")
    m.add_argument("--output")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_merge)
    t = sub.add_parser("trace", help="write a synthetic prefix-heavy trace", allow_abbrev=False)
    _synthetic_args(t)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("-o", "--output", required=True)
    t.set_defaults(func=cmd_trace)
    return p


def main(argv=None) -> int:
    from generation.config.values import ConfigError, error_line
    args, rest = build_parser().parse_known_args(argv)
    try:
        return args.func(args, rest)
    except (ConfigError, ValueError, OSError) as e:
        print(error_line(e), file=sys.stderr)     # the flag at fault named first, as the server's
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
