"""The access log's vLLM 0.34 switches: ``--disable-access-log-for-endpoints`` drops the lines of
those paths (vLLM's ``UvicornAccessLogFilter``: the path matched exactly, its query ignored),
``--disable-uvicorn-access-log`` all of them; through gunicorn's logger as the server sets it up
(the processes: tests/server/test_process_lifecycle.py)."""
from __future__ import annotations

import io
import logging
import sys
from datetime import timedelta
from types import SimpleNamespace

import pytest


def access_lines(*flags, fmt=None) -> list[str]:
    from gunicorn.config import Config

    from generation.config.cli import load_config
    from server.serve import apply_server_settings
    cfg = load_config(list(flags), env={})
    g = Config()
    apply_server_settings(g.set, cfg, None)
    if fmt:
        g.set("access_log_format", fmt)
    out = io.StringIO()
    saved, sys.stderr = sys.stderr, out          # the access log's handler writes to stderr
    try:
        glog = g.logger_class(g)
        for uri in ("/v1/models", "/health", "/metrics?name=x", "/health/ready", "/ping"):
            path = uri.split("?")[0]
            environ = {"REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": "GET", "RAW_URI": uri, "PATH_INFO": path,
                       "QUERY_STRING": uri.partition("?")[2], "SERVER_PROTOCOL": "HTTP/1.1"}
            resp = SimpleNamespace(status="200 OK", sent=2, headers=[], response_length=2)
            req = SimpleNamespace(headers=[], uri=uri, path=path, query=uri.partition("?")[2], method="GET",
                                  version=(1, 1))
            glog.access(resp, req, environ, timedelta(milliseconds=3))
    finally:
        sys.stderr = saved
        for h in logging.getLogger("gunicorn.access").handlers[:]:
            logging.getLogger("gunicorn.access").removeHandler(h)
    return [line for line in out.getvalue().splitlines() if "gunicorn.access" in line]


def test_every_request_is_logged_by_default():
    assert len(access_lines()) == 5


@pytest.mark.parametrize("fmt", [None, '%(h)s "%(r)s" %(s)s'])       # the simulator's line, or gunicorn's atoms
def test_disable_access_log_for_endpoints_drops_those_paths(fmt):
    lines = access_lines("--disable-access-log-for-endpoints", " /health, /metrics ,", fmt=fmt)
    assert [line.split('"')[1] for line in lines] == ["GET /v1/models HTTP/1.1", "GET /health/ready HTTP/1.1",
                                                      "GET /ping HTTP/1.1"]


def test_disable_uvicorn_access_log_drops_every_line():
    assert access_lines("--disable-uvicorn-access-log") == []
