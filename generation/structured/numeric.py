"""Numeric keywords of JSON Schema as the sampler (:mod:`generation.structured.schema_sampler`) and the
request checks read them: the type tests, a schema's own range (``minimum`` / ``maximum`` /
``exclusive*``, draft 4 and later forms) and ``jsonschema``'s own acceptance test."""
from __future__ import annotations

import math
from fractions import Fraction


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


EXACT_INT = 1 << 53           # whole numbers beyond it are not exact in a client's float64


def int_range(lo, hi, lo_ex: bool, hi_ex: bool) -> tuple[int, int]:
    """The integers in the range ``lo``..``hi`` (exclusive ends as flagged): ``(ilo, ihi)``,
    empty when ``ilo > ihi``."""
    ilo = math.floor(lo) + 1 if lo_ex and float(lo).is_integer() else math.ceil(lo)
    ihi = math.ceil(hi) - 1 if hi_ex and float(hi).is_integer() else math.floor(hi)
    return ilo, ihi


def schema_bounds(schema: dict):
    """The schema's own numeric range ``(lo, hi, lo_excl, hi_excl)`` (None when open), from
    ``minimum``/``maximum`` and ``exclusive*`` in the draft 4 boolean or the numeric form."""
    mn, mx = schema.get("minimum"), schema.get("maximum")
    emn, emx = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    lo = mn if is_num(mn) else None
    hi = mx if is_num(mx) else None
    lo_ex = hi_ex = False
    if emn is True and lo is not None:
        lo_ex = True
    elif is_num(emn) and (lo is None or emn >= lo):
        lo, lo_ex = emn, True
    if emx is True and hi is not None:
        hi_ex = True
    elif is_num(emx) and (hi is None or emx <= hi):
        hi, hi_ex = emx, True
    return lo, hi, lo_ex, hi_ex


def number_ok(v, schema: dict) -> bool:
    """True when ``v`` passes the schema's numeric keywords as ``jsonschema`` checks them
    (``multipleOf`` with a float divisor by float division, as ``jsonschema`` does)."""
    lo, hi, lo_ex, hi_ex = schema_bounds(schema)
    try:
        if lo is not None and (v <= lo if lo_ex else v < lo):
            return False
        if hi is not None and (v >= hi if hi_ex else v > hi):
            return False
        m = schema.get("multipleOf")
        if is_num(m) and m > 0:
            if isinstance(m, float):
                q = v / m
                try:
                    return int(q) == q
                except OverflowError:
                    return (Fraction(v) / Fraction(m)).denominator == 1
            return not (v % m)
    except (OverflowError, ValueError, ZeroDivisionError):
        return False
    return True
