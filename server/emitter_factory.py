"""What the runtime offers every request's streams (:mod:`blueprints.streaming`): the hub-emitter
factory (:func:`hub_emitter`), installed in the environ with the burst and body-end checks by
:func:`with_hub_emitter`.
"""
from __future__ import annotations

from blueprints.streaming import END_WITH_KEY, HEADERS_LATER_KEY, HUB_EMITTER_KEY

from .sse_emitter import HubEmitter, end_with_last_bytes, in_burst, usable_response


def hub_emitter(environ: dict, seq, body_iter):
    """The factory the runtime puts in the environ (:data:`blueprints.streaming.HUB_EMITTER_KEY`):
    a :class:`~server.sse_emitter.HubEmitter` for ``seq``'s stream when
    :func:`~server.sse_emitter.usable_response` allows, else None."""
    target = usable_response(environ)
    return HubEmitter(seq, body_iter, *target) if target is not None else None


def with_hub_emitter(wsgi_app):
    """``wsgi_app`` with :func:`hub_emitter`, :func:`~server.sse_emitter.in_burst` and
    :func:`~server.sse_emitter.end_with_last_bytes` offered in every request's environ."""
    def app(environ, start_response):
        environ[HUB_EMITTER_KEY] = hub_emitter
        environ[HEADERS_LATER_KEY] = in_burst
        environ[END_WITH_KEY] = end_with_last_bytes
        return wsgi_app(environ, start_response)
    return app

