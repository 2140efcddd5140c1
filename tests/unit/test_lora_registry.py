"""The LoRA registry is a capped LRU that keeps static and running adapters."""
from __future__ import annotations

from types import SimpleNamespace


def test_lora_registry_is_capped_lru_and_keeps_static_and_running_adapters():
    from generation.engine.lora import LoraRegistry
    reg = LoraRegistry([SimpleNamespace(name="static", path="/s")], max_loras=2, max_cpu_loras=3)
    reg.cap = 3                                # the rules on a small cap
    reg.load("busy", "/b")
    reg.acquire("busy")                        # running: never evicted
    for i in range(20000):
        reg.load(f"r{i}", f"/r{i}")
    assert set(reg.paths) == {"static", "busy", "r19998", "r19999"}
    reg.release("busy")
    reg.acquire("r19998")                      # used recently: kept over r19999
    reg.release("r19998")
    assert reg.load("new", "/n") == ["busy"]
    assert "busy" not in reg.loaded and "busy" not in reg.slots        # an evicted idle adapter frees its slot
    assert reg.load("newer", "/n2") == ["r19999"]
    assert set(reg.paths) == {"static", "r19998", "new", "newer"}
    reg.unload("r19998")
    assert set(reg.loaded) == set(reg.slots) == set()
    # at least 64 runtime adapters stay registered (vLLM keeps them all servable), more with --max-cpu-loras
    assert LoraRegistry([], max_loras=1).cap == 64 and LoraRegistry([], 4, 100).cap == 100
    reg = LoraRegistry([], max_loras=1, max_cpu_loras=2)
    for i in range(10):
        reg.load(f"adapter_{i}", "/a")
    assert set(reg.paths) == {f"adapter_{i}" for i in range(10)}
