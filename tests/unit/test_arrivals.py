"""Requests on open keep-alive connections take turns with due tokens (server/arrivals.py,
issue 13): a loop turn starts at most ``per_turn`` of them, in arrival order, and a request
waiting its turn is not dropped by the keep-alive timeout."""
from __future__ import annotations

from collections import Counter

import gevent
import pytest
from gevent import Timeout
from gevent import socket as gsocket

from server import arrivals
from server.arrivals import ArrivalTurns

REQUEST = b"GET /%s HTTP/1.1\r\nHost: sim\r\n\r\n"


TURNS_CHECK = """
from collections import Counter
import gevent
from server.arrivals import ArrivalTurns
turns = ArrivalTurns(2)
loop = gevent.get_hub().loop
went = []
def caller(i):
    turns.take()
    went.append((i, loop.iteration))
gevent.joinall([gevent.spawn(caller, i) for i in range(9)], timeout=5)
assert [i for i, _ in went] == list(range(9)), went
per_turn = Counter(it for _, it in went)
assert max(per_turn.values()) == 2 and len(per_turn) == 5, per_turn
"""


def test_at_most_per_turn_callers_go_on_per_loop_turn_in_arrival_order():
    # In a fresh interpreter: it counts event-loop turns, and in a pytest worker that has run the
    # server tier before, the zero-delay MINPRI release timer was seen not to fire (not understood).
    import subprocess
    import sys
    from support import ROOT
    r = subprocess.run([sys.executable, "-c", TURNS_CHECK], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-800:]


def test_a_request_waiting_its_turn_outlives_the_keep_alive_timeout():
    class SlowTurns(ArrivalTurns):
        def _arm(self, loop):
            timer = self.timer = loop.timer(0.05)
            timer.start(self._release, loop)

    turns = SlowTurns(1)
    seen = []

    def request():
        turns.take()                              # this turn's one place
        with Timeout(0.01, False) as keep_alive:  # gunicorn's keep-alive timeout
            turns.take()                          # waits 50 ms for the next turn
            seen.append(keep_alive.pending)       # restarted for the rest of the headers

    gevent.spawn(request).join(timeout=5)
    assert seen == [True]


def test_a_waiting_request_is_known_to_the_drain_and_leaves_the_queue_when_killed():
    turns = ArrivalTurns(1)
    turns.turn, turns.used = gevent.get_hub().loop.iteration, 1
    g = gevent.spawn(turns.take)
    gevent.sleep(0)
    assert turns.waiting_greenlets() == {g}        # the drain serves it, not closes it
    g.kill()
    assert not turns.waiting and not turns.waiting_greenlets()


@pytest.fixture
def turn_taking_parsers(monkeypatch):
    from gunicorn import http
    monkeypatch.setattr(http, "get_parser", http.get_parser)    # restored afterwards
    monkeypatch.setattr(arrivals, "_turns", None)
    arrivals.install(2)
    return http.get_parser


def test_keep_alive_requests_through_gunicorns_parser_take_turns(turn_taking_parsers):
    from gunicorn.config import Config
    cfg = Config()
    loop = gevent.get_hub().loop
    pairs = [gsocket.socketpair() for _ in range(8)]
    second = []

    def connection(i, sock):
        parser = turn_taking_parsers(cfg, sock, ("127.0.0.1", 40000 + i))
        assert next(parser).path == "/first"
        req = next(parser)
        second.append((i, loop.iteration, req.path))

    for client, _ in pairs:
        client.sendall(REQUEST % b"first")
    greenlets = [gevent.spawn(connection, i, server) for i, (_, server) in enumerate(pairs)]
    gevent.sleep(0.05)                            # every connection waits for its next request
    for client, _ in pairs:
        client.sendall(REQUEST % b"second")       # all readable in the same loop turn
    gevent.joinall(greenlets, timeout=5)
    assert sorted(i for i, _, _ in second) == list(range(8))
    assert {path for _, _, path in second} == {"/second"}
    per_turn = Counter(it for _, it, _ in second)
    assert max(per_turn.values()) == 2 and len(per_turn) == 4
    for client, server in pairs:
        client.close()
        server.close()


def test_pipelined_and_closed_connections_through_the_turn_taking_parser(turn_taking_parsers):
    from gunicorn.config import Config
    cfg = Config()
    pipelined, server = gsocket.socketpair()
    pipelined.sendall(REQUEST % b"a" + REQUEST % b"b")    # the second is already buffered
    parser = turn_taking_parsers(cfg, server, ("127.0.0.1", 40100))
    assert [next(parser).path, next(parser).path] == ["/a", "/b"]
    pipelined.close()
    with pytest.raises(StopIteration):                    # the peer closed: no request
        next(parser)
    server.close()


def test_only_the_keep_alive_timeout_is_caught_and_a_dropped_queue_is_empty():
    class NoRelease(ArrivalTurns):          # nobody's turn comes: the waits below end otherwise
        def _arm(self, loop):
            pass

    turns = NoRelease(1)
    loop = gevent.get_hub().loop
    caught = []

    def waits_under(timeout):
        turns.turn, turns.used = loop.iteration, 1     # this turn's place is taken
        try:
            with timeout:
                turns.take()
        except Timeout as t:
            caught.append(t is timeout)

    # a Timeout that raises itself is not gunicorn's Timeout(keepalive, False): it propagates
    gevent.spawn(waits_under, Timeout(0.01)).join(timeout=5)
    assert caught == [True] and not turns.waiting
    g = gevent.spawn(turns.take)
    turns.turn, turns.used = loop.iteration, 1
    gevent.sleep(0)
    assert turns.drop_waiting() == [g] and not turns.waiting      # the drain's grace is over
    g.kill()


def timestamps_on(listener, within: float = 5.0) -> None:
    """Wait until the kernel stamps received packets.  The first socket asking for
    ``SO_TIMESTAMPNS`` switches stamping on through a deferred kernel work item
    (``net_enable_timestamp``), so on a loaded machine a packet that follows the listener's
    creation at once can arrive unstamped; a server's listener is long up by its first request."""
    import time

    from server.arrivals import SO_TIMESTAMPNS
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with gsocket.create_connection(listener.getsockname()) as a, \
                gsocket.socket(fileno=listener.accept()[0].detach()) as b:
            a.sendall(b"x")
            _, ancillary, _, _ = b.recvmsg(16, 64)
        if any(kind == SO_TIMESTAMPNS for _, kind, _ in ancillary):
            return
        time.sleep(0.01)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_a_request_read_late_counts_from_when_the_kernel_received_it(turn_taking_parsers):
    """A request read 80 ms after it arrived carries the kernel's receive time (to well under
    the TCP_INFO tick margin), the stamp survives while no other read is made, and a request
    already buffered behind another has none (TCP_INFO answers for it)."""
    import time

    from gunicorn.config import Config

    from blueprints.common import received_at
    from blueprints.streaming import KERNEL_ARRIVAL_KEY
    from server.listening import bind

    listener = bind("127.0.0.1", 0)
    try:
        timestamps_on(listener)
        client = gsocket.create_connection(listener.getsockname())
        conn = gsocket.socket(fileno=listener.accept()[0].detach())
        parser = turn_taking_parsers(Config(), conn, ("127.0.0.1", 1))
        sent = time.monotonic()
        client.sendall(REQUEST % b"a" + REQUEST % b"b")
        time.sleep(0.08)
        req = next(parser)
        stamp = parser.unreader.stamp
        assert req.path == "/a" and stamp is not None
        arrived = received_at({KERNEL_ARRIVAL_KEY: stamp})
        # (20 ms up: the stamp's wall-clock-to-monotonic conversion can be preempted on a loaded
        # machine; the read came 80 ms later, so the kernel's time is still told from the read's)
        assert sent - 0.002 <= arrived <= sent + 0.02, (arrived - sent)
        assert next(parser).path == "/b" and parser.unreader.stamp is None      # pipelined: no fresh read
        client.close()
        conn.close()
    finally:
        listener.close()
