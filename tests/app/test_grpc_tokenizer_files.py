"""vLLM's gRPC ``GetTokenizer`` (issue 24) in-process: which directory's files are sent
(:func:`server.grpc_engine.tokenizer_dir`) and how they are streamed (a zip in
``server.grpc_support.TOKENIZER_CHUNK``-byte chunks, the SHA-256 of the whole zip on the last one
only).

The servicer is called directly with the in-process simulator; the real ``--grpc`` server
sends a hub-cache tokenizer end to end in ``tests/server/test_grpc_server.py`` (one server
with a real tokenizer instead of two: each imports transformers, seconds of CPU).
"""
from __future__ import annotations

import hashlib
import io
import os
import zipfile
from types import SimpleNamespace

import pytest

pytest.importorskip("grpc")
pytest.importorskip("smg_grpc_proto")

from server import grpc_engine, grpc_support  # noqa: E402
from support.tokenizer_hub import MODEL, REV  # noqa: E402


class Aborted(Exception):
    pass


class Context:
    """The part of ``grpc.ServicerContext`` GetTokenizer uses."""

    def abort(self, code, details):
        raise Aborted(code, details)


def snapshot(hub: str) -> str:
    return os.path.join(hub, "hub", "models--org--tiny", "snapshots", REV)


def cfg(**kw):
    return SimpleNamespace(**{"tokenizer": "", "model": "test-model", "tokenizers_cache_dir": "", **kw})


def test_tokenizer_dir_is_the_directory_or_the_hub_cache_snapshot(hub):
    snap = snapshot(hub)
    cache = os.path.join(hub, "hub")
    assert grpc_engine.tokenizer_dir(cfg(tokenizer=snap)) == snap
    assert grpc_engine.tokenizer_dir(cfg(model=snap)) == snap
    assert grpc_engine.tokenizer_dir(cfg(model=MODEL, tokenizers_cache_dir=cache)) == snap
    assert grpc_engine.tokenizer_dir(cfg(model="org/not-cached", tokenizers_cache_dir=cache)) is None
    assert grpc_engine.tokenizer_dir(cfg(tokenizer=os.path.join(snap, "tokenizer.json"))) is None
    assert grpc_engine.tokenizer_dir(cfg()) is None


def test_get_tokenizer_streams_the_files_in_chunks(app_client, hub, monkeypatch):
    snap = snapshot(hub)
    sim = app_client("--tokenizer", snap).sim
    monkeypatch.setattr(grpc_support, "TOKENIZER_CHUNK", 1000)      # several chunks from a small zip
    chunks = list(grpc_engine.make_servicer(sim).GetTokenizer(None, Context()))
    data = b"".join(c.data for c in chunks)
    assert len(chunks) == -(-len(data) // 1000) and len(chunks) > 1
    assert [len(c.data) for c in chunks[:-1]] == [1000] * (len(chunks) - 1)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest() and all(not c.sha256 for c in chunks[:-1])
    z = zipfile.ZipFile(io.BytesIO(data))
    assert sorted(z.namelist()) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    with open(os.path.join(snap, "tokenizer.json"), "rb") as fh:
        assert z.read("tokenizer.json") == fh.read()


def test_get_tokenizer_without_files_is_failed_precondition(api):
    import grpc
    with pytest.raises(Aborted) as e:
        list(grpc_engine.make_servicer(api.sim).GetTokenizer(None, Context()))
    assert e.value.args[0] == grpc.StatusCode.FAILED_PRECONDITION
