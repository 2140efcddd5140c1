"""Random strings of a context-free grammar (vLLM ``structured_outputs.grammar``).

vLLM hands the grammar to its structured-output backend (xgrammar takes GBNF / EBNF, guidance
takes Lark).  The simulator draws one string the grammar derives, from the two syntaxes' shared
core: rules ``name ::= expr`` (GBNF, root rule ``root``) or ``name: expr`` (Lark, root rule
``start``); alternatives ``|``; sequences; ``"literal"`` / ``'literal'`` strings with
backslash escapes; ``[a-z]`` character classes and ``/regex/`` terminals (drawn with
:mod:`generation.structured.regex_sampler`); groups ``( )``, Lark's optional ``[ ]``; repeats
``* + ?`` and ``{m}`` / ``{m,n}``; ``#`` and ``//`` comments; Lark directives (``%import``,
``%ignore``) are skipped.  Recursion is bounded: past :data:`MAX_DEPTH` every choice takes the
alternative with the shortest derivation.

:func:`compile_grammar` raises :class:`GrammarError` (a ValueError) for text it cannot read, an
undefined rule, or a grammar that derives no finite string.
"""
from __future__ import annotations

import re

from . import regex_sampler

MAX_DEPTH = 8           # nesting of rule expansions before only the shortest alternatives are taken
MAX_REPEAT_EXTRA = 4    # copies an unbounded repeat may add to its minimum
MAX_CHARS = 4096        # a drawn string longer than this is refused (GrammarError)
MAX_WORK = 100_000      # expression nodes evaluated to analyse a grammar, or visited to draw one string
INF = float("inf")

_TOKEN = re.compile(r'''
    (?P<ws>\s+|\#[^\n]*|//[^\n]*)
  | (?P<define>::=|:(?!:))
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<cls>\[\^?(?:\\.|[^\]\\])*\])
  | (?P<regex>/(?:\\.|[^/\\\n])+/[imsx]*)
  | (?P<name>[?!]?[A-Za-z_][A-Za-z0-9_.-]*)
  | (?P<rep>\{\s*\d+\s*(?:,\s*\d*\s*)?\})
  | (?P<op>[|()*+?\[\]])
''', re.VERBOSE)


class GrammarError(ValueError):
    """The grammar cannot be read or derives no string."""


def _unescape(body: str) -> str:
    try:
        text = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return body
    if any("\ud800" <= c <= "\udfff" for c in text):
        # "\ud83d\ude00" is one character written as its UTF-16 pair; a surrogate alone is no
        # text (the answer's UTF-8 encoding failed on it: a 500)
        try:
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            raise GrammarError("a literal holds a UTF-16 surrogate (U+D800 to U+DFFF) without its pair, "
                               "which no text holds") from None
    return text


def _tokens(text: str) -> list:
    """Tokens of ``text``; ``[...]`` is a character class in GBNF (rules with ``::=``), Lark's
    optional group otherwise."""
    out, pos = [], 0
    gbnf = "::=" in text
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("%")]      # Lark directives
    text = "\n".join(lines)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GrammarError(f"cannot read the grammar at {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "cls" and not gbnf:
            pos = m.start() + 1
            out.append(("op", "["))
        elif kind != "ws":
            out.append((kind, m.group()))
    return out


class Grammar:
    """A parsed grammar: ``rules`` name -> node; nodes are tuples ``("alt", [nodes])``,
    ``("seq", [nodes])``, ``("lit", str)``, ``("re", parsed regex)``, ``("ref", name)``,
    ``("rep", node, min, max or None)``."""

    def __init__(self, rules: dict, root: str):
        self.rules = rules
        self.root = root
        self.min_len = self._min_lengths()
        if self.min_len.get(root, INF) == INF:
            raise GrammarError(f"rule {root!r} derives no finite string")

    # ---- shortest derivations (a fixpoint over the rules) ----------------------------------------
    def _min_lengths(self) -> dict:
        """Each rule's shortest derivation: a worklist, a rule evaluated again only when a rule
        it names got shorter.  (Passes over every rule until none changed took one pass per link
        of a chain ``b1 ::= b2``, ``b2 ::= b3``, ...: 6,000 such rules, 80 KB, held the hub 23 s.)
        At most :data:`MAX_WORK` expression nodes are evaluated in all, else GrammarError."""
        best = {name: INF for name in self.rules}
        users: dict = {name: set() for name in self.rules}      # rule -> the rules that name it
        for name, node in self.rules.items():
            for ref in _refs(node):
                users[ref].add(name)
        todo, queued = list(self.rules), set(self.rules)
        work = [0]
        while todo:
            name = todo.pop()
            queued.discard(name)
            v = self._node_min(self.rules[name], best, work)
            if v < best[name]:
                best[name] = v
                for user in users[name]:
                    if user not in queued:
                        queued.add(user)
                        todo.append(user)
        return best

    def _node_min(self, node, best, work: list | None = None) -> float:
        if work is not None:
            work[0] += 1
            if work[0] > MAX_WORK:
                raise GrammarError(f"the grammar takes more than {MAX_WORK} steps to analyse")
        kind = node[0]
        if kind == "lit":
            return len(node[1])
        if kind == "re":
            return 1
        if kind == "ref":
            return best.get(node[1], INF)
        if kind == "seq":
            return sum(self._node_min(n, best, work) for n in node[1])
        if kind == "alt":
            return min((self._node_min(n, best, work) for n in node[1]), default=INF)
        return node[2] * self._node_min(node[1], best, work) if node[2] else 0      # rep

    # ---- drawing ---------------------------------------------------------------------------------
    def generate(self, rng) -> str:
        """One string the grammar derives from its root, drawn with ``rng``.  A root whose
        shortest derivation is already past :data:`MAX_CHARS` is refused before drawing."""
        if self.min_len[self.root] > MAX_CHARS:
            raise GrammarError(f"the derivation grew past {MAX_CHARS} characters")
        out: list = []
        self._gen(("ref", self.root), rng, 0, out, [0, 0])
        return "".join(out)

    def _gen(self, node, rng, depth: int, out: list, size: list) -> None:
        # size: [the characters in ``out``, kept as they are added (summing ``out`` at every node
        # made a derivation quadratic: ``"a"{1000000}`` held the hub 0.4 s before its 400), the
        # nodes visited (``(""){99999999}`` adds nothing per copy: 27 s of the hub, a larger
        # count for ever)]
        kind = node[0]
        if size[0] > MAX_CHARS:
            raise GrammarError(f"the derivation grew past {MAX_CHARS} characters")
        size[1] += 1
        if size[1] > MAX_WORK:
            raise GrammarError(f"the derivation takes more than {MAX_WORK} steps")
        if kind == "lit":
            out.append(node[1])
            size[0] += len(node[1])
        elif kind == "re":
            try:
                piece = regex_sampler.generate(node[1], rng, 256, 2)
            except (regex_sampler.TooLong, regex_sampler.Unsupported) as e:
                raise GrammarError(f"a regular-expression terminal cannot be drawn: {e}") from None
            out.append(piece)
            size[0] += len(piece)
        elif kind == "ref":
            if depth > 200:
                raise GrammarError("the grammar recurses too deeply")
            self._gen(self.rules[node[1]], rng, depth + 1, out, size)
        elif kind == "seq":
            for n in node[1]:
                self._gen(n, rng, depth, out, size)
        elif kind == "alt":
            options = node[1]
            if depth > MAX_DEPTH:
                lows = [self._node_min(n, self.min_len) for n in options]
                low = min(lows)
                options = [n for n, v in zip(options, lows) if v == low]
            self._gen(options[int(rng.random() * len(options))], rng, depth, out, size)
        else:                                        # rep
            _, sub, lo, hi = node
            if depth > MAX_DEPTH:
                count = lo
            else:
                top = lo + MAX_REPEAT_EXTRA if hi is None else hi
                count = rng.randint(lo, max(lo, min(top, lo + MAX_REPEAT_EXTRA)))
            for _ in range(count):
                self._gen(sub, rng, depth + 1, out, size)


class _Parser:
    def __init__(self, tokens: list):
        self.toks = tokens
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else (None, None)

    def rules(self) -> dict:
        rules: dict = {}
        while self.i < len(self.toks):
            kind, name = self.peek()
            if kind != "name" or self.peek(1)[0] != "define":
                raise GrammarError(f"expected a rule definition, got {name!r}")
            self.i += 2
            expr = self.alt()
            name = name.lstrip("?!")
            if name in rules:      # GBNF allows a rule's alternatives to be split over definitions
                rules[name] = ("alt", [rules[name], expr])
            else:
                rules[name] = expr
        return rules

    def _at_rule_start(self) -> bool:
        return self.peek()[0] == "name" and self.peek(1)[0] == "define"

    def alt(self):
        options = [self.seq()]
        while self.peek() == ("op", "|"):
            self.i += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else ("alt", options)

    def seq(self):
        items = []
        while True:
            kind, text = self.peek()
            if kind is None or text in ("|", ")", "]") or self._at_rule_start():
                break
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else ("seq", items)

    def atom(self):
        kind, text = self.peek()
        self.i += 1
        if kind == "str":
            return ("lit", _unescape(text[1:-1]))
        if kind == "cls":
            return ("re", _regex(text))
        if kind == "regex":
            body, _, flags = text[1:].rpartition("/")
            return ("re", _regex(f"(?{flags}){body}" if flags else body))
        if kind == "name":
            return ("ref", text.lstrip("?!"))
        if text == "(":
            inner = self.alt()
            self._expect(")")
            return inner
        if text == "[":                              # Lark: [item] is optional
            inner = self.alt()
            self._expect("]")
            return ("rep", inner, 0, 1)
        raise GrammarError(f"unexpected {text!r} in the grammar")

    def postfix(self, node):
        while True:
            kind, text = self.peek()
            if text in ("*", "+", "?") and kind == "op":
                self.i += 1
                node = ("rep", node, 1 if text == "+" else 0, 1 if text == "?" else None)
            elif kind == "rep":
                self.i += 1
                lo, _, hi = text.strip("{} ").partition(",")
                lo_n = int(lo)
                hi_n = lo_n if "," not in text else (int(hi) if hi.strip() else None)
                if hi_n is not None and hi_n < lo_n:
                    raise GrammarError(f"bad repeat {text!r}")
                node = ("rep", node, lo_n, hi_n)
            else:
                return node

    def _expect(self, text: str) -> None:
        if self.peek() != ("op", text):
            raise GrammarError(f"expected {text!r} in the grammar")
        self.i += 1


def _regex(pattern: str):
    try:
        return regex_sampler.parse(pattern)
    except regex_sampler.Unsupported as e:
        raise GrammarError(f"bad terminal {pattern!r}: {e}") from None


def compile_grammar(text: str) -> Grammar:
    """Parse ``text`` (GBNF or Lark, see the module docstring).  Raises GrammarError."""
    if not isinstance(text, str) or not text.strip():
        raise GrammarError("the grammar is empty")
    if len(text) > 100_000:
        raise GrammarError("the grammar is longer than 100000 characters")
    try:
        rules = _Parser(_tokens(text)).rules()
    except RecursionError:
        raise GrammarError("the grammar is nested too deeply") from None
    if not rules:
        raise GrammarError("the grammar has no rules")
    for name, node in rules.items():
        _check_refs(node, rules)
    root = "root" if "root" in rules else "start" if "start" in rules else next(iter(rules))
    return Grammar(rules, root)


def _refs(node):
    """The rule names ``node`` refers to."""
    stack = [node]
    while stack:
        n = stack.pop()
        kind = n[0]
        if kind == "ref":
            yield n[1]
        elif kind in ("seq", "alt"):
            stack.extend(n[1])
        elif kind == "rep":
            stack.append(n[1])


def _check_refs(node, rules) -> None:
    kind = node[0]
    if kind == "ref" and node[1] not in rules:
        raise GrammarError(f"rule {node[1]!r} is not defined")
    if kind in ("seq", "alt"):
        for n in node[1]:
            _check_refs(n, rules)
    elif kind == "rep":
        _check_refs(node[1], rules)
