"""vLLM's ``--kv-events-config`` (its ``KVEventsConfig`` JSON), read onto the simulator's own KV
options, so that deployers passing vLLM's flag (KServe, llm-d charts) get KV events without the
reference simulator's flags.

Keys, as vLLM's dataclass: ``enable_kv_cache_events`` (bool; false: the rest is read but nothing
is enabled), ``publisher`` (``"zmq"``, the default when enabled, or ``"null"``: events are kept
but not sent), ``endpoint`` (default ``tcp://*:5557``; a wildcard, ``ipc://`` or ``inproc://``
endpoint is bound, any other connected, as vLLM's publisher does), ``replay_endpoint``,
``buffer_steps`` (the replay buffer, read as batches), ``hwm`` and ``max_queue_size`` (checked,
no effect), ``topic`` (default ``""``, as vLLM; replaces the reference's
``kv@<POD_IP>:<port>@<model>``, so ``POD_IP`` is then not needed).  Enabled, it also gives
vLLM's wire format, as vLLM 0.34's ``ZmqEventPublisher`` sends it: events as tagged maps
(``--use-vllm-map-event-format``, unless given) and sequence numbers from 0.  An unknown key or a value
of the wrong type is a ConfigError naming ``kv-events-config``.  The simulator's own flags
(``--enable-kvcache``, ``--zmq-endpoint``, ``--kv-events-replay-endpoint``,
``--kv-events-replay-queue-size``), when given, win over the JSON.
"""
from __future__ import annotations

from typing import Any

from .values import ConfigError

_KEYS: dict[str, tuple] = {
    "enable_kv_cache_events": (bool,), "publisher": (str, type(None)), "endpoint": (str,),
    "replay_endpoint": (str, type(None)), "buffer_steps": (int,), "hwm": (int,), "max_queue_size": (int,),
    "topic": (str,),
}
DEFAULT_ENDPOINT = "tcp://*:5557"


def _check(obj: dict) -> None:
    for key, value in obj.items():
        kinds = _KEYS.get(key)
        if kinds is None:
            raise ConfigError(f"invalid value for --kv-events-config: unknown field {key!r} (known: "
                              f"{', '.join(_KEYS)})", "kv-events-config")
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ConfigError(f"invalid value for --kv-events-config: {key} must be "
                              f"{' or '.join('null' if k is type(None) else k.__name__ for k in kinds)}",
                              "kv-events-config")
    if obj.get("publisher") not in (None, "null", "zmq"):
        raise ConfigError(f"invalid value for --kv-events-config: publisher must be 'null' or 'zmq', got "
                          f"{obj['publisher']!r}", "kv-events-config")
    for key in ("buffer_steps", "hwm", "max_queue_size"):
        if obj.get(key, 1) < 1:
            raise ConfigError(f"invalid value for --kv-events-config: {key} must be at least 1", "kv-events-config")


def apply_kv_events_config(cfg: Any, explicit: frozenset) -> None:
    """Read ``cfg.kv_events_config`` (None or the parsed object) onto ``cfg``'s KV options that
    ``explicit`` (the options given) does not name.  Raises ConfigError."""
    obj = cfg.kv_events_config
    if obj is None:
        return
    _check(obj)
    if not obj.get("enable_kv_cache_events", False):
        return

    def put(option: str, attr: str, value) -> None:
        if option not in explicit:
            setattr(cfg, attr, value)

    put("enable-kvcache", "enable_kvcache", True)
    # vLLM's flag, vLLM's wire: its events are tagged maps (KVCacheEvent is not array_like)
    put("use-vllm-map-event-format", "use_vllm_map_event_format", True)
    publisher = obj.get("publisher") or "zmq"
    put("zmq-endpoint", "zmq_endpoint", obj.get("endpoint", DEFAULT_ENDPOINT) if publisher == "zmq" else "")
    if obj.get("replay_endpoint"):
        put("kv-events-replay-endpoint", "kv_events_replay_endpoint", obj["replay_endpoint"])
    if "buffer_steps" in obj:
        put("kv-events-replay-queue-size", "kv_events_replay_queue_size", obj["buffer_steps"])
    cfg.kv_events_topic = obj.get("topic", "")
