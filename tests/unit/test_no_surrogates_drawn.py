"""No UTF-16 surrogate (U+D800-U+DFFF) is ever drawn into an answer: no text holds one alone
(a JSON string, the tokenizer's UTF-8, the answer's bytes), and a regex class spanning them
(``[\\u0000-\\U0010ffff]``, in ``structured_outputs.regex``, a schema's ``pattern`` or a grammar's
terminal) or a grammar literal ``"\\ud800"`` put one in the answer, whose encoding then failed: a
500 with a traceback.  A range is drawn without them; what can only give one is refused."""
from __future__ import annotations

import random

import pytest

from generation.structured import regex_sampler as rs
from generation.structured.grammar import GrammarError, compile_grammar


def surrogates(text: str) -> int:
    return sum("\ud800" <= c <= "\udfff" for c in text)


@pytest.mark.parametrize("pattern", [r"[\u0000-\U0010ffff]{3000}", r"[\ud7ff-\ue000]{500}", r"[\udc00-\U0010ffff]{500}",
                                     r"[\u0000-\udbff]{500}", r"[\ud800a]{200}", r"(a|[\ud000-\udfff]){500}"])
def test_a_range_over_the_surrogates_draws_none(pattern):
    out = rs.generate(rs.parse(pattern), random.Random(5), 5000, 2)
    assert out and surrogates(out) == 0
    out.encode("utf-8")


def test_the_neighbours_of_the_surrogates_are_still_drawn():
    assert set(rs.generate(rs.parse(r"[\ud7ff-\ue000]{300}"), random.Random(1), 500, 2)) == {"\ud7ff", "\ue000"}


@pytest.mark.parametrize("pattern", [r"\ud800", r"[\ud800-\udfff]", r"x[\udc00]"])
def test_what_can_only_give_a_surrogate_is_refused(pattern):
    with pytest.raises(rs.Unsupported, match="surrogate"):
        rs.generate(rs.parse(pattern), random.Random(1), 100, 2)


def test_a_grammar_literal_with_a_lone_surrogate_is_refused_and_a_pair_is_one_character():
    for text in ('root ::= "\\ud800"', 'root ::= "a" "\\udfff" | "b"'):
        with pytest.raises(GrammarError, match="surrogate"):
            compile_grammar(text)
    assert compile_grammar('root ::= "\\ud83d\\ude00"').generate(random.Random(1)) == "\U0001F600"
    assert surrogates(compile_grammar("root ::= [\\u0000-\\U0010ffff]{200}").generate(random.Random(2))) == 0
