"""vLLM's KV-cache events (``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``), encoded
as the reference does and published on ZMQ (:class:`EventPublisher`).
"""
from __future__ import annotations

import logging
import os
import re
import struct
import time
from typing import Callable

import gevent
import msgpack

log = logging.getLogger("vllm_sim.kvcache")

MEDIUM = "GPU"
MEDIUM_CPU = "CPU"          # vLLM's MEDIUM_CPU: the offloading connector's CPU tier
FLUSH_DELAY = 0.002         # seconds: coalesce events of requests starting together
SUBSCRIBER_WAIT = 2.0       # seconds events wait for a first subscriber (EventPublisher)


# ---- events --------------------------------------------------------------------------------
GROUP_IDX = 0                   # the one KV-cache group (one full-attention pool)
SPEC_KIND = "full_attention"    # vLLM's KVCacheSpecKind of that group


def block_stored(hashes, parent, token_ids, block_size, lora_id, lora_name, map_format: bool,
                 extra_keys=None):
    """A ``BlockStored`` event in the legacy array form (9 positions, nil where absent, parent
    nil when there is none, as vLLM and case C21: engine.md 4.6 says the reference sends ``0``,
    the fault llm-d-inference-sim PR #570 fixed) or, with ``map_format``, vLLM 0.34's own
    (``vllm/distributed/kv_events.py``: a tagged msgspec struct with ``omit_defaults``, built
    by ``BlockPool._build_block_stored_event``): the required fields always written, nil when
    unset (vLLM's decoder requires them all, case C38), then ``extra_keys`` (one entry per
    block: nil, or the block's untagged extra keys such as ``[lora_name]``; vLLM writes the
    list even when every entry is nil), ``group_idx`` 0 and ``kv_cache_spec_kind``
    ``"full_attention"``.  ``extra_keys``: that list (None: nil for every block)."""
    if map_format:
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                "token_ids": token_ids, "block_size": block_size, "lora_id": lora_id,
                "medium": MEDIUM, "lora_name": lora_name,
                "extra_keys": extra_keys if extra_keys is not None else [None] * len(hashes),
                "group_idx": GROUP_IDX, "kv_cache_spec_kind": SPEC_KIND}
    return ["BlockStored", hashes, parent, token_ids, block_size, lora_id,
            MEDIUM, lora_name, None]


def block_removed(hashes, map_format: bool, medium: str = MEDIUM):
    """A ``BlockRemoved`` event (vLLM 0.34's map form adds ``group_idx``), on the GPU or, with
    ``medium`` :data:`MEDIUM_CPU`, evicted from the CPU tier (one per store that evicts, the
    group's hashes in eviction order: ``OffloadingEventsTracker._take_removed_event``)."""
    if map_format:
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium, "group_idx": GROUP_IDX}
    return ["BlockRemoved", hashes, medium]


def cpu_block_stored(block_hash, map_format: bool):
    """The ``BlockStored`` of one block written to the CPU tier, as vLLM 0.34's offloading
    connector publishes it by default (``OffloadingEventsTracker._placeholder_stored``: the
    tracker's self-describing payloads are off unless ``kv_connector_extra_config`` asks for
    ``self_describing_kv_events``): one event per block, its hash alone, parent nil, no token ids,
    ``block_size`` 0, no LoRA, ``medium`` ``"CPU"``, ``group_idx`` 0; ``extra_keys`` and
    ``kv_cache_spec_kind`` keep their defaults (nil), so msgspec's ``omit_defaults`` leaves them
    out of the map.  The array form has the same values in the reference's positions."""
    return cpu_blocks_stored([block_hash], 0, map_format)


def cpu_blocks_stored(hashes, block_size: int, map_format: bool):
    """The ``BlockStored`` of the blocks one request wrote to the CPU tier, as vLLM 0.15.1's
    offloading connector publishes a completed store (``OffloadingConnectorScheduler.take_events``:
    all the hashes of one ``complete_store``, parent nil, no token ids, ``block_size`` the
    offloaded block size (0 from vLLM 0.20.0), no LoRA, ``medium`` ``"CPU"``); the fields as
    :func:`cpu_block_stored` otherwise."""
    if map_format:
        return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": None, "token_ids": [],
                "block_size": block_size, "lora_id": None, "medium": MEDIUM_CPU, "lora_name": None,
                "group_idx": GROUP_IDX}
    return ["BlockStored", list(hashes), None, [], block_size, None, MEDIUM_CPU, None, None]


def all_blocks_cleared(map_format: bool):
    """An ``AllBlocksCleared`` event."""
    return {"type": "AllBlocksCleared"} if map_format else ["AllBlocksCleared"]


_U64, _U32 = struct.Struct(">BQ"), struct.Struct(">BI")


def _u64s(values) -> bytes:
    return _array_head(len(values)) + b"".join(_U64.pack(0xCF, v) for v in values)


def _u32s(values) -> bytes:
    return _array_head(len(values)) + b"".join(_U32.pack(0xCE, v) for v in values)


def _array_head(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else (b"\xdc" + struct.pack(">H", n) if n < 65536
                                             else b"\xdd" + struct.pack(">I", n))


def pack_event(ev) -> bytes:
    """msgpack of one event.  The legacy array form as the Go reference encodes it (engine.md
    4.6): block hashes and the parent as ``0xcf`` + 8 bytes, token ids as ``0xce`` + 4 bytes,
    the rest compact.  The map form as vLLM's ``msgspec`` encoder does: every integer in its
    shortest form (a hash below 2**32 is not widened), tuples as arrays, and the map's header
    sized for every field the struct could write (msgspec fills in the count afterwards):
    ``BlockStored``, 16 with its tag, always gets a map16 header (``0xde`` + 2 bytes)."""
    packb = msgpack.packb
    if isinstance(ev, dict):
        if ev.get("type") != "BlockStored":
            return packb(ev)
        return b"\xde" + struct.pack(">H", len(ev)) + b"".join(packb(k) + packb(v) for k, v in ev.items())
    out = [_array_head(len(ev)), packb(ev[0])]
    if ev[0] in ("BlockStored", "BlockRemoved"):
        out.append(_u64s(ev[1]))
        rest = ev[2:]
        if ev[0] == "BlockStored":
            out.append(_U64.pack(0xCF, rest[0]) if rest[0] is not None else b"\xc0")
            out.append(_u32s(rest[1]))
            rest = rest[2:]
        out.extend(packb(v) for v in rest)
    else:
        out.extend(packb(v) for v in ev[1:])
    return b"".join(out)


def pack_batch(ts: float, events: list, rank: int) -> bytes:
    """The payload ``[ts, [events], rank]`` (``ts`` as float64)."""
    return (b"\x93" + struct.pack(">Bd", 0xCB, ts) + _array_head(len(events))
            + b"".join(pack_event(e) for e in events) + msgpack.packb(rank))


def rank_endpoint(endpoint: str, rank: int) -> str:
    """``endpoint`` with its port offset by the data-parallel ``rank`` (engine.md 8)."""
    if rank <= 0:
        return endpoint
    m = re.match(r"^(.*):(\d+)$", endpoint)
    if not m:
        return endpoint
    return f"{m.group(1)}:{int(m.group(2)) + rank}"


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule: a wildcard (``tcp://*:5557``, ``::``), ``ipc://`` or ``inproc://`` endpoint is
    bound by the publisher; any other is connected to (the consumer binds)."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class EventPublisher:
    """Batches KV events and sends them on a ZMQ XPUB socket that connects to ``endpoint`` (or
    binds it: :func:`is_bind_endpoint`).

    Message: ``[topic, seq (8-byte big-endian, from ``first_seq``, +1 per batch), msgpack([ts,
    events, rank])]``; ``first_seq`` 1 as the reference, 0 as vLLM's ``ZmqEventPublisher``
    (``itertools.count()``) with ``ts`` in unix seconds (float).  At most ``batch_size`` events per message;
    a batch goes out as soon as it is full, the rest ``FLUSH_DELAY`` after the first pending
    event.  At most ``max_pending`` events wait (more are dropped, as the reference's bounded
    queue does).  The socket is ``zmq.green`` (never blocks the gevent hub) and connects at
    construction (ZMQ retries until the consumer binds), and again in a forked child.

    Slow joiner: a PUB socket silently drops what it sends before the consumer's subscription
    has reached it, and a bound SUB sends its subscription only once it polls, so the first
    request's events after start-up were lost in about half of fresh starts.  XPUB is PUB on the
    wire (same frames) but hands the subscriptions to the application: a greenlet reads them,
    and while no subscription matching ``topic`` is known, events are held (still at most
    ``max_pending``) until one arrives or ``SUBSCRIBER_WAIT`` seconds after the first held
    event, then sent as usual (numbered, and given to ``on_sent`` for replay).  When the last
    matching subscriber leaves, the next events wait for a new one the same way.

    ``hold``: None, or a callable that is true while an engine step is running (step mode):
    events then wait for :meth:`step_end`, which sends all of the step's events as one batch,
    whatever ``batch_size``, as vLLM's scheduler publishes one ``KVEventBatch`` per step
    (``EngineCore`` takes the block pool's events after each step); events while no step runs
    (``/reset_prefix_cache`` on an idle engine) go out as usual.

    ``listeners``: callables ``(seq, ts, events)`` given every batch as it is sent, with its
    sequence number and timestamp (gRPC ``SubscribeKvEvents`` relays the ZMQ batches through
    them, as vLLM's servicer does); a listener counts as a subscriber.  An empty ``endpoint``
    opens no socket: batches go to the listeners only (none: they are dropped)."""

    def __init__(self, endpoint: str, topic: str, batch_size: int, rank: int, max_pending: int,
                 on_sent: Callable[[bytes, bytes], None] | None = None, first_seq: int = 1):
        self.endpoint = endpoint
        self.on_sent = on_sent          # (seq frame, payload) of every batch sent: replay
        self.topic = topic.encode()
        self.batch_size = max(batch_size, 1)
        self.rank = rank
        self.max_pending = max(max_pending, self.batch_size)
        self.pending: list = []
        self.first_seq = first_seq
        self.seq = first_seq - 1        # the last sequence number sent
        self._socket = None
        self._reader = None             # greenlet reading the XPUB's (un)subscriptions
        self._pid = 0
        self._timer = None
        self._subscriptions: set[bytes] = set()   # prefixes some subscriber has subscribed to
        self.subscribed = False         # one of them matches ``topic``: sends reach someone
        self._held_since = None         # monotonic time of the first event held for a subscriber
        self.dropped = 0
        self.listeners: list = []
        self.hold: Callable[[], bool] | None = None     # step mode: a step is running
        self.bind_error: str | None = None     # why the socket could not be bound (a fleet pod refuses to start)
        if not endpoint:
            return
        try:        # connect now: the subscription handshake must be done before the first event
            self._connect()
        except Exception as e:
            log.error("cannot connect the KV-event publisher to %s: %s", endpoint, e)
            self.bind_error = f"cannot bind the KV-event publisher to {endpoint}: {e}"

    def publish(self, event) -> None:
        """Queue one event; never blocks."""
        if len(self.pending) >= self.max_pending:
            self.dropped += 1
            return
        self.pending.append(event)
        if self.hold is not None and self.hold():
            return                  # the step's end sends it (step_end)
        if len(self.pending) >= self.batch_size:
            self.flush()
        elif self._timer is None:
            self._timer = gevent.spawn_later(FLUSH_DELAY, self._timed_flush)

    def step_end(self) -> None:
        """An engine step ended: its events go out now, as one batch."""
        if self.pending:
            self.flush()

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Send every pending event now, ``batch_size`` per message, unless they are being held
        for a first subscriber (then a timer sends them when the wait is over)."""
        if not self.pending:
            return
        sock = None
        if self.endpoint:
            try:
                sock = self._socket if self._pid == os.getpid() else self._connect()
            except Exception:     # a broken publisher must never fail requests
                log.exception("failed to connect the KV-event publisher to %s", self.endpoint)
                self.pending = []
                return
        elif not self.listeners:
            self.pending = []     # no socket, nobody listening
            return
        if not self.subscribed and not self.listeners:
            now = time.monotonic()
            if self._held_since is None:
                self._held_since = now
            wait = self._held_since + SUBSCRIBER_WAIT - now
            if wait > 0:
                if self._timer is None:
                    self._timer = gevent.spawn_later(wait, self._timed_flush)
                return
        self._held_since = None
        pending, self.pending = self.pending, []
        try:
            bs = self.batch_size if self.hold is None else len(pending)   # step mode: one per step
            for i in range(0, len(pending), bs):
                self.seq += 1
                ts, events = time.time(), pending[i:i + bs]
                for listener in self.listeners:
                    listener(self.seq, ts, events)
                if sock is None:
                    continue
                payload = pack_batch(ts, events, self.rank)
                seq = struct.pack(">Q", self.seq)
                sock.send_multipart([self.topic, seq, payload], copy=True)
                if self.on_sent is not None:
                    self.on_sent(seq, payload)
        except Exception:     # a broken publisher must never fail requests
            log.exception("failed to publish KV events to %s", self.endpoint)

    def _connect(self):
        import zmq.green as zmq
        if self._reader is not None:
            self._reader.kill(block=False)
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.XPUB)
        sock.setsockopt(zmq.LINGER, 0)          # pending events are discarded on shutdown
        if is_bind_endpoint(self.endpoint):
            sock.bind(self.endpoint)
        else:
            sock.connect(self.endpoint)
        self._socket = sock
        self._pid = os.getpid()      # a forked child (gunicorn --preload) reconnects
        self._subscriptions = set()
        self.subscribed = False
        self._reader = gevent.spawn(self._read_subscriptions, sock, self._pid)
        return sock

    def _read_subscriptions(self, sock, pid: int) -> None:
        """XPUB hands over ``b"\\x01" + prefix`` when a prefix gets its first subscriber and
        ``b"\\x00" + prefix`` when its last one leaves (a closed connection included)."""
        while True:
            if sock is not self._socket or os.getpid() != pid:
                return                       # replaced, closed, or a forked copy
            try:
                msg = sock.recv()
            except Exception:                # socket closed
                return
            if not msg or msg[0] not in (0, 1):
                continue
            if msg[0] == 1:
                self._subscriptions.add(msg[1:])
            else:
                self._subscriptions.discard(msg[1:])
            self.subscribed = any(self.topic.startswith(p) for p in self._subscriptions)
            if self.subscribed and self.pending:
                if self._timer is not None:
                    self._timer.kill(block=False)
                    self._timer = None
                self.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None
        if self._reader is not None:
            self._reader.kill(block=False)
            self._reader = None
        self.pending = []
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None


