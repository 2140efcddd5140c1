"""``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter`` (vLLM's dynamic LoRA API).

Loading registers ``lora_name`` -> ``lora_path``; the name is a valid ``model`` at once.
Errors follow vLLM 0.34 (``serve/lora/protocol.py``, ``OpenAIServingModels``): the body is
read as its request model (``lora_name`` and ``lora_path`` required strings, ``load_inplace`` /
``is_3d_lora_weight`` pydantic booleans, ``"yes"`` included; unload's ``lora_int_id`` an
optional integer), a mistake being the validation handler's 400 at ``body.<field>``; then its
own checks, 400 ``InvalidUserInput`` with no ``param``: an empty name or path, a name that is a
served model's, an already-loaded name (unless ``load_inplace: true``, which reloads it, from a
new path too); unloading an unknown name is a 404 ``NotFoundError``.

A ``lora_path`` that is a local directory is checked as vLLM checks it
(:func:`generation.engine.lora.check_local_adapter`: ``adapter_config.json`` present, valid and
supported, its rank within ``--max-lora-rank``, weights present); only that small config file
is read, never the weights, and messages never quote it.  Any other path (a directory on
another node, a Hub id) is accepted unread: a simulated adapter has no weights.  The path is
reported back as the adapter's ``root`` in ``/v1/models``.  Names and paths are bounded
(:data:`MAX_LEN` characters) and printable, since they reach responses, logs and metric labels
(the simulator's own 400s, ``param`` the field); those errors never echo the value.
"""
from __future__ import annotations

from flask import Blueprint

from generation.adapters.validation import read_bool, read_fields, read_int, read_str
from generation.engine.lora import check_local_adapter
from generation.errors import APIError

from .common import parse_json_body, simulator
from .vllm_bodies import bare_response

bp = Blueprint("lora", __name__)


MAX_LEN = 4096
INVALID_INPUT = "InvalidUserInput"       # vLLM's OpenAIServingModels: err_type of its own checks


def _fields(body: dict, fields) -> dict:
    """The body as vLLM's request model reads it (``serve/lora/protocol.py``): ``fields`` are
    ``(name, reader, default)`` (no default: required), pydantic's errors in field order as
    vLLM's validation handler answers them (``body.<field>``)."""
    return read_fields(body, fields)


def _bounded(value: str, key: str) -> str:
    """The simulator's own bounds on a name or path (they reach responses, logs and metric
    labels): at most :data:`MAX_LEN` characters, printable."""
    if len(value) > MAX_LEN:
        raise APIError(f"{key}: at most {MAX_LEN} characters.", 400, key)
    if not value.isprintable():
        raise APIError(f"{key}: must not contain control characters.", 400, key)
    return value


@bp.post("/v1/load_lora_adapter")
def load_lora_adapter():
    sim = simulator()
    req = _fields(parse_json_body(), (("lora_name", read_str), ("lora_path", read_str),
                                      ("load_inplace", read_bool, False), ("is_3d_lora_weight", read_bool, False)))
    name, path, inplace = req["lora_name"], req["lora_path"], req["load_inplace"]
    if not name or not path:
        raise APIError("Both 'lora_name' and 'lora_path' must be provided.", 400, None, INVALID_INPUT)
    _bounded(name, "lora_name")
    _bounded(path, "lora_path")
    if name in sim.config.served_names:
        raise APIError(f"The lora adapter '{name}' conflicts with a served base model.", 400, None, INVALID_INPUT)
    if name in sim.loras.paths and not inplace:
        raise APIError(f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                       f"in place, set 'load_inplace' to True.", 400, None, INVALID_INPUT)
    check_local_adapter(name, path, sim.config.max_lora_rank)
    sim.loras.load(name, path)
    return bare_response(f"Success: LoRA adapter '{name}' added successfully.")    # vLLM: no media type


@bp.post("/v1/unload_lora_adapter")
def unload_lora_adapter():
    sim = simulator()
    name = _fields(parse_json_body(), (("lora_name", read_str), ("lora_int_id", read_int, None)))["lora_name"]
    if not name:
        raise APIError("'lora_name' needs to be provided to unload a LoRA adapter.", 400, None, INVALID_INPUT)
    _bounded(name, "lora_name")
    if name not in sim.loras.paths:
        raise APIError(f"The lora adapter '{name}' cannot be found.", 404, None, "NotFoundError")
    sim.loras.unload(name)
    return bare_response(f"Success: LoRA adapter '{name}' removed successfully.")
