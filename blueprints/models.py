"""``GET /v1/models`` - one entry per served model name, then one per LoRA adapter (vLLM's
ModelCard: id, object, created, owned_by ``vllm``, root, parent, max_model_len, permission) - and
``GET /v1/models/{model}``, one card (vLLM after 0.33; the openai SDK's ``models.retrieve``)."""
from __future__ import annotations

import time
import uuid

from flask import Blueprint

from generation.errors import ModelNotFound

from .common import json_response, simulator

bp = Blueprint("models", __name__)


def permission(now: int) -> list:
    """vLLM 0.34's ``permission=[ModelPermission()]`` of a card (``serve/engine/protocol.py``
    ``ModelPermission``: a fresh ``modelperm-<uuid4 hex>`` id each time, its defaults)."""
    return [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": now,
             "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
             "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
             "organization": "*", "group": None, "is_blocking": False}]


def model_cards(sim) -> list:
    """The cards of every served name, then of every LoRA adapter (``parent``: the base); each
    with vLLM's ``permission`` list (``openai/models/serving.py``; the reference has none)."""
    cfg = sim.config
    now = int(time.time())
    data = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": cfg.model,
             "parent": None, "max_model_len": cfg.max_model_len, "permission": permission(now)}
            for name in cfg.served_names]
    base = cfg.display_model_name
    for name, path in sim.loras.paths.items():
        data.append({"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": path or name,
                     "parent": base, "max_model_len": cfg.max_model_len, "permission": permission(now)})
    return data


@bp.get("/v1/models")
def list_models():
    return json_response({"object": "list", "data": model_cards(simulator())})


@bp.get("/v1/models/<path:model>")
def retrieve_model(model: str):
    """One card by id (names may hold ``/``: ``org/model``); a 404 NotFoundError
    (``The model `X` does not exist.``) for anything not served."""
    for card in model_cards(simulator()):
        if card["id"] == model:
            return json_response(card)
    raise ModelNotFound(model)
