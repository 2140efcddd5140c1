"""The step engine in virtual time: the live server's scheduler and step-time model, run as fast
as the CPU allows, for capacity planning and for testing the scheduler deterministically.

``python -m generation.engine.replay --trace FILE [server flags]`` (or ``--rate R`` /
``--concurrency C`` with ``--num-requests``, ``--prompt-tokens``, ``--output-tokens`` for a
synthetic load) prints TTFT / ITL / TPOT / e2e percentiles, throughput, preemptions and KV usage,
and with ``--plot FILE.png`` draws them over time.  The server flags are the server's own
(``--gpu``, ``--model``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--max-model-len``,
``--tensor-parallel-size``, ...): a replay answers "what would this ``vllm serve`` line do with
this load".

A trace is JSON Lines, one request per line: ``{"arrival": seconds, "prompt_tokens": P,
"output_tokens": O}``, optionally ``"priority": P`` (with ``--scheduling-policy priority``) and
``"prefix_group": name, "prefix_tokens": K`` for requests that
share a K-token prefix (cached once a request of the group has computed it, and evicted as the
server's block pool evicts: least recently freed first), and ``"prompt": name`` for requests that
repeat a whole prompt of their group (every full block shared: a benchmark cycling through a
fixed set of prompts).  The frontend and async scheduling of the step model apply
(:mod:`generation.engine.perf.step_model`); the times printed are the clients'.

A request whose prompt fills ``--max-model-len`` is refused at its arrival, as vLLM answers 400
(counted as rejected); an output past the context is cut to it, as vLLM 0.34 cuts ``max_tokens``.  ``--seed`` defaults to :data:`REPLAY_SEED`, so that two runs
agree.  Decoding requests advance as a group between events (:mod:`generation.engine.fast_decode`)
and the per-token and per-step records are arrays (:mod:`generation.engine.replay_log`): an hour
at 20 requests/s replays in about 2 s and 100 MB, with the token-by-token engine's results.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sys
import time

from .cpu_tier_v015 import cpu_tier_pool
from .pod_replay import PodReplay, ReplayResult, trace_block_hashes  # noqa: F401  (the replay's API)
from .replay_trace import (MAX_TRACE_REQUESTS, MAX_TRACE_SPAN, TraceRequest, _count, _trace_request,  # noqa: F401 (the
                           check_output_path, check_plot_path, check_synthetic, read_trace,
                           synthetic_trace)  # replay's names)
from .scheduler import EngineRequest, Scheduler


def replay(scheduler: Scheduler, step_time, trace, *, concurrency: int = 0, frontend: float | None = None,
           rng: random.Random | None = None, jitter: float = 0.0, emission_cost: float = 0.0,
           timeout: float = 0.0, max_steps: int = 10_000_000, group_decode: bool = True,
           pause_seed: int | str = 0) -> ReplayResult:
    """Run ``trace`` (TraceRequests, by arrival) through ``scheduler`` in virtual time.

    ``concurrency`` > 0 is a closed loop instead: that many requests in flight, the next one sent
    when a client has received its last token (the frontend's output latency after the engine's
    step, as a benchmark's client sees it; arrivals in the trace are then ignored).

    The frontend: a step-time model with a ``frontend()`` (:class:`~generation.engine.perf.
    step_model.StepModel`) gives a serial API-server CPU that admits each request after its
    preprocessing and delivers each step's tokens after their streaming
    (:class:`~generation.engine.perf.step_model.Frontend`); otherwise, or when ``frontend``
    seconds are given, a request enters the queue that long after its arrival and tokens reach
    the client at the step's end.  ``emission_cost`` seconds per emitted token is the legacy
    model of the frontend's sends: a step does not end more than :data:`~.step_pacing.STEP_LEAD`
    before the previous step's tokens are out (:func:`~.step_pacing.step_end`).

    With ``step_time.async_scheduling`` a step is planned while the previous one runs: it takes
    only the requests queued before the previous step started.  ``timeout`` > 0 aborts a request
    still unfinished that many seconds after its arrival (a client's timeout; it is listed in
    ``timed_out``).  The same rules as the live server (:mod:`generation.engine.step_engine`),
    without sleeping.  One :class:`PodReplay` run to its end.

    A trace request whose prompt fills the scheduler's ``max_model_len`` is refused at its
    arrival, as vLLM answers 400 (listed in ``rejected``; a closed loop sends the next one); one
    whose output would pass it makes what the context leaves, as vLLM 0.34 cuts ``max_tokens``.  ``group_decode`` (default) advances decoding requests as a group between events
    (:mod:`generation.engine.fast_decode`: the same results, O(events) a step); False runs every
    request through every step, token by token.  ``pause_seed`` seeds the engine's pauses
    (:class:`~generation.engine.perf.step_model.EnginePauses`)."""
    trace = list(trace)
    pending = iter(trace)

    def next_one(req, now, seen_at):        # the closed loop: the client that got its last token
        for tr in pending:                  # sends the next request (a refused one is replaced at once)
            if pod.submit(tr, seen_at) is not None:
                break

    pod = PodReplay(scheduler, step_time, frontend=frontend, rng=rng, jitter=jitter, emission_cost=emission_cost,
                    timeout=timeout, max_steps=max_steps, on_finished=next_one if concurrency > 0 else None,
                    group_decode=group_decode, pause_seed=pause_seed)
    if concurrency > 0:
        for tr in pending:
            pod.submit(tr, 0.0)
            if pod.order >= concurrency:
                break
    else:
        for tr in trace:
            pod.submit(tr, tr.arrival)
    pod.advance_until(math.inf)
    return pod.finish()


REPLAY_SEED = 0                    # --seed's default in a replay: two runs give the same figures


NULL_BLOCKS = 1     # vLLM's BlockPool keeps block 0 as its null block: never handed to a request


def scheduler_for(settings, max_model_len: int, max_loras: int = 0, policy: str = "fcfs",
                  seed: int | str = 0) -> Scheduler:
    """A :class:`Scheduler` for resolved step settings (:mod:`generation.engine.step_config`),
    the same for the server and the replay: the KV blocks, the limits, prefix caching and
    chunked prefill on or off, the full-sequence admission gate and the CPU KV tier.

    Of the ``num_gpu_blocks`` vLLM logs (and ``--num-gpu-blocks-override`` sets), its block pool
    keeps one as the null block (``vllm/v1/core/block_pool.py``: popped from the free queue at
    start-up; ``get_usage`` divides by ``num_gpu_blocks - 1``): requests get the others, and
    ``kv_cache_usage_perc`` is over them (:data:`NULL_BLOCKS`).  The CPU tier keeps the semantics
    of ``--vllm-version`` (:func:`~generation.engine.cpu_tier_v015.cpu_tier_pool`).  With
    speculative decoding (``settings.spec_decode``) its drafts' acceptance is drawn from
    ``seed``."""
    num_gpu_blocks = max(settings.num_gpu_blocks - NULL_BLOCKS, 0)
    pool = cpu_tier_pool(num_gpu_blocks, getattr(settings, "num_cpu_blocks", 0), settings.block_size,
                         getattr(settings, "vllm_version", ""))
    sched = Scheduler(num_gpu_blocks=num_gpu_blocks, block_size=settings.block_size, pool=pool,
                     max_num_seqs=settings.max_num_seqs,
                     # -pp: a step is a rotation of P micro-batches, each with the budget (perf/pipeline.py)
                     max_num_batched_tokens=settings.max_num_batched_tokens
                     * getattr(getattr(settings, "step_time", None), "pp", 1),
                     max_model_len=max_model_len, long_prefill_token_threshold=settings.long_prefill_token_threshold,
                     max_loras=max_loras, policy=policy,
                     enable_prefix_caching=getattr(settings, "enable_prefix_caching", True),
                     enable_chunked_prefill=getattr(settings, "enable_chunked_prefill", True),
                     num_cpu_blocks=getattr(settings, "num_cpu_blocks", 0),
                     reserve_full_isl=getattr(settings, "reserve_full_isl", False))
    spec = getattr(settings, "spec_decode", None)
    if spec is not None:
        sched.speculate(spec, random.Random(f"{seed}-spec-decode"), getattr(settings, "draft_cost", None))
    return sched


DEFAULT_PROMPT_TOKENS = 1024     # --prompt-tokens when --max-model-len leaves room for it


def check_arguments(args, max_model_len: int) -> None:
    """The command line's own flags before anything runs: the synthetic load's
    (:func:`check_synthetic`; ``--concurrency`` with a trace too) and ``--plot``
    (:func:`check_plot_path`) and ``--per-request`` (:func:`check_output_path`).  Raises
    ValueError naming the flag."""
    check_synthetic(args.num_requests if not args.trace else 1, args.prompt_tokens, args.output_tokens,
                    args.rate, args.concurrency, None if args.trace else max_model_len)
    if args.rate and (args.trace or args.concurrency):      # it would be silently unused
        raise ValueError("--rate sets the synthetic load's Poisson arrivals: a --trace has its own, and a closed "
                         "loop (--concurrency) sends each request when the one before it ends")
    check_plot_path(args.plot)
    check_output_path(args.per_request, "--per-request")


def plot(result: ReplayResult, path: str, title: str = "") -> None:
    """TTFT, TPOT (each on its own axis, by arrival), and KV usage and batch size over time
    (matplotlib, PNG at ``path``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, t, b) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    reqs = sorted(result.requests, key=lambda r: r.arrival)
    a.plot([r.arrival for r in reqs], [1000 * (result.times(r)[0] - r.arrival) for r in reqs], ".", ms=3,
           label="TTFT")
    a.set_ylabel("TTFT (ms)")
    a.set_title(title)
    timed = [r for r in reqs if r.num_output > 1]
    t.plot([r.arrival for r in timed], [1000 * (result.times(r)[1] - result.times(r)[0]) / (r.num_output - 1)
                                        for r in timed],
           ".", ms=3, color="tab:orange", label="TPOT")
    t.set_ylabel("TPOT (ms)")
    times = [s[0] for s in result.steps]
    b.plot(times, [100 * s[1] for s in result.steps], label="KV usage %")
    b.plot(times, [s[2] for s in result.steps], label="running")
    b.plot(times, [s[3] for s in result.steps], label="waiting")
    b.set_xlabel("time (s)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_request_records(result: ReplayResult) -> list[dict]:
    """One record per finished request, by arrival (``--per-request``): ``arrival``, ``ttft``,
    ``e2e`` and ``itl`` (the request's mean inter-token latency: decode time over its tokens
    after the first; null for a one-token answer) in seconds, ``prompt_tokens``,
    ``output_tokens``, and ``cached_tokens`` (prefix-cache hits) and ``preemptions``.  Times are
    the client's (:meth:`ReplayResult.times`: the frontend's latency and queueing included)."""
    out = []
    for r in sorted(result.requests, key=lambda r: r.arrival):
        first, last = result.times(r)
        out.append({"arrival": r.arrival, "prompt_tokens": r.prompt_len, "output_tokens": r.num_output,
                    "ttft": first - r.arrival, "e2e": last - r.arrival,
                    "itl": (last - first) / (r.num_output - 1) if r.num_output > 1 else None,
                    "cached_tokens": r.cached_tokens, "preemptions": r.preemptions})
    return out


class _Watch:
    """What :func:`main` adds to a replay without changing :func:`replay`: a waiting-queue limit
    (``--max-waiting-queue-length``: a request that reaches the queue when ``limit`` requests
    already wait beyond the batch's free seats is rejected, as the server answers 429; None: no
    limit) and progress on stderr (a tqdm bar on a terminal after 2 s, else a line every 10 s of
    a long run).  It wraps the scheduler's ``add`` and ``complete``; ``rejected`` counts."""

    def __init__(self, scheduler: Scheduler, total: int, limit: int | None, progress: bool):
        self.scheduler = scheduler
        self.limit = limit
        self.rejected = 0
        self.done = 0
        self.total = total
        self.bar = None
        self.steps = 0
        self.next_line = time.monotonic() + 10.0
        self.progress = progress
        if progress and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="req", file=sys.stderr, delay=2.0, desc="replay",
                                dynamic_ncols=True)
            except ImportError:
                pass
        self._add, self._complete = scheduler.add, scheduler.complete
        scheduler.add, scheduler.complete = self.add, self.complete

    def add(self, req: EngineRequest, now: float) -> None:
        s = self.scheduler
        if self.limit is not None and \
                max(0, len(s.waiting) - (s.max_num_seqs - len(s.running))) + 1 > self.limit:
            req.state = EngineRequest.ABORTED
            self.rejected += 1
            self.done += 1
            return
        self._add(req, now)

    def complete(self, plan, end: float):
        emitted = self._complete(plan, end)
        if self.progress:
            self.done += sum(1 for r in emitted if r.state == EngineRequest.DONE)
            self.steps += 1
            if not self.steps & 1023:
                self._report(end)
        return emitted

    def _report(self, now: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{now:,.0f} s simulated", refresh=False)
            self.bar.update(self.done - self.bar.n)
        elif time.monotonic() >= self.next_line:
            self.next_line = time.monotonic() + 10.0
            print(f"replay: {self.done:,}/{self.total:,} requests, {now:,.1f} s simulated", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.done - self.bar.n)
            self.bar.close()


def main(argv=None) -> int:
    """``python -m generation.engine.replay``: parse the replay's own flags, hand the rest to the
    server's configuration (``--gpu``, ``-tp``, ``--vllm-version``, ...), replay, print the
    summary (text or ``--json``) and write ``--per-request`` / ``--plot``.  Returns 0, or 2 with
    one ``error:`` line on stderr for a bad flag, configuration or trace."""
    p = argparse.ArgumentParser(prog="python -m generation.engine.replay", description=__doc__.split("\n\n")[0],
                                epilog="Other flags are the server's (--gpu, --model, -tp, --vllm-version, "
                                       "--max-num-seqs, ...), with its defaults: --max-model-len the model's own "
                                       "context length (1024 for a name without a config).", allow_abbrev=False)
    p.add_argument("--trace", help="JSON Lines trace (arrival, prompt_tokens, output_tokens)")
    p.add_argument("--rate", type=float, default=0.0, help="synthetic load: Poisson arrivals per second")
    p.add_argument("--concurrency", type=int, default=0, help="closed loop: requests in flight")
    p.add_argument("--num-requests", type=int, default=200, help="synthetic load: requests (default 200)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="synthetic load: each prompt (default 1024, or what --max-model-len leaves beside the output)")
    p.add_argument("--output-tokens", type=int, default=128, help="synthetic load: each output (default 128)")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--per-request", metavar="FILE", help="write one JSON line per finished request here: arrival, "
                   "prompt_tokens, output_tokens, ttft, e2e, itl (mean; seconds), cached_tokens, preemptions")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    args, rest = p.parse_known_args(argv)
    from generation.config.values import ConfigError, error_line
    from .step_config import load_step_config, resolve_step_settings
    try:
        cfg = load_step_config(rest)        # --max-model-len defaults to the model's own, as the server's
        if "seed" not in cfg.explicit:      # the server's default is the clock; a replay repeats itself
            cfg.seed = REPLAY_SEED
        settings = resolve_step_settings(cfg)
        if args.prompt_tokens is None:      # a default that the default context (1024) holds
            args.prompt_tokens = max(1, min(DEFAULT_PROMPT_TOKENS, cfg.max_model_len - args.output_tokens))
        check_arguments(args, cfg.max_model_len)
        trace = read_trace(args.trace, cfg.max_model_len) if args.trace else synthetic_trace(
            args.num_requests, args.prompt_tokens, args.output_tokens, args.rate, cfg.seed or 0)
        if not trace:
            raise ValueError(f"--trace {args.trace}: no request in it")
        if trace[-1].arrival > MAX_TRACE_SPAN:
            # the clock starts at 0: an epoch timestamp (1.7e9) made a 10 s trace report 0 output
            # tokens/s, and past ~1e15 s a millisecond no longer adds to the clock (TTFTs of 0)
            raise ValueError(f"--trace {args.trace}: an arrival at {trace[-1].arrival:.6g} s, more than "
                             f"{MAX_TRACE_SPAN:,.0f} s from the start: arrivals are seconds from the trace's "
                             f"start, not timestamps (the fleet's replay takes them from the first)")
    except (ConfigError, ValueError, OSError) as e:
        print(error_line(e), file=sys.stderr)   # the flag at fault named first, as the server's
        return 2
    past = sum(1 for t in trace if t.prompt_tokens >= cfg.max_model_len)
    cut = sum(1 for t in trace if t.prompt_tokens < cfg.max_model_len < t.prompt_tokens + t.output_tokens)
    if past:        # vLLM refuses a prompt that fills the context (400); so does the replay
        print(f"warning: {past} of {len(trace)} requests have prompts of --max-model-len {cfg.max_model_len} "
              f"tokens or more: refused, as vLLM refuses them (counted as rejected)", file=sys.stderr)
    if cut:         # vLLM 0.34's get_max_tokens: max_tokens cut to the room the prompt leaves
        print(f"warning: {cut} of {len(trace)} requests need more than --max-model-len {cfg.max_model_len} "
              f"tokens (prompt + output): their outputs are cut to fit, as vLLM 0.34 cuts max_tokens",
              file=sys.stderr)
    sched = scheduler_for(settings, cfg.max_model_len, cfg.max_loras, cfg.scheduling_policy, seed=cfg.seed or 0)
    # the server's --max-waiting-queue-length is the simulator's own (vLLM has no such limit): a
    # replay applies it only when given
    limit = cfg.max_waiting_queue_length if "max-waiting-queue-length" in cfg.explicit else None
    watch = _Watch(sched, len(trace), limit, not args.no_progress)
    gc.disable()        # a replay makes no reference cycles: the collector's passes over every request
    try:                # object only cost time (a fifth of a long replay's)
        result = replay(sched, settings.step_time, trace, concurrency=args.concurrency,
                        rng=random.Random(f"{cfg.seed}-steps"), jitter=cfg.step_time_jitter, pause_seed=cfg.seed or 0)
    finally:
        gc.enable()
        watch.close()
    s = result.summary()
    s["rejected"] = watch.rejected + len(result.rejected)
    if result.unfinished:       # vLLM would hold them forever too: say why, once
        head = min(result.unfinished, key=lambda r: r.arrival)
        need = sched.blocks_for(min(head.num_tokens, cfg.max_model_len))
        print(f"warning: {len(result.unfinished)} requests never finished: one of {head.num_tokens} tokens needs "
              f"{need} KV blocks and the cache has {sched.pool.num_blocks} for tokens ({settings.num_gpu_blocks} less "
              f"vLLM's null block); vLLM never schedules such a request, and first come first served holds every "
              f"request behind it (vllm-project/vllm#39734)" if need > sched.pool.num_blocks else
              f"warning: {len(result.unfinished)} requests never finished", file=sys.stderr)
    if sched.spec is not None:          # vLLM's SpecDecoding log line's figures
        drafts, drafted, accepted = sched.spec_counts
        s["spec_decode"] = {"drafts": drafts, "draft_tokens": drafted, "accepted_tokens": accepted,
                            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
                            "per_position_acceptance": [n / drafts for n in sched.spec_per_pos] if drafts else None}
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        for line in settings.summary(cfg.max_model_len):
            print(line)
        ms = lambda d: "  ".join(f"{k} {1000 * v:.1f} ms" if v is not None else f"{k} -" for k, v in d.items())
        print(f"{s['requests']} requests in {s['duration_s']:.2f} s: {s['output_tokens_per_s']:.0f} output tokens/s, "
              f"{s['requests_per_s']:.2f} requests/s, {s['steps']} steps, {s['preemptions']} preemptions"
              + (f", {s['rejected']} rejected (--max-waiting-queue-length {limit})" if limit is not None else "")
              + (f", {len(result.rejected)} refused (prompt of --max-model-len {cfg.max_model_len} or more)"
                 if result.rejected and limit is None else "")
              + (f", {len(result.unfinished)} never finished" if result.unfinished else ""))
        for k in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
            print(f"  {k[:-2].upper():5s} {ms(s[k])}")
        print(f"  KV usage mean {100 * s['kv_usage_mean']:.1f} %, peak {100 * s['kv_usage_peak']:.1f} %")
        if s.get("spec_decode", {}).get("drafts"):
            sd = s["spec_decode"]
            print(f"  speculative decoding: {sd['drafts']} drafts, {sd['accepted_tokens']} of {sd['draft_tokens']} "
                  f"draft tokens accepted, mean acceptance length {sd['mean_acceptance_length']:.2f}")
        if result.jit_stalls:      # a MoE engine's warm-up: they own a short replay's TTFT tail
            t_jit = settings.step_time.constants.t_jit
            print(f"  MoE kernel compiles: {result.jit_stalls} of {1000 * t_jit:.0f} ms, at the first eager step of "
                  f"each fused-MoE kernel variant start-up did not compile (vLLM's Triton JIT; README: Fidelity); "
                  f"they hold every request in flight then")
        if result.dp_wait is not None:      # a MoE model's DP ranks step together (README: lockstep)
            waits, waited = result.dp_wait
            print(f"  DP lockstep: {waits:,} of {s['steps']:,} steps waited for a peer's longer step, {waited:.1f} s "
                  f"in all (the peers drawn from this rank's own steps)")
    try:
        if args.per_request:
            records = per_request_records(result)
            with open(args.per_request, "w", encoding="utf-8") as f:
                for rec in records:
                    f.write(json.dumps(rec) + "\n")
            print(f"per-request timings ({len(records)} requests): {os.path.abspath(args.per_request)}",
                  file=sys.stderr)
        if args.plot:
            plot(result, args.plot, f"{settings.gpu.name} {settings.arch.name}")
            print(f"plot: {os.path.abspath(args.plot)}", file=sys.stderr)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
