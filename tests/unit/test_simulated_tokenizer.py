"""The simulated tokenizer (reference api.md 3.2-3.3 worked examples): pieces and ids, dropped
characters, chat flattening, sentence token counts."""
from __future__ import annotations

import random

from generation.content.sources import SENTENCES, SentenceSource
from generation.tokenization.tokenizer import SimulatedTokenizer, flatten_messages, fnv1a_32, plain_message

TOK = SimulatedTokenizer()


# ---- tokenizer (reference api.md 3.2-3.3 worked examples) ------------------------------------
def test_tokenizer_worked_examples():
    ids, pieces = TOK.encode("This is a test.")
    assert pieces == ["This ", "is ", "a ", "test", "."]
    assert ids == [3157421587, 1477013615, 186949092, 2949673445, 722245873]
    assert TOK.pieces("I hear it's very cold.") == ["I ", "hear ", "it", "'", "s ", "very ", "cold", "."]
    assert TOK.pieces('{"location":"Boston"}') == ["{", '"', "location", '"', ":", '"', "Boston", '"', "}"]
    assert TOK.encode("!") == ([604802540], ["!"])
    assert fnv1a_32(b"") == 2166136261


def test_tokenizer_drops_and_underscore_rules():
    assert TOK.pieces("héllo wörld") == ["h", "llo ", "w", "rld"]
    assert TOK.pieces("  leading") == ["leading"]
    assert TOK.pieces("a|b`c") == ["a", "b", "c"]
    assert TOK.pieces("_ab foo_bar") == ["_", "ab ", "foo_bar"]


def test_lossless_pieces_keep_dropped_characters():
    text = "  héllo | wörld ✓"
    ids, pieces = TOK.encode_lossless(text)
    assert "".join(pieces) == text
    assert len(pieces) == len(TOK.pieces(text))


def test_chat_flattening():
    assert flatten_messages([{"role": "user", "content": "This is a test."}]) == "### user: This is a test.\n"
    assert len(TOK.pieces(flatten_messages([{"role": "user", "content": "This is a test."}]))) == 10
    assert len(TOK.pieces(flatten_messages([{"role": "user", "content": "This is a test"}]))) == 9
    assert plain_message({"role": "tool", "tool_call_id": "call_abc123", "content": "sunny"}, True) == \
        "tool(call_abc123): sunny"
    msg = {"role": "assistant", "content": None,
           "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"location":"NYC"}'}}]}
    assert plain_message(msg, True) == 'assistant: [get_weather({"location":"NYC"})]'
    parts = [{"type": "text", "text": "Describe this"},
             {"type": "image_url", "image_url": {"url": "https://example.com/img.png"}},
             {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}]
    assert plain_message({"role": "user", "content": parts}, False) == \
        "Describe this\nimage: https://example.com/img.png"


def test_sentence_token_counts_and_generation():
    counts = [len(TOK.pieces(s)) for s in SENTENCES]
    assert counts == [38, 9, 9, 13, 7, 10, 8, 11, 16, 5, 25]
    src = SentenceSource(TOK)
    rng = random.Random(7)
    for n in (1, 5, 38, 100, 333):
        pieces, ids = src.generate(rng, n)
        assert len(pieces) == len(ids) == n
        assert ids == [TOK.piece_id(p) for p in pieces]
