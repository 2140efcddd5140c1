"""vLLM 0.34's multi-port supervisor (``--data-parallel-multi-port-external-lb``,
``vllm/entrypoints/launchers/dp_supervisor.py``): a node's ``--data-parallel-size-local`` ranks,
each an API server on ``--port`` + its local rank (:mod:`server.ranks` starts them, as with
``--data-parallel-external-lb``), and on ``--data-parallel-supervisor-port`` (9256) the
supervisor's own probes, ``GET /health``, ``/ready`` and ``/readyz``: an empty 200 while every
rank answers its ``/health`` with 200, else an empty 503 (vLLM's supervisor probes them in the
background; here a probe asks each rank when it is called, within :data:`PROBE_TIMEOUT_S`).

Rank 0 runs in the supervisor's process here (vLLM: every rank a child of the supervisor), so
:class:`Supervised` serves both: a request that arrived on the supervisor's port gets the
probes, any other the rank's own app.
"""
from __future__ import annotations

import http.client

PROBE_TIMEOUT_S = 1.0        # seconds a rank's /health may take before the probe counts it down
PROBES = ("/health", "/ready", "/readyz")
_NOT_FOUND = b'{"detail":"Not Found"}'
_NOT_ALLOWED = b'{"detail":"Method Not Allowed"}'


def rank_healthy(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the rank on ``host:port`` answers ``GET /health`` with 200 within ``timeout``."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class Supervised:
    """``app`` (rank 0's) with the supervisor's probes on ``port``.  ``ranks()``: ``[(port,
    process or None)]`` of every local rank (rank 0's process None: this one), read when a probe
    comes; ``lifecycle``: rank 0's readiness (a draining server is not ready)."""

    def __init__(self, app, port: int, host: str, ranks, lifecycle=None):
        self.app, self.port, self.ranks, self.lifecycle = app, str(port), ranks, lifecycle
        self.host = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
        self.extensions = getattr(app, "extensions", {})      # the worker finds the simulator there

    def ready(self) -> bool:
        if self.lifecycle is not None and getattr(self.lifecycle, "draining", False):
            return False
        for port, proc in self.ranks():
            if proc is not None and proc.poll() is not None:
                return False
            if not rank_healthy(self.host, port):
                return False
        return True

    def __call__(self, environ, start_response):
        if environ.get("SERVER_PORT") != self.port:
            return self.app(environ, start_response)
        path = environ.get("PATH_INFO", "")
        if path not in PROBES:
            start_response("404 Not Found", [("Content-Type", "application/json"),
                                             ("Content-Length", str(len(_NOT_FOUND)))])
            return [_NOT_FOUND]
        if environ.get("REQUEST_METHOD") != "GET":
            start_response("405 Method Not Allowed", [("Content-Type", "application/json"), ("Allow", "GET"),
                                                      ("Content-Length", str(len(_NOT_ALLOWED)))])
            return [_NOT_ALLOWED]
        status = "200 OK" if self.ready() else "503 Service Unavailable"
        start_response(status, [("Content-Length", "0")])
        return [b""]
