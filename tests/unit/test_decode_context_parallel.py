"""``--decode-context-parallel-size`` (``-dcp``) in step mode, vLLM 0.34's DCP: of the TP ranks,
``dcp`` split each sequence's KV cache token by token.  An MLA latent, held whole on every TP
rank without it, is split ``dcp`` ways (DeepSeek at TP 8 holds 8x the tokens); GQA heads
replicated over TP ranks stop being replicated; a block spans ``--block-size x dcp`` tokens;
decode attention reads a ``1 / dcp`` share and pays the query gathers and output combines."""
from __future__ import annotations

import pytest

from generation.config.values import ConfigError
from generation.engine.perf.hardware import dcp_gather_per_token, kv_bytes_per_token
from generation.engine.perf.model_arch import preset
from generation.engine.step_config import load_step_config, resolve_step_settings

R1 = "deepseek-ai/DeepSeek-R1"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


def test_kv_bytes_a_gpu_holds_per_token():
    r1, llama, qwen = preset(R1), preset(LLAMA_70B), preset("Qwen/Qwen3-235B-A22B")
    assert kv_bytes_per_token(r1, "auto", 8) == 61 * 576 * 2 == 70_272        # the latent, whole on each rank
    assert kv_bytes_per_token(r1, "auto", 8, 8) == 70_272 // 8
    assert kv_bytes_per_token(llama, "auto", 8, 8) == kv_bytes_per_token(llama, "auto", 8)    # 8 KV heads: none replicated
    # Qwen3-235B's 4 KV heads at TP 8 are each held twice; DCP 2 splits the tokens instead
    assert kv_bytes_per_token(qwen, "auto", 8, 2) == kv_bytes_per_token(qwen, "auto", 8) // 2


def test_deepseek_at_tp8_dcp8_holds_eight_times_the_tokens_in_blocks_of_512():
    tp8, dcp8 = settings(R1, "--gpu", "H200", "-tp", "8"), settings(R1, "--gpu", "H200", "-tp", "8", "-dcp", "8")
    assert (tp8.num_gpu_blocks, tp8.block_size, tp8.kv_tokens) == (14080, 64, 901_120)
    assert (dcp8.num_gpu_blocks, dcp8.block_size, dcp8.kv_tokens) == (14080, 512, 7_208_960)
    decode_64k = (64, 64 * 64_000, 0, 0, 0.0, 0)
    prefill = (0, 0, 1, 4096, 4096 * 2048.0, 0)
    # a long-context decode reads an eighth of its latents; a prefill runs as TP's (writing an
    # eighth of its latents)
    assert dcp8.step_time.step_time(*decode_64k) < 0.6 * tp8.step_time.step_time(*decode_64k)
    assert dcp8.step_time.step_time(*prefill) == pytest.approx(tp8.step_time.step_time(*prefill), rel=1e-6)


def test_gqa_without_replicated_heads_gains_no_capacity_and_pays_the_gathers():
    tp8, dcp8 = (settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", *f) for f in ((), ("-dcp", "8")))
    assert tp8.kv_tokens == pytest.approx(dcp8.kv_tokens, rel=1e-3)
    decode = (64, 64 * 8000, 0, 0, 0.0, 0)
    ops, per_token = dcp_gather_per_token(preset(LLAMA_70B), 8, 8, tp8.gpu.nvlink_bandwidth)
    assert (ops, per_token) == (160, pytest.approx(64 / 8 * 128 * 2 * 7 / tp8.gpu.nvlink_bandwidth))
    c = tp8.step_time.constants
    assert dcp8.step_time.step_time(*decode) == pytest.approx(
        tp8.step_time.step_time(*decode) + ops * c.t_ar + ops * per_token / c.eta_ar * 64)


def test_dcp_must_divide_tp_as_vllm_checks_it():
    with pytest.raises(ConfigError, match=r"^tp_size=8 must be divisible by dcp_size=3\.$") as e:
        settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", "-dcp", "3")
    assert e.value.param == "decode-context-parallel-size"
    with pytest.raises(ConfigError, match="cannot be less than 1"):
        settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", "--decode-context-parallel-size", "0")
    assert settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100").block_size == 64
