"""vLLM's own MFU formulas (``vllm/v1/metrics/perf.py`` of an unpacked sdist: ``VLLM_SRC``, default
``/tmp/vsrc/vllm-0.34.0``), loaded with stand-ins for torch and the ``vllm`` modules it imports
(it needs only pydantic and prometheus_client for real), and evaluated on a stand-in
``VllmConfig`` built from a config.json dict: the reference for
:mod:`generation.engine.perf.mfu` (tests/unit/test_mfu.py skips without the sdist)."""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import types
from types import SimpleNamespace as NS

VLLM_SRC = os.environ.get("VLLM_SRC", "/tmp/vsrc/vllm-0.34.0")
# vLLM 0.34's CONFIG_FIELD_ALIASES (vllm/transformers_utils/config.py)
EXPERTS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
TOP_K = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_topk", "moe_top_k", "top_k")
KV_HEADS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")


def perf_py(src: str = VLLM_SRC) -> str:
    return os.path.join(src, "vllm", "v1", "metrics", "perf.py")


def load(src: str = VLLM_SRC):
    """perf.py of the sdist at ``src`` as a module (sys.modules is left as it was)."""
    class DType:
        def __init__(self, size):
            self.size = size
    torch = types.ModuleType("torch")
    torch.dtype = DType
    torch.bfloat16, torch.float16, torch.uint8 = DType(2), DType(2), DType(1)
    by_name = {"bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.bfloat16}

    def kv_dtype(cache, model):
        if cache == "auto":
            return by_name[model] if isinstance(model, str) else model
        return torch.uint8 if cache.startswith("fp8") else by_name[cache]
    mods = {"torch": torch}

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        mods[name] = m
    for name in ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched", "vllm.v1.metrics"):
        mod(name)
    mod("vllm.envs", VLLM_DEBUG_MFU_METRICS=False)
    mod("vllm.config", VllmConfig=object)
    mod("vllm.logger", init_logger=logging.getLogger)
    mod("vllm.utils.torch_utils", STR_DTYPE_TO_TORCH_DTYPE=by_name, get_dtype_size=lambda d: d.size,
        get_kv_cache_torch_dtype=kv_dtype)
    mod("vllm.v1.core.sched.output", SchedulerOutput=object)
    mod("vllm.v1.metrics.utils", create_metric_per_engine=lambda m, pe: {i: m.labels(*v) for i, v in pe.items()})
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        spec = importlib.util.spec_from_file_location("vllm_perf_reference", perf_py(src))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def vllm_config(cfg: dict, tp=1, dp=1, ep=False, quant=None, cache="auto", mla=False):
    """A stand-in VllmConfig for config.json ``cfg`` (vLLM 0.34's ModelConfig getters on it)."""
    def first(names, default):
        return next((cfg[n] for n in names if n in cfg), default)
    head = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] if mla else \
        cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    hf = NS(**cfg)
    model = NS(hf_config=hf, hf_text_config=hf, dtype="bfloat16", is_deepseek_mla=mla,
               get_vocab_size=lambda: cfg["vocab_size"], get_hidden_size=lambda: cfg["hidden_size"],
               get_total_num_kv_heads=lambda: first(KV_HEADS, cfg["num_attention_heads"]),
               get_head_size=lambda: head, get_num_experts=lambda: first(EXPERTS, 0),
               get_num_experts_per_tok=lambda: first(TOP_K, 0), get_sliding_window=lambda: cfg.get("sliding_window"))
    return NS(model_config=model, cache_config=NS(cache_dtype=cache),
              parallel_config=NS(data_parallel_size=dp, tensor_parallel_size=tp, pipeline_parallel_size=1,
                                 enable_expert_parallel=ep),
              quant_config=None if quant is None else NS(get_name=lambda: quant))


def figures(module, config, requests) -> tuple[tuple[int, int, int], list[str]]:
    """``((FLOPs, read bytes, write bytes) per GPU, component types)`` of vLLM's ModelMetrics for
    ``requests`` ``[(new tokens, context length, is prefill)]``."""
    metrics = module.ModelMetrics(config)
    ctx = module.ExecutionContext()
    for n, c, prefill in requests:
        ctx.add(n, c, prefill)
    return (metrics.get_num_flops(ctx), metrics.get_read_bytes(ctx), metrics.get_write_bytes(ctx)), \
        sorted(m.component_type() for m in metrics.metrics)
