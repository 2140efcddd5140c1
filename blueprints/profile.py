"""vLLM 0.34's profiler routes (``serve/profile/api_router.py``), registered only when
``--profiler-config`` names a ``profiler`` (``torch``, ``cuda``, ``proton``), as vLLM's
``attach_router``; a 404 otherwise.  Nothing is profiled: the simulator has no GPU work to trace,
but a client that brackets a benchmark with them gets vLLM's answers.

* ``POST /start_profile``: an optional body, vLLM's ``StartProfileRequest`` (pydantic, strict:
  ``profile_prefix`` a string, ``delay_iterations`` / ``max_iterations`` integers,
  ``profiler_kwargs`` an object, each nullable; other keys ignored), a mistake being the
  validation handler's 400 at ``body.<field>``; then the engine client's checks, in its order:
  a session already started is vLLM's 409 ``Conflict`` (``ProfilerAlreadyActiveError``: call
  ``/stop_profile`` first); ``profile_prefix`` 1-128 ASCII characters, a letter or digit first,
  then letters, digits, ``.``, ``_``, ``-``, and iteration bounds of at least 0, else a 400
  ``BadRequestError`` with vLLM's message.  200 with no body.
* ``POST /stop_profile``: ends the session; 200 with no body.
"""
from __future__ import annotations

import logging

import orjson
from flask import Blueprint, current_app, request

from generation.adapters.validation import Errors, validation_errors
from generation.errors import APIError

from .common import parse_json_body
from .vllm_bodies import bare_response

log = logging.getLogger("vllm_sim")
_ACTIVE = "profile_session_active"           # app.extensions: whether /start_profile began a session

# StartProfileRequest's fields (model_config strict=True): pydantic's strict type errors
_FIELDS = (("profile_prefix", str, "string_type", "Input should be a valid string"),
           ("delay_iterations", int, "int_type", "Input should be a valid integer"),
           ("max_iterations", int, "int_type", "Input should be a valid integer"),
           ("profiler_kwargs", dict, "dict_type", "Input should be a valid dictionary"))
PREFIX_RULE = ("profile_prefix must be 1-128 ASCII characters, start with a letter or number, and contain only "
               "letters, numbers, '.', '_', or '-'")
ALREADY_ACTIVE = "A profiling session is already active. Call /stop_profile before starting another session."


def _overrides() -> dict:
    """The request's ``StartProfileRequest`` fields that are set (vLLM's ``model_dump(exclude_none=True)``)."""
    raw = request.get_data(cache=True)
    if not raw:                                      # no body: FastAPI's None for the optional model
        return {}
    try:
        if orjson.loads(raw) is None:                # a JSON null too: FastAPI validates the optional
            return {}                                # body's None as its default (no error)
    except orjson.JSONDecodeError:
        pass                                         # parse_json_body's 400
    body = parse_json_body(raw=raw)
    errors, out = Errors(), {}
    for name, kind, error, message in _FIELDS:
        value = body.get(name)
        if value is None:
            continue
        if type(value) is not kind:           # strict: no bool for an int, no 1.0, no "3"
            errors.add(name, value, error, message)
        else:
            out[name] = value
    if errors.count:
        raise validation_errors(errors.kept, total=errors.count)
    return out


def _check_prefix(prefix: str | None) -> None:
    """vLLM's ``validate_profile_prefix`` (``config/profiler.py``): a ValueError, answered 400."""
    if prefix is None:
        return
    if (not 1 <= len(prefix) <= 128 or not prefix.isascii() or not prefix[0].isalnum()
            or any(not (c.isalnum() or c in "._-") for c in prefix[1:])):
        raise APIError(PREFIX_RULE, 400)


def start_profile():
    overrides = _overrides()
    log.info("Starting profiler...")
    if current_app.extensions.get(_ACTIVE):
        raise APIError(ALREADY_ACTIVE, 409, None, "Conflict")       # a GracefulHTTPError: the status phrase
    _check_prefix(overrides.get("profile_prefix"))
    for name in ("delay_iterations", "max_iterations"):                # validate_profile_iteration_bounds
        if overrides.get(name, 0) < 0:
            raise APIError(f"{name} must be greater than or equal to 0", 400)
    current_app.extensions[_ACTIVE] = True
    log.info("Profiler started.")
    return bare_response()


def stop_profile():
    log.info("Stopping profiler...")
    current_app.extensions[_ACTIVE] = False
    log.info("Profiler stopped.")
    return bare_response()


def register(app, config) -> None:
    """The two routes when ``--profiler-config`` names a profiler (vLLM's ``attach_router``)."""
    if config.profiler is None:
        return
    log.warning("Profiler with mode '%s' is enabled in the API server. This should ONLY be used for local "
                "development!", config.profiler)
    bp = Blueprint("profile", __name__)
    bp.add_url_rule("/start_profile", view_func=start_profile, methods=["POST"])
    bp.add_url_rule("/stop_profile", view_func=stop_profile, methods=["POST"])
    app.register_blueprint(bp)
