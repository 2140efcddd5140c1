"""--sse-keep-alive-interval (vLLM 0.29 on, ``vllm/entrypoints/serve/utils/sse_keep_alive.py``):
the flag, its version gate, the greenlet relay (:mod:`blueprints.sse_keep_alive`) and the hub
emitter that keeps a stream alive from the event loop (:class:`server.emitter_factory.KeptAliveEmitter`).
Intervals here are fractions of a second (the flag takes whole seconds; a real server's counts:
tests/server/test_sse_keep_alive_server.py).  Margins: 0.2 s around every expected write."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest

from blueprints.sse_keep_alive import with_sse_keep_alive
from blueprints.streaming import HUB_EMITTER_KEY, SSE_KEEP_ALIVE_COMMENT as KA, KeepAlive
from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.engine.request import SeqState
from generation.engine.token_schedule import TokenSchedule
from server.emitter_factory import KeptAliveEmitter, hub_emitter
from support.emitter import read_all, stream_pair

ROOT = Path(__file__).resolve().parents[2]


# ---- the flag -------------------------------------------------------------------------------
def test_the_flag_is_an_int_of_seconds_off_by_default():
    assert load_config([]).sse_keep_alive_interval == 0
    c = load_config(["--sse-keep-alive-interval", "15"])
    assert c.sse_keep_alive_interval == 15 and "sse-keep-alive-interval" not in c.ignored_flags


@pytest.mark.parametrize("argv, message", [
    (["--sse-keep-alive-interval", "-1"],
     "--sse-keep-alive-interval must be a non-negative integer (0 disables keep-alive comments)."),
    (["--sse-keep-alive-interval", "1.5"], "invalid value for --sse-keep-alive-interval: '1.5'"),
    # releases before 0.29 have no such flag: their argparse stops on it, whatever its value
    (["--vllm-version", "0.28.0", "--sse-keep-alive-interval", "15"],
     "unrecognized arguments: --sse-keep-alive-interval 15"),
    (["--sse-keep-alive-interval=0", "--vllm-version", "0.27.0"],
     "unrecognized arguments: --sse-keep-alive-interval=0"),
    (["--vllm-version", "0.15.1", "--sse-keep-alive-interval", "-1"],
     "unrecognized arguments: --sse-keep-alive-interval -1"),
])
def test_bad_values_and_older_releases_are_refused(argv, message):
    with pytest.raises(ConfigError) as e:
        load_config(argv)
    assert str(e.value).startswith(message)


def test_from_vllm_0_29_the_flag_is_taken():
    assert load_config(["--vllm-version", "0.29.0", "--sse_keep_alive_interval", "2"]).sse_keep_alive_interval == 2


def test_an_older_release_refuses_it_at_start_up_as_an_unknown_flag():
    p = subprocess.run([sys.executable, "app.py", "--vllm-version", "0.27.0", "--sse-keep-alive-interval", "3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip() == ("error: unrecognized arguments: --sse-keep-alive-interval 3 "
                                                      "(--vllm-version 0.27.0's parser: --sse-keep-alive-interval "
                                                      "is new in vLLM 0.29.0)")


# ---- the greenlet relay ---------------------------------------------------------------------
def timed(body) -> list:
    """``[(seconds since the first item was asked, item)]`` of a body, read as a server writes it."""
    t0 = time.monotonic()
    return [(time.monotonic() - t0, item) for item in body]


def test_comments_fill_each_silence_of_an_interval_and_never_come_early():
    def stream():
        yield b""                   # the headers' flush: not a write that restarts the clock
        gevent.sleep(1.0)           # comments at 0.4 and 0.8
        yield b"data: a\n\n"
        gevent.sleep(0.1)           # none: shorter than an interval
        yield b"data: b\n\n"
        gevent.sleep(0.6)           # one at 1.5, 0.4 after "b"
        yield b"data: c\n\n"
    got = timed(with_sse_keep_alive(stream(), 0.4, {}))
    assert [item for _, item in got] == [b"", KA, KA, b"data: a\n\n", b"data: b\n\n", KA, b"data: c\n\n"]
    writes = [(t, item) for t, item in got if item]
    for (before, _), (at, item) in zip([(0.0, b"")] + writes, writes):
        assert item != KA or at - before >= 0.4         # a whole interval after the write before it


def test_the_body_runs_ahead_in_its_own_greenlet_and_its_errors_come_through():
    def stream():
        yield b"data: a\n\n"
        raise RuntimeError("boom")
    body = with_sse_keep_alive(stream(), 5, {})
    assert next(body) == b"data: a\n\n"
    with pytest.raises(RuntimeError, match="boom"):
        next(body)


def test_closing_the_response_ends_the_body_where_it_waits():
    ended = []

    def stream():
        try:
            yield b""
            gevent.sleep(30)
            yield b"never"
        finally:
            ended.append(True)
    body = with_sse_keep_alive(stream(), 0.2, {})
    assert next(body) == b"" and next(body) == KA
    body.close()                                # the client left: the server closes the body
    assert ended == [True]


def test_the_hub_emitter_writes_meanwhile_and_the_relay_writes_nothing():
    """The body's first wait asks the runtime's factory, with the stream's KeepAlive, once the
    relay is between writes; the relay then writes nothing until the body goes on."""
    asked = []

    class Emitter:
        def run(self, item):
            gevent.sleep(1.0)                   # the emitter's time: no comment from the relay
            return "done", None

    def factory(environ, seq, body_iter, keep_alive):
        asked.append(keep_alive)
        return Emitter()
    environ = {HUB_EMITTER_KEY: factory}

    def stream():                               # what sse_body does at its first deadline
        yield b"data: a\n\n"
        emitter = environ[HUB_EMITTER_KEY](environ, "seq", iter(()))
        assert emitter.run(time.monotonic()) == ("done", None)
    got = [item for _, item in timed(with_sse_keep_alive(stream(), 0.4, environ))]
    assert got == [b"data: a\n\n"] and isinstance(asked[0], KeepAlive) and asked[0].interval == 0.4


# ---- the hub emitter ------------------------------------------------------------------------
def seq():
    return SimpleNamespace(state=SeqState.RUNNING, event=None)


def frames(*items: bytes) -> bytes:
    return b"".join(b"%X\r\n%s\r\n" % (len(i), i) for i in items)


def test_the_factory_gives_a_keep_alive_emitter_only_with_a_keep_alive():
    server, client, resp = stream_pair()
    environ = {"vllm_sim.write": resp.write, "gunicorn.socket": server}
    assert type(hub_emitter(environ, seq(), iter(()))).__name__ == "HubEmitter"
    assert isinstance(hub_emitter(environ, seq(), iter(()), KeepAlive(1, 0.0)), KeptAliveEmitter)


def test_the_emitter_keeps_a_deadline_wait_alive_from_the_loop():
    server, client, resp = stream_pair()
    t0 = time.monotonic()
    ka = KeepAlive(0.4, t0)

    def body():
        yield t0 + 1.0                          # comments at 0.4 and 0.8
        yield b"data: a\n\n"
    it = body()
    assert KeptAliveEmitter(seq(), it, resp, server._sock, ka).run(next(it)) == ("done", None)
    assert read_all(client, b"0\r\n\r\n") == frames(KA, KA, b"data: a\n\n") + b"0\r\n\r\n"
    assert 0.95 <= ka.last - t0 <= 1.3         # the last write moved the clock


def test_the_emitter_keeps_the_gaps_between_scheduled_tokens_alive_and_only_those_past_an_interval():
    server, client, resp = stream_pair()
    metrics = SimpleNamespace(token_lag=lambda lag: None, itl=SimpleNamespace(observe=lambda v: None))
    latency = SimpleNamespace(config=SimpleNamespace(), constant_itl=lambda: None)
    s = seq()
    t0 = time.monotonic()
    ka = KeepAlive(0.4, t0)
    schedule = TokenSchedule(s, 0, 3, t0 + 0.1, 0.6, t0, metrics, latency)   # tokens at 0.1, 0.7, 1.3
    schedule.render = lambda k: b"data: %d\n\n" % k

    def body():
        yield schedule
    it = body()
    assert KeptAliveEmitter(s, it, resp, server._sock, ka).run(next(it)) == ("done", None)
    resp.close()
    # a comment 0.4 after each token, before the next one 0.6 after it
    assert read_all(client, b"0\r\n\r\n") == frames(b"data: 0\n\n", KA, b"data: 1\n\n", KA, b"data: 2\n\n") + \
        b"0\r\n\r\n"


def test_a_comment_that_does_not_fit_hands_the_stream_back_with_its_deadline():
    server, client, resp = stream_pair(small_buffers=True)
    server._sock.send(b"x" * 1_000_000)         # a reader that reads nothing: the buffers fill
    t0 = time.monotonic()
    it = iter([b"data: a\n\n"])
    outcome, (unsent, then) = KeptAliveEmitter(seq(), it, resp, server._sock, KeepAlive(0.2, t0)).run(t0 + 30)
    assert outcome == "pending" and then == t0 + 30 and bytes(unsent) == frames(KA)
    assert time.monotonic() - t0 < 5
