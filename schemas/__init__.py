"""marshmallow request schemas, one module per API family (the protocol layer).

Importing the package imports marshmallow (:func:`_import_marshmallow`) with one pattern that
no schema here uses compiled on first use instead of at start-up.
"""
from __future__ import annotations

import sys

_SLOW_CLASS = "\u00a1-\uffff"        # marshmallow's _UNICODE_LETTERS, in Email.DOMAIN_REGEX


class _LazyPattern:
    """A ``re.Pattern`` compiled the first time one of its attributes is used."""

    def __init__(self, compile_, pattern: str, flags: int):
        self._args = (compile_, pattern, flags)
        self._compiled = None

    def __getattr__(self, name):
        if self._compiled is None:
            compile_, pattern, flags = self._args
            self._compiled = compile_(pattern, flags)
        return getattr(self._compiled, name)


def _import_marshmallow() -> None:
    """``import marshmallow``, with ``marshmallow.validate.Email``'s domain pattern compiled
    on first use: compiling its case-insensitive classes over U+00A1..U+FFFF is ~60 ms of CPU,
    a tenth of ``python app.py``'s start-up, and no schema validates e-mail addresses (the
    validator still works, a little slower the first time).  Does nothing when marshmallow is
    already imported."""
    if "marshmallow" in sys.modules:
        return
    import re
    compile_ = re.compile

    def compile_later(pattern, flags=0):
        if isinstance(pattern, str) and _SLOW_CLASS in pattern:
            return _LazyPattern(compile_, pattern, flags)
        return compile_(pattern, flags)
    re.compile = compile_later
    try:
        import marshmallow  # noqa: F401
    finally:
        re.compile = compile_


_import_marshmallow()
