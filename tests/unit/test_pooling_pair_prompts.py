"""A cross-encoder's pair prompts (generation.adapters.pooling.pair_prompts): what fit_context
makes of the concatenated pairs, without building a pair before its length is checked."""
from __future__ import annotations

import random
import tracemalloc
from types import SimpleNamespace

import pytest

from generation.adapters import pooling as pa
from generation.errors import InvalidParam


def outcome(f):
    try:
        return ("ok", f())
    except InvalidParam as e:
        return ("error", e.message, e.param)


def test_pair_prompts_equal_fit_context_of_the_concatenated_pairs():
    rng = random.Random(7)
    for _ in range(2000):
        cfg = SimpleNamespace(max_model_len=rng.choice([8, 16, 32]))
        q = [[rng.randrange(100) for _ in range(rng.randrange(30))] for _ in range(rng.choice([1, 3]))]
        d = [[rng.randrange(100) for _ in range(rng.randrange(30))] for _ in range(3)]
        pairs = [(0, j) for j in range(3)] if len(q) == 1 else [(i, i) for i in range(3)]
        trunc = rng.choice([None, -1, 4, 8, 16, 40])
        assert outcome(lambda: pa.pair_prompts(cfg, q, d, pairs, trunc, "scoring", "documents")) == \
            outcome(lambda: pa.fit_context(cfg, [q[i] + d[j] for i, j in pairs], trunc, "scoring", "documents"))


def test_a_long_query_is_refused_before_it_is_copied_into_every_pair():
    cfg = SimpleNamespace(max_model_len=1024)
    query, docs = [list(range(200_000))], [[1]] * 2048
    tracemalloc.start()
    try:
        with pytest.raises(InvalidParam) as e:
            pa.pair_prompts(cfg, query, docs, [(0, j) for j in range(2048)], None, "scoring", "documents")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "you requested 200001 tokens in the input for scoring" in e.value.message
    assert peak < 1_000_000         # bytes: not one 1.6 MB copy of the query, let alone 2,048
