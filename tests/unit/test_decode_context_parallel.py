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
    assert kv_bytes_per_token(llama, "auto", 8) == 80 * 2 * 1 * 128 * 2                     # 8 KV heads: one a GPU
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


def test_gqa_heads_that_tp_replicates_are_split_instead_and_decodes_pay_the_gathers():
    """Qwen3-235B-A22B's 4 KV heads at TP 8 are each held by two GPUs; DCP 2 splits their
    tokens instead: twice the tokens, and per layer two collectives of a decode token's heads."""
    qwen = "Qwen/Qwen3-235B-A22B"
    tp8, dcp2 = (settings(qwen, "--gpu", "H200", "-tp", "8", *f) for f in ((), ("-dcp", "2")))
    assert (dcp2.kv_tokens, dcp2.block_size) == (2 * tp8.kv_tokens, 128)
    decode = (64, 64 * 8000, 0, 0, 0.0, 0)
    arch = preset(qwen)
    ops, per_token = dcp_gather_per_token(arch, 8, 2, tp8.gpu.nvlink_bandwidth)
    assert (ops, per_token) == (2 * 94, pytest.approx(94 * 64 / 8 * (128 + 128) * 2 / tp8.gpu.nvlink_bandwidth / 188))
    # its decode reads half the KV, and adds the collectives' latency and bytes
    c = tp8.step_time.constants
    gathers = ops * c.t_ar + ops * per_token / c.eta_ar * 64
    assert dcp2.step_time.step_time(*decode) < tp8.step_time.step_time(*decode) + gathers


def test_dcp_must_divide_tp_as_vllm_checks_it():
    with pytest.raises(ConfigError, match=r"^tp_size=8 must be divisible by dcp_size=3\.$") as e:
        settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", "-dcp", "3")
    assert e.value.param == "decode-context-parallel-size"
    # GQA (vLLM's ModelConfig): only KV heads that TP replicates may be split
    with pytest.raises(ConfigError, match=r"^Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` "
                                          r"\(8\) to be greater than the model's total number of KV heads \(8\)\."):
        settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", "-dcp", "8")
    with pytest.raises(ConfigError, match=r"^`--decode-context-parallel-size` \(4\) exceeds the maximum supported "
                                          r"value \(2\) for `--tensor-parallel-size` \(8\) and 4 model KV heads\.$"):
        settings("Qwen/Qwen3-235B-A22B", "--gpu", "H200", "-tp", "8", "-dcp", "4")
    with pytest.raises(ConfigError, match="cannot be less than 1"):
        settings(LLAMA_70B, "--gpu", "H100", "-tp", "8", "--decode-context-parallel-size", "0")
    assert settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100").block_size == 64


def test_the_rank_keeps_its_block_size_and_a_second_resolution_changes_nothing():
    """The flag's ``--block-size`` stays the rank's page (vLLM's ``cache_config.block_size``,
    what ``/admin/config`` validates); the spanned block is the scheduler's and the caches'
    (``kv_block_span``).  The server resolves the settings again once a config.json sets
    ``max_model_len``: the span must not grow twice."""
    cfg = load_step_config(["--model", "Qwen/Qwen3-235B-A22B", "--gpu", "H200", "-tp", "8", "-dcp", "2",
                            "--block-size", "16", "--max-model-len", "8192"])
    first = resolve_step_settings(cfg)
    again = resolve_step_settings(cfg)
    assert (first.block_size, again.block_size, cfg.block_size, cfg.kv_block_span) == (32, 32, 16, 32)
    assert first.num_gpu_blocks == again.num_gpu_blocks
    assert cfg.updated({"time-to-first-token": "5ms"}).time_to_first_token == 0.005    # still a valid block size


def test_a_drafter_splits_its_kv_as_the_target_does():
    """vLLM's drafter takes the target's DCP: an MTP head's latent is split 8 ways too, so it
    costs the same share of the cache with DCP as without."""
    mtp = ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    share = []
    for dcp in ((), ("-dcp", "8")):
        plain, drafted = (settings(R1, "--gpu", "H200", "-tp", "8", *dcp, *m) for m in ((), mtp))
        share.append(1 - drafted.num_gpu_blocks / plain.num_gpu_blocks)
        assert drafted.draft_cost.model.dcp == (8 if dcp else 1)
    assert share[0] == pytest.approx(share[1], abs=0.002) and 0.01 < share[0] < 0.03


def test_cache_config_info_counts_every_dcp_ranks_tokens():
    """``vllm:cache_config_info``: ``block_size`` the rank's page, ``kv_cache_size_tokens`` and
    ``kv_cache_max_concurrency`` the spanned blocks', as the start-up line counts them; the
    architecture line says the latent is split."""
    from generation.metrics.cache_config_info import cache_config_metrics_info
    cfg = load_step_config(["--model", R1, "--gpu", "H200", "-tp", "8", "-dcp", "8", "--max-model-len", "32768"])
    st = resolve_step_settings(cfg)
    info = cache_config_metrics_info(cfg)
    assert (info["block_size"], info["num_gpu_blocks"], info["kv_cache_size_tokens"]) == ("64", "14080", "7208960")
    assert info["kv_cache_max_concurrency"] == "220.0" and st.kv_tokens == 7_208_960
    assert "MLA (latent 512 + rope 64, split over 8 DCP ranks)" in st.summary(32768)[3]
