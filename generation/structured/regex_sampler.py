"""Bounded random strings that match a regular expression (JSON Schema ``pattern``).

Why not a library: ``rstr.xeger`` caps ``*``/``+`` at 100 repeats per level but has no size
budget, so ``(a{1000}){1000}`` or nested stars build megabytes; Hypothesis' ``from_regex`` is a
test-time dependency, too heavy to import in a server.  This walks the parse tree of Python's
own regex parser (``re._parser``, formerly ``sre_parse``) without backtracking, with:

* unbounded repeats (``*``, ``+``, ``{n,}``) drawing at most ``min + spread`` copies;
* a budget of characters for the whole string (:class:`TooLong` past it);
* lookarounds and anchors producing nothing (the caller re-checks the result with a
  matcher that has a timeout: :func:`matches`).

Matching uses the ``regex`` module, whose ``timeout`` bounds catastrophic backtracking
(``(.*)*!``); a timeout counts as no match.
"""
from __future__ import annotations

import string

try:                                    # Python 3.11+
    import re._constants as _c
    import re._parser as _parser
except ImportError:                     # pragma: no cover - Python < 3.11
    import sre_constants as _c          # type: ignore[no-redef]
    import sre_parse as _parser         # type: ignore[no-redef]


# Characters drawn for ``.``, negated classes and categories (printable ASCII, no newline).
_PRINTABLE = [c for c in string.printable if c not in "\n\r\x0b\x0c"]
_CATEGORIES = {
    _c.CATEGORY_DIGIT: string.digits,
    _c.CATEGORY_NOT_DIGIT: string.ascii_letters + " _-",
    _c.CATEGORY_SPACE: " \t",
    _c.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
    _c.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    _c.CATEGORY_NOT_WORD: " -.,!?",
    _c.CATEGORY_LINEBREAK: "\n",
    _c.CATEGORY_NOT_LINEBREAK: string.ascii_letters,
}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT}
if hasattr(_c, "POSSESSIVE_REPEAT"):
    _REPEATS.add(_c.POSSESSIVE_REPEAT)
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)


class TooLong(Exception):
    """The pattern's minimum expansion exceeds the character budget."""


class Unsupported(Exception):
    """The pattern cannot be parsed or uses a construct the generator cannot expand."""


def parse(pattern: str):
    """The parsed pattern (opaque; pass to :func:`generate`).  Raises :class:`Unsupported`."""
    try:
        return _parser.parse(pattern)
    except (Exception, RecursionError) as e:     # re.error, OverflowError, deep nesting
        raise Unsupported(str(e)) from None


def generate(parsed, rng, budget: int, spread: int) -> str:
    """One string drawn from ``parsed`` with ``rng`` (``random.Random``).

    ``budget``: maximum length in characters (:class:`TooLong` beyond it); ``spread``: how many
    copies an unbounded repeat may add to its minimum.  Raises :class:`Unsupported` for
    constructs that cannot be expanded (or nesting too deep for the interpreter)."""
    g = _Gen(rng, budget, spread)
    try:
        g.seq(parsed.data if hasattr(parsed, "data") else parsed)
    except RecursionError:
        raise Unsupported("pattern nested too deeply") from None
    return "".join(g.out)


def expansion(parsed, cap: int = 1 << 40) -> int:
    """How many atoms the pattern's counted repeats unroll to at worst: what ``regex.compile``
    spends time and memory on (``(a{1000}){1000}`` takes it a second; ``(?:(?:a?){1000}){1000}``
    1-2 s and 380 MB).  A repeat counts its maximum when bounded (``x?`` once, ``x{2,9}`` 9
    times), its minimum plus one when not (``x{5,}`` compiles 5 copies and a loop); nested
    counts multiply, sequences add, a branch counts its largest alternative.  Saturates at
    ``cap``."""
    try:
        return min(_expansion(parsed.data if hasattr(parsed, "data") else parsed, cap), cap)
    except RecursionError:
        return cap


_COUNT = None


def text_expansion(pattern: str, cap: int = 1 << 40) -> int:
    """A worst-case bound on :func:`expansion` read from the text alone, for patterns Python's
    parser rejects but ``regex`` may accept (``\\p{L}``): the pattern's length times the product
    of every counted repeat's count (as if all were nested).  Saturates at ``cap``."""
    global _COUNT
    if _COUNT is None:
        import re
        _COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
    total = max(len(pattern), 1)
    for m in _COUNT.finditer(pattern):
        lo, hi = m.group(1), m.group(2)
        times = int(hi) if hi else int(lo) + (1 if hi == "" else 0)
        total *= max(times, 1)
        if total >= cap:
            return cap
    return total


def _expansion(items, cap: int) -> int:
    total = 0
    for op, av in items:
        if op in _REPEATS:
            lo, hi = av[0], av[1]
            times = lo + 1 if hi is _c.MAXREPEAT or hi >= _c.MAXREPEAT else hi
            if times:
                total += times * _expansion(av[2], cap)
        elif op is _c.SUBPATTERN:
            total += _expansion(av[-1], cap)
        elif op is _c.BRANCH:
            total += max((_expansion(b, cap) for b in av[1]), default=0)
        elif op is _ATOMIC:
            total += _expansion(av, cap)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            total += _expansion(av[1], cap)
        else:
            total += 1
        if total >= cap:
            return cap
    return total


def compile_bounded(pattern: str):
    """``regex`` compiled pattern, or None when ``regex`` does not accept it.  Call only for
    patterns whose :func:`expansion` is small: compiling unrolls counted repeats.  Not kept in
    ``regex``'s own cache (its entries are unbounded in size; the caller bounds its own)."""
    try:
        import regex        # lazily: only requests with a pattern pay its import
        return regex.compile(pattern, cache_pattern=False)
    except Exception:       # regex.error and the odd ValueError/OverflowError on absurd input
        return None


def matches(compiled, s: str, timeout: float) -> bool:
    """``compiled.search(s)`` with a time bound in seconds; a timeout counts as no match."""
    try:
        return compiled.search(s, timeout=max(timeout, 0.001)) is not None
    except TimeoutError:
        return False


class _Gen:
    def __init__(self, rng, budget: int, spread: int):
        self.rng = rng
        self.left = budget
        self.spread = spread
        self.out: list[str] = []
        self.groups: dict[int, str] = {}

    def emit(self, s: str) -> None:
        self.left -= len(s)
        if self.left < 0:
            raise TooLong()
        self.out.append(s)

    def seq(self, items) -> None:
        for op, av in items:
            self.one(op, av)

    def one(self, op, av) -> None:
        rng = self.rng
        if op is _c.LITERAL:
            self.emit(_char(av))
        elif op is _c.NOT_LITERAL:
            self.emit(rng.choice([c for c in _PRINTABLE if ord(c) != av]))
        elif op is _c.ANY:
            self.emit(rng.choice(_PRINTABLE))
        elif op is _c.IN:
            self.emit(self.klass(av))
        elif op is _c.BRANCH:
            self.seq(rng.choice(av[1]))
        elif op is _c.SUBPATTERN:
            group, sub = av[0], av[-1]
            start = len(self.out)
            self.seq(sub)
            if group is not None:
                self.groups[group] = "".join(self.out[start:])
        elif op in _REPEATS:
            lo, hi, sub = av
            if hi is _c.MAXREPEAT or hi > lo + self.spread:
                hi = lo + self.spread
            for _ in range(rng.randint(lo, hi)):
                self.seq(sub)
        elif op is _c.GROUPREF:
            self.emit(self.groups.get(av, ""))
        elif op is _c.GROUPREF_EXISTS:
            group, yes, no = av
            self.seq(yes if group in self.groups else (no or []))
        elif op is _ATOMIC:
            self.seq(av)
        elif op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            pass                                    # checked afterwards by the matcher
        else:
            raise Unsupported(f"regex construct {op} is not supported")

    def klass(self, items) -> str:
        """One character of a ``[...]`` class."""
        rng = self.rng
        if items and items[0][0] is _c.NEGATE:
            pool = [c for c in _PRINTABLE if not _in_class(c, items[1:])]
            if not pool:
                raise Unsupported("empty character class")
            return rng.choice(pool)
        items = [(op, av) for op, av in items if not _only_surrogates(op, av)]
        if not items:
            raise Unsupported(SURROGATES)
        op, av = rng.choice(items)
        if op is _c.LITERAL:
            return chr(av)
        if op is _c.RANGE:
            return _draw_range(rng, av[0], av[1])
        if op is _c.CATEGORY:
            return rng.choice(_CATEGORIES.get(av, string.ascii_letters))
        raise Unsupported(f"character class item {op} is not supported")


# UTF-16 surrogates (U+D800-U+DFFF): no text holds one alone (a JSON string, the tokenizer's
# UTF-8, the answer's bytes), so none is drawn: ``[\u0000-\U0010ffff]`` drew them and the answer's
# encoding failed, a 500; a pattern that can only give one is refused
_SURROGATE_LO, _SURROGATE_HI = 0xD800, 0xDFFF
SURROGATES = "it can only give a UTF-16 surrogate (U+D800 to U+DFFF), which no text holds"


def _char(code: int) -> str:
    if _SURROGATE_LO <= code <= _SURROGATE_HI:
        raise Unsupported(SURROGATES)
    return chr(code)


def _only_surrogates(op, av) -> bool:
    """Whether the class item ``(op, av)`` holds surrogates only."""
    if op is _c.LITERAL:
        return _SURROGATE_LO <= av <= _SURROGATE_HI
    return op is _c.RANGE and _SURROGATE_LO <= av[0] and av[1] <= _SURROGATE_HI


def _draw_range(rng, lo: int, hi: int) -> str:
    """A character of ``lo..hi`` that is no surrogate (the range holds one: see
    :func:`_only_surrogates`)."""
    gap_lo, gap_hi = max(lo, _SURROGATE_LO), min(hi, _SURROGATE_HI)
    if gap_lo > gap_hi:
        return chr(rng.randint(lo, hi))
    k = lo + rng.randrange((hi - lo + 1) - (gap_hi - gap_lo + 1))
    return chr(k + (gap_hi - gap_lo + 1) if k >= gap_lo else k)


def _in_class(ch: str, items) -> bool:
    o = ord(ch)
    for op, av in items:
        if op is _c.LITERAL and o == av:
            return True
        if op is _c.RANGE and av[0] <= o <= av[1]:
            return True
        if op is _c.CATEGORY and ch in _CATEGORIES.get(av, ""):
            return True
    return False
