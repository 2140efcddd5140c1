"""``POST /v1/decisions``: vLLM 0.34's Decisions API (OpenAI's ``client.decisions.create``), which
every vLLM 0.34 server registers (``vllm/entrypoints/launchers/api_server/routers.py``
``register_api_routers``; ``openai/decisions/api_router.py`` ``create_decision``), answering 501
where the model has no handler (a pooling model among them).

The body is checked whole (:mod:`schemas.decisions`), then whether the model is served, then the
request (:mod:`generation.adapters.decisions`); its reads, one sequence per question, are admitted
at once as vLLM adds one engine request per question (429 when the waiting queue cannot take
them), and a client that leaves meanwhile aborts them.
"""
from __future__ import annotations

from time import monotonic

import orjson
from flask import Blueprint, Response, request

from generation.adapters import decisions as dec
from schemas.decisions import load_decisions

from .common import (JSON_MIME, admit_and_complete, header_checks, parse_json_body, request_id, response_headers,
                     simulator)

bp = Blueprint("decisions", __name__)


@bp.post("/v1/decisions")
def create_decision():
    """vLLM's ``create_decision``: ``{"model", "answers", "usage"}``, one answer per question."""
    entry = monotonic()
    sim = simulator()
    environ = request.environ
    body = load_decisions(parse_json_body())
    if not dec.served(sim.config):
        raise dec.NotServed()
    rid = request_id(sim)
    header_checks(sim, environ)                  # X-Return-Error, failure injection: as on generation routes
    model, seqs, reads = dec.prepare(sim, body, rid)
    admit_and_complete(sim, seqs, environ, entry, limits=False)    # the limits were checked before rendering
    out = dec.response(sim, model, body, seqs, reads)
    return Response(orjson.dumps(out), status=200, mimetype=JSON_MIME, headers=response_headers(rid, sim, environ))
