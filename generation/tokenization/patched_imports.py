"""Code that runs after gevent's monkey-patching (the server's worker): what heavy libraries need
put back while they are imported, and the native ``_thread`` primitives for what native threads
share (a lock made after the patching is a gevent lock, which native threads cannot share)."""
from __future__ import annotations

import contextlib
import sys


def native(name: str):
    """``_thread.<name>`` as it was before gevent's monkey-patching (the same one unpatched):
    ``native("allocate_lock")()`` is a lock native threads can share, ``native("get_ident")()``
    this thread's id (the patched one gives a greenlet's)."""
    try:
        from gevent.monkey import get_original
    except ImportError:         # no gevent: _thread is native
        import _thread
        return getattr(_thread, name)
    return get_original("_thread", name)


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
