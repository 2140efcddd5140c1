"""The control API of a fleet (``--fleet-control-port``, :mod:`server.fleet`): a plain WSGI app,
JSON in and out.

* ``GET /fleet/pods``: ``{"pods": [{name, index, url, host, port, state, ready_in_s, in_flight,
  running, waiting, kv_cache_usage_perc, kv_events_topic}]}``, serving and draining pods in
  index order;
* ``POST /fleet/pods`` ``{"count": 1, "startup_delay": S}``: start ``count`` (1-256; 1,024 pods in all, else 409) pods, each
  answering 503 for ``startup_delay`` seconds (default ``--fleet-startup-delay``); 201 with
  ``{"pods": [...]}`` (a port in use is a 409, and the next pod takes the port after it; pods
  started before it stay);
* ``DELETE /fleet/pods/NAME?timeout=S&wait=true``: drain and remove the pod (``timeout``: the
  drain grace, default ``--shutdown-timeout``); 202 ``{"name", "state": "draining"}`` at once,
  or with ``wait=true`` 200 ``{"name", "state": "removed", "drained", "ended"}`` once it is gone
  (also for a pod already draining: the answer of that removal);
* ``GET /fleet/stats``: :meth:`server.fleet.Fleet.stats`;
* ``GET /metrics``: the process's CPU and memory (``process_*``) and
  ``vllm_sim:fleet_pods{state}``;
* ``GET /health``: 200.

With ``--api-key`` every route but ``/health`` and ``/metrics`` needs the key, as the pods'
(:class:`server.auth.APIKeyMiddleware`).  A ``POST`` or ``DELETE`` that a browser marks as
coming from another origin's page (``Sec-Fetch-Site`` ``cross-site`` / ``same-site``, or an
``Origin`` other than the ``Host``) is a 400: a page can POST ``text/plain`` cross-site without a
CORS preflight, and the body is read whatever its type (``curl -d`` sends a form type).  Errors use vLLM's envelope: 400 naming the field (``count``, ``startup_delay``, ``timeout``,
``wait``, ``body``), 404 for an unknown pod or path, 405 for a wrong method, 409 for a pod already
draining (without ``wait=true``), a port in use or a count past the bound (adds in progress counted), 413 for a body past
:data:`CONTROL_BODY_LIMIT`, 408 for one that does not arrive in time.
"""
from __future__ import annotations

import logging
import math
from urllib.parse import parse_qs

import orjson

from generation.config.sim_config import MAX_FLEET_PODS

from .fleet import FleetError

log = logging.getLogger("vllm_sim")

MAX_SECONDS = 3600.0
# A control body is a small JSON object: past this, a 413 before it is read (a 600 MB body was read
# whole, 1.2 GB and 21 s during which the pods' /health answered 31 times)
CONTROL_BODY_LIMIT = 64 * 1024
_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed", 409: "ConflictError",
          413: "RequestEntityTooLarge"}
_STATUS = {200: "200 OK", 201: "201 Created", 202: "202 Accepted", 400: "400 Bad Request", 404: "404 Not Found",
           405: "405 Method Not Allowed", 409: "409 Conflict", 413: "413 Request Entity Too Large"}
CROSS_SITE_COMMAND = ("A command from another site's page is refused: the control API takes commands from "
                      "clients that send no Origin, or one matching the Host (curl, an SDK, a script)")
_WAIT = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False,
         "": False}


def _seconds(raw, name: str, default: float) -> float:
    """A number of seconds from 0 to :data:`MAX_SECONDS` (``raw`` None: ``default``); raises
    FleetError (400) naming ``name``."""
    if raw is None:
        return default
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)
    except (TypeError, ValueError):
        raise FleetError(f"{name}: must be a number of seconds, got {raw!r}", 400, name) from None
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise FleetError(f"{name}: must be between 0 and {MAX_SECONDS:g} seconds, got {raw!r}", 400, name)
    return value


def _metrics_registry(fleet):
    from prometheus_client import CollectorRegistry, ProcessCollector
    from prometheus_client.core import GaugeMetricFamily

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)

    class PodsCollector:
        def collect(self):
            fam = GaugeMetricFamily("vllm_sim:fleet_pods", "Simulated pods in this process, by state.",
                                    labels=["state"])
            states = {"starting": 0, "ready": 0, "draining": 0}
            for p in list(fleet.pods.values()):
                states[p.state] = states.get(p.state, 0) + 1
            for state, n in states.items():
                fam.add_metric([state], n)
            yield fam
    registry.register(PodsCollector())
    return registry


def control_app(fleet):
    """The control API's WSGI callable over ``fleet`` (:class:`server.fleet.Fleet`), behind the
    pods' body layers: a body past :data:`CONTROL_BODY_LIMIT` is a 413 (chunked too), one that
    does not arrive in time a 408 (:class:`server.wsgi_layers.BodyDeadline`: slow bodies held
    the control port, its ``/health`` probe included)."""
    import gevent
    from prometheus_client import generate_latest
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    from .listening import KEEPALIVE_SECONDS
    from .wsgi_layers import BodyDeadline, ChunkedBodyLimit, _cross_origin

    registry = _metrics_registry(fleet)
    adding = [0]            # pods that requests in progress are adding (their loops yield between pods)

    def add(environ, query):
        raw = _body(environ)
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            raise FleetError("body: not valid JSON", 400, "body") from None
        if not isinstance(body, dict):
            raise FleetError("body: must be a JSON object", 400, "body")
        unknown = sorted(set(body) - {"count", "startup_delay"})
        if unknown:                     # a misspelt count would start one pod
            raise FleetError(f"{unknown[0]}: unknown field (the fields are count and startup_delay)", 400, unknown[0])
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 256:
            raise FleetError(f"count: must be an integer from 1 to 256, got {count!r}", 400, "count")
        delay = _seconds(body.get("startup_delay"), "startup_delay", fleet.config.fleet_startup_delay)
        held = len(fleet.pods) + adding[0]
        if held + count > MAX_FLEET_PODS:     # all or none, counting the adds in progress (checked and reserved
            raise FleetError(                 # without a yield: concurrent adds were all let through, then refused)
                f"count: {held} pods and {count} more would pass the fleet's bound of {MAX_FLEET_PODS} pods; remove "
                f"some first", 409, "count")
        adding[0] += count
        pods = []
        try:
            for _ in range(count):          # ~25 ms each in step mode: other pods' streams go between
                pods.append(fleet.add(delay))
                gevent.sleep(0)
        finally:
            adding[0] -= count
        log.info("added %s (start-up delay %gs)", ", ".join(p.name for p in pods), delay)
        return 201, {"pods": [p.describe() for p in pods]}

    removing: dict = {}                 # pod name -> the greenlet draining it

    def remove(name, query):
        timeout = _seconds(query.get("timeout", [None])[-1], "timeout", fleet.grace())
        wait = _WAIT.get(query.get("wait", [""])[-1].lower())
        if wait is None:
            raise FleetError(f"wait: must be true or false, got {query['wait'][-1]!r}", 400, "wait")
        pending = removing.get(name)
        if wait and pending is not None:     # already draining: wait for that removal's end
            return 200, pending.get()
        pod = fleet.begin_remove(name)
        job = removing[name] = gevent.spawn(fleet.finish_remove, pod, timeout)
        job.link(lambda _: removing.pop(name, None) if removing.get(name) is job else None)
        if wait:
            return 200, job.get()
        return 202, {"name": pod.name, "state": "draining"}

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        query = parse_qs(environ.get("QUERY_STRING", ""))
        allowed = None
        try:
            if method not in ("GET", "HEAD", "OPTIONS") and _cross_origin(environ):
                # a page a browser shows POSTs text/plain cross-site without a CORS preflight:
                # any site the operator visits could have added 256 pods a request, 1,024 in all
                raise FleetError(CROSS_SITE_COMMAND, 400)
            if path == "/fleet/pods":
                allowed = "GET, POST"
                if method == "GET":
                    status, body = 200, {"pods": [p.describe() for p in list(fleet.pods.values())]}
                elif method == "POST":
                    status, body = add(environ, query)
                else:
                    raise FleetError("Method Not Allowed", 405)
            elif path.startswith("/fleet/pods/") and path.count("/") == 3:
                allowed = "DELETE"
                if method != "DELETE":
                    raise FleetError("Method Not Allowed", 405)
                status, body = remove(path.rsplit("/", 1)[1], query)
            elif path in ("/fleet/stats", "/metrics", "/health"):
                allowed = "GET"
                if method != "GET":
                    raise FleetError("Method Not Allowed", 405)
                if path == "/metrics":
                    data = generate_latest(registry)
                    start_response("200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4),
                                              ("Content-Length", str(len(data)))])
                    return [data]
                if path == "/health":
                    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "0")])
                    return [b""]
                status, body = 200, fleet.stats()
            else:
                raise FleetError("Not Found", 404)
        except FleetError as e:
            status = e.status
            body = {"error": {"message": e.message, "type": _TYPES.get(e.status, "BadRequestError"),
                              "param": e.param, "code": e.status}}
        data = orjson.dumps(body)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        if status == 405 and allowed:
            headers.append(("Allow", allowed))
        start_response(_STATUS[status], headers)
        return [data]
    grace = getattr(fleet.config, "timeout_keep_alive", 0) or KEEPALIVE_SECONDS
    return BodyDeadline(ChunkedBodyLimit(app, CONTROL_BODY_LIMIT), CONTROL_BODY_LIMIT, grace)


def _body(environ) -> bytes:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = environ.get("CONTENT_LENGTH")
    if length:
        try:
            n = int(length)
        except ValueError:
            raise FleetError("body: bad Content-Length", 400, "body") from None
        if n > CONTROL_BODY_LIMIT:
            raise FleetError(f"body: {n} bytes, more than the control API's {CONTROL_BODY_LIMIT}", 413, "body")
        return stream.read(n)
    return stream.read() if environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked" else b""
