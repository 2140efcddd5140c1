"""Choosing and loading the tokenizer (issue 9; vLLM's ``--model`` / ``--tokenizer``).

Where and when the tokenizer is loaded (the one place this is decided):
    ``python app.py`` calls :func:`load_tokenizer` in ``main()``, in the gunicorn master, before
    the port is bound and before the gevent worker forks.  huggingface_hub (imported by
    transformers) cannot be imported once gevent has patched ``select`` (its httpx/trio stack
    needs ``select.epoll``), so a real tokenizer is always loaded in an unpatched process and
    the worker inherits it through ``fork``.  A bad ``--tokenizer`` therefore fails with one
    line before anything listens.  ``gunicorn wsgi:app`` loads the app in the worker after
    patching: a real tokenizer then needs ``gunicorn --preload`` (the app, tokenizer included,
    is built in the master); without it :func:`load_tokenizer` says so instead of crashing
    with an import error.  The simulated tokenizer imports nothing heavy (no transformers,
    tokenizers or numpy), so ``python app.py`` starts fast in the default mode.

Selection, in order:
    1. ``--force-dummy-tokenizer`` -> simulated.
    2. ``--render-url`` -> the vLLM render service tokenizes prompts and chats
       (:class:`generation.render_client.RenderTokenizer`).
    3. ``--tokenizer NAME`` (explicit): a ``tokenizer.json``, a local directory or a hub
       ``org/name``; any failure is fatal (:class:`TokenizerLoadError`, one line).
    4. ``--model NAME``: a local path, or a hub ``org/name`` (exactly one ``/``) loaded with
       transformers ``AutoTokenizer`` from the Hugging Face cache (``HF_HOME``) or
       ``--tokenizers-cache-dir``, downloaded once when online (the hub's progress bars;
       ``HF_TOKEN`` for gated repos; ``HF_HUB_OFFLINE=1`` never touches the network).  A name
       that cannot be resolved falls back to the simulated tokenizer with one log line.  Names
       without a ``/`` (``test-model``) never try the hub.
"""
from __future__ import annotations

import logging
import os
import time

from .tokenizer import HFTokenizer, SimulatedTokenizer

log = logging.getLogger("vllm_sim")


class TokenizerLoadError(Exception):
    """An explicitly requested tokenizer cannot be loaded (one-line message)."""


def _is_local(name: str) -> bool:
    return os.path.exists(name) or name.startswith((".", "/", "~")) or name.endswith(".json")


def _is_hub_name(name: str) -> bool:
    return name.count("/") == 1 and not _is_local(name) and all(name.split("/"))


def _gevent_patched() -> bool:
    import sys
    if "gevent.monkey" not in sys.modules:
        return False
    return sys.modules["gevent.monkey"].is_module_patched("select")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def load_tokenizer(config):
    """The tokenizer ``config`` asks for (see the module docstring), loaded now.

    ``config`` needs ``model``, ``tokenizer``, ``force_dummy_tokenizer`` and optionally
    ``render_url``, ``render_timeout``, ``mm_render_timeout``, ``tokenizers_cache_dir``,
    ``chat_template``.  Raises :class:`TokenizerLoadError` for an explicit ``--tokenizer`` or
    ``--chat-template`` that cannot be loaded."""
    from .chat_template import load_chat_template
    try:
        template = load_chat_template(getattr(config, "chat_template", "") or None)
    except (OSError, ValueError) as e:
        raise TokenizerLoadError(str(e)) from None
    if config.force_dummy_tokenizer:
        return SimulatedTokenizer()
    render_url = getattr(config, "render_url", "") or ""
    if render_url:
        from .render_client import RenderTokenizer
        return RenderTokenizer(render_url, config.served_names[0] if hasattr(config, "served_names")
                               else config.model, getattr(config, "render_timeout", 30.0) or 30.0,
                               getattr(config, "mm_render_timeout", 60.0) or 60.0)
    cache_dir = getattr(config, "tokenizers_cache_dir", "") or None
    explicit = (getattr(config, "tokenizer", "") or "").strip()
    if explicit:
        try:
            return _load(explicit, cache_dir, template)
        except TokenizerLoadError:
            raise
        except Exception as e:                 # OSError, ValueError, hub errors: one line
            raise TokenizerLoadError(f"cannot load tokenizer '{explicit}': {_one_line(e)}") from None
    name = (config.model or "").strip()
    if not (_is_hub_name(name) or (_is_local(name) and os.path.exists(name))):
        return SimulatedTokenizer()
    try:
        return _load(name, cache_dir, template)
    except TokenizerLoadError:
        raise
    except Exception as e:
        log.warning("tokenizer of model '%s' not available (%s); using the simulated tokenizer",
                    name, _one_line(e))
        return SimulatedTokenizer()


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _load(name: str, cache_dir: str | None, template: str | None) -> HFTokenizer:
    if _gevent_patched():
        raise TokenizerLoadError(
            "a real tokenizer must be loaded before gevent patches the process: run "
            "`python app.py`, or `gunicorn --preload ... wsgi:app`")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")   # the worker is forked after this
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")   # "PyTorch was not found": expected
    t0 = time.monotonic()
    path = os.path.expanduser(name)
    if os.path.isfile(path):
        if not path.endswith(".json"):
            raise TokenizerLoadError(f"cannot load tokenizer '{name}': not a tokenizer.json file")
        from tokenizers import Tokenizer
        backend = Tokenizer.from_file(path)
        hf = None
        if template:                      # apply_chat_template needs transformers' wrapper
            from transformers import PreTrainedTokenizerFast
            hf = PreTrainedTokenizerFast(tokenizer_object=backend)
        tok = HFTokenizer(backend, hf, template)
    elif os.path.exists(path) or _is_local(name):
        if not os.path.isdir(path):
            raise TokenizerLoadError(f"cannot load tokenizer '{name}': no such file or directory")
        bare = os.path.join(path, "tokenizer.json")
        if os.path.isfile(bare) and not os.path.isfile(os.path.join(path, "tokenizer_config.json")):
            return _load(bare, cache_dir, template)     # a tokenizer.json alone: no transformers
        tok = _auto(path, cache_dir, template, local_only=True)
    else:
        tok = _auto(name, cache_dir, template, local_only=_offline())
    log.info("loaded tokenizer '%s' (%s) in %.2f s", name, type(tok._tok or tok._fast).__name__,
             time.monotonic() - t0)
    return tok


def _auto(name: str, cache_dir: str | None, template: str | None, local_only: bool) -> HFTokenizer:
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(name, cache_dir=cache_dir, local_files_only=local_only,
                                       token=os.environ.get("HF_TOKEN") or None)
    backend = getattr(hf, "backend_tokenizer", None) or getattr(hf, "_tokenizer", None)
    return HFTokenizer(backend, hf, template)
