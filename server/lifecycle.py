"""The lifecycle of a server process, as vLLM / uvicorn's graceful shutdown (issue 10).

SIGTERM or Ctrl-C -> ``/health/ready`` answers 503, the listening socket is closed, idle
keep-alive connections are closed, in-flight requests (and requests that have arrived on open
connections, unread yet) run on for ``--shutdown-timeout`` seconds (:func:`shutdown_grace`);
what still runs then ends with :class:`ServerShuttingDown`: an in-band error event and
``[DONE]`` (streams) or a 503 (others); exit code 0, no traceback.  A second Ctrl-C (or SIGQUIT)
skips the grace.  The worker that carries it out is :class:`server.worker.SimWorker`.
"""
from __future__ import annotations

import socket

from generation.errors import APIError


class ServerShuttingDown(APIError):
    """Raised into requests still running when the shutdown grace period is over: a stream
    renders it as an in-band error event followed by ``[DONE]``, other requests as a 503."""

    def __init__(self, message: str = "The server is shutting down; the request was not completed."):
        super().__init__(message, 503)



def shutdown_grace(config) -> float:
    try:
        return max(0.0, float(getattr(config, "shutdown_timeout", 30.0)))
    except (TypeError, ValueError):
        return 30.0



def connection_socket(greenlet):
    """The client socket a StreamServer greenlet serves (gevent spawns
    ``_handle_and_close_when_done(handle, close, (socket, address))``), or None."""
    for arg in getattr(greenlet, "args", ()):
        if hasattr(arg, "recv"):
            return arg
        if isinstance(arg, tuple) and arg and hasattr(arg[0], "recv"):
            return arg[0]
    return None


def has_bytes(sock) -> bool:
    """Whether a connection's socket holds unread bytes (a request that has arrived) or its
    peer's close; False when it cannot tell."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True
    except (OSError, AttributeError, TypeError, ValueError):      # nothing there (EAGAIN), or not a socket
        return False
