"""Prometheus samples as the fake-metrics tests read them (in-process and unit)."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples_of(text: str) -> dict:
    """``{(sample_name, frozenset(labels.items())): value}`` of a Prometheus text body."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def get(samples: dict, name: str, **labels):
    """A sample's value, or None when the series does not exist."""
    labels.setdefault("model_name", "test-model")
    if name != "vllm:lora_requests_info":     # every other vllm:* series carries the data-parallel rank
        labels.setdefault("engine", "0")
    labels = {k: v for k, v in labels.items() if v is not None}     # model_name=None: no such label
    return samples.get((name, frozenset(labels.items())))
