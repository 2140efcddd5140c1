"""server/worker.py's answer to requests gunicorn cannot parse: which of gunicorn's errors are the
client's bytes (uvicorn's plain 400, as vLLM answers them) and which stay gunicorn's own answer.
Over a real server: tests/server/test_connection_floods.py."""
from __future__ import annotations

from gunicorn.http import errors

from server.worker import unparsable_request


def test_the_clients_unparsable_bytes_and_nothing_else():
    client_side = [errors.InvalidRequestLine("x"), errors.InvalidRequestMethod("G@T"),
                   errors.InvalidHTTPVersion("9.9"), errors.InvalidHeader("x"), errors.InvalidHeaderName("x"),
                   errors.LimitRequestLine(9000, 4094), errors.LimitRequestHeaders("too many"),
                   errors.ObsoleteFolding("x"), errors.UnsupportedTransferCoding("xchunked"),
                   errors.InvalidChunkSize("ZZ"), errors.ChunkMissingTerminator("x")]
    assert all(unparsable_request(e) for e in client_side)
    # the application's response header (gunicorn's 500), an Expect it cannot meet (417), a
    # forbidden proxy (403), anything else (the app's error: 500)
    others = [errors.InvalidResponseHeader("x"), errors.InvalidResponseHeaderName("x"),
              errors.ExpectationFailed("x"), errors.ForbiddenProxyRequest("1.2.3.4"), ValueError("x")]
    assert not any(unparsable_request(e) for e in others)
