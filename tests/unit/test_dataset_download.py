"""``--dataset-url`` (issue 9): downloaded once to ``--dataset-path``, resuming a partial file
with an HTTP Range request, a bad status being one clear line; the dataset tool reports
what it kept and dropped.  A local ``http.server`` with Range support plays the remote host."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from data.download import DownloadError, download
from support import ROOT

BLOB = bytes(range(256)) * 512          # 128 KiB


class Host:
    def __init__(self):
        self.requests = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                host.requests.append((self.path, self.headers.get("Range")))
                if self.path != "/data.sqlite3":
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(BLOB) - 1}/{len(BLOB)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(BLOB) - start))
                self.end_headers()
                self.wfile.write(BLOB[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()  # quick shutdown()


@pytest.fixture(scope="module")
def host():
    h = Host()
    yield h
    h.server.shutdown()
    h.server.server_close()


def test_download_once(host, tmp_path):
    path = tmp_path / "sub" / "d.sqlite3"
    download(host.url + "/data.sqlite3", str(path), progress=False)
    assert path.read_bytes() == BLOB and not os.path.exists(str(path) + ".part")


def test_partial_file_is_resumed_with_range(host, tmp_path):
    path = tmp_path / "d.sqlite3"
    (tmp_path / "d.sqlite3.part").write_bytes(BLOB[:1000])
    host.requests.clear()
    download(host.url + "/data.sqlite3", str(path), progress=False)
    assert host.requests == [("/data.sqlite3", "bytes=1000-")]
    assert path.read_bytes() == BLOB


def test_bad_status_is_one_line(host, tmp_path):
    with pytest.raises(DownloadError, match="dataset download bad status: 404"):
        download(host.url + "/missing", str(tmp_path / "x.sqlite3"), progress=False)


def test_dataset_tool_reports_kept_and_dropped(tmp_path):
    conv = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
            {"conversations": [{"from": "gpt", "value": "oops"}]}, 5,
            {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]
    src = tmp_path / "c.json"
    src.write_text(json.dumps(conv))
    out = tmp_path / "o.sqlite3"
    p = subprocess.run([sys.executable, "-m", "data.dataset", "--input-file", str(src), "--output-path", str(out),
                        "--max-records", "3"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (f"kept 2 records from 1 of 4 conversations in {out} (0 cut short at a turn with "
                                f"other roles); dropped conversations: 1 not a conversation, 1 no human/gpt turn, "
                                f"1 beyond --max-records 3")
    assert "conversations: 100%" in p.stderr                     # tqdm progress
    h = subprocess.run([sys.executable, "-m", "data.dataset", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert "--max-records" in h.stdout
