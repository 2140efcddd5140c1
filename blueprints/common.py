"""Flask helpers every route shares: body parsing, JSON/SSE responses, request ids, response
headers and the header-driven failures (api.md 2.5-2.7).  The generation pipeline itself is
:mod:`blueprints.serving`; errors become responses in :mod:`blueprints.errors`.
"""
from __future__ import annotations

import json
import logging
import socket
import sys
import time
from time import monotonic

import gevent
import orjson
from flask import Response, current_app, request

from generation.engine.simulator import HUB_SLICE, ClientDisconnected, Simulator
from generation.engine.token_schedule import waited
from generation.config.values import header_rank, rank_range
from generation.engine.admission import queue_counts
from generation.metrics.scrape import kv_cache_usage
from generation.adapters.json_dumps import dumps_any as dumps_json
from generation.adapters.extra_args import exact_extra_args
from generation.adapters.wide_ints import hold
from generation.adapters.token_stream import answer_aborted
from generation.adapters.validation import BODY_BYTES, JSON_WORDS_MAX, body_missing, body_not_an_object, body_unparsable  # noqa: F401
from generation.errors import InjectedError, InvalidParam, Rejected, RequestInvalid, SimulatorError, UnsupportedMediaType

from .errors import internal_error
from .streaming import END_WITH_KEY, HEADERS_LATER_KEY, HUB_EMITTER_KEY, KERNEL_ARRIVAL_KEY, send_all_or_stall

JSON_MIME = "application/json"


def simulator() -> Simulator:
    return current_app.extensions["simulator"]


def parse_json_body(environ: dict | None = None, limit: int | None = None, raw: bytes | None = None,
                    members: int = 1) -> dict:
    """The request body as a JSON object.

    The Content-Type must be ``application/json`` (parameters such as ``charset`` allowed), as
    vLLM's ``validate_json_request`` requires on its JSON routes: a JSON API must not act on a
    ``text/plain`` form post that a browser sends without a CORS preflight.  Raises
    UnsupportedMediaType, or RequestInvalid with vLLM 0.34's answer to an empty body, a body that
    is not JSON or a JSON value other than an object (``generation.adapters.validation``;
    ``members``: how many request models the route's body type is a union of).  ``environ`` and
    ``limit`` (``MAX_CONTENT_LENGTH``) given, a body within the limit is read from the WSGI input
    directly (werkzeug's ``get_data``, ~50 us more, for the rest, and its 413).  ``raw``: the
    body, already read by the caller that checked its Content-Type (``FrontDoor``)."""
    if raw is None:
        raw = json_body_bytes(environ, limit)
    if not raw:
        raise body_missing()
    BODY_BYTES.set(len(raw))          # a large body is validated off the hub (schemas.common.load)
    try:
        body = loads_body(raw)
    except orjson.JSONDecodeError as e:
        raise body_unparsable(raw, e) from None
    if not isinstance(body, dict):
        raise body_not_an_object(body, members)
    hold((body, raw))                             # its integers past 64 bits, should a field meet one
    exact_extra_args(body)                        # integers past 64 bits there as vLLM reads them
    return body


def json_body_bytes(environ: dict | None = None, limit: int | None = None) -> bytes:
    """The body of a request whose Content-Type vLLM's ``validate_json_request`` accepts (else
    UnsupportedMediaType), for a route that reads it itself (:func:`parse_json_body`)."""
    if environ is None:
        environ = request.environ
    ctype = environ.get("CONTENT_TYPE", "")
    if ctype.split(";", 1)[0].lower() != JSON_MIME:       # as vLLM's check: nothing stripped
        raise UnsupportedMediaType()
    return _read_body(environ, limit)


def loads_body(raw: bytes):
    """A request body's JSON value, read as vLLM reads it (FastAPI hands the bytes to
    ``json.loads``, which detects UTF-8 with a byte order mark and UTF-16 / UTF-32, with or
    without one, RFC 8259 section 8.1's legacy encodings): such a body is transcoded to UTF-8,
    then parsed by orjson as every body is (a 400 here for each of them before; vLLM served
    them).  orjson's rules stay: no ``NaN`` / ``Infinity``, no lone surrogate (a UTF-16 body's
    included), 1024 levels.  Raises ``orjson.JSONDecodeError`` (a ``ValueError``)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        encoding = json.detect_encoding(raw[:4])
        if encoding == "utf-8":
            raise
    try:
        text = raw.decode(encoding).encode("utf-8")       # strict: a lone surrogate is an error here
    except UnicodeError as e:
        raise orjson.JSONDecodeError(f"the body is not valid {encoding.upper()}: {e.reason}", "", 0) from None
    return orjson.loads(text)


def _read_body(environ: dict, limit: int | None) -> bytes:
    """The request's body; raises ClientDisconnected when the connection reset or ended before
    the body did (uvicorn hands vLLM's route ``http.disconnect``, and nothing is answered;
    gunicorn's ``wsgi.input_terminated`` has werkzeug read to the end, whatever came)."""
    length = environ.get("CONTENT_LENGTH")
    known = int(length) if length and length.isdigit() else None
    try:
        if limit is not None and known is not None and known <= limit:
            body = environ["wsgi.input"].read(known)
        else:
            body = request.get_data(cache=False)
    except ConnectionError:           # reset mid-body: the client left (hung up on, no traceback)
        raise ClientDisconnected() from None
    if known is not None and len(body) < known:
        raise ClientDisconnected()
    return body


class Pacer:
    """Called between pieces of a long computation on the hub's thread: gives the hub a turn
    (``gevent.sleep(0)``) when :data:`HUB_SLICE` has passed since the last one, so that no
    request holds the other streams for longer."""
    __slots__ = ("turn_by",)

    def __init__(self):
        self.turn_by = monotonic() + HUB_SLICE

    def __call__(self) -> None:
        if monotonic() >= self.turn_by:
            gevent.sleep(0)
            self.turn_by = monotonic() + HUB_SLICE


PACED_DUMPS_DEPTH = 4           # containers this deep are serialised by orjson in slices
PACED_SLICE = 64                # list items per orjson call at that depth


PACED_PART = 1 << 20            # bytes: the body's parts are joined up to this size


def dumps_paced(obj, pace: Pacer) -> list:
    """``orjson.dumps(obj)`` as a list of parts of about :data:`PACED_PART` bytes (joined, the
    same bytes: orjson's compact output joins as it splits), serialised container by container
    down to :data:`PACED_DUMPS_DEPTH` levels, then in slices of :data:`PACED_SLICE` items, with
    ``pace()`` between the pieces: a 64 MB body takes orjson 0.25 s in one call, and joining it
    into one bytes another 0.07 s.  Dict keys must be strings, as orjson requires anyway."""
    parts: list = []
    _dump_into(parts, obj, pace, 0)
    out, group, size = [], [], 0
    for p in parts:
        group.append(p)
        size += len(p)
        if size >= PACED_PART:
            out.append(b"".join(group))
            group, size = [], 0
            pace()
    if group:
        out.append(b"".join(group))
    return out


def _dump_into(parts: list, obj, pace: Pacer, depth: int) -> None:
    put, dumps = parts.append, dumps_json
    cls = obj.__class__
    if cls is dict and obj and depth < PACED_DUMPS_DEPTH:
        sep = b"{"
        for k, v in obj.items():
            put(sep + dumps(k) + b":")
            _dump_into(parts, v, pace, depth + 1)
            sep = b","
        put(b"}")
        return
    if cls is list and len(obj) > 1:
        if depth < PACED_DUMPS_DEPTH:
            sep = b"["
            for v in obj:
                put(sep)
                _dump_into(parts, v, pace, depth + 1)
                sep = b","
            put(b"]")
            return
        if len(obj) > PACED_SLICE:
            sep = b"["
            for i in range(0, len(obj), PACED_SLICE):
                put(sep + dumps(obj[i:i + PACED_SLICE])[1:-1])
                sep = b","
                pace()
            put(b"]")
            return
    put(dumps(obj))
    pace()


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dumps_json(obj), status=status, mimetype=JSON_MIME, headers=headers)


class DisconnectWatcher:
    """Aborts a request's sequences as soon as its client closes the connection, as vLLM
    aborts requests whose client went away: slots are freed at once, queued sequences leave
    the queue, nothing is counted as a success.

    An I/O watcher on the client socket calls back when it turns readable; during a response
    the client sends nothing, so readable-with-no-data means EOF, and the connection is then
    shut (:func:`hang_up`'s rule: a client that left gets nothing more).  A watcher, not a greenlet
    per request: no spawn, no switches and no kill per request (issue 13); the callback runs
    in the hub, so it only peeks, and the abort itself runs in a greenlet of its own.
    Only used when the request will wait."""

    def __init__(self, sim, seqs, environ):
        self.sim = sim
        self.seqs = seqs
        self.sock = environ.get("gunicorn.socket")
        self.watcher = None

    def __enter__(self):
        if self.sock is not None and self.sim.expects_delay(self.seqs):
            try:
                fd = self.sock.fileno()
            except (OSError, ValueError):
                return self
            if fd >= 0:
                self.watcher = gevent.get_hub().loop.io(fd, 1)      # 1: readable
                self.watcher.start(self._readable)
        return self

    def _readable(self):
        # gevent's socket wraps the OS socket (``_sock``); its own recv would wait for data,
        # which a hub callback must never do, so the OS socket is asked directly.
        raw = getattr(self.sock, "_sock", self.sock)
        try:
            data = raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return                                          # spurious wake-up: keep watching
        except Exception:       # noqa: BLE001 - closed or unusable socket: the client is gone
            data = b""
        self._stop()
        if not data:
            # gone, or half-closed (shut its side after the request): vLLM's uvicorn drops the
            # connection; shut it here so that nothing more is written, not even a stream's
            # chunked end (0\r\n\r\n), which told a half-closed client its stream was complete
            try:
                raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            gevent.spawn(self.sim.cancel, self.seqs)

    def _stop(self):
        w, self.watcher = self.watcher, None
        if w is not None:
            w.stop()
            w.close()

    def __exit__(self, *exc):
        self._stop()
        return False


def hang_up(environ: dict) -> None:
    """A client that left (or half-closed its side, as ``nc -N`` does) gets no response, as
    vLLM's uvicorn drops such a connection: the socket is shut down, so the 499 the server
    still logs is never written (gunicorn takes the failed write for a gone client)."""
    sock = environ.get("gunicorn.socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def run_to_completion(sim, seqs, environ: dict, aborted_answers: bool = False) -> None:
    """Non-streaming: wait for every sequence; raises ClientDisconnected if the client left, or if
    the server aborted it without ``aborted_answers`` (with it: ``token_stream.answer_aborted``)."""
    try:
        if not sim.expects_delay(seqs):
            sim.complete(seqs)
            return
        with DisconnectWatcher(sim, seqs, environ):
            sim.complete(seqs)
    except ClientDisconnected:
        if not (aborted_answers and seqs and seqs[0].request.aborted_by_server):
            raise
        answer_aborted(seqs)


def admit_and_complete(sim, seqs, environ: dict, entry: float, limits: bool = True) -> None:
    """A non-streaming request's sequences, admitted at once and waited for: they arrive when
    the request's bytes did (:func:`received_at`), in step mode not before ``entry`` (the route's
    first ``monotonic()``: the engine models vLLM's frontend from the arrival, as
    :func:`blueprints.serving.handle`).  A client that leaves aborts them, a failure errors them.
    ``limits``: as :meth:`~generation.engine.simulator.Simulator.admit`."""
    arrived = received_at(environ)
    if sim.engine is not None and (arrived is None or entry < arrived):
        arrived = entry
    sim.admit(seqs, arrived, limits)
    try:
        run_to_completion(sim, seqs, environ)
    except BaseException as e:   # the client left (an abort), or the server failed it (an error)
        sim.cancel(seqs, "abort" if isinstance(e, (ClientDisconnected, GeneratorExit)) else "error")
        raise


def sse_body(body_iter, sim: Simulator, seqs, error_frame, environ: dict):
    """The body of a ``text/event-stream`` response: a generator of ``bytes`` flushed as yielded.

    An empty first chunk makes gunicorn send the headers at once when the stream will wait
    (vLLM sends them before the first token); a stream that never waits sends them with its
    first bytes (one write fewer; the client cannot tell), and so does one set up while a burst
    of arrivals waits its turn (``environ[HEADERS_LATER_KEY]()``, see
    :mod:`blueprints.streaming`: the burst's set-up is a ``send`` per stream shorter).  ``seqs`` are aborted when the
    client leaves.  Each ``bytes`` item of ``body_iter`` is one write
    (renderers join the chunks due at the same instant); a ``float`` item is a deadline to wait
    for: from the first one on, a gunicorn response on a plain TCP socket is emitted from the event
    loop by the runtime's hub emitter (:mod:`blueprints.streaming`), anything else waits in this greenlet.
    An error after the 200 went out becomes ``error_frame(err)`` (a SimulatorError, or a 500
    for anything else) in the API's format."""
    try:
        if sim.expects_delay(seqs):
            later = environ.get(HEADERS_LATER_KEY)
            if later is None or not later():
                yield b""
            items = body_iter
        else:
            end = environ.get(END_WITH_KEY)          # nothing waits: the last bytes carry the body's end
            items = body_iter if end is None else _last_ends(body_iter, end, environ)
        with DisconnectWatcher(sim, seqs, environ):
            try:
                hub_ok = len(seqs) == 1
                turn_by = monotonic() + HUB_SLICE
                for item in items:
                    cls = item.__class__
                    if cls is bytes:
                        yield item
                        if monotonic() >= turn_by:      # a large body: let other streams run
                            gevent.sleep(0)
                            turn_by = monotonic() + HUB_SLICE
                        continue
                    # A deadline or a TokenSchedule: from the hub when the server allows (sse_emitter).
                    factory = environ.get(HUB_EMITTER_KEY) if hub_ok else None
                    emitter = factory(environ, seqs[0], body_iter) if factory is not None else None
                    hub_ok = False          # once: the emitter keeps the stream, or the answer stays no
                    if emitter is not None:
                        outcome, value = emitter.run(item)
                        if outcome == "done":
                            return
                        if outcome == "error":
                            raise value
                        unsent, then = value        # a slow reader: this greenlet drives the rest
                        try:
                            send_all_or_stall(environ["gunicorn.socket"], unsent)
                        except OSError:
                            return
                        if then is None:
                            continue
                        if isinstance(then, BaseException):
                            raise then
                        yield from _drive(sim, seqs[0], then)
                    else:
                        yield from _drive(sim, seqs[0], item)
            except ClientDisconnected:
                return
    except Exception as e:         # a bug after the 200 went out: tell the client in-band
        if not isinstance(e, SimulatorError):     # deliberate ones (shutdown) need no traceback
            logging.getLogger("vllm_sim").exception("error while streaming")
        yield error_frame(e if isinstance(e, SimulatorError) else internal_error(e))
    finally:
        # However the stream ends (client gone before the first write included), nothing
        # may keep a slot or a queue place.
        sim.cancel(seqs)
        close = getattr(body_iter, "close", None)
        if close is not None:
            close()
        gevent.sleep(0)   # let other keep-alive connections have a turn (see app.py)


def _last_ends(body_iter, end, environ):
    """``body_iter``'s items, a ``bytes`` item held until the next is known: once the iterator is
    done, ``end(environ)`` is told that the bytes it yields now are the body's last (the runtime
    then sends the body's end with them).  For a body that never waits (pulling the next item
    renders it, without sleeping); an error still comes after the bytes before it."""
    held = None
    try:
        for item in body_iter:
            if held is not None:
                yield held
                held = None
            if item.__class__ is bytes:
                held = item
            else:
                yield item
    except Exception:
        if held is not None:
            yield held
        raise
    if held is not None:
        end(environ)
        yield held


# struct tcp_info (linux/tcp.h): tcpi_last_data_recv, ms since the last data segment arrived
_TCP_INFO_LEN, _LAST_DATA_RECV = 56, 52
_TCP_INFO = getattr(socket, "TCP_INFO", None)
TICK_MARGIN = 0.012             # s: tcpi_last_data_recv counts timer ticks (10 ms at HZ=100)
MAX_BACKDATE = 1.0              # s: bytes older than this were pipelined behind an earlier request


def received_at(environ: dict) -> float | None:
    """When the request's bytes reached this server (``time.monotonic`` seconds), read from
    the kernel, or None where that is not available (not Linux, not a TCP socket, the
    in-process test client).

    A request that came whole in the first read of its connection's turn carries the kernel's
    own receive time of those bytes (``SO_TIMESTAMPNS``, to the microsecond:
    :data:`~blueprints.streaming.KERNEL_ARRIVAL_KEY`, set by the server runtime,
    :func:`server.arrivals.wait_for_request`).  Any other is read from ``TCP_INFO``'s
    ``tcpi_last_data_recv``, which counts in timer ticks (1-10 ms, and a tick may fire late):
    that answer is moved later by :data:`TICK_MARGIN` so that it is never before the true
    arrival (a client never sees a shorter time to first token than configured); it is at most
    a tick plus that margin late.

    At most :data:`MAX_BACKDATE` back: an HTTP-pipelined request's bytes may have waited
    behind a whole earlier response on the same connection."""
    stamp = environ.get(KERNEL_ARRIVAL_KEY)
    if stamp is not None:
        return monotonic() - min(time.time() - stamp, MAX_BACKDATE)
    sock = environ.get("gunicorn.socket")
    if sock is None or _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
    except (OSError, AttributeError):
        return None
    if len(info) < _TCP_INFO_LEN:
        return None
    ago = int.from_bytes(info[_LAST_DATA_RECV:_LAST_DATA_RECV + 4], sys.byteorder) / 1000 - TICK_MARGIN
    return monotonic() - min(ago, MAX_BACKDATE)


def _drive(sim: Simulator, seq, item):
    """Wait for a deadline (``float``) or emit a TokenSchedule in this greenlet.  A request the
    server aborted meanwhile (abort_requests, checkpoint prepare mode=abort) just ends the wait:
    the body, resumed as the hub emitter resumes it, writes its end (the ``abort`` chunks); a
    client that left raises."""
    try:
        yield from waited(sim, seq, item)
    except ClientDisconnected:
        if not seq.request.aborted_by_server:
            raise


def header_safe(value: str) -> bool:
    """Whether ``value`` can be sent as an HTTP header value as is (printable ASCII: what every
    WSGI server can encode; gunicorn refuses CR/LF with a 500 after the request was admitted)."""
    return value.isascii() and value.isprintable()


def request_id(sim: Simulator | None = None, body_rid: str | None = None, environ: dict | None = None) -> str:
    """The request's id: the ``X-Request-Id`` header when present (vLLM's ``_base_request_id``:
    the body id becomes ``chatcmpl-<id>``, ``cmpl-<id>``, ... whatever the flags); else the id the
    body names (vLLM's ``request_id`` field, only some APIs have one); else a fresh id.

    With ``--enable-request-id-headers`` the id is echoed in the ``X-Request-Id`` response header
    (api.md 2.5), so a body id must be header-safe: raises InvalidParam (``request_id``) before
    anything is admitted."""
    sim = sim or simulator()
    rid = (request.environ if environ is None else environ).get("HTTP_X_REQUEST_ID")
    if rid:
        return rid
    if sim.config.enable_request_id_headers:
        if body_rid and not header_safe(body_rid):
            raise InvalidParam("request_id: must be printable ASCII without control characters (CR, LF, ...): "
                               "it is echoed in the X-Request-Id response header", "request_id")
    return body_rid or sim.new_request_id()


def response_headers(rid: str | None, sim: Simulator | None = None, environ: dict | None = None) -> dict:
    """Pod / namespace / request-id headers for a successful response (api.md 2.6), and the
    ORCA load report when the request asks for one (:func:`orca_header`)."""
    sim = sim or simulator()
    cfg = sim.config
    h = {}
    fmt = (request.environ if environ is None else environ).get("HTTP_ENDPOINT_LOAD_METRICS_FORMAT")
    if fmt:
        report = orca_header(sim, fmt)
        if report is not None:
            h["endpoint-load-metrics"] = report
    if cfg.pod_name:
        h["x-inference-pod"] = cfg.pod_name
        h["x-inference-port"] = str(cfg.port)
    if cfg.pod_namespace:
        h["x-inference-namespace"] = cfg.pod_namespace
    if rid is not None and cfg.enable_request_id_headers:
        h["X-Request-Id"] = rid
    return h


def orca_header(sim: Simulator, fmt: str) -> str | None:
    """vLLM's ORCA load report (``orca_metrics.create_orca_header``) for the request header
    ``endpoint-load-metrics-format: TEXT|JSON`` (case-insensitive; anything else: None)::

        TEXT named_metrics.kv_cache_usage_perc=0.0, named_metrics.num_requests_waiting=0.0, ...
        JSON {"named_metrics": {"kv_cache_usage_perc": 0.0, ...}}

    Values are floats read from the engine's live state (vLLM reports kv_cache_usage_perc and
    num_requests_waiting; num_requests_running is added for load balancers that weigh it)."""
    f = fmt.lower()
    if f != "text" and f != "json":
        return None
    waiting, running = queue_counts(sim)        # step mode: its engine's, as /metrics reports them
    metrics = {"kv_cache_usage_perc": kv_cache_usage(sim), "num_requests_waiting": float(waiting),
               "num_requests_running": float(running)}
    if f == "text":
        return "TEXT " + ", ".join(f"named_metrics.{k}={v}" for k, v in metrics.items())
    return "JSON " + json.dumps({"named_metrics": metrics})


def install_request_id_header(app) -> None:
    """``--enable-request-id-headers``: every response carries ``X-Request-Id`` (the request's
    header, else a fresh id), errors included, as vLLM's ``XRequestIdMiddleware`` does.  A WSGI
    layer outside ``--api-key`` and the body-size check, so their 401/413 carry it too (vLLM adds
    its middleware last, outermost); responses that already name their id keep it."""
    sim = app.extensions["simulator"]
    inner = app.wsgi_app

    def wsgi(environ, start_response):
        def start(status, headers, exc_info=None):
            for k, _ in headers:
                if k.lower() == "x-request-id":
                    break
            else:
                headers.append(("X-Request-Id", environ.get("HTTP_X_REQUEST_ID") or sim.new_request_id()))
            return start_response(status, headers, exc_info)
        return inner(environ, start)
    app.wsgi_app = wsgi


_FAILURES = {
    "rate_limit": (429, "Rate limit reached for {model} in organization org-xxx on requests per min (RPM): "
                        "Limit 3, Used 3, Requested 1.", None),
    "invalid_api_key": (401, "Incorrect API key provided.", None),
    "context_length": (400, "This model's maximum context length is 4096 tokens. However, your messages "
                            "resulted in 4500 tokens.", "messages"),
    "server_error": (503, "The server is overloaded or not ready yet.", None),
    "invalid_request": (400, "Invalid request: missing required parameter 'model'.", "model"),
    "model_not_found": (404, "The model '{model}-nonexistent' does not exist", "model"),
}
FAILURE_NAMES = tuple(_FAILURES)


def header_checks(sim: Simulator | None = None, environ: dict | None = None) -> bool:
    """``X-Return-Error`` and random failure injection (api.md 2.7, 2.10); returns whether
    ``X-Cache-Threshold-Finish-Reason`` asks for an immediate cache_threshold finish.
    Raises InjectedError for a forced or injected error, InvalidParam for a header value that
    is not a final HTTP status (an integer from 200 to 599)."""
    sim = sim or simulator()
    if environ is None:
        environ = request.environ
    forced = environ.get("HTTP_X_RETURN_ERROR")
    if forced is not None:
        v = forced.strip()
        if not (v.lstrip("+-").isdigit()):
            raise InvalidParam(f'Invalid X-Return-Error header value "{forced}": must be an integer')
        code = int(v)
        if not 200 <= code <= 599:     # a 1xx is not a final response: the client would hang
            raise InvalidParam(f'Invalid X-Return-Error header value "{forced}": must be an HTTP status code '
                               f'from 200 to 599')
        raise InjectedError(f"Simulated error triggered by X-Return-Error header (code {code})", code)
    cfg = sim.config
    if cfg.failure_injection_rate > 0 and sim.rng.randint(1, 100) <= cfg.failure_injection_rate:
        kinds = cfg.failure_types or FAILURE_NAMES
        kind = kinds[sim.rng.randrange(len(kinds))]
        status, msg, param = _FAILURES[kind]
        raise InjectedError(msg.format(model=cfg.model), status, param)
    return environ.get("HTTP_X_CACHE_THRESHOLD_FINISH_REASON") in GO_TRUE


GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")      # Go strconv.ParseBool's true spellings


def check_data_parallel_rank(cfg, header: str) -> None:
    """vLLM's ``X-data-parallel-rank`` check (``InputProcessor.process_inputs``): a header that
    Python's ``int`` reads outside :func:`~generation.config.values.rank_range` raises Rejected
    (400); one that is not an integer is ignored, as vLLM's ``_get_data_parallel_rank`` ignores it."""
    rank = header_rank(header)
    ranks = rank_range(cfg)
    if rank is not None and not 0 <= rank < ranks:
        raise Rejected(f"data_parallel_rank {rank} is out of range [0, {ranks}).")


def send_image(sim: Simulator, environ: dict) -> bool:
    """``--omni`` (api.md 2.7, 5.1.9): whether this chat response carries an image - the
    ``X-Send-Image`` header parses true (Go ParseBool), else a roll ``randint(1, 100) <=
    --image-emission-rate`` (the rate is read live: ``POST /admin/config`` changes it)."""
    if environ.get("HTTP_X_SEND_IMAGE") in GO_TRUE:
        return True
    rate = sim.config.image_emission_rate
    return rate > 0 and sim.rng.randint(1, 100) <= rate
