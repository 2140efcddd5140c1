"""The simulated tokenizer's piece memo is bounded in entries and in bytes (issue 12: 300
words of 1 MiB kept 272 MB)."""
from __future__ import annotations

import sys

from generation.tokenization.tokenizer import MAX_CACHED_PIECE, MAX_CACHED_PIECES, SimulatedTokenizer, fnv1a_32


def test_long_pieces_are_not_memoised_but_keep_their_id():
    tok = SimulatedTokenizer()
    word = "x" * 100_000
    ids, pieces = tok.encode(word)
    assert pieces == [word] and ids == [fnv1a_32(word.encode())]
    assert tok._ids == {} and tok._pieces == {}
    short = "y" * MAX_CACHED_PIECE
    assert tok.encode(short)[0] == [fnv1a_32(short.encode())]
    assert tok._ids == {short: fnv1a_32(short.encode())}
    assert tok.decode_ids([fnv1a_32(short.encode())]) == short


def test_memo_has_an_entry_cap():
    tok = SimulatedTokenizer()
    for k in range(MAX_CACHED_PIECES + 10):
        tok.piece_id(f"w{k}")
    assert len(tok._ids) == MAX_CACHED_PIECES
    size = sum(sys.getsizeof(p) for p in tok._ids)
    assert size < MAX_CACHED_PIECES * (MAX_CACHED_PIECE + 100)
