"""``pip install .`` gives a working ``vllm-sim`` console script (pyproject.toml): it parses
the command line and serves."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support import ROOT, free_port


# ---- packaging: pip install . and the vllm-sim console script ----------------------------------
@pytest.mark.server
def test_pip_install_gives_a_working_vllm_sim_command(tmp_path):
    pytest.importorskip("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.txt", "app.py", "wsgi.py"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("server", "blueprints", "schemas", "generation", "data"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "site"
    # no byte-compiling of every module (the server compiles what it imports), no index, no
    # version check: nothing here needs the network
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
                    "--no-index", "--disable-pip-version-check", "--target", str(target), str(src)],
                   check=True, capture_output=True, timeout=300)
    # the step model's data files travel with the code (pyproject's package-data)
    perf = target / "generation" / "engine" / "perf"
    assert (perf / "profiles" / "h100.json").is_file() and (perf / "moe_tile_configs.json").is_file()
    script = target / "bin" / "vllm-sim"
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, str(script), "serve", "m", "--port", "70000"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr.strip()) == (2, "error: --port: invalid port '70000'")
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), "serve", "installed-model", "--port", str(port),
                             "--host", "127.0.0.1", "--dtype", "auto"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        import httpx
        import time
        deadline = time.time() + 30
        while True:
            assert proc.poll() is None and time.time() < deadline, "installed server did not start"
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert [m["id"] for m in models["data"]] == ["installed-model"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "ignored vLLM flags (no meaning in the simulator): --dtype" in proc.stderr.read().decode()
