"""LoRA adapters: which are registered, and which occupy the ``--max-loras`` slots.
"""
from __future__ import annotations





class LoraRegistry:
    """Registered LoRA adapters (name -> path) and which are loaded in the ``--max-loras`` slots.

    Adapters from ``--lora-modules`` stay registered.  Adapters loaded at run time
    (``/v1/load_lora_adapter``) are kept up to ``max(--max-cpu-loras, --max-loras)`` -- vLLM's
    cap on resident adapters -- least recently used first out, never one that is running; so
    ``/v1/models`` and the registry stay bounded whatever the load history (issue 12)."""

    def __init__(self, modules, max_loras: int, max_cpu_loras: int = 0):
        self.paths: dict[str, str] = {m.name: m.path for m in modules}
        self.static = frozenset(self.paths)
        self.runtime: dict[str, None] = {}     # runtime-loaded names, least recently used first
        self.max_loras = max_loras
        self.cap = max(max_cpu_loras or 0, max_loras, 1)
        self.loaded: dict[str, int] = {}      # name -> running sequence count
        self.slots: dict[str, int] = {}       # name -> 1-based slot id (KV events lora_id)

    def load(self, name: str, path: str) -> list:
        """Register ``name``; returns the runtime adapters evicted to stay within the cap."""
        self.paths[name] = path
        if name in self.static:
            return []
        self.runtime.pop(name, None)
        self.runtime[name] = None
        evicted = []
        if len(self.runtime) > self.cap:
            for old in list(self.runtime):
                if len(self.runtime) <= self.cap:
                    break
                if old != name and not self.loaded.get(old):
                    self.unload(old)
                    evicted.append(old)
        return evicted

    def unload(self, name: str) -> None:
        """Forget ``name``; an idle adapter also leaves its slot (a running one keeps it until
        another adapter needs it, as :meth:`acquire` evicts idle slots)."""
        self.paths.pop(name, None)
        self.runtime.pop(name, None)
        if self.loaded.get(name) == 0:
            del self.loaded[name]
            self.slots.pop(name, None)

    def can_run(self, name: str | None) -> bool:
        if name is None or name in self.loaded:
            return True
        if len(self.loaded) < self.max_loras:
            return True
        return any(c == 0 for c in self.loaded.values())

    def acquire(self, name: str | None) -> None:
        if name is None:
            return
        if name in self.runtime:                  # most recently used goes last
            del self.runtime[name]
            self.runtime[name] = None
        if name not in self.loaded:
            if len(self.loaded) >= self.max_loras:   # evict one idle adapter
                for other, c in list(self.loaded.items()):
                    if c == 0:
                        del self.loaded[other]
                        self.slots.pop(other, None)
                        break
            used = set(self.slots.values())
            self.slots[name] = next(i for i in range(1, self.max_loras + 2) if i not in used)
            self.loaded[name] = 0
        self.loaded[name] += 1

    def release(self, name: str | None) -> None:
        if name is not None and name in self.loaded:
            self.loaded[name] = max(self.loaded[name] - 1, 0)


