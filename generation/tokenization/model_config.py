"""The served model's own ``config.json``, for the defaults vLLM derives from it.

vLLM's default ``--max-model-len`` is the model's context length (``ModelConfig``'s
``_get_and_verify_max_len``: the smallest of the config's length fields that are present,
``max_position_embeddings`` first; a multimodal config's ``text_config`` counts too).  The
simulator reads the same file where it is at hand without a download: a local model directory,
or the Hugging Face cache (a hub model whose tokenizer was fetched usually has it; with
``HF_HUB_OFFLINE`` unset the file is fetched once, bounded by the hub timeouts of
:mod:`generation.tokenization.tokenizer_loading`); failing those, for a hub id the step engine
knows, the copy of its fields it ships (the step engine's presets, :data:`PRESETS`).  A RoPE
scaling factor applies as vLLM applies it (:func:`derived_context`); sliding windows do not.  ``test-model`` and other names without a config keep the simulator's 1024.
"""
from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("vllm_sim")

# vLLM's possible_keys, in its order
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


# The fields of known models' real config.json files (Hugging Face hub), for a server offline
# without the file: the step engine's architectures (generation.engine.perf.model_arch) and the
# default --max-model-len
def _cfg(layers, hidden, heads, kv, inter, vocab, max_pos, tie=False, head_dim=None, **moe):
    d = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
         "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
         "max_position_embeddings": max_pos, "tie_word_embeddings": tie, "torch_dtype": "bfloat16"}
    if head_dim is not None:
        d["head_dim"] = head_dim
    d.update(moe)
    return d


_LLAMA31_8B = _cfg(32, 4096, 32, 8, 14336, 128256, 131072)
_LLAMA31_70B = _cfg(80, 8192, 64, 8, 28672, 128256, 131072)
_LLAMA31_405B = _cfg(126, 16384, 128, 8, 53248, 128256, 131072)
_MISTRAL_7B = _cfg(32, 4096, 32, 8, 14336, 32768, 32768)
_MIXTRAL_8X7B = _cfg(32, 4096, 32, 8, 14336, 32000, 32768, num_local_experts=8, num_experts_per_tok=2)
_MIXTRAL_8X22B = _cfg(56, 6144, 48, 8, 16384, 32768, 65536, num_local_experts=8, num_experts_per_tok=2)
_LLAMA2_7B = _cfg(32, 4096, 32, 32, 11008, 32000, 4096, torch_dtype="float16")
_LLAMA2_70B = _cfg(80, 8192, 64, 8, 28672, 32000, 4096, torch_dtype="float16")

_DEEPSEEK_V3 = _cfg(61, 7168, 128, 128, 18432, 129280, 163840, model_type="deepseek_v3", n_routed_experts=256,
                    num_experts_per_tok=8, moe_intermediate_size=2048, n_shared_experts=1, first_k_dense_replace=3,
                    kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                    quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128]})

# DeepSeek-V3's architecture with 384 routed experts, 64 heads and one dense layer, FP8 blocks
_KIMI_K2 = {**_DEEPSEEK_V3, "model_type": "kimi_k2", "num_attention_heads": 64, "num_key_value_heads": 64,
            "n_routed_experts": 384, "first_k_dense_replace": 1, "vocab_size": 163840,
            "max_position_embeddings": 131072}
# MLA without q_lora_rank, 64 routed experts and 2 shared (bench/sim_to_real/model_configs)
_DEEPSEEK_V2_LITE = _cfg(27, 2048, 16, 16, 10944, 102400, 163840, model_type="deepseek_v2", n_routed_experts=64,
                         num_experts_per_tok=6, moe_intermediate_size=1408, n_shared_experts=2,
                         first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128,
                         qk_rope_head_dim=64, v_head_dim=128)
# DeepSeek sparse attention: V3's weights and a lightning indexer (64 heads of 128) that picks
# 2,048 cached tokens per query
_DEEPSEEK_V32 = {**_DEEPSEEK_V3, "model_type": "deepseek_v32", "index_topk": 2048, "index_n_heads": 64,
                 "index_head_dim": 128}


_QWEN3_30B_A3B = _cfg(48, 2048, 32, 4, 6144, 151936, 40960, False, 128, num_experts=128, num_experts_per_tok=8,
                      moe_intermediate_size=768)
_QWEN3_235B_A22B = _cfg(94, 4096, 64, 4, 12288, 151936, 40960, False, 128, num_experts=128, num_experts_per_tok=8,
                        moe_intermediate_size=1536)
# Qwen's FP8 releases: the same config with 128 x 128 block-quantized FP8 weights
_QWEN_FP8 = {"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                     "weight_block_size": [128, 128]}}


def _gpt_oss(layers: int, experts: int) -> dict:
    return _cfg(layers, 2880, 64, 8, 2880, 201088, 131072, head_dim=64, model_type="gpt_oss",
                num_local_experts=experts, num_experts_per_tok=4, sliding_window=128,
                layer_types=["sliding_attention", "full_attention"] * (layers // 2),
                quantization_config={"quant_method": "mxfp4"})


PRESETS: dict[str, dict] = {
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "meta-llama/Llama-3.1-8B": _LLAMA31_8B,
    "meta-llama/Meta-Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "meta-llama/Meta-Llama-3.1-8B": _LLAMA31_8B,
    "meta-llama/Meta-Llama-3-8B-Instruct": _cfg(32, 4096, 32, 8, 14336, 128256, 8192),
    "meta-llama/Llama-3.1-70B-Instruct": _LLAMA31_70B,
    "meta-llama/Llama-3.1-70B": _LLAMA31_70B,
    "meta-llama/Meta-Llama-3.1-70B-Instruct": _LLAMA31_70B,
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA31_70B,
    "meta-llama/Llama-3.1-405B-Instruct": _LLAMA31_405B,
    "meta-llama/Llama-3.2-1B-Instruct": _cfg(16, 2048, 32, 8, 8192, 128256, 131072, True, 64),
    "meta-llama/Llama-3.2-1B": _cfg(16, 2048, 32, 8, 8192, 128256, 131072, True, 64),
    "meta-llama/Llama-3.2-3B-Instruct": _cfg(28, 3072, 24, 8, 8192, 128256, 131072, True, 128),
    "meta-llama/Llama-3.2-3B": _cfg(28, 3072, 24, 8, 8192, 128256, 131072, True, 128),
    "Qwen/Qwen2.5-0.5B-Instruct": _cfg(24, 896, 14, 2, 4864, 151936, 32768, True),
    "Qwen/Qwen2.5-1.5B-Instruct": _cfg(28, 1536, 12, 2, 8960, 151936, 32768, True),
    "Qwen/Qwen2.5-3B-Instruct": _cfg(36, 2048, 16, 2, 11008, 151936, 32768, True),
    "Qwen/Qwen2.5-7B-Instruct": _cfg(28, 3584, 28, 4, 18944, 152064, 32768),
    "Qwen/Qwen2.5-7B": _cfg(28, 3584, 28, 4, 18944, 152064, 131072),
    "Qwen/Qwen2.5-14B-Instruct": _cfg(48, 5120, 40, 8, 13824, 152064, 32768),
    "Qwen/Qwen2.5-32B-Instruct": _cfg(64, 5120, 40, 8, 27648, 152064, 32768),
    "Qwen/Qwen2.5-72B-Instruct": _cfg(80, 8192, 64, 8, 29568, 152064, 32768),
    "Qwen/Qwen3-0.6B": _cfg(28, 1024, 16, 8, 3072, 151936, 40960, True, 128),
    "Qwen/Qwen3-1.7B": _cfg(28, 2048, 16, 8, 6144, 151936, 40960, True, 128),
    "Qwen/Qwen3-4B": _cfg(36, 2560, 32, 8, 9728, 151936, 40960, True, 128),
    "Qwen/Qwen3-8B": _cfg(36, 4096, 32, 8, 12288, 151936, 40960, False, 128),
    "Qwen/Qwen3-14B": _cfg(40, 5120, 40, 8, 17408, 151936, 40960, False, 128),
    "Qwen/Qwen3-32B": _cfg(64, 5120, 64, 8, 25600, 151936, 40960, False, 128),
    "Qwen/Qwen3-30B-A3B": _QWEN3_30B_A3B,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": {**_QWEN3_30B_A3B, "max_position_embeddings": 262144},
    "Qwen/Qwen3-30B-A3B-Thinking-2507": {**_QWEN3_30B_A3B, "max_position_embeddings": 262144},
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": {**_QWEN3_30B_A3B, "max_position_embeddings": 262144},
    "Qwen/Qwen3-235B-A22B": _QWEN3_235B_A22B,
    "Qwen/Qwen3-235B-A22B-Instruct-2507": {**_QWEN3_235B_A22B, "max_position_embeddings": 262144},
    "Qwen/Qwen3-235B-A22B-Thinking-2507": {**_QWEN3_235B_A22B, "max_position_embeddings": 262144},
    "mistralai/Mistral-7B-Instruct-v0.3": _MISTRAL_7B,
    "mistralai/Mistral-7B-v0.3": _MISTRAL_7B,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": _MIXTRAL_8X7B,
    "mistralai/Mixtral-8x7B-v0.1": _MIXTRAL_8X7B,
    "mistralai/Mixtral-8x22B-Instruct-v0.1": _MIXTRAL_8X22B,
    "mistralai/Mixtral-8x22B-v0.1": _MIXTRAL_8X22B,
    # the other models of the sim-to-real data (bench/sim_to_real/model_configs)
    "meta-llama/Llama-2-7b-hf": _LLAMA2_7B,
    "meta-llama/Llama-2-7b-chat-hf": _LLAMA2_7B,
    "meta-llama/Llama-2-70b-hf": _LLAMA2_70B,
    "meta-llama/Llama-2-70b-chat-hf": _LLAMA2_70B,
    "codellama/CodeLlama-34b-Instruct-hf": _cfg(48, 8192, 64, 8, 22016, 32000, 16384),
    # MLA and 256 routed experts, FP8 (128 x 128 blocks)
    "deepseek-ai/DeepSeek-V3": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-V3-0324": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1-0528": _DEEPSEEK_V3,
    "moonshotai/Kimi-K2-Instruct": _KIMI_K2,
    "moonshotai/Kimi-K2-Instruct-0905": {**_KIMI_K2, "max_position_embeddings": 262144},
    "deepseek-ai/DeepSeek-V2-Lite": _DEEPSEEK_V2_LITE,
    "deepseek-ai/DeepSeek-V2-Lite-Chat": _DEEPSEEK_V2_LITE,
    "deepseek-ai/DeepSeek-V3.2-Exp": _DEEPSEEK_V32,
    "deepseek-ai/DeepSeek-V3.2": _DEEPSEEK_V32,
    # MXFP4 experts, every other layer a 128-token sliding window
    "openai/gpt-oss-120b": _gpt_oss(36, 128),
    "openai/gpt-oss-20b": _gpt_oss(24, 32),
}
PRESETS.update({f"{name}-FP8": {**PRESETS[name], **_QWEN_FP8} for name in (
    "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-Coder-30B-A3B-Instruct")})
# their config.json's ``architectures`` (the model class vLLM loads), by the first matching prefix
_PRESET_CLASSES = (("meta-llama/", "LlamaForCausalLM"), ("codellama/", "LlamaForCausalLM"),
                   ("Qwen/Qwen2.5-", "Qwen2ForCausalLM"), ("Qwen/Qwen3-30B-A3B", "Qwen3MoeForCausalLM"),
                   ("Qwen/Qwen3-235B-A22B", "Qwen3MoeForCausalLM"), ("Qwen/Qwen3-Coder-30B-A3B", "Qwen3MoeForCausalLM"),
                   ("Qwen/Qwen3-", "Qwen3ForCausalLM"), ("mistralai/Mistral-", "MistralForCausalLM"),
                   ("mistralai/Mixtral-", "MixtralForCausalLM"), ("deepseek-ai/DeepSeek-V3.2", "DeepseekV32ForCausalLM"),
                   ("deepseek-ai/DeepSeek-V2", "DeepseekV2ForCausalLM"),
                   ("deepseek-ai/", "DeepseekV3ForCausalLM"), ("moonshotai/Kimi-K2", "DeepseekV3ForCausalLM"),
                   ("openai/gpt-oss-", "GptOssForCausalLM"))
PRESETS = {name: {**fields, "architectures": [next(c for p, c in _PRESET_CLASSES if name.startswith(p))]}
           for name, fields in PRESETS.items()}
_PRESETS_LOWER = {k.lower(): k for k in PRESETS}


def preset_config(name: str) -> tuple[str, dict] | None:
    """``(hub id, config.json fields)`` of the preset named ``name`` (exact, case-insensitive),
    or None.  The dict is a copy."""
    key = _PRESETS_LOWER.get(name.strip().lower())
    return None if key is None else (key, dict(PRESETS[key]))


# RoPE types whose max_position_embeddings is the scaled length already (vLLM 0.34's
# _get_and_verify_max_len); another type's ``factor`` multiplies it
ROPE_PRESCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _rope_parameters(config: dict) -> list[dict]:
    """The RoPE parameter dicts of a config and its ``text_config`` (``rope_scaling``, or
    Transformers 5's ``rope_parameters``, possibly one per layer type)."""
    found = []
    for part in (config, config.get("text_config")):
        if not isinstance(part, dict):
            continue
        for key in ("rope_scaling", "rope_parameters"):
            v = part.get(key)
            if isinstance(v, dict):
                nested = [x for x in v.values() if isinstance(x, dict)]
                found += nested if nested and all(isinstance(x, dict) for x in v.values()) else [v]
    return found


def derived_context(config: dict) -> tuple[int, str] | None:
    """``(length, key)``: the context length a ``config.json`` object gives as vLLM 0.34 derives
    it (``_get_and_verify_max_len``): the smallest of its length fields (and its
    ``text_config``'s), times the RoPE ``factor`` of a scaling type that does not already scale
    ``max_position_embeddings`` (``linear``, ``dynamic``; not for Gemma 3); None when it declares
    no length."""
    best = None
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            for k in CONTEXT_KEYS:
                v = part.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0 and (best is None or v < best[0]):
                    best = (v, k)
    if best is None:
        return None
    factor = 1.0
    if "gemma3" not in str(config.get("model_type", "")):
        for rp in _rope_parameters(config):
            kind = rp.get("rope_type", rp.get("type"))
            if kind not in ROPE_PRESCALED and isinstance(rp.get("factor"), (int, float)) \
                    and not isinstance(rp.get("factor"), bool) and rp["factor"] > 0:
                factor = float(rp["factor"])
    return int(best[0] * factor), best[1]


def context_length(config: dict) -> int | None:
    """The context length a ``config.json`` object declares, as vLLM derives it
    (:func:`derived_context`), or None when it declares none."""
    found = derived_context(config)
    return found[0] if found else None


def check_user_max_model_len(config: dict, max_model_len: int) -> None:
    """vLLM's refusal of a ``--max-model-len`` past the model's derived length, unless the
    config's own ``model_max_length`` allows it or ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is 1 /
    true (then vLLM logs a warning; so does this).  Raises ConfigError in vLLM 0.34's words."""
    from generation.config.values import ConfigError
    found = derived_context(config)
    if found is None or max_model_len <= found[0]:
        return
    mml = config.get("model_max_length")
    if isinstance(mml, int) and not isinstance(mml, bool) and max_model_len <= mml:
        return
    msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
           f"({found[1]}={found[0]} or model_max_length={mml if isinstance(mml, int) else None} in model's "
           f"config.json).")
    warning = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
               "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
               "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
               "array out-of-bounds error.")
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true"):
        log.warning("%s %s", msg, warning)
        return
    raise ConfigError(f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
                      f"{warning}", "max-model-len")


def _config_path(name: str, cache_dir: str | None) -> str | None:
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        candidate = os.path.join(path, "config.json")
        return candidate if os.path.isfile(candidate) else None
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(name, "config.json", cache_dir=cache_dir)
    if isinstance(found, str):
        return found
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    from .tokenizer_loading import _hub_env_defaults, _quiet_hub, probe_hub
    _hub_env_defaults()
    try:
        with _quiet_hub():
            probe_hub(name)           # bounded, once per name: no retries against an unreachable hub
            return hf_hub_download(name, "config.json", cache_dir=cache_dir, token=os.environ.get("HF_TOKEN") or None)
    except Exception as e:         # noqa: BLE001 - no config: the simulator's default stays
        log.debug("no config.json for '%s': %s", name, e)
        return None


def _load(path: str | None) -> dict | None:
    """The JSON object in the file at ``path``, or None (no path, unreadable, not an object)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def model_context_length(name: str, cache_dir: str | None = None) -> int | None:
    """The context length of model ``name`` (a local directory or a hub id) from its
    ``config.json``, or None when there is no readable config or it declares none."""
    config = _load(_config_path((name or "").strip(), cache_dir))
    return context_length(config) if config is not None else None


def vocab_size(config: dict) -> int | None:
    """The model's vocabulary size (``vocab_size``, or its ``text_config``'s), as vLLM's
    ``ModelConfig.get_vocab_size`` reads it: the bound of ``stop_token_ids`` and ``logit_bias``
    ids, which may differ from the tokenizer's (Qwen's models have more rows than tokens)."""
    for part in (config, config.get("text_config")):
        v = part.get("vocab_size") if isinstance(part, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def architecture(config: dict) -> str | None:
    """The model class a ``config.json`` names (the first of ``architectures``, as vLLM's
    ``ModelConfig.architecture`` resolves it when the registry has that class), or None."""
    names = config.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    return None


def model_types(config: dict) -> tuple:
    """The ``model_type`` of a ``config.json`` and of its ``text_config``, those present, in that
    order: what vLLM's ``get_tool_call_id_type`` (``renderers/chat_utils/tool_call.py``) reads
    as ``hf_config.model_type`` and ``hf_text_config.model_type``."""
    return tuple(part["model_type"] for part in (config, config.get("text_config"))
                 if isinstance(part, dict) and isinstance(part.get("model_type"), str))


def served_model_config(config) -> tuple[dict | None, str]:
    """``(config.json object or None, where it was read)`` for the served model:
    ``--hf-config-path`` (a directory holding ``config.json``, or the file) first and in every
    mode, ``--force-dummy-tokenizer`` included, as vLLM reads it; otherwise, unless
    ``--force-dummy-tokenizer``, the model's own config, or the shipped copy of a known hub id's
    (``model_arch.preset_config``) when the file is not at hand."""
    hf_config_path = getattr(config, "hf_config_path", "") or ""
    if hf_config_path:
        path = os.path.expanduser(hf_config_path)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        obj = _load(path)
        if obj is None:
            log.warning("--hf-config-path %s: no readable config.json; the model defaults are the simulator's",
                        path)
        return obj, hf_config_path
    if config.force_dummy_tokenizer:
        return None, ""
    name = (config.model or "").strip()
    obj = _load(_config_path(name, getattr(config, "tokenizers_cache_dir", "") or None))
    if obj is not None:
        return obj, "the model's config.json"
    # offline without the file: the fields of the real config.json the step engine ships for a
    # known hub id (vLLM would have fetched that file)
    found = preset_config(name)
    return (None, "") if found is None else (found[1], f"the shipped copy of {found[0]}'s config.json")


def apply_model_defaults(config) -> None:
    """What vLLM derives from the served model's ``config.json`` (:func:`served_model_config`):
    ``config.model_vocab_size`` (:func:`vocab_size`), ``config.model_architecture``
    (:func:`architecture`), ``config.model_types`` (:func:`model_types`), and ``config.max_model_len`` (the context length) when neither the
    command line, the YAML file nor the environment gave one (``config.explicit``: the options
    they set); one they gave past the model's length is vLLM's error (:func:`check_user_max_model_len`).
    Raises ConfigError naming ``max-model-len``."""
    obj, where = served_model_config(config)
    if obj is None:
        return
    config.model_architecture = architecture(obj)
    config.model_types = model_types(obj)
    v = vocab_size(obj)
    if v is not None:
        config.model_vocab_size = v
    if "max-model-len" in getattr(config, "explicit", ()):
        check_user_max_model_len(obj, config.max_model_len)
        return
    n = context_length(obj)
    if n is not None:
        log.info("max model len %d from %s", n, where)
        config.max_model_len = n
