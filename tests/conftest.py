"""Test fixtures for the three tiers.

* unit tests import the code directly;
* in-process tests drive the Flask app through ``httpx.WSGITransport`` (no socket, no
  process; streaming bodies are collected by the transport, fine for SSE assertions but not
  for timing).  The engine's ``gevent.sleep``/``Event`` run in the main greenlet, so several
  in-process requests can overlap with ``gevent.spawn``;
* ``@pytest.mark.server`` tests start real ``python app.py`` processes (SDKs over the
  network, ZMQ, signals, TLS, timing under gevent).  Servers are reused within a test module
  and stopped when the module ends.  Any test that uses ``sim_server``/``server``/
  ``echo_server``/``live_client`` is marked ``server`` automatically.

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
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Tests never touch the network: a hub model name (``--model Qwen/Qwen3-0.6B``) resolves from the
# local cache or falls back to the simulated tokenizer instead of trying a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SERVER_FIXTURES = {"_pool", "sim_server", "server", "echo_server", "live_client"}
INPROC_URL = "http://sim"


def _clean_env(env: dict | None) -> dict:
    """The environment a simulator sees: ours without pod variables, plus ``env``."""
    out = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE", "POD_IP")}
    out.update(env or {})
    return out


def _argv(flags: tuple, model: str | None) -> list:
    args = []
    if model and "--model" not in flags:
        args += ["--model", model]
    return args + list(flags)


class SimClient(httpx.Client):
    """``httpx.Client`` bound to one simulator (in-process app or real server)."""

    def __init__(self, url: str, app=None, **kw):
        transport = httpx.WSGITransport(app=app) if app is not None else None
        super().__init__(base_url=url, transport=transport, timeout=kw.pop("timeout", 30), **kw)
        self.url = url
        self.app = app

    @property
    def sim(self):
        """The in-process :class:`generation.engine.simulator.Simulator`."""
        return self.app.extensions["simulator"]

    def session(self, **kw) -> httpx.Client:
        """A new ``httpx.Client`` on the same simulator (own headers, timeout, ...)."""
        transport = httpx.WSGITransport(app=self.app) if self.app is not None else None
        return httpx.Client(base_url=self.url, transport=transport, **kw)

    def openai(self, **kw):
        import openai
        kw.setdefault("api_key", "x")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        if self.app is not None:
            kw.setdefault("http_client", httpx.Client(transport=httpx.WSGITransport(app=self.app)))
        return openai.OpenAI(base_url=self.url + "/v1", **kw)

    def anthropic(self, **kw):
        import anthropic
        kw.setdefault("api_key", "sk-ant-test")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        if self.app is not None:
            import httpx2     # the anthropic SDK's own httpx fork
            kw.setdefault("http_client", httpx2.Client(transport=httpx2.WSGITransport(app=self.app)))
        return anthropic.Anthropic(base_url=self.url, **kw)


def make_app(*flags: str, env: dict | None = None, model: str | None = "test-model"):
    """A Flask app as ``python app.py [flags]`` would serve it (same argv and environment)."""
    from app import create_app
    from generation.config.cli import load_config
    return create_app(load_config(_argv(flags, model), env=_clean_env(env)))


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
def free_port(span: int = 1) -> int:
    """A free port ``p`` such that ``p .. p+span-1`` are all free (data-parallel ranks)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for extra in range(1, span):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", port + extra))
        except OSError:
            continue
        return port


class ServerPool:
    """``python app.py`` processes keyed by (flags, env, model)."""

    def __init__(self):
        self.procs: dict = {}

    def start(self, *flags: str, env: dict | None = None, model: str | None = "test-model") -> str:
        key = (flags, tuple(sorted((env or {}).items())), model)
        if key in self.procs:
            return self.procs[key][1]
        span = 1
        if "--data-parallel-size" in flags:
            span = int(flags[flags.index("--data-parallel-size") + 1])
        port = free_port(span)
        args = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1"]
        args += _argv(flags, model)
        log = open(ROOT / ".pytest_cache" / f"server-{port}.log", "wb") if (ROOT / ".pytest_cache").is_dir() \
            else subprocess.DEVNULL
        proc = subprocess.Popen(args, cwd=ROOT, env=_clean_env(env), stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {args}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            proc.kill()
            raise RuntimeError("server did not start")
        self.procs[key] = (proc, base)
        return base

    def stop_all(self):
        """SIGINT (quick shutdown: a graceful SIGTERM would wait for SDK clients' idle
        keep-alive connections), then SIGKILL whatever is still alive after 5 s."""
        for proc, _ in self.procs.values():
            proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 5
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


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


# ---- response helpers --------------------------------------------------------------------------
def scrape(base) -> dict:
    """``{(sample_name, frozenset(labels.items())): value}`` of ``/metrics``; ``base`` is a
    :class:`SimClient` or a base URL."""
    from prometheus_client.parser import text_string_to_metric_families
    r = base.get("/metrics") if isinstance(base, httpx.Client) else httpx.get(base + "/metrics", timeout=10)
    assert r.status_code == 200
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric_values(samples: dict, name: str, **labels) -> list:
    """Values of the ``name`` samples whose labels include ``labels`` (other labels, such as
    vLLM's ``engine``, may be present)."""
    want = set(labels.items())
    return [v for (n, lab), v in samples.items() if n == name and want <= lab]


def metric(samples: dict, name: str, **labels) -> float:
    """The one ``name`` sample whose labels include ``labels``; KeyError if none or several."""
    vals = metric_values(samples, name, **labels)
    if len(vals) != 1:
        raise KeyError(f"{name}{labels}: {len(vals)} matching samples")
    return vals[0]


# ---- SSE helpers -------------------------------------------------------------------------------
def sse_events(body: str) -> list:
    """``data:`` payloads of an SSE body, in order; JSON decoded except ``[DONE]``."""
    out = []
    for event in body.split("\n\n"):
        for line in event.split("\n"):
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def named_events(body: str) -> list:
    """``(event, data)`` pairs of an SSE body with ``event:`` lines (Anthropic, Responses)."""
    out = []
    for block in body.split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data is not None:
            out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out
