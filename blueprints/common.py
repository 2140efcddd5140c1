"""Helpers every blueprint shares: body parsing, JSON/SSE responses, headers, the checks that
run before a generation request reaches the engine (api.md 2.5-2.8).
"""
from __future__ import annotations

import logging
import socket
import time

import gevent
import orjson
from flask import Response, current_app, request
from gevent.socket import wait_read

from generation.errors import APIError
from generation.engine import ClientDisconnected, Simulator

JSON_MIME = "application/json"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def simulator() -> Simulator:
    return current_app.extensions["simulator"]


def parse_json_body() -> dict:
    """The request body as a JSON object.  Raises APIError 400 naming the problem."""
    raw = request.get_data(cache=False)
    if not raw:
        raise APIError("Request body is empty; expected a JSON object.", 400)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise APIError(f"Failed to parse the request body as JSON: {e}", 400) from None
    if not isinstance(body, dict):
        raise APIError("Request body must be a JSON object.", 400)
    return body


def dumps(obj) -> bytes:
    return orjson.dumps(obj)


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(obj), status=status, mimetype=JSON_MIME, headers=headers)


def error_response(err: APIError) -> Response:
    return Response(orjson.dumps(err.body()), status=err.status, mimetype=JSON_MIME)


class DisconnectWatcher:
    """Aborts a request's sequences as soon as its client closes the connection, as vLLM
    aborts requests whose client went away: slots are freed at once, queued sequences leave
    the queue, nothing is counted as a success.

    A greenlet waits until the client socket is readable; during a response the client sends
    nothing, so readable-with-no-data means EOF.  Only used when the request will wait."""

    def __init__(self, sim, seqs, environ):
        self.sim = sim
        self.seqs = seqs
        self.sock = environ.get("gunicorn.socket")
        self.greenlet = None

    def __enter__(self):
        if self.sock is not None and self.sim.expects_delay(self.seqs):
            self.greenlet = gevent.spawn(self._watch)
        return self

    def _watch(self):
        try:
            wait_read(self.sock.fileno())
            data = self.sock.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            data = b""
        if not data:
            self.sim.cancel(self.seqs)

    def __exit__(self, *exc):
        if self.greenlet is not None:
            self.greenlet.kill(block=False)
        return False


def run_to_completion(sim, seqs) -> None:
    """Non-streaming: wait for every sequence; raises ClientDisconnected if the client left."""
    if not sim.expects_delay(seqs):
        sim.complete(seqs)
        return
    with DisconnectWatcher(sim, seqs, request.environ):
        sim.complete(seqs)


def sse_response(body_iter, headers: dict | None = None, sim=None, seqs=None, batch: bool = False) -> Response:
    """A ``text/event-stream`` response whose chunks are flushed as they are yielded.

    An empty first chunk makes gunicorn send the headers at once (vLLM sends them before the
    first token).  With ``sim``/``seqs`` the request is aborted when the client leaves.  With
    ``batch`` the body marks the points where the stream is about to wait with empty chunks,
    and chunks due at the same instant go out in one write (clients see the same bytes).
    The generator is handed to the server as is (``direct_passthrough``): per token it is the
    only layer between the renderer and the socket."""
    environ = request.environ

    def body():
        try:
            yield b""
            if sim is None:
                yield from body_iter
                return
            with DisconnectWatcher(sim, seqs, environ):
                try:
                    if not batch:
                        yield from body_iter
                        return
                    buf = []
                    for c in body_iter:
                        if c:
                            buf.append(c)
                        elif buf:
                            yield buf[0] if len(buf) == 1 else b"".join(buf)
                            buf = []
                    if buf:
                        yield b"".join(buf)
                except ClientDisconnected:
                    return
        except Exception as e:         # a bug after the 200 went out: tell the client in-band
            logging.getLogger("vllm_sim").exception("error while streaming")
            err = e if isinstance(e, APIError) else APIError(f"Internal server error: {type(e).__name__}: {e}", 500)
            yield b"data: " + orjson.dumps(err.body()) + b"\n\ndata: [DONE]\n\n"
        finally:
            # However the stream ends (client gone before the first write included), nothing
            # may keep a slot or a queue place.
            if sim is not None:
                sim.cancel(seqs)
            close = getattr(body_iter, "close", None)
            if close is not None:
                close()
            gevent.sleep(0)   # let other keep-alive connections have a turn (see app.py)
    h = dict(SSE_HEADERS)
    if headers:
        h.update(headers)
    return Response(body(), status=200, mimetype="text/event-stream", headers=h, direct_passthrough=True)


CHUNK_END = b"}\n\n"


class ChunkFrame:
    """Pre-rendered pieces of an OpenAI chunk stream (chat and completions), so that per token
    only the piece is serialised: ``heads[i]`` opens a chunk for choice ``i`` up to its index,
    ``tail(n)`` closes a chunk after ``n`` more generated tokens (with the running usage when
    ``stream_options.continuous_usage_stats`` is on, else the constant :data:`CHUNK_END`)."""

    def __init__(self, chunk_id: str, obj: str, model: str, seqs, continuous: bool):
        self.envelope = (b'data: {"id":' + dumps(chunk_id) + b',"object":"' + obj.encode() + b'","created":' +
                         str(int(time.time())).encode() + b',"model":' + dumps(model) + b',"choices":[')
        self.heads = [self.envelope + b'{"index":' + str(s.index).encode() for s in seqs]
        self.continuous = continuous
        self.prompt_tokens = sum({s.prompt_index: s.prompt_len for s in seqs}.values())
        self.completion_tokens = 0

    def tail(self, generated: int = 0) -> bytes:
        if not self.continuous:
            return CHUNK_END
        self.completion_tokens += generated
        p, c = self.prompt_tokens, self.completion_tokens
        return b',"usage":' + dumps({"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}) + CHUNK_END

    def usage_chunk(self, usage_obj: dict) -> bytes:
        """The trailing ``include_usage`` chunk: empty ``choices`` and the request's usage."""
        return self.envelope + b'],"usage":' + dumps(usage_obj) + CHUNK_END


def request_id(sim: Simulator | None = None) -> str:
    """``X-Request-Id`` when ``--enable-request-id-headers`` is on and the header is present,
    else a fresh id (api.md 2.5)."""
    sim = sim or simulator()
    if sim.config.enable_request_id_headers:
        rid = request.environ.get("HTTP_X_REQUEST_ID")
        if rid:
            return rid
    return sim.new_request_id()


def response_headers(rid: str | None, sim: Simulator | None = None) -> dict:
    """Pod / namespace / request-id headers for a successful response (api.md 2.6)."""
    cfg = (sim or simulator()).config
    h = {}
    if cfg.pod_name:
        h["x-inference-pod"] = cfg.pod_name
        h["x-inference-port"] = str(cfg.port)
    if cfg.pod_namespace:
        h["x-inference-namespace"] = cfg.pod_namespace
    if rid is not None and cfg.enable_request_id_headers:
        h["X-Request-Id"] = rid
    return h


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


def header_checks(sim: Simulator | None = None) -> bool:
    """``X-Return-Error`` and random failure injection (api.md 2.7, 2.10); returns whether
    ``X-Cache-Threshold-Finish-Reason`` asks for an immediate cache_threshold finish.
    Raises APIError for a forced or injected error."""
    sim = sim or simulator()
    environ = request.environ
    forced = environ.get("HTTP_X_RETURN_ERROR")
    if forced is not None:
        v = forced.strip()
        if not (v.lstrip("+-").isdigit()):
            raise APIError(f'Invalid X-Return-Error header value "{forced}": must be an integer', 400)
        code = int(v)
        raise APIError(f"Simulated error triggered by X-Return-Error header (code {code})", code)
    cfg = sim.config
    if cfg.failure_injection_rate > 0 and sim.rng.randint(1, 100) <= cfg.failure_injection_rate:
        kinds = cfg.failure_types or FAILURE_NAMES
        kind = kinds[sim.rng.randrange(len(kinds))]
        status, msg, param = _FAILURES[kind]
        raise APIError(msg.format(model=cfg.model), status, param)
    flag = environ.get("HTTP_X_CACHE_THRESHOLD_FINISH_REASON")
    return flag in ("1", "t", "T", "TRUE", "true", "True")


def usage(prompt: int, completion: int, cached: int | None = 0) -> dict:
    """OpenAI usage with vLLM's ``prompt_tokens_details.cached_tokens``."""
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None if cached is None else {"cached_tokens": cached}}


def effective_max_tokens(max_tokens, ignore_eos: bool, n=None, field: str = "max_tokens") -> None:
    """vLLM's shared checks on n and max tokens (api.md 2.8 step 8).  ``field`` is the name the
    client used for the limit.  Raises APIError 400 naming it."""
    if n is not None and n < 1:
        raise APIError(f"n must be at least 1, got {n}.", 400, "n")
    if max_tokens is not None and max_tokens <= 0:
        raise APIError(f"{field} must be at least 1, got {max_tokens}. "
                       f"(Max completion tokens and max tokens should be positive)", 400, field)
    if ignore_eos and max_tokens is None:
        raise APIError("Ignore_eos is true but max_completion_tokens (or max_tokens) is not set", 400,
                       "max_tokens")


def check_kv_transfer(kv: dict | None, stream: bool) -> None:
    if kv and kv.get("do_remote_decode") and stream:
        raise APIError("Prefill does not support streaming", 400, "stream")


REMOTE_DECODE_PARAMS = {"do_remote_decode": False, "do_remote_prefill": True, "remote_engine_id": "DUMMY_ID",
                        "remote_block_ids": ["DUMMY_ID"], "remote_host": "DUMMY", "remote_port": 1234,
                        "tp_size": 1}
