"""Pipeline parallelism in step mode (``--pipeline-parallel-size P``, ``-pp``): the model's
layers split over ``P`` stages of ``--tensor-parallel-size`` GPUs each.

**Memory.**  A GPU holds one stage: ``ceil(layers / P)`` layers' weights and KV cache, and the
embedding (first stage) or the LM head (last): :func:`stage_arch` is that stage's shape, from
which the KV blocks are sized as for any model (vLLM's KV cache config takes the smallest stage
budget; the fullest stage sets it).

**Time.**  vLLM 0.34 keeps ``P`` batches in flight (its engine core's batch queue), and with
async scheduling (the default) a decoding request joins one batch in every ``P`` (the
scheduler's ``next_decode_eligible_step``), so the running requests travel in ``P`` staggered
micro-batches.  The engine here stays synchronous: one of its steps is one rotation, in which
every scheduled request advances once, and :func:`pipelined_step_time` prices it as the whole
model's step over ``1 / d`` of the step's work (``d = min(P, requests)``: with fewer requests than
stages the pipeline is not full, and a lone request's step is the whole model's), but never less
than the whole model's step over the largest prefill chunk (a request is never split across
micro-batches), plus each micro-batch's ``P - 1`` hops of its hidden states and residual between
stages.  Without async scheduling every schedulable request is in the one batch in flight
(``d = 1``): the stages take turns.  The per-step CPU and fixed costs are the whole model's
(per layer: all layers run once per rotation).  Times in seconds."""
from __future__ import annotations

import math
from dataclasses import replace

from generation.config.values import ConfigError


def stage_arch(arch, pp: int):
    """The fullest pipeline stage's shape, for its weights and its KV cache: ``ceil(layers /
    pp)`` layers (as many of them dense as the model has, up to that) and one vocabulary matrix
    (the first stage's embedding or the last's LM head: counted as a tied pair).  Raises
    ConfigError for more stages than layers (vLLM's ``get_pp_indices`` gives each a layer)."""
    if pp > arch.num_layers:
        raise ConfigError(f"--pipeline-parallel-size {pp} is more than the model's {arch.num_layers} layers",
                          "pipeline-parallel-size")
    layers = -(-arch.num_layers // pp)
    return replace(arch, num_layers=layers, dense_layers=min(arch.dense_layers, layers), tie_word_embeddings=True,
                   sliding_layers=-(-arch.sliding_layers * layers // arch.num_layers))


def install(model, pp: int, link_bandwidth: float) -> None:
    """Make ``model`` (a StepModel of the whole model) price pipelined steps: its ``step_time``
    becomes :func:`pipelined_step_time` over the original (an instance attribute: a model without
    ``-pp`` keeps the class's, untouched)."""
    whole = model.step_time
    c = model.constants
    hop0 = (pp - 1) * c.t_ar                                    # each hop's fixed cost
    hop = (pp - 1) * 2 * model.arch.hidden_size * model.arch.dtype_bytes / model.tp / link_bandwidth / c.eta_ar
    split = bool(model.async_scheduling)

    def step_time(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context,
                  kv_reload_tokens=0, spec_tokens=0, spec_pairs=0.0):
        return pipelined_step_time(whole, pp if split else 1, hop0, hop, num_decode, decode_context, num_chunks,
                                   prefill_tokens, prefill_pairs, prefill_context, kv_reload_tokens, spec_tokens,
                                   spec_pairs)
    model.step_time = step_time
    model.pp = pp


def pipelined_step_time(whole, pp: int, hop0: float, hop: float, num_decode: int, decode_context: int,
                        num_chunks: int, prefill_tokens: int, prefill_pairs: float, prefill_context: int,
                        kv_reload_tokens: int = 0, spec_tokens: int = 0, spec_pairs: float = 0.0) -> float:
    """One rotation's seconds (module docstring): ``whole`` (the whole model's ``step_time``) over
    ``1 / d`` of every aggregate, ``d = min(pp, requests)`` (counts rounded up), at least the
    whole model over the largest prefill chunk (the mean chunk: the aggregates hold no single
    one), plus the hops: ``hop0 + hop x tokens / d`` (s; ``hop`` per token)."""
    tokens = num_decode + prefill_tokens + spec_tokens
    if tokens <= 0:
        return 0.0
    d = min(pp, num_decode + num_chunks) or 1
    if d == 1:
        t = whole(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context,
                  kv_reload_tokens, spec_tokens, spec_pairs)
    else:
        up = math.ceil
        t = whole(up(num_decode / d), up(decode_context / d), up(num_chunks / d), up(prefill_tokens / d),
                  prefill_pairs / d, up(prefill_context / d), up(kv_reload_tokens / d), up(spec_tokens / d),
                  spec_pairs / d)
        if num_chunks:              # a chunk rides in one micro-batch: the rotation waits for it
            n = num_chunks
            t = max(t, whole(0, 0, 1, up(prefill_tokens / n), prefill_pairs / n, up(prefill_context / n)))
    return t + hop0 + hop * tokens / d
