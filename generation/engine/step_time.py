"""Moved to :mod:`generation.engine.perf.step_time` (the performance model's package); this name stays
for code that imports it from here: it is the same module object."""
import sys

from .perf import step_time as _module

sys.modules[__name__] = _module
