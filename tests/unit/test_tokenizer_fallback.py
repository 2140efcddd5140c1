"""``--model org/name`` when the hub cannot help (user finding: ~50 s and ~96 retry warnings with
no network): the local cache is read first, the hub is asked once without retries, and the
fallback to the simulated tokenizer is one log line.  No network: ``HF_ENDPOINT`` points at a
closed local port, or at a local server answering like the hub for an unknown repository."""
from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import time

import pytest

from support.tokenizer_hub import MODEL, make_hub

from generation.config.cli import load_config
from generation.tokenization.tokenizer_loading import load_tokenizer

NOISY = ("huggingface_hub", "httpx", "httpcore", "transformers")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def hub_at(monkeypatch):
    """Point huggingface_hub at ``endpoint`` with HF_HUB_OFFLINE unset; restores what the
    loader sets (timeout defaults) afterwards."""
    import huggingface_hub.constants as constants
    saved_env = {v: os.environ.get(v) for v in ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")}
    saved_const = {v: getattr(constants, v) for v in saved_env}
    for v in saved_env:
        os.environ.pop(v, None)

    def point(endpoint: str):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        # constants are read at import: another test may have imported the hub already
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield point
    for v, value in saved_env.items():
        os.environ.pop(v, None) if value is None else os.environ.__setitem__(v, value)
        setattr(constants, v, saved_const[v])


def _load(tmp_path, model="my-org/my-model"):
    cfg = load_config(["--model", model, "--tokenizers-cache-dir", str(tmp_path / "hub")])
    t0 = time.monotonic()
    tok = load_tokenizer(cfg)
    return tok, time.monotonic() - t0


def test_unreachable_hub_falls_back_fast_with_one_line(hub_at, tmp_path, caplog, capfd):
    hub_at(f"http://127.0.0.1:{_closed_port()}")
    with caplog.at_level(logging.DEBUG):
        tok, took = _load(tmp_path)
    assert tok.name == "simulated"
    assert took < 10            # was ~50 s (5 backoff retries per file); ~0.5 s here
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "vllm_sim"
    msg = warnings[0].getMessage()
    assert "my-org/my-model" in msg and "Connection refused" in msg and "simulated tokenizer" in msg
    assert "HF_HUB_OFFLINE=1" in msg and "--force-dummy-tokenizer" in msg
    assert not [r for r in caplog.records if r.name.split(".")[0] in NOISY]
    err = capfd.readouterr().err
    assert "Retrying" not in err and "thrown while requesting" not in err
    # bounded defaults were set for huggingface_hub, as the user had none
    assert os.environ["HF_HUB_ETAG_TIMEOUT"] == "3" and os.environ["HF_HUB_DOWNLOAD_TIMEOUT"] == "10"


def test_user_timeouts_are_kept(hub_at, tmp_path, monkeypatch):
    hub_at(f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "7")
    tok, _ = _load(tmp_path)
    assert tok.name == "simulated" and os.environ["HF_HUB_ETAG_TIMEOUT"] == "7"


def test_cached_tokenizer_is_used_without_the_hub(hub_at, tmp_path, caplog):
    make_hub(str(tmp_path))
    hub_at(f"http://127.0.0.1:{_closed_port()}")
    with caplog.at_level(logging.WARNING):
        tok, _ = _load(tmp_path, MODEL)
    assert tok.name == "hf"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


class _UnknownRepo(http.server.BaseHTTPRequestHandler):
    """Answers every request as the hub does for a repository that does not exist."""
    def do_HEAD(self):
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_unknown_repo_falls_back_with_one_line(hub_at, tmp_path, caplog):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _UnknownRepo)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # quick shutdown()
    try:
        hub_at(f"http://127.0.0.1:{server.server_address[1]}")
        with caplog.at_level(logging.WARNING):
            tok, took = _load(tmp_path, "my-org/unknown")
    finally:
        server.shutdown()
        server.server_close()
    assert tok.name == "simulated" and took < 10
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "RepositoryNotFoundError" in warning.getMessage()
