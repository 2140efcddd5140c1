"""``--latency-calculator step`` through the Flask app: metrics as vLLM defines them from the
engine's steps, preemption under a small KV cache with every stream's tokens intact, block
accounting after aborts, queue limits and start-up errors."""
from __future__ import annotations

import gevent
import pytest

from support import make_app, metric, scrape, sse_events

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--vllm-version", "0.33.0")   # 16-token blocks


def client(app_client, *flags):
    return app_client(*STEP, *flags, model=LLAMA)


def completion(c, prompt_tokens: int, max_tokens: int, **extra):
    body = {"prompt": list(range(100, 100 + prompt_tokens)), "max_tokens": max_tokens, "ignore_eos": True, **extra}
    return c.post("/v1/completions", json=body)


def test_cache_config_info_shows_the_release_defaults_in_use(app_client):
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer", model=LLAMA)       # 0.34.0
    m = scrape(c)
    (labels,) = [dict(k[1]) for k in m if k[0] == "vllm:cache_config_info"]
    assert {k: labels[k] for k in ("block_size", "engine", "num_gpu_blocks", "kv_cache_size_tokens",
                                   "kv_cache_max_concurrency", "gpu_memory_utilization",
                                   "user_specified_block_size", "enable_extensible_kv_cache")} == {
        "block_size": "64", "engine": "0", "num_gpu_blocks": "7681",
        "kv_cache_size_tokens": "491584",               # 7,681 x 64
        "kv_cache_max_concurrency": "480.0625",         # over 1,024-token requests
        "gpu_memory_utilization": "None",               # vLLM 0.34 leaves it unset and sizes with 1.0
        "user_specified_block_size": "False", "enable_extensible_kv_cache": "True"}
    c = client(app_client, "--num-gpu-blocks-override", "100")                                    # 0.33.0
    assert metric(scrape(c), "vllm:cache_config_info", block_size="16", num_gpu_blocks="100") == 1


def test_metrics_come_from_the_engine_steps(app_client):
    c = client(app_client, "--max-model-len", "2048")
    r = completion(c, 100, 8)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
    m = scrape(c)
    # one prefill step (100 prompt tokens + the first token), then 7 one-token decode steps
    assert metric(m, "vllm:iteration_tokens_total_count") == 8
    assert metric(m, "vllm:iteration_tokens_total_sum") == 108
    assert metric(m, "vllm:inter_token_latency_seconds_count") == 7
    assert metric(m, "vllm:request_num_preemptions_count") == 1
    assert metric(m, "vllm:request_num_preemptions_sum") == 0
    assert metric(m, "vllm:kv_cache_usage_perc") == 0.0          # nothing held once it finished
    sim = c.sim
    st = sim.config.step
    decode = st.step_time.step_time(1, 101, 0, 0, 0.0, 0)
    itl = metric(m, "vllm:inter_token_latency_seconds_sum") / 7
    # the modelled step, not a constant; above it, the loaded machine's lateness (in real time here)
    assert decode * 0.999 < itl < decode * 1.5 + 0.02
    ttft = metric(m, "vllm:time_to_first_token_seconds_sum")
    prefill = st.step_time.step_time(0, 0, 1, 100, 100 * 50.0, 0)
    assert ttft >= st.step_time.frontend_time() + prefill * 0.999
    tpot = metric(m, "vllm:request_time_per_output_token_seconds_sum")
    assert tpot == pytest.approx(itl, rel=0.2)


def test_a_small_cache_preempts_and_every_stream_keeps_its_tokens(app_client):
    # 8 blocks of 16 tokens (7 for tokens: vLLM's null block); 4 sequences of 20 + 40 tokens need 4
    # blocks each at the end
    c = client(app_client, "--num-gpu-blocks-override", "8", "--max-model-len", "128", "--max-num-seqs", "4")
    r = completion(c, 20, 40, n=4, stream=True)
    assert r.status_code == 200
    per_choice: dict = {}
    for ev in sse_events(r.text):
        if ev == "[DONE]":
            continue
        for ch in ev["choices"]:
            if ch["text"]:
                per_choice.setdefault(ch["index"], []).append(ch["text"])
    assert sorted(per_choice) == [0, 1, 2, 3]
    assert all(len(v) == 40 for v in per_choice.values())
    m = scrape(c)
    assert metric(m, "vllm:num_preemptions_total") > 0
    assert metric(m, "vllm:request_num_preemptions_sum") == metric(m, "vllm:num_preemptions_total")
    assert metric(m, "vllm:kv_cache_usage_perc") == 0.0
    sched = c.sim.engine.scheduler
    assert sched.free_blocks == 7 and not sched.running and not sched.waiting     # 8 less the null block
    # non-streaming: the same preempted run gives whole answers
    r = completion(c, 20, 40, n=4)
    assert [ch["finish_reason"] for ch in r.json()["choices"]] == ["length"] * 4
    assert r.json()["usage"]["completion_tokens"] == 160


def test_kv_usage_follows_the_blocks_held_while_running(app_client):
    c = client(app_client, "--num-gpu-blocks-override", "100", "--max-model-len", "1024")
    g = gevent.spawn(completion, c, 160, 30)
    sched = c.sim.engine.scheduler
    for _ in range(200):
        gevent.sleep(0.005)
        if sched.running:
            break
    m = scrape(c)
    assert metric(m, "vllm:num_requests_running") == 1
    assert 0.1 <= metric(m, "vllm:kv_cache_usage_perc") <= 0.2      # 160..190 tokens: 10..12 of 100 blocks
    assert g.get(timeout=10).status_code == 200
    assert metric(scrape(c), "vllm:kv_cache_usage_perc") == 0.0


def test_cancelled_requests_release_their_blocks(app_client):
    c = client(app_client, "--num-gpu-blocks-override", "64", "--max-model-len", "512", "--max-num-seqs", "2")
    sim = c.sim
    from generation.engine.request import GenerationRequest, Prompt
    req = GenerationRequest("r1", LLAMA, prompts=[Prompt(list(range(200)))], n=3, max_tokens=100, ignore_eos=True)
    seqs = sim.prepare(req)
    sim.admit(seqs)
    sched = sim.engine.scheduler
    for _ in range(100):
        gevent.sleep(0.005)
        if sched.running:
            break
    assert sched.running and sched.free_blocks < 63
    sim.cancel(seqs)
    # all free again: 63, as vLLM's block pool keeps one of the 64 as its null block
    assert sched.free_blocks == 63 and not sched.running and not sched.waiting
    gevent.sleep(0.05)                    # the engine goes idle with nothing left
    assert not sim.engine.busy or not sched.has_work()


def test_queue_limit_counts_what_cannot_run_now(app_client):
    c = client(app_client, "--max-num-seqs", "1", "--max-waiting-queue-length", "1", "--max-model-len", "512")
    g1 = gevent.spawn(completion, c, 10, 60)
    g2 = gevent.spawn(completion, c, 10, 60)
    gevent.sleep(0.02)
    r = completion(c, 10, 5)               # one running, one waiting: the queue is full
    assert r.status_code == 429
    assert g1.get(timeout=10).status_code == 200 and g2.get(timeout=10).status_code == 200


def test_step_mode_cannot_be_switched_at_run_time(app_client):
    c = client(app_client)
    r = c.post("/admin/config", json={"latency-calculator": "constant"})
    assert r.status_code == 400 and "start-up" in r.json()["error"]["message"]
    d = app_client("--max-num-seqs", "2")
    r = d.post("/admin/config", json={"latency-calculator": "step"})
    assert r.status_code == 400


def test_a_max_model_len_that_cannot_fit_is_a_start_up_error():
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError) as e:
        make_app(*STEP, "--num-gpu-blocks-override", "10", "--max-model-len", "1024", model=LLAMA)
    assert "max-model-len" in str(e.value.param) and "KV cache" in str(e.value)
    # vLLM's words (kv_cache_utils._check_enough_kv_cache_memory): GiB of the model's KV, and the
    # longest length that fits (10 blocks of 16 tokens; Llama-3.1-8B: 128 KiB a token)
    assert str(e.value).startswith("To serve at least one request with the model's max seq len (1024), "
                                   "(0.12 GiB KV cache is needed, which is larger than the available KV cache "
                                   "memory (0.02 GiB). Based on the available memory, the estimated maximum model "
                                   "length is 160.")


def test_defaults_follow_the_gpu_class(app_client):
    h100 = client(app_client).sim.config
    a100 = client(app_client, "--gpu", "A100-40GB").sim.config
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    given = client(app_client, "--max-num-seqs", "7", "--max-num-batched-tokens", "512").sim.config
    assert (given.max_num_seqs, given.max_num_batched_tokens) == (7, 512)


def test_kv_usage_without_the_step_engine_counts_running_tokens(app_client):
    # reference timing (no --enable-kvcache): blocks of the running sequences' prompt and
    # emitted tokens over --kv-cache-size, as vLLM reports blocks held
    c = app_client("--kv-cache-size", "100", "--time-to-first-token", "300ms", "--max-model-len", "2048")
    g = gevent.spawn(completion, c, 320, 5)
    for _ in range(100):
        gevent.sleep(0.01)
        if c.sim.running:
            break
    assert metric(scrape(c), "vllm:kv_cache_usage_perc") == 0.2        # 320 prompt tokens: 20 of 100 blocks
    assert g.get(timeout=10).status_code == 200
    assert metric(scrape(c), "vllm:kv_cache_usage_perc") == 0.0


def test_prefix_cache_hits_cut_the_prefill(app_client):
    c = client(app_client, "--max-model-len", "4096")
    first = completion(c, 2000, 2)
    assert first.status_code == 200
    m0 = scrape(c)
    again = completion(c, 2000, 2)
    m1 = scrape(c)
    hits = metric(m1, "vllm:prefix_cache_hits_total") - metric(m0, "vllm:prefix_cache_hits_total")
    assert hits == 1984                               # 124 full blocks of 16; the last token is computed
    computed = metric(m1, "vllm:prompt_tokens_by_source_total", source="local_compute") - \
        metric(m0, "vllm:prompt_tokens_by_source_total", source="local_compute")
    assert computed == 16
    # the second request's first step computed 16 tokens, not 2000: every step it ran was small
    # (read from the steps' token counts, not from TTFT, which a loaded machine stretches)
    sim = c.sim

    def steps(le: str) -> float:
        return (metric(m1, "vllm:iteration_tokens_total_bucket", le=le)
                - metric(m0, "vllm:iteration_tokens_total_bucket", le=le))
    assert steps("32.0") == steps("+Inf") > 0
    assert metric(m0, "vllm:iteration_tokens_total_bucket", le="1024.0") < \
        metric(m0, "vllm:iteration_tokens_total_bucket", le="+Inf")      # the first one's were not
    assert sim.engine.scheduler.free_blocks == sim.engine.scheduler.num_gpu_blocks


def test_no_enable_prefix_caching_computes_every_prompt(app_client):
    c = client(app_client, "--max-model-len", "4096", "--no-enable-prefix-caching")
    for _ in range(2):
        assert completion(c, 2000, 2).status_code == 200
    m = scrape(c)
    assert metric(m, "vllm:prefix_cache_queries_total") == 0 and metric(m, "vllm:prefix_cache_hits_total") == 0
    assert metric(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 4000
    assert c.sim.engine.scheduler.pool.num_cached == 0


def test_remote_prefill_waits_for_the_kv_transfer_and_remote_decode_is_prefill_only(app_client):
    c = client(app_client, "--max-model-len", "8192", "--kv-transfer-bandwidth", "1")   # 1 GB/s
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
          "remote_host": "h", "remote_port": 1}
    r = completion(c, 4000, 3, kv_transfer_params=kv)
    assert r.status_code == 200
    m = scrape(c)
    st = c.sim.config.step.step_time
    transfer = 4000 * st.kv_bytes_per_token / 1e9                     # 4000 x 128 KiB at 1 GB/s: 0.52 s
    assert metric(m, "vllm:time_to_first_token_seconds_sum") >= transfer
    assert metric(m, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 4000
    d = client(app_client, "--max-model-len", "8192")
    r = completion(d, 100, 50, kv_transfer_params={"do_remote_decode": True})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "remote_decode"
    m = scrape(d)
    assert metric(m, "vllm:iteration_tokens_total_count") == 1      # one prefill step, nothing more
    # the tokens counted are the answer's, as the usage says (the engine made one; the rest come with it)
    assert metric(m, "vllm:generation_tokens_total") == r.json()["usage"]["completion_tokens"]


def test_remote_prefill_transfers_only_the_blocks_the_local_prefix_cache_lacks(app_client):
    """vLLM's decode side looks its own prefix cache up first and asks the connector for the rest
    (``get_num_new_matched_tokens`` after ``get_computed_blocks``), and caches the blocks it
    received: a second P/D request with the same prompt transfers only the tail."""
    c = client(app_client, "--max-model-len", "8192", "--kv-transfer-bandwidth", "1")   # 1 GB/s
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
          "remote_host": "h", "remote_port": 1}
    body = {"prompt": list(range(7000, 11000)), "max_tokens": 3, "ignore_eos": True, "kv_transfer_params": kv}
    before = scrape(c)          # (a client of these flags may have served the test above: counts are deltas)

    def delta(m, name, **labels):
        return metric(m, name, **labels) - metric(before, name, **labels)
    assert c.post("/v1/completions", json=body).status_code == 200
    first = delta(scrape(c), "vllm:time_to_first_token_seconds_sum")
    assert c.post("/v1/completions", json=body).status_code == 200
    m = scrape(c)
    second = delta(m, "vllm:time_to_first_token_seconds_sum") - first
    transfer = 4000 * c.sim.config.step.step_time.kv_bytes_per_token / 1e9      # 0.52 s for the whole prompt
    assert first >= transfer and second < transfer / 4
    bs = c.sim.engine.scheduler.block_size
    hit = (4000 - 1) // bs * bs                                                   # all but the last token's block
    assert delta(m, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == hit
    assert delta(m, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 8000 - hit
    assert delta(m, "vllm:prefix_cache_queries_total") == 8000 and delta(m, "vllm:prefix_cache_hits_total") == hit


def test_token_counters_grow_with_the_steps_as_vllms(app_client):
    # vLLM's IterationStats count each step's new tokens (vllm:generation_tokens) and a prompt
    # when its first token comes out (vllm:prompt_tokens, by source), not when the request ends:
    # a dashboard's rate() of a long answer must not wait for its end
    c = client(app_client, "--num-gpu-blocks-override", "200", "--max-model-len", "1024")
    before = scrape(c)
    g = gevent.spawn(completion, c, 160, 400)
    req = None
    for _ in range(400):
        gevent.sleep(0.005)
        running = c.sim.engine.scheduler.running
        req = running[0] if running else req
        if req is not None and req.num_output >= 20:
            break
    m = scrape(c)
    made = req.num_output
    assert 20 <= made < 400
    delta = lambda m, name, **lb: metric(m, name, **lb) - metric(before, name, **lb)
    assert made - 2 <= delta(m, "vllm:generation_tokens_total") <= made + 2     # a step or two may pass
    assert delta(m, "vllm:prompt_tokens_total") == 160
    assert delta(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 160
    assert delta(m, "vllm:request_success_total", finished_reason="length") == 0
    r = g.get(timeout=20)
    assert r.status_code == 200
    m = scrape(c)
    # at the end, once each: what the client was told
    assert delta(m, "vllm:generation_tokens_total") == r.json()["usage"]["completion_tokens"] == 400
    assert delta(m, "vllm:prompt_tokens_total") == r.json()["usage"]["prompt_tokens"] == 160
    assert delta(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 160
    assert delta(m, "vllm:request_prefill_kv_computed_tokens_sum") == 160


def test_an_aborted_stream_counts_its_tokens_once(app_client):
    c = client(app_client, "--num-gpu-blocks-override", "200", "--max-model-len", "1024")
    before = scrape(c)
    sim = c.sim
    from generation.engine.request import GenerationRequest, Prompt
    req = GenerationRequest("r-abort", LLAMA, prompts=[Prompt(list(range(300, 400)))], max_tokens=300, ignore_eos=True)
    seqs = sim.prepare(req)
    sim.admit(seqs)
    ereq = seqs[0].engine_req
    for _ in range(400):
        gevent.sleep(0.005)
        if ereq.num_output >= 10:
            break
    sim.cancel(seqs)
    made = ereq.num_output
    m = scrape(c)
    delta = lambda name, **lb: metric(m, name, **lb) - metric(before, name, **lb)
    assert delta("vllm:generation_tokens_total") == made
    assert delta("vllm:prompt_tokens_total") == 100
    assert delta("vllm:request_success_total", finished_reason="abort") == 1


def test_queue_time_starts_when_the_engine_queues_the_request_not_at_its_arrival(app_client):
    # vLLM (vllm/v1/metrics/stats.py): queue = first SCHEDULED - QUEUED, both the engine core's
    # events; e2e and TTFT count from the API server's arrival, so e2e - queue - inference is the
    # frontend's time (preprocessing and the way in and out), not 0
    c = client(app_client, "--max-model-len", "2048")
    before = scrape(c)
    assert completion(c, 300, 4).status_code == 200
    m = scrape(c)
    d = lambda name: metric(m, name) - metric(before, name)
    e2e, queue = d("vllm:e2e_request_latency_seconds_sum"), d("vllm:request_queue_time_seconds_sum")
    inference = d("vllm:request_inference_time_seconds_sum")
    fe = c.sim.engine.fe.c
    assert e2e - queue - inference >= fe.fe_in + fe.fe_request + 300 * fe.fe_prompt_token - 1e-4
    assert inference == pytest.approx(d("vllm:request_prefill_time_seconds_sum")
                                      + d("vllm:request_decode_time_seconds_sum"))


def test_cpu_tier_reloads_count_as_the_kv_connectors_hits(app_client):
    # vLLM's offloading connector: a hit there is vllm:external_prefix_cache_hits (the tokens past
    # the GPU hits: external queries), and its tokens are prompt_tokens_by_source
    # external_kv_transfer, not local_cache_hit (vllm/v1/core/sched/scheduler.py: connector
    # prefix cache stats; vllm/v1/metrics/stats.py: PromptTokenStats)
    c = client(app_client, "--num-gpu-blocks-override", "17", "--max-model-len", "256",
               "--kv-offloading-size", "0.1")                   # 16 blocks of 16 tokens on the GPU
    before = scrape(c)
    a = list(range(100, 164))                                   # 4 blocks
    assert c.post("/v1/completions", json={"prompt": a, "max_tokens": 1}).status_code == 200
    # 250 tokens: all 16 blocks, so every block of a's is handed out again, and goes to the CPU
    assert c.post("/v1/completions", json={"prompt": list(range(1000, 1250)), "max_tokens": 1}).status_code == 200
    r = c.post("/v1/completions", json={"prompt": a, "max_tokens": 1})
    assert r.status_code == 200
    m = scrape(c)
    d = lambda name, **lb: metric(m, name, **lb) - metric(before, name, **lb)
    assert d("vllm:prefix_cache_queries_total") == 64 + 250 + 64 and d("vllm:prefix_cache_hits_total") == 0
    assert d("vllm:external_prefix_cache_queries_total") == 64 + 250 + 64
    assert d("vllm:external_prefix_cache_hits_total") == 48     # 3 blocks: at most 63 tokens
    assert d("vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 48
    assert d("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 0
    assert d("vllm:prompt_tokens_by_source_total", source="local_compute") == 64 + 250 + 16
    assert d("vllm:prompt_tokens_cached_total") == 48


def test_external_prefix_cache_counters_are_there_without_a_connector(app_client):
    m = scrape(client(app_client))                              # vLLM registers them always
    assert metric(m, "vllm:external_prefix_cache_queries_total") == 0
    assert metric(m, "vllm:external_prefix_cache_hits_total") == 0
