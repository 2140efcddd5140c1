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
