"""What start-up skips stays correct: marshmallow's e-mail pattern compiled on first use
(``schemas._import_marshmallow``), and the collector back on after ``python app.py``'s
start-up ran without it (``server.worker.freeze_startup_heap``).  No timing here:
``bench/startup.py`` measures the start-up."""
from __future__ import annotations

import gc
import os
import re
import subprocess
import sys

from support import ROOT


def test_lazy_pattern_matches_as_the_compiled_one():
    from schemas import _LazyPattern
    pattern = r"(?:[A-Z0-9\u00a1-\uffff]{2,})\Z"
    lazy = _LazyPattern(re.compile, pattern, re.IGNORECASE)
    assert lazy._compiled is None
    for text in ("example", "DÉJÀ", "日本語", "a", "no space"):
        assert bool(lazy.match(text)) == bool(re.compile(pattern, re.IGNORECASE).match(text)), text
    assert lazy.pattern == pattern and lazy.flags == re.compile(pattern, re.IGNORECASE).flags


def test_marshmallow_email_still_validates_after_the_deferred_import():
    code = ("import schemas, marshmallow.validate as v; from schemas import _LazyPattern\n"
            "assert isinstance(v.Email.DOMAIN_REGEX, _LazyPattern)\n"
            "v.Email()('user@example.com'); v.Email()('user@[10.0.0.1]')\n"
            "try:\n    v.Email()('user@-bad-')\nexcept v.ValidationError:\n    print('refused')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stdout, r.stderr) == (0, "refused\n", "")


def test_freeze_startup_heap_turns_the_collector_on_with_rarer_full_collections():
    from server.worker import FULL_COLLECTION_AFTER, freeze_startup_heap
    before = gc.get_threshold()
    gc.disable()
    try:
        freeze_startup_heap()
        assert gc.isenabled()
        assert gc.get_threshold() == (*before[:2], FULL_COLLECTION_AFTER)
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        gc.enable()
