"""A grammar's analysis and its drawing are bounded in work, not only in the characters drawn
(``generation.structured.grammar``): a client's grammar is compiled and drawn on the hub, and
three shapes held it for seconds to ever, stalling every other stream:

* a repeat of something empty, ``(""){N}``: each copy adds no character, so the 4,096-character
  bound never came; N = 10^8 took 27 s, a larger N for ever;
* a repeat past the bound, ``"a"{1000000}``: the bound summed the whole output at every node,
  quadratic (0.4 s before its 400);
* a chain of rules ``b1 ::= b2``, ``b2 ::= b3``, ...: the shortest derivations were a fixpoint of
  passes over every rule, one pass per link (6,000 rules, 80 KB: 23 s).
"""
from __future__ import annotations

import random
import signal
from contextlib import contextmanager

import pytest

from generation.structured import grammar as g
from generation.structured.grammar import GrammarError, compile_grammar


@contextmanager
def within(seconds: int):
    """Fail (not hang) where the work is unbounded: SIGALRM after ``seconds``."""
    def late(signum, frame):
        raise AssertionError(f"still drawing after {seconds} s")
    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_repeat_of_nothing_is_refused_within_the_work_bound():
    with within(10), pytest.raises(GrammarError, match="the derivation takes more than 100000 steps"):
        compile_grammar('root ::= (""){99999999}').generate(random.Random(1))
    with within(10), pytest.raises(GrammarError, match="the derivation takes more than"):
        compile_grammar('root ::= (x){99999999999999999999}\nx ::= "" | ""').generate(random.Random(1))


def test_a_root_longer_than_the_bound_is_refused_before_drawing(monkeypatch):
    calls = []
    real = g.Grammar._gen
    monkeypatch.setattr(g.Grammar, "_gen", lambda self, *a: calls.append(1) or real(self, *a))
    with pytest.raises(GrammarError, match="grew past 4096 characters"):
        compile_grammar('root ::= "a"{1000000}').generate(random.Random(1))
    assert calls == []


def test_a_chain_of_rules_is_analysed_in_linear_work(monkeypatch):
    n = 2000
    text = "root ::= b1\n" + "".join(f"b{i} ::= b{i + 1}\n" for i in range(1, n)) + f'b{n} ::= "x"\n'
    evaluated = [0]
    real = g.Grammar._node_min

    def counting(self, *a):
        evaluated[0] += 1
        return real(self, *a)
    monkeypatch.setattr(g.Grammar, "_node_min", counting)
    grammar = compile_grammar(text)
    assert grammar.min_len["root"] == 1
    assert evaluated[0] <= 4 * n, evaluated[0]          # was n * n / 2 passes' worth: 2,000,000


def test_ordinary_grammars_still_draw():
    rng = random.Random(3)
    assert compile_grammar('root ::= ([a-z]{1,3}){1000}').generate(rng).isalpha()
    assert compile_grammar('root ::= x\nx ::= "ab" x | "c"').generate(rng).endswith("c")
    assert compile_grammar('start: "a" b\nb: "b" | "c"').generate(rng) in ("ab", "ac")
