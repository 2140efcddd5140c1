"""Which thread this is: the tokenizer's worker thread (:func:`generation.tokenization.tokenizer.off_hub`
marks it while it runs a job) or another.  A native thread that is not the hub's cannot use gevent's
thread pools (:func:`generation.tokenization.chat_template.render_bounded` asks)."""
from __future__ import annotations

import threading

WORKER = threading.local()      # .busy: this thread is running an off_hub job


def in_worker() -> bool:
    """Whether this thread is running an ``off_hub`` job (a native thread, not the hub's)."""
    return getattr(WORKER, "busy", False)
