"""The KV-event relay behind gRPC ``SubscribeKvEvents`` (issue 24): the publisher's batches, as
sent on ZMQ, converted to ``KvEventBatch`` messages; a publisher without a socket."""
from __future__ import annotations

import gevent
import gevent.queue
import pytest

pytest.importorskip("smg_grpc_proto")
from smg_grpc_proto.generated import common_pb2  # noqa: E402

from generation.kvcache.events import (EventPublisher, all_blocks_cleared, block_removed, block_stored,  # noqa: E402
                                       cpu_block_stored)
from server.grpc_support import KvEventRelay, signed64  # noqa: E402

BIG = (1 << 64) - 5


def test_signed64():
    assert signed64(5) == 5 and signed64(BIG) == -5 and signed64((1 << 63) - 1) == (1 << 63) - 1


@pytest.mark.parametrize("map_format", [False, True])
def test_events_convert_in_both_wire_forms(map_format):
    relay = KvEventRelay(EventPublisher("", "t", 16, 2, 100), block_size=2, rank=2)
    stored = relay.convert(common_pb2, block_stored([1, BIG], 7, [10, 11, 12, 13], 2, 3, "ad", map_format), 1)
    s = stored.stored
    assert [b.block_hash for b in s.blocks] == [1, -5] and [list(b.token_ids) for b in s.blocks] == [[10, 11], [12, 13]]
    assert all(b.block_size == 2 and b.lora_id == 3 and b.cache_level == 0 for b in s.blocks)
    assert (s.parent_block_hash, s.medium, s.lora_name) == (7, "GPU", "ad")
    assert (s.tier, s.locality) == (common_pb2.KV_CACHE_TIER_DEVICE, common_pb2.KV_CACHE_LOCALITY_LOCAL)
    root = relay.convert(common_pb2, block_stored([1], None, [1, 2], 2, None, None, map_format), 2).stored
    assert not root.HasField("parent_block_hash") and not root.blocks[0].HasField("lora_id")
    removed = relay.convert(common_pb2, block_removed([BIG], map_format), 3)
    assert list(removed.removed.block_hashes) == [-5] and removed.removed.medium == "GPU"
    assert relay.convert(common_pb2, all_blocks_cleared(map_format), 4).WhichOneof("data") == "cleared"


@pytest.mark.parametrize("map_format", [False, True])
def test_the_cpu_tiers_events_are_on_the_host(map_format):
    # the proto's mapping of the engine's medium: CPU is the host tier, cache_level 1
    relay = KvEventRelay(EventPublisher("", "t", 16, 0, 100), block_size=2, rank=0)
    s = relay.convert(common_pb2, cpu_block_stored(BIG, map_format), 1).stored
    assert [b.block_hash for b in s.blocks] == [-5] and list(s.blocks[0].token_ids) == []
    assert (s.tier, s.medium, s.blocks[0].cache_level) == (common_pb2.KV_CACHE_TIER_HOST, "CPU", 1)
    assert not s.HasField("parent_block_hash") and not s.blocks[0].HasField("lora_id")
    r = relay.convert(common_pb2, block_removed([1, 2], map_format, "CPU"), 2).removed
    assert (list(r.block_hashes), r.tier, r.medium, r.cache_level) == ([1, 2], common_pb2.KV_CACHE_TIER_HOST, "CPU", 1)


def test_a_socketless_publisher_feeds_its_listeners_only():
    pub = EventPublisher("", "t", 2, 1, 100)
    pub.publish(block_removed([1], False))
    pub.flush()
    assert pub.pending == [] and pub.seq == 0             # nobody listening: dropped
    relay = KvEventRelay(pub, block_size=2, rank=1)
    q = gevent.queue.Queue()
    relay.subscribe(q)
    for h in (1, 2, 3):
        pub.publish(block_removed([h], False))
    pub.flush()
    batches = [q.get(timeout=1) for _ in range(2)]        # batch size 2: two batches
    assert [b.sequence_number for b in batches] == [1, 2] and [len(b.events) for b in batches] == [2, 1]
    assert [e.event_id for b in batches for e in b.events] == [1, 2, 3]
    assert all(b.dp_rank == 1 and b.timestamp > 0 for b in batches)
    relay.unsubscribe(q)
    assert pub.listeners == []
    pub.publish(block_removed([4], False))
    gevent.sleep(0.05)
    assert q.qsize() == 0
