"""vLLM's ``--kv-events-config`` honoured (issue 30): KServe and llm-d pass it instead of the
reference's flags.  The JSON turns on the KV cache and its events, the publisher binds a
wildcard endpoint as vLLM's does (the consumer connects), and the topic is vLLM's."""
from __future__ import annotations

import json
import time

import gevent
import pytest
import zmq

from generation.config.cli import load_config
from generation.config.values import ConfigError
from support import free_port, vllm_kv_events


def config(obj, *flags):
    return load_config(["--kv-events-config", json.dumps(obj), *flags], env={})


def test_the_json_maps_onto_the_kv_options():
    c = config({"enable_kv_cache_events": True})
    assert (c.enable_kvcache, c.zmq_endpoint, c.kv_topic()) == (True, "tcp://*:5557", "")   # no POD_IP needed
    c = config({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://indexer:5557",
                "replay_endpoint": "tcp://*:5558", "buffer_steps": 50, "topic": "kv@pod@m", "hwm": 10})
    assert (c.zmq_endpoint, c.kv_events_replay_endpoint, c.kv_events_replay_queue_size, c.kv_topic()) == \
        ("tcp://indexer:5557", "tcp://*:5558", 50, "kv@pod@m")
    c = config({"enable_kv_cache_events": True, "publisher": "null"})
    assert (c.enable_kvcache, c.zmq_endpoint) == (True, "")            # kept, not sent
    c = config({"enable_kv_cache_events": False, "endpoint": "tcp://*:1"})
    assert (c.enable_kvcache, c.zmq_endpoint) == (False, "tcp://127.0.0.1:5557")
    c = config({"enable_kv_cache_events": True}, "--zmq-endpoint", "tcp://10.0.0.1:7000")
    assert c.zmq_endpoint == "tcp://10.0.0.1:7000"                     # the simulator's flag wins
    assert "--kv-events-config" not in " ".join(config({}).ignored_flags)


@pytest.mark.parametrize("obj,message", [
    ({"enable_kv_cache_events": "yes"}, "enable_kv_cache_events must be bool"),
    ({"publisher": "kafka"}, "publisher must be 'null' or 'zmq'"),
    ({"endpoints": "x"}, "unknown field 'endpoints'"),
    ({"buffer_steps": 0}, "buffer_steps must be at least 1"),
    ([1], "must be a JSON object"),
])
def test_bad_json_is_a_config_error(obj, message):
    with pytest.raises(ConfigError, match=message) as e:
        config(obj)
    assert e.value.param == "kv-events-config"


def test_events_reach_a_consumer_that_connects_to_the_bound_endpoint(app_client):
    port = free_port()
    c = app_client("--kv-events-config", json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}",
                                                    "topic": "kv-test"}), "--block-size", "16")
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    try:
        gevent.sleep(0.2)                        # the subscription reaches the XPUB
        r = c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(500, 532)), "max_tokens": 1})
        assert r.status_code == 200
        deadline = time.monotonic() + 5
        while not sub.poll(0) and time.monotonic() < deadline:
            gevent.sleep(0.01)
        topic, seq, payload = sub.recv_multipart(zmq.NOBLOCK)
        # vLLM's flag gives vLLM 0.34's wire: numbering from 0 (itertools.count), events as
        # tagged maps that its msgspec decoder reads (the reference's arrays fail it)
        assert seq == b"\0" * 8
        batch = vllm_kv_events.decoder.decode(payload)
        assert (topic, batch.data_parallel_rank) == (b"kv-test", 0)
        assert isinstance(batch.events[0], vllm_kv_events.BlockStored)
        assert batch.events[0].block_hashes and batch.events[0].group_idx == 0
        assert c.get("/kv_event_sources").json() == [{"data_parallel_rank": 0, "endpoint": f"tcp://*:{port}",
                                                      "replay_endpoint": None, "topic": "kv-test"}]
    finally:
        sub.close()
        ctx.term()


def test_enable_kvcache_without_pod_ip_uses_this_hosts_address():
    """A user's case starts `--enable-kvcache --block-size 16` with no POD_IP (the reference
    refuses to start; vLLM needs none): the topic takes this host's address, and the start-up
    lines say so."""
    from generation.config.sim_config import host_address
    from server.serve import startup_summary
    c = load_config(["--enable-kvcache", "--block-size", "16"], env={})
    assert (c.pod_ip, c.pod_ip_guessed, c.kv_topic()) == (host_address(), True, f"kv@{host_address()}:8000@{c.model}")
    assert any("POD_IP is not set, this host's address stands in" in line for line in startup_summary(c, False, False))
    c = load_config(["--enable-kvcache"], env={"POD_IP": "10.0.0.5"})
    assert (c.pod_ip, c.pod_ip_guessed, c.kv_topic()) == ("10.0.0.5", False, f"kv@10.0.0.5:8000@{c.model}")
