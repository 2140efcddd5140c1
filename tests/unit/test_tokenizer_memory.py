"""The simulated tokenizer's piece memo is bounded in entries and in bytes (issue 12: 300
words of 1 MiB kept 272 MB)."""
from __future__ import annotations

import sys

from generation.tokenization.tokenizer import (MAX_CACHED_PIECE, MAX_CACHED_PIECES, MAX_RUN, SimulatedTokenizer,
                                              fnv1a_32)


def test_long_runs_are_pieces_of_64_and_pieces_over_the_memo_bound_are_not_memoised():
    """A word run is at most MAX_RUN characters a piece, and so is the whitespace after it (more
    is dropped): a 100,000-character word is 1,563 tokens, not one of 100 KB (a fuzzing helper's
    1 MB ``const`` made one request answer 1 GB)."""
    tok = SimulatedTokenizer()
    word = "x" * 100_000
    ids, pieces = tok.encode(word)
    assert len(pieces) == 1563 and "".join(pieces) == word and {len(p) for p in pieces} == {MAX_RUN, 100_000 % MAX_RUN}
    assert ids[0] == fnv1a_32(("x" * MAX_RUN).encode())
    assert tok.encode("a" + " " * 1000 + "b")[1] == ["a" + " " * MAX_RUN, "b"]
    assert tok.encode("x" * 64 + "y")[1] == ["x" * 64, "y"]
    assert tok.piece_id("z" * 1000) == fnv1a_32(("z" * 1000).encode())      # a real tokenizer's long piece
    assert "z" * 1000 not in tok._ids
    short = "y" * MAX_CACHED_PIECE
    assert tok.piece_id(short) == fnv1a_32(short.encode())
    assert tok._ids[short] == fnv1a_32(short.encode())
    assert tok.decode_ids([fnv1a_32(short.encode())]) == short


def test_memo_has_an_entry_cap():
    tok = SimulatedTokenizer()
    for k in range(MAX_CACHED_PIECES + 10):
        tok.piece_id(f"w{k}")
    assert len(tok._ids) == MAX_CACHED_PIECES
    size = sum(sys.getsizeof(p) for p in tok._ids)
    assert size < MAX_CACHED_PIECES * (MAX_CACHED_PIECE + 100)
