"""vLLM's ``--enable-mfu-metrics`` estimate of each engine step's work, per GPU.

vLLM (``vllm/v1/metrics/perf.py``, in every release from 0.17 to 0.34 at hand) turns each
scheduler step's ``SchedulerOutput`` into an ``ExecutionContext`` (per request: its new tokens,
its context length = computed tokens + new tokens, prefill or decode) and adds, per GPU, the
FLOPs, bytes read and bytes written that its analytic component models give (``AttentionMetrics``
or ``MLAAttentionMetrics``, ``FfnMetrics``, ``UnembedMetrics``) to three counters
(``PerfMetricsProm``): ``vllm:estimated_flops_per_gpu_total``,
``vllm:estimated_read_bytes_per_gpu_total``, ``vllm:estimated_write_bytes_per_gpu_total``.

:class:`StepPerf` computes the same three integers for a step of the simulator's scheduler
(:class:`generation.engine.scheduler.StepPlan`), from the model's ``config.json`` read as vLLM's
parsers read it (not through :class:`~generation.engine.perf.model_arch.ModelArch`, whose counts
serve the step-time model and differ on purpose: vLLM ignores Qwen-MoE's shared expert, bills
the routed experts' weights as ``min(tokens x top-k, experts)`` ...).  Every formula is linear in
a few sums of the step (vLLM's ``ExecutionContext`` fields): tokens T, prefill tokens, decode
tokens, the sums of context lengths, and the sum of tokens x context; so the per-step cost is a
dozen multiplications, with the coefficients computed once per model.  Only a sliding-window
model (vLLM 0.34's ``SlidingWindowAttentionParser``) walks the step's requests, to clamp each
context to the window.

Units: FLOPs (a multiply-add is 2), bytes; per GPU of one engine (data-parallel rank), per step.
Per-GPU scaling as vLLM: attention heads divide by ``--tensor-parallel-size`` (at least 1 head),
the vocabulary too; the MLPs' intermediate sizes by TP x DP (vLLM's ``FfnParallelParser``: a DP
x TP deployment runs its MLPs as one TP x DP group), or, with expert parallelism, the routed
tokens and experts by TP x DP.  Pipeline parallelism is not simulated (one stage).

Release differences kept (``vllm_version``): the quantization methods whose weight size is known
(others drop the attention and MLP components, as vLLM's parsers raise ``InvalidComponent``),
MLA attention from 0.24 (before, a DeepSeek-style model is billed as standard attention with
vLLM's head size ``kv_lora_rank + qk_rope_head_dim``), sliding windows from 0.34.
"""
from __future__ import annotations

# weight bytes per quantization method (vLLM's _QUANT_WEIGHT_BYTE_SIZE), by first release
_Q_OLD = {"fp8": 1, "fbgemm_fp8": 1, "mxfp4": 0.5}                              # 0.17-0.18
_Q_034 = {"fp8": 1, "fbgemm_fp8": 1, "ptpc_fp8": 1, "modelopt": 1, "modelopt_mxfp8": 1, "experts_int8": 1,
          "mxfp4": 0.5, "awq": 0.5, "awq_marlin": 0.5, "gptq": 0.5, "gptq_marlin": 0.5, "modelopt_fp4": 0.5,
          "petit_nvfp4": 0.5, "compressed-tensors": 0.5, "torchao": 0.5, "quark": 0.5, "moe_wna16": 0.5,
          "inc": 0.5}
_Q_027 = {**_Q_034, "fp_quant": 1, "bitsandbytes": 0.5}                           # 0.24-0.27
_Q_023 = {**_Q_027, "gguf": 0.5}                                                  # 0.23
_Q_019 = {**_Q_023, "cpu_awq": 0.5}                                               # 0.19-0.22
_QUANT_TABLES = (((0, 34, 0), _Q_034), ((0, 24, 0), _Q_027), ((0, 23, 0), _Q_023), ((0, 19, 0), _Q_019),
                 ((0, 0, 0), _Q_OLD))
MLA_FROM = (0, 24, 0)
SLIDING_WINDOW_FROM = (0, 34, 0)
# model types vLLM 0.34 treats as DeepSeek MLA (ModelArchConfigConvertor.is_deepseek_mla), given kv_lora_rank
MLA_MODEL_TYPES = frozenset((
    "axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots3_note",
    "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa", "glm4_moe_lite",
    "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash", "mistral_large_4", "pangu_ultra_moe",
    "pangu_ultra_moe_mtp", "bailing_hybrid", "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "hy_v4", "hy_v4_mtp"))
_KV_HEADS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
_EXPERTS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
_TOP_K = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_topk", "moe_top_k", "top_k")


def _first(cfg: dict, names, default=None):
    """The first of ``names`` that ``cfg`` has (vLLM's ``getattr_iter`` on the HF config)."""
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def text_config(cfg: dict) -> dict:
    """The language model's part of a (multimodal) config.json, as vLLM's ``hf_text_config``."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and "hidden_size" in sub:
            return sub
    return cfg


def quant_method(cfg: dict, quantization: str = "") -> str:
    """vLLM's ``quant_config.get_name()``: ``--quantization``, else the checkpoint's
    ``quantization_config.quant_method`` (ModelOpt's NVFP4 as ``modelopt_fp4``); "" for none."""
    if quantization:
        return quantization.lower()
    qc = cfg.get("quantization_config") or text_config(cfg).get("quantization_config")
    if not isinstance(qc, dict):
        return ""
    method = str(qc.get("quant_method") or "").lower()
    if method == "modelopt" and "FP4" in str(qc.get("quant_algo") or "").upper():
        return "modelopt_fp4"
    return method


class StepPerf:
    """Per-GPU FLOPs / read bytes / write bytes of one engine step, as vLLM's ``ModelMetrics``.

    ``cfg`` a config.json dict; ``tp`` / ``dp`` the tensor / data parallel sizes; ``enable_ep``
    expert parallelism; ``quantization`` the method name (``--quantization``; empty: the
    checkpoint's); ``kv_cache_dtype`` ``--kv-cache-dtype``; ``dtype_bytes`` the served weights'
    and activations' bytes (2: bfloat16/float16); ``version`` the ``--vllm-version`` tuple.
    ``components`` names the models kept (vLLM's component types: ``attn`` or ``mla_attn``,
    ``ffn``, ``unembed``); a component the config cannot describe is left out, as vLLM leaves
    out one whose parser fails."""

    def __init__(self, cfg: dict, *, tp: int = 1, dp: int = 1, enable_ep: bool = False, quantization: str = "",
                 kv_cache_dtype: str = "auto", dtype_bytes: int = 2, version: tuple = (0, 34, 0)):
        t = text_config(cfg)
        A = dtype_bytes                                      # activations (vLLM < 0.34: always 2)
        K = 1 if str(kv_cache_dtype or "auto").lower().startswith("fp8") else dtype_bytes
        table = next(tab for first, tab in _QUANT_TABLES if version >= first)
        method = quant_method(cfg, quantization)
        W = dtype_bytes if not method else table.get(method)  # None: attention and MLP left out
        L = t.get("num_hidden_layers") or 0
        D = t.get("hidden_size") or 0
        H = t.get("num_attention_heads") or 0
        V = t.get("vocab_size") or 0
        self.components: list[str] = []
        # linear coefficients: flops = fT*T + fTC*TC + fN*N (+ routed), read = r0 + rT*T + ...
        self.fT = self.fTC = self.fTCs = self.fN = 0
        self.r0 = self.rT = self.rTp = self.rCp = self.rTd = self.rCd = self.rCps = self.rCds = self.rN = 0
        self.wT = self.wN = 0
        self.routed = None               # (E top-k, ep, local experts, f/act, r/act, r/expert, w/act)
        self.window = 0                  # sliding window (tokens) of the window layers; 0: none
        if L > 0 and D > 0 and H > 0 and W is not None:
            mla = version >= MLA_FROM and t.get("model_type") in MLA_MODEL_TYPES and t.get("kv_lora_rank") is not None
            if mla:
                self._mla(t, L, D, H, tp, A, K, W)
            else:
                self._attention(t, L, D, H, tp, A, K, W, version)
            self._ffn(t, L, D, tp, dp, enable_ep, A, W)
        if D > 0 and V > 0 and "num_hidden_layers" in t and "num_attention_heads" in t:
            Vg = V // tp                                      # UnembedMetrics: unquantized weights
            self.fN += 2 * D * Vg
            self.rN += D * A
            self.r0 += D * Vg * dtype_bytes
            self.wN += Vg * A
            self.components.append("unembed")

    # ---- components (coefficients of vLLM's formulas, per GPU) ---------------------------------
    def _attention(self, t, L, D, H, tp, A, K, W, version):
        """``AttentionMetrics``: q/k/v and o projections, QK^T and AV over each token's context,
        the KV written to the cache; decode reads the cached KV (``K`` bytes), prefill its
        activations."""
        kv = _first(t, _KV_HEADS, H)
        if t.get("model_type") in MLA_MODEL_TYPES and t.get("kv_lora_rank") is not None:
            d = t["kv_lora_rank"] + (t.get("qk_rope_head_dim") or 0)    # vLLM's get_head_size for MLA
        else:
            d = t.get("head_dim") or t.get("hidden_size_per_head") or D // H
        q, kv = max(1, H // tp), max(1, kv // tp)
        Ls = self._window_layers(t, L) if version >= SLIDING_WINDOW_FROM else 0
        Lf = L - Ls
        self.fT += 2 * D * (q + 2 * kv) * d * L + 2 * D * q * d * L
        self.fTC += 4 * q * d * Lf
        self.fTCs += 4 * q * d * Ls
        self.r0 += int(D * (q + 2 * kv) * d * W * L) + int(q * d * D * W * L)
        self.rT += D * A * L + q * d * A * L
        self.rTp += q * d * A * L               # prefill and decode queries (both window kinds)
        self.rTd += q * d * A * L
        self.rCp += 2 * kv * d * A * Lf
        self.rCd += 2 * kv * d * K * Lf
        self.rCps += 2 * kv * d * A * Ls
        self.rCds += 2 * kv * d * K * Ls
        self.wT += (q + 2 * kv) * d * A * L + 2 * kv * d * K * L + D * A * L
        self.components.append("attn")

    def _window_layers(self, t, L) -> int:
        """vLLM 0.34's ``SlidingWindowAttentionParser``: the layers with a sliding window (all of
        them for Mistral-style configs, the ``layer_types`` marked sliding, Gemma 2's even ones);
        sets :attr:`window`."""
        w = t.get("sliding_window")
        if t.get("use_sliding_window") is False:        # Qwen2's config drops the window then
            w = None
        if not isinstance(w, int) or w <= 0:
            return 0
        self.window = w
        types = t.get("layer_types")
        if isinstance(types, list):
            return sum(1 for kind in types[:L] if "sliding" in str(kind).lower())
        if t.get("model_type") == "gemma2":
            return (L + 1) // 2
        return L

    def _mla(self, t, L, D, H, tp, A, K, W):
        """``MLAAttentionMetrics`` (DeepSeek-V2/V3 style): low-rank Q (``q_lora_rank``), the
        compressed KV (``kv_lora_rank + qk_rope_head_dim`` per token in the cache), heads split
        by TP, the down-projections replicated."""
        c, r, nope, v = t["kv_lora_rank"], t.get("qk_rope_head_dim") or 0, t.get("qk_nope_head_dim") or 0, \
            t.get("v_head_dim") or 0
        if not (c > 0 and r > 0 and nope > 0 and v > 0):
            return                                          # vLLM: the component fails validation
        qr = t.get("q_lora_rank")
        qk = nope + r
        q = max(1, H // tp)
        if qr is not None:
            self.fT += (2 * D * qr + 2 * qr * q * qk) * L
            self.rT += (D * A + qr * A) * L
            self.r0 += int(D * qr * W * L) + int(qr * q * qk * W * L)
            self.wT += (qr * A + q * qk * A) * L
        else:
            self.fT += 2 * D * q * qk * L
            self.rT += D * A * L
            self.r0 += int(D * q * qk * W * L)
            self.wT += q * qk * A * L
        self.fT += (2 * D * (c + r) + 2 * c * q * (nope + v) + 2 * q * v * D) * L
        self.fTC += (2 * q * qk + 2 * q * v) * L
        self.rT += (D * A + c * A + q * v * A) * L
        self.r0 += int(D * (c + r) * W * L) + int(c * q * (nope + v) * W * L) + int(q * v * D * W * L)
        self.rTp += q * qk * A * L
        self.rCp += q * (qk + v) * A * L
        self.rTd += q * qk * A * L
        self.rCd += (c + r) * K * L
        self.wT += ((c + r) * A + q * (nope + v) * A + (c + r) * K + D * A) * L
        self.components.append("mla_attn")

    def _ffn(self, t, L, D, tp, dp, enable_ep, A, W):
        """``FfnMetrics``: SwiGLU MLPs (3 GEMMs), dense layers, routed experts (``top-k`` per
        token, the weights of ``min(routed tokens, experts)`` experts read) and shared experts,
        MoE layers counted by ``interleave_moe_layer_step`` or ``moe_layer_freq`` with
        ``first_k_dense_replace`` (else every layer)."""
        DI = t.get("intermediate_size", D * 4) or 0
        experts = _first(t, _EXPERTS, 0)
        experts = experts[0] if isinstance(experts, list) else experts
        E = _first(t, _TOP_K, 0)
        E = max(E, default=0) if isinstance(E, list) else E
        MI = _first(t, ("moe_intermediate_size", "intermediate_size"), 0)
        S = _first(t, ("n_shared_experts", "num_shared_experts"), 0) or 0
        Lm = L if experts else 0
        step = t.get("interleave_moe_layer_step")
        if isinstance(step, int) and step > 0:
            Lm = sum(1 for i in range(L) if (i + 1) % step == 0)
        if t.get("moe_layer_freq") is not None and t.get("first_k_dense_replace") is not None:
            fk, freq = t["first_k_dense_replace"], t["moe_layer_freq"]
            Lm = sum(1 for i in range(L) if i >= fk and i % freq == 0)
        if DI <= 0 or (Lm and not (experts and E and MI)):
            return                                          # vLLM: the component fails validation
        ftp, ep = (1, dp * tp) if enable_ep else (dp * tp, 1)
        Ld = L - Lm
        DI //= ftp
        MI //= ftp
        if Ld:
            self.fT += 2 * D * 3 * DI * Ld
            self.rT += (D * A + 2 * DI * A + DI * A) * Ld
            self.r0 += int(2 * D * DI * W * Ld) + int(D * DI * W * Ld)
            self.wT += (2 * DI * A + DI * A + D * A) * Ld
        if Lm and E:
            self.routed = (E, ep, experts // ep, 2 * D * 3 * MI * Lm, (D * A + 2 * MI * A + MI * A) * Lm,
                           (2 * D * MI * W * Lm, D * MI * W * Lm), (2 * MI * A + MI * A + D * A) * Lm)
        if Lm and S:
            self.fT += 2 * D * 3 * MI * S * Lm
            self.rT += (D * A + 2 * MI * S * A + MI * A) * Lm
            self.r0 += int(2 * D * MI * S * W * Lm) + int(D * MI * S * W * Lm)
            self.wT += (2 * S * MI * A + S * MI * A + S * D * A) * Lm
        self.components.append("ffn")

    # ---- per step -------------------------------------------------------------------------------
    def figures(self, num_prefill: int, prefill_tokens: int, prefill_context: int, prefill_tc: int,
                num_decode: int, decode_context: int, windowed=(0, 0, 0)) -> tuple[int, int, int]:
        """``(FLOPs, read bytes, write bytes)`` per GPU of a step of ``num_prefill`` prefill
        requests (``prefill_tokens`` new tokens, ``prefill_context`` the sum of their context
        lengths, ``prefill_tc`` the sum of tokens x context) and ``num_decode`` one-token decodes
        (``decode_context`` the sum of their context lengths, so also their tokens x context);
        ``windowed`` ``(sum tokens x min(context, window), prefill contexts clamped, decode
        contexts clamped)``, for a sliding-window model.  vLLM's ``ExecutionContext`` fields."""
        T = prefill_tokens + num_decode
        N = num_prefill + num_decode                        # logits: a prefill's last token, every decode
        flops = self.fT * T + self.fTC * (prefill_tc + decode_context) + self.fN * N
        read = (self.r0 + self.rT * T + self.rTp * prefill_tokens + self.rCp * prefill_context
                + self.rTd * num_decode + self.rCd * decode_context + self.rN * N)
        write = self.wT * T + self.wN * N
        if self.fTCs:
            tcs, cps, cds = windowed
            flops += self.fTCs * tcs
            read += self.rCps * cps + self.rCds * cds
        if self.routed is not None:
            E, ep, local, f_act, r_act, (r_up, r_down), w_act = self.routed
            act = T * E // ep
            used = min(act, local)
            flops += f_act * act
            read += r_act * act + int(r_up * used) + int(r_down * used)
            write += w_act * act
        return flops, read, write

    def plan_figures(self, plan) -> tuple[int, int, int]:
        """:meth:`figures` of a :class:`~generation.engine.scheduler.StepPlan`, before its step
        completes (its requests' ``num_computed`` still the step's start): a prefill chunk of
        ``n`` tokens after ``c`` computed has context ``c + n`` (vLLM's ``num_computed_tokens +
        num_scheduled_tokens``), a decode ``c + 1``.  The plan's sums: ``prefill_pairs`` = sum
        n (c + n/2) and ``prefill_sq`` = sum n^2 give sum n (c + n) without a walk."""
        if plan.spec_tokens:
            return self._spec_figures(plan)
        pt = plan.prefill_tokens
        tc = (int(2 * plan.prefill_pairs) + plan.prefill_sq) // 2
        windowed = (0, 0, 0)
        if self.fTCs:
            windowed = self._windowed(plan)
        return self.figures(plan.num_chunks, pt, plan.prefill_context + pt, tc, plan.num_decode,
                            plan.decode_context, windowed)

    def _spec_figures(self, plan) -> tuple[int, int, int]:
        """:meth:`plan_figures` of a step with speculative decoding, by a walk over its requests:
        vLLM's ``get_step_perf_stats_per_gpu`` counts a running request scheduled more than one
        token, a decode with its drafts too, as a prefill of those tokens (its context the computed
        tokens plus them), a new request always as one."""
        chunks = set(map(id, plan.chunks))
        w = self.window if self.fTCs else 0
        n_pre = pt = pctx = tc = n_dec = dctx = tcs = cps = cds = 0
        for req, n in plan.scheduled:
            ctx = req.num_computed + n
            clamped = ctx if not w or ctx < w else w
            tcs += n * clamped
            if n > 1 or id(req) in chunks:
                n_pre, pt, pctx, tc, cps = n_pre + 1, pt + n, pctx + ctx, tc + n * ctx, cps + clamped
            else:
                n_dec, dctx, cds = n_dec + 1, dctx + ctx, cds + clamped
        return self.figures(n_pre, pt, pctx, tc, n_dec, dctx, (tcs, cps, cds) if w else (0, 0, 0))

    def _windowed(self, plan) -> tuple[int, int, int]:
        """The window-clamped sums of a sliding-window model's step: one pass over its requests."""
        w = self.window
        tcs = cps = cds = 0
        chunks = set(map(id, plan.chunks))
        for req, n in plan.scheduled:
            ctx = req.num_computed + n
            clamped = ctx if ctx < w else w
            tcs += n * clamped
            if id(req) in chunks:
                cps += clamped
            else:
                cds += clamped
        return tcs, cps, cds


class PerfCounters:
    """What the step engine calls once per step with ``--enable-mfu-metrics``: adds
    :meth:`StepPerf.plan_figures` to the three counters of the
    :class:`~generation.metrics.recorder.MetricsRecorder` (``perf_flops``, ``perf_read``,
    ``perf_write``), as vLLM's ``PerfMetricsProm.observe``."""

    __slots__ = ("perf", "flops", "read", "write")

    def __init__(self, perf: StepPerf, metrics):
        self.perf = perf
        self.flops, self.read, self.write = metrics.perf_flops, metrics.perf_read, metrics.perf_write

    def observe(self, plan) -> None:
        f, r, w = self.perf.plan_figures(plan)
        self.flops.value += f
        self.read.value += r
        self.write.value += w


def raw_config(model: str, arch_source: str) -> dict:
    """The config.json dict behind step mode's architecture (``StepSettings.arch_source``: the
    file read, ``preset <name>``, or the fallback preset's note), {} when none is at hand."""
    import json
    import os

    from generation.tokenization.model_config import preset_config
    if arch_source.startswith("preset "):
        found = preset_config(arch_source[len("preset "):])
    elif os.path.isfile(arch_source):
        with open(arch_source, encoding="utf-8") as fh:
            return json.load(fh)
    else:                                       # "<fallback> preset: <model> has no config.json"
        found = preset_config(arch_source.split(" preset:", 1)[0])
    return found[1] if found else {}


def build_perf_counters(config, metrics):
    """The :class:`PerfCounters` of a step-mode server with ``--enable-mfu-metrics`` whose
    ``--vllm-version`` exports the families, else None (nothing is computed per step)."""
    from generation.config.vllm_versions import exposes, parse_version
    if not getattr(config, "enable_mfu_metrics", False) or not exposes(config, "vllm:estimated_flops_per_gpu"):
        return None
    st = config.step
    perf = StepPerf(raw_config(config.model, st.arch_source), tp=config.tensor_parallel_size,
                    dp=config.data_parallel_size, enable_ep=bool(getattr(config, "enable_expert_parallel", False)),
                    quantization=config.quantization or "",
                    kv_cache_dtype=config.kv_cache_dtype, dtype_bytes=st.arch.dtype_bytes,
                    version=parse_version(config.vllm_version))
    return PerfCounters(perf, metrics)
