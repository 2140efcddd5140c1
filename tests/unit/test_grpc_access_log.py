"""The gRPC API's access log (issue 30: gRPC calls were not in the access log): the interceptor
logs one line per RPC, unary and streamed, with the status code's name and the duration."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import grpc
import pytest

from server.grpc_access import AccessLogInterceptor, access_interceptors


class Context:
    def __init__(self, code=None):
        self._code = code

    def peer(self):
        return "ipv4:10.1.2.3:5555"

    def code(self):
        return self._code


def wrapped(handler, method="/vllm.grpc.engine.VllmEngine/Generate"):
    return AccessLogInterceptor().intercept_service(lambda details: handler, SimpleNamespace(method=method))


def lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "vllm_sim.access"]


def test_unary_rpcs_are_logged_with_their_status(caplog):
    h = wrapped(grpc.unary_unary_rpc_method_handler(lambda req, ctx: req * 2), "/vllm.grpc.engine.VllmEngine/Abort")
    with caplog.at_level(logging.INFO, logger="vllm_sim.access"):
        assert h.unary_unary(21, Context()) == 42

        def refuse(req, ctx):
            raise RuntimeError("aborted")
        h2 = wrapped(grpc.unary_unary_rpc_method_handler(refuse))
        with pytest.raises(RuntimeError):
            h2.unary_unary(1, Context(grpc.StatusCode.INVALID_ARGUMENT))
        with pytest.raises(RuntimeError):
            h2.unary_unary(1, Context())
    got = lines(caplog)
    assert [g.rsplit(" ", 1)[0] for g in got] == [
        'ipv4:10.1.2.3:5555 "gRPC /vllm.grpc.engine.VllmEngine/Abort" OK',
        'ipv4:10.1.2.3:5555 "gRPC /vllm.grpc.engine.VllmEngine/Generate" INVALID_ARGUMENT',
        'ipv4:10.1.2.3:5555 "gRPC /vllm.grpc.engine.VllmEngine/Generate" UNKNOWN']
    assert all(g.endswith("ms") and g.rsplit(" ", 1)[1][:-2].isdigit() for g in got)


def test_streams_are_logged_when_they_end(caplog):
    h = wrapped(grpc.unary_stream_rpc_method_handler(lambda req, ctx: iter(range(req))))
    with caplog.at_level(logging.INFO, logger="vllm_sim.access"):
        stream = h.unary_stream(3, Context())
        assert lines(caplog) == []                       # nothing until the stream ends
        assert list(stream) == [0, 1, 2]
        cut = h.unary_stream(5, Context())
        next(cut)
        cut.close()                                      # the client went away
    assert [g.rsplit(" ", 1)[0].rsplit(" ", 1)[1] for g in lines(caplog)] == ["OK", "CANCELLED"]


def test_disable_log_requests_turns_it_off():
    assert access_interceptors(SimpleNamespace(disable_log_requests=True)) == []
    assert len(access_interceptors(SimpleNamespace(disable_log_requests=False))) == 1
