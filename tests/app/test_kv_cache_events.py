"""The simulated prefix KV cache and its ZMQ events through the app (engine.md 4-5, api.md 10;
cases C19-C21).

The tests listen the way llm-d's kv-cache manager does: a ZMQ SUB socket that BINDS (the
simulator's PUB connects; ``support.kv_events.Listener``).  They run in-process (the app
through ``httpx.WSGITransport``; its ``zmq.green`` PUB socket publishes from this process, its
flush timer runs whenever the listener yields to the gevent hub); case C20 also runs against
one real server (the PUB of a server process, the real port in the topic).
"""
from __future__ import annotations

import json
import time
import uuid

import gevent
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from generation.kvcache.block_hash import BlockHasher
from support import sse_events
from support.kv_events import POD_IP, Listener, completion, kind

PORT = "8000"       # in-process apps: the --port their KV-event topic names (case C20's setup)
SLEEP_ENV = {"POD_IP": POD_IP, "VLLM_SERVER_DEV_MODE": "1"}
SEED = "7"          # explicit --hash-seed, so an inherited PYTHONHASHSEED cannot change the hashes


def metric_values(base: httpx.Client) -> dict:
    """Sample name -> value of every ``vllm:*`` sample (single-series metrics)."""
    text = base.get("/metrics").text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, s.value)
    return out


def unique_text(words: int = 100) -> str:
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"w{tag}{i}" for i in range(words))


def reset_cache(base: httpx.Client, listener: Listener) -> None:
    """Empty the simulator's cache (sleep + wake) and drop the events that produced."""
    assert base.post("/sleep").status_code == 200
    assert base.post("/wake_up").status_code == 200
    listener.drain()


def close_publisher(client) -> None:
    """Stop an in-process app's KV-event publisher (before its listener goes away)."""
    kv = client.sim.kv_cache
    if kv is not None and kv.publisher is not None:
        kv.publisher.close()


# ---- simulators --------------------------------------------------------------------------------
LEGACY_FLAGS = ("--model", "m1", "--enable-kvcache", "--block-size", "16", "--event-batch-size", "16",
                "--hash-seed", SEED, "--enable-sleep-mode")


@pytest.fixture(scope="module")
def legacy(app_client):
    """Simulator A: case C20's setup (legacy array events), plus sleep mode to reset the cache."""
    listener = Listener()
    base = app_client(*LEGACY_FLAGS, "--port", PORT, "--zmq-endpoint", listener.endpoint, env=SLEEP_ENV)
    listener.publisher = base.sim.kv_cache.publisher
    listener.prime()
    yield base, listener
    close_publisher(base)
    listener.close()


@pytest.fixture
def fresh(legacy):
    base, listener = legacy
    reset_cache(base, listener)
    return base, listener


@pytest.fixture(scope="module")
def legacy_server(live_client):
    """Simulator A as a real server (``python app.py``), its PUB socket in that process."""
    listener = Listener()
    base = live_client(*LEGACY_FLAGS, "--zmq-endpoint", listener.endpoint, env=SLEEP_ENV)
    listener.prime()
    yield base, listener
    listener.close()


@pytest.fixture(params=["inproc", pytest.param("server", marks=pytest.mark.server)])
def c20(request):
    """``(client, listener, port in the topic)``: simulator A in-process, then as a real server."""
    if request.param == "inproc":
        base, listener = request.getfixturevalue("legacy")
        port = PORT
    else:
        base, listener = request.getfixturevalue("legacy_server")
        port = base.url.rsplit(":", 1)[1]
    reset_cache(base, listener)
    return base, listener, port


@pytest.fixture(scope="module")
def small(app_client):
    """Simulator B: a 4-block cache, vLLM map-format events, one LoRA adapter."""
    listener = Listener()
    base = app_client("--model", "m1", "--enable-kvcache", "--kv-cache-size", "4", "--zmq-endpoint",
                      listener.endpoint, "--use-vllm-map-event-format", "--hash-seed", SEED,
                      "--lora-modules", json.dumps({"name": "lora1", "path": "/tmp/lora1"}),
                      "--enable-sleep-mode", env=SLEEP_ENV)
    listener.publisher = base.sim.kv_cache.publisher
    listener.prime()
    yield base, listener
    close_publisher(base)
    listener.close()


@pytest.fixture
def small_fresh(small):
    base, listener = small
    reset_cache(base, listener)
    return base, listener


@pytest.fixture(scope="module")
def slow(app_client):
    """Simulator C: per-token prefill (6 ms/token, so cache hits shorten TTFT), a global cache-hit
    threshold of 0.5, and no ZMQ endpoint (events are discarded)."""
    return app_client("--model", "m1", "--enable-kvcache", "--prefill-time-per-token", "6ms",
                      "--global-cache-hit-threshold", "0.5", "--zmq-endpoint", "", env={"POD_IP": POD_IP})


# ---- C20 -----------------------------------------------------------------------------------------
def test_c20_topic_frames_and_block_stored(c20):
    base, listener, port = c20
    ids = list(range(100, 140))
    r = completion(base, ids)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 40
    events = listener.events_until(lambda e: kind(e) == "BlockStored")
    msg = listener.messages[-1]
    topic, seq, payload = msg
    assert topic == f"kv@{POD_IP}:{port}@m1".encode()
    assert seq >= 1
    assert isinstance(payload, list) and len(payload) == 3
    ts, batch, rank = payload
    assert isinstance(ts, float) and abs(ts - time.time()) < 60
    assert rank == 0
    stored = [e for e in events if kind(e) == "BlockStored"]
    assert len(stored) == 1
    ev = stored[0]
    assert len(ev) == 9
    tag, hashes, parent, token_ids, block_size, lora_id, medium, lora_name, extra = ev
    assert block_size == 16
    assert len(hashes) == 2 == 40 // 16                      # only full prompt blocks
    assert len(token_ids) == 16 * len(hashes)
    assert token_ids == ids[:32]
    assert medium == "GPU"
    assert parent is None and lora_id is None and lora_name is None and extra is None
    assert hashes == BlockHasher(SEED).block_hashes("m1", ids, 16)


def test_sequence_numbers_increase_by_one_per_batch(fresh):
    base, listener = fresh
    before = listener.last_seq if listener.last_seq is not None else 0     # the reference numbers from 1
    for k in range(3):
        assert completion(base, list(range(1000 + 100 * k, 1016 + 100 * k))).status_code == 200
        listener.events_until(lambda e: kind(e) == "BlockStored")
    seqs = [m[1] for m in listener.messages if m[1] > before]
    assert seqs == list(range(before + 1, before + 1 + len(seqs)))
    assert len(seqs) == 3


def test_partial_block_prompt_stores_nothing(fresh):
    base, listener = fresh
    r = completion(base, list(range(300, 315)))                # 15 tokens < one block
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    time.sleep(0.1)
    assert listener.drain() == []


# ---- C21 -----------------------------------------------------------------------------------------
def test_c21_parent_block_hash_of_reused_prefix(fresh):
    base, listener = fresh
    a = list(range(100, 132))
    b = a + list(range(200, 216))
    m0 = metric_values(base)
    assert completion(base, a).status_code == 200
    ev_a = [e for e in listener.events_until(lambda e: kind(e) == "BlockStored") if kind(e) == "BlockStored"]
    assert len(ev_a) == 1
    assert ev_a[0][2] is None                                # first block: parent nil (case C21)
    assert len(ev_a[0][1]) == 2
    m1 = metric_values(base)
    r = completion(base, b)
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    ev_b = [e for e in listener.events_until(lambda e: kind(e) == "BlockStored") if kind(e) == "BlockStored"]
    assert len(ev_b) == 1
    assert ev_b[0][1] == BlockHasher(SEED).block_hashes("m1", b, 16)[2:]     # exactly 1 new hash
    assert ev_b[0][2] == ev_a[0][1][-1]                      # parent = A's last block
    assert ev_b[0][3] == list(range(200, 216))
    m2 = metric_values(base)
    assert m1["vllm:prefix_cache_queries_total"] - m0["vllm:prefix_cache_queries_total"] == 32
    assert m1["vllm:prefix_cache_hits_total"] - m0["vllm:prefix_cache_hits_total"] == 0
    assert m2["vllm:prefix_cache_queries_total"] - m1["vllm:prefix_cache_queries_total"] == 48
    assert m2["vllm:prefix_cache_hits_total"] - m1["vllm:prefix_cache_hits_total"] == 32


def test_repeated_prompt_hits_and_announces_nothing(fresh):
    base, listener = fresh
    ids = list(range(500, 540))
    assert completion(base, ids).status_code == 200
    listener.events_until(lambda e: kind(e) == "BlockStored")
    m0 = metric_values(base)
    r = completion(base, ids)
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    time.sleep(0.1)
    assert listener.drain() == []
    m1 = metric_values(base)
    assert m1["vllm:prefix_cache_queries_total"] - m0["vllm:prefix_cache_queries_total"] == 40
    assert m1["vllm:prefix_cache_hits_total"] - m0["vllm:prefix_cache_hits_total"] == 32
    assert m1["vllm:kv_cache_usage_perc"] == 0.0


def test_chat_reports_cached_tokens(fresh):
    base, listener = fresh
    body = {"model": "m1", "messages": [{"role": "user", "content": unique_text(60)}], "max_tokens": 3}
    first = base.post("/v1/chat/completions", json=body).json()
    p = first["usage"]["prompt_tokens"]
    assert p > 32
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    second = base.post("/v1/chat/completions", json=body).json()
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": p // 16 * 16}


def test_models_do_not_share_blocks(small_fresh):
    base, listener = small_fresh
    ids = list(range(700, 716))
    assert completion(base, ids).status_code == 200
    r = completion(base, ids, model="lora1")
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


# ---- C19 -----------------------------------------------------------------------------------------
def test_c19_header_forces_cache_threshold_without_kvcache(api):
    r = api.post("/v1/chat/completions", headers={"X-Cache-Threshold-Finish-Reason": "true"},
                   json={"model": "test-model", "messages": [{"role": "user", "content": "hello there"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "cache_threshold"
    assert body["usage"]["completion_tokens"] == 0
    assert body["usage"]["prompt_tokens"] > 0


def test_c19_fresh_prompt_below_request_threshold(fresh):
    base, _ = fresh
    t0 = time.monotonic()
    r = base.post("/v1/chat/completions", json={
        "model": "m1", "messages": [{"role": "user", "content": unique_text(100)}], "cache_hit_threshold": 0.9})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "cache_threshold"
    assert body["usage"]["completion_tokens"] == 0
    assert time.monotonic() - t0 < 2


def test_c19_cached_prompt_passes_threshold(fresh):
    base, _ = fresh
    msgs = [{"role": "user", "content": unique_text(100)}]
    warm = base.post("/v1/chat/completions", json={"model": "m1", "messages": msgs, "max_tokens": 10})
    assert warm.json()["choices"][0]["finish_reason"] in ("stop", "length")
    r = base.post("/v1/chat/completions", json={"model": "m1", "messages": msgs, "max_tokens": 10,
                                                        "cache_hit_threshold": 0.5})
    body = r.json()
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert body["usage"]["completion_tokens"] > 0
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0
    assert cached == body["usage"]["prompt_tokens"] // 16 * 16


def test_c19_out_of_range_threshold_is_ignored(fresh):
    base, _ = fresh
    r = base.post("/v1/chat/completions", json={
        "model": "m1", "messages": [{"role": "user", "content": unique_text(100)}], "max_tokens": 5,
        "cache_hit_threshold": 1.5})
    if r.status_code == 400:
        return
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] != "cache_threshold"


def test_c19_threshold_zero_never_triggers(fresh):
    base, _ = fresh
    r = completion(base, list(range(2000, 2064)), cache_hit_threshold=0)
    assert r.json()["choices"][0]["finish_reason"] != "cache_threshold"


def test_c19_threshold_on_completions_streaming(fresh):
    base, _ = fresh
    r = base.post("/v1/completions", json={"model": "m1", "prompt": list(range(3000, 3064)),
                                                   "max_tokens": 5, "stream": True, "cache_hit_threshold": 1,
                                                   "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    finishes = [c["finish_reason"] for e in events[:-1] for c in e.get("choices", [])]
    assert finishes == ["cache_threshold"]
    assert events[-2]["usage"]["completion_tokens"] == 0
    assert events[-2]["usage"]["prompt_tokens"] == 64


def test_c19_messages_header_maps_to_max_tokens(api):
    r = api.post("/v1/messages", headers={"X-Cache-Threshold-Finish-Reason": "true"},
                   json={"model": "test-model", "max_tokens": 20,
                         "messages": [{"role": "user", "content": "hello there"}]})
    assert r.status_code == 200
    assert r.json()["stop_reason"] == "max_tokens"


def test_global_threshold_stores_blocks_then_hits(slow):
    """--global-cache-hit-threshold 0.5: a fresh prompt ends with cache_threshold at once, but
    its blocks are stored (as the reference does), so the same prompt then passes."""
    ids = list(range(4000, 4040))
    first = completion(slow, ids)
    assert first.json()["choices"][0]["finish_reason"] == "cache_threshold"
    assert "prompt_tokens_details" not in first.json()["usage"]
    second = completion(slow, ids)
    assert second.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert second.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}


# ---- usage and latency -----------------------------------------------------------------------------
def test_usage_while_running_and_prefix_cache_shortens_ttft(slow):
    """100 tokens at 6 ms/token of prefill: ~0.6 s uncached; kv_cache_usage_perc is 7/1024 while
    it runs (6 full blocks and the partial 7th, as vLLM's pool holds them), 0 after; the repeat has 96 cached tokens and prefills ~4 tokens."""
    ids = list(range(5000, 5100))
    result = {}

    def run():
        with slow.session(timeout=30) as client:
            t0 = time.monotonic()
            result["r"] = completion(client, ids, cache_hit_threshold=0, max_tokens=1)
            result["t"] = time.monotonic() - t0

    g = gevent.spawn(run)                    # runs while this greenlet sleeps (in-process app)
    seen = []
    while not g.dead:
        seen.append(metric_values(slow)["vllm:kv_cache_usage_perc"])
        gevent.sleep(0.05)
    g.get()
    assert result["r"].status_code == 200
    assert result["t"] >= 0.5
    assert 7 / 1024 in seen
    assert metric_values(slow)["vllm:kv_cache_usage_perc"] == 0.0
    t0 = time.monotonic()
    r = completion(slow, ids, cache_hit_threshold=0, max_tokens=1)
    assert time.monotonic() - t0 < 0.35                  # ~4 tokens: 24 ms of prefill
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 96}


# ---- eviction, map format, LoRA ------------------------------------------------------------------
def test_lru_eviction_with_map_events(small_fresh):
    base, listener = small_fresh
    h = BlockHasher(SEED)
    x, y, z = (list(range(s, s + 32)) for s in (10000, 20000, 30000))
    hx, hy, hz = (h.block_hashes("m1", p, 16) for p in (x, y, z))

    def send(p, cached):
        r = completion(base, p, max_tokens=1)
        assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": cached}

    send(x, 0)
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")
    assert ev == [{"type": "BlockStored", "block_hashes": hx, "parent_block_hash": None, "token_ids": x,
                   "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
                   "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}]
    # vLLM 0.34's BlockStored struct in its field order: the required fields, nil when unset (case
    # C38: vLLM's decoder requires them), then the non-default optional ones
    assert list(ev[0]) == ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                           "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"]
    send(y, 0)
    listener.events_until(lambda e: kind(e) == "BlockStored")   # cache now full: x, y
    # an exact repeat of a block-aligned prompt hits one block less (vLLM computes its last token)
    send(x, 16)                                                  # x becomes the most recently used
    send(z, 0)                                                   # evicts y (least recently used), its
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")     # tail first, as vLLM frees blocks
    assert ev == [{"type": "BlockRemoved", "block_hashes": [hy[1]], "medium": "GPU", "group_idx": 0},
                  {"type": "BlockRemoved", "block_hashes": [hy[0]], "medium": "GPU", "group_idx": 0},
                  {"type": "BlockStored", "block_hashes": hz, "parent_block_hash": None, "token_ids": z,
                   "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
                   "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}]
    send(x, 16)
    send(y, 0)                                                   # evicts z
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")
    assert [e["block_hashes"] for e in ev] == [[hz[1]], [hz[0]], hy]


def test_prompt_larger_than_cache_is_served(small_fresh):
    base, listener = small_fresh
    ids = list(range(40000, 40100))                               # 6 blocks > 4-block cache
    r = completion(base, ids, max_tokens=1)
    assert r.status_code == 200
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")
    stored = [e for e in ev if kind(e) == "BlockStored"]
    assert stored[0]["block_hashes"] == BlockHasher(SEED).block_hashes("m1", ids, 16)[:4]
    r = completion(base, ids, max_tokens=1)
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 64}


def test_lora_block_stored_map_event(small_fresh):
    base, listener = small_fresh
    ids = list(range(50000, 50016))
    r = completion(base, ids, model="lora1")
    assert r.status_code == 200
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")
    assert ev == [{"type": "BlockStored", "block_hashes": BlockHasher(SEED).block_hashes("lora1", ids, 16),
                   "parent_block_hash": None, "token_ids": ids, "block_size": 16, "lora_id": 1, "medium": "GPU",
                   "lora_name": "lora1", "extra_keys": [None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}]
    assert list(ev[0]) == ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                           "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"]


def test_sleep_clears_map_format(small_fresh):
    base, listener = small_fresh
    assert completion(base, list(range(60000, 60016))).status_code == 200
    listener.events_until(lambda e: kind(e) == "BlockStored")
    assert base.post("/sleep").status_code == 200
    assert listener.events_until(lambda e: kind(e) == "AllBlocksCleared") == [{"type": "AllBlocksCleared"}]
    base.post("/wake_up")


# ---- sleep / wake --------------------------------------------------------------------------------
def test_sleep_clears_cache_and_wake_restores(fresh):
    """A level-1 ``/sleep`` announces ``AllBlocksCleared`` once.  vLLM 0.34's sleep pauses the
    scheduler until a full ``/wake_up`` (``EngineCore.sleep`` / ``wake_up``): a request sent while
    asleep waits in the queue and runs once everything is awake, from the emptied cache.  (This
    test had the simulator serve requests while asleep, uncached, as the Go reference does.)"""
    base, listener = fresh
    ids = list(range(70000, 70032))
    assert completion(base, ids).status_code == 200
    listener.events_until(lambda e: kind(e) == "BlockStored")
    assert base.post("/sleep").status_code == 200
    assert listener.events_until(lambda e: kind(e) == "AllBlocksCleared") == [["AllBlocksCleared"]]
    assert base.get("/is_sleeping").json() == {"is_sleeping": True}
    m0 = metric_values(base)
    try:
        assert base.post("/sleep").status_code == 200             # already asleep: no event
        job = gevent.spawn(completion, base, ids)
        gevent.sleep(0.2)
        assert not job.ready()                                    # queued while asleep
        assert base.post("/wake_up", params={"tags": "weights"}).json() == {"status": "sleeping",
                                                                            "tags": ["weights"]}
        gevent.sleep(0.1)
        assert not job.ready()                                    # the KV cache still asleep
        assert listener.drain() == []
    finally:
        assert base.post("/wake_up", params={"tags": "kv_cache"}).json() == {"status": "awake",
                                                                              "tags": ["kv_cache"]}
    job.join(5)
    assert job.value.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    m1 = metric_values(base)
    assert m1["vllm:prefix_cache_queries_total"] - m0["vllm:prefix_cache_queries_total"] == 32
    assert m1["vllm:prefix_cache_hits_total"] == m0["vllm:prefix_cache_hits_total"]
    assert base.get("/is_sleeping").json() == {"is_sleeping": False}
    ev = listener.events_until(lambda e: kind(e) == "BlockStored")
    assert ev[0][1] == BlockHasher(SEED).block_hashes("m1", ids, 16)
    # 32 ids, an exact repeat: whole blocks of at most 31 tokens hit (vLLM's rule)
    assert completion(base, ids).json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 16}
