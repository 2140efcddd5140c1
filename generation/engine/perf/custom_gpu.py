"""A GPU the simulator does not ship, described by its datasheet: ``--gpu`` given a JSON object
(or the path of a ``.json`` file holding one) instead of a name, for step mode, replays, fleets
and ``fit_kernels``::

    --gpu '{"name": "RTX-5090", "flops": 209.5e12, "bandwidth": 1.792e12, "memory_gib": 31.4}'

Fields (:class:`~.hardware.GPU`'s):

* ``name``: letters, digits, ``.``, ``_``, ``-``; a profile ``profiles/<name>.json`` is used when
  there is one, else the generic profile (the H100's constants with the median weight-read
  efficiency of the measured GPUs), as for the shipped datasheet-only cards;
* ``flops``: dense BF16 tensor FLOP/s (half a datasheet's "with sparsity" figure), at least 1e12;
* ``bandwidth``: memory bytes/s, at least 1e9;
* ``memory_gib``: the memory torch reports (GiB; about 0.4-0.6 GiB under nvidia-smi's size);
* optional: ``nvlink_bandwidth`` (bytes/s one way between two GPUs; default PCIe 4.0 x16's
  32e9), ``nvlink_domain`` (GPUs that link joins; default 8), ``fp8`` and ``fp4`` (native tensor
  cores; default false: FP8 / NVFP4 weights run weight-only), ``flash_attn`` (the FlashAttention
  version vLLM's default backend runs there, 3, 2 or 0 for another backend; default 2),
  ``sm`` (compute capability x 10; default 80).

Checked with ``jsonschema``; a bad description is a ConfigError naming ``--gpu`` and the field.
(:func:`generation.engine.perf.hardware.gpu_by_name` builds the GPU from :func:`gpu_fields`.)
"""
from __future__ import annotations

import json
import math
import os
import stat

from generation.config.values import ConfigError

DESCRIBE = '{"name": ..., "flops": ..., "bandwidth": ..., "memory_gib": ...}'
GPU_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "flops", "bandwidth", "memory_gib"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
        # in FLOP/s and bytes/s, not TFLOP/s or GB/s: below a tera / giga they are a unit slip,
        # whose steps of years froze the engine
        "flops": {"type": "number", "minimum": 1e12, "maximum": 1e18},
        "bandwidth": {"type": "number", "minimum": 1e9, "maximum": 1e15},
        "memory_gib": {"type": "number", "minimum": 1, "maximum": 1e5},
        "nvlink_bandwidth": {"type": "number", "minimum": 1e8, "maximum": 1e15},
        "nvlink_domain": {"type": "integer", "minimum": 1, "maximum": 1 << 20},
        "fp8": {"type": "boolean"},
        "fp4": {"type": "boolean"},
        "flash_attn": {"enum": [0, 2, 3]},
        "sm": {"type": "integer", "minimum": 0, "maximum": 1000},
    },
}


def is_gpu_description(value: str) -> bool:
    """Whether ``--gpu``'s value describes a GPU (a JSON object or a ``.json`` file) rather than
    naming one."""
    text = str(value).strip()
    return text.startswith("{") or text.lower().endswith(".json")


def gpu_fields(value: str) -> dict:
    """The :class:`~.hardware.GPU` fields a JSON description (module docstring) gives, its
    defaults filled in, ``memory_gib`` as given.  Raises ConfigError (param ``gpu``) for an
    unreadable file, invalid JSON or a field the schema refuses, naming the field."""
    from jsonschema import Draft202012Validator
    text = str(value).strip()
    if not text.startswith("{"):
        text = _read_file(text)
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"--gpu: not a JSON object ({e})", param="gpu") from None
    except RecursionError:
        raise ConfigError("--gpu: not a GPU's description (nested too deeply)", param="gpu") from None
    if isinstance(doc, dict):       # YAML 1.1 reads 209.5e12 (no exponent sign) as a string
        for key in ("flops", "bandwidth", "memory_gib", "nvlink_bandwidth"):
            if isinstance(doc.get(key), str):
                doc[key] = _number(doc[key])
    error = next(iter(sorted(Draft202012Validator(GPU_SCHEMA).iter_errors(doc), key=lambda e: list(e.path))), None)
    if error is not None:
        where = ".".join(str(p) for p in error.path)
        raise ConfigError(f"--gpu{'.' + where if where else ''}: {error.message}"
                          + (UNITS.get(where, "") if error.validator == "minimum" else ""), param="gpu")
    return {**DEFAULTS, **doc}


MAX_FILE = 1 << 16          # bytes: a description is a few hundred


def _read_file(path: str) -> str:
    """The text of a description's file: a regular file (a FIFO would block the start-up) of at
    most :data:`MAX_FILE` bytes of UTF-8.  Raises ConfigError naming ``--gpu``."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(f"--gpu {path}: not a regular file", param="gpu")
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_FILE + 1)
    except OSError as e:
        raise ConfigError(f"--gpu {path}: cannot read ({e.strerror or e})", param="gpu") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--gpu {path}: not UTF-8 text", param="gpu") from None
    if len(text) > MAX_FILE:
        raise ConfigError(f"--gpu {path}: more than {MAX_FILE} characters, not a GPU's description", param="gpu")
    return text


def _no_constant(name: str):
    """``json.loads``' hook for NaN and the infinities, which JSON does not have: refused."""
    raise ConfigError(f"--gpu: {name} is not a number a GPU can have (JSON has no NaN or Infinity)", param="gpu")


def _number(text: str):
    """``text`` as a finite float, or unchanged (the schema then names the field)."""
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


UNITS = {"flops": " (FLOP/s: 209.5 TFLOP/s is 209.5e12)", "bandwidth": " (bytes/s: 1.8 TB/s is 1.8e12)",
         "nvlink_bandwidth": " (bytes/s: 900 GB/s is 9e11)"}
DEFAULTS = {"nvlink_bandwidth": 32e9, "fp8": False, "fp4": False, "flash_attn": 2, "nvlink_domain": 8, "sm": 80}
