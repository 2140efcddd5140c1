"""What a simulated pooling model computes: deterministic embeddings, classifier logits and
relevance scores for token ids (vLLM's pooler outputs, without a model).

Everything is a pure function of the token ids: the same input gives the same output across
runs and processes.  Vectors are built so that *related texts are closer*: an embedding is mostly
a bag of tokens (each token id adds +-1 at :data:`TOKEN_SLOTS` hashed positions), plus a smaller
order-dependent part (standard normals seeded by a BLAKE2b hash of the whole sequence), so the
cosine of two inputs grows with the tokens they share, equal inputs have cosine 1, and a
reordering of the same tokens is close but not equal.

Sizes: ``size`` is the model's hidden size (``--default-embedding-dimensions``); a vector of
``dimensions < size`` is the prefix of the full one re-normalised (matryoshka models), so the
hashed positions are taken modulo ``size``, never modulo ``dimensions``.
"""
from __future__ import annotations

import hashlib
import math

from generation.lanes import paced

TOKEN_SLOTS = 4              # positions each token id adds to
ORDER_WEIGHT = 0.3           # weight of the order-dependent part (the bag of tokens has 1.0)
NUM_CLASSIFY_LABELS = 2      # a --convert classify model (HF's default id2label: LABEL_0, LABEL_1)
SCORE_SCALE, SCORE_BIAS = 8.0, -2.0      # cross-encoder logit = SCALE * cosine + BIAS


def _np():
    import numpy as np       # ~0.2 s to import: paid by the first pooling request, not start-up
    return np


def _seed(ids) -> int:
    np = _np()
    digest = hashlib.blake2b(np.asarray(ids, dtype="<u8").tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _bag_of_tokens(ids, size: int):
    """Sum over the token ids of +-1 at :data:`TOKEN_SLOTS` positions each (a splitmix64
    hash of the id and the slot picks the position modulo ``size`` and the sign)."""
    np = _np()
    v = np.zeros(size)
    if len(ids) == 0:
        return v
    pos, sign = _token_slots(ids, size)
    np.add.at(v, pos.ravel(), sign.ravel())
    return v


def _token_slots(ids, size: int):
    """Each token's :data:`TOKEN_SLOTS` positions and signs: two ``len(ids) x TOKEN_SLOTS``
    int64 arrays (:func:`_bag_of_tokens` adds them up)."""
    np = _np()
    with np.errstate(over="ignore"):
        x = np.asarray(ids, dtype=np.uint64)[:, None] * np.uint64(TOKEN_SLOTS) + \
            np.arange(TOKEN_SLOTS, dtype=np.uint64)[None, :]
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    pos = (x % np.uint64(size)).astype(np.int64)
    sign = (x >> np.uint64(63)).astype(np.int64) * 2 - 1
    return pos, sign


def embedding_vector(ids, dimensions: int, size: int | None = None):
    """A deterministic unit-length (L2) float32 numpy vector of ``dimensions`` values for the
    token ids ``ids`` (a possibly empty sequence of non-negative ints); ``size`` (default
    ``dimensions``) is the full vector this one is the re-normalised prefix of."""
    size = max(size or dimensions, dimensions)
    return _unit_vector(_bag_of_tokens(ids, size), _seed(ids), dimensions, size)


def _unit_vector(bag, seed: int, dimensions: int, size: int):
    """:func:`embedding_vector` from the input's bag of tokens and its order seed."""
    np = _np()
    order = np.random.default_rng(seed).standard_normal(size)
    order /= np.linalg.norm(order)
    norm = np.linalg.norm(bag)
    v = (bag / norm if norm else bag) + ORDER_WEIGHT * order
    v = v[:dimensions]
    v /= np.linalg.norm(v)
    return v.astype("<f4")


def token_embeddings(ids, dimensions: int, size: int | None = None):
    """vLLM's ``token_embed``: one vector per token, token ``i``'s from the prefix ``ids[:i+1]``
    (a causal model's hidden state sees only what came before).  A ``len(ids) x dimensions``
    float32 array."""
    np = _np()
    if len(ids) == 0:
        return np.zeros((0, dimensions), dtype="<f4")
    size = max(size or dimensions, dimensions)
    # each prefix's embedding_vector, built up token by token: the bag of tokens is a running sum
    # and the order seed's BLAKE2b a running hash (the same digest as the prefix's bytes hashed
    # whole); embedding each prefix from scratch was quadratic (10,900 tokens: 26 s of CPU)
    pos, sign = _token_slots(ids, size)
    raw = np.asarray(ids, dtype="<u8")
    bag = np.zeros(size)
    running = hashlib.blake2b(digest_size=8)
    out = np.empty((len(ids), dimensions), dtype="<f4")
    for i in paced(range(len(ids))):
        np.add.at(bag, pos[i], sign[i])
        running.update(raw[i:i + 1].tobytes())
        out[i] = _unit_vector(bag.copy(), int.from_bytes(running.copy().digest(), "little"), dimensions, size)
    return out


def cosine(a, b) -> float:
    """Cosine similarity of two unit vectors (vLLM's bi-encoder score), in [-1, 1]."""
    np = _np()
    return float(np.clip(np.dot(a.astype("f8"), b.astype("f8")), -1.0, 1.0))


def _label_weights(num_labels: int, size: int):
    np = _np()
    w = np.random.default_rng(0x5EED_1AB + num_labels).standard_normal((num_labels, size))
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def classify_logits(ids, size: int, num_labels: int = NUM_CLASSIFY_LABELS) -> list[float]:
    """The classifier head's ``num_labels`` logits for ``ids``: the projection of the input's
    embedding on one fixed unit vector per label, scaled to a few units."""
    return _head_logits(embedding_vector(ids, size, size), size, num_labels)


def token_classify_logits(ids, size: int, num_labels: int = NUM_CLASSIFY_LABELS) -> list[list[float]]:
    """``[classify_logits(ids[:i + 1], size, num_labels) for i in range(len(ids))]``, from the
    prefixes' embeddings built up token by token (:func:`token_embeddings`)."""
    return [_head_logits(v, size, num_labels) for v in paced(token_embeddings(ids, size, size))]


def _head_logits(v, size: int, num_labels: int) -> list[float]:
    return [float(x) for x in (_label_weights(num_labels, size) @ v.astype("f8")) * 4.0]


def activate(logits: list[float]) -> list[float]:
    """vLLM's classification activation: softmax over two or more labels, sigmoid for one."""
    if len(logits) == 1:
        return [1.0 / (1.0 + math.exp(-logits[0]))]
    m = max(logits)
    e = [math.exp(x - m) for x in logits]
    s = sum(e)
    return [x / s for x in e]


def cross_encoder_logit(query_ids, doc_ids, size: int) -> float:
    """A cross-encoder's one logit for a (query, document) pair: ``SCALE * cosine + BIAS`` of
    their embeddings (an unrelated pair near ``sigmoid(-2) = 0.12``, equal texts near 1)."""
    return SCORE_SCALE * cosine(embedding_vector(query_ids, size), embedding_vector(doc_ids, size)) + SCORE_BIAS


def embedding_vectors(token_lists, dimensions: int, size: int | None = None) -> list:
    """``[embedding_vector(ids, dimensions, size) for ids in token_lists]``, the hub given a turn
    every 2 ms (:func:`~generation.lanes.paced`): 500 inputs of 4,000 tokens (2 M ids, each
    hashed at :data:`TOKEN_SLOTS` slots) held it ~1 s in one piece."""
    return [embedding_vector(ids, dimensions, size) for ids in paced(token_lists)]
