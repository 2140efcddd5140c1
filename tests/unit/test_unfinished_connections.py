"""The parts that keep slow clients from locking new ones out (issue 23 item 4): which
unfinished connection is closed (``server/unfinished.py``), and the arrival queue's low lane
and probe exemption (``server/arrivals.py``)."""
from __future__ import annotations

import io

import gevent
from gevent.event import Event
from gevent.hub import Waiter

from server import arrivals
from server.unfinished import Evicted, Unfinished


def waiting_greenlet(ended: list, name: str):
    def run():
        try:
            Event().wait()
        except Evicted:
            ended.append(name)
    g = gevent.spawn(run)
    gevent.sleep(0)
    return g


def test_the_oldest_unfinished_connections_are_closed_first():
    u, ended = Unfinished(), []
    gs = {n: waiting_greenlet(ended, n) for n in "abcd"}
    for n in "abcd":
        u.begin(gs[n])
    u.begin(gs["a"])              # a finished a request and waits anew: now the youngest
    assert u.evict(2) == 2
    gevent.sleep(0)
    assert ended == ["b", "c"]
    assert list(u.since) == [gs["d"], gs["a"]]
    assert u.evicted == 2


def test_a_request_that_arrives_before_the_close_is_kept():
    u, ended = Unfinished(), []
    g = waiting_greenlet(ended, "g")
    u.begin(g)
    assert u.evict(5) == 1
    u.done(g)                     # its body came in within the same loop turn
    gevent.sleep(0)
    assert ended == [] and not g.dead
    g.kill()


def test_nothing_to_close_when_every_connection_is_in_flight():
    u = Unfinished()
    g = gevent.spawn(gevent.sleep, 1)
    u.begin(g)
    u.done(g)
    assert u.evict(5) == 0
    g.kill()


def test_low_priority_turns_go_after_waiting_requests():
    turns = arrivals.ArrivalTurns(1)
    order = []

    def take(name, low):
        turns.take(low)
        order.append(name)
    # a request already waiting, so that every take below queues whatever loop turn it runs in:
    # the greenlets could start in a later turn than a take() of this one on a loaded machine,
    # find the turn's slot free and go at once (this test failed so in full runs at load 1-1.5)
    hub = gevent.get_hub()
    turns.waiting.append(Waiter(hub))
    turns._arm(hub.loop)
    gs = [gevent.spawn(take, "expire1", True), gevent.spawn(take, "expire2", True),
          gevent.spawn(take, "request", False)]
    gevent.joinall(gs, timeout=2)
    assert order == ["request", "expire1", "expire2"]


class Unreader:
    def __init__(self, data: bytes):
        self.buf = io.BytesIO()
        self.data = data

    def chunk(self):
        data, self.data = self.data, b""
        return data

    def unread(self, data):
        self.buf.write(data)


def test_liveness_probes_skip_the_arrival_queue():
    turns = arrivals.ArrivalTurns(1)
    turns.take()                  # the turn is full: anything else would wait
    for probe in (b"GET /health HTTP/1.1\r\n", b"GET /ping HTTP/1.1\r\n", b"GET /health?x=1 HTTP/1.1\r\n"):
        with gevent.Timeout(0.5):
            arrivals.wait_for_request(Unreader(probe), turns)
    assert not turns.waiting
    g = gevent.spawn(arrivals.wait_for_request, Unreader(b"GET /healthz HTTP/1.1\r\n"), turns)
    gevent.sleep(0)
    assert len(turns.waiting) == 1            # not a probe: waits its turn
    g.join(2)
    assert g.dead
