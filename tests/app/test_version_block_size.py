"""The KV block size follows ``--vllm-version`` outside step mode too (issue 30), and
``vllm:cache_config_info`` carries vLLM 0.34's whole CacheConfig label set.

The rule (generation.config.vllm_versions.apply_version_defaults): without ``--block-size``,
step mode takes the release's block size (64 from 0.34) always; the default mode takes it when
``--vllm-version`` is given, and keeps the reference's 16 otherwise (the reference's KV-event
consumers and test cases expect 16).  An explicit ``--block-size`` always wins.  KV events,
prefix-cache hits (whole blocks, at most ``num_tokens - 1``) and ``cache_config_info`` all read
the same value."""
from __future__ import annotations

import pytest

from generation.config.cli import load_config
from support import metric, scrape
from support.kv_events import POD_IP, Listener, kind

KV_ENV = {"POD_IP": "10.0.0.1"}


def cfg(*flags):
    return load_config(["--model", "m", *flags], env={})


@pytest.mark.parametrize("flags,block_size,util", [
    ((), 16, 0.9),                                                         # the reference's defaults
    (("--vllm-version", "0.34.0"), 64, 1.0),
    (("--vllm-version", "0.33.0"), 16, 0.92),
    (("--vllm-version", "0.15.1"), 16, 0.9),
    (("--vllm-version", "0.34", "--block-size", "32"), 32, 1.0),            # the flag wins
    (("--vllm-version", "0.34", "--gpu-memory-utilization", "0.5"), 64, 0.5),
    (("--latency-calculator", "step"), 64, 1.0),                           # step mode: the default release's
    (("--latency-calculator", "step", "--vllm-version", "0.33"), 16, 0.92),
])
def test_default_block_size_follows_the_release(flags, block_size, util):
    c = cfg(*flags)
    assert (c.block_size, c.gpu_memory_utilization) == (block_size, util)


def complete(c, n_tokens: int):
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(1000, 1000 + n_tokens)),
                                        "max_tokens": 1})
    assert r.status_code == 200
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_prefix_hits_and_cache_config_info_use_the_release_block_size(app_client):
    c = app_client("--vllm-version", "0.34.0", "--enable-kvcache", "--zmq-endpoint", "", env=KV_ENV)
    assert complete(c, 200) == 0
    assert complete(c, 200) == 192         # 3 whole 64-token blocks of 200
    assert complete(c, 128) == 64          # an exact block-aligned repeat: at most 127 tokens, 1 block
    m = scrape(c)
    assert metric(m, "vllm:cache_config_info", block_size="64", user_specified_block_size="False",
                  effective_attention_block_size="64", num_gpu_blocks="1024", kv_cache_size_tokens="65536",
                  gpu_memory_utilization="None", enable_extensible_kv_cache="True") == 1
    c = app_client("--vllm-version", "0.34.0", "--block-size", "16", "--enable-kvcache", "--zmq-endpoint", "",
                   env=KV_ENV)
    complete(c, 200)
    assert complete(c, 200) == 192         # 12 whole 16-token blocks
    assert complete(c, 128) == 112         # 7 blocks: at most 127 tokens
    assert metric(scrape(c), "vllm:cache_config_info", block_size="16", user_specified_block_size="True") == 1


def test_without_a_release_the_reference_block_size_stays(app_client):
    c = app_client("--enable-kvcache", "--zmq-endpoint", "", env=KV_ENV)
    complete(c, 200)
    assert complete(c, 200) == 192         # 12 whole 16-token blocks
    assert metric(scrape(c), "vllm:cache_config_info", block_size="16", user_specified_block_size="False") == 1


def test_kv_events_carry_the_release_block_size(app_client):
    listener = Listener()
    c = app_client("--vllm-version", "0.34.0", "--enable-kvcache", "--zmq-endpoint", listener.endpoint,
                   "--use-vllm-map-event-format", "--max-num-seqs", "9", env={"POD_IP": POD_IP})
    try:
        listener.publisher = c.sim.kv_cache.publisher
        listener.prime()
        complete(c, 130)
        stored = [e for e in listener.events_until(lambda e: kind(e) == "BlockStored") if kind(e) == "BlockStored"]
        assert [(len(e["block_hashes"]), len(e["token_ids"]), e["block_size"]) for e in stored] == [(2, 128, 64)]
    finally:
        c.sim.kv_cache.publisher.close()
        listener.close()


def test_cache_config_info_has_vllm_034s_label_set(app_client):
    c = app_client()
    (labels,) = [dict(k[1]) for k in scrape(c) if k[0] == "vllm:cache_config_info"]
    assert labels == {
        "block_size": "16", "user_specified_block_size": "False", "kv_cache_layout": "None",
        "prefix_match_unit": "None", "gpu_memory_utilization": "None", "cache_dtype": "auto",
        "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
        "enable_prefix_caching": "True", "prefix_caching_hash_algo": "fnv64a_cbor",
        "prefix_cache_retention_interval": "0", "kv_cache_dtype_skip_layers": "[]",
        "mamba_page_size_padded": "None", "skip_page_size_padded": "None", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto", "mamba_cache_mode": "none",
        "enable_mamba_shared_prefix_checkpoint": "False", "replayssm_buffer_len": "16", "use_replayssm": "False",
        "use_kda_recoverssm": "False", "num_gpu_blocks": "1024", "num_cpu_blocks": "None",
        "simple_cpu_offload_num_blocks": "None", "effective_attention_block_size": "16",
        "kv_cache_size_tokens": "16384", "kv_cache_max_concurrency": "16.0", "hash_block_size": "None",
        "cache_hit_alignment_tokens": "None", "kv_sharing_fast_prefill": "False", "swa_bounded_replay": "True",
        "kv_cache_memory_bytes": "None", "enable_extensible_kv_cache": "True", "kv_offloading_size": "None",
        "kv_offloading_backend": "native", "_block_size_resolved": "True", "_extensible_kv_cache_resolved": "True",
        "engine": "0"}
    assert len(labels) == 40


def test_cache_config_info_values_follow_the_flags(app_client):
    c = app_client("--vllm-version", "0.33.0", "--gpu-memory-utilization", "0.8", "--kv-cache-dtype", "fp8",
                   "--num-gpu-blocks-override", "100", "--prefix-caching-hash-algo", "sha256_cbor",
                   "--no-enable-prefix-caching", "--kv-offloading-size", "8", "--kv-cache-memory-bytes", "4G")
    (labels,) = [dict(k[1]) for k in scrape(c) if k[0] == "vllm:cache_config_info"]
    assert {k: labels[k] for k in ("block_size", "gpu_memory_utilization", "cache_dtype", "num_gpu_blocks_override",
                                   "prefix_caching_hash_algo", "enable_prefix_caching", "kv_offloading_size",
                                   "kv_cache_memory_bytes", "enable_extensible_kv_cache")} == {
        "block_size": "16", "gpu_memory_utilization": "0.8", "cache_dtype": "fp8", "num_gpu_blocks_override": "100",
        "prefix_caching_hash_algo": "sha256_cbor", "enable_prefix_caching": "False", "kv_offloading_size": "8.0",
        "kv_cache_memory_bytes": "4294967296", "enable_extensible_kv_cache": "False"}
    c = app_client("--vllm-version", "0.33.0")          # before 0.34: the release's utilization, no extensible cache
    assert metric(scrape(c), "vllm:cache_config_info", gpu_memory_utilization="0.92",
                  enable_extensible_kv_cache="False") == 1
