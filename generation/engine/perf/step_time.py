"""Engine step time: a roofline with efficiencies, or a measured table (docs/engine-model.md §3-4).

The scheduler calls ``step_time`` once per engine step with the step's aggregates, in O(1):

=================  ====================================================================
``num_decode``     ``D``, decoding sequences (one new token each)
``decode_context`` ``C_dec``, the sum of their contexts: tokens already in the KV cache
                   (vLLM's ``num_computed_tokens``)
``num_chunks``     prefill chunks in the step (each samples one row when it ends a prompt;
                   counted always, as docs/engine-model.md §3's ``S``)
``prefill_tokens`` ``sum n_i``, new tokens over all chunks
``prefill_pairs``  ``sum n_i x (p_i + n_i / 2)``, causal (query, key) pairs of the chunks,
                   ``p_i`` the chunk's tokens already computed (prefix-cache hits, earlier
                   chunks)
``prefill_context`` ``sum p_i``
=================  ====================================================================

:class:`RooflineStepTime` evaluates docs/engine-model.md §3 exactly::

    T = D + sum n_i,  S = D + chunks
    t_gemm = max(W / (eta_w BW), (2 N_lin T + 2 N_head S) / (eta_f F))
    t_attn = max(4 layers heads head_dim (C_dec + prefill_pairs) / (eta_a F),
                 kv_bytes_per_token (C_dec + sum p_i + T) / (eta_kv BW))
    t_step = t0 + t_seq (D + chunks) + t_gemm + t_attn [+ tensor-parallel all-reduces]

with §3's extensions: tensor parallel (``W``, ``N_lin``, ``N_head``, heads and KV heads / tp,
plus ``2 layers (T hidden 2 B 2 (tp-1)/tp / NVLink + tp_sync)``); FP8 weights (linear bytes
halve and, on GPUs with FP8 tensor cores, their FLOP/s double; the lm_head stays BF16 as in
vLLM); FP8 KV (``kv_bytes_per_token`` halves).  A MoE model reads the experts its ``T``
tokens touch: ``W = W_dense + W_experts x (1 - (1 - k/E)^T)`` (expected share of ``E`` experts
hit by ``T`` tokens routed to ``k`` each; this module's extension, the doc is dense-only).

:class:`TableStepTime` replaces the roofline by a measured table (``step_table``).
:func:`load_profile` reads one YAML/JSON file overriding any :class:`StepConstants` and
optionally holding that table.  :func:`jittered` adds seeded noise.  All times are seconds.
"""
from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, fields, replace
from typing import Callable, NamedTuple

from generation.config.values import ConfigError, parse_duration

from .hardware import (GPU, ModelArch, check_tensor_parallel, expert_weight_bytes, kv_bytes_per_token,
                       linear_weight_bytes)
from .step_table import StepTable

__all__ = ["StepConstants", "Profile", "load_profile", "RooflineStepTime", "TableStepTime",
           "StepTable", "jittered", "build_step_time", "bench_latency"]

# t0 with the CUDA graphs of recent vLLM builds (docs/engine-model.md §3 table).  The default
# below is fitted instead to the three published measurements of §4, which came from builds
# nearer the "older builds ~2 ms" end: see StepConstants.t0.
T0_CUDA_GRAPHS = 0.7e-3


@dataclass
class StepConstants:
    """The roofline's efficiencies and fixed costs (docs/engine-model.md §3; seconds).

    ``t0`` defaults to 1.85 ms, fitted to §4's three measurements (A100-40GB batch-1 decode
    13.3 ms/token; ``vllm bench latency`` batch 8, 32 in / 128 out, 997.5 ms on H100 and 833 ms
    on H200).  With §3's 0.7 ms (:data:`T0_CUDA_GRAPHS`, recent vLLM with CUDA graphs) the
    model gives -0.3% / -15.9% / -26.0% on them; a bandwidth-only fit of the H100-H200 gap would
    need eta_w > 1, so the gap is a per-step fixed cost.  1.85 ms centres the errors at
    +8.4% / -1.1% / -8.4% (A100 / H100 / H200), all within §4's 10%.

    ``t_frontend``: the TTFT's HTTP and tokenization overhead (§3: 6-8 ms); ``tp_sync``: fixed
    cost per all-reduce (§3: ~8 us); ``jitter``: relative standard deviation of a step's time
    (0: deterministic), applied by :func:`jittered`."""

    eta_w: float = 0.775
    eta_f: float = 0.60
    eta_a: float = 0.50
    eta_kv: float = 0.90
    t0: float = 1.85e-3
    t_seq: float = 5e-6
    t_frontend: float = 7e-3
    tp_sync: float = 8e-6
    jitter: float = 0.0

    def validate(self, source: str = "step constants") -> "StepConstants":
        """Raises ConfigError for an efficiency <= 0, a negative time, or jitter outside
        [0, 1); returns self."""
        for f in ("eta_w", "eta_f", "eta_a", "eta_kv"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ConfigError(f"{source}: {f} must be a positive number, got {v!r}",
                                  param="step-time-profile")
        for f in ("t0", "t_seq", "t_frontend", "tp_sync"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise ConfigError(f"{source}: {f} must be a duration >= 0, got {v!r}",
                                  param="step-time-profile")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"{source}: jitter must be in [0, 1), got {self.jitter!r}",
                              param="step-time-profile")
        return self


_TIME_FIELDS = ("t0", "t_seq", "t_frontend", "tp_sync")
_CONSTANT_FIELDS = tuple(f.name for f in fields(StepConstants))


class Profile(NamedTuple):
    """What a profile file holds: the constants (defaults overridden) and an optional table."""
    constants: StepConstants
    table: StepTable | None


def load_profile(path: str, base: StepConstants | None = None) -> Profile:
    """Read a step-time profile (YAML, or JSON, which YAML reads too).

    Top-level keys: any :class:`StepConstants` field (efficiencies as numbers; times as seconds
    or Go duration strings such as ``"1.9ms"``; ``jitter`` relative), and optionally
    ``step_table`` (see :class:`~generation.engine.step_table.StepTable`), which replaces the
    roofline.  Example::

        t0: 2ms
        eta_w: 0.8
        step_table:
          extrapolate: linear
          points:          # decode_seqs, context_tokens (mean), prefill_tokens, ms
            - [1, 1024, 0, 6.5]
            - ...

    Raises ConfigError naming the file and the key for an unreadable file, unknown keys or a
    bad value."""
    import yaml
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"step-time profile {path}: no such file", param="step-time-profile")
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"step-time profile {path}: cannot parse ({e})", param="step-time-profile")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"step-time profile {path}: expected a mapping of constants",
                          param="step-time-profile")
    unknown = sorted(set(map(str, data)) - set(_CONSTANT_FIELDS) - {"step_table"})
    if unknown:
        raise ConfigError(f"step-time profile {path}: unknown keys {', '.join(unknown)}; known: "
                          f"{', '.join(_CONSTANT_FIELDS)}, step_table", param="step-time-profile")
    updates: dict[str, float] = {}
    for key, value in data.items():
        if key == "step_table":
            continue
        try:
            if key in _TIME_FIELDS:
                v = parse_duration(value) if isinstance(value, str) else value
            else:
                v = value
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"a number, got {value!r}")
        except ConfigError as e:
            raise ConfigError(f"step-time profile {path}: {key}: {e}", param="step-time-profile")
        updates[key] = float(v)
    constants = replace(base or StepConstants(), **updates).validate(f"step-time profile {path}")
    table = (StepTable.from_spec(data["step_table"], f"step-time profile {path}: step_table")
             if "step_table" in data else None)
    return Profile(constants, table)


class RooflineStepTime:
    """docs/engine-model.md §3's step time for one model on one GPU type.

    ``tp``: tensor-parallel size; ``quantization``: ``""`` (the checkpoint's), ``"fp8"``, a 4-bit
    method (bytes only); ``kv_cache_dtype``: ``"auto"`` or an fp8 variant.  Raises ConfigError
    for an invalid tp or dtype.  Attributes: ``kv_bytes_per_token`` (per GPU), ``constants``
    (read once here: build a new instance to change them).
    Llama-3.1-8B on an H100 with t0 = 0.7 ms: decode batch 1 at 1k context 6.53 ms, a lone 1k
    prefill 25.3 ms, 64 decodes + a 2k chunk 53.7 ms."""

    def __init__(self, gpu: GPU, arch: ModelArch, *, tp: int = 1, quantization: str = "",
                 kv_cache_dtype: str = "auto", constants: StepConstants | None = None) -> None:
        c = (constants or StepConstants()).validate()
        check_tensor_parallel(arch, tp)
        self.gpu, self.arch, self.tp, self.constants = gpu, arch, tp, c
        self.kv_bytes_per_token = kv_bytes_per_token(arch, kv_cache_dtype, tp)
        lin_bytes = linear_weight_bytes(arch, quantization)
        fp8_compute = lin_bytes == 1.0 and gpu.fp8          # W8A8 on FP8 tensor cores
        f_lin = gpu.flops * (2.0 if fp8_compute else 1.0)
        bw = c.eta_w * gpu.bandwidth
        n_lin, n_head = arch.n_lin / tp, arch.n_head / tp
        head_bytes = n_head * arch.dtype_bytes
        if arch.is_moe:
            experts_total = ((arch.num_layers - arch.dense_layers) * arch.num_experts
                             * arch.expert_params / tp)
            dense = arch.n_lin_total / tp - experts_total
            self._w_fixed = (dense * lin_bytes + head_bytes) / bw
            self._w_experts = experts_total * expert_weight_bytes(arch, quantization) / bw
            self._untouched = 1.0 - arch.experts_per_token / arch.num_experts
        else:
            self._w_fixed = (n_lin * lin_bytes + head_bytes) / bw
            self._w_experts = 0.0
            self._untouched = 1.0
        self._c_lin = 2.0 * n_lin / (c.eta_f * f_lin)
        self._c_head = 2.0 * n_head / (c.eta_f * gpu.flops)
        heads = arch.num_heads / tp
        self._c_attn = 4.0 * arch.num_layers * heads * arch.head_dim / (c.eta_a * gpu.flops)
        if arch.is_mla:     # the absorbed decode kernel's cost per pair (ModelArch.attn_flops_per_pair)
            self._c_attn = arch.num_layers * heads * arch.attn_flops_per_pair(decode=True) / (c.eta_a * gpu.flops)
        self._c_kv = self.kv_bytes_per_token / (c.eta_kv * gpu.bandwidth)
        if tp > 1:
            self._c_comm = (2.0 * arch.num_layers * arch.hidden_size * 2 * 2 * (tp - 1) / tp
                            / gpu.link_for(tp))
            self._comm0 = 2.0 * arch.num_layers * c.tp_sync
        else:
            self._c_comm = self._comm0 = 0.0
        self._t0, self._t_seq = c.t0, c.t_seq

    def step_time(self, num_decode: int, decode_context: int, num_chunks: int,
                  prefill_tokens: int, prefill_pairs: float, prefill_context: int) -> float:
        """Seconds for one engine step (module docstring for the arguments); 0.0 for an empty
        step.  Plain float arithmetic: about a microsecond."""
        tokens = num_decode + prefill_tokens
        if tokens <= 0:
            return 0.0
        w = self._w_fixed
        if self._w_experts:
            w += self._w_experts * (1.0 - self._untouched ** tokens)
        f = self._c_lin * tokens + self._c_head * (num_decode + num_chunks)
        a = self._c_attn * (decode_context + prefill_pairs)
        kv = self._c_kv * (decode_context + prefill_context + tokens)
        return (self._t0 + self._t_seq * (num_decode + num_chunks) + (w if w > f else f)
                + (a if a > kv else kv) + self._comm0 + self._c_comm * tokens)

    def terms(self, num_decode: int, decode_context: int, num_chunks: int, prefill_tokens: int,
              prefill_pairs: float, prefill_context: int) -> dict[str, float]:
        """The step's terms in seconds (``fixed``, ``weights``, ``gemm_flops``, ``attn_flops``,
        ``kv_read``, ``tp_comm``) and ``total``, for logs and docs: which bound is active."""
        tokens = num_decode + prefill_tokens
        w = self._w_fixed + self._w_experts * (1.0 - self._untouched ** tokens)
        return {"fixed": self._t0 + self._t_seq * (num_decode + num_chunks), "weights": w,
                "gemm_flops": self._c_lin * tokens + self._c_head * (num_decode + num_chunks),
                "attn_flops": self._c_attn * (decode_context + prefill_pairs),
                "kv_read": self._c_kv * (decode_context + prefill_context + tokens),
                "tp_comm": (self._comm0 + self._c_comm * tokens) if tokens else 0.0,
                "total": self.step_time(num_decode, decode_context, num_chunks, prefill_tokens,
                                        prefill_pairs, prefill_context)}

    def frontend_time(self) -> float:
        """The TTFT's frontend overhead in seconds (``t_frontend``)."""
        return self.constants.t_frontend


class TableStepTime:
    """Step time from a measured :class:`StepTable` instead of the roofline; same interface.

    ``kv_bytes_per_token``: the per-GPU figure P/D transfers use (0 when unknown); the table's
    ``context_tokens`` axis is the mean decode context ``decode_context / num_decode``."""

    def __init__(self, table: StepTable, constants: StepConstants | None = None,
                 kv_bytes_per_token: int = 0) -> None:
        self.table = table
        self.constants = (constants or StepConstants()).validate()
        self.kv_bytes_per_token = kv_bytes_per_token

    def step_time(self, num_decode: int, decode_context: int, num_chunks: int,
                  prefill_tokens: int, prefill_pairs: float, prefill_context: int) -> float:
        """Seconds for one step, interpolated in (decode seqs, mean context, prefill tokens);
        0.0 for an empty step."""
        if num_decode + prefill_tokens <= 0:
            return 0.0
        ctx = decode_context / num_decode if num_decode else 0.0
        return self.table.lookup(num_decode, ctx, prefill_tokens)

    def frontend_time(self) -> float:
        """The TTFT's frontend overhead in seconds (``t_frontend``)."""
        return self.constants.t_frontend


StepTimeFn = Callable[[int, int, int, int, float, int], float]


def jittered(step_time_fn: StepTimeFn, rng: random.Random, rel_std: float) -> StepTimeFn:
    """``step_time_fn`` with seeded multiplicative noise: each call's time is multiplied by
    Normal(1, rel_std) clamped to ``1 +- 3 rel_std`` and to at least 0.05 (never <= 0).
    ``rng``: the caller's seeded ``random.Random``.  ``rel_std`` 0 returns the function itself."""
    if rel_std <= 0:
        return step_time_fn
    lo, hi = max(0.05, 1.0 - 3.0 * rel_std), 1.0 + 3.0 * rel_std
    gauss = rng.gauss

    def step_time(num_decode: int, decode_context: int, num_chunks: int, prefill_tokens: int,
                  prefill_pairs: float, prefill_context: int) -> float:
        t = step_time_fn(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs,
                         prefill_context)
        g = gauss(1.0, rel_std)
        return t * (lo if g < lo else hi if g > hi else g)

    return step_time


def build_step_time(gpu: GPU, arch: ModelArch, *, tp: int = 1, quantization: str = "",
                    kv_cache_dtype: str = "auto", profile_path: str = "",
                    constants: StepConstants | None = None) -> RooflineStepTime | TableStepTime:
    """The step-time model a configuration asks for: the roofline with ``constants`` (or the
    defaults), overridden by the profile at ``profile_path`` when given; that profile's
    ``step_table``, when it has one, replaces the roofline.  Raises ConfigError as the parts
    do."""
    table = None
    if profile_path:
        constants, table = load_profile(os.fspath(profile_path), constants)
    roof = RooflineStepTime(gpu, arch, tp=tp, quantization=quantization,
                            kv_cache_dtype=kv_cache_dtype, constants=constants)
    if table is None:
        return roof
    return TableStepTime(table, roof.constants, roof.kv_bytes_per_token)


def bench_latency(model: RooflineStepTime | TableStepTime, batch: int, input_len: int,
                  output_len: int) -> tuple[float, float]:
    """``vllm bench latency`` in virtual time: ``batch`` prompts of ``input_len`` tokens
    prefilled in one step (the budget permitting, as in docs/engine-model.md §4's runs), then
    ``output_len - 1`` decode steps with the contexts growing.  Returns ``(batch latency,
    mean decode step)`` in seconds (the first is what the bench prints, the second a TPOT)."""
    n = input_len
    total = model.step_time(0, 0, batch, batch * n, batch * n * n / 2.0, 0)
    decode = 0.0
    for k in range(1, output_len):
        decode += model.step_time(batch, batch * (input_len + k - 1), 0, 0, 0.0, 0)
    steps = max(1, output_len - 1)
    return total + decode, decode / steps


def to_json(constants: StepConstants) -> str:
    """The constants as a JSON object (a profile file that reproduces them)."""
    return json.dumps({f: getattr(constants, f) for f in _CONSTANT_FIELDS}, indent=2)
