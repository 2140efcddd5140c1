"""Test fixtures: real simulator processes (``python app.py``) on free ports.

``sim_server(*flags, env=None)`` starts (or reuses, keyed by flags and env) a server and
returns its base URL; servers live until the end of the test session.  ``server`` is the
default one (``--model test-model``).  Helpers parse SSE bodies the way clients do.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


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
        if model and "--model" not in flags:
            args += ["--model", model]
        args += list(flags)
        penv = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE", "POD_IP")}
        penv.update(env or {})
        log = open(ROOT / ".pytest_cache" / f"server-{port}.log", "wb") if (ROOT / ".pytest_cache").is_dir() \
            else subprocess.DEVNULL
        proc = subprocess.Popen(args, cwd=ROOT, env=penv, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {args}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            proc.kill()
            raise RuntimeError("server did not start")
        self.procs[key] = (proc, base)
        return base

    def stop_all(self):
        for proc, _ in self.procs.values():
            proc.terminate()
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="session")
def _pool():
    (ROOT / ".pytest_cache").mkdir(exist_ok=True)
    pool = ServerPool()
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session")
def sim_server(_pool):
    """Factory: ``sim_server("--mode", "echo", env={...})`` -> base URL."""
    return _pool.start


@pytest.fixture(scope="session")
def server(sim_server) -> str:
    return sim_server()


@pytest.fixture(scope="session")
def echo_server(sim_server) -> str:
    return sim_server("--mode", "echo")


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
