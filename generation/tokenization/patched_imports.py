"""Imports after gevent's monkey-patching (the server's worker): what heavy libraries need put
back while they are imported."""
from __future__ import annotations

import contextlib
import sys


def gevent_patched() -> bool:
    """Whether gevent has patched ``select`` in this process."""
    if "gevent.monkey" not in sys.modules:
        return False
    return sys.modules["gevent.monkey"].is_module_patched("select")


@contextlib.contextmanager
def epoll_for_import():
    """``select.epoll`` put back for the duration of an import when gevent's patching removed it:
    huggingface_hub (under transformers) imports httpx, whose httpcore imports trio when it is
    installed, and trio reads ``select.epoll`` at import time (its I/O manager's factory); nothing
    here runs a trio loop.  A no-op in an unpatched process."""
    import select
    if hasattr(select, "epoll") or not gevent_patched():
        yield
        return
    from gevent.monkey import get_original
    try:
        select.epoll = get_original("select", "epoll")
    except AttributeError:              # a platform without epoll: nothing to put back
        yield
        return
    try:
        yield
    finally:
        del select.epoll
