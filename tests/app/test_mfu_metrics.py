"""``--enable-mfu-metrics`` through the Flask app: vLLM's three ``vllm:estimated_*_per_gpu_total``
counters (``vllm/v1/metrics/perf.py``, ``PerfMetricsProm``) grow by each engine step's estimate in
step mode, stay 0 without the flag or without steps (vLLM registers them whatever the flag), and
are absent before vLLM 0.17."""
from __future__ import annotations

from support import metric, scrape

from generation.engine.perf.mfu import StepPerf, raw_config

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer")
NAMES = ("vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total",
         "vllm:estimated_write_bytes_per_gpu_total")


def completion(c, prompt_tokens: int, max_tokens: int):
    body = {"prompt": list(range(100, 100 + prompt_tokens)), "max_tokens": max_tokens, "ignore_eos": True}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == max_tokens
    return r


def counters(c) -> list[float]:
    m = scrape(c)
    return [metric(m, n, model_name=LLAMA, engine="0") for n in NAMES]


def test_counters_add_up_the_engine_steps(app_client):
    """One request of 100 prompt tokens and 8 output tokens: one prefill step (100 tokens of
    context 100, its last token's logits) and 7 one-token decodes of context 101..107; the
    counters are the sum of vLLM's formulas over those 8 steps, and what the engine observed."""
    c = app_client(*STEP, "--enable-mfu-metrics", "--tensor-parallel-size", "2", model=LLAMA)
    engine = c.sim.engine
    seen = []
    counted = engine.perf

    class Spy:                           # what the engine hands its PerfCounters, step by step
        def observe(self, plan):
            seen.append(counted.perf.plan_figures(plan))
            counted.observe(plan)
    engine.perf = Spy()
    completion(c, 100, 8)
    perf = StepPerf(raw_config(LLAMA, c.sim.config.step.arch_source), tp=2)
    steps = [perf.figures(1, 100, 100, 100 * 100, 0, 0)] + [perf.figures(0, 0, 0, 0, 1, 100 + k) for k in range(1, 8)]
    assert seen == steps
    assert counters(c) == [sum(s[i] for s in steps) for i in range(3)]
    assert all(v > 0 for v in counters(c))
    # TP 2 halves the heads and the MLP: the prefill step's FLOPs are about 2 x 8e9 x 100 / 2
    assert 0.7e12 < steps[0][0] < 0.9e12


def test_without_the_flag_the_counters_stay_zero(app_client):
    c = app_client(*STEP, model=LLAMA)
    assert c.sim.engine.perf is None
    completion(c, 20, 3)
    assert counters(c) == [0, 0, 0]


def test_without_steps_the_counters_stay_zero(app_client):
    c = app_client("--enable-mfu-metrics", model=LLAMA)
    completion(c, 20, 3)
    assert counters(c) == [0, 0, 0]


def test_releases_before_0_17_have_no_such_families(app_client):
    c = app_client(*STEP, "--enable-mfu-metrics", "--vllm-version", "0.16.0", model=LLAMA)
    assert c.sim.engine.perf is None
    m = scrape(c)
    assert not [k for k in m if k[0].startswith("vllm:estimated_")]


def test_a_decode_with_drafts_counts_as_a_prefill_of_its_tokens(app_client):
    """Speculative decoding, every draft accepted (k 3): 100 prompt tokens, 8 output tokens are
    the prefill step and two steps of 1 + 3 tokens, which vLLM's get_step_perf_stats_per_gpu
    counts as prefills of 4 tokens at context 104 and 108 (computed tokens plus scheduled)."""
    spec = ('{"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic", '
            '"synthetic_acceptance_rates": [1, 1, 1]}')
    c = app_client(*STEP, "--enable-mfu-metrics", "--speculative-config", spec, model=LLAMA)
    completion(c, 100, 8)
    perf = StepPerf(raw_config(LLAMA, c.sim.config.step.arch_source), tp=1)
    steps = [perf.figures(1, 100, 100, 100 * 100, 0, 0), perf.figures(1, 4, 104, 4 * 104, 0, 0),
             perf.figures(1, 4, 108, 4 * 108, 0, 0)]
    assert counters(c) == [sum(s[i] for s in steps) for i in range(3)]
