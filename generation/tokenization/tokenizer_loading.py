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
       (:class:`generation.tokenization.render_client.RenderTokenizer`).
    3. ``--tokenizer NAME`` (explicit): a ``tokenizer.json``, a local directory or a hub
       ``org/name``; any failure is fatal (:class:`TokenizerLoadError`, one line).
    4. ``--model NAME``: a local path, or a hub ``org/name`` (exactly one ``/``) loaded with
       transformers ``AutoTokenizer`` from the Hugging Face cache (``HF_HOME``) or
       ``--tokenizers-cache-dir``, downloaded once when online (the hub's progress bars;
       ``HF_TOKEN`` for gated repos; ``HF_HUB_OFFLINE=1`` never touches the network).  A name
       that cannot be resolved falls back to the simulated tokenizer with one log line.  Names
       without a ``/`` (``test-model``) never try the hub.

Hub names, fast and quiet when the hub is out of reach (:func:`_from_hub`):
    the local cache is read first (``try_to_load_from_cache``, then ``local_files_only=True``)
    and used when it holds the tokenizer, without any request.  Otherwise one HEAD request of
    ``tokenizer_config.json`` (no retries, ``HF_HUB_ETAG_TIMEOUT`` seconds, default here
    :data:`HUB_PROBE_TIMEOUT`; the whole probe, DNS included, is bounded by
    :data:`HUB_PROBE_BUDGET`) decides whether transformers may download.  huggingface_hub's own
    downloader retries a failed HEAD with backoff (5 retries, 1+2+4+8+8 s, per file:
    ``file_download.py``, ``_ETAG_RETRY_TIMEOUT``), which made an unreachable hub cost ~50 s and
    ~50 warnings; the probe keeps that path for reachable hubs only.  Its warnings are silenced
    during the attempt; the fallback is one WARNING naming the reason and how to skip the probe
    (``HF_HUB_OFFLINE=1`` or ``--force-dummy-tokenizer``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from .patched_imports import gevent_patched as _gevent_patched
from .tokenizer import HFTokenizer, SimulatedTokenizer

log = logging.getLogger("vllm_sim")

#: Seconds of the hub probe's HEAD request when ``HF_HUB_ETAG_TIMEOUT`` is not set (the hub's
#: default is 10 s); also the default of ``HF_HUB_ETAG_TIMEOUT`` set for transformers' requests.
HUB_PROBE_TIMEOUT = 3.0
#: Seconds the whole probe may take, name resolution included (``getaddrinfo`` ignores timeouts):
#: the HEAD plus huggingface_hub's own user-agent registry fetch (3 s, cached for 24 h).
HUB_PROBE_BUDGET = 6.0
#: Default ``HF_HUB_DOWNLOAD_TIMEOUT`` (seconds without a byte while downloading; hub default 10).
HUB_DOWNLOAD_TIMEOUT = 10
_SKIP_HINT = "set HF_HUB_OFFLINE=1 or --force-dummy-tokenizer to skip the hub"


class TokenizerLoadError(Exception):
    """An explicitly requested tokenizer cannot be loaded (one-line message)."""


def _is_local(name: str) -> bool:
    return os.path.exists(name) or name.startswith((".", "/", "~")) or name.endswith(".json")


def _is_hub_name(name: str) -> bool:
    return name.count("/") == 1 and not _is_local(name) and all(name.split("/"))


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
    if not (_is_hub_name(name) or (_is_local(name) and os.path.exists(os.path.expanduser(name)))):
        return SimulatedTokenizer()
    try:
        tok = _load(name, cache_dir, template)
        config.tokenizer_loaded = name          # the start-up line names it (it said "simulated")
        return tok
    except TokenizerLoadError:
        raise
    except _HubUnavailable as e:
        log.warning("tokenizer of model '%s' not available (%s); using the simulated tokenizer%s",
                    name, e, "" if _offline() else f" ({_SKIP_HINT})")
        return SimulatedTokenizer()
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
        tok = _from_hub(name, cache_dir, template)
    log.info("loaded tokenizer '%s' (%s) in %.2f s", name, type(tok._tok or tok._fast).__name__,
             time.monotonic() - t0)
    return tok


def _auto(name: str, cache_dir: str | None, template: str | None, local_only: bool) -> HFTokenizer:
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(name, cache_dir=cache_dir, local_files_only=local_only,
                                       token=os.environ.get("HF_TOKEN") or None)
    backend = getattr(hf, "backend_tokenizer", None) or getattr(hf, "_tokenizer", None)
    return HFTokenizer(backend, hf, template)


class _HubUnavailable(Exception):
    """The hub could not be asked, or said the repository is not there (message: the reason)."""


def _hub_env_defaults() -> None:
    """Bounded hub timeouts unless the user set them (read by huggingface_hub at import; set
    on its constants too when it is already imported)."""
    import sys
    for var, value in (("HF_HUB_ETAG_TIMEOUT", HUB_PROBE_TIMEOUT), ("HF_HUB_DOWNLOAD_TIMEOUT", HUB_DOWNLOAD_TIMEOUT)):
        if os.environ.get(var, "").strip():
            continue
        os.environ[var] = str(int(value))
        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None:
            setattr(constants, var, int(value))


@contextlib.contextmanager
def _quiet_hub():
    """huggingface_hub's, httpx's and transformers' warnings and request lines off for the
    duration (the hub's logger prints each record itself and also propagates it: every retry
    appeared twice)."""
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "httpx", "httpcore", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _cached(name: str, cache_dir: str | None) -> bool:
    """Whether the cache holds a tokenizer file of ``name`` (a directory lookup, no request)."""
    from huggingface_hub import try_to_load_from_cache
    return any(isinstance(try_to_load_from_cache(name, f, cache_dir=cache_dir), str)
               for f in ("tokenizer_config.json", "tokenizer.json"))


_UNREACHABLE: dict = {}        # hub names whose probe failed in this process -> the reason


def probe_hub(name: str) -> None:
    """:func:`_probe_hub`, at most once per name and process: a name whose probe failed fails
    again at once (the model's ``config.json`` is looked up after its tokenizer: without this an
    unreachable hub cost huggingface_hub's ~24 s of retries a second time)."""
    if name in _UNREACHABLE:
        raise _HubUnavailable(_UNREACHABLE[name])
    try:
        _probe_hub(name)
    except _HubUnavailable as e:
        _UNREACHABLE[name] = str(e)
        raise


def _probe_hub(name: str) -> None:
    """One HEAD of ``name``'s ``tokenizer_config.json`` on ``HF_ENDPOINT``, no retries, within
    :data:`HUB_PROBE_BUDGET` seconds.  Returns when the repository answers (a missing file
    included: transformers then looks for the others); raises :class:`_HubUnavailable`."""
    from huggingface_hub import constants, get_hf_file_metadata
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError
    timeout = _env_float("HF_HUB_ETAG_TIMEOUT", HUB_PROBE_TIMEOUT)
    url = constants.HUGGINGFACE_CO_URL_TEMPLATE.format(repo_id=name, revision="main",
                                                       filename="tokenizer_config.json")
    outcome: list = []

    def probe():
        try:
            get_hf_file_metadata(url, timeout=timeout, retry_on_errors=False)
            outcome.append(None)
        except RemoteEntryNotFoundError:
            outcome.append(None)
        except BaseException as e:     # reported to the caller's thread
            outcome.append(e)

    # A thread bounds name resolution too; left behind only if the resolver hangs (daemon).
    t = threading.Thread(target=probe, name="hub-probe", daemon=True)
    t.start()
    t.join(max(timeout, HUB_PROBE_BUDGET))
    if not outcome:
        raise _HubUnavailable(f"no answer from {url.split('/' + name)[0]} within "
                              f"{max(timeout, HUB_PROBE_BUDGET):g} s")
    e = outcome[0]
    if e is None:
        return
    if isinstance(e, RepositoryNotFoundError):     # unknown, private or gated without HF_TOKEN
        raise _HubUnavailable(_one_line(e))
    raise _HubUnavailable(f"hub request failed: {_one_line(e)}")


def _env_float(var: str, default: float) -> float:
    try:
        return float(os.environ.get(var, "")) or default
    except ValueError:
        return default


def _from_hub(name: str, cache_dir: str | None, template: str | None) -> HFTokenizer:
    """``org/name``: the cached tokenizer if any, else a download when the hub answers the probe."""
    _hub_env_defaults()
    with _quiet_hub():
        if _cached(name, cache_dir):
            try:
                return _auto(name, cache_dir, template, local_only=True)
            except Exception:
                if _offline():
                    raise
        if _offline():
            raise _HubUnavailable("not in the Hugging Face cache and HF_HUB_OFFLINE is set")
        probe_hub(name)
        return _auto(name, cache_dir, template, local_only=False)
