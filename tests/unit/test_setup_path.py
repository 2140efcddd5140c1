"""Per-request set-up savings (issue 32): each gives what the work it skips gave.

* ``schemas.common._fast_load`` calls a field's ``_deserialize`` directly for a value that is
  not None when the field has no validators or pre/post-load functions: every request schema,
  on valid and invalid bodies, loads to what marshmallow's full load gives (or the same error);
* ``server.worker.NamedListener`` answers ``getsockname`` from the one read at start;
* log records leave the thread out (``server.worker.no_thread_names_in_logs``): no format of
  the server's prints it;
* ``server.sse_emitter.usable_response`` asks ``hasattr(sock, "do_handshake")`` only of sockets
  other than gevent's plain one, for which the answer is no."""
from __future__ import annotations

import logging
import os
import time
import socket

import pytest
from marshmallow import ValidationError, validate

from schemas import common
from schemas.chat import chat_request_schema
from schemas.completions import completion_request_schema
from schemas.generate import generate_request_schema
from schemas.messages import messages_request_schema
from schemas.render import chat_render_schema, tokenize_schema
from schemas.responses import responses_request_schema
from generation.errors import InvalidParam

SCHEMAS = [chat_request_schema, completion_request_schema, generate_request_schema, messages_request_schema,
           responses_request_schema, chat_render_schema, tokenize_schema]

VALUES = [None, True, False, 0, 1, 7, 5.0, 2.5, -3, 1e30, "", "x", "7", [], [1, 2], [1.0, 2], ["a"], [True],
          {}, {"a": 1}, {"include_usage": True}, {"include_usage": "yes"}]


def _marshmallow(schema, body):
    """What marshmallow's own load gives (the path :func:`common.load` takes when the fast one
    returns None)."""
    try:
        return ("ok", common._subset(schema, body).load(body))
    except ValidationError as e:
        return ("error", str(common._refusal(schema, e.messages, body)))
    except InvalidParam as e:          # a field with vLLM's own words (schemas.common.LogprobCount)
        return ("invalid", e.args[0], e.param)


def _fast(schema, body):
    try:
        out = common._fast_load(schema, body)
    except InvalidParam as e:
        return ("invalid", e.args[0], e.param)
    if isinstance(out, common.FieldFailed):     # the refused field's errors, the rest marshmallow's
        return ("error", str(common._refusal(schema, out.all_errors(schema, body), body)))
    return None if out is None else ("ok", out)


def _base(schema) -> dict:
    required = {n for n, f in schema.load_fields.items() if f.required}
    body = {}
    if "messages" in required:
        body["messages"] = [{"role": "user", "content": "hi"}]
    if "prompt" in required:
        body["prompt"] = "hi"
    if "max_tokens" in required:
        body["max_tokens"] = 5
    if "input" in required:
        body["input"] = "hi"
    if "model" in required:
        body["model"] = "m"
    return body


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: type(s).__name__)
def test_fast_load_gives_marshmallows_result_for_every_field_and_value(schema):
    base = _base(schema)
    checked = 0
    for name in schema.load_fields:
        for value in VALUES:
            body = {**base, name: value}
            fast = _fast(schema, body)
            if fast is None:
                continue            # the full load runs: nothing to compare
            assert fast == _marshmallow(schema, body), (name, value)
            checked += 1
    if schema in (chat_request_schema, completion_request_schema):
        assert checked > 100         # (others may take marshmallow's path for every body: hooks)


def test_direct_fields_have_no_validators_or_hooks():
    for schema in SCHEMAS:
        plan = common._fast_plan(schema)
        if not plan:
            continue
        fields_, _, _, _, direct = plan
        for name in direct:
            f = fields_[name]
            assert not f.validators and not getattr(f, "pre_load", None) and not getattr(f, "post_load", None)


def test_a_field_with_a_validator_still_runs_it():
    from marshmallow import Schema, fields

    class S(Schema):
        a = fields.Integer(validate=validate.Range(min=0))
        b = fields.Integer()
    s = S()
    plan = common._fast_plan(s)
    assert plan and "a" not in plan[4] and "b" in plan[4]
    failed = common._fast_load(s, {"a": -1, "b": 1})                # the validator refused it
    assert isinstance(failed, common.FieldFailed) and failed.name == "a"
    assert failed.all_errors(s, {"a": -1, "b": 1}) == {"a": ["Must be greater than or equal to 0."]}
    assert common._fast_load(s, {"a": 1, "b": 1}) == {"a": 1, "b": 1}


def test_a_changed_body_is_loaded_anew():
    a = common.load(chat_request_schema, {"messages": [{"role": "user", "content": "a"}], "max_tokens": 3})
    b = common.load(chat_request_schema, {"messages": [{"role": "user", "content": "b"}], "max_tokens": 4,
                                          "stream": True})
    assert (a.max_tokens, a.stream, a.messages[0]["content"]) == (3, None, "a")
    assert (b.max_tokens, b.stream, b.messages[0]["content"]) == (4, True, "b")
    with pytest.raises(Exception) as e:
        common.load(chat_request_schema, {"messages": [{"role": "user", "content": "b"}], "max_tokens": "many"})
    assert "max_tokens" in str(e.value)


def test_named_listener_reads_its_name_once_and_passes_the_rest():
    from server.worker import NamedListener
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        named = NamedListener(sock)
        name = sock.getsockname()
        assert named.getsockname() == sock.getsockname()
        assert named.fileno() == sock.fileno() and named.family == sock.family
    finally:
        sock.close()
    assert named.getsockname() == name        # read once: a closed socket could not answer


def test_no_server_log_format_prints_the_thread():
    from server.logs import ACCESS_FORMAT, LOG_FORMAT
    for fmt in (LOG_FORMAT, ACCESS_FORMAT):
        assert "thread" not in fmt.lower()
    from server.worker import no_thread_names_in_logs
    before = logging.logThreads
    try:
        no_thread_names_in_logs()
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "m %s", ("a",), None)
        assert logging.Formatter(LOG_FORMAT).format(record).endswith(": m a")
    finally:
        logging.logThreads = before


def test_usable_response_on_plain_and_tls_sockets():
    from types import SimpleNamespace

    from gevent import socket as gsocket

    from blueprints.streaming import WRITE_KEY
    from server.sse_emitter import usable_response
    plain = gsocket.socket()
    try:
        assert not hasattr(plain, "do_handshake")
        resp = SimpleNamespace(sock=plain, headers_sent=True)
        resp.write = lambda data: None
        write = SimpleNamespace(__self__=resp)
        assert usable_response({WRITE_KEY: write, "gunicorn.socket": plain}) == (resp, plain._sock)
        tls = SimpleNamespace(do_handshake=lambda: None, _sock=plain._sock)
        resp.sock = tls
        assert usable_response({WRITE_KEY: write, "gunicorn.socket": tls}) is None
    finally:
        plain.close()


def test_the_lean_access_line_is_the_line_logging_writes(monkeypatch):
    """server.logs.LeanAccessLine: with the access log's own configuration (one stream handler,
    LOG_FORMAT), the same bytes as ``logger.info`` at the same instant; any other configuration,
    or a handler swapped in later, goes through logging."""
    import io

    from server import logs
    logger = logging.getLogger("test.lean.access")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter(logs.LOG_FORMAT))
    logger.addHandler(handler)
    try:
        now = 1_700_000_123.4567
        monkeypatch.setattr(time, "time", lambda: now)
        monkeypatch.setattr(time, "time_ns", lambda: int(now * 1e9))
        lean = logs.LeanAccessLine.of(logger)
        msg = '127.0.0.1 "POST /v1/chat/completions HTTP/1.1" 200 812 5ms'
        logger.info("%s", msg)
        assert lean.write(msg) is True
        first, second = buf.getvalue().splitlines()
        assert first == second and first.endswith(f" INFO test.lean.access[{os.getpid()}]: {msg}")
        assert ",456 INFO" in first
        extra = logging.StreamHandler(io.StringIO())
        logger.addHandler(extra)
        assert lean.write(msg) is False and logs.LeanAccessLine.of(logger) is None
        logger.removeHandler(extra)
        handler.setFormatter(logging.Formatter("%(message)s"))
        assert logs.LeanAccessLine.of(logger) is None
        handler.setFormatter(logging.Formatter(logs.LOG_FORMAT))
        logger.propagate = True
        assert logs.LeanAccessLine.of(logger) is None
    finally:
        logger.removeHandler(handler)
