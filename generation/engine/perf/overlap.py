"""Dual-batch overlap in step mode (``--enable-dbo``, vLLM 0.34's DBO): a MoE model's step under
data and expert parallelism split into two micro-batches, one's all-to-all exchange running
while the other computes.

vLLM splits a step into two when it has at least ``--dbo-decode-token-threshold`` tokens (a
decode-only step) or ``--dbo-prefill-token-threshold`` (one with a prompt); the exchange
(:func:`~.hardware.exchange_terms`) then hides behind the rest of the step, and the step takes
``max(rest, exchange)`` instead of their sum.  A smaller step runs whole.  The split's own costs
(each micro-batch's fixed costs, the GEMMs of half the rows) are left out.  Times in seconds."""
from __future__ import annotations

from generation.config.values import ConfigError

MICRO_BATCHES = 2


def check_thresholds(decode: int, prefill: int) -> None:
    """vLLM's rule: a micro-batch needs a token.  Raises ConfigError with vLLM's message."""
    if min(decode, prefill) < MICRO_BATCHES:
        raise ConfigError("dbo_decode_token_threshold and dbo_prefill_token_threshold must be at least the "
                          f"number of microbatches ({MICRO_BATCHES}).", "dbo-decode-token-threshold")


def install(model, exchange: tuple[int, float], decode_threshold: int, prefill_threshold: int) -> None:
    """Make ``model``'s ``step_time`` overlap its ``exchange`` (``(ops, s a token of one op)``,
    at full bandwidth) with the rest of a step large enough to split (module docstring)."""
    whole = model.step_time
    c = model.constants
    ops, per_token = exchange
    fixed, per = ops * c.t_ar, ops * per_token / c.eta_ar

    def step_time(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context,
                  kv_reload_tokens=0, spec_tokens=0, spec_pairs=0.0):
        t = whole(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context,
                  kv_reload_tokens, spec_tokens, spec_pairs)
        tokens = num_decode + prefill_tokens + spec_tokens
        if tokens < (prefill_threshold if num_chunks else decode_threshold):
            return t
        x = fixed + per * tokens
        return max(t - x, x)
    model.step_time = step_time
    model.dbo = True
