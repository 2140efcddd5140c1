"""The replay's results are those of the token-by-token engine (issue 32, item 4): seeded traces
that exercise prefix caching (shared prefixes and repeated prompts), preemption, chunked prefill,
client timeouts, async scheduling, the frontend, the priority policy, a CPU KV tier, step-time
jitter and the closed loop give, request by request, the times golden values recorded from the
engine before its decode fast path (main at 62b9425) gave: a SHA-256 over the exact ``repr`` of
every finished request's times, the multiset of inter-token latencies and the per-step log.
Recorded again once since, for ``sync_priority_cpu_jitter`` alone, when the block pool stopped
de-duplicating blocks computed twice with one hash (vLLM keeps every copy), and for ``cli_json``
alone when the command line's pool left out vLLM's null block (its KV usage is over one block
fewer: the same steps and times), and for ``closed_loop_unchunked`` alone when the closed loop
began sending each next request when its client got the last token, not at the engine's step
end (0.6 ms later here: the A100 profile's frontend); the fast path and the token-by-token engine are compared with
each other on random engines below as well.

``python tests/unit/test_replay_golden.py`` prints the values again (to record them after an
intended change of behaviour)."""
from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from generation.config.cli import load_config                     # noqa: E402
from generation.engine.cpu_tier_v015 import StoreAtFinishPool, Unnamed  # noqa: E402
from generation.engine.replay import TraceRequest, replay           # noqa: E402
from generation.engine.scheduler import EngineRequest, Scheduler    # noqa: E402
from generation.engine.step_config import resolve_step_settings     # noqa: E402

_SETTINGS = {}
# the profile the goldens were recorded with: they test the engine, not the fitted constants
GOLDEN_PROFILE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "perf", "{}-golden.json")


def _step_model(gpu="H100", async_scheduling=True):
    key = (gpu, async_scheduling)
    if key not in _SETTINGS:
        argv = ["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--gpu", gpu,
                "--max-model-len", "8192", "--seed", "0", "--step-time-profile", GOLDEN_PROFILE.format(gpu.lower())]
        if not async_scheduling:
            argv.append("--no-async-scheduling")
        _SETTINGS[key] = resolve_step_settings(load_config(argv)).step_time
    return _SETTINGS[key]


def _trace(seed, n, rate, prompt=(64, 1500), output=(1, 300), groups=0, prompts=0):
    """``n`` Poisson arrivals at ``rate``/s with uniform lengths; with ``groups`` a third share a
    prefix of their group, with ``prompts`` a third repeat one of that many whole prompts."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        p, o = rng.randint(*prompt), rng.randint(*output)
        kind = rng.random()
        if groups and kind < 1 / 3:
            g = rng.randrange(groups)
            out.append(TraceRequest(t, p, o, f"g{g}", min(p, 256 + 128 * g)))
        elif prompts and kind > 2 / 3:
            k = rng.randrange(prompts)
            out.append(TraceRequest(t, 200 + 100 * k, o, "bench", 64, prompt=f"p{k}"))
        else:
            out.append(TraceRequest(t, p, o, priority=rng.randrange(3)))
    return out


def _sched(**kw):
    args = dict(num_gpu_blocks=4000, block_size=16, max_num_seqs=256, max_num_batched_tokens=2048,
                max_model_len=8192)
    args.update(kw)
    return Scheduler(**args)


def _digest(res) -> dict:
    """Exact fingerprints of a ReplayResult."""
    h = hashlib.sha256()
    for r in sorted(res.requests, key=lambda r: (r.arrival, r.prompt_len, r.output_len)):
        first, last = res.times(r)
        h.update(repr((r.arrival, r.prompt_len, r.num_output, first, last, r.first_token, r.finished_at,
                       r.cached_tokens, r.preemptions)).encode())
    itl = hashlib.sha256(repr(sorted(res.itl)).encode()).hexdigest()[:16]
    steps = hashlib.sha256(repr([tuple(s) for s in res.steps]).encode()).hexdigest()[:16]
    timed_out = sorted((r.arrival, r.num_output) for r in res.timed_out)
    return {"requests": len(res.requests), "timed_out": hashlib.sha256(repr(timed_out).encode()).hexdigest()[:16],
            "preemptions": res.preemptions, "steps": len(res.steps), "duration": repr(res.duration),
            "per_request": h.hexdigest()[:16], "itl": itl, "itl_count": len(res.itl), "step_log": steps,
            "frontend_busy": repr(res.frontend_busy)}


def scenarios():
    """name -> a function running one replay."""
    return {
        # async scheduling and the frontend, shared prefixes and repeated prompts
        "prefix_async_frontend": lambda: replay(
            _sched(), _step_model(), _trace(1, 400, 40.0, groups=3, prompts=4)),
        # too few blocks: preemption, head-of-line blocking; small budget: chunked prefill; timeouts
        "preempt_chunked_timeout": lambda: replay(
            _sched(num_gpu_blocks=600, max_num_batched_tokens=512, long_prefill_token_threshold=384),
            _step_model(), _trace(2, 300, 60.0, groups=2), timeout=20.0),
        # synchronous scheduling, a fixed frontend time, the priority policy, a CPU tier, jitter
        "sync_priority_cpu_jitter": lambda: replay(
            _sched(num_gpu_blocks=900, num_cpu_blocks=500, policy="priority", max_num_seqs=64),
            _step_model(async_scheduling=False), _trace(3, 300, 30.0, groups=4, prompts=3),
            frontend=0.004, rng=random.Random(7), jitter=0.05),
        # a closed loop, no prefix caching, no chunked prefill, a big batch of short requests
        "closed_loop_unchunked": lambda: replay(
            _sched(enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=4096),
            _step_model("A100"), _trace(4, 500, 1.0, prompt=(16, 900), output=(1, 120), groups=2),
            concurrency=96),
        # steady decode of many sequences: the fast path's common case, with a timeout now and then
        "steady_decode": lambda: replay(
            _sched(num_gpu_blocks=20000, max_num_batched_tokens=8192, max_num_seqs=1024, block_size=64),
            _step_model(), _trace(5, 600, 40.0, prompt=(200, 1200), output=(50, 400)), timeout=12.0),
        # the command line: the trace shape, seeded
        "cli_json": _cli,
    }


def _cli():
    import contextlib
    import io
    import json
    from generation.engine.replay import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--rate", "20", "--num-requests", "300", "--prompt-tokens", "1024", "--output-tokens", "256",
                     "--max-model-len", "2048", "--seed", "3", "--json", "--no-progress",
                     "--step-time-profile", GOLDEN_PROFILE.format("h100")]) == 0
    summary = json.loads(out.getvalue())
    return {k: summary[k] for k in ("requests", "duration_s", "output_tokens_per_s", "requests_per_s", "ttft_s",
                                    "itl_s", "tpot_s", "e2e_s", "preemptions", "steps", "timed_out",
                                    "kv_usage_mean", "kv_usage_peak", "rejected")}


GOLDEN = {'prefix_async_frontend': {'requests': 400,
                           'timed_out': '4f53cda18c2baa0c',
                           'preemptions': 0,
                           'steps': 876,
                           'duration': '11.926909659925746',
                           'per_request': '448bcc689a67e193',
                           'itl': '966ae013a0284f5f',
                           'itl_count': 59681,
                           'step_log': 'deb054f39d022adf',
                           'frontend_busy': '1.7531950000000056'},
 'preempt_chunked_timeout': {'requests': 170,
                             'timed_out': '775d62872b9b86de',
                             'preemptions': 1002,
                             'steps': 2694,
                             'duration': '24.80680858038038',
                             'per_request': '0d651351b4ed6393',
                             'itl': '0b156e0062c035b2',
                             'itl_count': 25963,
                             'step_log': '6a3ae54f5277e6f0',
                             'frontend_busy': '1.0852629999999834'},
 'sync_priority_cpu_jitter': {'requests': 300,
                              'timed_out': '4f53cda18c2baa0c',
                              'preemptions': 125,
                              'steps': 1983,
                              'duration': '18.250952502372414',
                              'per_request': 'd504c1b295f99be8',
                              'itl': '53be2cda8ea1882f',
                              'itl_count': 43991,
                              'step_log': '1e8ea2e61a39f3e3',
                              'frontend_busy': '0.0'},
 'closed_loop_unchunked': {'requests': 500,
                           'timed_out': '4f53cda18c2baa0c',
                           'preemptions': 0,
                           'steps': 414,
                           'duration': '18.611043426984285',
                           'per_request': '4703641b738aa811',
                           'itl': '9b41793241e6b504',
                           'itl_count': 31276,
                           'step_log': 'a6e8d13028e60ab9',
                           'frontend_busy': '1.452200000000003'},
 'steady_decode': {'requests': 517,
                   'timed_out': '237f1d9098b910a0',
                   'preemptions': 0,
                   'steps': 851,
                   'duration': '21.272997586426172',
                   'per_request': '9097af15ba362a45',
                   'itl': '94a094573aca99ab',
                   'itl_count': 124278,
                   'step_log': 'ba7c6a466c2d88e4',
                   'frontend_busy': '3.190558000000005'},
 'cli_json': '95d751fd18b601f6'}


def _fingerprint(value):
    if isinstance(value, dict):          # the command line's JSON summary
        return hashlib.sha256(repr(sorted(value.items())).encode()).hexdigest()[:16]
    return _digest(value)


def test_replays_match_the_token_by_token_engine():
    for name, run in scenarios().items():
        assert _fingerprint(run()) == GOLDEN[name], name


if __name__ == "__main__":
    import pprint
    pprint.pprint({name: _fingerprint(run()) for name, run in scenarios().items()}, sort_dicts=False, width=120)


def test_group_decoding_matches_token_by_token_on_random_configurations():
    """The fast path against the scheduler's own code on the same inputs, for random engines
    (blocks, budget, threshold, batch size, switches, policy) and loads."""
    rng = random.Random(11)
    for case in range(12):
        kw = dict(num_gpu_blocks=rng.choice([120, 300, 2000]), block_size=rng.choice([16, 32]),
                  max_num_seqs=rng.choice([4, 16, 64]), max_num_batched_tokens=rng.choice([256, 1024, 4096]),
                  long_prefill_token_threshold=rng.choice([0, 0, 200]), max_model_len=rng.choice([1024, 2048]),
                  enable_prefix_caching=rng.random() < 0.7, enable_chunked_prefill=rng.random() < 0.8,
                  policy=rng.choice(["fcfs", "priority"]), num_cpu_blocks=rng.choice([0, 200]))
        trace = _trace(100 + case, 120, rng.choice([5.0, 50.0, 200.0]), prompt=(8, 900), output=(1, 200), groups=2,
                       prompts=2)
        opts = dict(timeout=rng.choice([0.0, 6.0]), concurrency=rng.choice([0, 0, 24]))
        model = _step_model(async_scheduling=rng.random() < 0.5)
        fast = replay(_sched(**kw), model, trace, **opts)
        slow = replay(_sched(**kw), model, trace, group_decode=False, **opts)
        assert _digest(fast) == _digest(slow), (case, kw, opts)
        assert len(fast.rejected) == len(slow.rejected)
        assert _clients(fast) == _clients(slow)


def test_group_decoding_matches_token_by_token_with_vllm_0_15_1s_cpu_tier():
    """The same with vLLM 0.15.1's CPU tier (generation/engine/cpu_tier_v015.py), whose stores
    follow the decodes (a generated block is offered when its request takes the next one) and
    whose finished requests hold their blocks a step longer: the tier ends the same too."""
    rng = random.Random(12)
    reloaded = 0
    for case in range(8):
        kw = dict(num_gpu_blocks=rng.choice([120, 300, 2000]), max_num_seqs=rng.choice([4, 16, 64]),
                  max_num_batched_tokens=rng.choice([256, 1024, 4096]), policy=rng.choice(["fcfs", "priority"]),
                  long_prefill_token_threshold=rng.choice([0, 0, 200]), max_model_len=2048)
        cpu = rng.choice([16, 64, 400])
        trace = _trace(200 + case, 120, rng.choice([5.0, 50.0, 200.0]), prompt=(8, 900), output=(1, 200), groups=2,
                       prompts=2)
        opts = dict(timeout=rng.choice([0.0, 6.0]), concurrency=rng.choice([0, 0, 24]))
        model = _step_model(async_scheduling=rng.random() < 0.5)
        runs = []
        for group in (True, False):
            s = _sched(pool=StoreAtFinishPool(kw["num_gpu_blocks"], num_cpu_blocks=cpu, block_size=16), **kw)
            runs.append((replay(s, model, trace, group_decode=group, **opts), s.pool))
        (fast, fp), (slow, sp) = runs
        assert _digest(fast) == _digest(slow), (case, kw, cpu, opts)
        assert _clients(fast) == _clients(slow)
        named = [{k for k in p._stamp if not isinstance(k, Unnamed)} for p in (fp, sp)]
        assert named[0] == named[1] and len(fp._stamp) == len(sp._stamp) and fp.num_cpu_cached == sp.num_cpu_cached
        reloaded += sum(r.reloaded_tokens for r in fast.requests)
    assert reloaded > 0


def _clients(res):
    """Every request's times at the client, the timed-out ones' included."""
    return sorted((r.arrival, r.prompt_len, r.num_output, r.state, tuple(t)) for r, t in res.client.items())


def test_a_pool_counted_until_the_first_shared_prefix_gives_the_same_results():
    """Block hashes appear mid-run (a closed loop reaches the trace's second half, which shares
    prefixes): the counted pool hands its held blocks real ids and the results stay exact."""
    plain = _trace(21, 150, 20.0, prompt=(16, 600), output=(1, 150))
    shared = [TraceRequest(t.arrival, t.prompt_tokens, t.output_tokens, f"g{i % 3}", min(t.prompt_tokens, 256))
              for i, t in enumerate(_trace(22, 150, 20.0, prompt=(16, 600), output=(1, 150)))]
    for kw, opts in ((dict(num_gpu_blocks=150), dict(concurrency=16)),
                     (dict(num_gpu_blocks=2000, num_cpu_blocks=100), dict(concurrency=40))):
        fast = replay(_sched(**kw), _step_model(), plain + shared, **opts)
        slow = replay(_sched(**kw), _step_model(), plain + shared, group_decode=False, **opts)
        assert _digest(fast) == _digest(slow) and fast.preemptions == slow.preemptions
        assert _clients(fast) == _clients(slow)
        assert any(r.cached_tokens for r in fast.requests)


def test_the_scheduler_steps_the_same_with_and_without_groups():
    """The scheduler driven directly (as a caller other than the replay would): requests past
    ``max_model_len`` (they compute a token a step to the end), aborts between steps; every
    plan's aggregates and every request's fields at the end agree."""
    rng = random.Random(5)
    for case in range(4):
        kw = dict(num_gpu_blocks=rng.choice([40, 400]), block_size=16, max_num_seqs=rng.choice([3, 32]),
                  max_num_batched_tokens=rng.choice([64, 512]), max_model_len=rng.choice([64, 300]))
        reqs = [(rng.randint(1, 250), rng.randint(1, 120)) for _ in range(40)]
        logs = []
        for group in (False, True):
            s = _sched(**kw)
            s.decode_in_groups(group)
            made = [EngineRequest(p, o) for p, o in reqs]
            log, now, i = [], 0.0, 0
            for step in range(3000):
                while i < len(made) and i <= step // 3:
                    s.add(made[i], now)
                    i += 1
                if step % 97 == 50 and s.running:
                    s.abort(s.running[len(s.running) // 2])
                plan = s.schedule(now)
                now += 0.01
                if plan.scheduled or plan.num_decode:
                    s.complete(plan, now)
                log.append((plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                            plan.prefill_context, len(plan.preempted), s.free_blocks))
                if not s.has_work() and i == len(made):
                    break
            s.decode_in_groups(False)
            logs.append((log, [(r.state, r.num_computed, r.num_output, r.first_token, r.last_token, r.prev_token,
                                r.finished_at, r.preemptions) for r in made]))
        assert logs[0] == logs[1], case

