"""Moved to :mod:`generation.engine.perf.model_arch` (the performance model's package); this name stays
for code that imports it from here: it is the same module object."""
import sys

from .perf import model_arch as _module

sys.modules[__name__] = _module
