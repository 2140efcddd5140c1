"""The adapters' JSON writers: ``dumps`` (orjson) for what the simulator builds, ``dumps_any``
for objects that hold client values orjson may refuse."""
from __future__ import annotations

import sys

import orjson

dumps = orjson.dumps
DUMPS_RECURSION_LIMIT = 20_000  # frames for the standard library's encoder: 1,024 parsed levels and the answer around them


def dumps_any(obj) -> bytes:
    """``orjson.dumps(obj)``, or the standard library's compact JSON when ``obj`` holds an
    integer past 64 bits or is nested past 255 levels, which orjson refuses (a tool argument a
    schema's ``minimum`` put there: Python's ints, and vLLM's pydantic, have no such bound; a
    client's value echoed back, which orjson parsed to 1,024 levels).  The fallback runs under a
    raised recursion limit, so a body orjson parsed is always written: no switch to another
    greenlet happens meanwhile.  For objects that hold client values; ``dumps`` for the rest."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return dumps_deep(obj, ensure_ascii=False, separators=(",", ":")).encode()


def dumps_deep(obj, **kw) -> str:
    """``json.dumps(obj, **kw)`` under a raised recursion limit: a client's value orjson parsed
    (1,024 levels) is written whatever its depth (at Python's default limit of 1,000 frames a
    value some 990 levels deep raised RecursionError, a 500).  No switch to another greenlet
    happens meanwhile.  For the texts vLLM writes with ``json.dumps`` from a client's value."""
    import json
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DUMPS_RECURSION_LIMIT))
    try:
        return json.dumps(obj, **kw)
    finally:
        sys.setrecursionlimit(limit)
