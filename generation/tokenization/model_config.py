"""The served model's own ``config.json``, for the defaults vLLM derives from it.

vLLM's default ``--max-model-len`` is the model's context length (``ModelConfig``'s
``_get_and_verify_max_len``: the smallest of the config's length fields that are present,
``max_position_embeddings`` first; a multimodal config's ``text_config`` counts too).  The
simulator reads the same file where it is at hand without a download: a local model directory,
or the Hugging Face cache (a hub model whose tokenizer was fetched usually has it; with
``HF_HUB_OFFLINE`` unset the file is fetched once, bounded by the hub timeouts of
:mod:`generation.tokenization.tokenizer_loading`).  Rope scaling and sliding windows are not
applied.  ``test-model`` and other names without a config keep the simulator's 1024.
"""
from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("vllm_sim")

# vLLM's possible_keys, in its order
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def context_length(config: dict) -> int | None:
    """The context length a ``config.json`` object declares (the smallest length field, as
    vLLM), or None when it declares none."""
    values = []
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            values += [v for k in CONTEXT_KEYS if isinstance(v := part.get(k), int) and not isinstance(v, bool)
                       and v > 0]
    return min(values) if values else None


def _config_path(name: str, cache_dir: str | None) -> str | None:
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        candidate = os.path.join(path, "config.json")
        return candidate if os.path.isfile(candidate) else None
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(name, "config.json", cache_dir=cache_dir)
    if isinstance(found, str):
        return found
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    from .tokenizer_loading import _hub_env_defaults, _quiet_hub, probe_hub
    _hub_env_defaults()
    try:
        with _quiet_hub():
            probe_hub(name)           # bounded, once per name: no retries against an unreachable hub
            return hf_hub_download(name, "config.json", cache_dir=cache_dir, token=os.environ.get("HF_TOKEN") or None)
    except Exception as e:         # noqa: BLE001 - no config: the simulator's default stays
        log.debug("no config.json for '%s': %s", name, e)
        return None


def _load(path: str | None) -> dict | None:
    """The JSON object in the file at ``path``, or None (no path, unreadable, not an object)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def model_context_length(name: str, cache_dir: str | None = None) -> int | None:
    """The context length of model ``name`` (a local directory or a hub id) from its
    ``config.json``, or None when there is no readable config or it declares none."""
    config = _load(_config_path((name or "").strip(), cache_dir))
    return context_length(config) if config is not None else None


def vocab_size(config: dict) -> int | None:
    """The model's vocabulary size (``vocab_size``, or its ``text_config``'s), as vLLM's
    ``ModelConfig.get_vocab_size`` reads it: the bound of ``stop_token_ids`` and ``logit_bias``
    ids, which may differ from the tokenizer's (Qwen's models have more rows than tokens)."""
    for part in (config, config.get("text_config")):
        v = part.get("vocab_size") if isinstance(part, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def architecture(config: dict) -> str | None:
    """The model class a ``config.json`` names (the first of ``architectures``, as vLLM's
    ``ModelConfig.architecture`` resolves it when the registry has that class), or None."""
    names = config.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    return None


def served_model_config(config) -> tuple[dict | None, str]:
    """``(config.json object or None, where it was read)`` for the served model:
    ``--hf-config-path`` (a directory holding ``config.json``, or the file) first and in every
    mode, ``--force-dummy-tokenizer`` included, as vLLM reads it; otherwise the model's own
    config, unless the tokenizer is the simulated one."""
    hf_config_path = getattr(config, "hf_config_path", "") or ""
    if hf_config_path:
        path = os.path.expanduser(hf_config_path)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        obj = _load(path)
        if obj is None:
            log.warning("--hf-config-path %s: no readable config.json; the model defaults are the simulator's",
                        path)
        return obj, hf_config_path
    if config.force_dummy_tokenizer:
        return None, ""
    return (_load(_config_path((config.model or "").strip(), getattr(config, "tokenizers_cache_dir", "") or None)),
            "the model's config.json")


def apply_model_defaults(config) -> None:
    """What vLLM derives from the served model's ``config.json`` (:func:`served_model_config`):
    ``config.model_vocab_size`` (:func:`vocab_size`), ``config.model_architecture``
    (:func:`architecture`), and ``config.max_model_len`` (the context length) when neither the
    command line, the YAML file nor the environment gave one (``config.explicit``: the options
    they set)."""
    obj, where = served_model_config(config)
    if obj is None:
        return
    config.model_architecture = architecture(obj)
    v = vocab_size(obj)
    if v is not None:
        config.model_vocab_size = v
    if "max-model-len" in getattr(config, "explicit", ()):
        return
    n = context_length(obj)
    if n is not None:
        log.info("max model len %d from %s", n, where)
        config.max_model_len = n
