"""Speculative decoding in step mode (generation/engine/spec_decode.py and the scheduler's draft
path): vLLM 0.34's speculative config as ``EngineArgs.create_speculative_config`` and
``SpeculativeConfig`` check it, the synthetic acceptance, a decode scheduled with its drafts and
rolled back past the rejected ones, vLLM's spec-decode counts, the step time of the drafts and
of the drafter, the KV the drafter takes, and a replay."""
from __future__ import annotations

import json

import pytest

from generation.config.values import ConfigError
from generation.engine.replay import TraceRequest, replay, scheduler_for
from generation.engine.scheduler import EngineRequest, Scheduler
from generation.engine.spec_decode import (DEFAULT_ACCEPTANCE, DraftCost, SpecDecode, blocks_with_drafter, draft_vocab_of,
                                           resolve_spec_decode)
from generation.engine.step_config import load_step_config, resolve_step_settings


def spec(**kw):
    return resolve_spec_decode({"num_speculative_tokens": 3, **kw})


# ---- the config ------------------------------------------------------------------------------------
def test_the_method_comes_from_the_config_or_the_draft_models_name():
    assert spec(method="ngram").method == "ngram" and spec(method="ngram").model is None
    assert spec(model="[ngram]").method == "ngram"
    assert spec(model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B").method == "eagle3"
    assert spec(model="yuhuili/EAGLE-LLaMA3-Instruct-8B").method == "eagle"
    assert spec(model="meta-llama/Llama-3.2-1B-Instruct").method == "draft_model"
    assert spec(method="deepseek_mtp").method == "mtp"          # vLLM: deprecated, replaced with mtp
    assert (spec(method="eagle3").lookahead, spec(method="ngram").lookahead) == (3, 0)
    assert resolve_spec_decode(None) is None
    assert resolve_spec_decode('{"method": "ngram", "num_speculative_tokens": 2}').num_speculative_tokens == 2


def test_the_shorthand_flags_merge_as_vllms_create_speculative_config():
    s = resolve_spec_decode(None, method="ngram", tokens=4)
    assert (s.method, s.num_speculative_tokens) == ("ngram", 4)
    s = resolve_spec_decode({"method": "ngram"}, tokens=2)
    assert s.num_speculative_tokens == 2
    with pytest.raises(ConfigError, match=r"--spec-tokens and --speculative-config\['num_speculative_tokens'\] "
                                          r"are mutually exclusive") as e:
        resolve_spec_decode({"method": "ngram", "num_speculative_tokens": 3}, tokens=2)
    assert e.value.param == "spec-tokens"


@pytest.mark.parametrize("config, message", [
    ({"method": "ngram"}, "num_speculative_tokens must be provided with speculative model"),
    ({"method": "ngram", "num_speculative_tokens": 0}, r"Expected num_speculative_tokens to be greater than zero \(0\)"),
    ({"method": "ngram", "num_speculative_tokens": 1.5}, "num_speculative_tokens must be an integer"),
    ({"method": "ngram", "num_speculative_tokens": 2, "tensor_parallel_size": 2},
     "'tensor_parallel_size' is not a valid argument in the speculative_config"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic"},
     "requires exactly one of synthetic_acceptance_rates or synthetic_acceptance_length"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
      "synthetic_acceptance_rates": [0.5]}, r"synthetic_acceptance_rates must have length 2, got \[0.5\]"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
      "synthetic_acceptance_rates": [0.5, 0.6]}, "must be non-increasing"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
      "synthetic_acceptance_rates": [1.5, 0.6]}, r"entries must be in \[0, 1\]"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
      "synthetic_acceptance_length": 3.5}, r"synthetic_acceptance_length must be in \[1, 3\], got 3.5"),
    ({"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_length": 2},
     "only valid with rejection_sample_method='synthetic'"),
    ({"method": "extract_hidden_states", "num_speculative_tokens": 2}, "is not modelled here"),
    ({"method": "ngram", "num_speculative_tokens": 2, "acceptance": 0.5}, "acceptance: Extra inputs are not permitted"),
    ({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "fast"},
     "rejection_sample_method: Input should be 'standard', 'synthetic', 'block' or 'fly'"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "needs the draft model"),
    ('{"method": ', "not a JSON object"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[2, 8, 1]]},
     "The first batch-size range must start at 1"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 8, 1], [8, 9, 0]]},
     "Batch-size ranges must be non-overlapping and sorted"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 8]]},
     "must be a 3-item sequence"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 8, -1]]},
     "values must be >= 0"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[4, 2, 1]]},
     r"start must be <= end for \(4, 2, 1\)"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": []}, "must not be empty"),
    ([1, 2], "must be a JSON object"),
])
def test_what_vllm_refuses_is_refused_with_its_words(config, message):
    with pytest.raises(ConfigError, match=message) as e:
        resolve_spec_decode(config)
    assert e.value.param == "speculative-config"


def test_synthetic_rates_lengths_and_the_prior():
    s = spec(method="ngram", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.9, 0.5, 0.5])
    assert s.rates == (0.9, 0.5, 0.5) and s.rates_source == "synthetic_acceptance_rates"
    # vLLM's minimum-variance schedule for a mean acceptance length
    s = spec(method="ngram", rejection_sample_method="synthetic", synthetic_acceptance_length=2.5)
    assert s.rates == (1.0, 0.5, 0.0) and s.mean_acceptance_length == 2.5
    assert spec(method="ngram", rejection_sample_method="synthetic", synthetic_acceptance_length=4).rates == (1, 1, 1)
    s = spec(method="ngram")
    assert s.rates == pytest.approx((0.7, 0.49, 0.343)) and DEFAULT_ACCEPTANCE == 0.7
    assert "the simulator's prior" in s.summary() and "mean acceptance length 2.53" in s.summary()


def test_a_draw_accepts_positions_while_it_is_below_their_rates():
    s = SpecDecode("ngram", 3, (0.9, 0.5, 0.2), "test")
    assert [s.accepted(u, 3) for u in (0.95, 0.9, 0.6, 0.3, 0.1, 0.0)] == [0, 0, 1, 2, 3, 3]
    assert s.accepted(0.0, 1) == 1 and s.accepted(0.0, 0) == 0


# ---- the scheduler -----------------------------------------------------------------------------------
class Draws:
    """A stand-in for the acceptance rng: these uniform draws, in turn."""

    def __init__(self, *u):
        self.u = list(u)

    def random(self):
        return self.u.pop(0)


def spec_sched(rates=(1.0, 1.0, 1.0), draws=(), lookahead=0, per_batch_size=(), **kw) -> Scheduler:
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096)
    args.update(kw)
    s = Scheduler(**args)
    s.speculate(SpecDecode("ngram" if not lookahead else "eagle", len(rates), tuple(rates), "test",
                           lookahead=lookahead, per_batch_size=per_batch_size), Draws(*draws))
    return s


def step(s, now):
    plan = s.schedule(now)
    return plan, s.complete(plan, now + 0.01)


def test_a_decode_verifies_its_drafts_and_emits_the_accepted_ones_and_the_bonus():
    s = spec_sched(rates=(0.9, 0.5, 0.2), draws=(0.3, 0.95, 0.0))
    r = EngineRequest(20, 10)
    s.add(r, 0.0)
    plan, emitted = step(s, 0)                       # the prefill: one token, no drafts
    assert [n for _, n in plan.scheduled] == [20] and (r.num_output, r.new_tokens, plan.spec_tokens) == (1, 1, 0)
    plan, emitted = step(s, 1)                       # 1 + 3 drafts; u 0.3 accepts 2
    assert [n for _, n in plan.scheduled] == [4] and plan.num_decode == 1 and plan.spec_tokens == 3
    assert plan.spec_pairs == 3 * 21 + 6 and plan.num_tokens == 4
    assert emitted == [r] and (r.num_output, r.new_tokens, r.num_computed, plan.accepted) == (4, 3, 23, 2)
    plan, emitted = step(s, 2)                       # u 0.95: none accepted, the bonus token alone
    assert (r.num_output, r.new_tokens, r.num_computed) == (5, 1, 24)
    plan, emitted = step(s, 3)                       # all three, and the bonus
    assert (r.num_output, r.new_tokens, r.num_computed) == (9, 4, 28)
    assert s.spec_counts == [3, 9, 5] and s.spec_per_pos == [2, 2, 1]


def test_tokens_past_the_output_length_are_dropped_but_counted_as_accepted():
    s = spec_sched(rates=(1.0, 1.0, 1.0), draws=(0.0, 0.0, 0.0))
    r = EngineRequest(16, 6)
    s.add(r, 0.0)
    step(s, 0)
    _, emitted = step(s, 1)
    assert (r.num_output, r.new_tokens) == (5, 4)
    plan, emitted = step(s, 2)                       # 4 more would make 9: 6 is the end
    assert emitted == [r] and (r.num_output, r.new_tokens, plan.accepted, r.state) == (6, 1, 0, r.DONE)
    assert s.spec_counts == [2, 6, 6] and r.blocks == 0


def test_the_budget_and_the_context_cut_the_drafts():
    s = spec_sched(rates=(1.0, 1.0, 1.0), draws=(0.0,) * 4, max_num_batched_tokens=6)
    a, b = EngineRequest(4, 20), EngineRequest(2, 20)
    s.add(a, 0.0)
    s.add(b, 0.0)
    step(s, 0)
    plan, _ = step(s, 1)                             # a takes 4, b what is left: 1 + 1 draft
    assert [(r, n) for r, n in plan.scheduled] == [(a, 4), (b, 2)] and plan.spec_tokens == 4
    assert (a.num_output, b.num_output) == (5, 3)
    s = spec_sched(rates=(1.0, 1.0, 1.0), draws=(0.0,) * 4, max_model_len=10)
    r = EngineRequest(6, 4)
    s.add(r, 0.0)
    step(s, 0)
    plan, _ = step(s, 1)                             # max_model_len - 1 - computed = 3 tokens
    assert [n for _, n in plan.scheduled] == [3]


def test_a_drafter_that_reads_hidden_states_holds_lookahead_blocks():
    s = spec_sched(rates=(1.0, 1.0, 1.0), draws=(0.0,), lookahead=3, block_size=4)
    r = EngineRequest(8, 20)
    s.add(r, 0.0)
    step(s, 0)
    assert r.blocks == 2
    step(s, 1)                                       # computed 8 + 4 tokens + 3 lookahead: 15 -> 4 blocks
    assert r.blocks == 4


def test_preempting_a_decode_scheduled_with_drafts_gives_them_back():
    s = spec_sched(rates=(1.0, 1.0, 1.0), draws=(0.0,) * 8, num_gpu_blocks=4, block_size=4, policy="priority")
    a = EngineRequest(6, 20, priority=1)
    b = EngineRequest(6, 20, priority=0)
    s.add(a, 0.0)
    s.add(b, 0.0)
    step(s, 0)
    plan, _ = step(s, 1)                    # b needs a block: a (lower priority), scheduled first, goes
    assert [r for r, _ in plan.scheduled] == [b] and plan.preempted == [a]
    assert (plan.num_decode, plan.spec_tokens, plan.spec_pairs) == (1, 3, 3 * 7 + 6)


def test_group_decoding_stays_off():
    s = spec_sched()
    s.decode_in_groups(True)
    assert s.lazy is None


# ---- time and memory -----------------------------------------------------------------------------
def settings(*extra):
    return resolve_step_settings(load_step_config(["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                                   "--max-model-len", "8192", *extra]))


def sc(**kw) -> tuple[str, str]:
    return "--speculative-config", json.dumps({"num_speculative_tokens": 3, **kw})


def test_the_drafts_and_the_drafter_cost_step_time():
    plain = settings()
    model = plain.step_time
    base = model.step_time(32, 32 * 1000, 0, 0, 0.0, 0)
    verify = model.step_time(32, 32 * 1000, 0, 0, 0.0, 0, spec_tokens=96, spec_pairs=96 * 1001.0)
    assert base < verify < 1.5 * base          # memory-bound: four tokens a request cost little more than one
    assert model.step_time(32, 32000, 0, 0, 0.0, 0, spec_tokens=0, spec_pairs=0.0) == base
    eagle = settings(*sc(method="eagle3", model="x/eagle3"))
    ngram = settings(*sc(method="ngram"))
    assert ngram.draft_cost.time is not None and ngram.draft_cost.model is None
    s = scheduler_for(eagle, 8192)
    for _ in range(4):
        s.add(EngineRequest(100, 50), 0.0)
    plan = s.schedule(0.0)
    t_head = eagle.draft_cost.time(plan)
    assert 0 < t_head < model.step_time(plan.num_decode, plan.decode_context, plan.num_chunks, plan.prefill_tokens,
                                        plan.prefill_pairs, plan.prefill_context)
    assert ngram.draft_cost.time(plan) == 0.0
    # the drafter's first pass over the step's tokens, k - 1 more over one token a request
    head = eagle.draft_cost.model
    first = head.step_time(0, 0, 4, 400, plan.prefill_pairs, 0)
    assert t_head == pytest.approx(first + 2 * head.step_time(4, 400, 0, 0, 0.0, 0))


def test_the_drafter_takes_its_weights_and_kv_from_the_cache():
    plain, eagle, eagle3, ngram = (settings(), settings(*sc(method="eagle", model="x/eagle")),
                                   settings(*sc(method="eagle3", model="x/eagle3")), settings(*sc(method="ngram")))
    assert ngram.num_gpu_blocks == plain.num_gpu_blocks
    assert eagle3.num_gpu_blocks < eagle.num_gpu_blocks < plain.num_gpu_blocks
    # a 33rd KV layer (7,681 x 32 / 33 = 7,448) less one decoder layer's 0.44 GB of weights (52 blocks)
    assert (plain.num_gpu_blocks, eagle.num_gpu_blocks) == (7681, 7397)
    draft = settings(*sc(method="draft_model", model="meta-llama/Llama-3.2-1B-Instruct"))
    assert draft.num_gpu_blocks < eagle3.num_gpu_blocks
    assert blocks_with_drafter(100, 16, 10, (0.0, 0)) == 100
    assert blocks_with_drafter(100, 16, 10, (1600.0, 10)) == 45
    with pytest.raises(ConfigError, match="no config.json for the draft model 'nobody/draft'"):
        settings(*sc(method="draft_model", model="nobody/draft"))
    assert settings("--num-gpu-blocks-override", "500", *sc(method="eagle3", model="x")).num_gpu_blocks == 500


def test_the_start_up_summary_names_the_method_and_its_acceptance():
    lines = settings(*sc(method="eagle3", model="x/eagle3")).summary(8192)
    assert lines[-1] == ("speculative decoding: eagle3, 3 draft tokens, acceptance per position [0.7, 0.49, 0.343] "
                         "(the simulator's prior, 0.7 per position given the one before; mean acceptance length "
                         "2.53)")


# ---- a replay ------------------------------------------------------------------------------------
def replay_with(*extra, seed=0):
    st = settings(*extra)
    trace = [TraceRequest(i * 0.5, 200, 64) for i in range(20)]
    s = scheduler_for(st, 8192, seed=seed)
    return s, replay(s, st.step_time, trace)


def test_a_replay_emits_every_token_and_accepted_drafts_shorten_it():
    _, plain = replay_with()
    full = sc(method="eagle3", model="x", rejection_sample_method="synthetic", synthetic_acceptance_length=4)
    none = sc(method="eagle3", model="x", rejection_sample_method="synthetic", synthetic_acceptance_length=1)
    s_full, all_in = replay_with(*full)
    s_none, none_in = replay_with(*none)
    for res in (plain, all_in, none_in):
        assert [r.num_output for r in res.requests] == [64] * 20
    tpot = {k: r.summary()["tpot_s"]["p50"] for k, r in (("plain", plain), ("all", all_in), ("none", none_in))}
    assert tpot["all"] < tpot["plain"] / 2.5 < tpot["none"] / 2.5
    assert s_full.spec_counts == [20 * 16, 20 * 16 * 3, 20 * 16 * 3] and s_full.spec_per_pos == [320, 320, 320]
    assert s_none.spec_counts == [20 * 63, 20 * 63 * 3, 0]


def test_a_replay_repeats_itself_for_a_seed():
    prior = sc(method="ngram")
    (a, ra), (b, rb), (c, _) = replay_with(*prior), replay_with(*prior), replay_with(*prior, seed=7)
    assert a.spec_counts == b.spec_counts != c.spec_counts
    assert ra.summary() == rb.summary()


def test_the_replay_command_line_reports_the_acceptance(capsys):
    from generation.engine.replay import main
    assert main(["--rate", "2", "--num-requests", "5", "--output-tokens", "9", "--model",
                 "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "--no-progress", "--json",
                 *sc(method="ngram", rejection_sample_method="synthetic", synthetic_acceptance_rates=[1, 1, 0])]) == 0
    out = json.loads(capsys.readouterr().out)
    # 8 tokens after the first: 3 per step (2 drafts accepted), 3 steps a request
    assert out["spec_decode"] == {"drafts": 15, "draft_tokens": 45, "accepted_tokens": 30,
                                  "mean_acceptance_length": 3.0, "per_position_acceptance": [1.0, 1.0, 0.0]}


# ---- dynamic speculation (num_speculative_tokens_per_batch_size) ------------------------------------
def test_the_batch_size_schedule_is_vllms_dense_lookup():
    s = spec(method="ngram", num_speculative_tokens_per_batch_size=[[8, 16, 2], [1, 4, 5], [32, 64, 0]])
    assert s.per_batch_size == ((1, 4, 5), (8, 16, 2), (32, 64, 0))
    # capped at k (3); a gap carries the range before it, the tail the last one
    assert s.drafts_by_batch(70) == [0] + [3] * 7 + [2] * 24 + [0] * 39
    assert spec(method="ngram").drafts_by_batch(8) is None
    assert s.summary().startswith("speculative decoding: ngram, 3 draft tokens (by batch size 1-4: 5, 8-16: 2, "
                                  "32-64: 0), acceptance per position")


def test_a_step_proposes_the_drafts_its_batch_size_gets():
    s = spec_sched(draws=(0.0,) * 8, per_batch_size=((1, 1, 3), (2, 8, 0)))
    a = EngineRequest(4, 30)
    s.add(a, 0.0)
    step(s, 0)
    plan, _ = step(s, 1)                    # alone: 3 drafts
    assert [n for _, n in plan.scheduled] == [4] and s.spec_k == 3
    b = EngineRequest(4, 30)
    s.add(b, 1.5)
    plan, _ = step(s, 2)                    # a with its 3 drafts, b's prefill: 2 requests propose none
    assert [n for _, n in plan.scheduled] == [4, 4] and s.spec_k == 0
    plan, _ = step(s, 3)
    assert [n for _, n in plan.scheduled] == [1, 1] and plan.spec_tokens == 0
    eagle = settings(*sc(method="eagle3", model="x"))
    assert eagle.draft_cost.time(plan, 0) == 0.0 < eagle.draft_cost.time(plan, 1) < eagle.draft_cost.time(plan, 3)


def test_drafting_only_at_small_batches_keeps_the_saturated_throughput():
    def out_rate(*extra):
        st = settings(*extra)
        res = replay(scheduler_for(st, 8192), st.step_time, [TraceRequest(i / 40, 512, 128) for i in range(300)])
        return res.summary()
    plain = out_rate()
    always = out_rate(*sc(method="eagle3", model="x"))
    dynamic = out_rate(*sc(method="eagle3", model="x", num_speculative_tokens_per_batch_size=[[1, 8, 3], [9, 1024, 0]]))
    assert always["output_tokens_per_s"] < 0.95 * plain["output_tokens_per_s"]
    assert dynamic["output_tokens_per_s"] > 0.97 * plain["output_tokens_per_s"]


def test_the_drafts_own_tensor_parallel_size():
    assert resolve_spec_decode({"method": "ngram", "num_speculative_tokens": 2}).draft_tp is None
    assert resolve_spec_decode({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 4},
                               tp=4).draft_tp == 4
    with pytest.raises(ConfigError, match="speculative_draft_tensor_parallel_size=2 cannot be other value than 1 "
                                          "or target model tensor_parallel_size"):
        resolve_spec_decode({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}, tp=4)
    # a draft model whole on each of 2 GPUs takes more of each one's cache, and its passes are not split
    split = settings("-tp", "2", *sc(method="draft_model", model="meta-llama/Llama-3.2-1B-Instruct"))
    whole = settings("-tp", "2", *sc(method="draft_model", model="meta-llama/Llama-3.2-1B-Instruct",
                                     draft_tensor_parallel_size=1))
    assert whole.num_gpu_blocks < split.num_gpu_blocks
    assert (split.draft_cost.model.tp, whole.draft_cost.model.tp) == (2, 1)


def test_drafts_under_preemption_prefix_caching_and_a_tight_cache_lose_no_token():
    """A small cache (preemptions), shared prefixes (the prefix cache) and drafts cut by the budget:
    every request ends with exactly its tokens, every block comes back, and the counts add up."""
    import random
    for policy in ("fcfs", "priority"):
        s = spec_sched(rates=(0.9, 0.6, 0.3), draws=(), lookahead=3, num_gpu_blocks=40, block_size=8,
                       max_num_batched_tokens=64, max_num_seqs=6, policy=policy)
        s.spec_rng = random.Random(3)
        rng = random.Random(7)
        reqs = [EngineRequest(rng.randint(5, 60), rng.randint(1, 40), priority=rng.randint(0, 2)) for _ in range(60)]
        for i, r in enumerate(reqs):
            r.block_hashes = [hash((i % 4, b)) for b in range(r.prompt_len // 8)]     # 4 shared prefixes
        t = 0.0
        pending = list(reqs)
        while pending or s.has_work():
            while pending and len(s.waiting) < 8:
                s.add(pending.pop(0), t)
            step(s, t)
            t += 1
            assert t < 20_000
        assert all(r.state == r.DONE and r.num_output == r.output_len for r in reqs)
        assert s.pool.num_held == 0 and s.num_preemptions > 0 and any(r.cached_tokens for r in reqs)
        drafts, drafted, accepted = s.spec_counts
        assert sum(s.spec_per_pos) == accepted <= drafted and drafts > 0


def test_older_releases_speculative_flags_take_effect():
    # vLLM before 0.10's --speculative-model / --num-speculative-tokens: the shorthands' meaning
    st = settings("--speculative-model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "--num-speculative-tokens", "2")
    assert (st.spec_decode.method, st.spec_decode.num_speculative_tokens) == ("eagle3", 2)


def test_an_eagle3_head_with_its_own_draft_vocabulary_costs_less(tmp_path):
    """EAGLE-3 heads usually carry ``draft_vocab_size`` 32,000 (Llama-3's is 128,256): read
    from the head's config.json, it sizes the head's LM head, in memory and in time; without a
    config the head keeps the target's vocabulary, as vLLM gives it."""
    head_dir = tmp_path / "eagle3-head"
    head_dir.mkdir()
    (head_dir / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_hidden_layers": 1,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "draft_vocab_size": 32000}))
    full = settings(*sc(method="eagle3", model="x/eagle3"))
    small = settings(*sc(method="eagle3", model=str(head_dir)))
    eagle = settings(*sc(method="eagle", model="x/eagle"))
    assert draft_vocab_of(small.spec_decode) == 32000
    assert draft_vocab_of(full.spec_decode) is None and draft_vocab_of(eagle.spec_decode) is None
    assert small.draft_cost.model.arch.vocab_size == 32000
    assert full.draft_cost.model.arch.vocab_size == 128256
    # its LM head: 32,000 x 4,096 x 2 bytes = 0.26 GB against 1.05 GB: 91 blocks of 64 tokens (33 KV layers) more
    assert full.num_gpu_blocks < small.num_gpu_blocks < eagle.num_gpu_blocks
    assert (full.num_gpu_blocks, small.num_gpu_blocks) == (7276, 7367)
    s = scheduler_for(full, 8192)
    for _ in range(4):
        s.add(EngineRequest(100, 50), 0.0)
    plan = s.schedule(0.0)
    assert 0 < small.draft_cost.time(plan) < full.draft_cost.time(plan)
