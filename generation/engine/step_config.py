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
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    num_cpu_blocks: int = 0             # the CPU KV tier, in blocks of block_size (0: none)
    vllm_version: str = ""              # --vllm-version (cfg.vllm_version)
    reserve_full_isl: bool = False      # --scheduler-reserve-full-isl (else the version's default)
    spec_decode: object = None          # --speculative-config (generation.engine.spec_decode.SpecDecode)
    draft_cost: object = None           # its drafter's step time (spec_decode.DraftCost)
    kv_bytes_per_token: int = 0         # a GPU's KV bytes a token: its stage's layers, its DCP share

    @property
    def kv_tokens(self) -> int:
        """``GPU KV cache size: N tokens`` (vLLM's start-up line)."""
        return self.num_gpu_blocks * self.block_size

    def max_concurrency(self, max_model_len: int) -> float:
        """``Maximum concurrency for L tokens per request: Xx``."""
        per = -(-max_model_len // self.block_size) * self.block_size
        return self.kv_tokens / per if per else 0.0

    def _pauses(self) -> str:
        """``, engine pauses 0.2/s x 25 ms`` when the profile has them (EnginePauses), and for a
        MoE model its kernel compiles' stall (MoeJit), else ""."""
        c = getattr(self.step_time, "constants", None)       # None: a legacy step-time model
        if c is None or not (c.pause_rate > 0 and c.t_pause > 0):
            return ""
        note = f", engine pauses {c.pause_rate:g}/s x {1000 * c.t_pause:g} ms"
        if self.arch.is_moe and c.t_jit > 0:         # a MoE engine's warm-up owns its first TTFTs
            note += f", MoE kernel compiles {1000 * c.t_jit:g} ms at each new eager variant"
        return note

    def summary(self, max_model_len: int) -> list[str]:
        return [f"step engine: gpu={self.gpu.name} model={self.arch.name} ({self.arch_source}) "
                f"max-num-seqs={self.max_num_seqs} max-num-batched-tokens={self.max_num_batched_tokens}"
                + (f" long-prefill-token-threshold={self.long_prefill_token_threshold}"
                   if self.long_prefill_token_threshold else ""),
                f"GPU KV cache size: {self.kv_tokens:,} tokens ({self.num_gpu_blocks} blocks of {self.block_size})",
                f"Maximum concurrency for {max_model_len:,} tokens per request: {self.max_concurrency(max_model_len):.2f}x",
                f"architecture: {self._arch_line()}" + self._parallel_note()] \
            + ([f"CPU KV cache (offloading): {self.num_cpu_blocks * self.block_size:,} tokens "
                f"({self.num_cpu_blocks} blocks)"] if self.num_cpu_blocks else []) \
            + ([f"step time: profile {src}" + self._pauses()]
               if (src := getattr(self.step_time, "profile_source", "")) else []) \
            + [f"vLLM {self.vllm_version} defaults" + ("" if self.enable_prefix_caching else ", prefix caching off")
               + ("" if self.enable_chunked_prefill else ", chunked prefill off")
               + self._gate_note()] \
            + ([self.spec_decode.summary()] if self.spec_decode is not None else [])

    def _arch_line(self) -> str:
        """The architecture, its MLA latent or KV heads split over the DCP ranks when there are any."""
        line = self.arch.describe(getattr(self.step_time, "quantization", ""))
        dcp = getattr(self.step_time, "dcp", 1)
        if dcp > 1:
            line = line.replace("whole on every rank", f"split over {dcp} DCP ranks") + (
                "" if self.arch.is_mla else f"; KV split over {dcp} DCP ranks")
        return line

    def _parallel_note(self) -> str:
        """``; P pipeline stages of L layers`` under PP, and for a MoE model under data or expert
        parallelism ``; experts sliced over N GPUs (TP x DP)`` or ``; expert parallel over N
        GPUs, M experts each`` (``--enable-expert-parallel``)."""
        m = self.step_time
        ep, dp, tp, pp = getattr(m, "ep", 1), getattr(m, "dp", 1), getattr(m, "tp", 1), getattr(m, "pp", 1)
        note = f"; {pp} pipeline stages of {-(-self.arch.num_layers // pp)} layers" if pp > 1 else ""
        if ep > 1:
            from .perf.hardware import local_experts
            extra = m.arch.num_experts - self.arch.num_experts        # --enable-eplb's redundant experts
            return note + (f"; expert parallel over {ep} GPUs, {local_experts(m.arch, ep)} experts each"
                           + (f" (EPLB: {extra} redundant)" if extra else ""))
        return note + (f"; experts sliced over {tp * dp} GPUs (TP x DP)" if dp > 1 else "")

    def _gate_note(self) -> str:
        """The full-sequence admission gate when it is not the release's default, else ""."""
        from generation.config.vllm_versions import RESERVE_FULL_ISL_FROM, parse_version
        if not self.vllm_version or self.reserve_full_isl == (parse_version(self.vllm_version) >= RESERVE_FULL_ISL_FROM):
            return ""
        return ", admission reserves whole prompts" if self.reserve_full_isl else ", admission by first chunk"


_WARNED: set = set()


def warn_once(message: str) -> None:
    """Log ``message`` once a process (the server resolves its settings twice, a planner once a
    configuration)."""
    if message not in _WARNED:
        _WARNED.add(message)
        import logging
        logging.getLogger("vllm_sim").warning("%s", message)


def load_step_config(argv):
    """The configuration of a step-mode command line (a replay's or a fleet's server flags), with
    the server's model defaults: ``--max-model-len`` the model's own context length unless given
    (:func:`generation.tokenization.model_config.apply_model_defaults`).  Raises ConfigError."""
    from generation.config.cli import load_config
    from generation.tokenization.model_config import apply_model_defaults
    cfg = load_config(["--latency-calculator", "step", *argv])
    apply_model_defaults(cfg)
    return cfg


def resolve_step_settings(cfg) -> StepSettings:
    """Resolve step mode for ``cfg`` (a SimConfig); also writes the defaults it decides back into
    ``cfg`` (``block_size``, ``gpu_memory_utilization``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``kv_cache_size``) so that metrics and the start-up summary show
    them.  Raises ConfigError naming the flag at fault."""
    from generation.config.vllm_versions import apply_version_defaults, parse_version, reserve_full_isl
    from .hardware import batch_defaults, gpu_by_name, kv_bytes_per_token, kv_cache_blocks, resolve_arch
    from .perf.hardware import check_max_model_len, mla_block_size, pool_blocks
    from .perf.step_model import build_step_model, default_max_cudagraph_capture_size

    apply_version_defaults(cfg, step=True)

    gpu = gpu_by_name(cfg.gpu)
    found = resolve_arch(cfg.model, cfg.hf_config_path)
    if found is None and cfg.hf_config_path:
        raise ConfigError(f"no config.json at --hf-config-path {cfg.hf_config_path}", "hf-config-path")
    if found is None:
        arch, source = resolve_arch(FALLBACK_ARCH)
        source = f"{FALLBACK_ARCH} preset: {cfg.model!r} has no config.json (--hf-config-path)"
        if "/" in (cfg.model or ""):        # a real model's name (not test-model): its figures are not these
            import logging
            logging.getLogger("vllm_sim").warning(
                "step engine: no config.json for %s here and no preset of it: its KV cache, context and step "
                "times are %s's; give --hf-config-path (the model's config.json) for its own", cfg.model,
                FALLBACK_ARCH)
    else:
        arch, source = found
    tp = cfg.tensor_parallel_size       # >= 1, and the memory share in (0, 1]: SimConfig.validate
    # the whole deployment's DP (--data-parallel-size-local: this node runs a share of it)
    dp = max(getattr(cfg, "data_parallel_size_total", None) or getattr(cfg, "data_parallel_size", 1) or 1, 1)
    ep = bool(getattr(cfg, "enable_expert_parallel", False)) and arch.is_moe     # vLLM: a MoE group of TP x DP
    dcp = decode_context_parallel(cfg, tp, arch)
    pp = getattr(cfg, "pipeline_parallel_size", 1)
    if pp < 1:
        raise ConfigError("pipeline parallel size cannot be less than 1", "pipeline-parallel-size")
    from .perf.eplb import redundant_experts, with_redundant_experts
    phys = with_redundant_experts(arch, redundant_experts(cfg, arch, tp, dp, ep))    # --enable-eplb's copies
    mem = phys                          # the shape one GPU holds: with PP, one stage's (perf/pipeline.py)
    if pp > 1:
        from .perf.pipeline import stage_arch
        mem = stage_arch(phys, pp)
    quant = (cfg.quantization or "").lower()
    kv_tok = kv_bytes_per_token(mem, cfg.kv_cache_dtype, tp, dcp)
    # DCP: a block's tokens dealt out over the DCP ranks, --block-size each (cfg.block_size, the
    # rank's page, as vLLM's cache_config keeps it): the scheduler's, the prefix cache's and the KV
    # events' block spans them all (vLLM's hash block size), cfg.kv_block_span
    cfg.block_size = mla_block_size(gpu, arch, cfg.block_size)
    bs = cfg.kv_block_span = cfg.block_size * dcp
    default_tokens, default_seqs = batch_defaults(gpu)
    if "max-num-seqs" not in cfg.explicit:
        cfg.max_num_seqs = default_seqs
    chunked = cfg.enable_chunked_prefill
    if cfg.max_num_batched_tokens is None:
        # vLLM (EngineArgs): without chunked prefill a whole prompt must fit in one step
        cfg.max_num_batched_tokens = default_tokens if chunked else max(cfg.max_model_len, default_tokens)
    if cfg.max_num_batched_tokens < 1:
        raise ConfigError("max num batched tokens cannot be less than 1", "max-num-batched-tokens")
    if not chunked and cfg.max_num_batched_tokens < cfg.max_model_len:
        raise ConfigError(
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than max_model_len "
            f"({cfg.max_model_len}). This effectively limits the maximum sequence length to max_num_batched_tokens "
            f"and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
            f"max_model_len.", "max-num-batched-tokens")
    if "max-num-seqs" in cfg.explicit and cfg.max_num_batched_tokens < cfg.max_num_seqs:
        # vLLM's SchedulerConfig._verify_args (was accepted: a step could not seat its sequences)
        raise ConfigError(
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be greater than or equal to "
            f"max_num_seqs ({cfg.max_num_seqs}).", "max-num-batched-tokens")
    if cfg.num_gpu_blocks_override is not None:
        if cfg.num_gpu_blocks_override < 1:
            raise ConfigError("num gpu blocks override cannot be less than 1", "num-gpu-blocks-override")
        blocks = cfg.num_gpu_blocks_override
    elif cfg.kv_cache_memory_bytes is not None:      # vLLM: ignores --gpu-memory-utilization
        blocks = pool_blocks(mem, cfg.kv_cache_memory_bytes, bs, kv_tok,
                             cfg.max_model_len)
        if blocks < 1:
            raise ConfigError(f"No available memory for the cache blocks: --kv-cache-memory-bytes "
                              f"{cfg.kv_cache_memory_bytes} holds less than one block of {bs} tokens "
                              f"({bs * kv_tok} bytes)", "kv-cache-memory-bytes")
    else:
        blocks = kv_cache_blocks(gpu, mem, tp=tp, gpu_memory_utilization=cfg.gpu_memory_utilization,
                                 kv_cache_dtype=cfg.kv_cache_dtype, quantization=quant, block_size=bs,
                                 max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
                                 max_model_len=cfg.max_model_len, dp=dp, ep=ep, dcp=dcp)
    spec = spec_decode_of(cfg)
    if spec is not None and cfg.num_gpu_blocks_override is None:     # the drafter's weights and KV
        from .spec_decode import blocks_with_drafter, draft_arch_of, drafter_memory
        blocks = blocks_with_drafter(blocks, bs, kv_tok, drafter_memory(
            spec, arch, draft_arch_of(spec), tp, cfg.kv_cache_dtype, quant, dcp))
    check_max_model_len(blocks, bs, cfg.max_model_len, kv_tok)
    threshold = cfg.long_prefill_token_threshold
    if threshold < 0:
        raise ConfigError("long prefill token threshold cannot be negative", "long-prefill-token-threshold")
    if cfg.max_num_partial_prefills < 1:
        raise ConfigError("max num partial prefills cannot be less than 1", "max-num-partial-prefills")
    if cfg.max_num_partial_prefills > 1 and not chunked:
        raise ConfigError("Chunked prefill must be enabled to set max_num_partial_prefills > 1.",
                          "max-num-partial-prefills")
    if threshold == 0 and cfg.max_num_partial_prefills > 1:
        threshold = int(cfg.max_model_len * 0.04)
    if cfg.kv_transfer_bandwidth <= 0:
        raise ConfigError("kv transfer bandwidth must be positive", "kv-transfer-bandwidth")
    sizes = getattr(cfg, "cuda_graph_sizes", None)
    backend = getattr(cfg, "all2all_backend", "allgather_reducescatter")
    step_time = build_step_model(gpu, phys, tp=tp, quantization=quant, kv_cache_dtype=cfg.kv_cache_dtype,
                                 profile_path=cfg.step_time_profile,
                                 enforce_eager=bool(getattr(cfg, "enforce_eager", False)),
                                 cudagraph_capture_sizes=sorted(sizes) if sizes else None,
                                 max_cudagraph_capture_size=getattr(cfg, "max_cudagraph_capture_size", None)
                                 or default_max_cudagraph_capture_size(cfg.max_num_seqs, cfg.max_num_batched_tokens),
                                 async_scheduling=getattr(cfg, "async_scheduling", None) is not False, ep=ep, dp=dp,
                                 dcp=dcp, all2all_backend=backend)
    if getattr(cfg, "enable_dbo", False):
        from .perf.overlap import check_thresholds
        check_thresholds(cfg.dbo_decode_token_threshold, cfg.dbo_prefill_token_threshold)
        if pp > 1:                      # vLLM 0.34's VllmConfig._validate_model_runner
            raise ConfigError("The GPU model runner does not support: dual batch overlap with pipeline parallelism",
                              "enable-dbo")
        if ep and dp > 1 and hasattr(step_time, "arch"):     # the exchange hides behind the step (perf/overlap.py)
            from .perf.hardware import exchange_terms
            from .perf.overlap import install as overlap
            overlap(step_time, exchange_terms(arch, tp, step_time.gpu.nvlink_bandwidth, dp=dp, ep=True,
                                              domain=step_time.gpu.nvlink_domain,
                                              backend=backend,
                                              quantization=quant),
                    cfg.dbo_decode_token_threshold, cfg.dbo_prefill_token_threshold)
    for unused, why in ((getattr(cfg, "enable_dbo", False) and not (ep and dp > 1), "--enable-dbo"),
                        (backend != "allgather_reducescatter" and not (ep and dp > 1), f"--all2all-backend {backend}")):
        if unused:          # accepted as vLLM accepts it; said once, so a user does not read figures into it
            warn_once(f"step engine: {why} changes nothing here without a MoE model under data parallelism with "
                      f"--enable-expert-parallel (it hides or carries the expert exchange)")
    if pp > 1 and hasattr(step_time, "arch"):      # a step is a rotation of P micro-batches (perf/pipeline.py)
        from .perf.pipeline import install
        install(step_time, pp, cfg.max_num_batched_tokens, step_time.gpu)
    step_time.vllm_version = parse_version(cfg.vllm_version) if cfg.vllm_version else step_time.vllm_version
    cfg.kv_cache_size = blocks
    draft = None
    if spec is not None and hasattr(step_time, "arch"):         # (a legacy step-time model: no drafter cost)
        from .spec_decode import DraftCost, draft_arch_of
        draft = DraftCost(spec, step_time, draft_arch_of(spec))
    return StepSettings(gpu, arch, source, blocks, bs, cfg.max_num_seqs, cfg.max_num_batched_tokens, threshold,
                        step_time, enable_prefix_caching=cfg.enable_prefix_caching, enable_chunked_prefill=chunked,
                        num_cpu_blocks=cpu_blocks(cfg, mem, bs, tp, kv_tok),
                        vllm_version=cfg.vllm_version, reserve_full_isl=reserve_full_isl(cfg),
                        spec_decode=spec, draft_cost=draft, kv_bytes_per_token=kv_tok)


def decode_context_parallel(cfg, tp: int, arch) -> int:
    """``--decode-context-parallel-size``, checked as vLLM 0.34 checks it: it must divide the
    tensor-parallel size (ParallelConfig), and for a GQA / MQA model (ModelConfig) split only
    KV heads that TP replicates, in a number the query heads of a KV head divide.  Raises
    ConfigError with vLLM's messages."""
    dcp = getattr(cfg, "decode_context_parallel_size", 1)
    p = "decode-context-parallel-size"
    if dcp < 1:
        raise ConfigError("decode context parallel size cannot be less than 1", p)
    if tp % dcp:
        raise ConfigError(f"tp_size={tp} must be divisible by dcp_size={dcp}.", p)
    if dcp > 1 and not arch.is_mla:
        kv = arch.num_kv_heads
        if tp <= kv:
            raise ConfigError(f"Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` ({tp}) to be "
                              f"greater than the model's total number of KV heads ({kv}). Increase "
                              "`--tensor-parallel-size` or set `--decode-context-parallel-size 1`.", p)
        if dcp > tp // kv:
            raise ConfigError(f"`--decode-context-parallel-size` ({dcp}) exceeds the maximum supported value "
                              f"({tp // kv}) for `--tensor-parallel-size` ({tp}) and {kv} model KV heads.", p)
        if (arch.num_heads // kv) % dcp:
            raise ConfigError(f"The model's number of query heads per KV head ({arch.num_heads // kv}) must be "
                              f"divisible by `--decode-context-parallel-size` ({dcp}) for GQA/MQA.", p)
    return dcp


def spec_decode_of(cfg):
    """``cfg``'s speculative decoding (:func:`generation.engine.spec_decode.resolve_spec_decode`
    of ``--speculative-config`` and the ``--spec-*`` flags), or None.  Raises ConfigError."""
    from .spec_decode import resolve_spec_decode
    return resolve_spec_decode(getattr(cfg, "speculative_config", None), getattr(cfg, "spec_method", "") or None,
                               getattr(cfg, "spec_model", "") or None, getattr(cfg, "spec_tokens", None),
                               getattr(cfg, "tensor_parallel_size", 1) or 1)


def cpu_blocks(cfg, arch, block_size: int, tp: int, kv_bytes_per_token: int) -> int:
    """Blocks of the CPU KV tier: ``--kv-offloading-size`` GiB over all ``tp`` ranks (vLLM's
    meaning), else ``--cpu-offload-gb`` GiB per GPU, divided by a block's bytes on all ranks
    (``block_size x kv_bytes_per_token x tp``, ``kv_bytes_per_token`` being one GPU's); 0 without
    either flag."""
    from .hardware import GiB
    if cfg.kv_offloading_size is not None:
        total = cfg.kv_offloading_size * GiB
    elif cfg.cpu_offload_gb > 0:
        total = cfg.cpu_offload_gb * GiB * tp
    else:
        return 0
    return int(total // (block_size * kv_bytes_per_token * tp))

