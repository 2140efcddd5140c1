"""The P/D connector's ``kv_transfer_params`` as the simulator reads and answers them: the keys'
types (:func:`check_kv_transfer`), a prefill's answer (:func:`remote_decode_params`: the
reference's placeholders plus vLLM 0.34's ``remote_prefill_cached_tokens``) and the cached
tokens a remote-prefill decode reports (:func:`reported_cached`)."""
from __future__ import annotations

from ..errors import InvalidParam

REMOTE_DECODE_PARAMS = {"do_remote_decode": False, "do_remote_prefill": True, "remote_engine_id": "DUMMY_ID",
                        "remote_block_ids": ["DUMMY_ID"], "remote_host": "DUMMY", "remote_port": 1234,
                        "tp_size": 1}


def remote_decode_params(seqs) -> dict:
    """The prefill answer's ``kv_transfer_params``: the reference's placeholders, plus vLLM 0.34's
    ``remote_prefill_cached_tokens`` (``Scheduler.update_from_output``: the P side's prefix hits,
    which the decode side reports as its ``cached_tokens``)."""
    out = dict(REMOTE_DECODE_PARAMS)
    prompts = {}
    for s in seqs:
        prompts.setdefault(s.prompt_index, s)
    out["remote_prefill_cached_tokens"] = sum(s.cached_tokens for s in prompts.values())
    return out


def reported_cached(s) -> int:
    """``cached_tokens`` of one prompt: a remote-prefill decode reports the prefill's hits
    (``kv_transfer_params.remote_prefill_cached_tokens``, vLLM 0.34 ``OutputProcessor``), else its own."""
    params = getattr(getattr(s, "request", None), "kv_transfer_params", None) or {}
    cached = params.get("remote_prefill_cached_tokens") if params.get("do_remote_prefill") else None
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else s.cached_tokens


KV_TRANSFER_TYPES = {        # the P/D connector's keys (vLLM's NixlConnector reads them) and their JSON types
    "do_remote_prefill": "boolean", "do_remote_decode": "boolean", "remote_block_ids": "array of block ids",
    "remote_engine_id": "string", "remote_host": "string", "remote_request_id": "string",
    "remote_port": "port", "tp_size": "positive integer",
}


def _kv_value_ok(kind: str, v) -> bool:
    if kind == "boolean":
        return isinstance(v, bool)
    if kind == "string":
        return isinstance(v, str)
    if isinstance(v, bool) or not isinstance(v, int):
        # block ids are integers to vLLM's connector; this simulator's own prefill answers carry
        # the reference's ["DUMMY_ID"], which a P/D router hands back, so strings pass too
        return kind == "array of block ids" and isinstance(v, list) and all(
            isinstance(b, str) or (isinstance(b, int) and not isinstance(b, bool) and b >= 0) for b in v)
    if kind == "port":
        return 0 <= v <= 65535
    return kind == "positive integer" and v >= 1


def check_kv_transfer(kv: dict | None, stream: bool, field: str = "kv_transfer_params") -> None:
    """``kv_transfer_params``: each key the P/D connector reads has its JSON type
    (:data:`KV_TRANSFER_TYPES`; ``null`` is absent), as the connector would need it:
    ``do_remote_prefill: "yes"``, ``1e308`` and ``remote_block_ids: "x"`` all started a remote
    prefill.  Other keys pass untouched, as vLLM's ``dict[str, Any]`` takes them.  A prefill
    (``do_remote_decode``) cannot stream.  Raises InvalidParam naming ``field.key``."""
    if not kv:
        return
    for key, kind in KV_TRANSFER_TYPES.items():
        v = kv.get(key)
        if v is not None and not _kv_value_ok(kind, v):
            raise InvalidParam(f"{field}.{key}: must be a {kind}, got {type(v).__name__} {str(v)[:50]!r}",
                               f"{field}.{key}")
    if kv.get("do_remote_decode") and stream:
        raise InvalidParam("Prefill does not support streaming", "stream")
