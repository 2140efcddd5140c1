"""The container's HEALTHCHECK: ``GET /health`` on the port the simulator actually listens on.

The simulator is the container's main process, so its command line (``/proc/1/cmdline``; with
``docker run --init`` PID 1 is docker-init and the simulator's arguments follow it) gives
``--port`` (default 8000), ``--host`` (a wildcard address is probed on loopback) and whether it
serves HTTPS (``--ssl-certfile`` / ``--self-signed-certs``; the certificate is not verified,
only liveness is checked).  ``docker run IMAGE MODEL --port 9000`` is therefore followed without
anything else to change.  A port set only in a ``--config`` file is not seen: pass ``--port``.
A fleet (``--fleet-size``) is probed on its control API (``--fleet-control-port``), which
answers while the process serves, else on pod 0 (at ``127.1.0.1`` with ``--fleet-addresses
loopback``).

Exit status 0 when ``/health`` answers 200 within 2 s, 1 otherwise (Docker's contract).
Standard library only: it runs every few seconds beside the simulator.
"""
from __future__ import annotations

import ssl
import sys
import urllib.request

WILDCARD = ("", "0.0.0.0", "::", "[::]")
FALSE = ("false", "0", "no", "off")
TRUE = ("true", "1", "yes", "on")


def _args(path: str = "/proc/1/cmdline") -> list[str]:
    try:
        with open(path, "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _flag(args: list[str], name: str) -> str | None:
    """The value of the last ``--name V`` / ``--name=V`` in ``args`` (argparse's last-wins)."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def _bool_flag(args: list[str], name: str) -> bool:
    """``--name`` / ``--name V`` / ``--name=V`` / ``--no-name``, the last one wins."""
    value = False
    for i, a in enumerate(args):
        if a == name:
            nxt = args[i + 1].lower() if i + 1 < len(args) else ""
            value = nxt not in FALSE if nxt in FALSE + TRUE else True
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1].lower() not in FALSE
        elif a == "--no-" + name[2:]:
            value = False
    return value


def health_url(args: list[str]) -> str:
    """``scheme://host:port/health`` for a simulator started with ``args``."""
    port = _flag(args, "--port") or "8000"
    host = _flag(args, "--host") or ""
    host = "127.0.0.1" if host in WILDCARD else host
    if (_flag(args, "--fleet-size") or "0") != "0":
        control = _flag(args, "--fleet-control-port") or "0"
        if control != "0":
            port = control
        elif _flag(args, "--fleet-addresses") == "loopback":
            host = "127.1.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    tls = bool(_flag(args, "--ssl-certfile")) or _bool_flag(args, "--self-signed-certs")
    return f"{'https' if tls else 'http'}://{host}:{port}/health"


def main(cmdline: str = "/proc/1/cmdline") -> int:
    ctx = ssl._create_unverified_context()      # liveness only; self-signed certs are expected
    try:
        with urllib.request.urlopen(health_url(_args(cmdline)), timeout=2, context=ctx) as r:
            return 0 if r.status == 200 else 1
    except Exception:
        return 1


if __name__ == "__main__":
    sys.exit(main())
