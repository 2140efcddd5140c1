"""``--dataset-url``: download the SQLite dataset once to ``--dataset-path`` (engine.md 9.2).

Runs at start-up, before the port is bound.  The file is fetched into ``<path>.part`` with a
tqdm progress bar on stderr and renamed when complete, so an interrupted download is resumed
next time (HTTP ``Range: bytes=<size>-``; a server that ignores it starts over).  An existing
``--dataset-path`` is never downloaded again.  ``HF_TOKEN`` is sent as a bearer token to
huggingface.co URLs (gated datasets).  Any failure raises :class:`DownloadError` with one line.
"""
from __future__ import annotations

import os
import urllib.error
import urllib.request

CHUNK = 1 << 16


class DownloadError(Exception):
    """The dataset could not be downloaded (one-line message)."""


def ensure_dataset(config) -> None:
    """Download ``config.dataset_url`` to ``config.dataset_path`` unless the file exists."""
    url = getattr(config, "dataset_url", "") or ""
    path = getattr(config, "dataset_path", "") or ""
    if not url:
        return
    if not path:
        raise DownloadError("dataset-path is required when dataset-url is set")
    if os.path.exists(path):
        return
    download(url, path)


def download(url: str, path: str, timeout: float = 30.0, progress: bool = True) -> None:
    """Fetch ``url`` to ``path`` (resuming ``path + '.part'``).  Raises DownloadError."""
    from tqdm import tqdm

    part = path + ".part"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    headers = {"User-Agent": "vllm-sim"}
    if have:
        headers["Range"] = f"bytes={have}-"
    token = os.environ.get("HF_TOKEN")
    if token and "huggingface.co" in url:
        headers["Authorization"] = f"Bearer {token}"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:          # the partial file is already complete
            os.replace(part, path)
            return
        raise DownloadError(f"dataset download bad status: {e.code} ({url})") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DownloadError(f"dataset download failed: {url}: {getattr(e, 'reason', e)}") from None
    with resp:
        if resp.status == 200:
            have = 0                          # Range ignored: start over
        elif resp.status != 206:
            raise DownloadError(f"dataset download bad status: {resp.status} ({url})")
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        try:
            with open(part, "ab" if have else "wb") as fh, \
                    tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                         desc=f"dataset {os.path.basename(path)}", disable=not progress) as bar:
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    fh.write(chunk)
                    bar.update(len(chunk))
        except OSError as e:
            raise DownloadError(f"dataset download failed: {url}: {e}") from None
    size = os.path.getsize(part)
    if total is not None and size < total:
        raise DownloadError(f"dataset download incomplete: {size} of {total} bytes ({url}); "
                            "start again to resume")
    if size == 0:
        os.remove(part)
        raise DownloadError(f"dataset download failed: empty body ({url})")
    os.replace(part, path)
