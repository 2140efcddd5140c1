"""Moved to :mod:`generation.engine.perf.hardware` (the performance model's package); this name stays
for code that imports it from here: it is the same module object."""
import sys

from .perf import hardware as _module

sys.modules[__name__] = _module
