"""vLLM V1's step time and frontend on one GPU type, with constants fitted to real runs.

The step time is docs/engine-model.md §3's roofline plus the costs a real engine adds, each a
term of its own so that a fit can weigh it (:meth:`StepModel.terms`)::

    T = D + sum n_i (tokens), S = D + chunks (sequences), T' = T padded to a CUDA-graph size
    gemm   = smax(W_read / (eta_w BW), (2 N_lin (T' + m_half) + 2 N_head S) / (eta_f F))
    attn   = smax(4 layers heads head_dim pairs / (eta_a F),
                  kv_bytes_per_token (C_dec + sum p_i + T) / (eta_kv BW))
    smax(a, b) = (a^p + b^p)^(1/p),  p = ``overlap``
    comm   = 2 layers (t_ar + T hidden 2 B 2 (tp - 1) / tp / (eta_ar link_BW))       (tp > 1)
    fixed  = t_layer layers + t_moe moe_layers [+ t_fp8 layers] + t_vocab vocab S
    gpu    = fixed + gemm + attn + comm,   cpu = t0 + t_seq S
    step   = gpu + cpu - h min(gpu, cpu)  [+ kv_reload_tokens kv_bytes_per_token / PCIe]
             (with cpu_overlap p_c > 0: smax(gpu, cpu) at exponent p_c in place of the share h)

- ``W_read``: the weights one step reads, per GPU: the dense part and, for a MoE model, the
  experts its ``T`` tokens route to (expected distinct share ``1 - (1 - k/E)^T``, read at a
  bandwidth efficiency of their own, ``eta_moe``: the fused MoE kernels'); FP8 weights
  are one byte and, on GPUs with FP8 tensor cores, twice the FLOP/s; A100s run FP8 weight-only,
  at :data:`FP8_WEIGHT_ONLY_FLOPS` of the BF16 FLOP/s (fewer bytes, slower large batches);
- ``m_half``: a GEMM of ``M`` token rows reaches ``eta_f M / (M + m_half)`` of the peak
  FLOP/s (tile quantization and occupancy at small ``M``), so its compute time is that of
  ``M + m_half`` rows at ``eta_f``.  It matters where the FLOP/s are low against the bandwidth
  (A100: a decode batch of 32 is compute-heavier than on an H100, and steps grow faster with load);
- ``smax``: a kernel is bound by memory or by compute, but the two overlap imperfectly: the
  roofline's ``max`` (``p`` infinite) makes a decode step flat in the batch until the GEMMs turn
  compute-bound, where real steps grow all along; ``p`` is fitted;
- CUDA graphs: a batch of up to ``max_cudagraph_capture_size`` tokens runs padded to the next
  capture size (vLLM's ``cudagraph_capture_sizes``: 1, 2, 4, 8, then steps of 8 up to 256 and of
  16 beyond); ``--enforce-eager`` runs unpadded, with ``t_eager`` per layer of kernel launches;
- ``t0`` is the per-step CPU (scheduling, input preparation, sampling setup); ``t_seq`` grows it
  with the batch (BLIS measured 0.5-5 ms per step, its issue #482).  With async scheduling the
  engine prepares step k + 1 while the GPU runs step k, so the step takes a soft maximum of the
  GPU's and the CPU's time, ``smax(gpu, cpu)`` at the exponent ``cpu_overlap`` (fitted, 2.9 on
  the H100): a CPU much shorter than the step hides entirely, one near it adds partly (without
  async scheduling the two add up).  A profile with ``cpu_overlap`` 0 hides a fixed share ``h`` =
  ``cpu_hidden`` instead (the form of profiles before it; a fixed share left a per-sequence
  cost visible under Mixtral's 17 ms steps, and its ITL grew 25% too fast with the batch);
  ``t_vocab`` is the sampler's work per sampled row and vocabulary entry (the logits are gathered
  and sampled over the whole vocabulary on one rank: a 152k-vocabulary model pays ~5x a 32k one).

The frontend (:class:`Frontend`) is vLLM's API server: a fixed latency on the way in and out,
and one CPU that every request's preprocessing and every output token's detokenizing and
streaming share, first come first served, so that a burst reaches the engine over time.

With async scheduling (vLLM's default on CUDA since 0.14) the engine plans a step while the
previous one runs: a request that arrives during step k is scheduled in step k + 2 at the
earliest.  The replay and the live engine read :attr:`StepModel.async_scheduling`.

The constants (:class:`PerfConstants`) come from a profile per GPU in ``profiles/``, written by
``python -m generation.engine.perf.fit`` from real runs (README: Fidelity).  Times in seconds.
"""
from __future__ import annotations

import bisect
import functools
import json
import math
import os
from dataclasses import asdict, dataclass, fields, replace

from generation.config.values import ConfigError, parse_duration

# the engine's stalls, built here from the constants (tests and callers import them from here too)
from .stalls import (MOE_CONFIG_KEYS, EnginePauses, MoeJit, default_moe_tile, moe_kernel_variant,  # noqa: F401
                     moe_tile_table)

PROFILE_DIR = os.path.join(os.path.dirname(__file__), "profiles")
PCIE_BANDWIDTH = 25e9           # B/s: a CPU KV tier's reload (PCIe 4.0/5.0 x16, achieved)
# Share of BF16 GEMM throughput that weight-only FP8 (Marlin, dequantizing in the kernel) keeps
# once compute-bound, on GPUs without FP8 tensor cores.  A prior, not fitted: the data has no FP8
# run on such a GPU.
FP8_WEIGHT_ONLY_FLOPS = 0.75


@dataclass
class PerfConstants:
    """Efficiencies (fractions of a peak) and fixed costs (seconds) of one GPU type.

    ``eta_w``: HBM bandwidth reached reading weights; ``eta_f``: dense tensor FLOP/s reached by
    the GEMMs; ``eta_kv``: bandwidth reached reading the KV cache; ``eta_a``: FLOP/s reached by
    prefill attention; ``eta_kv_fa2``: the share of ``eta_kv`` that FlashAttention 2's decode kernel
    keeps, on GPUs where vLLM runs it (``GPU.flash_attn`` 2: A100, L40S; the fits' runs are FA3's
    H100s): the kernel table's FA2 against cuDNN (:func:`.fit_kernels.fa2_decode_share`); ``eta_ar``: link bandwidth reached by an all-reduce; ``eta_moe``: HBM
    bandwidth reached reading routed experts' weights (fused MoE kernels); ``overlap``: the
    exponent ``p`` of the memory / compute bound's soft maximum (>= 1); ``t0``, ``t_seq``,
    ``t_layer``, ``t_moe``: the fixed terms (per step, per scheduled sequence, per layer, per MoE
    layer); ``t_vocab``: per sampled row and vocabulary entry; ``t_fp8``: per layer, with FP8
    weights on FP8 tensor cores (the activations' dynamic quantization before each GEMM); ``t_ar``: fixed cost of one all-reduce; ``t_eager``: per layer without CUDA graphs;
    ``m_half``: GEMM rows (tokens) at which the GEMMs reach half of ``eta_f``;
    ``cpu_overlap``: with async scheduling, 0 (the default: ``cpu_hidden`` applies) or the exponent
    ``p`` of a soft maximum of the GPU's and the CPU's time in its place, ``smax(gpu, cpu)``: a CPU
    much shorter than the step hides entirely, where a fixed share leaves a per-sequence cost
    visible under steps of any length (README: Fidelity);
    ``cpu_hidden``: with async scheduling, the share of the per-step CPU (``t0 + t_seq S``) that
    the GPU's work hides (0: they add up; 1: the step takes the longer of the two);
    ``t_jit``: a MoE model's stall the first time a step runs a fused-MoE kernel variant that
    start-up did not compile (Triton's JIT; :class:`MoeJit`);
    ``pause_rate`` (per second) and ``t_pause`` (seconds): the engine's pauses, a Poisson process
    of host-side hiccups (a garbage collection, the scheduler's host thread descheduled) that
    hold every request in flight for ``t_pause`` (:class:`EnginePauses`);
    ``fe_in`` / ``fe_out``: the frontend's latency before the engine and after a step (the TTFT
    floor); ``fe_request``, ``fe_prompt_token``, ``fe_output_token``: its CPU per request, per
    prompt token (tokenizing) and per output token (detokenizing, streaming)."""

    eta_w: float = 0.80
    eta_f: float = 0.60
    eta_kv: float = 0.80
    eta_kv_fa2: float = 1.0
    eta_a: float = 0.50
    eta_ar: float = 0.60
    eta_moe: float = 0.80
    overlap: float = 4.0
    t0: float = 0.7e-3
    t_seq: float = 5e-6
    t_vocab: float = 1e-11
    t_layer: float = 20e-6
    t_moe: float = 30e-6
    t_fp8: float = 20e-6
    t_ar: float = 10e-6
    t_eager: float = 60e-6
    m_half: float = 0.0
    cpu_hidden: float = 0.0
    t_jit: float = 0.0
    pause_rate: float = 0.0
    t_pause: float = 0.0
    cpu_overlap: float = 0.0
    fe_in: float = 3e-3
    fe_out: float = 2e-3
    fe_request: float = 1.5e-3
    fe_prompt_token: float = 1e-6
    fe_output_token: float = 15e-6

    def validate(self, source: str = "performance profile") -> "PerfConstants":
        """Raises ConfigError for a non-positive efficiency or a negative time; returns self."""
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{source}: {f.name} must be a number, got {v!r}", param="step-time-profile")
            if f.name.startswith("eta_") and not 0 < v <= 1.5:
                raise ConfigError(f"{source}: {f.name} must be in (0, 1.5], got {v!r}", param="step-time-profile")
            if f.name == "cpu_hidden" and v > 1:
                raise ConfigError(f"{source}: cpu_hidden must be in [0, 1], got {v!r}", param="step-time-profile")
            if f.name == "cpu_overlap" and 0 < v < 1:
                raise ConfigError(f"{source}: cpu_overlap must be 0 or >= 1, got {v!r}", param="step-time-profile")
            if f.name == "overlap" and v < 1:
                raise ConfigError(f"{source}: overlap must be >= 1, got {v!r}", param="step-time-profile")
            if not f.name.startswith("eta_") and v < 0:
                raise ConfigError(f"{source}: {f.name} must be >= 0, got {v!r}", param="step-time-profile")
        if self.pause_rate * self.t_pause >= 0.5 or self.pause_rate > 1000:
            raise ConfigError(f"{source}: pause_rate x t_pause must be below 0.5 (the engine paused half the "
                              f"time) and pause_rate at most 1000, got {self.pause_rate!r} and {self.t_pause!r}",
                              param="step-time-profile")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


CONSTANT_NAMES = tuple(f.name for f in fields(PerfConstants))


BASIS_GPU = "H100"      # the GPU with training runs; the generic profile starts from its constants
GENERIC_PROFILE = "generic"   # profiles/generic.json: what a GPU without a profile of its own uses


def load_constants(gpu_name: str, path: str | None = None) -> tuple[PerfConstants, str]:
    """The fitted constants of ``gpu_name`` and the file they came from: ``path`` when given,
    else ``profiles/<gpu>.json``, else ``profiles/generic.json`` (the H100's constants with the
    median of the fitted GPUs' weight-read efficiencies, written by ``fit --generic``: a GPU
    never measured gets the middle of the measured ones, not the most efficient), else the
    H100's profile, else the defaults.  Raises ConfigError for an unreadable or invalid file."""
    file = path or os.path.join(PROFILE_DIR, f"{gpu_name.lower()}.json")
    if not os.path.isfile(file):
        if path:
            raise ConfigError(f"performance profile {path}: no such file", param="step-time-profile")
        for fallback in (GENERIC_PROFILE, BASIS_GPU):
            other = os.path.join(PROFILE_DIR, f"{fallback.lower()}.json")
            if gpu_name.lower() != fallback.lower() and os.path.isfile(other):
                return load_constants(fallback, other)[0], f"{other} (no profile of {gpu_name}'s own)"
        return PerfConstants(), "defaults"
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise ConfigError(f"performance profile {file}: cannot read ({e})", param="step-time-profile")
    values = data.get("constants", data) if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise ConfigError(f"performance profile {file}: expected an object of constants", param="step-time-profile")
    unknown = sorted(set(values) - set(CONSTANT_NAMES))
    if unknown:
        raise ConfigError(f"performance profile {file}: unknown constants {', '.join(unknown)}",
                          param="step-time-profile")
    return replace(PerfConstants(), **values).validate(f"performance profile {file}"), file


def default_max_cudagraph_capture_size(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's ``max_cudagraph_capture_size`` when the flag is not given (``VllmConfig.
    _set_cudagraph_sizes``): ``min(2 x max_num_seqs, 512)``, and no more than
    ``max_num_batched_tokens``.  With ``--max-num-seqs 128`` it is 256: mixed steps of 257-512
    tokens run without CUDA graphs, and a MoE model compiles their kernel variants at first use."""
    return max(1, min(2 * max_num_seqs, 512, max_num_batched_tokens))


def cudagraph_sizes(max_size: int = 512) -> list[int]:
    """vLLM's default ``cudagraph_capture_sizes`` up to ``max_size`` (``--max-cudagraph-capture-
    size``; without it :func:`default_max_cudagraph_capture_size`): 1, 2, 4, then multiples of 8
    to 256 and of 16 beyond."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += list(range(8, min(256, max_size) + 1, 8))
    sizes += list(range(272, max_size + 1, 16))
    return sizes


class StepModel:
    """Step time and frontend of one model on one GPU type (module docstring).

    ``gpu`` a :class:`~generation.engine.hardware.GPU`; ``arch`` a
    :class:`~generation.engine.model_arch.ModelArch`; ``tp`` the tensor-parallel size;
    ``quantization`` / ``kv_cache_dtype`` as the flags; ``constants`` (default: the GPU's fitted
    profile); ``enforce_eager`` (no CUDA graphs); ``cudagraph_capture_sizes`` (sorted sizes; None:
    vLLM's defaults up to ``max_cudagraph_capture_size``); ``async_scheduling``.  Raises
    ConfigError for an invalid tp or dtype.  ``step_time`` is plain float arithmetic (~2 us)."""

    profile_source = ""     # the profile's file, as the start-up banner names it (build_step_model)
    vllm_version = (0, 34, 0)   # the release whose kernels' defaults apply (resolve_step_settings sets it)

    def __init__(self, gpu, arch, *, tp: int = 1, quantization: str = "", kv_cache_dtype: str = "auto",
                 constants: PerfConstants | None = None, enforce_eager: bool = False,
                 cudagraph_capture_sizes: list[int] | None = None, max_cudagraph_capture_size: int = 512,
                 async_scheduling: bool = True, ep: bool = False, dp: int = 1, dcp: int = 1,
                 all2all_backend: str = "allgather_reducescatter") -> None:
        from .hardware import (FP4_METHODS, _quantization, check_tensor_parallel, dcp_gather_per_token,
                               expert_weight_bytes, indexer_key_bytes, kv_bytes_per_token, linear_weight_bytes,
                               moe_group_terms, moe_shards)
        c = constants if constants is not None else load_constants(gpu.name)[0]
        c.validate()
        check_tensor_parallel(arch, tp)
        self.gpu, self.arch, self.tp, self.constants = gpu, arch, tp, c
        self.async_scheduling = async_scheduling
        self.enforce_eager = enforce_eager
        self.kv_bytes_per_token = kv_bytes_per_token(arch, kv_cache_dtype, tp, dcp)     # dcp: a 1/dcp share
        self.graph_sizes = ([] if enforce_eager else sorted(cudagraph_capture_sizes)
                            if cudagraph_capture_sizes else cudagraph_sizes(max_cudagraph_capture_size))
        self.max_graph = self.graph_sizes[-1] if self.graph_sizes else 0
        # padded(n) for n <= max_graph, looked up (a replay's every step asks)
        self._pad = [0] + [self.padded(n) for n in range(1, self.max_graph + 1)]
        lin_bytes = linear_weight_bytes(arch, quantization)
        method = self.quantization = _quantization(arch, quantization)
        self.quantized = bool(method)
        self.fp8_weights = lin_bytes == 1.0
        # NVFP4 on FP4 tensor cores: W4A4 at 4x; elsewhere weight-only (Marlin) at BF16's rate
        fp4 = method in FP4_METHODS and gpu.fp4
        if self.fp8_weights:        # FP8 tensor cores double the FLOP/s; without them (A100)
            # vLLM runs FP8 weight-only (Marlin), dequantizing in the GEMM: slower than BF16 once
            # compute-bound
            f_lin = gpu.flops * (2.0 if gpu.fp8 else FP8_WEIGHT_ONLY_FLOPS)
        else:
            f_lin = gpu.flops * (4.0 if fp4 else 1.0)
        rep = arch.replicated_params * (tp - 1) / tp        # held and run whole on every rank
        n_lin, n_head = arch.n_lin / tp + rep, arch.n_head / tp
        head_bytes = n_head * arch.dtype_bytes
        if arch.is_moe:
            moe_layers = arch.num_layers - arch.dense_layers
            experts = moe_layers * arch.num_experts * arch.expert_params / tp
            dense = arch.n_lin_total / tp + rep - experts
            self.bytes_fixed = dense * lin_bytes + head_bytes
            self.bytes_experts = experts * expert_weight_bytes(arch, quantization)
            self._untouched = 1.0 - arch.experts_per_token / arch.num_experts
        else:
            moe_layers = 0
            self.bytes_fixed = n_lin * lin_bytes + head_bytes
            self.bytes_experts = 0.0
            self._untouched = 1.0
        self.moe_layers = moe_layers
        self.dp, self.ep = (dp, moe_shards(arch, tp, dp) if ep else 1) if moe_layers else (1, 1)    # moe_group_terms
        # layers that quantize their activations each step (W8A8, W4A4)
        self.fp8_layers = arch.num_layers if ((self.fp8_weights and gpu.fp8) or fp4) else 0
        self.flops_per_token = 2.0 * n_lin / f_lin          # s per token at 100% of the peak
        self.flops_per_row = 2.0 * n_head / gpu.flops       # the lm_head, per sampled row
        self.attn_per_pair = 4.0 * arch.num_layers * (arch.num_heads / tp) * arch.head_dim / gpu.flops
        # MLA: decode and prefill pairs cost differently (ModelArch.attn_flops_per_pair)
        self.attn_per_pair_decode = self.attn_per_pair_prefill = self.attn_per_pair
        if arch.is_mla:
            per_head = arch.num_layers * (arch.num_heads / tp) / gpu.flops
            self.attn_per_pair_decode = per_head * arch.attn_flops_per_pair(decode=True)
            self.attn_per_pair_prefill = per_head * arch.attn_flops_per_pair(decode=False)
        # sliding-window layers read at most ``window`` tokens of a sequence's context
        self.window = arch.sliding_window if arch.sliding_layers else 0
        self.window_share = arch.sliding_layers / arch.num_layers if self.window else 0.0
        # sparse MLA: each query attends ``index_topk`` tokens, chosen by an FP8 indexer that
        # scores every cached one (its heads on every rank); dense MLA: a prefill decompresses
        # its cached context's latents (kv_b_proj) before attending to them
        self.topk = arch.index_topk if arch.is_sparse_mla else 0
        index_bytes = arch.num_layers * indexer_key_bytes(arch) / dcp
        self.indexer_per_pair = (arch.num_layers * arch.index_n_heads * arch.index_head_dim * 2
                                 / (gpu.flops * (2.0 if gpu.fp8 else 1.0))) if self.topk else 0.0
        self.indexer_kv_per_token = index_bytes / gpu.bandwidth
        self.upproj_per_token = (arch.num_layers * 2 * arch.kv_lora_rank * (arch.num_heads / tp)
                                 * (arch.qk_nope_head_dim + arch.v_head_dim) / f_lin
                                 if arch.is_mla and not self.topk else 0.0)
        self.kv_per_token = (self.kv_bytes_per_token - index_bytes) / gpu.bandwidth
        self.all_reduces = 2 * arch.num_layers if tp > 1 else 0
        self.ar_per_token = (arch.hidden_size * 2 * 2 * (tp - 1) / tp / gpu.link_for(tp)) if tp > 1 else 0.0
        if self.dp > 1 or self.ep > 1:
            self.bytes_experts, self._untouched, self.all_reduces, self.ar_per_token = moe_group_terms(
                arch, quantization, tp, self.dp, self.ep > 1, gpu.nvlink_bandwidth, all2all_backend, gpu.nvlink_domain)
        self.dcp, (self.dcp_ops, self.dcp_per_token) = dcp, dcp_gather_per_token(arch, tp, dcp, gpu.nvlink_bandwidth,
                                                                                  gpu.nvlink_domain)
        self.reload_per_token = self.kv_bytes_per_token / PCIE_BANDWIDTH
        self._set_constants(c)

    def _set_constants(self, c: PerfConstants) -> None:
        bw = self.gpu.bandwidth
        self._w_fixed = self.bytes_fixed / (c.eta_w * bw)
        self._w_experts = self.bytes_experts / (c.eta_moe * bw)
        self._c_lin = self.flops_per_token / c.eta_f
        self._m_half = c.m_half
        self._c_head = self.flops_per_row / c.eta_f
        self._c_attn = self.attn_per_pair / c.eta_a
        eta_kv = c.eta_kv * (c.eta_kv_fa2 if self.gpu.flash_attn == 2 else 1.0)
        self._c_kv = self.kv_per_token / eta_kv
        self._c_attn_dec = self.attn_per_pair_decode / c.eta_a
        self._c_attn_pre = self.attn_per_pair_prefill / c.eta_a
        self._c_idx = self.indexer_per_pair / c.eta_a
        self._c_idx_kv = self.indexer_kv_per_token / eta_kv
        self._c_up = self.upproj_per_token / c.eta_f
        # the attention terms need their own arithmetic (_attention) for MLA or sliding windows
        self._split_attn = self.arch.is_mla or bool(self.window)
        self._comm0 = self.all_reduces * c.t_ar
        self._c_comm = self.all_reduces * self.ar_per_token / c.eta_ar
        self._dcp0, self._c_dcp = self.dcp_ops * c.t_ar, self.dcp_ops * self.dcp_per_token / c.eta_ar
        layers = self.arch.num_layers
        self._fixed = (c.t_layer * layers + c.t_moe * self.moe_layers + c.t_fp8 * self.fp8_layers
                       + (c.t_eager * layers if self.enforce_eager else 0.0))
        self._t_vocab = c.t_vocab * self.arch.vocab_size
        self._t0, self._t_seq = c.t0, c.t_seq
        self._hidden = c.cpu_hidden if self.async_scheduling else 0.0
        self._pc = c.cpu_overlap if self.async_scheduling else 0.0
        self._inv_pc = 1.0 / self._pc if self._pc else 0.0
        # the sum's own order of operations when nothing is hidden (results bit for bit as before)
        self._fixed_all = (c.t0 + c.t_layer * layers + c.t_moe * self.moe_layers + c.t_fp8 * self.fp8_layers
                           + (c.t_eager * layers if self.enforce_eager else 0.0))
        self._t_row = c.t_seq + self._t_vocab
        self._p = float(c.overlap)
        self._inv_p = 1.0 / self._p
        self._g_memo = {}                   # step_time's GEMM term by (padded, rows), for these constants

    def padded(self, tokens: int) -> int:
        """Tokens the GPU runs for a step of ``tokens``: the next CUDA-graph capture size, or
        ``tokens`` itself above the largest (and always with ``--enforce-eager``)."""
        if tokens > self.max_graph:
            return tokens
        sizes = self.graph_sizes
        return sizes[bisect.bisect_left(sizes, tokens)]

    def step_time(self, num_decode: int, decode_context: int, num_chunks: int, prefill_tokens: int,
                  prefill_pairs: float, prefill_context: int, kv_reload_tokens: int = 0, spec_tokens: int = 0,
                  spec_pairs: float = 0.0) -> float:
        """Seconds for one engine step (the aggregates of
        :class:`~generation.engine.scheduler.StepPlan`); 0.0 for an empty step.  ``spec_tokens``:
        the draft tokens its decodes verify (speculative decoding), each a GEMM row, a row of
        logits and a query whose attention pairs sum to ``spec_pairs``."""
        tokens = num_decode + prefill_tokens + spec_tokens
        if tokens <= 0:
            return 0.0
        rows = num_decode + num_chunks
        heads = rows + spec_tokens           # rows of logits: every draft position's too
        padded = tokens if tokens > self.max_graph else self._pad[tokens]
        p, q = self._p, self._inv_p          # smax(x, y) = max * (1 + (min / max)^p)^(1/p): no underflow
        key = padded * 1_000_003 + heads
        g = self._g_memo.get(key)            # the GEMM term depends on (padded, heads) alone
        if g is None:
            w = self._w_fixed
            if self._w_experts:
                w += self._w_experts * (1.0 - self._untouched ** padded)
            f = self._c_lin * (padded + self._m_half) + self._c_head * heads
            g = w * (1.0 + (f / w) ** p) ** q if w > f else f * (1.0 + (w / f) ** p) ** q
            if len(self._g_memo) < 100_000:
                self._g_memo[key] = g
        if self._split_attn:
            a, kv = self._attention(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs,
                                    prefill_context)
            if spec_tokens:                  # the drafts' queries: decode-kernel pairs, their KV written
                a += self._c_attn_dec * spec_pairs
                kv += self._c_kv * spec_tokens
        else:                                # _attention's plain case, inline on the hot path
            a = self._c_attn * (decode_context + prefill_pairs)
            kv = self._c_kv * (decode_context + prefill_context + tokens)
            if spec_tokens:
                a += self._c_attn * spec_pairs
        if a > kv:
            att = a * (1.0 + (kv / a) ** p) ** q
        else:
            att = kv * (1.0 + (a / kv) ** p) ** q if kv else 0.0
        if self._hidden or self._pc:
            gpu = self._fixed + self._t_vocab * heads + g + att + self._comm0 + self._c_comm * padded
            cpu = self._t0 + self._t_seq * rows
            if self._pc:                     # smax(gpu, cpu) at exponent cpu_overlap
                hi, lo = (gpu, cpu) if gpu > cpu else (cpu, gpu)
                t = hi * (1.0 + (lo / hi) ** self._pc) ** self._inv_pc
            else:
                t = gpu + cpu - self._hidden * (cpu if cpu < gpu else gpu)
        else:
            t = self._fixed_all + self._t_row * rows + g + att + self._comm0 + self._c_comm * padded
            if spec_tokens:
                t += self._t_vocab * spec_tokens
        if kv_reload_tokens:
            t += kv_reload_tokens * self.reload_per_token
        if self._c_dcp and num_decode:       # DCP's query gathers and output combines (decode attention)
            t += self._dcp0 + self._c_dcp * (num_decode + spec_tokens)
        return t

    def _attention(self, num_decode: int, decode_context: int, num_chunks: int, prefill_tokens: int,
                   prefill_pairs: float, prefill_context: int) -> tuple[float, float]:
        """The attention's FLOP and KV-read times (seconds) of a step.  MLA: decode pairs at the absorbed kernel's cost, prefill pairs at the
        decompressed heads', plus the decompression of a prefill's cached context; sparse MLA:
        the indexer over every cached token, the attention over at most ``index_topk`` of them
        per query.  Sliding windows: the window layers' share reads at most ``window`` tokens of
        each sequence's context and attends at most ``window`` keys per query.  From the step's
        sums a cap is ``min(sum, count x cap)``: exact when every sequence's context is on the
        same side of it, else an upper bound.  Other models: one FLOP and one read term over
        every pair and every context token (step_time inlines this case)."""
        tokens = num_decode + prefill_tokens
        if not self._split_attn:
            return (self._c_attn * (decode_context + prefill_pairs),
                    self._c_kv * (decode_context + prefill_context + tokens))
        extra = extra_kv = 0.0
        k = self.topk
        if k:
            extra = self._c_idx * (decode_context + prefill_pairs)
            extra_kv = self._c_idx_kv * (decode_context + prefill_context + tokens)
            decode_context = min(decode_context, num_decode * k)
            prefill_pairs = min(prefill_pairs, prefill_tokens * k)
        else:
            extra = self._c_up * prefill_context
        a = self._c_attn_dec * decode_context + self._c_attn_pre * prefill_pairs
        kv = self._c_kv * (decode_context + prefill_context + tokens)
        w = self.window
        if w:
            s = self.window_share
            dc = min(decode_context, num_decode * w)
            pairs = min(prefill_pairs, prefill_tokens * w)
            a = (1.0 - s) * a + s * (self._c_attn_dec * dc + self._c_attn_pre * pairs)
            kv = (1.0 - s) * kv + s * self._c_kv * (dc + min(prefill_context, num_chunks * w) + tokens)
        return a + extra, kv + extra_kv

    def terms(self, num_decode: int, decode_context: int, num_chunks: int, prefill_tokens: int,
              prefill_pairs: float, prefill_context: int) -> dict[str, float]:
        """The step's terms in seconds and which bound is active, for logs and docs."""
        tokens = num_decode + prefill_tokens
        padded = self.padded(tokens) if tokens else 0
        rows = num_decode + num_chunks
        w = self._w_fixed + self._w_experts * (1.0 - self._untouched ** padded)
        attn, kv = self._attention(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs,
                                   prefill_context)
        return {"fixed": self._fixed + self._t_vocab * rows, "cpu": self._t0 + self._t_seq * rows,
                "cpu_hidden": self._hidden, "cpu_overlap": self._pc, "weights": w, "overlap": self._p,
                "gemm_flops": self._c_lin * (padded + self._m_half) + self._c_head * rows,
                "attn_flops": attn, "kv_read": kv,
                "tp_comm": (self._comm0 + self._c_comm * padded) if tokens else 0.0,
                "total": self.step_time(num_decode, decode_context, num_chunks, prefill_tokens,
                                        prefill_pairs, prefill_context)}

    def pauses(self, rng) -> EnginePauses | None:
        """A new engine's :class:`EnginePauses`, drawn from ``rng`` (None with ``pause_rate`` or
        ``t_pause`` 0)."""
        c = self.constants
        if not (c.pause_rate > 0 and c.t_pause > 0):
            return None
        return EnginePauses(c.pause_rate, c.t_pause, rng)

    def moe_jit(self, max_num_batched_tokens: int) -> MoeJit | None:
        """A new engine's :class:`MoeJit` (None for a dense model or ``t_jit`` 0)."""
        c = self.constants
        if not (self.moe_layers and c.t_jit > 0):
            return None
        arch = self.arch
        # vLLM's tuned tiles exist for unquantized weights (no dtype suffix in the file name);
        # elsewhere its default tiles, which changed with the release
        # a rank's kernel runs a slice of every expert (TP x DP of them), or with EP its own experts whole
        from .hardware import local_experts
        experts, n = ((local_experts(arch, self.ep), arch.moe_intermediate_size) if self.ep > 1
                      else (arch.num_experts, arch.moe_intermediate_size // (self.tp * self.dp)))
        tiles = moe_tile_table(self.gpu.name, experts, n) if not self.quantized else None
        fp8 = self.fp8_weights
        default = functools.partial(default_moe_tile, num_experts=experts, version=self.vllm_version,
                                    fp8=fp8, block_quant=fp8 and arch.weight_block > 0)
        return MoeJit(c.t_jit, arch.experts_per_token, experts, self.graph_sizes, max_num_batched_tokens, tiles, default)

    def frontend_time(self) -> float:
        """The fixed frontend latency a request's first token carries (in + out), seconds."""
        return self.constants.fe_in + self.constants.fe_out

    def frontend(self) -> "Frontend":
        """A new :class:`Frontend` with this model's constants."""
        return Frontend(self.constants)


class Frontend:
    """vLLM's API server process as one first-come-first-served CPU (module docstring).

    :meth:`admit` returns when a request reaches the engine's queue; :meth:`emit` when a step's
    tokens reach the clients.  Both occupy the same CPU, so output streaming slows admission and
    a burst is admitted over ``n x (fe_request + prompt x fe_prompt_token)`` seconds.  Times are
    the caller's clock, seconds."""

    __slots__ = ("c", "free", "busy")

    def __init__(self, constants: PerfConstants) -> None:
        self.c = constants
        self.free = 0.0             # when the CPU is next idle
        self.busy = 0.0             # total CPU seconds used (utilisation = busy / elapsed)

    def admit(self, arrival: float, prompt_tokens: int) -> float:
        c = self.c
        cost = c.fe_request + c.fe_prompt_token * prompt_tokens
        start = self.free if self.free > arrival else arrival
        self.free = start + cost
        self.busy += cost
        return self.free + c.fe_in

    def emit(self, end: float, tokens: int) -> float:
        c = self.c
        cost = c.fe_output_token * tokens
        start = self.free if self.free > end else end
        self.free = start + cost
        self.busy += cost
        return self.free + c.fe_out


TIME_CONSTANTS = frozenset(n for n in CONSTANT_NAMES if n.startswith(("t_", "fe_")) or n == "t0")  # seconds, or "40ms"


def build_step_model(gpu, arch, *, tp: int = 1, quantization: str = "", kv_cache_dtype: str = "auto",
                     profile_path: str = "", enforce_eager: bool = False,
                     cudagraph_capture_sizes: list[int] | None = None, max_cudagraph_capture_size: int = 512,
                     async_scheduling: bool = True, **parallel):
    """The step-time model a configuration asks for (``--step-time-profile``, ``--gpu``, ...);
    ``parallel``: StepModel's ``ep``, ``dp``, ``dcp`` and ``all2all_backend``.

    Without a profile: :class:`StepModel` with the GPU's fitted profile.  A profile of
    :class:`PerfConstants` (JSON or YAML, flat or under ``constants``, as :mod:`.fit` writes)
    gives a :class:`StepModel` with those constants; a profile in the earlier format (the
    roofline's ``StepConstants`` keys such as ``t_frontend``, or a measured ``step_table``)
    gives that model (:func:`generation.engine.step_time.build_step_time`).  Raises
    ConfigError for an unreadable profile or invalid values."""
    kw = dict(tp=tp, quantization=quantization, kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager,
              cudagraph_capture_sizes=cudagraph_capture_sizes,
              max_cudagraph_capture_size=max_cudagraph_capture_size, async_scheduling=async_scheduling, **parallel)
    if not profile_path:
        constants, source = load_constants(gpu.name)
        model = StepModel(gpu, arch, constants=constants, **kw)
        path, _, why = source.partition(" (")       # "<file> (no profile of L40S's own)", or "defaults"
        model.profile_source = os.path.basename(path) + (f" ({why}" if why else "")
        return model
    import yaml
    try:
        with open(os.fspath(profile_path), encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"step-time profile {profile_path}: no such file", param="step-time-profile")
    except OSError as e:
        raise ConfigError(f"step-time profile {profile_path}: cannot read ({e})", param="step-time-profile")
    try:                    # JSON first: YAML 1.1 reads 6e-05 (no decimal point) as a string
        data = json.loads(text)
    except ValueError as json_error:
        if os.fspath(profile_path).endswith(".json"):    # JSON's one-line message, not YAML's five
            raise ConfigError(f"step-time profile {profile_path}: not JSON ({json_error})",
                              param="step-time-profile") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"step-time profile {profile_path}: cannot parse ({e})", param="step-time-profile")
    fitted_for = data.get("gpu") if isinstance(data, dict) and isinstance(data.get("constants"), dict) else None
    if isinstance(fitted_for, str) and fitted_for.lower() not in (gpu.name.lower(), "generic"):
        import logging              # a profile is one GPU's efficiencies: another GPU's peaks under them
        logging.getLogger("vllm_sim").warning("step-time profile %s was fitted for %s, used here on %s",
                                              profile_path, fitted_for, gpu.name)
    values = data.get("constants", data) if isinstance(data, dict) else data
    if isinstance(data, dict) and isinstance(data.get("constants"), dict):    # a fitted profile (fit --out)
        unknown = sorted(set(map(str, values)) - set(CONSTANT_NAMES))
        if unknown:         # named here: the earlier format's "unknown keys constants, gpu, ..." named the wrong ones
            raise ConfigError(f"step-time profile {profile_path}: unknown constants {', '.join(unknown)}; known: "
                              f"{', '.join(CONSTANT_NAMES)}", param="step-time-profile")
    if isinstance(values, dict) and values and set(values) <= set(CONSTANT_NAMES) and "step_table" not in data:
        for k in TIME_CONSTANTS.intersection(values):
            try:                            # (other bad values: validate)
                values[k] = parse_duration(values[k]) if isinstance(values[k], str) else values[k]
            except ConfigError as e:
                raise ConfigError(f"step-time profile {profile_path}: {k}: {e}", param="step-time-profile") from None
        c = replace(load_constants(gpu.name)[0], **values).validate(f"step-time profile {profile_path}")
        model = StepModel(gpu, arch, constants=c, **kw)
        model.profile_source = os.fspath(profile_path)
        return model
    from .step_time import build_step_time
    return build_step_time(gpu, arch, tp=tp, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                           profile_path=profile_path)
