"""A real ``python app.py`` that cannot start says why in one line and exits non-zero, with no
traceback: an unreachable ``--dataset-url``, invalid ``--fake-metrics``, a bad flag value, a
missing ``--tokenizer`` file (before binding its port), a KV-event socket that cannot be bound;
and ``--help`` works."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from support import ROOT, free_port


@pytest.mark.server
def test_start_up_fails_clearly_when_unreachable(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", "1", "--dataset-url", "http://127.0.0.1:9/x",
                        "--dataset-path", str(tmp_path / "x.sqlite3")], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "error: dataset download failed: http://127.0.0.1:9/x" in p.stderr


@pytest.mark.server
def test_startup_rejects_invalid_fake_metrics_process():
    """tests/app/test_fake_metrics.py's start-up validation through a real ``python app.py``
    process: its exit status and stderr."""
    fake, message = {"running-requests": "squarewave:0:8:170"}, \
        'unknown format in fake metric generation function: time: missing unit in duration "170"'
    p = subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", str(free_port()), "--host", "127.0.0.1",
                        "--fake-metrics", json.dumps(fake)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


@pytest.mark.server
def test_cli_help_and_bad_flag():
    import subprocess
    import sys
    from support import ROOT
    r = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--max-num-seqs" in r.stdout and "--time-to-first-token" in r.stdout
    r = subprocess.run([sys.executable, str(ROOT / "app.py"), "--max-num-seqs", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == ["error: --max-num-seqs: max num seqs cannot be less than 1"]


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.server
def test_bad_explicit_tokenizer_path_exits_before_binding(tmp_path):
    port = _free_port()
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--tokenizer",
                        str(tmp_path / "missing" / "tokenizer.json")], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr and len([line for line in err if line.startswith("error:")]) == 1
    assert "missing" in p.stderr
    with socket.socket() as s:                          # nothing listened there
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert time.monotonic() - t0 < 30


@pytest.mark.server
@pytest.mark.parametrize("mode", [(), ("--grpc",)])
def test_a_kv_event_socket_in_use_stops_the_start(mode):
    """vLLM's engine does not start when its KV-event publisher cannot bind its endpoint; the
    server said so in a traceback and served without events."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        busy = holder.getsockname()[1]
        p = subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", str(free_port()), "--host", "127.0.0.1",
                            "--enable-kvcache", "--zmq-endpoint", f"tcp://*:{busy}", *mode],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"cannot bind the KV-event publisher to tcp://*:{busy}" in p.stderr
