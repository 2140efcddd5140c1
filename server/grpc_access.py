"""The gRPC API's access log: one line per RPC, as the HTTP access log has one per request
(``PEER "gRPC /package.Service/Method" STATUS DURATIONms``), on the ``vllm_sim.access`` logger
at INFO, off with ``--disable-log-requests``.  A ``grpc.ServerInterceptor`` wraps each method's
behaviour; a streaming RPC's line is written when its stream ends (finished, aborted or
cancelled by the client)."""
from __future__ import annotations

import logging
import time

import grpc

access_log = logging.getLogger("vllm_sim.access")


class AccessLogInterceptor(grpc.ServerInterceptor):
    """Logs every RPC the server runs: the peer, the method, the status code's name (``OK``,
    ``INVALID_ARGUMENT``, ...; ``UNKNOWN`` for an exception the servicer did not map, ``CANCELLED``
    for a stream its client closed) and the milliseconds it took."""

    def __init__(self, logger: logging.Logger = access_log):
        self.log = logger

    def _line(self, context, method: str, code: str, t0: float) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        try:
            peer = context.peer()
        except Exception:       # noqa: BLE001 - a closed call has no peer any more
            peer = "-"
        self.log.info('%s "gRPC %s" %s %dms', peer, method, code, (time.monotonic() - t0) * 1000)

    @staticmethod
    def _code(context, failed: bool) -> str:
        code = None
        try:
            code = context.code()
        except Exception:       # noqa: BLE001 - older grpcio: no code() on the context
            pass
        if isinstance(code, grpc.StatusCode):
            return code.name
        return "UNKNOWN" if failed else "OK"

    def _unary(self, fn, method: str):
        def behaviour(request, context):
            t0, failed = time.monotonic(), True
            try:
                out = fn(request, context)
                failed = False
                return out
            finally:
                self._line(context, method, self._code(context, failed), t0)
        return behaviour

    def _stream(self, fn, method: str):
        def behaviour(request, context):
            t0, code = time.monotonic(), None
            try:
                yield from fn(request, context)
                code = self._code(context, False)
            except GeneratorExit:            # the client went away
                code = "CANCELLED"
                raise
            except BaseException:
                code = self._code(context, True)
                raise
            finally:
                self._line(context, method, code or "UNKNOWN", t0)
        return behaviour

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or self.log.disabled:
            return handler
        method = handler_call_details.method
        kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary, method), **kw)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(self._stream(handler.unary_stream, method), **kw)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(self._unary(handler.stream_unary, method), **kw)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(self._stream(handler.stream_stream, method), **kw)
        return handler


def access_interceptors(config) -> list:
    """The interceptors of the gRPC server: the access log unless ``--disable-log-requests``."""
    if getattr(config, "disable_log_requests", False):
        return []
    return [AccessLogInterceptor()]
