"""generation.adapters.response_store.EventLog.follow: a follower's pieces are bounded, not the
whole log joined (a replay of a long background stream held a copy of it per connection)."""
from generation.adapters.response_store import FOLLOW_BYTES, EventLog


def test_a_follower_takes_the_log_in_bounded_pieces():
    log = EventLog()
    event = b"data: " + b"x" * 1000 + b"\n\n"
    log.add(event * 5000)                                  # ~5 MB of events
    log.finish()
    pieces = list(log.follow(0))
    assert b"".join(pieces) == event * 5000
    assert len(pieces) > 1 and max(map(len, pieces)) <= FOLLOW_BYTES + len(event)
    assert b"".join(log.follow(4998)) == event * 2 and list(log.follow(10 ** 9)) == []


def test_a_running_stream_dropped_with_its_object_is_no_longer_counted():
    """A running background stream's log dropped with its evicted object (the store's count
    bound) was still counted as its producer went on: stream_bytes only grew, and every later
    finished log was dropped at once."""
    import gevent
    import gevent.event

    from generation.adapters.response_store import ResponseStore

    store = ResponseStore(limit=1)
    go = gevent.event.Event()

    def body():
        yield b"data: 1\n\n"
        go.wait()
        yield b"data: 2\n\n"

    follower = store.stream_in_background(None, [None], {"id": "a", "status": "queued"}, body(), None)
    gevent.sleep(0.01)
    assert store.stream_bytes == 9
    store.put({"id": "b", "status": "completed"})         # evicts a, its log with it
    assert store.stream_bytes == 0 and "a" not in store.streams
    go.set()
    assert b"".join(follower) == b"data: 1\n\ndata: 2\n\n"   # its own client still reads it to its end
    assert store.stream_bytes == 0


def test_a_follower_ends_when_the_shutdown_grace_is_over():
    """The worker throws ServerShuttingDown into the requests still running when the grace is
    over: a follower waiting for the next event ended with it raised (gunicorn's 'Error handling
    request' traceback, a body cut mid-chunk); it ends cleanly, with the error frame if given."""
    import gevent

    from server.lifecycle import ServerShuttingDown

    log = EventLog()
    log.add(b"data: 1\n\n")
    for frame, tail in ((None, []), (lambda e: b"error: " + e.message.encode(), [b"error: The server"])):
        got = []
        g = gevent.spawn(lambda: got.extend(log.follow(0, frame)))
        gevent.sleep(0.01)
        g.kill(ServerShuttingDown)
        assert g.successful(), g.exception
        assert got[0] == b"data: 1\n\n" and [x[:17] for x in got[1:]] == tail
