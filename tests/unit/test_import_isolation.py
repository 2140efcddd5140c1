"""Modules that must stay light import only what they need, checked in a fresh interpreter:
the configuration (no metrics recorder, fake metrics or data) and the metrics recorder (no
configuration, no fake metrics)."""
from __future__ import annotations

import subprocess
import sys

from support import ROOT


def test_config_imports_no_metrics_fake_metrics_or_data():
    code = ("import sys, generation.config.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('generation', 'data', 'blueprints')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["generation", "generation.config", "generation.config.cli", "generation.config.kv_events",
                         "generation.config.options", "generation.config.reasoning_effort",
                         "generation.config.reasoning_parsers",
                         "generation.config.sim_config", "generation.config.values", "generation.config.vllm_flags",
                         "generation.config.vllm_versions",
                         "generation.metrics",
                         "generation.metrics.buckets", "generation.metrics.fake_metrics_spec"]


def test_metrics_module_imports_neither_config_nor_fake_metrics():
    code = ("import sys, generation.metrics.recorder; "
            "assert not any(m.startswith('generation.config') for m in sys.modules); "
            "assert 'generation.metrics.fake_metrics' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
