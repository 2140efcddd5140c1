"""Helpers every tier imports (``from support import sse_events``): no fixtures here.

The fixtures that use them live in ``tests/conftest.py``.  ``tests/`` is on ``sys.path`` (the
root conftest puts it there), so this package imports as ``support`` from any tier.

``make_app(*flags)``      a Flask app as ``python app.py [flags]`` would serve it
``SimClient``             ``httpx.Client`` on an in-process app or a real server
``ServerPool``            ``python app.py`` processes, started on free ports
``free_port(span)``       a free port (``span`` consecutive ones for data-parallel ranks)
``ROOT``                  the repository root (``app.py``, ``README.md``, ``deploy/``)
``scrape``, ``metric``, ``metric_values``, ``value``   ``/metrics`` samples
``sse_events``, ``named_events``            SSE bodies decoded
``pydantic_400(model, body)``   vLLM's validation handler's words for a pydantic model's errors
``check_inference_route``       a POST route in the OpenAPI document, behind --api-key, in /load
``check_label_reads``           a route's one-token reads on the engine: metrics, seats, aborts
``post_ok``, ``assert_error``   a 200's JSON body; an error in vLLM's envelope, word for word
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
INPROC_URL = "http://sim"


def _clean_env(env: dict | None) -> dict:
    """The environment a simulator sees: ours without pod variables, plus ``env``."""
    out = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE", "POD_IP")}
    out.update(env or {})
    return out


def _argv(flags: tuple, model: str | None) -> list:
    args = []
    if model and "--model" not in flags:
        args += ["--model", model]
    return args + list(flags)


class SimClient(httpx.Client):
    """``httpx.Client`` bound to one simulator (in-process app or real server)."""

    def __init__(self, url: str, app=None, **kw):
        transport = httpx.WSGITransport(app=app) if app is not None else None
        super().__init__(base_url=url, transport=transport, timeout=kw.pop("timeout", 30), **kw)
        self.url = url
        self.app = app

    @property
    def sim(self):
        """The in-process :class:`generation.engine.simulator.Simulator`."""
        return self.app.extensions["simulator"]

    def session(self, **kw) -> httpx.Client:
        """A new ``httpx.Client`` on the same simulator (own headers, timeout, ...)."""
        transport = httpx.WSGITransport(app=self.app) if self.app is not None else None
        return httpx.Client(base_url=self.url, transport=transport, **kw)

    def openai(self, **kw):
        import openai
        kw.setdefault("api_key", "x")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        if self.app is not None:
            kw.setdefault("http_client", httpx.Client(transport=httpx.WSGITransport(app=self.app)))
        return openai.OpenAI(base_url=self.url + "/v1", **kw)

    def anthropic(self, **kw):
        import anthropic
        kw.setdefault("api_key", "sk-ant-test")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        if self.app is not None:
            import httpx2     # the anthropic SDK's own httpx fork
            kw.setdefault("http_client", httpx2.Client(transport=httpx2.WSGITransport(app=self.app)))
        return anthropic.Anthropic(base_url=self.url, **kw)


def make_app(*flags: str, env: dict | None = None, model: str | None = "test-model"):
    """A Flask app as ``python app.py [flags]`` would serve it (same argv and environment)."""
    from app import create_app
    from generation.config.cli import load_config
    return create_app(load_config(_argv(flags, model), env=_clean_env(env)))


# ---- real servers ------------------------------------------------------------------------------
def free_port(span: int = 1) -> int:
    """A free port ``p`` such that ``p .. p+span-1`` are all free (data-parallel ranks)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for extra in range(1, span):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", port + extra))
        except OSError:
            continue
        return port


class ServerPool:
    """``python app.py`` processes keyed by (flags, env, model)."""

    def __init__(self):
        self.procs: dict = {}

    def start(self, *flags: str, env: dict | None = None, model: str | None = "test-model") -> str:
        key = (flags, tuple(sorted((env or {}).items())), model)
        if key in self.procs:
            return self.procs[key][1]
        span = 1
        if "--data-parallel-size" in flags:
            span = int(flags[flags.index("--data-parallel-size") + 1])
        port = free_port(span)
        args = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1"]
        args += _argv(flags, model)
        log = open(ROOT / ".pytest_cache" / f"server-{port}.log", "wb") if (ROOT / ".pytest_cache").is_dir() \
            else subprocess.DEVNULL
        proc = subprocess.Popen(args, cwd=ROOT, env=_clean_env(env), stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {args}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            proc.kill()
            raise RuntimeError("server did not start")
        self.procs[key] = (proc, base)
        return base

    def stop_all(self):
        """SIGINT (quick shutdown: a graceful SIGTERM would wait for SDK clients' idle
        keep-alive connections), then SIGKILL whatever is still alive after 5 s."""
        for proc, _ in self.procs.values():
            proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 5
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


# ---- response helpers --------------------------------------------------------------------------
def scrape(base) -> dict:
    """``{(sample_name, frozenset(labels.items())): value}`` of ``/metrics``; ``base`` is a
    :class:`SimClient` or a base URL."""
    from prometheus_client.parser import text_string_to_metric_families
    r = base.get("/metrics") if isinstance(base, httpx.Client) else httpx.get(base + "/metrics", timeout=10)
    assert r.status_code == 200
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric_values(samples: dict, name: str, **labels) -> list:
    """Values of the ``name`` samples whose labels include ``labels`` (other labels, such as
    vLLM's ``engine``, may be present)."""
    want = set(labels.items())
    return [v for (n, lab), v in samples.items() if n == name and want <= lab]


def metric(samples: dict, name: str, **labels) -> float:
    """The one ``name`` sample whose labels include ``labels``; KeyError if none or several."""
    vals = metric_values(samples, name, **labels)
    if len(vals) != 1:
        raise KeyError(f"{name}{labels}: {len(vals)} matching samples")
    return vals[0]


def value(samples: dict, name: str, **labels) -> float:
    """The sample with exactly these labels; KeyError if the series does not exist (a renamed
    metric or bucket must fail the test, not read as 0)."""
    labels.setdefault("model_name", "test-model")
    labels.setdefault("engine", "0")          # every vllm:* series carries the data-parallel rank
    return samples[(name, frozenset(labels.items()))]


# ---- SSE helpers -------------------------------------------------------------------------------
# The server flags of a stream's three timing paths (issue 32): nothing to wait for; a constant TTFT
# and ITL (one token schedule, emitted by the server); a drawn ITL (a deadline per token)
TIMING_PATHS = {"all at once": (), "schedule from the first token": ("--time-to-first-token", "2ms",
                                                                     "--inter-token-latency", "1ms"),
                "deadline per token": ("--inter-token-latency", "1ms", "--inter-token-latency-std-dev", "0.2ms")}


def sse_events(body: str) -> list:
    """``data:`` payloads of an SSE body, in order; JSON decoded except ``[DONE]``."""
    out = []
    for event in body.split("\n\n"):
        for line in event.split("\n"):
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def streamed(client, path: str, body: dict) -> list:
    """The ``data:`` payloads of a streamed ``POST path`` (``model`` test-model, ``stream``
    true, then ``body``), checked to answer 200 and end with ``[DONE]``, which is left out."""
    r = client.post(path, json={"model": "test-model", "stream": True, **body})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    return events[:-1]


def named_events(body: str) -> list:
    """``(event, data)`` pairs of an SSE body with ``event:`` lines (Anthropic, Responses)."""
    out = []
    for block in body.split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data is not None:
            out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


def post_ok(c, path: str, body: dict, **kw) -> dict:
    """The JSON body of ``body`` POSTed to ``path``, which must answer 200."""
    r = c.post(path, json=body, **kw)
    assert r.status_code == 200, r.text
    return r.json()


ERROR_TYPES = {404: "NotFoundError", 429: "RateLimitError", 501: "NotImplementedError",
               503: "Service Unavailable"}        # 503: the admission limits' (GracefulHTTPError)


def error_of(r, status: int) -> dict:
    """The ``error`` object of ``r``, after checking its status and the envelope's ``code``."""
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["code"] == status
    return e


def assert_error(r, status: int, message: str, param=None) -> None:
    """``r`` is vLLM's error envelope: ``status``, ``message``, ``param`` and the type a 400 with
    that message has (:func:`error_type_400`) or :data:`ERROR_TYPES` says."""
    assert r.status_code == status, r.text
    kind = error_type_400(message) if status == 400 else ERROR_TYPES[status]
    assert r.json() == {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error_type_400(message: str) -> str:
    """The ``type`` of a 400 with ``message`` in vLLM 0.34's envelope: "Bad Request" for what its
    validation handler answers (pydantic's "N validation error(s):" and the body's JSON), else
    "BadRequestError" (raised while serving: ``create_error_response``)."""
    import re
    if re.match(r"\d+ validation errors?:", message) or message.startswith((
            "Failed to parse the request body as JSON", "Request body must be a JSON object.")):
        return "Bad Request"
    return "BadRequestError"


# vLLM 0.34's validation handler (serve/exception_handling/handlers/validation.py): the loc
# segments it drops (_INTERNAL_LOC_MARKERS, and any with a bracket), how it echoes an input
LOC_MARKERS = frozenset((
    "function-wrap", "function-after", "function-before", "function-plain", "json-or-python", "lax-or-strict",
    "chain", "default", "nullable", "tagged-union", "union", "call", "arguments", "is-instance", "is-subclass",
    "callable", "str", "int", "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
    "complex", "none", "nonetype"))


def _error_input(value):
    """The handler's ``_summarize_error_input``."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "...[truncated]"
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text if len(text) <= 200 else text[:200] + "...[truncated]"


def pydantic_400(model, body: dict) -> tuple[str, str] | None:
    """``(message, param)`` of vLLM's validation handler for pydantic ``model`` (a replica of a
    vLLM request model) reading ``body``, or None when it passes."""
    import re
    import pydantic
    try:
        model.model_validate(body)
        return None
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
    locs, lines = [], []
    for e in errors:
        e = dict(e)
        e["loc"] = ".".join(str(p) for p in ("body", *e["loc"])
                            if not re.search(r"[\[\]{}()]", str(p)) and str(p).lower() not in LOC_MARKERS)
        e["input"] = _error_input(e["input"])
        locs.append(e["loc"])
        text = str(e)
        lines.append(f"  {text if len(text) <= 1000 else text[:1000] + '...[truncated]'}")
    label = "error" if len(errors) == 1 else "errors"
    more = [f"  ...and {len(errors) - 10} more {label}"] if len(errors) > 10 else []
    return f"{len(errors)} validation {label}:\n" + "\n".join(lines[:10] + more), locs[0]


def check_inference_route(app_client, path: str, body: dict, function: str) -> None:
    """What every vLLM inference POST route (a ``load_aware_call``) shares: its OpenAPI operation
    (FastAPI's, named after the endpoint ``function``), ``--api-key`` (401 without it), and
    ``/load`` counting a request in flight (``--enable-server-load-tracking``)."""
    import re
    import gevent
    op_id = re.sub(r"\W", "_", f"{function}{path}") + "_post"
    assert app_client().get("/openapi.json").json()["paths"][path] == {"post": {
        "summary": function.replace("_", " ").title(), "operationId": op_id,
        "responses": {"200": {"description": "Successful Response", "content": {"application/json": {"schema": {}}}}}}}
    c = app_client("--api-key", "k")
    r = c.post(path, json=body)
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    assert c.post(path, json=body, headers={"Authorization": "Bearer k"}).status_code == 200
    c = app_client("--enable-server-load-tracking", "--time-to-first-token", "200ms")
    g = gevent.spawn(c.post, path, json=body)
    gevent.sleep(0.05)
    assert c.get("/load").json() == {"server_load": 1}
    assert g.get(timeout=5).status_code == 200
    assert c.get("/load").json() == {"server_load": 0}


def check_label_reads(app_client, path: str, three: dict, two: dict) -> None:
    """A route that runs vLLM's label reads (``label_reads.next_token_label_reads``: one engine
    request of ``max_tokens=1`` per item or question), given a ``three``-read and a ``two``-read
    body: each read is a request in ``/metrics``, waits for a seat and takes the prefill time,
    and frees its seat when aborted."""
    import time
    import gevent
    c = app_client("--time-to-first-token", "0", "--max-model-len", "2048")
    assert c.post(path, json=three).status_code == 200
    m = scrape(c)
    assert metric(m, "vllm:request_success_total", finished_reason="length") == 3
    assert metric(m, "vllm:generation_tokens_total") == metric(m, "vllm:request_generation_tokens_sum") == 3
    assert metric(m, "vllm:request_prompt_tokens_count") == metric(m, "vllm:request_params_n_count") == 3
    assert metric(m, "vllm:request_params_max_tokens_sum") == 3       # max_tokens=1 per read
    assert metric(m, "vllm:e2e_request_latency_seconds_count") == 3
    c = app_client("--max-num-seqs", "1", "--time-to-first-token", "40ms")
    t = time.monotonic()
    assert c.post(path, json=three).status_code == 200
    assert time.monotonic() - t >= 0.12                          # one seat: three prefills in a row
    assert metric(scrape(c), "vllm:request_queue_time_seconds_sum") >= 0.04 + 0.08 - 0.005
    assert c.sim.running == 0 and not c.sim.waiting
    c = app_client("--time-to-first-token", "2s", "--max-num-seqs", "1")
    g = gevent.spawn(c.post, path, json=two)
    gevent.sleep(0.05)
    assert c.sim.running == 1 and len(c.sim.waiting) == 1
    c.sim.cancel(list(c.sim.running_seqs) + list(c.sim.waiting))
    g.join(timeout=5)
    assert c.sim.running == 0 and not c.sim.waiting
    assert metric(scrape(c), "vllm:request_success_total", finished_reason="abort") == 2


# a minimal valid body of each inference route (the field fuzzers and type-error tests start from these)
ROUTE_BODIES = {
    "/v1/chat/completions": {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "/v1/completions": {"model": "test-model", "prompt": "hi", "max_tokens": 4},
    "/v1/responses": {"model": "test-model", "input": "hi", "max_output_tokens": 4},
    "/v1/messages": {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "/v1/embeddings": {"model": "test-model", "input": "hi"},
    "/pooling": {"model": "test-model", "input": "hi"},
    "/classify": {"model": "test-model", "input": "hi"},
    "/rerank": {"model": "test-model", "query": "a", "documents": ["b", "c"]},
    "/score": {"model": "test-model", "text_1": "a", "text_2": "b"},
    "/tokenize": {"model": "test-model", "prompt": "hi"},
}


EXTERNAL_ID_FORMATS = {"/v1/chat/completions": ("chatcmpl-{}",), "/v1/messages": ("chatcmpl-{}",),
                       "/cohere/v2/chat": ("chatcmpl-{}",), "/v1/completions": ("cmpl-{}-0", "cmpl-{}-1"),
                       "/v1/responses": ("resp_{}_0",), "/inference/v1/generate": ("generate-tokens-{}",),
                       "/v1/audio/transcriptions": ("transcribe-{}", "transcribe-{}-0", "transcribe-{}-1"),
                       "/v1/audio/translations": ("translate-{}", "translate-{}-0", "translate-{}-1")}


def external_ids(path: str, rid: str) -> list:
    """The ids vLLM's ``abort_requests`` knows a request sent to ``path`` with ``X-Request-Id:
    rid`` by: its engine requests' external ids (``chatcmpl-<id>``, ``cmpl-<id>-<i>``, ...;
    the simulator's ``blueprints.in_flight.external_id``), those of a second prompt or audio
    chunk too."""
    return [f.format(rid) for f in EXTERNAL_ID_FORMATS.get(path, ("{}",))]


def posted_then_aborted(base: str, jobs: dict, after: float, sequences: int = 0) -> dict:
    """Send each of ``jobs`` (``{request id: httpx.post keywords, "path" among them}``) with its
    id as ``X-Request-Id``, each in a thread of its own; ``after`` seconds later abort them all
    with ``/inference/v1/abort_requests`` (asserting its empty 200); returns ``{request id:
    response}`` once they have ended (15 s at most each).  ``sequences``: first wait (10 s at
    most) until the server holds that many running or waiting sequences, so that on a loaded
    machine the abort does not come before a slow upload has arrived."""
    import threading
    out = {}

    def held() -> int:
        text = httpx.get(base + "/metrics", timeout=10).text
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))))

    def post(rid, kw):
        kw = dict(kw)
        out[rid] = httpx.post(base + kw.pop("path"), headers={"X-Request-Id": rid}, timeout=30, **kw)

    threads = [threading.Thread(target=post, args=(rid, kw)) for rid, kw in jobs.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sequences and held() < sequences and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(after)
    ids = [i for rid, kw in jobs.items() for i in external_ids(kw["path"], rid)]
    r = httpx.post(base + "/inference/v1/abort_requests", json={"request_ids": ids}, timeout=10)
    assert (r.status_code, r.content) == (200, b"")
    for t in threads:
        t.join(15)
    return out


def until_streaming(client, rid: str, at_most: float, then: float = 0.1) -> None:
    """In-process (a greenlet beside the request's): wait until the request whose id contains
    ``rid`` has made its first token (its sequence's ``first_token_at``; in step mode its engine
    request's output), or ``at_most`` seconds; then ``then`` seconds more (a few tokens).  Never
    longer than the fixed ``at_most`` + ``then`` it replaces, and sooner where the token is seen:
    a request's first token can come 0.1 s or 0.3 s after its spawn, and an abort test needs a
    few."""
    import gevent
    end = time.monotonic() + at_most
    sim = client.sim

    def made() -> bool:
        engine = sim.engine
        if engine is not None:
            return any(r.num_output > 0 and r.seq is not None and rid in r.seq.request.request_id
                       for r in engine.scheduler.running)
        return any(s.first_token_at and rid in s.request.request_id for s in list(sim.running_seqs))
    gevent.sleep(0.01)
    while not made() and time.monotonic() < end:
        gevent.sleep(0.01)
    gevent.sleep(then)


def vllm_chunk_lengths(a, sr: int) -> list:
    """The samples in each chunk vLLM 0.34's ``split_audio`` cuts mono float32 audio ``a`` (16 kHz)
    into, at its defaults (30 s, 1 s overlap, 1,600-sample windows): ``find_split_point``'s
    quietest window, the first of equal ones."""
    import math
    size, overlap, w = int(sr * 30.0), int(sr * 1.0), 1600
    out, i = [], 0
    while i < len(a):
        if i + size >= len(a):
            out.append(len(a) - i)
            break
        seg, best, cut = a[i + size - overlap:i + size], math.inf, i + size - overlap
        for k in range(0, len(seg) - w, w):
            energy = (seg[k:k + w] ** 2).mean() ** 0.5
            if not math.isnan(energy) and energy < best:
                best, cut = energy, i + size - overlap + k
        cut = cut if cut > i else i + size
        out.append(cut - i)
        i = cut
    return out
