"""What vLLM's routes that read their own body (``await raw_request.json()``) or answer a bare
Starlette ``Response`` have in common: :func:`starlette_json`, :func:`bare_response`."""
from __future__ import annotations

import json

import orjson
from flask import Response

from generation.adapters.validation import body_unparsable
from generation.errors import APIError

from .common import loads_body


def bare_response(body: bytes | str = b"", status: int = 200) -> Response:
    """Starlette's ``Response(status_code=..., content=...)`` without a ``media_type``, as vLLM's
    routes answer an empty 200 (``/inference/v1/abort_requests``, the cache resets, the profiler)
    or LoRA's text: no ``Content-Type`` header (Werkzeug would add ``text/html``)."""
    resp = Response(body, status=status)
    del resp.headers["Content-Type"]
    return resp


def starlette_json(raw: bytes, decode_error=None):
    """The JSON value of a body that a vLLM route reads itself with Starlette's
    ``await request.json()`` (``json.loads`` of the bytes; any Content-Type): what ``json.loads``
    refuses with a ``JSONDecodeError`` (an empty body included) is that route's
    ``HTTPException(400)``, whose message is ``decode_error`` (a string), or by default
    ``"JSON decode error: {e}"``, answered as vLLM's ``http_exception_handler`` does (``type``
    the status phrase, ``param`` null); what only orjson refuses keeps the simulator's
    message (:func:`body_unparsable`).  Parsed as every body is (:func:`loads_body`)."""
    try:
        return loads_body(raw)
    except orjson.JSONDecodeError as e:
        try:
            json.loads(raw)
        except json.JSONDecodeError as d:
            raise APIError(decode_error or f"JSON decode error: {d}", 400, None, "Bad Request") from None
        except (ValueError, RecursionError):
            pass
        raise body_unparsable(raw, e) from None
