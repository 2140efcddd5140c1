"""``--api-key`` (env ``VLLM_API_KEY``): every route but the probes needs the key.

As vLLM's ``AuthenticationMiddleware`` (vllm/entrypoints/serve/middleware/authenticate.py): a request must
carry ``Authorization: Bearer <key>``; the scheme is case-insensitive and keys are compared as
SHA-256 digests with :func:`hmac.compare_digest`, so the time taken does not depend on how much
of a guess matches.  Anthropic clients send ``x-api-key: <key>``, which is accepted too.
vLLM 0.34 guards only paths that start with ``/v1``, ``/v2``, ``/inference`` or ``/cohere``;
here the other inference, admin and sleep routes are guarded as well (issue 10), and only the
probes, FastAPI's documentation routes and the Prometheus mount (``/metrics`` and any path
that starts with it) stay open (:data:`OPEN_PATHS`).  ``OPTIONS`` passes, as in vLLM:
a CORS preflight is answered ``200`` for any path (:class:`server.wsgi_layers.RequestGuard`),
any other ``OPTIONS`` gets the router's 405 or 404, which, as in vLLM, shows which routes
exist (every other method gets the same 401 on every routed path and under vLLM's prefixes).

A missing or wrong key is a 401 with vLLM's body, ``{"error": "Unauthorized"}``, or Anthropic's
envelope on ``/v1/messages``.
The check is a WSGI middleware: it runs before routing, answers unknown paths under vLLM's
guarded prefixes the same way (a 404 elsewhere, as vLLM's router answers there), and costs
nothing when no key is set.
"""
from __future__ import annotations

import hashlib
import hmac

import orjson

from generation.errors import anthropic_envelope

GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")     # vLLM 0.34's (serve/middleware/authenticate.py)
# the probes, and FastAPI's documentation routes (blueprints/docs.py): outside /v1, open in vLLM too
OPEN_PATHS = frozenset({"/health", "/health/", "/health/ready", "/metrics", "/ping", "/version",
                        "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
MESSAGE = "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


VLLM_UNAUTHORIZED = b'{"error":"Unauthorized"}'


def unauthorized_body(path: str) -> bytes:
    """The 401 body: Anthropic's envelope under ``/v1/messages`` (its SDKs read
    ``error.message``; not on vLLM's ``/v1/messages/render``, :func:`generation.errors.
    anthropic_envelope`), else vLLM's: ``JSONResponse(content={"error": "Unauthorized"})``
    (``vllm/entrypoints/serve/middleware/authenticate.py``), not its error envelope."""
    if anthropic_envelope(path):
        return orjson.dumps({"type": "error", "error": {"type": "authentication_error", "message": MESSAGE}})
    return VLLM_UNAUTHORIZED


class APIKeyMiddleware:
    """WSGI middleware that lets a request through when it carries one of ``keys``.

    ``keys``: non-empty strings (vLLM accepts several).  Raises ValueError when empty."""

    def __init__(self, wsgi_app, keys, routed=None):
        keys = [k for k in keys if k]
        if not keys:
            raise ValueError("APIKeyMiddleware needs at least one key")
        self.wsgi_app = wsgi_app
        self.digests = [_digest(k) for k in keys]
        # environ -> whether any route has the path (None: every path counts as one)
        self.routed = routed

    def authorized(self, environ) -> bool:
        """Whether the ``Authorization: Bearer`` or ``x-api-key`` header holds a key."""
        given = None
        auth = environ.get("HTTP_AUTHORIZATION")
        if auth:
            scheme, _, param = auth.partition(" ")
            if scheme.lower() == "bearer":
                given = param.strip()
        if given is None:
            given = environ.get("HTTP_X_API_KEY")
        if not given:
            return False
        d = _digest(given)
        ok = False
        for k in self.digests:          # no early exit: every key is compared
            ok |= hmac.compare_digest(d, k)
        return ok

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if (path in OPEN_PATHS or path.startswith("/metrics") or environ.get("REQUEST_METHOD") == "OPTIONS"
                or self.authorized(environ)):
            return self.wsgi_app(environ, start_response)
        if self.routed is not None and not path.startswith(GUARDED_PREFIX) and not self.routed(environ):
            return self.wsgi_app(environ, start_response)     # no such route outside vLLM's guarded prefixes: its 404
        body = unauthorized_body(path)
        start_response("401 Unauthorized", [("Content-Type", "application/json"),
                                            ("Content-Length", str(len(body))),
                                            ("WWW-Authenticate", "Bearer")])
        return [body]


def api_keys(config) -> list:
    """The configured keys: ``--api-key`` (a string or a list; the configuration reads env
    ``VLLM_API_KEY`` as vLLM does)."""
    value = getattr(config, "api_key", None) or ""
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value if v]


def install(app, config, routed=None) -> None:
    """Wrap ``app.wsgi_app`` with :class:`APIKeyMiddleware` when a key is configured.
    ``routed(environ)``: whether a route has the path; a path none has, outside vLLM's guarded
    prefixes, goes on to the router's 404 as in vLLM, which does not guard it (asked only on the
    way to a refusal)."""
    keys = api_keys(config)
    if keys:
        app.wsgi_app = APIKeyMiddleware(app.wsgi_app, keys, routed)
