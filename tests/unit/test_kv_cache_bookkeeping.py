"""The KV cache's bookkeeping that is hard to see from outside (engine.md 4-5), driven with the
engine's own request objects: reference counts, what fits in a full cache, gaps announced as
runs, LoRA-aware eviction, sleep during a running sequence, and the publisher's batches."""
from __future__ import annotations

import time
from types import SimpleNamespace

import gevent

from generation.engine.request import GenerationRequest, Prompt, Sequence
from generation.kvcache.block_hash import BlockHasher
from generation.kvcache.cache import KVCache, KVCacheSettings
from generation.kvcache.events import EventPublisher
from support.kv_events import Listener, Recorder


class Count:
    def __init__(self):
        self.value = 0

    def inc(self, n=1):
        self.value += n


def make_cache(size=4, bs=16, served=("m1",)):
    metrics = SimpleNamespace(prefix_queries=Count(), prefix_hits=Count())
    loras = SimpleNamespace(loaded={}, slots={}, ids={})

    def count(queried, hit):
        metrics.prefix_queries.inc(queried)
        metrics.prefix_hits.inc(hit)

    kv = KVCache(KVCacheSettings(block_size=bs, capacity=size), publisher=Recorder(), count_prefix=count,
                 lora_slot=loras.ids.get, loaded_models=lambda: [*served, *loras.loaded])
    return kv, SimpleNamespace(metrics=metrics, loras=loras)


def seq_for(ids, model="m1", lora=None):
    req = GenerationRequest(request_id="r", model=model, lora=lora, prompts=[Prompt(list(ids))])
    return Sequence(req, 0, 0, req.prompts[0])


def run_once(kv, ids, **kw):
    s = seq_for(ids, **kw)
    kv.lookup(s)
    kv.start(s)
    kv.finish(s)
    return s


def test_unit_refcounts_and_usage():
    kv, sim = make_cache(size=8)
    a, b = seq_for(range(32)), seq_for(range(48))
    assert kv.lookup(a) == 0 and a.kv_hashes == BlockHasher("").block_hashes("m1", list(range(32)), 16)
    kv.start(a)
    assert kv.usage() == 2 / 8
    assert kv.lookup(b) == 32
    kv.start(b)
    assert b.cached_tokens == 32
    assert kv.usage() == 3 / 8
    kv.finish(a)
    assert kv.usage() == 3 / 8                   # shared blocks still referenced by b
    kv.finish(b)
    assert kv.usage() == 0
    assert sim.metrics.prefix_queries.value == 80 and sim.metrics.prefix_hits.value == 32
    stored = [e for e in kv.publisher.events if e[0] == "BlockStored"]
    assert [len(e[1]) for e in stored] == [2, 1] and stored[1][2] == stored[0][1][-1]


def test_unit_full_of_referenced_blocks_stores_what_fits():
    kv, _ = make_cache(size=3)
    a = seq_for(range(32))
    kv.start(a)                                   # 2 of 3 slots referenced
    b = seq_for(range(100, 148))
    kv.start(b)                                   # 3 blocks, only 1 slot left
    assert kv.usage() == 1.0
    assert kv.publisher.events[-1][1] == b.kv_hashes[:1]
    kv.finish(b)
    kv.finish(a)
    assert len(kv.model_of) == 3


def test_unit_gap_in_cached_blocks_is_announced_as_runs():
    kv, _ = make_cache(size=8)
    s = run_once(kv, range(48))
    h = s.kv_hashes
    lru = kv.unused["m1"]                         # evict the middle block by hand
    del lru[h[1]]
    del kv.model_of[h[1]]
    kv.publisher.events.clear()
    s2 = run_once(kv, list(range(48)) + list(range(900, 916)))
    assert s2.cached_tokens == 16                 # only the leading run is a prefix hit
    assert [(e[1], e[2]) for e in kv.publisher.events] == [([h[1]], h[0]), ([s2.kv_hashes[3]], h[2])]


def test_unit_unloaded_lora_blocks_are_evicted_first():
    kv, sim = make_cache(size=2)
    sim.loras.loaded["l1"] = 0
    sim.loras.ids["l1"] = 1
    base = run_once(kv, range(16))                # oldest idle block: base model
    lora = run_once(kv, range(100, 116), model="l1", lora="l1")
    assert kv.publisher.events[-1][5:8] == [1, "GPU", "l1"]
    del sim.loras.loaded["l1"]                    # adapter unloaded: its blocks go first
    run_once(kv, range(200, 216))
    assert kv.publisher.events[-2] == ["BlockRemoved", lora.kv_hashes, "GPU"]
    assert base.kv_hashes[0] in kv.model_of


def test_unit_sleep_while_running_then_finish():
    kv, sim = make_cache(size=4)
    s = seq_for(range(32))
    kv.start(s)
    kv.sleep()
    assert kv.publisher.events[-1] == ["AllBlocksCleared"]
    assert kv.usage() == 0 and kv.lookup(seq_for(range(32))) == 0
    kv.wake()
    t = seq_for(range(32))
    kv.start(t)                                   # re-stored after wake
    kv.finish(s)                                  # stale: must not release t's references
    assert kv.usage() == 2 / 4
    kv.finish(t)
    assert kv.usage() == 0


def test_unit_publisher_batches_and_numbers():
    listener = Listener()
    try:
        pub = EventPublisher(listener.endpoint, "kv@1.2.3.4:8000@m", batch_size=2, rank=3, max_pending=100)
        listener.publisher = pub
        listener.prime()
        for i in range(5):
            pub.publish(["BlockRemoved", [i], "GPU"])
        gevent.sleep(0.05)                        # the timer flushes the odd one out
        got = []
        deadline = time.time() + 5
        while len(got) < 3 and time.time() < deadline:
            m = listener._recv(100)
            if m:
                got.append(m)
        assert [(t, s) for t, s, _ in got] == [(b"kv@1.2.3.4:8000@m", i) for i in (1, 2, 3)]
        assert [[e[1][0] for e in p[1]] for _, _, p in got] == [[0, 1], [2, 3], [4]]
        assert all(p[2] == 3 for _, _, p in got)
        pub.close()
    finally:
        listener.close()
