"""An unreachable hub is asked once per model name and process
(generation/tokenization/tokenizer_loading.py ``probe_hub``): the model's ``config.json`` lookup
after its tokenizer's fallback fails at once instead of repeating huggingface_hub's ~24 s of
retries (found by a fresh user: 25 s to /health offline without HF_HUB_OFFLINE)."""
from __future__ import annotations

import pytest

from generation.tokenization import model_config, tokenizer_loading as tl


def test_a_failed_probe_is_remembered_per_name(monkeypatch):
    calls = []

    def unreachable(name):
        calls.append(name)
        raise tl._HubUnavailable("no answer")

    monkeypatch.setattr(tl, "_probe_hub", unreachable)
    monkeypatch.setattr(tl, "_UNREACHABLE", {})
    for _ in range(3):
        with pytest.raises(tl._HubUnavailable, match="no answer"):
            tl.probe_hub("org/offline")
    assert calls == ["org/offline"]


def test_the_config_lookup_does_not_download_past_a_failed_probe(monkeypatch, tmp_path):
    import huggingface_hub
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(tl, "_UNREACHABLE", {"org/offline": "no answer"})
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda *a, **k: pytest.fail("downloaded past a failed probe"))
    assert model_config._config_path("org/offline", str(tmp_path)) is None
