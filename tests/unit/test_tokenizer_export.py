"""The simulated tokenizer as a Hugging Face tokenizer folder (issue 30: load generators need a
tokenizer, and an offline user has none): transformers loads it, and it counts every text as the
server does."""
from __future__ import annotations

import random

import pytest

from app import main
from generation.tokenization.tokenizer import SimulatedTokenizer, flatten_messages

TEXTS = ["Hello world", "  héllo, wörld!!  x\n\ny", "a{b}c-d_e", "", "日本語 text 123abc", "To be, or not to be"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from transformers import AutoTokenizer
    d = str(tmp_path_factory.mktemp("tok") / "sim")
    assert main(["export-tokenizer", d, "--max-model-len", "2048"]) == 0
    return AutoTokenizer.from_pretrained(d)


def test_loads_and_counts_like_the_server(exported):
    sim = SimulatedTokenizer()
    assert exported.model_max_length == 2048
    for text in TEXTS:
        assert len(exported.encode(text, add_special_tokens=False)) == len(sim.pieces(text)), text
    ids = exported.encode("the world is good , ", add_special_tokens=False)
    assert exported.decode(ids) == "the world is good , "      # pieces of the vocabulary round-trip
    # a piece outside it ("be" before a comma: no trailing space; a name) is the word "unk ", one
    # token, and no special token: decoding keeps it, so a corpus prompt keeps its length
    ids = exported.encode("be, Darcy said", add_special_tokens=False)
    assert exported.convert_ids_to_tokens(ids) == ["unk ", ", ", "unk ", "unk "]
    text = exported.decode(ids, skip_special_tokens=True)
    assert text == "unk , unk unk " and len(sim.pieces(text)) == len(ids) == 4


def test_random_ids_decode_to_text_the_server_splits_the_same(exported):
    sim = SimulatedTokenizer()
    rng = random.Random(5)
    for _ in range(20):
        ids = [rng.randrange(exported.vocab_size) for _ in range(64)]        # "unk " among them
        text = exported.decode(ids)
        assert sim.pieces(text) == exported.convert_ids_to_tokens(ids)


def test_chat_template_is_the_flattening(exported):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, you?"}]
    assert exported.apply_chat_template(msgs, tokenize=False) == flatten_messages(msgs)


def test_bare_words_decode_the_servers_answers_exactly(tmp_path):
    from transformers import AutoTokenizer

    from data.tokenizer_export import vocabulary
    d = str(tmp_path / "bare")
    assert main(["export-tokenizer", d, "--bare-words"]) == 0
    tok = AutoTokenizer.from_pretrained(d)
    text = "I am your AI assistant, how can I help you today? The rest is silence. "
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.convert_tokens_to_ids("unk ") not in ids and tok.decode(ids, skip_special_tokens=True) == text
    plain, bare = vocabulary(), vocabulary(bare_words=True)
    assert {p: bare[p] for p in plain} == plain and "assistant" in bare and "assistant" not in plain
