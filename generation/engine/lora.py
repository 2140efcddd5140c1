"""LoRA adapters: which are registered, which occupy the ``--max-loras`` slots, and vLLM's
checks on an adapter directory (:func:`check_local_adapter`).
"""
from __future__ import annotations

import json
import os

from generation.errors import APIError

MAX_CONFIG_BYTES = 1 << 20          # an adapter_config.json is a few hundred bytes
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")
REQUIRED = ("r", "lora_alpha", "target_modules")     # PEFTHelper's fields without defaults
# vLLM 0.34 PEFTHelper._init_is_supported: inits that only set the adapter's initial weights
SUPPORTED_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
# vLLM 0.34 PEFTHelper._validate_features, after the init check
UNSUPPORTED_FEATURES = (("alora_invocation_tokens", "vLLM does not support Activated LoRA (aLoRA)."),
                        ("layer_replication", "vLLM does not support layer_replication."),
                        ("use_bdlora", "vLLM does not support block-diagonal LoRA (BD-LoRA)."),
                        ("use_qalora", "vLLM does not support QALoRA."))


def check_local_adapter(name: str, path: str, max_lora_rank: int) -> None:
    """vLLM's checks when loading adapter ``name`` from ``path``, for a path that is a local
    directory (``PEFTHelper.from_local_dir``, ``validate_legal``, ``LoRAModel.from_local_checkpoint``):
    no ``adapter_config.json`` is a 404 ``Loading lora <name> failed: No adapter found for
    <path>``; an unreadable, invalid or unsupported config (missing ``r`` / ``lora_alpha`` /
    ``target_modules``, DoRA, ``modules_to_save`` other than ``classifier`` / ``score``, a bias)
    or a directory without weights is a 400 with vLLM 0.34's message (vLLM answers these 500:
    the simulator keeps client mistakes 4xx, issue 12); an ``init_lora_weights`` that modifies
    the base weights (PiSSA, OLoRA, ...), aLoRA, layer replication, BD-LoRA, QALoRA likewise; a rank over
    ``--max-lora-rank`` is vLLM's 400 ``LoRA rank R is greater than max_lora_rank M.``.  A path that is not on this machine (another node's directory, a Hub
    id) is not checked: the simulator serves adapters it has no files for.  Only the config is
    read (at most :data:`MAX_CONFIG_BYTES`); messages never quote its content.  Raises APIError
    (param ``lora_path``)."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise APIError(f"Loading lora {name} failed: {path} is not a directory", 400, "lora_path")
    config_path = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(config_path):
        # vLLM's LoRAAdapterNotFoundError, a VLLMNotFoundError: create_error_response gives no param
        raise APIError(f"Loading lora {name} failed: No adapter found for {path}", 404, None)
    try:
        with open(config_path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise APIError(f"Loading lora {name} failed: cannot read adapter_config.json ({e.strerror})",
                       400, "lora_path") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise APIError(f"Loading lora {name} failed: adapter_config.json is over {MAX_CONFIG_BYTES} bytes",
                       400, "lora_path")
    try:
        config = json.loads(raw)
    except ValueError as e:       # JSONDecodeError, UnicodeDecodeError: the position, never the text
        where = f"line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise APIError(f"Loading lora {name} failed: adapter_config.json is not valid JSON ({where})",
                       400, "lora_path") from None
    if not isinstance(config, dict):
        raise APIError(f"Loading lora {name} failed: adapter_config.json is not a JSON object", 400, "lora_path")
    missing = [k for k in REQUIRED if k not in config]
    if missing:      # vLLM 0.34's PEFTHelper.from_dict (a set: sorted here, so the message is stable)
        raise APIError(f"Missing required configuration fields: {{{', '.join(map(repr, sorted(missing)))}}}",
                       400, "lora_path")
    rank = config["r"]
    if isinstance(rank, bool) or not isinstance(rank, int):      # not quoted: the file's content
        raise APIError("LoRA rank `r` must be a positive integer.", 400, "lora_path")
    if rank <= 0:
        raise APIError(f"LoRA rank `r` must be a positive integer, got {rank}.", 400, "lora_path")
    # vLLM 0.34's PEFTHelper.validate_legal: unsupported features, then the rank, then bias, in one message
    problems = []
    modules = config.get("modules_to_save") or []
    unsupported = [m for m in modules if m not in ("classifier", "score")] if isinstance(modules, list) else modules
    if unsupported:
        shown = unsupported if (isinstance(unsupported, list) and len(unsupported) <= 16 and
                                all(isinstance(m, str) and len(m) <= 64 for m in unsupported)) else "(not shown)"
        problems.append('vLLM only supports modules_to_save being either None or ["classifier", "score"] for '
                        f"classification models. Unsupported modules_to_save: {shown}")
    if config.get("use_dora"):
        problems.append("vLLM does not yet support DoRA.")
    if config.get("lora_bias"):
        problems.append("vLLM does not support LoRA bias (lora_bias).")
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in SUPPORTED_INITS:
        shown = repr(init) if len(init) <= 64 and init.isprintable() else "(not shown)"
        problems.append(f"vLLM does not support init_lora_weights={shown}. Inits such as PiSSA, OLoRA, CorDA and "
                        "LoftQ modify the base model weights when PEFT loads the adapter. Convert it to a regular "
                        "LoRA adapter with PEFT's path_initial_model_for_weight_conversion, or set "
                        "init_lora_weights to true if the served base model already contains the modified weights.")
    for key, message in UNSUPPORTED_FEATURES:
        if config.get(key):
            problems.append(message)
    if rank > max_lora_rank:
        problems.append(f"LoRA rank {rank} is greater than max_lora_rank {max_lora_rank}.")
    if config.get("bias", "none") not in (None, "none"):
        problems.append("Adapter bias is not supported.")
    if problems:
        raise APIError(" ".join(problems), 400, "lora_path")
    if not any(os.path.isfile(os.path.join(path, w)) for w in WEIGHT_FILES):
        raise APIError(f"{path} doesn't contain tensors", 400, "lora_path")



class LoraRegistry:
    """Registered LoRA adapters (name -> path) and which are loaded in the ``--max-loras`` slots.

    Adapters from ``--lora-modules`` stay registered.  Adapters loaded at run time
    (``/v1/load_lora_adapter``) are kept up to ``max(--max-cpu-loras, --max-loras,``
    :data:`REGISTERED_FLOOR` ``)``, least recently used first out, never one that is running; so
    ``/v1/models`` and the registry stay bounded whatever the load history (issue 12).  vLLM
    0.34 keeps every loaded adapter servable (``OpenAIServingModels.lora_requests``): one that
    ``--max-cpu-loras`` evicted from memory is reloaded from its path by its next request, so a
    client that loads a few more adapters than ``--max-cpu-loras`` can still use each of them
    (vLLM's ``test_multiple_lora_adapters`` loads 10 with ``--max-cpu-loras 2``)."""

    REGISTERED_FLOOR = 64

    def __init__(self, modules, max_loras: int, max_cpu_loras: int = 0):
        self.paths: dict[str, str] = {m.name: m.path for m in modules}
        self.static = frozenset(self.paths)
        self.runtime: dict[str, None] = {}     # runtime-loaded names, least recently used first
        self.max_loras = max_loras
        self.resident = max(max_cpu_loras or 0, max_loras, 1)       # vLLM's cap on adapters in memory
        self.cap = max(self.resident, self.REGISTERED_FLOOR)
        self.loaded: dict[str, int] = {}      # name -> running sequence count
        self.slots: dict[str, int] = {}       # name -> 1-based slot id
        # name -> vLLM's lora_int_id (the KV events' lora_id): OpenAIServingModels numbers each
        # adapter it registers from a counter (--lora-modules in order from 1, then each load of a
        # new name), kept while the name stays registered, whether or not it runs
        self.ids: dict[str, int] = {m.name: i for i, m in enumerate(modules, 1)}
        self._last_id = len(self.ids)

    def load(self, name: str, path: str) -> list:
        """Register ``name``; returns the runtime adapters evicted to stay within the cap."""
        self.paths[name] = path
        if name not in self.ids:
            self._last_id += 1
            self.ids[name] = self._last_id
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
        self.ids.pop(name, None)
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


