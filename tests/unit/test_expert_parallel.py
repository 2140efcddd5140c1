"""``--enable-expert-parallel`` (``-ep``) in step mode: a MoE model's routed experts dealt out
whole over the TP x DP ranks (vLLM: the expert-parallel group is TP x DP), in each GPU's
weights and so its KV cache, in the experts a step reads (those of the whole group's tokens)
and in the collectives (a dispatch and a combine all-to-all per MoE layer with DP)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from generation.config.values import ConfigError
from generation.engine.hardware import weight_bytes, weight_bytes_per_gpu
from generation.engine.perf.hardware import expert_parallel_terms, local_experts, routed_expert_params
from generation.engine.perf.model_arch import preset
from generation.engine.step_config import load_step_config, resolve_step_settings

QWEN_MOE = "Qwen/Qwen3-30B-A3B"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


def test_experts_are_dealt_out_whole_over_the_group():
    arch = preset(QWEN_MOE)
    assert [local_experts(arch, ep) for ep in (1, 2, 3, 4, 8)] == [128, 64, 43, 32, 16]
    experts = routed_expert_params(arch) * 2                  # bfloat16
    whole = weight_bytes(arch)
    assert weight_bytes_per_gpu(arch, "", 1, 4) == pytest.approx(whole - experts + experts / 4)
    # TP x EP at DP 1: the same bytes as TP alone (whole experts on half the ranks each)
    assert weight_bytes_per_gpu(arch, "", 2, 2) == pytest.approx(weight_bytes_per_gpu(arch, "", 2))
    dense = preset("meta-llama/Llama-3.1-8B-Instruct")
    assert weight_bytes_per_gpu(dense, "", 1, 4) == weight_bytes_per_gpu(dense, "", 1)


def test_the_kv_cache_grows_by_the_experts_a_gpu_no_longer_holds():
    dp2, dp2_ep, dp4_ep = (settings(QWEN_MOE, "--gpu", "H100", "-dp", "2"),
                           settings(QWEN_MOE, "--gpu", "H100", "-dp", "2", "--enable-expert-parallel"),
                           settings(QWEN_MOE, "--gpu", "H100", "-dp", "4", "-ep"))
    assert (dp2.num_gpu_blocks, dp2_ep.num_gpu_blocks, dp4_ep.num_gpu_blocks) == (3002, 7610, 9914)
    assert (dp2.step_time.ep, dp2_ep.step_time.ep, dp4_ep.step_time.ep) == (1, 2, 4)
    assert dp4_ep.summary(8192)[3].endswith("; expert parallel over 4 GPUs, 32 experts each")
    assert "expert parallel" not in dp2.summary(8192)[3]
    # a dense model has no experts to deal out: the flag changes nothing, as in vLLM
    plain, ep = (settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "-dp", "2", *flag)
                 for flag in ((), ("-ep",)))
    assert (plain.num_gpu_blocks, ep.step_time.ep) == (ep.num_gpu_blocks, 1)


def test_deepseek_r1_wide_ep_fits_where_one_gpu_per_replica_does_not():
    """llm-d's wide-EP set-up (DP 8 with expert parallelism) on H200s: 1/8 of the 654 B routed
    parameters a GPU; without it every DP rank would hold the whole model."""
    with pytest.raises(ConfigError, match="does not fit on H200"):
        settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-dp", "8")
    wide = settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-dp", "8", "-ep")
    assert wide.num_gpu_blocks == 9921
    assert wide.step_time.moe_jit(8192).experts == 32          # a rank's kernels run its 32 experts


def test_tp_with_ep_and_no_dp_times_as_tp():
    """At DP 1 every rank has the whole batch: the experts' bytes and the all-reduces are TP's."""
    tp, tp_ep = (settings(QWEN_MOE, "--gpu", "H100", "-tp", "2", *flag).step_time for flag in ((), ("-ep",)))
    for args in ((32, 32 * 2000, 0, 0, 0.0, 0), (256, 256 * 2000, 0, 0, 0.0, 0), (0, 0, 1, 4096, 4096 * 2048.0, 0)):
        assert tp_ep.step_time(*args) == pytest.approx(tp.step_time(*args), rel=1e-9)


def test_with_dp_a_step_reads_the_experts_of_the_groups_tokens_and_pays_all_to_alls():
    dp2, dp2_ep = (settings(QWEN_MOE, "--gpu", "H100", "-dp", "2", *flag).step_time for flag in ((), ("-ep",)))
    decode = (8, 8 * 2000, 0, 0, 0.0, 0)
    prefill = (0, 0, 1, 4096, 4096 * 2048.0, 0)
    # a small decode: half the experts' bytes at most, though its twin's tokens touch more of them
    assert dp2_ep.step_time(*decode) < dp2.step_time(*decode)
    # a long prefill reads every expert either way, and adds 96 all-to-alls of 4,096 tokens' states
    assert dp2_ep.step_time(*prefill) > dp2.step_time(*prefill)
    arch = preset(QWEN_MOE)
    _, untouched, ops, per_token = expert_parallel_terms(arch, "", 1, 2, 2, 450e9)
    assert untouched == pytest.approx((1 - 8 / 128) ** 2)
    assert ops == 2 * 48
    assert per_token == pytest.approx(8 * 2048 * 2 * 0.5 / 450e9)


def test_the_mfu_estimate_deals_the_experts_out_too():
    """``--enable-mfu-metrics``: vLLM's ``perf.py`` splits the experts by EP with the flag
    (``StepPerf(enable_ep=...)``, checked against vLLM's own in test_mfu)."""
    from generation.engine.perf.mfu import build_perf_counters
    from generation.engine.step_config import load_step_config
    routed = []
    for flag in ((), ("-ep",)):
        cfg = load_step_config(["--model", QWEN_MOE, "--max-model-len", "8192", "-dp", "2",
                                "--enable-mfu-metrics", *flag])
        cfg.step = resolve_step_settings(cfg)
        metrics = SimpleNamespace(perf_flops=None, perf_read=None, perf_write=None)
        routed.append(build_perf_counters(cfg, metrics).perf.routed[1:3])
    assert routed == [(1, 128), (2, 64)]          # (EP size, experts a GPU holds)
