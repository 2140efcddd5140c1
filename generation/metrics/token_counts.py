"""The token counters' bookkeeping of :class:`~generation.metrics.recorder.MetricsRecorder`
(a mixin): step mode's per-step counting of generated tokens and prompts, and a prompt's split by
source (computed here, a prefix-cache hit, a KV transfer), as vLLM's ``IterationStats`` count
them (``vllm/v1/metrics/stats.py``).  The recorder owns the counters (``generation_tokens``,
``prompt_tokens``, ``by_source``, ``prompt_cached``)."""
from __future__ import annotations


class TokenCounting:
    """Mixin: counts into the recorder's token counters."""

    def engine_tokens(self, emitted) -> None:
        """Step mode, once per step (``StepEngine._record``), as vLLM's ``IterationStats``: each
        token the step emitted (``new_tokens`` of each of its EngineRequests) counts in
        ``vllm:generation_tokens``, a prompt in ``vllm:prompt_tokens`` (and by source) with its
        first token; :meth:`finished` and :meth:`aborted` then count neither again.  A token past
        the answer's own (an empty answer's step) is not counted: the counters equal the usage."""
        made = 0
        for req in emitted:
            seq = req.seq
            new = req.new_tokens            # 1, or with speculative decoding 1 + the accepted drafts
            if seq is None:
                made += new
                continue
            out = req.num_output
            if out <= seq.completion_tokens:
                made += new
            elif out - new < seq.completion_tokens:
                made += seq.completion_tokens - (out - new)
            if out == 1:
                self._count_prompt(seq)
        self.generation_tokens.value += made

    @staticmethod
    def _prompt_split(seq) -> tuple[int, int, int]:
        """``(computed here, prefix-cache hit, KV transfer)`` tokens of ``seq``'s prompt: a remote
        prefill's KV, or (step mode) the blocks its engine request reloaded from the CPU tier,
        which vLLM's offloading connector counts as ``external_kv_transfer``."""
        p = seq.prompt_len
        cached = min(seq.cached_tokens, p)
        if getattr(seq.request, "remote_prefill", False):
            return 0, cached, p - cached
        engine_req = getattr(seq, "engine_req", None)
        external = min(engine_req.reloaded_tokens, cached) if engine_req is not None else 0
        return p - cached, cached - external, external

    def _count_prompt(self, seq) -> int:
        """Count the prompt's tokens, by source (computed here, a prefix-cache hit, or a remote
        prefill's KV transfer), as vLLM's ``prompt_tokens`` and ``prompt_tokens_by_source``;
        returns the tokens computed here."""
        computed, cached, external = self._prompt_split(seq)
        self.prompt_tokens.value += seq.prompt_len
        src = self.by_source
        src["local_compute"].value += computed
        src["local_cache_hit"].value += cached
        src["external_kv_transfer"].value += external
        self.prompt_cached.value += cached + external
        return computed
