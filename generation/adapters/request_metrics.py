"""An answer's ``metrics`` (vLLM 0.34's ``PerRequestMetrics``): ``--enable-per-request-metrics``'
times and ``--per-request-spec-decode-metrics``' ``speculative_decoding``, for one sequence
(vLLM leaves them out with ``n > 1`` or several prompts: it cannot attribute them)."""
from __future__ import annotations

import time

TIMING = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")


def per_request_metrics(sim, seqs, stream: bool = False, spec: bool = False) -> dict | None:
    """vLLM 0.34's ``--enable-per-request-metrics`` (``build_per_request_timing_metrics``): the
    request's ``time_to_first_token_ms`` (scheduled to first token), ``generation_time_ms``
    (first to last token), ``queue_time_ms`` (queued to scheduled), ``mean_itl_ms`` (with more
    than one token) and ``tokens_per_second`` (tokens over scheduled to last token), from the
    sequence's own times; None without the flag or with ``n > 1``.  ``spec`` (chat and
    completions, as vLLM's ``build_spec_decoding_metrics``): ``speculative_decoding`` is the
    sequence's record (:func:`spec_decoding`), and with it ``metrics`` is there without the
    timing flag too, its times null (vLLM's bare ``PerRequestMetrics()``).  ``stream``: a
    stream's usage chunk leaves out what is null (vLLM's ``exclude_none``); a body carries
    ``mean_itl_ms: null`` and ``speculative_decoding: null``."""
    if len(seqs) != 1:
        return None
    sd = spec_decoding(seqs[0], stream) if spec else None
    if not sim.config.enable_per_request_metrics:
        if sd is None:
            return None
        return {"speculative_decoding": sd} if stream else dict.fromkeys(TIMING) | {"speculative_decoding": sd}
    s = seqs[0]
    now = time.monotonic()
    # vLLM's queued_ts is the engine core's QUEUED event: in step mode the engine's queueing, after
    # the modelled frontend, as vllm:request_queue_time_seconds counts it (MetricsRecorder.finished)
    engine_req = getattr(s, "engine_req", None)
    queued = engine_req.queued_at if engine_req is not None else (s.arrival or s.enqueued_at or s.started_at)
    scheduled = s.started_at or queued
    first = s.first_token_at or scheduled
    last = s.finished_at or now
    n = s.completion_tokens
    out = {"time_to_first_token_ms": max(0.0, (first - scheduled) * 1000),
           "generation_time_ms": max(0.0, (last - first) * 1000),
           "queue_time_ms": max(0.0, (scheduled - queued) * 1000),
           "mean_itl_ms": max(0.0, (last - first) / (n - 1) * 1000) if n > 1 else None,
           "tokens_per_second": n / (last - scheduled) if last > scheduled else None,
           "speculative_decoding": sd}
    if stream:
        out = {k: v for k, v in out.items() if v is not None}
    return out


def spec_decoding(seq, stream: bool = False) -> dict | None:
    """``metrics.speculative_decoding`` of ``seq``: its engine request's
    :class:`~generation.engine.spec_decode.RequestSpecMetrics` (step mode, a speculative config,
    ``--per-request-spec-decode-metrics`` summary or detailed) as vLLM serialises its
    ``SpeculativeDecodingMetrics``: a body's ``per_step_accepted`` / ``per_step_drafted`` null
    at ``summary`` (``model_dump``), a stream's left out (``exclude_unset``).  None without a
    record, and for an answer a stop string ended: vLLM's output processor finishes it there,
    before the engine core sends the record with its last output."""
    rec = getattr(getattr(seq, "engine_req", None), "spec_metrics", None)
    if rec is None or isinstance(seq.stop_reason, str):
        return None
    out = rec.to_dict()
    if not stream:
        out.setdefault("per_step_accepted", None)
        out.setdefault("per_step_drafted", None)
    return out
