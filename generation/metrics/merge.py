"""One ``/metrics`` over several engines' registries: what vLLM's API server exposes when it
fronts ``--data-parallel-size N`` engines (its ``PrometheusStatLogger`` keeps one series per
engine, told apart by the ``engine`` label, under one HELP / TYPE header per family).

The rule for a sample, the same in both forms below:

* it carries an ``engine`` label: each engine's own series, kept side by side;
* ``process_*`` / ``python_*`` families and ``*_created`` samples: the process's, or a start
  time, the same for every engine of this process: the first engine's; so are the API
  server's sleep-mode and weight-update operations, which every engine ran once for the one
  call;
* anything else without an ``engine`` label (the API server's ``http_*`` families, render
  duration, WebSocket connections, admission rejections) was counted by whichever engine's
  routes served the request: summed, so the totals are the API server's; but
  ``vllm:lora_requests_info``, one gauge every engine sets to the time it last changed (its
  labels name the adapters), keeps the latest time.
"""
from __future__ import annotations

import re

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

_ENGINE = 'engine="'
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


# The process's families, and the API server's operations, which every rank also ran (:mod:`server.dp_api`).
_ONCE = ("process_", "python_", "vllm:sleep_mode_", "vllm:rl_weight_update_")


# Gauges set to the time of their last change (``set_to_current_time``) by every engine: the latest.
_LATEST = ("vllm:lora_requests_info",)


def _first_only(family: str, sample: str) -> bool:
    return family.startswith(_ONCE) or sample.endswith("_created")


def _combine(family: str, old: float, new: float) -> float:
    return max(old, new) if family in _LATEST else old + new


def _has_engine(key: str) -> bool:
    """Whether a sample (``name{labels}``) has an ``engine`` label, read as label names, not as
    text a label value may hold (a LoRA adapter named ``x,engine=``)."""
    return _ENGINE in key and any(m.group(1) == "engine" for m in _LABEL.finditer(key, key.find("{")))


def merge_exposition(texts: list[str]) -> str:
    """The Prometheus text (format 0.0.4) of ``texts``, each one engine's whole exposition:
    each family once, in the order first seen, with every engine's samples (rule above).
    Samples must have no timestamps (the simulator writes none).  A family whose samples carry
    the ``engine`` label is joined block by block (told by its first sample, whichever engine
    has one first); only the others are read line by line."""
    order: list[str] = []
    heads: dict[str, str] = {}               # family -> its HELP / TYPE lines
    blocks: dict[str, list[str]] = {}        # family -> engines' sample lines (engine-labelled)
    summed: dict[str, dict] = {}             # family -> {series: value} (the others)
    for text in texts:
        for block in _blocks(text):
            head, _, body = block.partition("\n# TYPE ")
            family = head.split(" ", 1)[0]
            type_line, _, samples = body.partition("\n")
            if family not in heads:
                order.append(family)
                heads[family] = f"# HELP {head}\n# TYPE {type_line}\n"
            if not samples.strip():
                continue
            if family in blocks:
                blocks[family].append(samples)
                continue
            if family not in summed:
                if _has_engine(samples.split("\n", 1)[0].rpartition(" ")[0]):
                    blocks[family] = [samples]
                    continue
                summed[family] = {}
            into = summed[family]
            for line in samples.split("\n"):
                if not line:
                    continue
                key, _, value = line.rpartition(" ")
                old = into.get(key)
                if old is None:
                    into[key] = value
                elif not _first_only(family, key.split("{", 1)[0]) and not _has_engine(key):
                    into[key] = _combine(family, float(old), float(value))
    out = []
    for family in order:
        out.append(heads[family])
        if family in blocks:
            out.extend(b if b.endswith("\n") else b + "\n" for b in blocks[family])
        else:
            out.extend(f"{k} {v if v.__class__ is str else floatToGoString(v)}\n"
                       for k, v in summed.get(family, {}).items())
    return "".join(out)


def _blocks(text: str) -> list[str]:
    """``text``'s families, each from its HELP line's name to its last sample (no ``# HELP ``)."""
    if not text.startswith("# HELP "):      # nothing registered (prometheus_client writes HELP first)
        return []
    return text[7:].split("\n# HELP ")


class MergedRegistry:
    """A collector over ``registries`` (one per engine) for prometheus_client's encoders
    (``generate_latest``, OpenMetrics, ``restricted_registry``-like filters): each family once,
    its samples merged by the rule above."""

    def __init__(self, registries):
        self.registries = list(registries)

    def collect(self):
        merged: dict[str, Metric] = {}
        keyed: dict[str, dict] = {}
        for registry in self.registries:
            for family in registry.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                    keyed[family.name] = {}
                seen = keyed[family.name]
                for s in family.samples:
                    key = (s.name, tuple(sorted(s.labels.items())))
                    i = seen.get(key)
                    if i is None:
                        seen[key] = len(into.samples)
                        into.samples.append(s)
                    elif "engine" not in s.labels and not _first_only(family.name, s.name):
                        old = into.samples[i]
                        into.samples[i] = old._replace(value=_combine(family.name, old.value, s.value))
        yield from merged.values()
