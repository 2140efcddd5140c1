"""Raw-socket helpers of the tests that speak HTTP or TLS below the clients: one request on a
fresh connection, read to EOF; and a real ``--self-signed-certs`` server."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time

import httpx

from support import ROOT, free_port


def raw_request(base: str, request: bytes, half_close: bool = False) -> bytes:
    """Send ``request`` (bytes as they go on the wire) to ``base`` (``http://host:port``) on a
    new connection (then shut its write side with ``half_close``, as ``nc -N`` does) and return
    everything the server sends until it closes."""
    host, port = base.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    return data


@contextlib.contextmanager
def self_signed_server():
    """``python app.py --self-signed-certs --timeout-keep-alive 1`` on a free port, once its
    ``/health`` answers over TLS: yields ``(process, "https://127.0.0.1:PORT")``; killed after."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                             "--self-signed-certs", "--timeout-keep-alive", "1", "--disable-log-requests"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(base + "/health", verify=False, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield proc, base
    finally:
        proc.kill()
        proc.wait()
