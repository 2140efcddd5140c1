"""Response lengths (seeds): the bucket ranges, the histogram's bucket probabilities and small
caps, and the default Gaussian / uniform lengths."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from generation.content.sources import bucket_ranges, sample_capped_length, sample_default_length


# ---- length histogram (seeds) -----------------------------------------------------------------
def test_bucket_ranges_match_seed_examples():
    assert bucket_ranges(60) == [(1, 10), (11, 20), (21, 30), (31, 40), (41, 50), (51, 60)]
    assert bucket_ranges(200) == [(1, 20), (21, 40), (41, 60), (61, 160), (161, 180), (181, 200)]
    assert bucket_ranges(120) == [(1, 20), (21, 40), (41, 60), (61, 80), (81, 100), (101, 120)]
    assert bucket_ranges(121)[3] == (61, 81)


@pytest.mark.parametrize("max_tokens", [60, 200, 1000])
def test_histogram_bucket_probabilities(max_tokens):
    rng = random.Random(1234)
    ranges = bucket_ranges(max_tokens)
    n = 40000
    hits = Counter()
    for _ in range(n):
        v = sample_capped_length(rng, max_tokens)
        assert 1 <= v <= max_tokens
        hits[next(b for b, (s, e) in enumerate(ranges) if s <= v <= e)] += 1
    for b, p in enumerate((0.20, 0.30, 0.20, 0.05, 0.10, 0.15)):
        assert abs(hits[b] / n - p) < 0.012, (b, hits[b] / n, p)


def test_histogram_small_caps():
    rng = random.Random(5)
    assert {sample_capped_length(rng, 1) for _ in range(50)} == {1}
    assert {sample_capped_length(rng, 3) for _ in range(500)} == {1, 2, 3}


def test_default_length_gaussian_and_uniform():
    rng = random.Random(99)
    vals = [sample_default_length(rng, 1000) for _ in range(20000)]
    assert all(1 <= v <= 1000 for v in vals)
    mean = sum(vals) / len(vals)
    assert 40 <= mean <= 46          # Normal(40, 20) truncated at 1 shifts the mean up a little
    small = {sample_default_length(rng, 10) for _ in range(2000)}
    assert small == set(range(1, 11))
