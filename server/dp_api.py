"""vLLM's API server over a node's data-parallel engines: ``--data-parallel-size N`` without
``--data-parallel-external-lb`` serves one endpoint, ``--port``, in front of N engines, as
``vllm serve -dp N`` does (its ``DPLBAsyncMPClient``, ``vllm/v1/engine/core_client.py``).

The N engines live in this process, each built by :func:`app.create_app` from its own copy of
the configuration (``--data-parallel-rank`` r: its ``engine`` label, KV-event endpoint and rank,
seed); the tokenizer, step mode's resolved settings, the readiness state and the Responses
store are shared, as the one API server holds them.  :class:`DataParallelAPI` hands each
request to an engine's app:

* an inference request (a ``POST`` that runs on an engine, and the realtime WebSocket) to the
  rank named by the ``X-data-parallel-rank`` header, else to the least loaded: vLLM 0.34's score
  (:meth:`DataParallelBalancer.choose`);
* an operation on the engines (sleep, wake-up, pause, LoRA adapters, cache resets, checkpoint,
  weight updates, the simulator's ``/admin/config``) to every rank, as vLLM's
  ``call_utility_all`` (:meth:`DataParallelAPI._broadcast`); rank 0's answer is the reply,
  unless another engine failed it (its 5xx) or, for ``/reset_prefix_cache`` and ``/wake_up``,
  answered ``false`` / ``sleeping`` (vLLM's ``all(...)``: :meth:`DataParallelAPI._combine`);
  aborts to rank 0, which aborts the requests on whichever engine runs them;
* everything else (``/health``, ``/v1/models``, tokenizing and rendering, ``/metrics``) to rank
  0, whose ``/metrics``, ``/load`` and ``/kv_event_sources`` cover every rank (through
  ``app.extensions["data_parallel"]``).
"""
from __future__ import annotations

import io
import logging
import time

import orjson

from generation.config.values import header_rank
from generation.fleet.routing import vllm_dp_score
from blueprints.streaming import DP_SPREAD_KEY
from generation.engine.admission import queue_counts
from generation.metrics.scrape import kv_cache_usage

log = logging.getLogger("vllm_sim")

LB_REFRESH_S = 0.1        # vLLM's DPCoordinator publishes the engines' counts every 100 ms
RANK_HEADER = "HTTP_X_DATA_PARALLEL_RANK"

# Operations vLLM's API server sends to every engine (``call_utility_all_async`` / ``collective_rpc``).
BROADCAST = frozenset((
    "/sleep", "/wake_up", "/pause", "/resume", "/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
    "/release_kv_cache_memory", "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/collective_rpc",
    "/start_profile", "/stop_profile", "/checkpoint/prepare", "/checkpoint/restore", "/scale_elastic_ep",
    "/update_weights", "/init_weight_transfer_engine",
    "/start_weight_update", "/start_draft_weight_update", "/finish_weight_update", "/update_weight_version",
    "/shutdown_weight_transfer_engine", "/admin/config", "/fake_metrics"))
# POST routes the API server answers itself (no engine): rank 0.
API_ONLY = frozenset(("/tokenize", "/detokenize", "/v1/messages/count_tokens", "/is_scaling_elastic_ep", "/ping",
                      "/abort_requests", "/inference/v1/abort_requests"))     # these two abort on every engine
# The routes whose X-data-parallel-rank header vLLM passes on (its pooling and speech-to-text
# routes do not: the balancer places those).
RANK_ROUTES = frozenset(("/v1/chat/completions", "/v1/completions", "/v1/chat/completions/batch", "/v1/responses",
                         "/v1/messages", "/inference/v1/generate",
                         # SageMaker's route hands chat / completions bodies to those handlers, which read
                         # the header (the engine's check already refuses a rank out of range here)
                         "/invocations"))


class DataParallelBalancer:
    """vLLM 0.34's choice of an engine for a request (``DPLBAsyncMPClient.get_core_engine_for_request``):
    the coordinator's ``[waiting, running, kv_cache_usage]`` per engine, refreshed every
    :data:`LB_REFRESH_S`, and this server's own requests in flight per engine.  An engine's score is
    :func:`~generation.fleet.routing.vllm_dp_score`; the lowest wins, scanning from a start
    index that turns by one each request (ties spread round-robin); the winner's waiting count
    goes up by one until the next refresh.

    ``counts()``: the engines' ``[waiting, running, kv_usage]`` now; ``clock``: seconds."""

    def __init__(self, size: int, counts, clock=time.monotonic):
        self.size = size
        self.counts = counts
        self.clock = clock
        self.in_flight = [0] * size
        self.snapshot = [[0, 0, 0.0] for _ in range(size)]
        self.taken_at = float("-inf")
        self.start = 0

    def choose(self) -> int:
        """The engine for the next request; counts it in flight (:meth:`done` ends it)."""
        now = self.clock()
        if now - self.taken_at >= LB_REFRESH_S:
            self.snapshot = [list(c) for c in self.counts()]
            self.taken_at = now
        best, best_score = 0, float("inf")
        for i in range(self.size):
            idx = (self.start + i) % self.size
            waiting, running, usage = self.snapshot[idx]
            score = vllm_dp_score(waiting, running, usage, self.in_flight[idx])
            if score < best_score:
                best, best_score = idx, score
        self.snapshot[best][0] += 1
        self.start = (self.start + 1) % self.size
        self.in_flight[best] += 1
        return best

    def unpick(self, rank: int, stamp: float) -> None:
        """A request :meth:`choose` placed on ``rank`` was refused before it reached the engine:
        its bump of the waiting count is taken back if the snapshot it went into (``stamp``,
        its ``taken_at``) still stands."""
        if stamp == self.taken_at and self.snapshot[rank][0] > 0:
            self.snapshot[rank][0] -= 1

    def take(self, rank: int) -> int:
        """A request sent to ``rank`` by its header: counted in flight."""
        self.in_flight[rank] += 1
        return rank

    def done(self, rank: int) -> None:
        self.in_flight[rank] -= 1


def engine_counts(sim) -> list:
    """``[waiting, running, kv_cache_usage]`` of one simulator's engine now (what vLLM's engine
    reports to its coordinator)."""
    return [*queue_counts(sim), kv_cache_usage(sim)]


class _InFlight:
    """A streamed response body that ends its request's counts in flight when closed (``ranks``:
    the engine of each of its engine requests)."""
    __slots__ = ("body", "balancer", "ranks")

    def __init__(self, body, balancer, ranks):
        self.body, self.balancer, self.ranks = body, balancer, ranks

    def __iter__(self):
        return iter(self.body)

    def close(self):
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            if self.balancer is not None:
                for rank in self.ranks:
                    self.balancer.done(rank)
                self.balancer = None


class _Recorded:
    """``wsgi.input`` as rank 0 reads it, keeping the bytes for the other ranks."""
    __slots__ = ("raw", "parts")

    def __init__(self, raw):
        self.raw, self.parts = raw, []

    def read(self, *args):
        data = self.raw.read(*args)
        self.parts.append(data)
        return data

    def readline(self, *args):
        data = self.raw.readline(*args)
        self.parts.append(data)
        return data

    def __iter__(self):
        for line in self.raw:
            self.parts.append(line)
            yield line


class DataParallelAPI:
    """The WSGI app of one endpoint over ``apps`` (rank r's app at index r; see the module
    docstring).  ``extensions``: rank 0's simulator and the shared lifecycle, for the worker."""

    def __init__(self, apps: list):
        self.apps = apps
        self.sims = [a.extensions["simulator"] for a in apps]
        self.balancer = DataParallelBalancer(len(apps), lambda: [engine_counts(s) for s in self.sims])
        lifecycle = apps[0].extensions.get("lifecycle")
        store = getattr(self.sims[0], "response_store", None)
        for app, sim in zip(apps, self.sims):
            app.extensions["lifecycle"] = lifecycle    # one API server: one readiness
            sim.dp_peers = tuple(self.sims)            # and one admission count
            if store is not None:
                sim.response_store = store             # a response made on any rank is found on any
        apps[0].extensions["data_parallel"] = self
        from .auth import APIKeyMiddleware
        outer = apps[0].wsgi_app                       # --api-key's check is the outermost layer
        self.auth = outer if isinstance(outer, APIKeyMiddleware) else None
        self.extensions = {"simulator": self.sims[0], "lifecycle": lifecycle, "data_parallel": self}

    # ---- what rank 0 reports for all ----------------------------------------------------------
    def render_metrics(self) -> bytes:
        from generation.metrics.merge import merge_exposition
        return merge_exposition([s.metrics.render().decode() for s in self.sims]).encode()

    def registry(self):
        from generation.metrics.merge import MergedRegistry
        return MergedRegistry(s.metrics.registry for s in self.sims)

    def server_load(self) -> int:
        return sum(s.server_load for s in self.sims)

    def idle(self) -> bool:
        from .worker import idle_of
        return all(idle_of(s)() for s in self.sims)

    # ---- WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO", "")
        if method == "POST":
            if path in BROADCAST:
                return self._broadcast(environ, start_response)
            if path in API_ONLY or path.startswith("/metrics") or path.endswith(("/render", "/derender")) \
                    or (path.startswith("/v1/responses/") and path.endswith("/cancel")):
                return self.apps[0](environ, start_response)
            return self._balanced(environ, start_response)
        if path == "/v1/realtime" and method == "GET":
            return self._balanced(environ, start_response)
        return self.apps[0](environ, start_response)

    def _balanced(self, environ, start_response):
        balancer = self.balancer
        wanted = environ.get(RANK_HEADER) if environ.get("PATH_INFO") in RANK_ROUTES else None
        rank = header_rank(wanted) if wanted is not None else None    # not an integer: vLLM ignores it
        if rank is not None and not 0 <= rank < balancer.size:
            # vLLM refuses it in InputProcessor.process_inputs, before DPLBAsyncMPClient picks an
            # engine: no engine's count changes; rank 0's app answers vLLM's error
            return self.apps[0](environ, start_response)
        refused = []
        if rank is None:
            ranks, stamps = [balancer.choose()], [balancer.taken_at]

            def begin(status, headers, exc_info=None):
                if status[:1] == "4":
                    refused.append(status)
                return start_response(status, headers, exc_info)

            def spread():             # a further engine request of this one: placed on its own
                ranks.append(balancer.choose())
                stamps.append(balancer.taken_at)
                return self.sims[ranks[-1]]
            environ[DP_SPREAD_KEY] = spread
        else:
            ranks, begin = [balancer.take(rank)], start_response
        try:
            body = self.apps[ranks[0]](environ, begin)
        except BaseException:
            for r in ranks:
                balancer.done(r)
            raise
        if refused:                   # vLLM refuses a request before it picks an engine: no trace
            for r, at in zip(ranks, stamps):
                balancer.unpick(r, at)
        if isinstance(body, (list, tuple)):     # answered whole (the fast path's list too): the request is over
            for r in ranks:
                balancer.done(r)
            return body
        return _InFlight(body, balancer, ranks)

    def _broadcast(self, environ, start_response):
        """Rank 0's answer, once every rank has run the operation.  Without a body (sleep,
        wake-up, pause, resume, cache resets, checkpoint: query parameters) the ranks run it
        together, as vLLM's ``call_utility_all`` (a ``/pause?mode=wait`` drains them all at
        once); with one, the others run it with rank 0's body once rank 0 has accepted it."""
        import gevent
        length = environ.get("CONTENT_LENGTH")
        bodiless = (not length or length == "0") and "HTTP_TRANSFER_ENCODING" not in environ
        jobs = []
        # the replicas run below the API key's check: only a request that passes it starts them early
        if bodiless and len(self.apps) > 1 and (self.auth is None or self.auth.authorized(environ)):
            jobs = [gevent.spawn(self._replay, app, _replica_environ(environ, b"")) for app in self.apps[1:]]
        recorded = environ["wsgi.input"] = _Recorded(environ["wsgi.input"])
        reply: list = []
        chunks: list = []

        def keep(status, headers, exc_info=None):
            reply[:] = [status, headers]
            return chunks.append

        try:
            body = self.apps[0](environ, keep)
            try:
                chunks.extend(body)
            finally:
                if hasattr(body, "close"):
                    body.close()
        finally:
            gevent.joinall(jobs)
        if not jobs and reply and reply[0][:1] == "2" and len(self.apps) > 1:
            data = b"".join(recorded.parts)      # each replica reads a stream of its own
            jobs = [gevent.spawn(self._replay, app, _replica_environ(environ, data)) for app in self.apps[1:]]
            gevent.joinall(jobs)
        if jobs and reply and reply[0][:1] == "2":
            self._disagree(environ, jobs)
            reply, chunks = self._combine(environ.get("PATH_INFO"), reply, chunks, jobs)
        start_response(*reply)
        return chunks

    @staticmethod
    def _combine(path, reply, chunks, jobs):
        """The endpoint's answer from every rank's, as vLLM's DP client combines them: an
        operation any engine failed (a 5xx) fails (``call_utility_all_async``'s ``asyncio.gather``
        raises: the first failing rank's answer); ``/reset_prefix_cache`` succeeds only if every
        engine reset (``all(...)``) and ``/wake_up`` is ``awake`` only if every engine is
        (``all(...)``, ``vllm/v1/engine/core_client.py`` ``reset_prefix_cache_async`` /
        ``wake_up_async``); otherwise rank 0's answer."""
        results = [job.value or ("500", b"", []) for job in jobs]
        for status, body, headers in results:
            if status[:1] == "5":       # an engine's failure (a refusal checked in the API server is rank 0's)
                if not headers:         # the rank raised (logged): vLLM's generic 500
                    body = b'{"error":{"message":"Internal Server Error","type":"InternalServerError","param":null,"code":500}}'
                    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
                    status = "500 INTERNAL SERVER ERROR"
                return [status, headers], [body]
        key, bad = {"/reset_prefix_cache": ("success", False), "/wake_up": ("status", "sleeping")}.get(path, (None, None))
        if key is None:
            return reply, chunks
        try:
            answers = [orjson.loads(b"".join(chunks))] + [orjson.loads(body) for _, body, _ in results]
        except (ValueError, TypeError):
            return reply, chunks
        if answers[0].get(key) == bad or all(a.get(key) != bad for a in answers):
            return reply, chunks
        answers[0][key] = bad
        data = orjson.dumps(answers[0])
        headers = [(k, str(len(data)) if k.lower() == "content-length" else v) for k, v in reply[1]]
        return [reply[0], headers], [data]

    @staticmethod
    def _replay(app, env: dict) -> tuple[str, bytes, list]:
        """Run an operation on another rank's app, below its API-key and ``http_*`` layers (the
        request was checked and counted once, on rank 0): ``(status, the answer's first 64 KiB,
        its headers)``, ``("500", b"", [])`` when it raised (logged)."""
        inner = app.extensions.get("engine_wsgi", app.wsgi_app)
        status, head, kept = ["500"], [], []
        try:
            def begin(s, headers, exc_info=None):
                status[0] = s
                kept[:] = headers
                return head.append
            body = inner(env, begin)
            try:
                for chunk in body:
                    if sum(map(len, head)) < 65536:
                        head.append(chunk)
            finally:
                if hasattr(body, "close"):
                    body.close()
        except Exception:          # one rank's failure must not take the others' answer with it
            log.exception("data-parallel rank %s: %s %s failed", app.extensions["simulator"].config.data_parallel_rank,
                          env.get("REQUEST_METHOD"), env.get("PATH_INFO"))
        return status[0], b"".join(head)[:65536], kept

    def _disagree(self, environ, jobs) -> None:
        """Rank 0 took an operation: warn of any other rank that refused it (the engines now
        differ)."""
        for rank, job in enumerate(jobs, 1):
            status, head, _ = job.value or ("500", b"", [])
            if status[:1] != "2":
                log.warning("data-parallel rank %d refused %s %s that rank 0 took: %s %s", rank,
                            environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), status,
                            head[:200].decode("utf-8", "replace"))


def _replica_environ(environ: dict, data: bytes) -> dict:
    """A copy of ``environ`` for another rank, its body ``data``, without the connection's
    server keys (the replica writes to no socket)."""
    from blueprints.streaming import REPLICA_KEY
    env = {k: v for k, v in environ.items() if not k.startswith(("gunicorn.", "vllm_sim."))}
    env[REPLICA_KEY] = True
    env["wsgi.input"] = io.BytesIO(data)
    env["CONTENT_LENGTH"] = str(len(data))
    env.pop("HTTP_TRANSFER_ENCODING", None)
    return env


def build_data_parallel_api(config, app_factory) -> DataParallelAPI:
    """The endpoint over ``config.data_parallel_size`` engines: rank r's app is
    ``app_factory(rank r's config)`` (``--data-parallel-rank r``, the rest shared; step
    mode's settings not copied).  A MoE model's ranks share a lockstep board first."""
    from generation.engine.dp_board import create_board
    if config.latency_calculator == "step":
        create_board(config.data_parallel_size)
    apps = []
    for rank in range(config.data_parallel_size):
        c = config.copy(share_step=True)
        c.data_parallel_rank = rank
        apps.append(app_factory(c))
    return DataParallelAPI(apps)
