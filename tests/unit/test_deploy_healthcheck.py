"""The image's HEALTHCHECK (deploy/healthcheck.py) probes the port, host and scheme the simulator
was started with, read from the main process's command line (user finding: it hard-coded 8000)."""
from __future__ import annotations

import http.server
import importlib.util
import socket
import threading

import pytest

from support import ROOT

_spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
hc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hc)


@pytest.mark.parametrize("args, url", [
    (["python", "app.py"], "http://127.0.0.1:8000/health"),
    (["python", "app.py", "org/m", "--port", "9000"], "http://127.0.0.1:9000/health"),
    (["/sbin/docker-init", "--", "python", "app.py", "--port=9001", "--host", "0.0.0.0"],
     "http://127.0.0.1:9001/health"),
    (["python", "app.py", "--host", "::1", "--port", "7000", "--port", "7001"], "http://[::1]:7001/health"),
    (["python", "app.py", "--self-signed-certs"], "https://127.0.0.1:8000/health"),
    (["python", "app.py", "--self-signed-certs", "false", "--port", "1"], "http://127.0.0.1:1/health"),
    (["python", "app.py", "--ssl-certfile", "/c.pem", "--ssl-keyfile", "/k.pem", "--host", "10.0.0.1"],
     "https://10.0.0.1:8000/health"),
    (["python", "app.py", "--fleet-size=16", "--fleet-control-port=7999"], "http://127.0.0.1:7999/health"),
    (["python", "app.py", "--fleet-size", "4", "--fleet-addresses", "loopback"], "http://127.1.0.1:8000/health"),
    (["python", "app.py", "--fleet-size", "0", "--fleet-control-port", "7999"], "http://127.0.0.1:8000/health"),
])
def test_health_url_follows_the_command_line(args, url):
    assert hc.health_url(args) == url


def test_dockerfile_uses_it():
    text = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["python", "deploy/healthcheck.py"]' in text and "COPY deploy/healthcheck.py" in text
    assert "127.0.0.1:8000" not in text


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_exit_status(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # quick shutdown()
    cmdline = tmp_path / "cmdline"
    try:
        cmdline.write_bytes(b"\0".join([b"python", b"app.py", b"--port", str(server.server_address[1]).encode()])
                            + b"\0")
        assert hc.main(str(cmdline)) == 0
    finally:
        server.shutdown()
        server.server_close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()
    cmdline.write_bytes(b"python\0app.py\0--port\0" + str(closed).encode() + b"\0")
    assert hc.main(str(cmdline)) == 1
