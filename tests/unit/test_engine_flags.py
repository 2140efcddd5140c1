"""vLLM's engine flags in step mode (issue 28): ``--vllm-version`` defaults, the KV cache sized in
bytes, chunked prefill off, the CPU KV tier's size, and the flags stored for the timing model
(``--enforce-eager``, CUDA-graph sizes, ``--async-scheduling``), with vLLM's names and messages.

Unit tier: the configuration and :func:`generation.engine.step_config.resolve_step_settings`,
exact values (Llama-3.1-8B in BF16 on an H100: 128 KiB of KV per token).
"""
from __future__ import annotations

import pytest

from generation.config.cli import load_config
from generation.config.options import human_readable_int
from generation.config.values import ConfigError
from generation.config.vllm_versions import NEWEST, parse_version, version_defaults
from generation.engine.step_config import resolve_step_settings

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


def step(*flags):
    """``(cfg, settings)`` for a step-mode command line on Llama-3.1-8B / H100."""
    cfg = load_config(["--latency-calculator", "step", LLAMA8, *flags], env={})
    return cfg, resolve_step_settings(cfg)


def error_of(*flags) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        step(*flags)
    return e.value


# ---- --vllm-version ---------------------------------------------------------------------------
@pytest.mark.parametrize("version,block_size,util,blocks", [
    ("0.15.1", 16, 0.9, 26669),       # the sim-to-real runs' release: 426,704 tokens
    ("0.20.2", 16, 0.9, 26669),
    ("0.21.0", 16, 0.92, 27481),      # CUDA-graph memory profiling on, utilization 0.92
    ("0.33.0", 16, 0.92, 27481),
    ("0.34.0", 64, 1.0, 7681),        # 64-token blocks, the whole GPU: 491,584 tokens
])
def test_each_release_gives_its_block_size_and_memory_utilization(version, block_size, util, blocks):
    cfg, st = step("--vllm-version", version)
    assert (cfg.block_size, cfg.gpu_memory_utilization, st.block_size, st.num_gpu_blocks) == \
        (block_size, util, block_size, blocks)
    assert cfg.kv_cache_size == blocks            # vllm:cache_config_info's num_gpu_blocks
    assert st.vllm_version == cfg.vllm_version == version


def test_the_default_is_the_newest_release():
    cfg, st = step()
    assert NEWEST == "0.34.0" and cfg.vllm_version == NEWEST and cfg.vllm_release == (0, 34, 0)
    assert (cfg.block_size, cfg.gpu_memory_utilization, st.num_gpu_blocks) == (64, 1.0, 7681)
    assert st.summary(cfg.max_model_len)[1] == "GPU KV cache size: 491,584 tokens (7681 blocks of 64)"


def test_flags_the_user_gives_beat_the_release_defaults():
    cfg, st = step("--block-size", "16")                       # 0.34's utilization, 16-token blocks
    assert (cfg.block_size, cfg.gpu_memory_utilization, st.num_gpu_blocks) == (16, 1.0, 30725)
    cfg, st = step("--gpu-memory-utilization", "0.9")          # 0.34's 64-token blocks
    assert (cfg.block_size, cfg.gpu_memory_utilization, st.num_gpu_blocks) == (64, 0.9, 6667)
    cfg, st = step("--vllm-version", "0.15.1", "--block-size", "32", "--gpu-memory-utilization", "0.5")
    assert (cfg.block_size, cfg.gpu_memory_utilization) == (32, 0.5)


def test_release_defaults_apply_in_step_mode_only():
    cfg = load_config([LLAMA8], env={})                        # the reference's timing: its 16-token blocks
    assert (cfg.block_size, cfg.gpu_memory_utilization, cfg.vllm_version) == (16, 0.9, "0.34.0")


@pytest.mark.parametrize("text,parsed", [("0.15.1", (0, 15, 1)), ("0.33", (0, 33, 0)), ("v0.34.0", (0, 34, 0)),
                                         ("0.34.0rc1", (0, 34, 0)), ("0.15.1+cu128", (0, 15, 1))])
def test_version_spellings(text, parsed):
    assert parse_version(text) == parsed


@pytest.mark.parametrize("text,message", [
    ("latest", "invalid vllm-version 'latest': expected a release such as 0.15.1 or 0.34.0"),
    ("0.35.0", "vllm-version 0.35.0 is newer than the newest release whose defaults the simulator knows (0.34.0); "
               "give 0.34.0 or an older one")])
def test_unknown_versions_are_refused_naming_the_flag(text, message):
    with pytest.raises(ConfigError) as e:
        load_config(["--vllm-version", text], env={})
    assert (str(e.value), e.value.param) == (message, "vllm-version")


def test_version_defaults_table():
    assert [(d.block_size, d.gpu_memory_utilization) for d in map(version_defaults, ("0.9.2", "0.20.9", "0.21.0",
                                                                                     "0.33.9", "0.34.0"))] == \
        [(16, 0.9), (16, 0.9), (16, 0.92), (16, 0.92), (64, 1.0)]


# ---- --kv-cache-memory-bytes ------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [("8G", 8 << 30), ("500M", 500 << 20), ("2k", 2000), ("25.6k", 25600),
                                        ("4096", 4096), (1024, 1024)])
def test_human_readable_sizes_as_vllm_reads_them(text, value):
    assert human_readable_int(text) == value


def test_kv_cache_memory_bytes_sets_the_capacity_ignoring_the_memory_utilization():
    cfg, st = step("--kv-cache-memory-bytes", "8G")                  # 8 GiB / (64 x 128 KiB)
    assert (st.num_gpu_blocks, st.kv_tokens, cfg.kv_cache_size) == (1024, 65536, 1024)
    _, st = step("--kv-cache-memory-bytes", "8G", "--block-size", "16", "--gpu-memory-utilization", "0.1")
    assert st.num_gpu_blocks == 4096
    _, st = step("--kv-cache-memory-bytes", "8G", "--kv-cache-dtype", "fp8")     # half the bytes per token
    assert st.num_gpu_blocks == 2048
    _, st = step("--kv-cache-memory-bytes", "8G", "--num-gpu-blocks-override", "100")
    assert st.num_gpu_blocks == 100                                             # the override wins


def test_kv_cache_memory_bytes_errors_name_the_flag():
    e = error_of("--kv-cache-memory-bytes", "1k")
    assert e.param == "kv-cache-memory-bytes" and "less than one block of 64 tokens (8388608 bytes)" in str(e)
    e = error_of("--kv-cache-memory-bytes", "0")
    assert (str(e), e.param) == ("kv-cache-memory-bytes must be positive, got 0", "kv-cache-memory-bytes")
    e = error_of("--kv-cache-memory-bytes", "1.5G")
    assert e.param == "kv-cache-memory-bytes" and "decimals are not allowed with binary suffixes" in str(e)
    e = error_of("--kv-cache-memory-bytes", "64M", "--max-model-len", "4096")    # 8 blocks of 64 < 4,096 tokens
    assert e.param == "max-model-len"


# ---- --no-enable-chunked-prefill ----------------------------------------------------------------
def test_without_chunked_prefill_the_step_budget_defaults_to_at_least_the_context():
    cfg, st = step("--no-enable-chunked-prefill", "--max-model-len", "32768")
    assert (cfg.max_num_batched_tokens, st.enable_chunked_prefill) == (32768, False)
    cfg, st = step("--no-enable-chunked-prefill", "--max-model-len", "4096")
    assert cfg.max_num_batched_tokens == 8192                          # H100's default is larger
    cfg, st = step("--max-model-len", "32768")
    assert (cfg.max_num_batched_tokens, st.enable_chunked_prefill) == (8192, True)
    assert st.summary(32768)[-1] == "vLLM 0.34.0 defaults"
    _, st = step("--no-enable-chunked-prefill", "--no-enable-prefix-caching")
    assert st.summary(1024)[-1] == "vLLM 0.34.0 defaults, prefix caching off, chunked prefill off"


def test_without_chunked_prefill_a_budget_below_the_context_is_refused_as_vllm_does():
    e = error_of("--no-enable-chunked-prefill", "--max-model-len", "4096", "--max-num-batched-tokens", "2048")
    assert e.param == "max-num-batched-tokens"
    assert str(e) == ("max_num_batched_tokens (2048) is smaller than max_model_len (4096). This effectively limits "
                      "the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. "
                      "Please increase max_num_batched_tokens or decrease max_model_len.")
    e = error_of("--no-enable-chunked-prefill", "--max-num-partial-prefills", "2")
    assert (str(e), e.param) == ("Chunked prefill must be enabled to set max_num_partial_prefills > 1.",
                                 "max-num-partial-prefills")


def test_prefix_caching_switch_reaches_the_settings():
    assert step()[1].enable_prefix_caching is True
    assert step("--no-enable-prefix-caching")[1].enable_prefix_caching is False
    assert step("--enable-prefix-caching=false")[1].enable_prefix_caching is False


# ---- the CPU KV tier ----------------------------------------------------------------------------
def test_cpu_tier_size_from_kv_offloading_size_over_all_ranks():
    cfg, st = step("--vllm-version", "0.15.1", "--kv-offloading-size", "8")      # 8 GiB / (16 x 128 KiB)
    assert (st.num_cpu_blocks, cfg.kv_offloading_size) == (4096, 8.0)
    assert "CPU KV cache (offloading): 65,536 tokens (4096 blocks)" in st.summary(cfg.max_model_len)
    _, st = step("--vllm-version", "0.15.1", "--kv-offloading-size", "8", "-tp", "2")   # the total, both ranks
    assert st.num_cpu_blocks == 4096
    _, st = step("--kv-offloading-size", "8")                                   # 64-token blocks
    assert st.num_cpu_blocks == 1024


def test_cpu_offload_gb_is_per_gpu_and_kv_offloading_size_wins():
    _, st = step("--vllm-version", "0.15.1", "--cpu-offload-gb", "8", "-tp", "2")
    assert st.num_cpu_blocks == 8192
    _, st = step("--vllm-version", "0.15.1", "--cpu-offload-gb", "8", "--kv-offloading-size", "2")
    assert st.num_cpu_blocks == 1024
    _, st = step()
    assert st.num_cpu_blocks == 0
    assert not any("CPU KV cache" in line for line in st.summary(1024))


@pytest.mark.parametrize("flags,param,message", [
    (("--kv-offloading-size", "0"), "kv-offloading-size", "kv-offloading-size must be positive (GiB), got 0"),
    (("--cpu-offload-gb", "-1"), "cpu-offload-gb", "cpu-offload-gb cannot be negative, got -1"),
    (("--cuda-graph-sizes", "0", "8"), "cuda-graph-sizes", "cuda-graph-sizes must be positive batch sizes, got 0"),
    (("--max-cudagraph-capture-size", "-1"), "max-cudagraph-capture-size",
     "max-cudagraph-capture-size cannot be negative, got -1"),
    (("--cuda-graph-sizes", "1", "2", "4", "--max-cudagraph-capture-size", "8"), "max-cudagraph-capture-size",
     "customized max_cudagraph_capture_size(=8) should be consistent with the max value of "
     "cudagraph_capture_sizes(=4)"),
    (("--cuda-graph-sizes", "1", "x"), "cuda-graph-sizes", None),
    (("--async-scheduling=maybe",), "async-scheduling", None),
])
def test_engine_flag_errors_name_the_flag(flags, param, message):
    with pytest.raises(ConfigError) as e:
        load_config(list(flags), env={})
    assert e.value.param == param
    if message is not None:
        assert str(e.value) == message


# ---- stored for the timing model ------------------------------------------------------------------
def test_timing_flags_are_stored_on_the_config():
    cfg = load_config(["--enforce-eager", "--cuda-graph-sizes", "1", "2", "4", "8", "--max-cudagraph-capture-size",
                       "8", "--async-scheduling"], env={})
    assert (cfg.enforce_eager, cfg.cuda_graph_sizes, cfg.max_cudagraph_capture_size, cfg.async_scheduling) == \
        (True, [1, 2, 4, 8], 8, True)
    cfg = load_config(["--cuda-graph-sizes", "1,2,4", "--no-async-scheduling"], env={})
    assert (cfg.cuda_graph_sizes, cfg.async_scheduling) == ([1, 2, 4], False)
    cfg = load_config([], env={})
    assert (cfg.enforce_eager, cfg.cuda_graph_sizes, cfg.max_cudagraph_capture_size, cfg.async_scheduling,
            cfg.enable_prefix_caching, cfg.enable_chunked_prefill, cfg.kv_offloading_size, cfg.cpu_offload_gb,
            cfg.kv_cache_memory_bytes) == (False, [], None, None, True, True, None, 0.0, None)
    assert cfg.ignored_flags == []


def test_yaml_spellings(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("vllm-version: 0.15.1\ncuda-graph-sizes: [1, 2, 4]\nkv-cache-memory-bytes: 4G\n"
                 "enable-prefix-caching: false\nkv-offloading-size: 8\n")
    cfg = load_config(["--config", str(y)], env={})
    assert (cfg.vllm_version, cfg.cuda_graph_sizes, cfg.kv_cache_memory_bytes, cfg.enable_prefix_caching,
            cfg.kv_offloading_size) == ("0.15.1", [1, 2, 4], 4 << 30, False, 8.0)
