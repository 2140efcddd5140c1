"""The running totals ``--max-num-queued-tokens`` reads per arrival (generation/engine/admission.py),
through the app in both latency modes: while requests queue, prefill, stream, finish and are
cancelled (a client that leaves), and in step mode wait out the frontend's delay, the total is
what admission summed over the queue before (O(queue) per arrival), and so is every decision.
The scheduler's total under preemption and group decoding: tests/unit/test_engine_prefill_tokens.py."""
from __future__ import annotations

import random

import gevent
import pytest

from generation.engine.admission import check_admission
from generation.errors import MaxQueuedTokens
from support import INPROC_URL, SimClient, make_app

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LIMIT = 400


def scanned(sim) -> int:
    """The prompt tokens admission summed before the running totals."""
    engine = sim.engine
    if engine is not None:
        sched = engine.scheduler
        return engine.pending_tokens + sum(r.prompt_len for r in sched.waiting if not r.num_output) + \
            sum(r.prompt_len for r in sched.running if not r.num_output)
    return sum(s.prompt_len for s in sim.waiting) + sum(s.prompt_len for s in sim.running_seqs if not s.first_token_at)


def total(sim) -> int:
    engine = sim.engine
    return engine.pending_tokens + engine.scheduler.prefill_tokens if engine is not None else sim.prefill_tokens


def refuses(sim) -> bool:
    """Admission's decision for one more request under ``--max-num-queued-tokens LIMIT``."""
    sim.config.max_num_queued_tokens = LIMIT
    try:
        check_admission(sim, 1)
    except MaxQueuedTokens:
        return True
    finally:
        sim.config.max_num_queued_tokens = None         # the load itself is never refused
    return False


def in_flight(sim) -> list:
    engine = sim.engine
    if engine is not None:
        return [r.seq for r in (*engine.scheduler.running, *engine.scheduler.waiting) if r.seq is not None]
    return [*sim.running_seqs, *sim.waiting]


@pytest.mark.parametrize("flags, model", [
    (("--time-to-first-token", "100ms", "--inter-token-latency", "10ms"), "test-model"),
    (("--latency-calculator", "step", "--force-dummy-tokenizer"), LLAMA),
])
def test_the_total_and_every_decision_are_the_queues_sum(flags, model):
    c = SimClient(INPROC_URL, app=make_app("--max-num-seqs", "3", *flags, model=model))
    sim = c.sim
    rng = random.Random(7)

    def request(i):
        body = {"model": model, "prompt": list(range(100, 100 + rng.randint(1, 300))), "max_tokens": rng.randint(1, 30),
                "ignore_eos": True, "stream": rng.random() < 0.5, "n": rng.choice([1, 1, 2])}
        c.post("/v1/completions", json=body, timeout=60)

    clients = [gevent.spawn_later(rng.random() * 1.5, request, i) for i in range(40)]
    checks = refusals = 0
    while not all(g.dead for g in clients):
        assert total(sim) == scanned(sim)
        refused = refuses(sim)
        assert refused == (scanned(sim) >= LIMIT)
        refusals += refused
        live = in_flight(sim)
        if live and rng.random() < 0.05:
            sim.cancel([rng.choice(live)])        # its client left
        checks += 1
        gevent.sleep(rng.random() * 0.01)
    assert total(sim) == scanned(sim) == 0 and checks > 50 and 0 < refusals < checks
    c.close()
