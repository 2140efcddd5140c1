"""The step model on the architectures of DeepSeek-V3 / R1 and gpt-oss: multi-head latent
attention (MLA), MXFP4 experts and sliding-window layers (issue 28: the physics the dense and
Mixtral runs never exercised).

Unit tier, exact values from the shipped presets (the models' real config.json fields):
KV bytes per token, parameter and weight counts, vLLM's hybrid KV capacity, and the step
model's attention terms.
"""
from __future__ import annotations

import json
import os

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.engine.perf.hardware import (GiB, expert_weight_bytes, gpu_by_name, hybrid_kv_tokens,
                                             kv_bytes_per_token, kv_cache_blocks, linear_weight_bytes,
                                             weight_bytes, weight_bytes_per_gpu)
from generation.engine.perf.model_arch import ModelArch, preset
from generation.engine.perf.step_model import StepModel
from generation.engine.step_config import resolve_step_settings

R1 = "deepseek-ai/DeepSeek-R1"
OSS120 = "openai/gpt-oss-120b"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


# ---- MLA ----------------------------------------------------------------------------------------
def test_deepseek_v3_counts_as_mla_with_its_parameter_count():
    a = preset("deepseek-ai/DeepSeek-V3")
    assert a.is_mla and a.is_moe
    assert (a.kv_lora_rank, a.q_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (512, 1536, 128, 64, 128)
    assert a.quantization == "fp8" and a.num_experts == 256 and a.dense_layers == 3
    # q_a + q_b + kv_a + kv_b + o
    assert a.attn_params_per_layer == (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                                       + 128 * 128 * 7168) == 187_105_280
    assert a.n_params == 671_025_813_504          # DeepSeek's 671B (the MTP layer not loaded)
    assert a.replicated_params == 61 * 7168 * (1536 + 576)
    k2 = preset("moonshotai/Kimi-K2-Instruct")          # the same architecture, 384 experts, 64 heads
    assert k2.is_mla and (k2.num_experts, k2.num_heads, k2.dense_layers) == (384, 64, 1)
    assert round(k2.n_params / 1e12, 2) == 1.03 and kv_bytes_per_token(k2) == 70_272


def test_mla_kv_is_one_latent_per_token_and_layer_on_every_rank():
    a = preset(R1)
    assert kv_bytes_per_token(a) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(a, "auto", 8) == 70_272          # not split by tensor parallelism
    assert kv_bytes_per_token(a, "fp8", 8) == 35_136
    # V3.2: the same latent and an indexer key beside it; fp8 as vLLM's fp8_ds_mla
    v32 = preset("deepseek-ai/DeepSeek-V3.2-Exp")
    assert v32.is_sparse_mla and (v32.index_topk, v32.index_n_heads, v32.index_head_dim) == (2048, 64, 128)
    assert kv_bytes_per_token(v32) == 61 * (1152 + 132) and kv_bytes_per_token(v32, "fp8", 8) == 61 * (656 + 132)
    cfg = load_config(["--latency-calculator", "step", "deepseek-ai/DeepSeek-V3.2", "--gpu", "H200", "-tp", "8",
                       "--max-model-len", "8192", "--kv-cache-dtype", "fp8_ds_mla"], env={})   # vLLM's own name
    assert resolve_step_settings(cfg).step_time.kv_bytes_per_token == 61 * (656 + 132)


def test_mla_attention_costs_per_pair_differ_for_decode_and_prefill():
    a = preset(R1)
    assert a.attn_flops_per_pair(decode=True) == 2 * (2 * 512 + 64)       # absorbed, on the latent
    assert a.attn_flops_per_pair(decode=False) == 2 * (128 + 64 + 128)    # decompressed heads
    dense = preset(LLAMA8)
    assert dense.attn_flops_per_pair(True) == dense.attn_flops_per_pair(False) == 4 * 128


def test_replicated_down_projections_add_to_each_ranks_weights():
    a = preset(R1)
    extra = a.replicated_params * linear_weight_bytes(a) * 7 / 8
    assert weight_bytes_per_gpu(a, "", 8) == pytest.approx(weight_bytes(a) / 8 + extra)
    assert round(extra / GiB, 2) == 0.75
    dense = preset(LLAMA8)
    assert weight_bytes_per_gpu(dense, "", 4) == weight_bytes(dense) / 4


def test_an_mla_config_without_q_lora_rank_and_a_missing_field():
    cfg = {"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 16, "intermediate_size": 10944, "vocab_size": 102400, "kv_lora_rank": 512,
           "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    a = ModelArch.from_hf_config(cfg)
    assert a.is_mla and a.q_lora_rank == 0
    assert a.attn_params_per_layer == 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    del cfg["v_head_dim"]
    with pytest.raises(ConfigError) as e:
        ModelArch.from_hf_config(cfg, source="cfg.json")
    assert str(e.value) == "cfg.json: missing field 'v_head_dim'"
    # a kv_lora_rank on a model type vLLM does not treat as MLA is not MLA
    cfg.update(model_type="llama", v_head_dim=128)
    assert not ModelArch.from_hf_config(cfg).is_mla


def test_mla_step_model_prices_decode_and_prefill_pairs_apart():
    gpu = gpu_by_name("H200")
    m = StepModel(gpu, preset(R1), tp=8)
    assert m._c_attn_dec / m._c_attn_pre == pytest.approx(2176 / 640)
    t = m.terms(num_decode=4, decode_context=40_000, num_chunks=0, prefill_tokens=0, prefill_pairs=0,
                prefill_context=0)
    assert t["attn_flops"] == pytest.approx(m._c_attn_dec * 40_000)
    assert t["kv_read"] == pytest.approx(m._c_kv * 40_004)
    t = m.terms(num_decode=0, decode_context=0, num_chunks=1, prefill_tokens=1000, prefill_pairs=500_500,
                prefill_context=0)
    assert t["attn_flops"] == pytest.approx(m._c_attn_pre * 500_500)
    assert t["total"] == m.step_time(0, 0, 1, 1000, 500_500, 0)


# ---- MXFP4 and sliding windows (gpt-oss) -----------------------------------------------------
def test_gpt_oss_reads_mxfp4_experts_and_its_sliding_layers():
    a = preset(OSS120)
    assert a.quantization == "mxfp4" and a.num_experts == 128 and a.experts_per_token == 4
    assert (a.sliding_window, a.sliding_layers, a.full_attention_layers) == (128, 18, 18)
    assert a.n_params == 116_788_838_400                          # "117B"
    assert linear_weight_bytes(a) == 2.0                          # attention, router in BF16
    assert expert_weight_bytes(a) == (0.5 + 1 / 32) * 3072 / 2880  # hidden padded to 256
    assert round(weight_bytes(a) / GiB, 2) == 64.47               # vLLM 0.14 logged 64.38 GiB
    assert kv_bytes_per_token(a) == 2 * 36 * 8 * 64 * 2


def test_mxfp4_step_model_reads_the_experts_at_their_own_bytes_and_bf16_flops():
    a = preset(OSS120)
    m = StepModel(gpu_by_name("H100"), a)
    experts = 36 * 128 * a.expert_params
    assert m.bytes_experts == pytest.approx(experts * expert_weight_bytes(a))
    assert m.bytes_fixed == pytest.approx((a.n_lin_total - experts) * 2 + a.n_head * 2)
    assert m.fp8_layers == 0                                      # weight-only: no FP8 tensor cores


def test_sliding_layers_read_at_most_the_window():
    m = StepModel(gpu_by_name("H100"), preset(OSS120))
    s = m.window_share
    assert (m.window, s) == (128, 0.5)

    def kv(context):
        return m.terms(1, context, 0, 0, 0, 0)["kv_read"]
    assert kv(100) == pytest.approx(m._c_kv * 101)                     # inside the window: every layer
    # past it only the full layers' reads grow: half the slope of a model without windows
    assert kv(20_000) - kv(10_000) == pytest.approx((1 - s) * m._c_kv * 10_000)
    assert kv(10_000) == pytest.approx(m._c_kv * ((1 - s) * 10_001 + s * (128 + 1)))
    pairs = m.terms(0, 0, 1, 1000, 500_500, 0)["attn_flops"]
    assert pairs == pytest.approx(m._c_attn * ((1 - s) * 500_500 + s * 128_000))


def test_hybrid_kv_capacity_holds_as_many_requests_as_vllms_pool():
    a, gpu = preset(OSS120), gpu_by_name("H100")
    flat = kv_cache_blocks(gpu, a, max_num_batched_tokens=8192, max_num_seqs=256)
    page = 16 * kv_bytes_per_token(a) // 36
    avail = flat * 16 * kv_bytes_per_token(a)        # within a block of the memory model's figure
    for mml, ratio in ((131_072, 1.998), (32_768, 1.991), (8_192, 1.965)):
        hybrid = kv_cache_blocks(gpu, a, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=mml)
        # one pool over 18-layer groups; a running request of mml tokens holds cdiv(mml, 16) full
        # blocks and the cdiv(127, 16) + 1 = 9 its 128-token window covers
        per_len = mml // 16
        assert hybrid_kv_tokens(a, avail, page, 16, mml) == int(avail // (page * 18) / (per_len + 9) * mml)
        assert round(hybrid / flat, 3) == ratio
    # no sliding layers: the flat count whatever the length
    llama = preset(LLAMA8)
    assert kv_cache_blocks(gpu, llama, max_model_len=8192) == kv_cache_blocks(gpu, llama)


def test_step_mode_serves_the_new_presets():
    cfg = load_config(["--latency-calculator", "step", OSS120, "--gpu", "H100", "--max-model-len", "32768"], env={})
    s = resolve_step_settings(cfg)
    assert s.arch.sliding_layers == 18 and s.step_time.window == 128
    cfg = load_config(["--latency-calculator", "step", R1, "--gpu", "H200", "-tp", "8", "--max-model-len", "32768",
                       "--quantization", "fp8"], env={})
    s = resolve_step_settings(cfg)
    assert s.arch.is_mla and s.step_time.kv_bytes_per_token == 70_272
    cfg = load_config(["--latency-calculator", "step", OSS120, "--gpu", "H100", "--quantization", "mxfp4",
                       "--max-model-len", "32768"], env={})
    assert resolve_step_settings(cfg).step_time.quantized



# ---- the collection's configs no experiment runs: DeepSeek-V2-Lite, GLM-5.2, Qwen3-30B-A3B -------
def _config_path(name: str) -> str:
    return os.path.join(os.path.dirname(__file__), "..", "..", "bench", "sim_to_real", "model_configs", name,
                        "config.json")


def _shipped(name: str) -> ModelArch:
    with open(_config_path(name)) as fh:
        return ModelArch.from_hf_config(json.load(fh), name=name)


def test_the_collections_other_configs_read_as_their_architectures():
    lite = _shipped("deepseek-v2-lite")
    assert preset("deepseek-ai/DeepSeek-V2-Lite") == ModelArch.from_hf_config(
        json.load(open(_config_path("deepseek-v2-lite"))), name="deepseek-ai/DeepSeek-V2-Lite")
    assert lite.is_mla and not lite.is_sparse_mla and lite.q_lora_rank == 0 and lite.dense_layers == 1
    assert round(lite.n_params / 1e9, 2) == 15.71                 # DeepSeek's "15.7B"
    assert kv_bytes_per_token(lite) == 27 * 576 * 2
    glm = _shipped("glm-5.2-fp8")
    assert glm.is_sparse_mla and (glm.index_topk, glm.index_n_heads, glm.index_head_dim) == (2048, 32, 128)
    assert glm.quantization == "fp8" and round(glm.n_params / 1e9) == 743
    # the latent in BF16 and the indexer's FP8 keys with their scales; fp8: vLLM's fp8_ds_mla (656)
    assert kv_bytes_per_token(glm) == 78 * (576 * 2 + 132)
    assert kv_bytes_per_token(glm, "fp8", 8) == 78 * (656 + 132)
    moe = _shipped("qwen3-30b-a3b")
    assert moe.is_moe and not moe.is_mla and (moe.num_experts, moe.experts_per_token) == (128, 8)
    assert moe.sliding_layers == 0                                # use_sliding_window false


def test_sparse_mla_attends_topk_tokens_after_an_indexer_over_all():
    m = StepModel(gpu_by_name("H200"), _shipped("glm-5.2-fp8"), tp=8)
    assert m.topk == 2048

    def attn(context):
        return m.terms(1, context, 0, 0, 0, 0)["attn_flops"]
    # past the top-k only the indexer's scoring grows with the context
    assert attn(20_000) - attn(10_000) == pytest.approx(m._c_idx * 10_000)
    assert attn(1_000) == pytest.approx(m._c_attn_dec * 1_000 + m._c_idx * 1_000)
    assert m._c_attn_pre == m._c_attn_dec                         # the sparse kernels run absorbed
    kv = m.terms(1, 100_000, 0, 0, 0, 0)["kv_read"]
    assert kv == pytest.approx(m._c_kv * (2048 + 1) + m._c_idx_kv * 100_001)


def test_dense_mla_prefill_decompresses_its_cached_context():
    m = StepModel(gpu_by_name("H100"), _shipped("deepseek-v2-lite"))
    cold = m.terms(0, 0, 1, 1000, 500_500, 0)["attn_flops"]
    warm = m.terms(0, 0, 1, 1000, 500_500, 4000)["attn_flops"]
    assert warm - cold == pytest.approx(m._c_up * 4000) and m._c_up > 0
    assert StepModel(gpu_by_name("H100"), preset(LLAMA8))._split_attn is False


@pytest.mark.parametrize("gpu,version,block_size", [
    ("H200", "0.15.1", 64),        # FlashMLA (SM 9.0) forces multiples of 64 over 0.15's 16
    ("B200", "0.15.1", 128),       # CUTLASS MLA: 128
    ("A100-80GB", "0.15.1", 16),   # Triton MLA keeps the configured size
    ("H200", "0.34.0", 64),        # 0.34's default 64 already is one
])
def test_mla_backends_force_their_block_size(gpu, version, block_size):
    tp = "16" if gpu.startswith("A100") else "8"       # DeepSeek-R1's 671 GB of FP8 weights
    cfg = load_config(["--latency-calculator", "step", R1, "--gpu", gpu, "-tp", tp, "--vllm-version", version,
                       "--max-model-len", "8192"], env={})
    resolve_step_settings(cfg)
    assert cfg.block_size == block_size
    cfg = load_config(["--latency-calculator", "step", LLAMA8, "--gpu", gpu, "--vllm-version", version], env={})
    resolve_step_settings(cfg)
    assert cfg.block_size == (64 if version == "0.34.0" else 16)


def test_kv_cache_memory_bytes_sizes_a_hybrid_pool_alike():
    cfg = load_config(["--latency-calculator", "step", OSS120, "--gpu", "H100", "--max-model-len", "32768",
                       "--kv-cache-memory-bytes", "8G"], env={})
    s = resolve_step_settings(cfg)
    a = preset(OSS120)
    page = 64 * kv_bytes_per_token(a) // 36
    assert s.num_gpu_blocks == hybrid_kv_tokens(a, 8 * GiB, page, 64, 32768) // 64 == 3618
    assert s.num_gpu_blocks * 64 > 8 * GiB // kv_bytes_per_token(a)     # more than every layer as full


# ---- NVFP4 (ModelOpt / compressed-tensors) --------------------------------------------------------
def test_nvfp4_checkpoints_read_as_such_and_run_w4a4_on_the_b200_only():
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256}
    modelopt = ModelArch.from_hf_config({**cfg, "quantization_config": {"quant_method": "modelopt",
                                                                         "quant_algo": "NVFP4"}})
    ct = ModelArch.from_hf_config({**cfg, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}})
    fp8 = ModelArch.from_hf_config({**cfg, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}})
    assert (modelopt.quantization, ct.quantization, fp8.quantization) == ("nvfp4", "nvfp4", "fp8")
    assert linear_weight_bytes(modelopt) == 0.5 + 1 / 16
    b200 = StepModel(gpu_by_name("B200"), modelopt)
    h100 = StepModel(gpu_by_name("H100"), modelopt)
    bf16 = StepModel(gpu_by_name("B200"), preset(LLAMA8))
    assert b200.flops_per_token == pytest.approx(bf16.flops_per_token / 4)      # FP4 tensor cores
    assert h100.flops_per_token == pytest.approx(2.0 * modelopt.n_lin / gpu_by_name("H100").flops)  # Marlin
    assert (b200.fp8_layers, h100.fp8_layers) == (32, 0)          # activations quantized each step on the B200
    assert b200.bytes_fixed == pytest.approx(modelopt.n_lin * 0.5625 + modelopt.n_head * 2)


def test_moe_models_without_a_tuned_table_compile_vllms_default_tiles():
    """No tuned fused-MoE table ships for these (vLLM has none for Qwen3-30B-A3B on an H100, and
    the FP8 ones carry a dtype suffix): an eager step compiles only where vLLM's default tile or
    Triton's divisibility specialization differs from what start-up compiled."""
    m = StepModel(gpu_by_name("H100"), _shipped("qwen3-30b-a3b"))      # CUDA graphs up to 512 rows
    for version in ((0, 15, 1), (0, 34, 0)):
        m.vllm_version = version
        jit = m.moe_jit(8192)
        assert jit.tiles is None and jit.stall(600) == 0.0      # the profile run's tile and specialization
        assert jit.stall(601) == m.constants.t_jit                # 4,808 valid rows: not a multiple of 16
        assert jit.stall(603) == 0.0                              # that variant, compiled once
    glm = StepModel(gpu_by_name("H200"), _shipped("glm-5.2-fp8"), tp=8)
    assert glm.arch.weight_block == 128 and glm.moe_jit(8192).stall(1000) == 0.0   # one block-FP8 tile


def test_the_start_up_lines_say_what_architecture_is_modelled(caplog):
    """A config read as something else shows at start-up: the banner names the attention, the
    MLP and the weights, and a kv_lora_rank on a model type vLLM does not treat as MLA is logged."""
    def line(*flags):
        cfg = load_config(["--latency-calculator", "step", *flags], env={})
        return next(x for x in resolve_step_settings(cfg).summary(cfg.max_model_len) if x.startswith("architecture"))
    assert line(OSS120, "--gpu", "H100") == ("architecture: 36 layers, 64 heads, 8 KV heads of 64, 18 of 36 layers "
                                             "in a 128-token window; MoE 128 experts, top 4; weights mxfp4")
    assert line("moonshotai/Kimi-K2-Instruct", "--gpu", "H200", "-tp", "8", "--max-model-len", "8192") == (
        "architecture: 61 layers, MLA (latent 512 + rope 64, whole on every rank); MoE 384 experts, top 8 + shared, "
        "1 dense layer; weights fp8")
    assert line(LLAMA8, "--quantization", "fp8") == "architecture: 32 layers, 32 heads, 8 KV heads of 128; dense; weights fp8"
    cfg = json.load(open(_config_path("deepseek-v2-lite")))
    with caplog.at_level("WARNING", logger="vllm_sim"):
        a = ModelArch.from_hf_config({**cfg, "model_type": "deepsek_v2"}, source="cfg.json")
    assert not a.is_mla and "cfg.json: kv_lora_rank is given but model_type 'deepsek_v2' is not one vLLM treats " \
                           "as MLA: modelled as ordinary attention" in caplog.text


# ---- Qwen3 MoE and FP8 presets (a fresh user's Qwen/Qwen3-235B-A22B was read as Llama-3.1-8B) -----
def test_qwen3_moe_and_fp8_presets():
    a = preset("Qwen/Qwen3-235B-A22B")
    assert a.is_moe and (a.num_experts, a.num_layers) == (128, 94)
    assert a.n_params == 235_092_836_352            # Qwen's "235B total"
    assert preset("Qwen/Qwen3-235B-A22B-Instruct-2507").max_position_embeddings == 262144
    fp8 = preset("Qwen/Qwen3-8B-FP8")
    assert fp8.quantization == "fp8" and fp8.n_params == preset("Qwen/Qwen3-8B").n_params
    assert preset("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8").is_moe


def test_a_real_model_without_a_config_says_whose_figures_it_gets(caplog):
    import logging
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        resolve_step_settings(load_config(["--latency-calculator", "step", "--model", "acme/Unknown-70B"], env={}))
    assert "no config.json for acme/Unknown-70B here and no preset of it: its KV cache, context and step times are " \
           "meta-llama/Llama-3.1-8B-Instruct's; give --hf-config-path" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        resolve_step_settings(load_config(["--latency-calculator", "step"], env={}))     # test-model: no warning
    assert "no config.json" not in caplog.text
