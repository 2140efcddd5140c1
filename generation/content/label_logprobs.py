"""Synthetic next-token logprobs of chosen label tokens (``/generative_scoring``).

vLLM's generative scoring (``vllm/entrypoints/generate/generative_scoring/serving.py``) runs a
one-token generation per prompt and reads the full-vocabulary logprob of each label id
(``SamplingParams.logprob_token_ids``).  Without a model, that logprob comes from the
simulator's formula (:func:`generation.content.logprobs.logprob`, ``-1.0 - (pos % 3) * 0.1 -
rank * 0.5``) with

* ``pos`` the position of the token being predicted: the prompt's length (the prompt holds
  positions ``0 .. len - 1``; ``prompt_logprob_token_ids`` scores position ``p`` the same way);
* ``rank`` the label's rank in the prompt's next-token distribution: a 64-bit mix of a BLAKE2b
  hash of the prompt's ids and the label id, modulo :data:`LABEL_RANKS`.

So the value depends only on the (prompt, label id) pair, as a model's would: the same in every
request and process, whatever other labels a request lists (a label listed twice gets one value),
and different labels of one prompt mostly differ.  Logprobs lie in ``[-8.7, -1.0]``, so each
probability ``exp(logprob)`` is in ``(0, 1)`` (1.7e-4 to 0.37).
"""
from __future__ import annotations

import hashlib
import sys
from array import array

from .logprobs import logprob

LABEL_RANKS = 16                 # ranks 0..15: logprobs down to -1.2 - 15 * 0.5 = -8.7
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def prompt_key(ids) -> int:
    """A 64-bit key of the token ids ``ids`` (each in ``0 .. 2**64 - 1``): BLAKE2b over their
    little-endian 64-bit values (C loops: ~1 ms per 100,000 ids)."""
    data = array("Q", ids)
    if sys.byteorder != "little":
        data.byteswap()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix(x: int) -> int:
    """splitmix64's finalizer: every bit of ``x`` moves every bit of the result."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


def label_rank(key: int, label: int) -> int:
    """The rank (``0 .. LABEL_RANKS - 1``) of token ``label`` after the prompt of key ``key``."""
    return _mix(key ^ ((label + 1) * _GOLDEN & _M64)) % LABEL_RANKS


def label_logprobs(ids, labels) -> list[float]:
    """The logprob of each of ``labels`` (token ids, in order, repeats allowed) as the next
    token after the prompt ``ids`` (token ids, not empty): one float per label."""
    pos = len(ids)
    key = prompt_key(ids)
    return [logprob(pos, label_rank(key, t)) for t in labels]
