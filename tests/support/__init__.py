"""Helpers every tier imports (``from support import sse_events``): no fixtures here.

The fixtures that use them live in ``tests/conftest.py``.  ``tests/`` is on ``sys.path`` (the
root conftest puts it there), so this package imports as ``support`` from any tier.

``make_app(*flags)``      a Flask app as ``python app.py [flags]`` would serve it
``SimClient``             ``httpx.Client`` on an in-process app or a real server
``ServerPool``            ``python app.py`` processes, started on free ports
``free_port(span)``       a free port (``span`` consecutive ones for data-parallel ranks)
``ROOT``                  the repository root (``app.py``, ``README.md``, ``deploy/``)
``scrape``, ``metric``, ``metric_values``, ``value``   ``/metrics`` samples
``sse_events``, ``named_events``            SSE bodies decoded
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
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


def value(samples: dict, name: str, **labels) -> float:
    """The sample with exactly these labels; KeyError if the series does not exist (a renamed
    metric or bucket must fail the test, not read as 0)."""
    labels.setdefault("model_name", "test-model")
    labels.setdefault("engine", "0")          # every vllm:* series carries the data-parallel rank
    return samples[(name, frozenset(labels.items()))]


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


def streamed(client, path: str, body: dict) -> list:
    """The ``data:`` payloads of a streamed ``POST path`` (``model`` test-model, ``stream``
    true, then ``body``), checked to answer 200 and end with ``[DONE]``, which is left out."""
    r = client.post(path, json={"model": "test-model", "stream": True, **body})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    return events[:-1]


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


def error_type_400(message: str) -> str:
    """The ``type`` of a 400 with ``message`` in vLLM 0.34's envelope: "Bad Request" for what its
    validation handler answers (pydantic's "N validation error(s):" and the body's JSON), else
    "BadRequestError" (raised while serving: ``create_error_response``)."""
    import re
    if re.match(r"\d+ validation errors?:", message) or message.startswith((
            "Failed to parse the request body as JSON", "Request body must be a JSON object.",
            "Request body is empty")):
        return "Bad Request"
    return "BadRequestError"
