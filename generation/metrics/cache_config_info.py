"""The labels of ``vllm:cache_config_info``: vLLM 0.34's CacheConfig as its ``metrics_info()``
renders it (:func:`cache_config_metrics_info`), with this server's values."""
from __future__ import annotations


def cache_config_metrics_info(cfg) -> dict:
    """vLLM 0.34's ``CacheConfig.metrics_info()`` (``vllm/config/cache.py``: ``{key: str(value)
    for key, value in self.__dict__.items()}``, the private ``_..._resolved`` guards included)
    as the API server's copy holds it after start-up on a CUDA GPU with a dense model, in
    vLLM's field order, with this server's values: ``block_size`` (tokens; the one KV events,
    prefix-cache hits and step mode use), ``num_gpu_blocks`` (blocks), ``kv_cache_size_tokens``
    (their tokens) and ``kv_cache_max_concurrency`` (that over ``--max-model-len``),
    ``effective_attention_block_size`` (the block size: one full-attention group), and the
    flags behind ``cache_dtype``, ``num_gpu_blocks_override``, ``enable_prefix_caching``,
    ``prefix_caching_hash_algo``, ``kv_cache_memory_bytes`` (bytes), ``kv_offloading_size``
    (GiB).  ``gpu_memory_utilization`` is ``"None"`` unless given from 0.34 on, where vLLM leaves
    it unset and sizes with 1.0 (``resolved_gpu_memory_utilization``); before 0.34 it is the
    release's default.  ``enable_extensible_kv_cache`` is vLLM's resolution
    (``VllmConfig._resolve_extensible_kv_cache``): on from 0.34 unless
    ``--kv-cache-memory-bytes`` or ``--num-gpu-blocks-override`` sizes the cache.  Fields the
    worker sets (``kv_cache_layout``, ``hash_block_size``, ``cache_hit_alignment_tokens``) and
    ``num_cpu_blocks`` stay ``"None"`` there, as here.  Booleans render ``True``/``False`` and
    None ``None`` (Python's ``str``)."""
    from generation.config.vllm_versions import given, parse_version
    bs = cfg.block_size
    tokens = cfg.kv_cache_size * getattr(cfg, "kv_block_span", bs)     # DCP: a block spans the DCP ranks' pages
    new = parse_version(cfg.vllm_version) >= (0, 34, 0)
    gmu = cfg.gpu_memory_utilization if given(cfg, "gpu-memory-utilization") or not new else None
    sized = cfg.kv_cache_memory_bytes is not None or cfg.num_gpu_blocks_override is not None
    fields = {
        "block_size": bs, "user_specified_block_size": given(cfg, "block-size"), "kv_cache_layout": None,
        "prefix_match_unit": None, "gpu_memory_utilization": gmu, "cache_dtype": cfg.kv_cache_dtype,
        "is_attention_free": False, "num_gpu_blocks_override": cfg.num_gpu_blocks_override, "sliding_window": None,
        "enable_prefix_caching": cfg.enable_prefix_caching, "prefix_caching_hash_algo": cfg.prefix_caching_hash_algo,
        "prefix_cache_retention_interval": 0, "kv_cache_dtype_skip_layers": [], "mamba_page_size_padded": None,
        "skip_page_size_padded": None, "mamba_block_size": None, "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto", "mamba_cache_mode": "none", "enable_mamba_shared_prefix_checkpoint": False,
        "replayssm_buffer_len": 16, "use_replayssm": False, "use_kda_recoverssm": False,
        "num_gpu_blocks": cfg.kv_cache_size, "num_cpu_blocks": None, "simple_cpu_offload_num_blocks": None,
        "effective_attention_block_size": bs, "kv_cache_size_tokens": tokens,
        "kv_cache_max_concurrency": tokens / cfg.max_model_len, "hash_block_size": None,
        "cache_hit_alignment_tokens": None, "kv_sharing_fast_prefill": False, "swa_bounded_replay": True,
        "kv_cache_memory_bytes": cfg.kv_cache_memory_bytes, "enable_extensible_kv_cache": new and not sized,
        "kv_offloading_size": cfg.kv_offloading_size, "kv_offloading_backend": "native",
        "_block_size_resolved": True, "_extensible_kv_cache_resolved": True,
    }
    return {k: str(v) for k, v in fields.items()}
