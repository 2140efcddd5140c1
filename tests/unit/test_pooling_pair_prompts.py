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
        cfg = SimpleNamespace(max_model_len=rng.choice([8, 16, 32]), pooling_kind="score")     # a cross-encoder
        q = [[rng.randrange(100) for _ in range(rng.randrange(30))] for _ in range(rng.choice([1, 3]))]
        d = [[rng.randrange(100) for _ in range(rng.randrange(30))] for _ in range(3)]
        pairs = [(0, j) for j in range(3)] if len(q) == 1 else [(i, i) for i in range(3)]
        trunc = rng.choice([None, -1, 4, 8, 16, 40])
        assert outcome(lambda: pa.pair_prompts(cfg, q, d, pairs, trunc, "scoring", "documents")) == \
            outcome(lambda: pa.fit_context(cfg, [q[i] + d[j] for i, j in pairs], trunc, "scoring", "documents"))


def test_a_long_query_is_refused_before_it_is_copied_into_every_pair():
    cfg = SimpleNamespace(max_model_len=1024, pooling_kind="score")
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


def test_token_tasks_embed_every_prefix_in_linear_time():
    """token_embed / token_classify rows are each prefix's embedding / logits, built up token by
    token (a running bag of tokens and a running BLAKE2b): bit for bit what embedding each
    prefix from scratch gives, without its quadratic cost (10,900 tokens took 26 s of CPU, a
    60 KB body; now about 1 s)."""
    import time

    import numpy as np

    from generation.content import pooling as pool
    ids = [5, 9, 5, 123456789012, 0, 77, 77, 3] * 5
    for dims in (384, 64):
        whole = np.stack([pool.embedding_vector(ids[:i + 1], dims, 384) for i in range(len(ids))])
        assert np.array_equal(pool.token_embeddings(ids, dims, 384), whole)
    for labels in (1, 2):
        assert pool.token_classify_logits(ids, 384, labels) == \
            [pool.classify_logits(ids[:i + 1], 384, labels) for i in range(len(ids))]
    start = time.process_time()
    rows = pool.token_embeddings(list(range(100, 8100)), 384, 384)
    assert rows.shape == (8000, 384) and time.process_time() - start < 8      # quadratic: ~14 s
