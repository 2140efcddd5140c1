"""Scheduler helpers of the step engine's unit tests (virtual time)."""
from __future__ import annotations

from generation.engine.scheduler import Scheduler


def make_scheduler(**kw) -> Scheduler:
    """A scheduler of 1,000 blocks of 16 tokens, 8 seats, 2,048 tokens per step, 4,096-token
    context; ``kw`` overrides any of them (and passes the rest)."""
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096)
    args.update(kw)
    return Scheduler(**args)


def run_step(s: Scheduler, now: float, length: float = 0.01):
    """Plan a step at ``now`` and end it ``length`` seconds later: ``(plan, emitted)``."""
    plan = s.schedule(now)
    return plan, s.complete(plan, now + length)
