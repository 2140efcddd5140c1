"""GPUs, batch defaults, model architectures and KV capacity (docs/engine-model.md §1-3; issue 20).

Unit tier: pure functions, exact values where the arithmetic is exact.
"""
from __future__ import annotations

import json
import os

import pytest

from generation.config.values import ConfigError
from generation.engine.hardware import (GPUS, GiB, ModelArch, PRESETS, batch_defaults,
                                        check_max_model_len, gpu_by_name, kv_bytes_per_token,
                                        kv_cache_blocks, kv_cache_report, preset, resolve_arch,
                                        weight_bytes)

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


# -- GPUs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,flops,bw", [("H100", 989.4e12, 3.35e12), ("H200", 989.4e12, 4.8e12),
                                           ("A100-80GB", 312e12, 2.039e12),
                                           ("A100-40GB", 312e12, 1.555e12), ("L40S", 362e12, 0.864e12)])
def test_gpu_peaks_are_the_docs_table(name, flops, bw):
    g = gpu_by_name(name)
    assert (g.name, g.flops, g.bandwidth) == (name, flops, bw)


def test_gpu_memory_is_what_torch_reports():
    assert round(GPUS["H100"].memory_gib, 2) == 79.22        # vLLM's "total_gpu_memory"
    assert round(GPUS["A100-40GB"].memory_gib, 2) == 39.39


@pytest.mark.parametrize("alias,name", [("h100", "H100"), ("H100-SXM", "H100"), ("h100_80gb", "H100"),
                                        ("A100", "A100-80GB"), ("a100-40gb", "A100-40GB"),
                                        ("l40s", "L40S"), ("h200", "H200"), ("mi300x", "MI300X"),
                                        ("B200", "B200")])
def test_gpu_names_are_case_insensitive_with_aliases(alias, name):
    assert gpu_by_name(alias).name == name


def test_unknown_gpu_names_the_flag_and_the_choices():
    with pytest.raises(ConfigError) as e:
        gpu_by_name("RTX-9090")
    assert "--gpu" in str(e.value) and "H100" in str(e.value) and "L40S" in str(e.value)
    assert e.value.param == "gpu"


@pytest.mark.parametrize("name,expected", [("H100", (8192, 1024)), ("H200", (8192, 1024)),
                                           ("MI300X", (16384, 1024)), ("B200", (16384, 1024)),
                                           ("A100-80GB", (2048, 256)), ("A100-40GB", (2048, 256)),
                                           ("L40S", (2048, 256))])
def test_batch_defaults_follow_vllm_by_gpu_class(name, expected):
    assert batch_defaults(gpu_by_name(name)) == expected


# -- architectures ------------------------------------------------------------------------------
def test_llama_8b_parameter_counts_are_the_docs():
    a = preset(LLAMA8)
    assert a.n_lin == 6_979_321_856 and round(a.n_lin / 1e9, 2) == 6.98
    assert a.n_head == 525_336_576 and round(a.n_head / 1e9, 3) == 0.525
    assert round((a.n_lin + a.n_head) * 2 / 1e9, 1) == 15.0      # W in BF16
    assert (a.num_layers, a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim) == (32, 4096, 32, 8, 128)
    assert (a.intermediate_size, a.vocab_size, a.tie_word_embeddings) == (14336, 128256, False)
    assert a.max_position_embeddings == 131072 and a.dtype == "bfloat16" and not a.is_moe


@pytest.mark.parametrize("name,billions", [
    ("meta-llama/Llama-3.1-8B-Instruct", 8.03), ("meta-llama/Llama-3.1-8B", 8.03),
    ("meta-llama/Llama-3.1-70B-Instruct", 70.55), ("meta-llama/Llama-3.1-70B", 70.55),
    ("meta-llama/Llama-3.2-1B-Instruct", 1.24), ("meta-llama/Llama-3.2-3B-Instruct", 3.21),
    ("Qwen/Qwen2.5-7B-Instruct", 7.62), ("Qwen/Qwen3-8B", 8.19), ("Qwen/Qwen3-0.6B", 0.60),
    ("mistralai/Mistral-7B-Instruct-v0.3", 7.25), ("Qwen/Qwen3-30B-A3B", 30.53),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.70)])
def test_presets_give_the_published_parameter_counts(name, billions):
    assert round(preset(name).n_params / 1e9, 2) == billions


@pytest.mark.parametrize("name,folder", [
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b-v0.1"), ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"),
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b-hf"), ("meta-llama/Llama-2-70b-hf", "llama-2-70b-hf"),
    ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b-instruct-hf")])
def test_the_sim_to_real_models_presets_are_their_config_json(name, folder):
    """The models of the fidelity data start by name, with the architecture their runs had."""
    from dataclasses import asdict
    from generation.engine.perf.model_arch import load_hf_config
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "sim_to_real", "model_configs", folder)
    a, b = asdict(preset(name)), asdict(load_hf_config(path))
    assert {k: v for k, v in a.items() if k not in ("name", "source")} == \
        {k: v for k, v in b.items() if k not in ("name", "source")}


def test_every_preset_parses():
    for name in PRESETS:
        a = preset(name)
        assert a.name == name and a.n_lin > 0 and a.num_layers > 0


def test_moe_active_and_total_parameters():
    q = preset("Qwen/Qwen3-30B-A3B")
    assert q.is_moe and (q.num_experts, q.experts_per_token, q.moe_intermediate_size) == (128, 8, 768)
    assert round(q.n_lin / 1e9, 2) == 2.73 and round(q.n_lin_total / 1e9, 2) == 29.91
    m = preset("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (8, 2, 14336)
    assert round(m.n_lin / 1e9, 2) == 12.62          # "12.9B active" counts the embeddings too


def test_from_hf_config_defaults_kv_heads_and_head_dim():
    a = ModelArch.from_hf_config({"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                                  "intermediate_size": 512, "vocab_size": 1000}, name="tiny")
    assert (a.num_kv_heads, a.head_dim, a.dtype, a.tie_word_embeddings) == (4, 64, "bfloat16", False)
    assert a.n_lin == 2 * (256 * (2 * 256 + 2 * 256) + 3 * 256 * 512)
    assert a.name == "tiny" and a.max_position_embeddings == 0


def test_from_hf_config_reads_a_multimodal_text_config():
    d = {"model_type": "llava", "torch_dtype": "float16", "vision_config": {"hidden_size": 1024},
         "text_config": {**PRESETS[LLAMA8], "torch_dtype": None}}
    a = ModelArch.from_hf_config(d)
    assert a.n_lin == preset(LLAMA8).n_lin and a.dtype == "float16"


def test_from_hf_config_qwen_moe_with_a_shared_expert():
    d = {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936,
         "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
         "shared_expert_intermediate_size": 5632}
    a = ModelArch.from_hf_config(d)                 # Qwen1.5-MoE-A2.7B
    attn = 2048 * (2 * 2048 + 2 * 2048)
    shared = 3 * 2048 * 5632 + 2048
    assert a.n_lin == 24 * (attn + 2048 * 60 + 4 * 3 * 2048 * 1408 + shared)
    assert a.n_lin_total == 24 * (attn + 2048 * 60 + 60 * 3 * 2048 * 1408 + shared)
    assert round(a.n_params / 1e9, 2) == 14.32


def test_from_hf_config_reads_the_checkpoints_quantization():
    fp8 = {**PRESETS[LLAMA8], "quantization_config": {"quant_method": "fp8"}}
    ct = {**PRESETS[LLAMA8], "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}}
    awq = {**PRESETS[LLAMA8], "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert [ModelArch.from_hf_config(d).quantization for d in (fp8, ct, awq)] == ["fp8", "fp8", "int4"]


def test_from_hf_config_errors_name_the_file_and_field():
    with pytest.raises(ConfigError, match=r"cfg\.json: missing field 'vocab_size'"):
        ModelArch.from_hf_config({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                                  "intermediate_size": 8}, source="cfg.json")
    with pytest.raises(ConfigError, match="'num_hidden_layers' must be a non-negative integer"):
        ModelArch.from_hf_config({**PRESETS[LLAMA8], "num_hidden_layers": "32"})
    with pytest.raises(ConfigError, match="'hidden_size' must be positive"):
        ModelArch.from_hf_config({**PRESETS[LLAMA8], "hidden_size": 0})
    with pytest.raises(ConfigError, match="torch_dtype"):
        ModelArch.from_hf_config({**PRESETS[LLAMA8], "torch_dtype": "int3"})
    with pytest.raises(ConfigError, match="expected a JSON object"):
        ModelArch.from_hf_config([1, 2])
    # read silently before: 0 KV heads as MHA, 5 of 32, a zero vocabulary, a MoE without experts
    # as a dense model, top-16 routing over 8 experts
    mixtral = PRESETS["mistralai/Mixtral-8x7B-Instruct-v0.1"]
    for bad, said in (({**PRESETS[LLAMA8], "num_key_value_heads": 0}, "'num_key_value_heads' must divide"),
                      ({**PRESETS[LLAMA8], "num_key_value_heads": 5}, "'num_key_value_heads' must divide"),
                      ({**PRESETS[LLAMA8], "vocab_size": 0}, "'vocab_size' must be positive"),
                      ({**mixtral, "num_local_experts": 0}, "needs at least one expert"),
                      ({**mixtral, "num_experts_per_tok": 16}, "'num_experts_per_tok' must be from 1 to the 8")):
        with pytest.raises(ConfigError, match=said):
            ModelArch.from_hf_config(bad)


# -- resolve_arch -------------------------------------------------------------------------------
def _write(dirpath, layers):
    os.makedirs(dirpath, exist_ok=True)
    with open(os.path.join(dirpath, "config.json"), "w") as fh:
        json.dump({**PRESETS[LLAMA8], "num_hidden_layers": layers}, fh)
    return str(dirpath)


def _hub(root, repo, layers, rev="0123456789abcdef0123456789abcdef01234567"):
    org, name = repo.split("/")
    base = os.path.join(root, "hub", f"models--{org}--{name}")
    _write(os.path.join(base, "snapshots", rev), layers)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", "main"), "w") as fh:
        fh.write(rev)


@pytest.fixture
def hub_home(tmp_path, monkeypatch):
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return str(home)


def test_resolve_arch_order(tmp_path, hub_home, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _hub(hub_home, LLAMA8, 3)
    explicit = _write(tmp_path / "explicit", 1)
    _write(tmp_path / LLAMA8, 2)             # a local directory named like the model
    arch, src = resolve_arch(LLAMA8, hf_config_path=explicit)
    assert arch.num_layers == 1 and src == os.path.join(explicit, "config.json")
    arch, src = resolve_arch(LLAMA8, hf_config_path=os.path.join(explicit, "config.json"))
    assert arch.num_layers == 1
    arch, src = resolve_arch(LLAMA8)
    assert arch.num_layers == 2 and src == os.path.join(LLAMA8, "config.json")
    os.remove(os.path.join(tmp_path, LLAMA8, "config.json"))
    arch, src = resolve_arch(LLAMA8)
    assert arch.num_layers == 3 and src.startswith(hub_home) and "snapshots" in src
    arch, src = resolve_arch("meta-llama/llama-3.1-8b-INSTRUCT")     # not in the cache
    assert arch.num_layers == 32 and src == f"preset {LLAMA8}"
    assert arch.name == "meta-llama/llama-3.1-8b-INSTRUCT"
    assert resolve_arch("org/unknown-model") is None and resolve_arch("no-such") is None


def test_resolve_arch_hub_cache_beats_the_preset(hub_home):
    _hub(hub_home, "Qwen/Qwen3-8B", 5)
    arch, src = resolve_arch("Qwen/Qwen3-8B")
    assert arch.num_layers == 5 and src.endswith("config.json")
    arch, src = resolve_arch("Qwen/Qwen3-8B", cache_dir=os.path.join(hub_home, "elsewhere"))
    assert arch.num_layers == 36 and src == "preset Qwen/Qwen3-8B"


def test_resolve_arch_bad_hf_config_path_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="--hf-config-path: no config.json"):
        resolve_arch(LLAMA8, hf_config_path=str(tmp_path / "none"))
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the model config"):
        resolve_arch(LLAMA8, hf_config_path=str(bad))


# -- memory -------------------------------------------------------------------------------------
def test_weight_bytes():
    a = preset(LLAMA8)
    assert weight_bytes(a) == 16_059_990_016 and round(weight_bytes(a) / GiB, 2) == 14.96
    assert weight_bytes(a, "fp8") == 6_979_321_856 + 2 * 525_336_576 * 2     # embed + head in BF16
    tied = preset("meta-llama/Llama-3.2-1B-Instruct")
    assert weight_bytes(tied) == (tied.n_lin + tied.n_embed) * 2
    fp8_ckpt = ModelArch.from_hf_config({**PRESETS[LLAMA8], "quantization_config": {"quant_method": "fp8"}})
    assert weight_bytes(fp8_ckpt) == weight_bytes(a, "fp8")
    with pytest.raises(ConfigError, match="--quantization"):
        weight_bytes(a, "bitnet")


def test_kv_bytes_per_token():
    a = preset(LLAMA8)
    assert kv_bytes_per_token(a) == 131072 == 128 * 1024
    assert kv_bytes_per_token(a, "fp8") == kv_bytes_per_token(a, "fp8_e5m2") == 65536
    assert kv_bytes_per_token(a, "auto", tp=2) == 65536
    assert kv_bytes_per_token(a, "auto", tp=16) == 2 * 32 * 1 * 128 * 2      # KV heads replicated
    with pytest.raises(ConfigError, match="--kv-cache-dtype"):
        kv_bytes_per_token(a, "int2")


def _overhead(arch, tp=1, tokens=8192, seqs=1024):
    """The fitted memory profile (generation/engine/hardware.py's constants)."""
    return (0.6687 * GiB + (0.2454 * GiB if tp > 1 else 0) + 7.322 * tokens * arch.hidden_size
            + 27.42 * seqs * arch.vocab_size / tp)


def test_kv_capacity_worked_examples():
    a = preset(LLAMA8)
    h100 = kv_cache_blocks(gpu_by_name("H100"), a)
    a100 = kv_cache_blocks(gpu_by_name("A100-40GB"), a)
    assert (h100, a100) == (26669, 8316)
    assert 415_000 <= h100 * 16 <= 440_000 and 120_000 <= a100 * 16 <= 150_000     # docs/engine-model.md §2
    avail = int(79.22 * GiB) * 0.9 - 16_059_990_016 - _overhead(a)
    assert h100 == int(avail // (16 * 131072))
    assert kv_cache_blocks(gpu_by_name("H100"), a, block_size=32) == h100 // 2
    assert kv_cache_blocks(gpu_by_name("H100"), a, kv_cache_dtype="fp8") == 2 * h100 + 1
    # a smaller batch budget leaves more: vLLM v0.15.1's logged 7,462 blocks for Llama-2-7B at
    # 2,048 tokens / 128 sequences (sim-to-real data) within 1%
    l2 = ModelArch.from_hf_config({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                                   "intermediate_size": 11008, "vocab_size": 32000, "torch_dtype": "float16"})
    blocks = kv_cache_blocks(gpu_by_name("H100"), l2, max_num_batched_tokens=2048, max_num_seqs=128)
    assert abs(blocks - 7462) / 7462 < 0.01


def test_kv_capacity_with_tensor_parallel_and_moe():
    seventy = preset("meta-llama/Llama-3.1-70B-Instruct")
    h100 = gpu_by_name("H100")
    blocks = kv_cache_blocks(h100, seventy, tp=4)
    expected = (int(79.22 * GiB) * 0.9 - weight_bytes(seventy) / 4 - _overhead(seventy, 4)) // (16 * 81920)
    assert blocks == int(expected) and kv_bytes_per_token(seventy, tp=4) == 81920
    moe = preset("Qwen/Qwen3-30B-A3B")
    assert kv_cache_blocks(h100, moe) == int(
        (int(79.22 * GiB) * 0.9 - weight_bytes(moe) - _overhead(moe)) // (16 * 98304))


def test_kv_capacity_errors():
    seventy = preset("meta-llama/Llama-3.1-70B-Instruct")
    with pytest.raises(ConfigError, match="does not fit on H100.*try --tensor-parallel-size 2"):
        kv_cache_blocks(gpu_by_name("H100"), seventy)
    # the hint is the smallest size that fits (64 heads, 8 KV heads: 3 is no size vLLM takes), not
    # twice the one given: 131 GiB of weights on a 40 GiB L40S budget want 4 GPUs from 1 or 2
    for tp in (1, 2):
        with pytest.raises(ConfigError, match="does not fit on L40S.*try --tensor-parallel-size 4$"):
            kv_cache_blocks(gpu_by_name("L40S"), seventy, tp=tp)
    assert kv_cache_blocks(gpu_by_name("L40S"), seventy, tp=4) > 0
    with pytest.raises(ConfigError, match="No available memory for the cache blocks"):
        kv_cache_blocks(gpu_by_name("A100-40GB"), preset(LLAMA8), gpu_memory_utilization=0.42)
    # absurd batch limits: the flag to lower is named, not the memory to raise (a fresh user's)
    for kw, flag in ((dict(max_num_seqs=100_000_000), "max-num-seqs"),
                     (dict(max_num_batched_tokens=10**12), "max-num-batched-tokens")):
        with pytest.raises(ConfigError, match=f"lower --{flag}$") as e:
            kv_cache_blocks(gpu_by_name("H100"), preset(LLAMA8), **kw)
        assert e.value.param == flag
    with pytest.raises(ConfigError, match=r"heads \(32\) must be divisible by tensor parallel size \(3\)"):
        kv_cache_blocks(gpu_by_name("H100"), preset(LLAMA8), tp=3)
    with pytest.raises(ConfigError, match="--gpu-memory-utilization"):
        kv_cache_blocks(gpu_by_name("H100"), preset(LLAMA8), gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="--block-size"):
        kv_cache_blocks(gpu_by_name("H100"), preset(LLAMA8), block_size=0)


def test_kv_cache_report_is_what_vllm_logs():
    assert kv_cache_report(25953, 16, 131072) == ("GPU KV cache size: 415,248 tokens",
                                                  "Maximum concurrency for 131,072 tokens per request: 3.17x")
    # 1000 tokens hold 63 blocks: 7600 / 63
    assert kv_cache_report(7600, 16, 1000)[1] == "Maximum concurrency for 1,000 tokens per request: 120.63x"


def test_a_max_model_len_sequence_must_fit():
    check_max_model_len(8192, 16, 131072, 131072)          # exactly fits
    with pytest.raises(ConfigError) as e:
        check_max_model_len(7600, 16, 131072, 131072)
    assert "max seq len (131072)" in str(e.value) and "16.00 GiB KV cache is needed" in str(e.value)
    assert "estimated maximum model length is 121600" in str(e.value) and e.value.param == "max-model-len"


def test_resolve_arch_finds_an_org_less_repo_in_the_cache(hub_home):
    base = os.path.join(hub_home, "hub", "models--gpt-tiny")
    _write(os.path.join(base, "snapshots", "abc"), 4)
    os.makedirs(os.path.join(base, "refs"))
    with open(os.path.join(base, "refs", "main"), "w") as fh:
        fh.write("abc")
    assert resolve_arch("gpt-tiny")[0].num_layers == 4
    assert resolve_arch("./not-there") is None and resolve_arch("a//b") is None
