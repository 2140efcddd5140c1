"""One worker thread for CPU-bound work that would otherwise hold the gevent hub, its waiting
jobs taking turns by client (:class:`FairLane`).  From a thread the hub keeps its turn every
switch interval (5 ms), so every open stream goes on while the job runs."""
from __future__ import annotations

import contextvars
from collections import OrderedDict, deque
from time import monotonic

import gevent
from gevent.monkey import get_original

TURN = 1e-4                    # s: a hub turn that also runs due timers (``sleep(0)`` runs only
                               # ready callbacks: a 5 ms ticker saw no turn in 31 of them)
_thread_ident = get_original("_thread", "get_ident")      # the OS thread's, monkey-patched or not
_HUB_THREAD = _thread_ident()       # imported by the thread that runs the hub


def on_hub_thread() -> bool:
    """Whether the caller runs in the hub's thread (not in a lane's or another pool's)."""
    return _thread_ident() == _HUB_THREAD


def hub_turn() -> None:
    """A turn for the hub (``gevent.sleep(TURN)``) between slices of a long check; nothing in a
    worker thread, where the switch interval gives the hub its turns and a sleep would start a
    second hub."""
    if _thread_ident() == _HUB_THREAD:
        gevent.sleep(TURN)


SLICE = 0.002                  # s: the longest a paced loop holds the hub between turns


def paced(items):
    """``items``, the hub given a turn (:func:`hub_turn`) every :data:`SLICE` of the caller's
    work between them: for per-item Python over a request's lists (tools, documents, inputs,
    pairs), which a 4 MiB body makes hundreds of thousands long (750,000 Cohere documents held
    the hub 0.55 s, 30,000 Responses tools 0.4 s).  In a worker thread, the items as they are
    (the switch interval gives the hub its turns)."""
    if _thread_ident() != _HUB_THREAD:
        yield from items
        return
    turn_by = monotonic() + SLICE
    for item in items:
        yield item
        if monotonic() >= turn_by:
            gevent.sleep(TURN)
            turn_by = monotonic() + SLICE


CLIENT = contextvars.ContextVar("schema_client", default=None)     # who sent the request being served


class FairLane:
    """One worker thread whose waiting jobs take turns by client (:data:`CLIENT`, the peer
    address the serving layer sets; None for callers that set none): each client's jobs run in
    their order, and clients alternate, so one client's queue of 1 MB schemas (~10 s each) does
    not make another's wait for all of them (four from one client made another client's wait
    53 s).  Behind a proxy every request has the proxy's address: first come, first served, as
    with one queue."""

    def __init__(self):
        from gevent.threadpool import ThreadPool
        self.pool = ThreadPool(1)
        self.busy = False
        self.waiting: OrderedDict = OrderedDict()      # client -> deque of Events, in turn order

    def apply(self, fn, args: tuple):
        """``fn(*args)`` in the lane's thread once it is this call's turn (the hub is free
        meanwhile)."""
        if self.busy:
            from gevent.event import Event
            turn = Event()
            self.waiting.setdefault(CLIENT.get(), deque()).append(turn)
            try:
                turn.wait()
            except BaseException:
                if turn.is_set():
                    self._hand_on()           # given the turn as it left: the next one's
                else:
                    self._forget(turn)
                raise
        self.busy = True
        try:
            return self.pool.apply(fn, args)
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        """The lane to the first waiting client's first job (that client then goes to the back
        of the turn order), or idle."""
        if not self.waiting:
            self.busy = False
            return
        client, jobs = next(iter(self.waiting.items()))
        turn = jobs.popleft()
        if jobs:
            self.waiting.move_to_end(client)
        else:
            del self.waiting[client]
        turn.set()                            # busy stays True: the lane is that job's now

    def _forget(self, turn) -> None:
        for client, jobs in list(self.waiting.items()):
            if turn in jobs:
                jobs.remove(turn)
                if not jobs:
                    del self.waiting[client]
                return
