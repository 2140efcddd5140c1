"""GPUs, vLLM's batch defaults per GPU, and KV-cache capacity (docs/engine-model.md §1-3).

* :class:`GPU` / :data:`GPUS` / :func:`gpu_by_name`: the peaks the roofline uses (``--gpu``);
* :func:`batch_defaults`: ``--max-num-batched-tokens`` / ``--max-num-seqs`` defaults by GPU
  class, as vLLM's ``get_batch_defaults`` (docs/engine-model.md §1);
* :func:`weight_bytes`, :func:`kv_bytes_per_token`, :func:`kv_cache_blocks`: the memory
  profile vLLM runs at start-up, with the llm-d capacity planner's constants (§2).

The model side (:class:`ModelArch`, :data:`PRESETS`, :func:`resolve_arch`) lives in
``model_arch`` and is re-exported here.  All sizes are bytes, rates per second.
"""
from __future__ import annotations

from dataclasses import dataclass

from generation.config.values import ConfigError

from .model_arch import PRESETS, ModelArch, preset, resolve_arch

__all__ = ["GPU", "GPUS", "gpu_by_name", "batch_defaults", "ModelArch", "PRESETS", "preset",
           "resolve_arch", "weight_bytes", "linear_weight_bytes", "expert_weight_bytes",
           "routed_expert_params", "weight_bytes_per_gpu", "local_experts", "expert_share", "moe_shards", "moe_group_terms", "collective_terms", "exchange_terms",
           "dcp_gather_per_token", "kv_bytes_per_token", "mla_block_size",
           "pool_blocks", "hybrid_kv_tokens",
           "kv_cache_blocks", "kv_cache_report", "check_max_model_len", "KV_CACHE_DTYPES",
           "QUANTIZATIONS", "FP4_METHODS", "GiB"]

GiB = 1 << 30


GPUS_PER_NODE = 8              # a collective over more GPUs crosses nodes (GPU.nvlink_domain's default)
NETWORK_BANDWIDTH = 50e9       # B/s a GPU between nodes: one 400 Gb/s InfiniBand / RoCE NIC per GPU


def group_link(link_bandwidth: float, group: int, domain: int = GPUS_PER_NODE) -> float:
    """Bytes/s one way in a collective over ``group`` GPUs: ``link_bandwidth`` within a domain
    of ``domain`` GPUs, else :data:`NETWORK_BANDWIDTH`."""
    return link_bandwidth if group <= domain else NETWORK_BANDWIDTH


@dataclass(frozen=True)
class GPU:
    """One accelerator's peaks.

    ``flops``: dense BF16 tensor FLOP/s (no sparsity); ``bandwidth``: HBM bytes/s;
    ``memory``: bytes as the card reports them to torch (``total_memory``, what vLLM's memory
    profile starts from: an "80 GB" H100 reports 79.22 GiB, vLLM's own log); ``nvlink_bandwidth``:
    bytes/s one way between two GPUs (PCIe for cards without NVLink), for the tensor-parallel
    all-reduce; ``fp8``: native FP8 tensor cores (FP8 weights double ``flops``; without them
    vLLM runs FP8 weight-only and only the bytes halve); ``flash_attn``: the FlashAttention
    version vLLM's default attention backend runs there (``fa_utils.get_flash_attn_version``,
    0.15.1 and 0.34 alike: 3 on SM 9.0, 2 on SM 8.x; 0: another backend, FlashInfer on SM 10.0,
    ROCm's on the MI300X), whose decode kernel reads the KV cache at an efficiency of its own;
    ``fp4``: native FP4 tensor cores (NVFP4 weights and activations at 4x ``flops``; without
    them vLLM runs NVFP4 weight-only); ``nvlink_domain``: how many GPUs ``nvlink_bandwidth``
    joins (an HGX node's 8; a GB200 NVL72 rack's 72; an H100 NVL bridge's pair): a collective
    over more crosses :data:`NETWORK_BANDWIDTH` (:meth:`link_for`); ``sm``: the compute
    capability x 10 (90 Hopper, 100 Blackwell; 0 for AMD), which picks vLLM's MLA kernels."""

    name: str
    flops: float
    bandwidth: float
    memory: int
    nvlink_bandwidth: float
    fp8: bool = True
    flash_attn: int = 3
    fp4: bool = False
    nvlink_domain: int = GPUS_PER_NODE
    sm: int = 90

    def link_for(self, group: int) -> float:
        """Bytes/s one way in a collective over ``group`` GPUs (:func:`group_link`)."""
        return group_link(self.nvlink_bandwidth, group, self.nvlink_domain)

    @property
    def memory_gib(self) -> float:
        """``memory`` in GiB (2**30 bytes), as vLLM logs it."""
        return self.memory / GiB


def _gib(x: float) -> int:
    return int(x * GiB)


# Peaks: docs/engine-model.md §3 for H100 SXM, H200, A100 SXM 80/40 GB and L40S; the others the
# vendors' datasheets (dense BF16 tensor FLOP/s, half the "with sparsity" figure).
# memory: torch's totals (vLLM's "total_gpu_memory"; H100 79.22 GiB from vLLM's log, others nvidia-smi's less ~0.5 GiB).
# nvlink_bandwidth one way: NVLink 4 450 GB/s (H800's cut to 200), NVLink 3 300 GB/s (A800's 200), NVLink 5
# 900 GB/s, MI300X / MI325X Infinity Fabric 7 x 64 GB/s, MI355X 7 x 76.8 GB/s, H100 NVL's bridge 300 GB/s (a
# pair), PCIe cards (L4, A10, L40, L40S) PCIe 4.0 x16 32 GB/s, H100 PCIe PCIe 5.0 x16 64 GB/s.
GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("H100", 989.4e12, 3.35e12, _gib(79.22), 450e9),
    GPU("H200", 989.4e12, 4.8e12, _gib(139.8), 450e9),
    GPU("A100-80GB", 312e12, 2.039e12, _gib(79.15), 300e9, fp8=False, flash_attn=2, sm=80),
    GPU("A100-40GB", 312e12, 1.555e12, _gib(39.39), 300e9, fp8=False, flash_attn=2, sm=80),
    GPU("L40S", 362e12, 0.864e12, _gib(44.4), 32e9, flash_attn=2, sm=89),
    GPU("MI300X", 1307.4e12, 5.3e12, _gib(191.5), 448e9, flash_attn=0, sm=0),
    GPU("B200", 2250e12, 8.0e12, _gib(178.4), 900e9, flash_attn=0, fp4=True, sm=100),
    # datasheet-only cards: no measurement of their own (the generic profile times them)
    GPU("H100-PCIe", 756e12, 2.0e12, _gib(79.22), 64e9),
    GPU("H100-NVL", 835.5e12, 3.9e12, _gib(93.15), 300e9, nvlink_domain=2),
    GPU("H20", 148e12, 4.0e12, _gib(95.15), 450e9),
    GPU("H800", 989.4e12, 3.35e12, _gib(79.22), 200e9),
    GPU("A800-80GB", 312e12, 2.039e12, _gib(79.15), 200e9, fp8=False, flash_attn=2, sm=80),
    GPU("GB200", 2500e12, 8.0e12, _gib(184.6), 900e9, flash_attn=0, fp4=True, nvlink_domain=72, sm=100),
    GPU("L4", 121e12, 0.3e12, _gib(22.05), 32e9, flash_attn=2, sm=89),
    GPU("L40", 181e12, 0.864e12, _gib(44.4), 32e9, flash_attn=2, sm=89),
    GPU("A10", 125e12, 0.6e12, _gib(22.05), 32e9, fp8=False, flash_attn=2, sm=86),
    GPU("MI325X", 1307.4e12, 6.0e12, _gib(255.5), 448e9, flash_attn=0, sm=0),
    GPU("MI355X", 2516.6e12, 8.0e12, _gib(287.5), 537.6e9, flash_attn=0, sm=0),
)}
_ALIASES = {"h100-sxm": "H100", "h100-80gb": "H100", "h100-sxm5": "H100", "h100-sxm-80gb": "H100", "h200-sxm": "H200",
            "h200-141gb": "H200", "a100": "A100-80GB", "a100-sxm": "A100-80GB", "a100-sxm-80gb": "A100-80GB",
            "a100-80g": "A100-80GB", "a100-40g": "A100-40GB", "a100-sxm-40gb": "A100-40GB", "l40s-48gb": "L40S",
            "mi300x-192gb": "MI300X", "b200-180gb": "B200", "h100-pcie-80gb": "H100-PCIe", "h100-nvl-94gb": "H100-NVL",
            "h20-96gb": "H20", "gb200-nvl72": "GB200", "l4-24gb": "L4", "l40-48gb": "L40", "a10-24gb": "A10",
            "mi325x-256gb": "MI325X", "mi355x-288gb": "MI355X", "h800-sxm": "H800", "a800": "A800-80GB"}
_BY_LOWER = {**{k.lower(): k for k in GPUS}, **_ALIASES}


def gpu_by_name(name: str) -> GPU:
    """The GPU named ``name`` (``--gpu``; case-insensitive, ``_`` and spaces read as ``-``) or described in
    JSON (:mod:`.custom_gpu`).  Raises ConfigError listing the choices."""
    from .custom_gpu import DESCRIBE, gpu_fields, is_gpu_description
    if is_gpu_description(name):
        f = gpu_fields(name)
        return GPU(memory=int(f.pop("memory_gib") * GiB), **f)
    key = _BY_LOWER.get(str(name).strip().lower().replace("_", "-").replace(" ", "-"))
    if key is None:
        raise ConfigError(f"--gpu: unknown GPU {name!r}; choose one of {', '.join(GPUS)} (aliases: "
                          f"{', '.join(sorted(_ALIASES))}), or describe it in JSON: {DESCRIBE}", param="gpu")
    return GPUS[key]


def batch_defaults(gpu: GPU) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` vLLM's OpenAI server picks for ``gpu``
    (``engine/arg_utils.py`` ``get_batch_defaults``, docs/engine-model.md §1 and §7): (16384,
    1024) on cards of 160 GiB and more (B200, MI300X), (8192, 1024) on cards of 70 GiB and more
    that are not A100s, else (2048, 256)."""
    if gpu.memory >= 160 * GiB:
        return 16384, 1024
    if gpu.memory >= 70 * GiB and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


# ---------------------------------------------------------------------------------------------
# Bytes per linear weight for --quantization ("" = the checkpoint's own, else the model dtype).
# 4-bit: 0.5 byte plus one FP16 scale per group of 128; MXFP4: 4 bits plus one 8-bit shared
# exponent per block of 32 (OCP microscaling), on the MoE experts only; NVFP4: 4 bits plus an
# FP8 scale per 16.
QUANTIZATIONS = {"fp8": 1.0, "fbgemm_fp8": 1.0, "awq": 0.5 + 2 / 128, "gptq": 0.5 + 2 / 128,
                 "awq_marlin": 0.5 + 2 / 128, "gptq_marlin": 0.5 + 2 / 128, "int4": 0.5 + 2 / 128,
                 "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16, "modelopt_fp4": 0.5 + 1 / 16}
# 4-bit floats with an FP8 scale per 16 (NVFP4): W4A4 on FP4 tensor cores (4x BF16's FLOP/s on
# the B200), weight-only elsewhere (Marlin, at BF16's)
FP4_METHODS = frozenset({"nvfp4", "modelopt_fp4"})
# methods that quantize the routed experts alone: gpt-oss's checkpoints keep attention, the
# router, the embedding and the lm_head in BF16 (their ``modules_to_not_convert``), and vLLM's
# Mxfp4MoEMethod runs the experts weight-only (dequantized to BF16 in the GEMM) on Hopper
EXPERTS_ONLY = frozenset({"mxfp4"})
KV_CACHE_DTYPES = {"auto": 0, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1,
                   "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "fp8_per_token_head": 1,
                   "int8_per_token_head": 1}


def _quantization(arch: ModelArch, quantization: str) -> str:
    q = (quantization or "").strip().lower()
    if q in ("", "none", "auto"):
        q = arch.quantization
    if q and q not in QUANTIZATIONS:
        raise ConfigError(f"--quantization: {quantization!r} is not modelled; choose one of "
                          f"{', '.join(QUANTIZATIONS)} or leave it unset", param="quantization")
    return q


def linear_weight_bytes(arch: ModelArch, quantization: str = "") -> float:
    """Bytes per non-embedding linear weight outside the routed experts: the model dtype's, 1
    for FP8, ~0.52 for 4-bit; the dtype's for a method that quantizes the experts alone
    (:data:`EXPERTS_ONLY`).  ``quantization`` "" uses the checkpoint's own
    (``arch.quantization``).  Raises ConfigError for a method not modelled."""
    q = _quantization(arch, quantization)
    return QUANTIZATIONS[q] if q and q not in EXPERTS_ONLY else float(arch.dtype_bytes)


def expert_weight_bytes(arch: ModelArch, quantization: str = "") -> float:
    """Bytes per routed-expert weight: :func:`linear_weight_bytes`, or the method's own for one
    of :data:`EXPERTS_ONLY`: MXFP4's 0.53125, times the padding of vLLM's Hopper MXFP4 MoE
    kernels, which round the experts' hidden dimension up to a multiple of 256 (gpt-oss:
    2,880 -> 3,072; with it gpt-oss-120b's weights come to 64.47 GiB, where vLLM 0.14 logged
    "Model loading took 64.38 GiB", without it 60.69).  Raises ConfigError as it does."""
    q = _quantization(arch, quantization)
    if q == "mxfp4":
        return QUANTIZATIONS[q] * (-(-arch.hidden_size // 256) * 256) / arch.hidden_size
    return QUANTIZATIONS[q] if q else float(arch.dtype_bytes)


def routed_expert_params(arch: ModelArch) -> int:
    """Parameters of all the routed experts (every MoE layer's; 0 for a dense model)."""
    if not arch.is_moe:
        return 0
    return (arch.num_layers - arch.dense_layers) * arch.num_experts * arch.expert_params


def weight_bytes(arch: ModelArch, quantization: str = "") -> int:
    """All the model's weight bytes in memory (every expert; embedding and an untied lm_head
    stay in the model dtype, as vLLM's quantized linear methods leave them).  Llama-3.1-8B in
    BF16: 16,059,990,016 B = 14.96 GiB, vLLM's "model weights take 14.96GiB"; gpt-oss-120b
    (MXFP4 experts, :func:`expert_weight_bytes`): 64.47 GiB against the 64.38 vLLM 0.14 logs."""
    experts = routed_expert_params(arch)
    lin = ((arch.n_lin_total - experts) * linear_weight_bytes(arch, quantization)
           + experts * expert_weight_bytes(arch, quantization))
    embed = (arch.n_embed + (0 if arch.tie_word_embeddings else arch.n_head)) * arch.dtype_bytes
    return int(lin + embed)


def weight_bytes_per_gpu(arch: ModelArch, quantization: str = "", tp: int = 1, dp: int = 1,
                         ep: bool = False) -> float:
    """One tensor-parallel rank's weight bytes: :func:`weight_bytes` / ``tp``, plus the rest of
    the parameters every rank holds whole (:attr:`ModelArch.replicated_params`: DeepSeek-V3 at
    TP 8, 0.75 GiB more than an eighth).  A MoE model's routed experts are shared out over the
    MoE group of :func:`moe_shards` GPUs (all TP x DP ranks under data parallelism: vLLM's
    ``FusedMoEParallelConfig``), a slice of each, or with ``ep`` (``--enable-expert-parallel``)
    :func:`local_experts` whole."""
    per = (weight_bytes(arch, quantization)
           + arch.replicated_params * linear_weight_bytes(arch, quantization) * (tp - 1)) / tp
    if arch.is_moe and (dp > 1 or ep):
        experts = routed_expert_params(arch) * expert_weight_bytes(arch, quantization)
        per += experts * expert_share(arch, tp, dp, ep) - experts / tp
    return per


def expert_share(arch: ModelArch, tp: int, dp: int, ep: bool) -> float:
    """The share of a MoE model's routed experts one GPU holds: ``1 / (TP x DP)`` of each
    (:func:`moe_shards`), or with ``ep`` its :func:`local_experts` whole (the fullest GPU's)."""
    shards = moe_shards(arch, tp, dp)
    return local_experts(arch, shards) / arch.num_experts if ep else 1 / shards


def moe_shards(arch: ModelArch, tp: int, dp: int) -> int:
    """GPUs a MoE model's routed experts are shared out over: TP x DP with data parallelism
    (vLLM 0.34's ``FusedMoEParallelConfig.make`` flattens TP across DP, with or without expert
    parallelism), else TP; ``tp`` for a dense model."""
    return tp * dp if arch.is_moe and dp > 1 else tp


def moe_group_terms(arch: ModelArch, quantization: str, tp: int, dp: int, ep: bool, link_bandwidth: float,
                    backend: str = "allgather_reducescatter", domain: int = GPUS_PER_NODE) -> tuple[float, float, int, float]:
    """A MoE model's step terms on one GPU of its MoE group (:func:`moe_shards`: TP x DP GPUs
    under data parallelism), each of the ``dp`` replicas taken to carry this one's load (vLLM's
    DP ranks step together, each with its own batch; a planning model):

    - ``bytes_experts``: the GPU's share of the routed experts (a slice of each, or with ``ep``
      its :func:`local_experts` whole);
    - ``untouched``: the chance that one of this replica's tokens, with its ``dp - 1`` twins in
      the other replicas, routes to none of a given expert, ``(1 - k / E) ^ dp``: every token of
      the group reaches the GPU holding its experts;
    - ``ops``, ``per_token``: :func:`collective_terms` (``backend``: ``--all2all-backend``)."""
    bytes_experts = routed_expert_params(arch) * expert_share(arch, tp, dp, ep) * expert_weight_bytes(arch, quantization)
    untouched = (1.0 - arch.experts_per_token / arch.num_experts) ** dp
    return (bytes_experts, untouched) + collective_terms(arch, tp, link_bandwidth, dp=dp, ep=ep, backend=backend, domain=domain,
                                                         quantization=quantization)


# vLLM 0.34's --all2all-backend values whose expert-parallel kernels send each token to its
# top_k experts' GPUs and back (DeepEP, MORI, Moon EP, NIXL EP, FlashInfer's); the others
# (allgather_reducescatter, the default, and naive / pplx, which fall back to it) gather
DISPATCH_BACKENDS = ("deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori", "mori_high_throughput",
                     "mori_low_latency", "moonep", "nixl_ep", "flashinfer_all2allv", "flashinfer_nvlink_one_sided",
                     "flashinfer_nvlink_two_sided")


def collective_terms(arch: ModelArch, tp: int, link_bandwidth: float, *, dp: int = 1, ep: bool = False,
                     backend: str = "allgather_reducescatter", quantization: str = "",
                     domain: int = GPUS_PER_NODE) -> tuple[int, float]:
    """``(ops, per_token)``: a step's collectives on one GPU, mean link time a token (s, at the
    full ``link_bandwidth``): TP's two all-reduces a layer (``tp`` > 1; a MoE layer's an all-gather
    with EP under DP, vLLM's sequence-parallel MoE); a MoE model under DP: two more a MoE layer,
    its tokens gathered from the ``dp - 1`` other replicas and reduce-scattered back (vLLM 0.34's
    default ``allgather_reducescatter``, EP or not), or with EP and one of :data:`DISPATCH_BACKENDS`
    this GPU's ``1 / tp`` of the tokens dispatched to their ``top_k`` experts (low-latency kernels:
    a copy an expert; others a copy a GPU; DeepEP's high-throughput ones past a node a copy a node
    over the network, then NVLink), FP8 for FP8 weights (``quantization``), and combined back;
    over :data:`NETWORK_BANDWIDTH` past ``domain`` GPUs (``GPU.nvlink_domain``)."""
    kinds = []                                  # (ops, link time per token of one op)
    group = arch.is_moe and dp > 1
    moe_layers = arch.num_layers - arch.dense_layers
    if tp > 1:
        ar_tok = arch.hidden_size * 2 * 2 * (tp - 1) / tp / group_link(link_bandwidth, tp, domain)
        if group and ep:            # sequence-parallel MoE: its layers' TP all-reduce is an all-gather
            kinds += [(arch.num_layers + arch.dense_layers, ar_tok), (moe_layers, ar_tok / 2)]
        else:
            kinds.append((2 * arch.num_layers, ar_tok))
    if group:
        kinds.append(exchange_terms(arch, tp, link_bandwidth, dp=dp, ep=ep, backend=backend, domain=domain,
                                    quantization=quantization))
    if len(kinds) == 1:
        return kinds[0]
    ops = sum(n for n, _ in kinds)
    return ops, (sum(n * t for n, t in kinds) / ops if ops else 0.0)


def exchange_terms(arch: ModelArch, tp: int, link_bandwidth: float, *, dp: int, ep: bool = False,
                   backend: str = "allgather_reducescatter", quantization: str = "",
                   domain: int = GPUS_PER_NODE) -> tuple[int, float]:
    """``(ops, per_token)`` of a MoE model's exchange under data parallelism, the part of
    :func:`collective_terms` beyond TP's all-reduces: two collectives a MoE layer (see there)."""
    moe_layers = arch.num_layers - arch.dense_layers
    link = group_link(link_bandwidth, tp * dp, domain)
    if ep and backend in DISPATCH_BACKENDS:
        size, k = tp * dp, arch.experts_per_token
        # low-latency kernels send a token to each of its experts; the others to each GPU
        # holding one of them, once (the expected distinct GPUs of k experts over the group)
        copies = k if "low_latency" in backend else min(k, size * (1 - (1 - 1 / size) ** k))
        dispatch = 1.0 if linear_weight_bytes(arch, quantization) == 1.0 else arch.dtype_bytes   # FP8 kernels: FP8
        copy = arch.hidden_size * (dispatch + arch.dtype_bytes) / 2 / tp    # a copy's bytes an op, a value each way
        if backend == "deepep_high_throughput" and size > domain:
            # DeepEP's normal kernels: over the network once to each other node holding an expert, then NVLink
            nodes = -(-size // domain)
            remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)
            return 2 * moe_layers, copy * (remote / NETWORK_BANDWIDTH + copies / link_bandwidth)
        return 2 * moe_layers, copies * copy * (size - 1) / size / link
    return 2 * moe_layers, (dp - 1) * arch.hidden_size * arch.dtype_bytes / link


def dcp_gather_per_token(arch: ModelArch, tp: int, dcp: int, link_bandwidth: float,
                         domain: int = GPUS_PER_NODE) -> tuple[int, float]:
    """``(ops, per_token)`` of DCP's decode attention (``dcp`` > 1, vLLM's decode context
    parallelism): each rank attends every head of its group over its share of the context, so
    per layer a decode token's query heads are gathered from the ``dcp - 1`` other ranks and its
    partial outputs (with their log-sum-exps) reduce-scattered back: vLLM 0.34's default
    ``ag_rs``, three collectives a layer for MLA, two for GQA (s per decode token of one, their
    mean, at the full ``link_bandwidth``).  ``(0, 0.0)`` without DCP."""
    if dcp <= 1:
        return 0, 0.0
    qk, v = ((arch.kv_lora_rank + arch.qk_rope_head_dim, arch.kv_lora_rank) if arch.is_mla
             else (arch.head_dim, arch.head_dim))
    ops = (3 if arch.is_mla else 2) * arch.num_layers
    link = group_link(link_bandwidth, tp, domain)
    return ops, arch.num_layers * arch.num_heads / tp * (qk + v) * arch.dtype_bytes * (dcp - 1) / link / ops


def local_experts(arch: ModelArch, ep: int) -> int:
    """Routed experts one rank of an expert-parallel group of ``ep`` holds: the most any rank
    does (vLLM's ``determine_expert_map`` gives the first ``E mod ep`` ranks one more)."""
    return -(-arch.num_experts // ep)


def kv_bytes_per_token(arch: ModelArch, kv_cache_dtype: str = "auto", tp: int = 1, dcp: int = 1) -> int:
    """KV-cache bytes per token on one GPU (docs/engine-model.md §2):
    ``2 x layers x kv_heads/tp x head_dim x bytes``, bytes 1 for an fp8 ``--kv-cache-dtype``,
    the model dtype's for ``auto``.  With fewer KV heads than ``tp`` each GPU holds one
    (vLLM replicates them).  Llama-3.1-8B BF16, tp 1: 131,072 (128 KiB).  Raises ConfigError for
    an unknown dtype.  MLA (DeepSeek-V3): ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``,
    the compressed KV, which every tensor-parallel rank holds whole: 70,272 in BF16; a sparse-MLA
    model's indexer keys besides (:func:`indexer_key_bytes`).

    ``dcp`` > 1 (``--decode-context-parallel-size``, vLLM 0.34's DCP: ``dcp`` of the TP ranks
    each keep every ``dcp``-th token of a sequence): a GPU holds ``1 / dcp`` of each token's
    KV, of the heads its ``tp / dcp`` head group owns (an MLA latent, whole on every rank
    without DCP, is split ``dcp`` ways): the bytes per token, rounded up.  A KV block then
    spans ``block_size x dcp`` tokens (vLLM's ``resolve_dcp_kv_block_size``)."""
    key = (kv_cache_dtype or "auto").strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise ConfigError(f"--kv-cache-dtype: unknown {kv_cache_dtype!r}; choose one of "
                          f"{', '.join(KV_CACHE_DTYPES)}", param="kv-cache-dtype")
    nbytes = KV_CACHE_DTYPES[key] or arch.dtype_bytes
    if arch.is_mla:         # one latent per token and layer, on every rank (MLAAttentionSpec)
        return -(-arch.num_layers * (mla_latent_bytes(arch, nbytes) + indexer_key_bytes(arch)) // dcp)
    kv_heads = max(1, arch.num_kv_heads // max(1, tp // dcp))
    return -(-2 * arch.num_layers * kv_heads * arch.head_dim * nbytes // dcp)


def mla_latent_bytes(arch: ModelArch, nbytes: int) -> int:
    """Bytes of one token's compressed KV in one MLA layer at ``nbytes`` per element: ``(kv_lora_rank
    + rope) x nbytes``; for sparse MLA in FP8, vLLM's ``fp8_ds_mla`` layout (the latent in FP8
    with four FP32 scales, the rope part in BF16: 656 for DeepSeek-V3.2)."""
    if arch.is_sparse_mla and nbytes == 1:
        return arch.kv_lora_rank + arch.kv_lora_rank // 128 * 4 + arch.qk_rope_head_dim * 2
    return (arch.kv_lora_rank + arch.qk_rope_head_dim) * nbytes


def indexer_key_bytes(arch: ModelArch) -> int:
    """Bytes of one token's indexer key in one sparse-MLA layer (vLLM's DeepseekV32IndexerCache:
    FP8 values and an FP32 scale per 128, 132 for a 128-wide key; 0 without DSA)."""
    if not arch.is_sparse_mla:
        return 0
    return arch.index_head_dim + arch.index_head_dim // 128 * 4


def mla_block_size(gpu: GPU, arch: ModelArch, block_size: int) -> int:
    """The KV block size vLLM runs an MLA model with (``CudaPlatform.check_and_update_config``):
    its MLA backends force theirs, FlashMLA (SM 9.0: H100, H200) and sparse MLA a multiple of 64,
    CUTLASS MLA (SM 10.0: B200, GB200) of 128 ("Forcing kv cache block size to 64 for FlashMLA backend");
    ``block_size`` unchanged for other models and GPUs (Triton MLA on the A100)."""
    if not arch.is_mla:
        return block_size
    need = 64 if (gpu.flash_attn == 3 or arch.is_sparse_mla) else 128 if gpu.sm == 100 else 0
    return need if need and block_size % need else block_size


def check_tensor_parallel(arch: ModelArch, tp: int) -> None:
    """vLLM's start-up check: attention heads divisible by ``tp``, and KV heads either
    divisible by ``tp`` or dividing it.  Raises ConfigError naming --tensor-parallel-size."""
    if tp < 1:
        raise ConfigError(f"--tensor-parallel-size must be >= 1, got {tp}",
                          param="tensor-parallel-size")
    if arch.num_heads % tp:
        raise ConfigError(f"Total number of attention heads ({arch.num_heads}) must be divisible "
                          f"by tensor parallel size ({tp}).", param="tensor-parallel-size")
    if arch.num_kv_heads % tp and tp % arch.num_kv_heads:
        raise ConfigError(f"Total number of KV heads ({arch.num_kv_heads}) and tensor parallel "
                          f"size ({tp}) must divide one another.", param="tensor-parallel-size")


# What vLLM's memory profile takes besides the weights and the KV cache, per GPU, fitted by
# ``python -m generation.engine.perf.fit --memory`` (least squares) to the KV block counts vLLM
# logged in 11 H100 runs and docs/engine-model.md §2's worked example (RMS error 0.18 GiB, under
# 1% of the blocks):
#   non-torch memory                 NON_TORCH_TP1, plus NON_TORCH_TP_EXTRA when tp > 1 (NCCL)
#   the profile run's activations    ACTIVATION_BYTES x max_num_batched_tokens x hidden
#   the sampler's warm-up logits     LOGITS_BYTES x max_num_seqs x vocab / tp
# (the llm-d planner's 5.5 GiB activation constant left 8-29% too few blocks).
NON_TORCH_TP1 = 0.6687 * GiB
NON_TORCH_TP_EXTRA = 0.2454 * GiB
ACTIVATION_BYTES = 7.322
LOGITS_BYTES = 27.42


def profile_overhead(arch: ModelArch, *, tp: int = 1, max_num_batched_tokens: int = 8192,
                     max_num_seqs: int = 1024) -> float:
    """Bytes per GPU that vLLM's start-up memory profile finds in use besides the weights:
    non-torch memory, the dummy run's activation peak and the sampler's logits (fitted constants
    above)."""
    return NON_TORCH_TP1 + (NON_TORCH_TP_EXTRA if tp > 1 else 0.0) + sum(
        batch_profile_bytes(arch, tp=tp, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs))


def batch_profile_bytes(arch: ModelArch, *, tp: int, max_num_batched_tokens: int,
                        max_num_seqs: int) -> tuple[float, float]:
    """The batch limits' share of :func:`profile_overhead`, bytes per GPU: ``(the dummy run's
    activation peak, the sampler's logits)``."""
    return (ACTIVATION_BYTES * max_num_batched_tokens * arch.hidden_size,
            LOGITS_BYTES * max_num_seqs * arch.vocab_size / tp)


def _tp_hint(arch: ModelArch, tp: int, budget: float, weights: float, quantization: str = "", dp: int = 1,
             ep: bool = False) -> str:
    """What to try when ``weights`` (bytes, all ranks') do not fit ``budget`` (bytes per GPU) at ``tp``: the
    smallest larger TP size, up to 64, that vLLM accepts (:func:`check_tensor_parallel`) whose :func:`weight_bytes_per_gpu`
    and start-up overhead fit; past a node's 8 GPUs, or where none fits, the PP size that fits at ``tp``."""
    stages = next((p for p in range(2, min(arch.num_layers, 64) + 1)
                   if weights / (tp * p) + profile_overhead(arch, tp=tp) < budget), None)
    pipeline = f"--pipeline-parallel-size {stages} at --tensor-parallel-size {tp}" if stages else ""
    t = tp + 1
    while t <= 64:
        try:
            check_tensor_parallel(arch, t)
        except ConfigError:
            t += 1
            continue
        if weight_bytes_per_gpu(arch, quantization, t, dp, ep) + profile_overhead(arch, tp=t) < budget:
            return f"try --tensor-parallel-size {t}" + (f", or {pipeline}" if pipeline and t > GPUS_PER_NODE else "")
        t += 1
    return f"try {pipeline}" if pipeline else "no tensor-parallel size up to 64 fits it"


def available_kv_memory(gpu: GPU, arch: ModelArch, *, tp: int = 1,
                        gpu_memory_utilization: float = 0.9, quantization: str = "",
                        max_num_batched_tokens: int = 8192, max_num_seqs: int = 1024, dp: int = 1,
                        ep: bool = False) -> float:
    """Bytes left for the KV cache on one GPU (docs/engine-model.md §2): ``memory x
    utilization - weights / tp - profile overhead`` (:func:`profile_overhead`); ``dp``, ``ep``:
    a MoE model's experts shared out (:func:`weight_bytes_per_gpu`).  May be <= 0; raises
    ConfigError only when the weights alone do not fit."""
    check_tensor_parallel(arch, tp)
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got "
                          f"{gpu_memory_utilization}", param="gpu-memory-utilization")
    budget = gpu.memory * gpu_memory_utilization
    weights = weight_bytes_per_gpu(arch, quantization, tp, dp, ep)
    if weights >= budget:
        total = weights * tp if moe_shards(arch, tp, dp) == tp and not ep else weight_bytes(arch, quantization)
        raise ConfigError(
            f"{arch.name or 'the model'} ({weights / GiB:.2f} GiB of weights per GPU) does not fit "
            f"on {gpu.name} ({gpu.memory_gib:.2f} GiB x {gpu_memory_utilization} = "
            f"{budget / GiB:.2f} GiB), {_tp_hint(arch, tp, budget, total, quantization, dp, ep)}", param="gpu")
    return budget - weights - profile_overhead(arch, tp=tp, max_num_batched_tokens=max_num_batched_tokens,
                                               max_num_seqs=max_num_seqs)


def kv_cache_blocks(gpu: GPU, arch: ModelArch, *, tp: int = 1, gpu_memory_utilization: float = 0.9,
                    kv_cache_dtype: str = "auto", quantization: str = "", block_size: int = 16,
                    max_num_batched_tokens: int = 8192, max_num_seqs: int = 1024,
                    max_model_len: int = 0, dp: int = 1, ep: bool = False, dcp: int = 1) -> int:
    """KV-cache blocks per GPU (all ranks of a tensor-parallel group hold the same number):
    ``floor(available / (block_size x kv_bytes_per_token))`` (docs/engine-model.md §2).

    Llama-3.1-8B BF16 on an H100: 25,953 blocks = 415,248 tokens; on an A100-40GB 7,600 blocks
    = 121,600 tokens.  A model with sliding-window layers, given ``max_model_len``, gets the
    blocks of :func:`hybrid_kv_tokens` instead.  Raises ConfigError when the weights do not fit
    ("... does not fit on ..., try --tensor-parallel-size") or nothing is left for the cache (as
    vLLM's "No available memory for the cache blocks")."""
    if block_size < 1:
        raise ConfigError(f"--block-size must be >= 1, got {block_size}", param="block-size")
    avail = available_kv_memory(gpu, arch, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                                quantization=quantization, max_num_batched_tokens=max_num_batched_tokens,
                                max_num_seqs=max_num_seqs, dp=dp, ep=ep)
    blocks = pool_blocks(arch, avail, block_size, kv_bytes_per_token(arch, kv_cache_dtype, tp, dcp), max_model_len)
    if blocks <= 0:
        # the batch limits' share of the start-up profile: a huge --max-num-seqs or
        # --max-num-batched-tokens is what to lower, not the memory to raise
        activation, logits = batch_profile_bytes(arch, tp=tp, max_num_batched_tokens=max_num_batched_tokens,
                                                 max_num_seqs=max_num_seqs)
        if activation + logits > -avail and max(activation, logits) > 4 * GiB:
            flag = "max-num-batched-tokens" if activation >= logits else "max-num-seqs"
            raise ConfigError(
                f"No available memory for the cache blocks: the start-up profile's activations for "
                f"--max-num-batched-tokens {max_num_batched_tokens} and --max-num-seqs {max_num_seqs} "
                f"({(activation + logits) / GiB:.2f} GiB) leave {avail / GiB:.2f} GiB for the cache of "
                f"{arch.name or 'the model'} on {gpu.name}; lower --{flag}", param=flag)
        raise ConfigError(
            f"No available memory for the cache blocks: {arch.name or 'the model'} on {gpu.name} "
            f"leaves {avail / GiB:.2f} GiB after weights and activations; raise "
            f"--gpu-memory-utilization or --tensor-parallel-size", param="gpu-memory-utilization")
    return blocks


def pool_blocks(arch: ModelArch, available: float, block_size: int, kv_bytes_per_token: int,
                max_model_len: int = 0) -> int:
    """KV blocks of ``block_size`` tokens that ``available`` bytes (per GPU) hold: ``available //
    (block_size x kv_bytes_per_token)``, or, for a model with sliding-window layers given
    ``max_model_len``, :func:`hybrid_kv_tokens`' blocks; 0 when nothing is available.  The
    memory model's and ``--kv-cache-memory-bytes``' count alike."""
    if available <= 0:
        return 0
    per_block = block_size * kv_bytes_per_token
    blocks = int(available // per_block)
    if blocks > 0 and arch.sliding_layers and max_model_len > 0:
        blocks = hybrid_kv_tokens(arch, available, per_block // arch.num_layers, block_size,
                                  max_model_len) // block_size
    return blocks


def hybrid_kv_tokens(arch: ModelArch, available: float, page_bytes: int, block_size: int,
                     max_model_len: int) -> int:
    """The KV capacity in tokens of a model with sliding-window layers under vLLM's hybrid KV
    cache manager, as the simulator's single pool of full-attention blocks takes it.

    vLLM groups the layers by attention type into groups of the smallest type's layer count;
    one pool of ``available / (page_bytes x group size)`` blocks (``page_bytes``: one layer's
    block) serves every group; a running request holds ``cdiv(len, block_size)`` blocks in each
    full group and, in each sliding group, only those its window covers, ``cdiv(window - 1,
    block_size) + 1`` (``SlidingWindowManager`` frees the blocks that leave the window).  The
    simulator's pool charges a request its full-attention blocks alone, so it is sized to hold
    as many ``max_model_len`` requests as vLLM's pool does: the pool over one such request's
    blocks in all groups, times ``max_model_len``.  gpt-oss-120b (18 full + 18 window layers of
    128 tokens, 16-token blocks): 1.97x the count that takes every layer as full attention at
    8,192 tokens, 2.00x at 131,072.  vLLM's own ``GPU KV cache size`` line counts a prefill
    chunk's ``max_num_batched_tokens`` in the window too (its worst case, 1.88x at 131,072 with
    8,192 batched), a peak a running request holds only for that step."""
    full, sliding = arch.full_attention_layers, arch.sliding_layers
    group = min(full, sliding) if full else sliding
    pool = int(available // (page_bytes * group))
    per_len = -(-max_model_len // block_size)
    window = min(arch.sliding_window - 1, max_model_len)
    per_request = (-(-full // group) * per_len
                   + -(-sliding // group) * min(per_len, -(-window // block_size) + 1))
    return int(pool / per_request * max_model_len)


def kv_cache_report(blocks: int, block_size: int, max_model_len: int) -> tuple[str, str]:
    """The two lines vLLM logs once the cache is sized (``_report_kv_cache_config``):
    ``GPU KV cache size: 415,248 tokens`` and ``Maximum concurrency for 131,072 tokens per
    request: 3.17x`` (blocks over the blocks one ``max_model_len`` request needs)."""
    per_request = -(-max(1, max_model_len) // block_size)
    return (f"GPU KV cache size: {blocks * block_size:,} tokens",
            f"Maximum concurrency for {max_model_len:,} tokens per request: "
            f"{blocks / per_request:.2f}x")


def check_max_model_len(blocks: int, block_size: int, max_model_len: int,
                        kv_bytes_per_token: int) -> None:
    """vLLM's start-up check that one ``max_model_len`` sequence fits in the cache (docs/
    engine-model.md §2; ``kv_cache_utils._check_enough_kv_cache_memory``, which counts every
    block, the pool's null block included).  Raises ConfigError with vLLM's message and its
    estimate of the longest length that fits; ``kv_bytes_per_token`` is per GPU (for the GiB
    figures)."""
    needed = -(-max_model_len // block_size)
    if needed <= blocks:
        return
    block_bytes = block_size * kv_bytes_per_token
    raise ConfigError(
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({needed * block_bytes / GiB:.2f} GiB KV cache is needed, which is larger than the "
        f"available KV cache memory ({blocks * block_bytes / GiB:.2f} GiB). Based on the available "
        f"memory, the estimated maximum model length is {blocks * block_size}. Try increasing "
        f"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "
        f"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        param="max-model-len")
