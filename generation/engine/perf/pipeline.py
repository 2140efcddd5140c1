"""Pipeline parallelism in step mode (``--pipeline-parallel-size P``, ``-pp``): the model's
layers split over ``P`` stages of ``--tensor-parallel-size`` GPUs each.

**Memory.**  A GPU holds one stage: :func:`stage_arch` is the fullest stage's shape, from which
the KV blocks are sized as for any model (vLLM's KV cache config takes the smallest budget over
the stages).

**Time.**  vLLM 0.34 keeps ``P`` batches in flight (``P + 1`` with async scheduling; its engine
core's batch queue), each scheduled with the full ``--max-num-batched-tokens``: a prompt's next
chunk may go into the very next batch, while a decoding request waits for its previous output
(async scheduling: joins one batch in ``P``, the scheduler's ``next_decode_eligible_step``).
The engine here stays synchronous: one of its steps is a rotation of ``P`` micro-batches, in
which every running request advances once and prompts take up to ``P x
--max-num-batched-tokens`` tokens (the scheduler's budget: ``replay.scheduler_for``).
:func:`rotation_time` spreads the rotation's decodes evenly over the micro-batches and its
prompt tokens over as many as they fill, ``--max-num-batched-tokens`` each, and prices it as

    sum over micro-batches of whole(m) / P   (+ hops)

where ``whole(m)`` is the whole model's step over micro-batch ``m`` (its ``P`` stages one after
another): each stage serves every micro-batch once a rotation.  With fewer micro-batches than
stages the pipeline is not full, and a rotation is at least the slowest micro-batch's crossing
of every stage (a lone request gains nothing from the stages).  A full pipeline's heavier
micro-batch (a prompt chunk beside decodes) holds its own decodes longer than the rotation
says: the synchronous engine advances every request at the same pace.  The hops send a
micro-batch's hidden state and residual ``P - 1`` times, over NVLink within a node and the
network between nodes (TP x PP past the GPU's NVLink domain: 8 in a node, 72 in a GB200 NVL72).  Times in seconds."""
from __future__ import annotations

import math
from dataclasses import replace

from generation.config.values import ConfigError



def stage_arch(arch, pp: int):
    """The fullest pipeline stage's shape, for its weights and its KV cache: ``ceil(layers /
    pp)`` layers, none of them a leading dense layer (vLLM's ``get_pp_indices`` gives the
    first stages the remainder, so the last holds MoE layers only: DeepSeek-R1's 61 at PP 2 are
    31 and 30), and one vocabulary matrix (the first stage's embedding or the last's LM head:
    counted as a tied pair).  Raises ConfigError for more stages than layers."""
    if pp > arch.num_layers:
        raise ConfigError(f"--pipeline-parallel-size {pp} is more than the model's {arch.num_layers} layers",
                          "pipeline-parallel-size")
    layers = -(-arch.num_layers // pp)
    return replace(arch, num_layers=layers, dense_layers=max(0, arch.dense_layers - (arch.num_layers - layers)),
                   tie_word_embeddings=True, sliding_layers=-(-arch.sliding_layers * layers // arch.num_layers))


def install(model, pp: int, micro_tokens: int, gpu) -> None:
    """Make ``model`` (a StepModel of the whole model) price rotations: its ``step_time``
    becomes :func:`rotation_time` over the original (an instance attribute: a model without
    ``-pp`` keeps the class's, untouched).  ``micro_tokens``: ``--max-num-batched-tokens``;
    ``gpu`` (:class:`~.hardware.GPU`): the hops' link, NVLink within its domain, else the
    network."""
    whole = model.step_time
    c = model.constants
    link = gpu.link_for(model.tp * pp)
    hop0 = (pp - 1) * c.t_ar
    hop = (pp - 1) * 2 * model.arch.hidden_size * model.arch.dtype_bytes / model.tp / link / c.eta_ar

    def step_time(num_decode, decode_context, num_chunks, prefill_tokens, prefill_pairs, prefill_context,
                  kv_reload_tokens=0, spec_tokens=0, spec_pairs=0.0):
        return rotation_time(whole, pp, micro_tokens, hop0, hop, num_decode, decode_context, num_chunks,
                             prefill_tokens, prefill_pairs, prefill_context, kv_reload_tokens, spec_tokens, spec_pairs)
    model.step_time = step_time
    model.pp = pp
    jit = model.moe_jit
    model.moe_jit = lambda _budget: MicroBatchJit.of(jit(micro_tokens), micro_tokens)


class MicroBatchJit:
    """A MoE engine's kernel compiles (:class:`~.stalls.MoeJit`) under PP: vLLM's profile run
    and its steps are micro-batches of at most ``--max-num-batched-tokens``, so a rotation's
    tokens past that select no larger kernel variant."""
    __slots__ = ("jit", "micro")

    def __init__(self, jit, micro: int):
        self.jit, self.micro = jit, micro

    @classmethod
    def of(cls, jit, micro: int):
        return None if jit is None else cls(jit, micro)

    @property
    def max_graph(self) -> int:
        return self.jit.max_graph

    @property
    def stalls(self) -> int:
        return self.jit.stalls

    def stall(self, tokens: int) -> float:
        return self.jit.stall(min(tokens, self.micro))


def rotation_time(whole, pp: int, micro_tokens: int, hop0: float, hop: float, num_decode: int,
                  decode_context: int, num_chunks: int, prefill_tokens: int, prefill_pairs: float,
                  prefill_context: int, kv_reload_tokens: int = 0, spec_tokens: int = 0,
                  spec_pairs: float = 0.0) -> float:
    """One rotation's seconds (module docstring): ``d = min(pp, decodes)`` micro-batches share
    the decodes (and their drafts), ``k = min(pp, ceil(prompt tokens / micro_tokens))`` the
    prompt tokens, chunks and reloads, the first ``min(d, k)`` holding both; ``hop0 + hop x
    tokens`` (s; ``hop`` per token) is a micro-batch's crossing of the stages."""
    if num_decode + prefill_tokens + spec_tokens <= 0:
        return 0.0
    up = math.ceil
    d = min(pp, num_decode)
    k = min(pp, up(prefill_tokens / micro_tokens)) if prefill_tokens else 0
    dec = (up(num_decode / d), up(decode_context / d), up(spec_tokens / d), spec_pairs / d) if d else (0, 0, 0, 0.0)
    pre = ((up(num_chunks / k), up(prefill_tokens / k), prefill_pairs / k, up(prefill_context / k),
            up(kv_reload_tokens / k)) if k else (0, 0, 0.0, 0, 0))
    kinds = []                  # (micro-batches, tokens of one, whole-model seconds of one)
    both = min(d, k)
    if both:
        kinds.append((both, dec[0] + pre[1] + dec[2], whole(dec[0], dec[1], pre[0], pre[1], pre[2], pre[3], pre[4],
                                                            dec[2], dec[3])))
    if d > both:
        kinds.append((d - both, dec[0] + dec[2], whole(dec[0], dec[1], 0, 0, 0.0, 0, 0, dec[2], dec[3])))
    if k > both:
        kinds.append((k - both, pre[1], whole(0, 0, pre[0], pre[1], pre[2], pre[3], pre[4])))
    t = sum(n * t for n, _, t in kinds) / pp
    if max(d, k) < pp:              # the pipeline is not full: a micro-batch's own crossing bounds it
        t = max(t, max(t for _, _, t in kinds))
    return t + hop0 + hop * max(m for _, m, _ in kinds)
