"""``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter`` (vLLM's dynamic LoRA API).

Loading registers ``lora_name`` -> ``lora_path``; the name is a valid ``model`` at once.
Errors follow vLLM: a missing field or an already-loaded name is a 400 (unless
``load_inplace: true``, which reloads it, from a new path too); unloading an unknown name is a
404.

A ``lora_path`` that is a local directory is checked as vLLM checks it
(:func:`generation.engine.lora.check_local_adapter`: ``adapter_config.json`` present, valid and
supported, its rank within ``--max-lora-rank``, weights present); only that small config file
is read, never the weights, and messages never quote it.  Any other path (a directory on
another node, a Hub id) is accepted unread: a simulated adapter has no weights.  The path is
reported back as the adapter's ``root`` in ``/v1/models``.  Names and paths are bounded
(:data:`MAX_LEN` characters) and printable, since they reach responses, logs and metric labels;
field errors name the field, never echo the value.
"""
from __future__ import annotations

from flask import Blueprint, Response

from generation.engine.lora import check_local_adapter
from generation.errors import APIError

from .common import parse_json_body, simulator

bp = Blueprint("lora", __name__)


MAX_LEN = 4096


def _name(body: dict, key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise APIError(f"{key}: field required (a non-empty string).", 400, key)
    if len(v) > MAX_LEN:
        raise APIError(f"{key}: at most {MAX_LEN} characters.", 400, key)
    if not v.isprintable():
        raise APIError(f"{key}: must not contain control characters.", 400, key)
    return v


@bp.post("/v1/load_lora_adapter")
def load_lora_adapter():
    sim = simulator()
    body = parse_json_body()
    name = _name(body, "lora_name")
    path = _name(body, "lora_path")
    inplace = body.get("load_inplace", False)
    if not isinstance(inplace, bool):
        raise APIError("load_inplace: Input should be a valid boolean.", 400, "load_inplace")
    if name in sim.config.served_names:
        raise APIError(f"The lora adapter '{name}' conflicts with a served base model.", 400, "lora_name")
    if name in sim.loras.paths and not inplace:
        raise APIError(f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                       f"in place, set 'load_inplace' to True.", 400, "lora_name")
    check_local_adapter(name, path, sim.config.max_lora_rank)
    sim.loras.load(name, path)
    return Response(f"Success: LoRA adapter '{name}' added successfully.", 200, mimetype="text/plain")


@bp.post("/v1/unload_lora_adapter")
def unload_lora_adapter():
    sim = simulator()
    body = parse_json_body()
    name = _name(body, "lora_name")
    if name not in sim.loras.paths:
        raise APIError(f"The lora adapter '{name}' cannot be found.", 404, "lora_name")
    sim.loras.unload(name)
    return Response(f"Success: LoRA adapter '{name}' removed successfully.", 200, mimetype="text/plain")
