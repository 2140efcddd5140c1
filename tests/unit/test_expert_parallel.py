"""A MoE model under data parallelism, and ``--enable-expert-parallel`` (``-ep``), in step mode.
vLLM 0.34 (``FusedMoEParallelConfig.make``) shares a MoE model's routed experts out over all TP x
DP GPUs: a slice of every expert on each, or with expert parallelism whole experts, ``E / (TP x
DP)`` a GPU.  Either way a GPU holds ``1 / (TP x DP)`` of the experts (so its KV cache grows with
DP), a step reads the experts that the group's tokens route to, and each MoE layer gathers the
other replicas' tokens and reduce-scatters the outputs (the default ``allgather_reducescatter``)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from generation.config.values import ConfigError
from generation.engine.hardware import weight_bytes, weight_bytes_per_gpu
from generation.engine.perf.hardware import collective_terms, local_experts, moe_group_terms, routed_expert_params
from generation.engine.perf.model_arch import preset
from generation.engine.step_config import load_step_config, resolve_step_settings

QWEN_MOE = "Qwen/Qwen3-30B-A3B"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


def test_experts_are_shared_out_over_tp_times_dp():
    arch = preset(QWEN_MOE)
    assert [local_experts(arch, n) for n in (1, 2, 3, 4, 8)] == [128, 64, 43, 32, 16]
    experts = routed_expert_params(arch) * 2                  # bfloat16
    whole = weight_bytes(arch)
    assert weight_bytes_per_gpu(arch, "", 1, 4) == pytest.approx(whole - experts + experts / 4)
    assert weight_bytes_per_gpu(arch, "", 1, 4, ep=True) == pytest.approx(weight_bytes_per_gpu(arch, "", 1, 4))
    # 128 experts over 3 GPUs: 43 whole on the fullest, a third of each without EP
    assert weight_bytes_per_gpu(arch, "", 1, 3, ep=True) == pytest.approx(whole - experts + experts * 43 / 128)
    # TP x EP at DP 1: the same bytes as TP alone
    assert weight_bytes_per_gpu(arch, "", 2, 1, ep=True) == pytest.approx(weight_bytes_per_gpu(arch, "", 2))
    dense = preset("meta-llama/Llama-3.1-8B-Instruct")
    assert weight_bytes_per_gpu(dense, "", 1, 4, ep=True) == weight_bytes_per_gpu(dense, "", 1)


def test_the_kv_cache_grows_with_dp_whether_or_not_experts_are_whole():
    dp1, dp2, dp2_ep, dp4_ep = (settings(QWEN_MOE, "--gpu", "H100", *flags) for flags in (
        (), ("-dp", "2"), ("-dp", "2", "--enable-expert-parallel"), ("-dp", "4", "-ep")))
    assert (dp1.num_gpu_blocks, dp2.num_gpu_blocks, dp2_ep.num_gpu_blocks, dp4_ep.num_gpu_blocks) == \
        (3002, 7610, 7610, 9914)
    assert (dp2.step_time.ep, dp2_ep.step_time.ep, dp4_ep.step_time.ep) == (1, 2, 4)
    assert dp4_ep.summary(8192)[3].endswith("; expert parallel over 4 GPUs, 32 experts each")
    assert dp2.summary(8192)[3].endswith("; experts sliced over 2 GPUs (TP x DP)")
    assert dp1.summary(8192)[3].endswith("; weights bfloat16")
    # a rank's fused-MoE kernels: a slice of all 128 experts, or its own 32 whole
    assert (dp2.step_time.moe_jit(8192).experts, dp4_ep.step_time.moe_jit(8192).experts) == (128, 32)
    # a dense model has no experts to share out: DP and the flag change nothing
    plain, ep = (settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "-dp", "2", *flag)
                 for flag in ((), ("-ep",)))
    assert (plain.num_gpu_blocks, ep.step_time.ep, ep.step_time.dp) == (ep.num_gpu_blocks, 1, 1)


def test_deepseek_r1_at_dp8_fits_on_h200s():
    """llm-d's wide-EP set-up (DP 8, expert parallelism) on one node of H200s: an eighth of the
    654 B routed parameters a GPU (with or without -ep), where one whole copy does not fit."""
    with pytest.raises(ConfigError, match="does not fit on H200"):
        settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200")
    dp8, wide = (settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-dp", "8", *f) for f in ((), ("-ep",)))
    assert dp8.num_gpu_blocks == wide.num_gpu_blocks == 9921


def test_tp_with_ep_and_no_dp_times_as_tp():
    """At DP 1 every rank has the whole batch: the experts' bytes and the all-reduces are TP's."""
    tp, tp_ep = (settings(QWEN_MOE, "--gpu", "H100", "-tp", "2", *flag).step_time for flag in ((), ("-ep",)))
    for args in ((32, 32 * 2000, 0, 0, 0.0, 0), (256, 256 * 2000, 0, 0, 0.0, 0), (0, 0, 1, 4096, 4096 * 2048.0, 0)):
        assert tp_ep.step_time(*args) == pytest.approx(tp.step_time(*args), rel=1e-9)


def test_under_dp_a_step_reads_the_groups_experts_and_gathers_its_tokens():
    dp1, dp2, dp2_ep = (settings(QWEN_MOE, "--gpu", "H100", *f).step_time for f in ((), ("-dp", "2"),
                                                                                      ("-dp", "2", "-ep")))
    decode = (8, 8 * 2000, 0, 0, 0.0, 0)
    # half the experts' bytes, though the twin replica's tokens touch more of them
    assert dp2.step_time(*decode) < dp1.step_time(*decode)
    # whole experts or slices: the same bytes, the same step
    assert dp2_ep.step_time(*decode) == pytest.approx(dp2.step_time(*decode), rel=1e-12)
    arch = preset(QWEN_MOE)
    bytes_experts, untouched, ops, per_token = moe_group_terms(arch, "", 1, 2, False, 450e9)
    assert bytes_experts == pytest.approx(48 * 128 * arch.expert_params * 2 / 2)
    assert untouched == pytest.approx((1 - 8 / 128) ** 2)
    assert (ops, per_token) == collective_terms(arch, 1, 450e9, dp=2) == (2 * 48, pytest.approx(2048 * 2 / 450e9))
    # at TP 2 the TP all-reduces remain beside the DP exchange; with EP (vLLM's sequence-parallel
    # MoE) a MoE layer's is an all-gather, half an all-reduce's bytes
    ar = 2048 * 2 * 2 / 2 / 450e9
    assert collective_terms(arch, 2, 450e9, dp=2) == (2 * 48 + 2 * 48, pytest.approx((96 * ar + 96 * 2048 * 2 / 450e9) / 192))
    assert collective_terms(arch, 2, 450e9, dp=2, ep=True)[0] == 48 + 48 + 2 * 48


def test_the_mfu_estimate_shares_the_experts_out_too():
    """``--enable-mfu-metrics``: vLLM's ``perf.py`` splits the experts by EP with the flag, by
    TP x DP without (``StepPerf(enable_ep=...)``, checked against vLLM's own in test_mfu)."""
    from generation.engine.perf.mfu import build_perf_counters
    routed = []
    for flag in ((), ("-ep",)):
        cfg = load_step_config(["--model", QWEN_MOE, "--max-model-len", "8192", "-dp", "2",
                                "--enable-mfu-metrics", *flag])
        cfg.step = resolve_step_settings(cfg)
        metrics = SimpleNamespace(perf_flops=None, perf_read=None, perf_write=None)
        routed.append(build_perf_counters(cfg, metrics).perf.routed[1:3])
    assert routed == [(1, 128), (2, 64)]          # (EP size, experts a GPU holds)


def test_a_multi_node_deployment_runs_its_local_ranks_and_shares_experts_over_all():
    """vLLM's ``--data-parallel-size 16 --data-parallel-size-local 8`` (llm-d's wide EP over two
    nodes): this process serves its 8 ranks; a MoE model's experts are shared over all 16."""
    cfg = load_step_config(["--model", "deepseek-ai/DeepSeek-R1", "--gpu", "H200", "--max-model-len", "8192",
                            "-dp", "16", "--data-parallel-size-local", "8", "-ep"])
    st = resolve_step_settings(cfg)
    assert (cfg.data_parallel_size, cfg.data_parallel_size_total, st.step_time.ep, st.num_gpu_blocks) == (8, 16, 16, 19009)
    with pytest.raises(ConfigError, match=r"^data_parallel_size_local \(8\) must be <= data_parallel_size \(4\)$"):
        load_step_config(["-dp", "4", "-dpl", "8"])
    with pytest.raises(ConfigError, match=r"^data parallel size must be between 1 and 8 \(more: --data-parallel-size-local\)"):
        load_step_config(["-dp", "16"])
    with pytest.raises(ConfigError, match="data parallel size local must be between 1 and 8"):
        load_step_config(["-dp", "32", "-dpl", "16"])


def test_a_dispatch_backend_sends_each_token_to_its_experts():
    """``--all2all-backend deepep_low_latency`` (llm-d's wide-EP decode pods) with ``-ep``: a
    token goes to its top_k experts' GPUs and back (DeepSeek-R1's FP8 weights: dispatched in
    FP8), instead of every replica's tokens gathered; without ``-ep`` the backend is unused."""
    arch = preset("deepseek-ai/DeepSeek-R1")
    ops, per_token = collective_terms(arch, 1, 450e9, dp=8, ep=True, backend="deepep_low_latency")
    assert (ops, per_token) == (2 * 58, pytest.approx(8 * 7168 * (1 + 2) / 2 * 7 / 8 / 450e9))
    assert collective_terms(arch, 1, 450e9, dp=8, ep=False, backend="deepep_low_latency") == \
        collective_terms(arch, 1, 450e9, dp=8) == (2 * 58, pytest.approx(7 * 7168 * 2 / 450e9))
    gather, deepep = (settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-dp", "8", "-ep", *b).step_time
                      for b in ((), ("--all2all-backend", "deepep_low_latency")))
    assert deepep.ar_per_token == pytest.approx(per_token) and gather.ar_per_token > deepep.ar_per_token


def test_a_high_throughput_dispatch_sends_a_token_once_to_each_gpu_it_needs():
    """DeepEP's normal (high-throughput) kernels send a token to each GPU holding one of its
    experts once; at DP 2 a token of Qwen3-30B-A3B's 8 experts reaches 2 x (1 - 0.5^8) of them."""
    arch = preset(QWEN_MOE)
    ops, per_token = collective_terms(arch, 1, 450e9, dp=2, ep=True, backend="deepep_high_throughput")
    assert (ops, per_token) == (96, pytest.approx(2 * (1 - 0.5 ** 8) * 2048 * 2 * 0.5 / 450e9))
    assert per_token < collective_terms(arch, 1, 450e9, dp=2, ep=True, backend="deepep_low_latency")[1]
    # past a node, a token crosses the network once to each other node holding one of its experts
    # (DeepSeek-R1 over 2 nodes of 8: 1 - 0.5^8 of the other), then NVLink to its GPUs there
    from generation.engine.perf.hardware import NETWORK_BANDWIDTH
    r1 = preset("deepseek-ai/DeepSeek-R1")
    ops, per_token = collective_terms(r1, 1, 450e9, dp=16, ep=True, backend="deepep_high_throughput")
    gpus = 16 * (1 - (15 / 16) ** 8)
    assert (ops, per_token) == (2 * 58, pytest.approx(7168 * 3 / 2 * ((1 - 0.5 ** 8) / NETWORK_BANDWIDTH + gpus / 450e9)))
    assert per_token < collective_terms(r1, 1, 450e9, dp=16, ep=True, backend="deepep_low_latency")[1] / 4
    # and the error names the flag, not the -local one in its message
    from generation.config.values import error_line
    with pytest.raises(ConfigError) as e:
        load_step_config(["-dp", "16"])
    assert error_line(e.value).startswith("error: --data-parallel-size: data parallel size must be")
    with pytest.raises(ConfigError, match="pipeline parallel size cannot be less than 1"):
        settings(QWEN_MOE, "--gpu", "H100", "-pp", "0")


def test_a_second_node_counts_its_ranks_from_its_start_rank(app_client):
    """``--data-parallel-start-rank 8`` on the second of two nodes (``-dp 16 -dpl 8``): its
    first rank is engine 8 on /metrics (vLLM's engine index), as the rank 0 of the node."""
    from generation.config.values import global_dp_rank
    cfg = load_step_config(["-dp", "16", "-dpl", "8", "--data-parallel-start-rank", "8"])
    assert (global_dp_rank(cfg), cfg.data_parallel_size) == (8, 8)
    with pytest.raises(ConfigError, match="leaves no room for 8 local ranks of 16"):
        load_step_config(["-dp", "16", "-dpl", "8", "--data-parallel-start-rank", "9"])
    c = app_client("-dp", "16", "-dpl", "8", "--data-parallel-start-rank", "8", "--data-parallel-rank", "0")
    assert 'engine="8"' in c.get("/metrics").text


def test_dual_batch_overlap_hides_the_exchange_of_a_step_large_enough_to_split():
    """``--enable-dbo`` (vLLM's DBO) with DP and ``-ep``: a step of at least
    ``--dbo-decode-token-threshold`` decode tokens (or ``--dbo-prefill-token-threshold`` with a
    prompt) takes ``max(rest, exchange)``; a smaller one runs whole."""
    from generation.engine.perf.hardware import exchange_terms
    flags = ("-dp", "16", "-dpl", "8", "-ep", "--all2all-backend", "deepep_low_latency")
    plain, dbo = (settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", *flags, *f).step_time
                  for f in ((), ("--enable-dbo",)))
    small, large, prompt = (16, 16 * 2000, 0, 0, 0.0, 0), (64, 64 * 2000, 0, 0, 0.0, 0), (0, 0, 1, 2048, 2048 * 1024.0, 0)
    assert dbo.step_time(*small) == plain.step_time(*small)                  # 16 < 32: not split
    ops, per_token = exchange_terms(preset("deepseek-ai/DeepSeek-R1"), 1, plain.gpu.nvlink_bandwidth, dp=16, ep=True,
                                    backend="deepep_low_latency")
    c = plain.constants
    for step, tokens in ((large, 64), (prompt, 2048)):
        t, x = plain.step_time(*step), ops * c.t_ar + ops * per_token / c.eta_ar * tokens
        assert dbo.step_time(*step) == pytest.approx(max(t - x, x))
        assert dbo.step_time(*step) < t
    # without DP and EP there is no exchange to hide; thresholds below two micro-batches' are vLLM's error
    tp8 = settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-tp", "8", "--enable-dbo").step_time
    assert not getattr(tp8, "dbo", False)
    with pytest.raises(ConfigError, match="does not support: dual batch overlap with pipeline parallelism"):
        settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", *flags, "-pp", "2", "--enable-dbo")
    with pytest.raises(ConfigError, match=r"must be at least the number of microbatches \(2\)"):
        settings("deepseek-ai/DeepSeek-R1", "--gpu", "H200", "-dp", "8", "--enable-dbo", "--dbo-decode-token-threshold", "1")


def test_flags_with_nothing_to_carry_are_said_once(caplog):
    """--all2all-backend and --enable-dbo without a MoE model under DP with -ep change nothing:
    accepted as vLLM accepts them, and said once (a fresh user read figures into them)."""
    import logging
    from generation.engine import step_config
    step_config._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        for _ in range(2):
            settings(QWEN_MOE, "--gpu", "H100", "--all2all-backend", "deepep_low_latency", "--enable-dbo")
        settings(QWEN_MOE, "--gpu", "H100", "-dp", "2", "-ep", "--all2all-backend", "deepep_low_latency")
    said = [r.getMessage() for r in caplog.records if "changes nothing" in r.getMessage()]
    assert said == ["step engine: --enable-dbo changes nothing here without a MoE model under data parallelism "
                    "with --enable-expert-parallel (it hides or carries the expert exchange)",
                    "step engine: --all2all-backend deepep_low_latency changes nothing here without a MoE model "
                    "under data parallelism with --enable-expert-parallel (it hides or carries the expert exchange)"]


def test_eplb_places_its_redundant_experts_on_every_gpu():
    """--enable-eplb with --eplb-config num_redundant_experts: each GPU holds (E + R) / (TP x DP)
    experts, so the copies cost KV cache; vLLM 0.34's checks and messages."""
    flags = ("--gpu", "H200", "-dp", "16", "-dpl", "8", "-ep")
    plain = settings("deepseek-ai/DeepSeek-R1", *flags)
    eplb = settings("deepseek-ai/DeepSeek-R1", *flags, "--enable-eplb")      # 256 % 16 == 0: no copies
    copies = settings("deepseek-ai/DeepSeek-R1", *flags, "--enable-eplb", "--eplb-config",
                      '{"num_redundant_experts": 32, "window_size": 500}')
    assert plain.num_gpu_blocks == eplb.num_gpu_blocks == 19009 and copies.num_gpu_blocks == 17870
    assert "expert parallel over 16 GPUs, 18 experts each (EPLB: 32 redundant)" in copies.summary(8192)[3]
    assert copies.arch.num_experts == 256 and copies.step_time.arch.num_experts == 288
    for extra, words, flag in (
            (("--enable-eplb",), "enable_expert_parallel must be True to use EPLB.", "enable-eplb"),
            (("-ep", "--enable-eplb"), "EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, "
                                       "PCP=1, DP=1.", "enable-eplb"),
            (("--eplb-config", '{"num_redundant_experts": 4}'), "num_redundant_experts is set to 4 but EPLB is not "
             "enabled. Either enable EPLB or unset num_redundant_experts.", "eplb-config"),
            (("-dp", "2", "-ep", "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 1.5}'),
             "eplb_config.num_redundant_experts must be an integer >= 0, got 1.5", "eplb-config")):
        with pytest.raises(ConfigError) as e:
            settings(QWEN_MOE, "--gpu", "H100", *extra)
        assert str(e.value) == words and e.value.param == flag
