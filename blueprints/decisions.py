"""``POST /v1/decisions``: vLLM 0.34's Decisions API (OpenAI's ``client.decisions.create``), and
``POST /v1/systemone``, its structured decisions, which every vLLM 0.34 server registers
(``vllm/entrypoints/launchers/api_server/routers.py`` ``register_api_routers``;
``openai/decisions/api_router.py`` ``create_decision``, ``generate/structured_decisions/
api_router.py`` ``create_structured_decision``), answering 501 where the model has no handler (a
pooling model among them).

The body is checked whole (:mod:`schemas.decisions`), then whether the model is served, then the
request (:mod:`generation.adapters.decisions`); its reads, one sequence per question, are admitted
at once as vLLM adds one engine request per question (429 when the waiting queue cannot take
them), and a client that leaves meanwhile aborts them.
"""
from __future__ import annotations

import time
from time import monotonic

import orjson
from flask import Blueprint, Response, request

from generation.adapters import decisions as dec
from generation.adapters import structured_decisions as sd
from schemas.decisions import load_decisions
from schemas.structured_decisions import load_structured_decision

from .common import (JSON_MIME, admit_and_complete, header_checks, parse_json_body, request_id, response_headers,
                     simulator)

bp = Blueprint("decisions", __name__)


def _serve(load, not_served, run) -> Response:
    """Both routes: the body read (``load``: vLLM's pydantic 400s), vLLM's 501 where the model has
    no handler (``not_served``), the simulator's header checks (``X-Return-Error``, failure
    injection), then ``run(sim, body, rid) -> (seqs, render)``: the reads, admitted at once
    (vLLM's admission limits were checked before rendering) and waited for, and the JSON body."""
    entry = monotonic()
    sim = simulator()
    environ = request.environ
    body = load(parse_json_body())
    if not dec.served(sim.config):
        raise not_served()
    rid = request_id(sim, getattr(body, "request_id", None))
    header_checks(sim, environ)
    seqs, render = run(sim, body, rid)
    admit_and_complete(sim, seqs, environ, entry, limits=False)
    return Response(orjson.dumps(render()), status=200, mimetype=JSON_MIME, headers=response_headers(rid, sim, environ))


@bp.post("/v1/decisions")
def create_decision():
    """vLLM's ``create_decision``: ``{"model", "answers", "usage"}``, one answer per question."""
    def run(sim, body, rid):
        model, seqs, reads = dec.prepare(sim, body, rid)
        return seqs, lambda: dec.response(sim, model, body, seqs, reads)
    return _serve(load_decisions, dec.NotServed, run)


@bp.post("/v1/systemone")
def create_structured_decision():
    """vLLM's ``create_structured_decision``: ``{"id", "object": "structured_decision", "created",
    "model", "answers", "usage", "diagnostics", "joint"}``, answers by question id."""
    def run(sim, body, rid):
        model, engine_id, questions, seqs, reads = sd.prepare(sim, body, rid)
        return seqs, lambda: sd.response(engine_id, model, questions, seqs, reads, int(time.time()))
    return _serve(load_structured_decision, sd.NotServed, run)
