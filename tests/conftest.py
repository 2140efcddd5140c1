"""Test fixtures for the three tiers.

* unit tests import the code directly;
* in-process tests drive the Flask app through ``httpx.WSGITransport`` (no socket, no
  process; streaming bodies are collected by the transport, fine for SSE assertions but not
  for timing).  The engine's ``gevent.sleep``/``Event`` run in the main greenlet, so several
  in-process requests can overlap with ``gevent.spawn``;
* ``@pytest.mark.server`` tests start real ``python app.py`` processes (SDKs over the
  network, ZMQ, signals, TLS, timing under gevent).  Servers are reused within a test
  module and stopped when the module ends.  Any test that uses ``sim_server``/``server``/
  ``echo_server``/``live_client`` is marked ``server`` automatically.

Fixtures live here; plain helpers (``SimClient``, ``make_app``, ``free_port``, ``scrape``,
``sse_events``, ...) live in the ``support`` package (``tests/support/``) and are imported
``from support import ...``.  This file puts ``tests/`` (for ``support``) and the repository
root (for the code) on ``sys.path``, and re-exports the helpers for test modules still written
``from conftest import ...``.

Fixture API (all factories cache by flags+env within a module):

``app_client(*flags, env=None, model="test-model") -> SimClient``   in-process
``live_client(*flags, env=None, model="test-model") -> SimClient``  real server
``sim_server(*flags, env=None, model="test-model") -> str``         real server base URL
``api`` / ``echo_api``        in-process default / ``--mode echo`` clients
``server`` / ``echo_server``  real-server base URLs (default / echo)
``any_api``                   parametrized: in-process, then a real server (marked)

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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


def pytest_sessionstart(session):
    """No cyclic GC while the test modules import the SDKs (~0.5 s of ~5 s of collection):
    imports make long-lived objects, not garbage; collection ends with one full pass."""
    gc.disable()


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
