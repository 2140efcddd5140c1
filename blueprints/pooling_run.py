"""Running a pooling request's sequences on the engine, shared by ``/v1/embeddings``
(:mod:`blueprints.embeddings`) and the pooling routes (:mod:`blueprints.pooling`)."""
from __future__ import annotations

from flask import request

from .common import received_at, run_to_completion


def run_pooled(sim, seqs) -> None:
    """Admit ``seqs`` and wait until they finish (slot, queue, prefill time, metrics), in waves
    of at most ``--max-num-seqs`` when there are more than the seats and the waiting queue hold
    together (vLLM's engine takes a 2,048-document rerank whole and runs it ``max_num_seqs`` at
    a time; here the default 1,024 seats and 1,000 queue places made every 2,048-document rerank
    a 429, against the documented 2,048 limit).  Raises QueueFullError (429) when a wave finds
    the queue full, or ClientDisconnected; anything admitted is released on failure."""
    if not seqs:
        return
    environ = request.environ
    cfg = sim.config
    wave = len(seqs) if len(seqs) <= cfg.max_num_seqs + cfg.max_waiting_queue_length else max(cfg.max_num_seqs, 1)
    arrived = received_at(environ)
    for lo in range(0, len(seqs), wave):
        part = seqs[lo:lo + wave]
        sim.admit(part, arrived, limits=False)     # vLLM's pooling serving skips check_admission
        try:
            run_to_completion(sim, part, environ)
        except BaseException:
            sim.cancel(part)
            raise
