"""The one serving pipeline every generation API runs through (chat, completions, Anthropic
messages, responses, generate), as the reference's ``handleHTTP`` with a builder per endpoint.

A route hands :func:`serve` its schema and its adapter class (:mod:`generation.adapters`)::

    parse body -> schema.load (typed request) -> request id -> header checks
    -> adapter.build (engine request) -> Simulator.prepare (outputs decided, context errors)
    -> response headers -> Simulator.admit (slot or queue, 429) -> stream or complete -> render

Every client error is decided before admission, so nothing is admitted for a request that
fails; anything that fails after admission and before the response is handed to the server
releases what was admitted (``Simulator.cancel``).  Once the server owns the SSE generator, its
``finally`` does the same.
"""
from __future__ import annotations

from flask import Response, current_app, request

from schemas.common import load

from .common import (header_checks, json_response, parse_json_body, request_id, response_headers,
                     run_to_completion, sse_response)
from .errors import anthropic_body, openai_body, status_of


def serve(schema, adapter_cls) -> Response:
    """Run the current request through ``adapter_cls`` (an :class:`generation.adapters.base.Adapter`
    subclass).  Raises the domain errors of each step; the app's (or the blueprint's) error
    handlers render them in the adapter's envelope."""
    # The app and the environ are looked up once and passed down (each proxy lookup costs).
    app = current_app._get_current_object()
    environ = request.environ
    sim = app.extensions["simulator"]
    body = load(schema, parse_json_body(environ, app.config["MAX_CONTENT_LENGTH"]))
    adapter = adapter_cls(sim, body)
    rid = request_id(sim, adapter.body_request_id(), environ)
    force_ct = header_checks(sim, environ)
    req = adapter.build(rid, force_ct and adapter.cache_threshold_header)
    seqs = sim.prepare(req)
    headers = response_headers(rid, sim, environ)
    sim.admit(seqs)
    try:
        if req.stream:
            envelope = adapter.envelope

            def error_frame(err) -> bytes:
                return adapter.stream_error(error_body(err, envelope))

            return sse_response(adapter.stream(seqs), headers, sim, seqs, batch=adapter.batch,
                                error_frame=error_frame, environ=environ)
        run_to_completion(sim, seqs, environ)
        out = adapter.render(seqs)
    except BaseException:
        sim.cancel(seqs)
        raise
    return json_response(out, headers=headers)


def error_body(err, envelope: str) -> dict:
    """``err`` in the API's error envelope (``"openai"`` or ``"anthropic"``)."""
    if envelope == "anthropic":
        return anthropic_body(err.message, status_of(err))
    return openai_body(err)
