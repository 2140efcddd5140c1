"""The request fields vLLM 0.34 puts in ``SamplingParams.extra_args`` (``vllm_xargs``,
``kv_transfer_params``, ``ec_transfer_params``): their type (``vllm_xargs``) and the engine's
MessagePack range for their integers (``_verify_extra_args``)."""
from __future__ import annotations

from ..errors import Rejected
from .validation import pydantic_error
from .wide_ints import make_exact

INT64_MIN = -(2 ** 63)

_XARG_TYPES = (("string_type", "str", "Input should be a valid string"),
               ("int_type", "int", "Input should be a valid integer"),
               ("float_type", "float", "Input should be a valid number"))


# the body fields vLLM puts in ``SamplingParams.extra_args`` (chat, completions, Responses)
EXTRA_ARGS_FIELDS = ("vllm_xargs", "kv_transfer_params", "ec_transfer_params")


def exact_extra_args(body: dict) -> None:
    """Give ``body``'s :data:`EXTRA_ARGS_FIELDS` the integers ``json.loads`` reads where orjson read
    a float: orjson parses an integer literal past 64 bits (up to a double's range) as a float, so
    ``{"vllm_xargs": {"a": 123456789012345678901234567890}}``, which vLLM's ``_verify_extra_args``
    refuses (an int it cannot send over MessagePack), was served.  Only a body whose fields hold an
    integral float of magnitude 2**63 or more is parsed again, once, by the body's exact re-read
    (:func:`~.wide_ints.make_exact`, off the hub when large; a literal such as ``1e30`` stays a
    float there, as in vLLM)."""
    fields = [k for k in EXTRA_ARGS_FIELDS if isinstance(body.get(k), (dict, list))]
    if fields and any(_wide_float_in(body[k]) for k in fields):
        make_exact()


def _wide_float_in(value) -> bool:
    pending = [value]
    while pending:
        v = pending.pop()
        if isinstance(v, float):
            if v.is_integer() and abs(v) >= 2 ** 63:
                return True
        elif isinstance(v, dict):
            pending.extend(v.keys())
            pending.extend(v.values())
        elif isinstance(v, list):
            pending.extend(v)
    return False


def check_extra_args(xargs, kv_transfer_params=None, ec_transfer_params=None) -> None:
    """``vllm_xargs`` (vLLM 0.34: ``dict[str, str | int | float | list[str | int | float]]``) and
    what vLLM puts beside it in ``SamplingParams.extra_args`` (``kv_transfer_params``,
    ``ec_transfer_params``): every integer within -2**63 .. 2**64-1, the engine's MessagePack
    range (``_verify_extra_args``: ``extra_args integers must be between -2**63 and 2**64 - 1.``;
    a JSON body's wider integers are ints here by :func:`exact_extra_args`)."""
    if xargs is not None:
        if not isinstance(xargs, dict):
            raise pydantic_error("vllm_xargs", xargs, ("dict_type", "Input should be a valid dictionary"))
        for k, v in xargs.items():
            items = v if isinstance(v, list) else [v]
            for j, item in enumerate(items):
                if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                    continue
                loc = f"vllm_xargs.{k}.{j}" if isinstance(v, list) else f"vllm_xargs.{k}"
                errors = [(kind, msg) for kind, _, msg in _XARG_TYPES]
                if not isinstance(v, list):
                    errors.append(("list_type", "Input should be a valid list"))
                raise pydantic_error(loc, item, *errors)
    pending = [xargs, kv_transfer_params, ec_transfer_params]
    while pending:
        v = pending.pop()
        if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v < 2 ** 64:
            raise Rejected("extra_args integers must be between -2**63 and 2**64 - 1.", "extra_args")
        if isinstance(v, dict):
            pending.extend(v.keys())
            pending.extend(v.values())
        elif isinstance(v, list):
            pending.extend(v)
