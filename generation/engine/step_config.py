"""Step mode's settings, resolved once at start-up from the flags (``--latency-calculator step``).

What a ``vllm serve`` line decides, computed as vLLM computes it (docs/engine-model.md
sections 1-2): the GPU (``--gpu``), the model's architecture (``--hf-config-path``, the Hugging
Face cache, or a shipped preset: :func:`generation.engine.hardware.resolve_arch`), the KV cache
(``--gpu-memory-utilization``, ``--kv-cache-dtype``, ``--quantization``,
``--tensor-parallel-size``, or ``--num-gpu-blocks-override``), the scheduler's defaults by GPU
class (``--max-num-batched-tokens``, ``--max-num-seqs`` when not given) and the long-prefill
threshold.  A ``--max-model-len`` sequence that cannot fit in the cache is a start-up error, as in
vLLM.
"""
from __future__ import annotations

from dataclasses import dataclass

from generation.config.values import ConfigError

FALLBACK_ARCH = "meta-llama/Llama-3.1-8B-Instruct"     # for model names that are not real models


@dataclass
class StepSettings:
    """The resolved values: ``gpu`` / ``arch`` (hardware objects), where the architecture came
    from, ``num_gpu_blocks`` (blocks of ``block_size`` tokens), the scheduler's limits, and the
    step-time model."""
    gpu: object
    arch: object
    arch_source: str
    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    long_prefill_token_threshold: int
    step_time: object

    @property
    def kv_tokens(self) -> int:
        """``GPU KV cache size: N tokens`` (vLLM's start-up line)."""
        return self.num_gpu_blocks * self.block_size

    def max_concurrency(self, max_model_len: int) -> float:
        """``Maximum concurrency for L tokens per request: Xx``."""
        per = -(-max_model_len // self.block_size) * self.block_size
        return self.kv_tokens / per if per else 0.0

    def summary(self, max_model_len: int) -> list[str]:
        return [f"step engine: gpu={self.gpu.name} model={self.arch.name} ({self.arch_source}) "
                f"max-num-seqs={self.max_num_seqs} max-num-batched-tokens={self.max_num_batched_tokens}"
                + (f" long-prefill-token-threshold={self.long_prefill_token_threshold}"
                   if self.long_prefill_token_threshold else ""),
                f"GPU KV cache size: {self.kv_tokens:,} tokens ({self.num_gpu_blocks} blocks of {self.block_size})",
                f"Maximum concurrency for {max_model_len:,} tokens per request: {self.max_concurrency(max_model_len):.2f}x"]


def resolve_step_settings(cfg) -> StepSettings:
    """Resolve step mode for ``cfg`` (a SimConfig); also writes the scheduler defaults it decides
    back into ``cfg`` (``max_num_seqs``, ``max_num_batched_tokens``, ``kv_cache_size``) so that
    metrics and the start-up summary show them.  Raises ConfigError naming the flag at fault."""
    from .hardware import batch_defaults, gpu_by_name, kv_cache_blocks, resolve_arch
    from .perf.step_model import build_step_model

    gpu = gpu_by_name(cfg.gpu)
    found = resolve_arch(cfg.model, cfg.hf_config_path)
    if found is None and cfg.hf_config_path:
        raise ConfigError(f"no config.json at --hf-config-path {cfg.hf_config_path}", "hf-config-path")
    if found is None:
        arch, source = resolve_arch(FALLBACK_ARCH)
        source = f"{FALLBACK_ARCH} preset: {cfg.model!r} has no config.json (--hf-config-path)"
    else:
        arch, source = found
    tp = cfg.tensor_parallel_size
    if tp < 1:
        raise ConfigError("tensor parallel size cannot be less than 1", "tensor-parallel-size")
    if not 0 < cfg.gpu_memory_utilization <= 1:
        raise ConfigError("gpu memory utilization must be in (0, 1]", "gpu-memory-utilization")
    quant = (cfg.quantization or "").lower()
    bs = cfg.block_size
    default_tokens, default_seqs = batch_defaults(gpu)
    if "max-num-seqs" not in cfg.explicit:
        cfg.max_num_seqs = default_seqs
    if cfg.max_num_batched_tokens is None:
        cfg.max_num_batched_tokens = default_tokens
    if cfg.max_num_batched_tokens < 1:
        raise ConfigError("max num batched tokens cannot be less than 1", "max-num-batched-tokens")
    if cfg.num_gpu_blocks_override is not None:
        if cfg.num_gpu_blocks_override < 1:
            raise ConfigError("num gpu blocks override cannot be less than 1", "num-gpu-blocks-override")
        blocks = cfg.num_gpu_blocks_override
    else:
        blocks = kv_cache_blocks(gpu, arch, tp=tp, gpu_memory_utilization=cfg.gpu_memory_utilization,
                                 kv_cache_dtype=cfg.kv_cache_dtype, quantization=quant, block_size=bs,
                                 max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs)
    need = -(-cfg.max_model_len // bs)
    if need > blocks:
        raise ConfigError(
            f"To serve at least one request with the models's max seq len ({cfg.max_model_len}), "
            f"({need * bs} tokens of KV cache) are needed, which is larger than the available KV cache memory "
            f"({blocks * bs} tokens). Try decreasing --max-model-len or increasing --gpu-memory-utilization",
            "max-model-len")
    threshold = cfg.long_prefill_token_threshold
    if threshold < 0:
        raise ConfigError("long prefill token threshold cannot be negative", "long-prefill-token-threshold")
    if cfg.max_num_partial_prefills < 1:
        raise ConfigError("max num partial prefills cannot be less than 1", "max-num-partial-prefills")
    if threshold == 0 and cfg.max_num_partial_prefills > 1:
        threshold = int(cfg.max_model_len * 0.04)
    if cfg.kv_transfer_bandwidth <= 0:
        raise ConfigError("kv transfer bandwidth must be positive", "kv-transfer-bandwidth")
    sizes = getattr(cfg, "cuda_graph_sizes", None)
    step_time = build_step_model(gpu, arch, tp=tp, quantization=quant, kv_cache_dtype=cfg.kv_cache_dtype,
                                 profile_path=cfg.step_time_profile,
                                 enforce_eager=bool(getattr(cfg, "enforce_eager", False)),
                                 cudagraph_capture_sizes=sorted(sizes) if sizes else None,
                                 max_cudagraph_capture_size=getattr(cfg, "max_cudagraph_capture_size", None) or 512,
                                 async_scheduling=getattr(cfg, "async_scheduling", None) is not False)
    cfg.kv_cache_size = blocks
    return StepSettings(gpu, arch, source, blocks, bs, cfg.max_num_seqs, cfg.max_num_batched_tokens, threshold,
                        step_time)
