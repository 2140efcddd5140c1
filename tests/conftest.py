"""Fixtures shared by the three tiers, and the ``server`` marker.

The suite has three tiers, one directory each:

* ``tests/unit/``: pure logic, imported directly (no Flask app, no server process; short-lived
  CLI subprocesses that exit before serving, such as ``app.py --port 70000``, count as logic);
* ``tests/app/``: the Flask app in-process through ``httpx.WSGITransport`` (no socket, no
  process; streaming bodies are collected by the transport, fine for SSE assertions but not
  for timing).  The engine's ``gevent.sleep``/``Event`` run in the main greenlet, so several
  in-process requests can overlap with ``gevent.spawn``.  A test parametrized over
  ``any_api`` lives here; its server half is marked ``server``;
* ``tests/server/``: real ``python app.py`` processes (SDKs over the network, ZMQ, signals,
  TLS, timing under gevent), every test marked ``server``.  Servers are reused within a test
  module and stopped when the module ends.  Any test that uses ``sim_server``/``server``/
  ``echo_server``/``live_client`` is marked ``server`` automatically.

``python -m pytest -m "not server"`` runs the first two tiers and the in-process halves.

Where things go: fixtures live here, whichever tiers use them (so that the flat test files
still under ``tests/`` see them too); plain helpers (functions, classes, shared test data) live
in the ``support`` package (``tests/support/``), imported as ``from support import sse_events``.
A fixture only one tier's files share would go in that tier's ``conftest.py``; there is none
yet (see below).

Imports: pytest's default ``prepend`` import mode, no ``__init__.py`` in the tier
directories.  Each test module imports under its basename with its directory put on
``sys.path``, so basenames must be unique across the tiers (pytest stops with "import file
mismatch" otherwise).  Every ``conftest.py`` imports as the module ``conftest``: pytest drops
the previous one before importing the next, so a ``from conftest import ...`` gets whichever
came last.  Tests therefore import helpers from ``support``; this file re-exports them only
for test modules written ``from conftest import ...`` against the flat layout, which works as
long as this is the only conftest.  It puts ``tests/`` (for ``support``) and the repository
root (for the code) on ``sys.path``.

Fixture API (all factories cache by flags+env within a module):

``app_client(*flags, env=None, model="test-model") -> SimClient``   in-process
``live_client(*flags, env=None, model="test-model") -> SimClient``  real server
``sim_server(*flags, env=None, model="test-model") -> str``         real server base URL
``api`` / ``echo_api``        in-process default / ``--mode echo`` clients
``server`` / ``echo_server``  real-server base URLs (default / echo)
``any_api``                   parametrized: in-process, then a real server (marked)
``hub`` / ``ref``             a small real tokenizer in a Hugging Face cache (offline) /
                              transformers' own tokenizer for it (``support.tokenizer_hub``)
``db_path``                   a recorded-responses SQLite dataset (``support.recorded_dataset``)

A :class:`SimClient` is an ``httpx.Client`` with ``base_url`` set (``client.post("/v1/...")``),
``.url`` (base URL string), ``.app``/``.sim`` (in-process only), and ``.openai()`` /
``.anthropic()`` returning SDK clients that go through the same transport.
"""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
for _path in (ROOT, TESTS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# Tests never touch the network: a hub model name (``--model Qwen/Qwen3-0.6B``) resolves from the
# local cache or falls back to the simulated tokenizer instead of trying a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from support import INPROC_URL, ServerPool, SimClient, make_app  # noqa: E402  (after sys.path)
from support import free_port, metric, metric_values, named_events, scrape, sse_events  # noqa: E402,F401

SERVER_FIXTURES = {"_pool", "sim_server", "server", "echo_server", "live_client"}


@pytest.fixture(scope="module")
def app_client():
    """Factory: ``app_client("--mode", "echo", env={...})`` -> in-process :class:`SimClient`."""
    cache: dict = {}

    def get(*flags: str, env: dict | None = None, model: str | None = "test-model") -> SimClient:
        key = (flags, tuple(sorted((env or {}).items())), model)
        if key not in cache:
            cache[key] = SimClient(INPROC_URL, app=make_app(*flags, env=env, model=model))
        return cache[key]
    yield get
    for c in cache.values():
        kv = getattr(c.sim, "kv_cache", None)
        if kv is not None and hasattr(kv, "close"):
            kv.close()
        c.close()


@pytest.fixture(scope="module")
def api(app_client) -> SimClient:
    return app_client()


@pytest.fixture(scope="module")
def echo_api(app_client) -> SimClient:
    return app_client("--mode", "echo")


# ---- shared by two tiers: real tokenizers (app, server), the recorded dataset (unit, app) -------
@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """``HF_HOME``-style root holding model ``org/tiny`` (:mod:`support.tokenizer_hub`), offline."""
    from support.tokenizer_hub import make_hub
    root = str(tmp_path_factory.mktemp("hf_home"))
    make_hub(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield root


@pytest.fixture(scope="module")
def ref(hub):
    """transformers' own tokenizer for the same snapshot."""
    from transformers import AutoTokenizer

    from support.tokenizer_hub import MODEL
    return AutoTokenizer.from_pretrained(MODEL, cache_dir=os.path.join(hub, "hub"), local_files_only=True)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    """Path (str) of :mod:`support.recorded_dataset`'s dataset, built once per module."""
    from support.recorded_dataset import build
    return build(tmp_path_factory.mktemp("dataset") / "responses.sqlite3")


# ---- real servers ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def _pool():
    (ROOT / ".pytest_cache").mkdir(exist_ok=True)
    pool = ServerPool()
    yield pool
    pool.stop_all()


@pytest.fixture(scope="module")
def sim_server(_pool):
    """Factory: ``sim_server("--mode", "echo", env={...})`` -> base URL of a real server."""
    return _pool.start


@pytest.fixture(scope="module")
def live_client(_pool):
    """Factory: like ``sim_server`` but returns a :class:`SimClient` on that server."""
    clients: dict = {}

    def get(*flags: str, env: dict | None = None, model: str | None = "test-model") -> SimClient:
        base = _pool.start(*flags, env=env, model=model)
        if base not in clients:
            clients[base] = SimClient(base)
        return clients[base]
    yield get
    for c in clients.values():
        c.close()


@pytest.fixture(scope="module")
def server(sim_server) -> str:
    return sim_server()


@pytest.fixture(scope="module")
def echo_server(sim_server) -> str:
    return sim_server("--mode", "echo")


@pytest.fixture(params=["inproc", pytest.param("server", marks=pytest.mark.server)])
def any_api(request) -> SimClient:
    """The default simulator in-process, then as a real server (SDKs over the network)."""
    if request.param == "inproc":
        return request.getfixturevalue("api")
    return request.getfixturevalue("live_client")()


# The longest modules first (9-30 s each, `--durations=0` summed by module, most of it waiting
# on servers and time limits), then the rest of the server tier, then the app and unit tiers:
# pytest-xdist's loadscope hands out whole modules in collection order (pytest.ini turns off
# xdist 3.8's default reorder, by test count, which ignored this order and handed out last the
# modules of one to three long tests: test_stalled_readers' 2 took 12.7 s, test_adapter_items_
# off_hub's 3 10.3 s), so a long module picked up last would leave the other workers idle.
LONGEST_FIRST = ("test_grpc_server", "test_attacks_round3", "test_connection_floods", "test_stalled_readers",
                 "test_process_lifecycle", "test_attacks_bounded", "test_sleep_server",
                 "test_sleep_pauses_scheduler", "test_adapter_items_off_hub", "test_latency_and_capacity",
                 "test_vllm034_flags", "test_wire_hostile")
TIER_ORDER = {"server": 0, "app": 1, "unit": 2}


def _schedule_key(item) -> tuple:
    path = item.path
    name = path.stem
    if name in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(name))
    return (1 + TIER_ORDER.get(path.parent.name, 3), 0)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
    items.sort(key=_schedule_key)        # stable: each module's tests stay together, in order


# Every ``httpx.Client`` (each top-level ``httpx.get``/``post``, SDK client, ``SimClient``) built
# an SSL context and parsed a CA bundle into it (SSL_CERT_FILE's or certifi's): 25-40 ms of CPU
# each, on plain-http loopback requests that never use it (a loopback ``httpx.get``: 25 ms of
# CPU, 1 ms with the context shared).  Server tests make thousands: a ``/health`` probe every
# 0.1 s, hundreds of threaded ``httpx.post``s, ``ServerPool``'s start-up polls beside the
# starting server.  The default context (``verify=True``, no client certificate) is built once
# per process for each (trust_env, SSL_CERT_FILE, SSL_CERT_DIR) and shared; httpcore sets its
# ALPN per connection (the same HTTP/1.1 list: no test client uses http2).  ``verify=False`` and
# explicit contexts are built as before.
import httpx._transports.default as _httpx_default  # noqa: E402

_httpx_create_ssl_context = _httpx_default.create_ssl_context
_shared_ssl_contexts: dict = {}


def _create_ssl_context(verify=True, cert=None, trust_env=True):
    if verify is not True or cert is not None:
        return _httpx_create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
    key = (bool(trust_env), os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    ctx = _shared_ssl_contexts.get(key)
    if ctx is None:
        ctx = _shared_ssl_contexts[key] = _httpx_create_ssl_context(verify=True, cert=None, trust_env=trust_env)
    return ctx


_httpx_default.create_ssl_context = _create_ssl_context


# PYTHONDONTWRITEBYTECODE=1 (this machine's environment, the Dockerfile's) made every server a
# test starts compile the ~70 project modules it imports from source (~0.3 s of CPU each start)
# and every xdist worker assertion-rewrite and compile every test module again (~6 s of CPU): the
# test run writes its bytecode caches (``__pycache__``, git-ignored) and compiles the project's
# modules once at the start, so that servers, which inherit the variable, read them.
sys.dont_write_bytecode = False


def _compile_project() -> None:
    import compileall
    compileall.compile_file(str(ROOT / "app.py"), quiet=2)
    compileall.compile_file(str(ROOT / "wsgi.py"), quiet=2)
    for pkg in ("server", "blueprints", "schemas", "generation", "data"):
        compileall.compile_dir(str(ROOT / pkg), quiet=2)


def pytest_sessionstart(session):
    """No cyclic GC while the test modules import the SDKs (~0.5 s of ~5 s of collection):
    imports make long-lived objects, not garbage; collection ends with one full pass.  The
    controller (or the only process) compiles the project's modules (see above)."""
    gc.disable()
    if not hasattr(session.config, "workerinput"):
        _compile_project()


def pytest_collection_finish(session):
    """Move everything imported so far (SDKs, tokenizers, numpy: ~1 M objects) out of the
    garbage collector's reach: each full collection during the run, and pytest's five at the end
    (unraisable-exception check), then walks only what the tests create (~2 s less per run)."""
    gc.enable()
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """Same at the end, after every fixture's teardown: one collection here (under pytest's
    unraisable-exception hook, still installed), then pytest's five walk only what is left."""
    gc.collect()
    gc.freeze()
