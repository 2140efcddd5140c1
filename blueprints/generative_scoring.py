"""``POST /generative_scoring``: vLLM 0.34's generative scoring, which every server with a
generative model registers (``vllm/entrypoints/generate/api_router.py``
``register_generate_api_routers``, ``generative_scoring/api_router.py``
``create_generative_scoring``); a pooling model has no such route (404).

The request (:mod:`schemas.generative_scoring`) is checked whole before anything is admitted;
its items then run on the engine, one sequence each (a prefill and one output token:
:mod:`generation.adapters.generative_scoring`), all admitted at once as vLLM adds one request per
item (429 when the waiting queue cannot take them); a client that leaves meanwhile aborts them.
"""
from __future__ import annotations

from time import monotonic

import orjson
from flask import Blueprint, Response, request

from generation.adapters import generative_scoring as gs
from schemas.generative_scoring import load_generative_scoring

from .common import (JSON_MIME, admit_and_complete, header_checks, parse_json_body, request_id, response_headers,
                     simulator)

bp = Blueprint("generative_scoring", __name__)


@bp.post("/generative_scoring")
def create_generative_scoring():
    """vLLM's ``create_generative_scoring``: one ``{"index", "object": "score", "score"}`` per
    item, the probability of the first of ``label_token_ids`` as the next token after the
    item's prompt."""
    entry = monotonic()
    sim = simulator()
    environ = request.environ
    body = load_generative_scoring(parse_json_body())
    rid = request_id(sim, body.request_id)
    header_checks(sim, environ)                  # X-Return-Error, failure injection: as on generation routes
    model, seqs, logprobs = gs.prepare(sim, body, rid)
    admit_and_complete(sim, seqs, environ, entry)
    out = gs.response(rid, model, body, seqs, logprobs)
    return Response(orjson.dumps(out), status=200, mimetype=JSON_MIME, headers=response_headers(rid, sim, environ))
