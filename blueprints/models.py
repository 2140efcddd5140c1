"""``GET /v1/models`` - one entry per served model name, then one per LoRA adapter (vLLM's
ModelCard: id, object, created, owned_by ``vllm``, root, parent, max_model_len)."""
from __future__ import annotations

import time

from flask import Blueprint

from .common import json_response, simulator

bp = Blueprint("models", __name__)


@bp.get("/v1/models")
def list_models():
    sim = simulator()
    cfg = sim.config
    now = int(time.time())
    data = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": cfg.model,
             "parent": None, "max_model_len": cfg.max_model_len} for name in cfg.served_names]
    base = cfg.display_model_name
    for name, path in sim.loras.paths.items():
        data.append({"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": path or name,
                     "parent": base, "max_model_len": cfg.max_model_len})
    return json_response({"object": "list", "data": data})
