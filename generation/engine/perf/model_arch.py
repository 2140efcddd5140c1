"""A model's architecture, as far as step time and KV capacity need it (docs/engine-model.md §2-3).

:class:`ModelArch` holds the fields of a Hugging Face ``config.json`` that the roofline uses
(layers, widths, heads, vocabulary, MoE experts, dtype), and derives the parameter counts
``n_lin`` / ``n_head`` of docs/engine-model.md §3.  :func:`resolve_arch` finds the config the way
vLLM does, minus the network: ``--hf-config-path``, then a local model directory, then the
Hugging Face cache, then the shipped presets (:data:`PRESETS`, the real ``config.json``
values of popular models, kept in :mod:`generation.tokenization.model_config`, which also takes
``--max-model-len``'s default from them; so ``python app.py meta-llama/Llama-3.1-8B-Instruct``
works offline).

Parameter counting (what vLLM's layers hold):

* attention per layer: ``q`` (hidden x heads*head_dim), ``k`` and ``v`` (hidden x
  kv_heads*head_dim each), ``o`` (heads*head_dim x hidden);
* a dense MLP per layer: gated (SwiGLU: gate, up, down), ``3 x hidden x intermediate``;
* a MoE layer: a router (hidden x experts), ``experts`` gated experts of
  ``moe_intermediate_size``, and a shared expert when the config has one;
* MLA attention (DeepSeek-V2/V3, Kimi-K2: ``kv_lora_rank``): ``q_a`` (hidden x q_lora_rank)
  and ``q_b`` (q_lora_rank x heads*(nope+rope)), or one ``q`` without ``q_lora_rank``;
  ``kv_a`` (hidden x (kv_lora_rank+rope)), ``kv_b`` (kv_lora_rank x heads*(nope+v)), ``o``
  (heads*v x hidden);
* norms and biases are left out (under 0.01% of the weights);
* ``n_head`` = vocab x hidden (the lm_head GEMM runs even when tied to the embedding).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from typing import Any

from generation.config.values import ConfigError
from generation.tokenization.model_config import PRESETS, preset_config

log = logging.getLogger("vllm_sim")

# model types vLLM treats as DeepSeek MLA (its ``is_deepseek_mla``), the MFU counters' list
from .mfu import MLA_MODEL_TYPES

# dtype names a config.json or --dtype may carry -> bytes per weight as served.  vLLM's
# ``--dtype auto`` serves an FP32 checkpoint in 16 bits, hence 2 for float32 too.
_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
                "float32": 2, "fp32": 2, "float": 2}


@dataclass(frozen=True)
class ModelArch:
    """The architecture fields of one model (a Hugging Face ``config.json`` subset).

    Counts are plain integers; ``dtype`` is the checkpoint's ``torch_dtype``; ``quantization``
    the checkpoint's own ``quantization_config`` method normalised to ``"fp8"``, ``"int4"`` or
    ``""`` (none or not recognised), used when ``--quantization`` is not given.
    ``dense_layers`` counts the layers of a MoE model that keep a dense MLP
    (``first_k_dense_replace``, ``mlp_only_layers``)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    dtype: str = "bfloat16"
    max_position_embeddings: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0
    quantization: str = ""
    weight_block: int = 0               # the checkpoint's FP8 weight_block_size (128: DeepSeek-V3); 0: none
    # MLA (vLLM's ``is_deepseek_mla``): the compressed KV's rank and the heads' parts; 0 without
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek sparse attention (V3.2, GLM-5: ``index_topk``): the lightning indexer's heads and
    # head size, and how many tokens each query attends to; 0 without
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    # sliding-window attention: the window (tokens) and how many layers have it; 0 without
    sliding_window: int = 0
    sliding_layers: int = 0

    # -- derived counts -----------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """Whether the MLPs are mixtures of experts (step time and activation peak differ)."""
        return self.num_experts > 0 and self.experts_per_token > 0

    @property
    def is_mla(self) -> bool:
        """Whether attention is DeepSeek's multi-head latent attention (one compressed KV of
        ``kv_lora_rank + qk_rope_head_dim`` per token and layer, not split by TP)."""
        return self.kv_lora_rank > 0

    @property
    def full_attention_layers(self) -> int:
        """Layers whose attention reads the whole context (all but the sliding-window ones)."""
        return self.num_layers - self.sliding_layers

    @property
    def is_sparse_mla(self) -> bool:
        """Whether attention is DeepSeek's sparse MLA (DSA): a lightning indexer scores every
        cached token per query and the attention reads the ``index_topk`` best."""
        return self.is_mla and self.index_topk > 0

    def attn_flops_per_pair(self, decode: bool) -> int:
        """FLOPs of one (query, key) pair of one head in one layer: ``4 head_dim`` (QK^T and
        AV); for MLA, vLLM's decode runs on the compressed KV with the up-projections absorbed
        (FlashMLA: QK^T over ``kv_lora_rank + rope``, AV over ``kv_lora_rank``) and its prefill
        on the decompressed heads (``nope + rope`` and ``v``); sparse MLA runs both absorbed
        (FlashMLA's sparse kernels)."""
        if self.is_mla:
            if decode or self.is_sparse_mla:
                return 2 * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
            return 2 * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
        return 4 * self.head_dim

    def describe(self, quantization: str = "") -> str:
        """One line of what the step model models of this architecture, for the start-up log
        (so that a config read as something else shows): attention, MLP and weights."""
        if self.is_sparse_mla:
            attn = (f"sparse MLA (latent {self.kv_lora_rank} + rope {self.qk_rope_head_dim}, top {self.index_topk} "
                    f"of an indexer's {self.index_n_heads} heads)")
        elif self.is_mla:
            attn = f"MLA (latent {self.kv_lora_rank} + rope {self.qk_rope_head_dim}, whole on every rank)"
        else:
            attn = f"{self.num_heads} heads, {self.num_kv_heads} KV heads of {self.head_dim}"
        if self.sliding_layers:
            attn += f", {self.sliding_layers} of {self.num_layers} layers in a {self.sliding_window}-token window"
        mlp = (f"MoE {self.num_experts} experts, top {self.experts_per_token}"
               + (" + shared" if self.shared_expert_intermediate_size else "")
               + (f", {self.dense_layers} dense layer{'s' if self.dense_layers > 1 else ''}" if self.dense_layers
                  else "") if self.is_moe else "dense")
        weights = quantization or self.quantization or self.dtype
        return f"{self.num_layers} layers, {attn}; {mlp}; weights {weights}"

    @property
    def dtype_bytes(self) -> int:
        """Bytes per unquantized weight (and per KV element with ``--kv-cache-dtype auto``)."""
        return _DTYPE_BYTES.get(self.dtype.lower(), 2)

    @property
    def attn_params_per_layer(self) -> int:
        """q, k, v and o projection parameters of one layer (MLA's five projections: module
        docstring)."""
        if self.is_mla:
            h, qk = self.num_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (self.hidden_size * self.q_lora_rank + self.q_lora_rank * h * qk if self.q_lora_rank
                 else self.hidden_size * h * qk)
            kv = (self.hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
                  + self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + h * self.v_head_dim * self.hidden_size
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        return self.hidden_size * (2 * q + 2 * kv)

    @property
    def replicated_params(self) -> int:
        """Linear parameters every tensor-parallel rank holds whole: MLA's down-projections
        ``q_a`` and ``kv_a`` (vLLM's ReplicatedLinear), all layers; 0 otherwise."""
        if not self.is_mla:
            return 0
        return self.num_layers * self.hidden_size * (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up and down)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def _mlp_params(self, active: bool) -> int:
        dense_mlp = 3 * self.hidden_size * self.intermediate_size
        if not self.is_moe:
            return self.num_layers * dense_mlp
        moe_layers = self.num_layers - self.dense_layers
        shared = 3 * self.hidden_size * self.shared_expert_intermediate_size
        if self.shared_expert_intermediate_size:
            shared += self.hidden_size            # Qwen-MoE's shared-expert gate
        experts = self.experts_per_token if active else self.num_experts
        per_moe_layer = self.hidden_size * self.num_experts + experts * self.expert_params + shared
        return self.dense_layers * dense_mlp + moe_layers * per_moe_layer

    @property
    def n_lin(self) -> int:
        """Non-embedding linear parameters one token goes through (docs/engine-model.md §3
        ``N_lin``): for a MoE model the *active* ones (``experts_per_token`` experts), which set
        the FLOPs.  Llama-3.1-8B: 6,979,321,856."""
        return self.num_layers * self.attn_params_per_layer + self._mlp_params(active=True)

    @property
    def n_lin_total(self) -> int:
        """Non-embedding linear parameters held in memory (all experts of a MoE model)."""
        return self.num_layers * self.attn_params_per_layer + self._mlp_params(active=False)

    @property
    def n_head(self) -> int:
        """lm_head parameters, vocab x hidden (docs/engine-model.md §3 ``N_head``)."""
        return self.vocab_size * self.hidden_size

    @property
    def n_embed(self) -> int:
        """Input-embedding parameters (vocab x hidden): held in memory, not read per step."""
        return self.vocab_size * self.hidden_size

    @property
    def n_params(self) -> int:
        """All parameters as stored (a tied lm_head counted once), for the start-up log."""
        return self.n_lin_total + self.n_embed + (0 if self.tie_word_embeddings else self.n_head)

    # -- parsing ------------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, d: dict, name: str = "", source: str = "config.json") -> "ModelArch":
        """Read a Hugging Face ``config.json`` dict.

        Fields: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
        ``num_key_value_heads`` (default: the attention heads), ``head_dim`` (default
        hidden / heads), ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``
        (default false), ``torch_dtype`` or ``dtype`` (default bfloat16),
        ``max_position_embeddings``.  A multimodal config's ``text_config`` (or
        ``llm_config``) is read instead of the top level.  MoE: Mixtral's
        ``num_local_experts`` (its ``intermediate_size`` is the expert's), Qwen-MoE's
        ``num_experts`` with ``moe_intermediate_size`` and ``shared_expert_intermediate_size``,
        DeepSeek's ``n_routed_experts`` / ``n_shared_experts`` / ``first_k_dense_replace``;
        ``num_experts_per_tok``.  MLA (a ``model_type`` vLLM treats as DeepSeek MLA, with
        ``kv_lora_rank``): ``q_lora_rank`` (absent or null: one q projection),
        ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; DeepSeek sparse attention
        (V3.2, GLM-5): ``index_topk``, ``index_n_heads``, ``index_head_dim``.  Sliding windows as vLLM 0.34
        reads them: ``sliding_window`` on the layers ``layer_types`` marks sliding, Gemma 2's
        even ones, else every layer (Mistral); none with ``use_sliding_window`` false.

        Raises ConfigError naming ``source`` and the field when a required field is missing or
        not a positive integer."""
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(d).__name__}")
        top = d
        for key in ("text_config", "llm_config", "language_config"):
            if isinstance(d.get(key), dict) and "hidden_size" in d[key]:
                # the top level's dtype and quantization win, as vLLM reads them there
                d = {**d[key], **{k: v for k, v in top.items() if v is not None and k in (
                    "torch_dtype", "dtype", "quantization_config")}}
                break

        def num(field: str, default: Any = None, *alt: str) -> int:
            value = d.get(field)
            for a in alt:
                if value is None:
                    value = d.get(a)
            if value is None:
                value = default
            if value is None:
                raise ConfigError(f"{source}: missing field {field!r}", param="hf-config-path")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{source}: field {field!r} must be a non-negative integer, "
                                  f"got {value!r}", param="hf-config-path")
            return value

        layers = num("num_hidden_layers", None, "n_layer", "num_layers")
        hidden = num("hidden_size", None, "n_embd", "d_model")
        heads = num("num_attention_heads", None, "n_head")
        for field, value in (("num_hidden_layers", layers), ("hidden_size", hidden),
                             ("num_attention_heads", heads)):
            if value <= 0:
                raise ConfigError(f"{source}: field {field!r} must be positive, got {value}",
                                  param="hf-config-path")
        kv_heads = num("num_key_value_heads", heads) or heads
        if d.get("num_key_value_heads") == 0 or heads % kv_heads:
            # was silently read as MHA (0) or as a grouping no attention kernel runs (5 of 32, 64 of 32)
            raise ConfigError(f"{source}: field 'num_key_value_heads' must divide num_attention_heads "
                              f"({heads}), got {d.get('num_key_value_heads')!r}", param="hf-config-path")
        head_dim = num("head_dim", hidden // heads) or hidden // heads
        vocab = num("vocab_size")
        if vocab <= 0:
            raise ConfigError(f"{source}: field 'vocab_size' must be positive, got {vocab}",
                              param="hf-config-path")
        experts = num("num_local_experts", 0, "num_experts", "n_routed_experts")
        routed = d.get("num_experts_per_tok", d.get("num_experts_per_token", d.get("moe_topk")))
        if not experts and any(k in d for k in ("num_local_experts", "num_experts", "n_routed_experts")) \
                and isinstance(routed, int) and not isinstance(routed, bool) and routed > 0:
            # a MoE config (it routes tokens to experts) with 0 experts ran as a dense model
            raise ConfigError(f"{source}: a MoE config (num_experts_per_tok {routed}) needs at least one "
                              f"expert, got 0", param="hf-config-path")
        per_tok = num("num_experts_per_tok", 0, "num_experts_per_token", "moe_topk") if experts else 0
        if experts and not 1 <= per_tok <= experts:
            raise ConfigError(f"{source}: field 'num_experts_per_tok' must be from 1 to the {experts} experts, "
                              f"got {per_tok}", param="hf-config-path")
        inter = num("intermediate_size", 0 if experts else None, "n_inner", "ffn_dim")
        moe_inter = num("moe_intermediate_size", 0) if experts else 0
        if experts and not moe_inter:          # Mixtral: intermediate_size is the expert's
            moe_inter = inter
        shared = num("shared_expert_intermediate_size", 0) if experts else 0
        if experts and not shared and d.get("n_shared_experts"):
            shared = num("n_shared_experts") * moe_inter
        dense_layers = 0
        if experts:
            dense_layers = num("first_k_dense_replace", 0)
            mlp_only = d.get("mlp_only_layers") or []
            if isinstance(mlp_only, list):
                dense_layers = max(dense_layers, len(mlp_only))
            dense_layers = min(dense_layers, layers)
        dtype = d.get("torch_dtype") or d.get("dtype") or "bfloat16"
        if not isinstance(dtype, str) or dtype.lower() not in _DTYPE_BYTES:
            raise ConfigError(f"{source}: field 'torch_dtype' must be one of "
                              f"{', '.join(sorted(_DTYPE_BYTES))}, got {dtype!r}",
                              param="hf-config-path")
        tie = d.get("tie_word_embeddings", top.get("tie_word_embeddings", False))
        mla = {}
        model_type = d.get("model_type", top.get("model_type"))
        if d.get("kv_lora_rank") and model_type not in MLA_MODEL_TYPES:
            log.warning("%s: kv_lora_rank is given but model_type %r is not one vLLM treats as MLA: "
                        "modelled as ordinary attention", source, model_type)
        if model_type in MLA_MODEL_TYPES and d.get("kv_lora_rank"):
            mla = {"kv_lora_rank": num("kv_lora_rank"), "q_lora_rank": num("q_lora_rank", 0) or 0,
                   "qk_nope_head_dim": num("qk_nope_head_dim"), "qk_rope_head_dim": num("qk_rope_head_dim"),
                   "v_head_dim": num("v_head_dim")}
            for field in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if mla[field] <= 0:
                    raise ConfigError(f"{source}: field {field!r} must be positive for MLA, got "
                                      f"{mla[field]}", param="hf-config-path")
            if d.get("index_topk"):             # vLLM's is_v32: DeepSeek sparse attention
                mla.update(index_topk=num("index_topk"), index_n_heads=num("index_n_heads"),
                           index_head_dim=num("index_head_dim"))
        window, sliding = _sliding_window(d, layers)
        return cls(name=name or str(top.get("_name_or_path") or ""), num_layers=layers,
                   hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                   intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=bool(tie),
                   dtype=dtype.lower(), max_position_embeddings=num("max_position_embeddings", 0,
                                                                    "n_positions", "max_seq_len"),
                   num_experts=experts, experts_per_token=per_tok, moe_intermediate_size=moe_inter,
                   shared_expert_intermediate_size=shared, dense_layers=dense_layers,
                   quantization=_checkpoint_quantization(d.get("quantization_config")),
                   weight_block=_weight_block(d.get("quantization_config")),
                   sliding_window=window, sliding_layers=sliding, **mla)


def _sliding_window(d: dict, layers: int) -> tuple[int, int]:
    """``(window, sliding layers)`` of a config (vLLM 0.34's ``SlidingWindowAttentionParser``,
    as :mod:`.mfu` reads it); ``(0, 0)`` without a window."""
    w = d.get("sliding_window")
    if d.get("use_sliding_window") is False or isinstance(w, bool) or not isinstance(w, int) or w <= 0:
        return 0, 0
    types = d.get("layer_types")
    if isinstance(types, list):
        n = sum(1 for kind in types[:layers] if "sliding" in str(kind).lower())
    elif d.get("model_type") == "gemma2":
        n = (layers + 1) // 2
    else:
        n = layers
    return (w, n) if n else (0, 0)


def _weight_block(qc: Any) -> int:
    """The first side of a checkpoint's ``weight_block_size`` (block-wise FP8: 128), 0 without."""
    b = qc.get("weight_block_size") if isinstance(qc, dict) else None
    return b[0] if isinstance(b, list) and b and isinstance(b[0], int) and not isinstance(b[0], bool) and b[0] > 0 else 0


def _checkpoint_quantization(qc: Any) -> str:
    """``"fp8"`` / ``"int4"`` / ``"nvfp4"`` / ``"mxfp4"`` / ``""`` from a config's
    ``quantization_config`` (as vLLM detects a pre-quantized checkpoint): fp8 / fbgemm_fp8 /
    modelopt FP8, ModelOpt NVFP4, AWQ / GPTQ 4-bit, gpt-oss's MXFP4, and compressed-tensors by
    its weights' ``num_bits`` and ``type``."""
    if not isinstance(qc, dict):
        return ""
    method = str(qc.get("quant_method") or "").lower()
    if method in ("modelopt", "modelopt_fp4") and "FP4" in str(qc.get("quant_algo") or "").upper():
        return "nvfp4"                  # ModelOpt's NVFP4 (vLLM's modelopt_fp4)
    if method in ("fp8", "fbgemm_fp8", "modelopt", "ptpc_fp8"):
        return "fp8"
    if method == "mxfp4":               # gpt-oss: the experts only (modules_to_not_convert)
        return "mxfp4"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "marlin"):
        return "int4" if int(qc.get("bits", qc.get("w_bit", 4)) or 4) == 4 else ""
    if method == "compressed-tensors":
        for group in (qc.get("config_groups") or {}).values():
            w = (group or {}).get("weights") or {}
            if w.get("num_bits") == 8 and w.get("type") == "float":
                return "fp8"
            if w.get("num_bits") == 4 and w.get("type") == "int":
                return "int4"
            if w.get("num_bits") == 4 and w.get("type") == "float":
                return "nvfp4"
    return ""


# ---------------------------------------------------------------------------------------------
def preset(name: str) -> ModelArch | None:
    """The preset architecture named ``name`` (exact, case-insensitive), or None."""
    found = preset_config(name)
    return None if found is None else ModelArch.from_hf_config(found[1], name=found[0],
                                                               source=f"preset {found[0]}")


# ---------------------------------------------------------------------------------------------
def load_hf_config(path: str, name: str = "") -> ModelArch:
    """Read ``path`` (a ``config.json`` file, or a directory holding one) into a ModelArch.
    Raises ConfigError naming the file when it is missing, not JSON, or lacks a field."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--hf-config-path: no config.json at {path}", param="hf-config-path")
    except (OSError, ValueError) as e:
        raise ConfigError(f"{file}: cannot read the model config ({e})", param="hf-config-path")
    return ModelArch.from_hf_config(data, name=name, source=file)


def _hub_cache_dir() -> str:
    """The Hugging Face hub cache as the environment says now (``HF_HUB_CACHE``, else
    ``HF_HOME``/hub, else ``XDG_CACHE_HOME``/huggingface/hub): huggingface_hub reads these at
    import only."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def resolve_arch(model: str, hf_config_path: str = "",
                 cache_dir: str | None = None) -> tuple[ModelArch, str] | None:
    """The architecture of ``model`` and where it came from (for the start-up log), or None.

    Looks, in vLLM's order and without the network:

    1. ``hf_config_path`` (``--hf-config-path``: a directory holding config.json, or the file);
       a bad path or file is a ConfigError, not a fall-through;
    2. ``model`` as a local directory holding a ``config.json``;
    3. the Hugging Face cache (``cache_dir``, default the environment's hub cache):
       ``try_to_load_from_cache(model, "config.json")``, a directory lookup;
    4. :data:`PRESETS`, exact name, case-insensitive (source ``"preset"``).

    The source is the file read, or ``"preset <name>"``."""
    if hf_config_path:
        file = (os.path.join(hf_config_path, "config.json") if os.path.isdir(hf_config_path)
                else hf_config_path)
        return load_hf_config(hf_config_path, name=model), file
    if model and os.path.isfile(os.path.join(model, "config.json")):
        file = os.path.join(model, "config.json")
        return load_hf_config(file, name=model), file
    cache = cache_dir or _hub_cache_dir()
    if (model and not os.path.isabs(model) and not model.startswith((".", "~"))
            and os.path.isdir(os.path.join(cache, "models--" + model.replace("/", "--")))):
        from huggingface_hub import try_to_load_from_cache     # ~0.6 s to import: only when cached
        try:
            found = try_to_load_from_cache(model, "config.json", cache_dir=cache)
        except ValueError:                 # not a valid repo id (HFValidationError)
            found = None
        if isinstance(found, str):
            return load_hf_config(found, name=model), found
    arch = preset(model) if model else None
    if arch is not None:
        return replace(arch, name=model), f"preset {arch.name}"
    return None
