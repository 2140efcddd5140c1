"""``--fleet-size N`` in-process (:mod:`server.fleet`): each pod is a simulator of its own,
reached by the address a request is sent to (``SERVER_NAME`` / ``SERVER_PORT``, which
``httpx.WSGITransport`` takes from the URL).  Exact per-pod accounting (counters, gauges,
histograms and KV events follow only the requests a pod served), pod identity, the control
API's scale-up delay and removal."""
from __future__ import annotations

import gevent
import httpx
import pytest

from support import _clean_env, metric, scrape
from support.kv_events import Recorder

PORT = 9100
CONTROL = 9099
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--enable-kvcache", "--block-size", "16",
        "--max-model-len", "512")


def build(*flags, size=3, env=None):
    from app import create_app
    from generation.config.cli import load_config
    from server.fleet_worker import build_fleet
    argv = ["--model", "test-model", "--host", "127.0.0.1", "--port", str(PORT), "--fleet-size", str(size),
            "--fleet-control-port", str(CONTROL), "--seed", "7", *flags]
    config = load_config(argv, env=_clean_env({"POD_IP": "10.0.0.5", "POD_NAME": "sim", **(env or {})}))
    fleet = build_fleet(config, create_app, bind=False)
    client = httpx.Client(transport=httpx.WSGITransport(app=fleet), timeout=30)
    return fleet, client


def pod_url(i: int) -> str:
    return f"http://127.0.0.1:{PORT + i}"


def pod_client(fleet, i: int) -> httpx.Client:
    return httpx.Client(base_url=pod_url(i), transport=httpx.WSGITransport(app=fleet), timeout=30)


@pytest.fixture(scope="module")
def step_fleet():
    fleet, client = build(*STEP)
    recorders = []
    for pod in fleet.pods.values():
        pod.close()                          # its ZMQ publisher: a recorder stands in
        recorders.append(Recorder())
        pod.sim.kv_cache.publisher = recorders[-1]
    yield fleet, client, recorders
    client.close()


def test_each_pod_accounts_exactly_for_the_requests_it_served(step_fleet):
    fleet, client, recorders = step_fleet
    served = {0: 3, 1: 1, 2: 0}
    prompts = {i: [] for i in served}

    def send(i, ids):
        r = client.post(pod_url(i) + "/v1/completions", json={"prompt": ids, "max_tokens": 2, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.headers["x-inference-pod"] == f"sim-{i}"
        assert r.headers["x-inference-port"] == str(PORT + i)

    jobs = []
    for i, n in served.items():
        for k in range(n):
            ids = list(range(1000 * (i + 1) + 40 * k, 1000 * (i + 1) + 40 * k + 32))     # 2 full blocks
            prompts[i].append(ids)
            jobs.append(gevent.spawn(send, i, ids))
    gevent.sleep(0)                          # every request admitted, none through its first step
    for i, n in served.items():              # each pod's gauges hold its own requests only
        s = scrape(pod_client(fleet, i))
        assert metric(s, "vllm:num_requests_running") + metric(s, "vllm:num_requests_waiting") == n
    gevent.joinall(jobs, raise_error=True)
    for i, n in served.items():
        s = scrape(pod_client(fleet, i))
        assert metric(s, "vllm:request_success_total", finished_reason="length") == n
        assert metric(s, "vllm:prompt_tokens_total") == 32 * n
        assert metric(s, "vllm:generation_tokens_total") == 2 * n
        assert metric(s, "vllm:e2e_request_latency_seconds_count") == n
        assert metric(s, "vllm:num_requests_running") == 0
        assert metric(s, "vllm:num_requests_waiting") == 0
        assert metric(s, "vllm:prefix_cache_queries_total") == 32 * n
        stored = [e[3] for e in recorders[i].events if e[0] == "BlockStored"]
        assert sorted(stored) == prompts[i]        # one event per prefill: its 2 blocks' tokens
    topics = [p.sim.config.kv_topic() for p in fleet.pods.values()]
    assert topics == [f"kv@10.0.0.5:{PORT + i}@test-model" for i in range(3)]


def test_pods_answer_as_separate_vllm_servers():
    fleet, client = build("--enable-sleep-mode", "--served-model-name", "m1", size=2,
                          env={"VLLM_SERVER_DEV_MODE": "1"})
    assert [c["id"] for c in client.get(pod_url(1) + "/v1/models").json()["data"]] == ["m1"]
    r = client.post(pod_url(1) + "/v1/completions", json={"model": "m1", "prompt": "hi", "max_tokens": 2},
                    headers={"endpoint-load-metrics-format": "TEXT"})
    assert r.status_code == 200 and r.headers["x-inference-pod"] == "sim-1"
    assert r.headers["endpoint-load-metrics"].startswith("TEXT named_metrics.kv_cache_usage_perc=")
    # vLLM 0.34's checkpoint routes, each pod its own state
    assert client.post(pod_url(0) + "/checkpoint/prepare").json() == {"state": "prepared"}
    assert client.get(pod_url(0) + "/checkpoint/status").status_code == 200
    status = client.get(pod_url(1) + "/checkpoint/status")
    assert (status.status_code, status.json()) == (503, {"state": "running"})
    assert client.get(pod_url(1) + "/is_sleeping").json() == {"is_sleeping": False}
    assert client.get(pod_url(0) + "/is_sleeping").json() == {"is_sleeping": True}     # prepared: asleep
    ids = [client.get(pod_url(i) + "/query").json()["0"]["engine_id"] for i in range(2)]
    assert ids[0] != ids[1]
    r = client.get("http://127.0.0.1:9500/health")        # nothing listens there
    assert r.status_code == 404


def test_control_api_adds_a_pod_that_starts_then_removes_it():
    fleet, client = build(size=2)
    ctl = f"http://127.0.0.1:{CONTROL}"
    assert [p["name"] for p in client.get(ctl + "/fleet/pods").json()["pods"]] == ["sim-0", "sim-1"]
    for body, param in (({"count": 0}, "count"), ({"count": "2"}, "count"), ({"startup_delay": "x"}, "startup_delay"),
                        ({"startup_delay": -1}, "startup_delay"), ([1], "body"), ({"cnt": 1}, "cnt")):
        r = client.post(ctl + "/fleet/pods", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    r = client.post(ctl + "/fleet/pods", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    r = client.put(ctl + "/fleet/pods")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    assert client.get(ctl + "/fleet/pods/sim-0").status_code == 405
    r = client.delete(ctl + "/fleet/pods/sim-0", params={"timeout": "-1"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "timeout"
    r = client.post(ctl + "/fleet/pods", json={"count": 1, "startup_delay": 0.3})
    assert r.status_code == 201
    (new,) = r.json()["pods"]
    assert (new["name"], new["port"], new["state"]) == ("sim-2", PORT + 2, "starting")
    assert client.get(pod_url(2) + "/health").status_code == 503
    assert client.post(pod_url(2) + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 503
    gevent.sleep(0.35)
    assert client.get(pod_url(2) + "/health").status_code == 200
    r = client.post(pod_url(2) + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    assert r.status_code == 200 and r.headers["x-inference-pod"] == "sim-2"
    assert client.delete(ctl + "/fleet/pods/nope").status_code == 404
    r = client.delete(ctl + "/fleet/pods/sim-2", params={"wait": "true"})
    assert r.json() == {"name": "sim-2", "state": "removed", "drained": 0, "ended": 0}
    assert client.get(pod_url(2) + "/metrics").status_code == 404          # its metrics are gone
    assert [p["name"] for p in client.get(ctl + "/fleet/pods").json()["pods"]] == ["sim-0", "sim-1"]
    assert client.delete(ctl + "/fleet/pods/sim-2").status_code == 404
    r = client.post(ctl + "/fleet/pods", json={})                     # the next index: the old port not reused
    assert r.json()["pods"][0]["port"] == PORT + 3
    stats = client.get(ctl + "/fleet/stats").json()
    assert (stats["pods"], stats["removed"]) == (3, 1) and stats["cpu_seconds"] > 0
    text = client.get(ctl + "/metrics").text
    assert 'vllm_sim:fleet_pods{state="ready"} 3.0' in text and "process_cpu_seconds_total" in text


def test_the_fleet_is_bounded_at_run_time_too(monkeypatch):
    """Scaling up stops at --fleet-size's bound (1,024 pods): a request that would pass it adds
    none (409 naming count), and past the last port a pod is a 409, not a 500."""
    import server.fleet
    import server.fleet_control
    monkeypatch.setattr(server.fleet_control, "MAX_FLEET_PODS", 3)
    monkeypatch.setattr(server.fleet, "MAX_FLEET_PODS", 3)
    fleet, client = build(size=2)
    ctl = f"http://127.0.0.1:{CONTROL}"
    r = client.post(ctl + "/fleet/pods", json={"count": 2})
    assert r.status_code == 409 and r.json()["error"]["param"] == "count" and len(fleet.pods) == 2, r.text
    assert client.post(ctl + "/fleet/pods", json={"count": 1}).status_code == 201
    r = client.post(ctl + "/fleet/pods", json={"count": 1})
    assert r.status_code == 409 and "bound of 3 pods" in r.json()["error"]["message"] and len(fleet.pods) == 3
    with pytest.raises(server.fleet.FleetError) as e:                 # and Fleet.add on its own
        fleet.add()
    assert e.value.status == 409 and "at most 3" in e.value.message
    fleet.bind, fleet.next_index = True, 70000               # --port + index past 65535
    monkeypatch.setattr(server.fleet, "MAX_FLEET_PODS", 5)
    with pytest.raises(server.fleet.FleetError) as e:
        fleet.add()
    assert e.value.status == 409 and "no such port" in e.value.message


def test_concurrent_adds_are_all_or_none_and_bodies_are_bounded(monkeypatch):
    """A hostile client's findings: three concurrent POSTs that together pass the bound were all
    answered 409 while their pods were added (the check ran before loops that yield between
    pods); a 600 MB body was read whole; ``wait=maybe`` was taken as false."""
    import server.fleet
    import server.fleet_control
    monkeypatch.setattr(server.fleet_control, "MAX_FLEET_PODS", 6)
    monkeypatch.setattr(server.fleet, "MAX_FLEET_PODS", 6)
    fleet, client = build(size=1)
    ctl = f"http://127.0.0.1:{CONTROL}"
    jobs = [gevent.spawn(client.post, ctl + "/fleet/pods", json={"count": 3}) for _ in range(3)]
    gevent.joinall(jobs, raise_error=True)
    codes = sorted(j.value.status_code for j in jobs)
    assert codes == [201, 409, 409] and len(fleet.pods) == 4          # one request's 3 pods, no stray ones
    r = client.post(ctl + "/fleet/pods", content=b"{" + b" " * 70_000 + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["param"] == "body" and len(fleet.pods) == 4
    r = client.delete(ctl + "/fleet/pods/sim-0", params={"wait": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "wait"
    assert fleet.pods["sim-0"].state == "ready"


def test_a_pod_whose_event_sockets_collide_does_not_start():
    """The fleet offsets the KV-event endpoints by the pod's index, as vLLM offsets them by
    data-parallel rank, so a publisher at P and a replay socket at P + 1 collide from pod 1 on:
    the fleet refuses to start (a FleetError, exit 1) instead of serving pods without events."""
    from server.fleet import FleetError
    from support import free_port
    for attempt in range(3):       # another test may take one of the free ports meanwhile: new ones
        p = free_port(4)
        with pytest.raises(FleetError) as e:
            build("--enable-kvcache", "--zmq-endpoint", f"tcp://*:{p}", "--kv-events-replay-endpoint",
                  f"tcp://*:{p + 1}", size=2)
        if f"tcp://*:{p + 1}" not in e.value.message and attempt < 2:
            continue
        assert e.value.status == 409 and f"tcp://*:{p + 1}" in e.value.message and "sim-1" in e.value.message
        try:
            fleet, _ = build("--enable-kvcache", "--zmq-endpoint", f"tcp://*:{p}", "--kv-events-replay-endpoint",
                             f"tcp://*:{p + 2}", size=2)       # apart by the pod count: no collision
        except FleetError:
            if attempt < 2:
                continue
            raise
        break
    assert len(fleet.pods) == 2
    for pod in fleet.pods.values():
        pod.close()


def test_fleet_flags_are_checked():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    for argv, param in ((["--fleet-size", "2", "--data-parallel-size", "2", "-dpe"], "fleet-size"),
                        (["--fleet-size", "4", "--port", "8000", "--fleet-control-port", "8003"], "fleet-control-port"),
                        (["--fleet-size", "2000"], "fleet-size"), (["--fleet-size", "2", "--grpc"], "fleet-size")):
        with pytest.raises(ConfigError) as e:
            load_config(argv, env={})
        assert e.value.param == param
    # a fleet names each pod's KV topic by its own address: POD_IP is not required
    assert load_config(["--fleet-size", "2", "--enable-kvcache"], env={}).fleet_size == 2


def test_loopback_addresses_give_each_pod_its_own_ip():
    fleet, client = build("--fleet-addresses", "loopback", "--enable-kvcache", size=2)
    for i in range(2):
        ip = f"127.1.0.{i + 1}"
        r = client.post(f"http://{ip}:{PORT}/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        assert r.status_code == 200 and r.headers["x-inference-pod"] == f"sim-{i}"
        assert fleet.pods[f"sim-{i}"].sim.config.kv_topic() == f"kv@{ip}:{PORT}@test-model"
    assert client.get(f"http://127.0.0.1:{PORT}/health").status_code == 404     # no pod at the base address
    for pod in fleet.pods.values():
        pod.close()                          # their KV-event sockets


def test_api_key_guards_the_control_api_and_the_pods():
    fleet, client = build("--api-key", "k1", size=1)
    ctl = f"http://127.0.0.1:{CONTROL}"
    assert client.get(ctl + "/fleet/pods").status_code == 401
    assert client.delete(ctl + "/fleet/pods/sim-0").status_code == 401
    assert client.get(ctl + "/health").status_code == 200
    assert client.get(ctl + "/fleet/pods", headers={"Authorization": "Bearer k1"}).status_code == 200
    assert client.get(pod_url(0) + "/v1/models").status_code == 401


@pytest.mark.parametrize("headers", [
    {"content-type": "text/plain", "origin": "http://evil.example", "sec-fetch-site": "cross-site"},
    {"content-type": "text/plain", "origin": "null"},
    {"content-type": "text/plain", "sec-fetch-site": "same-site"},
])
def test_control_api_refuses_commands_from_another_sites_page(headers):
    """A hostile tester's finding: a page the operator visits could ``fetch(control + "/fleet/pods",
    {method: "POST", mode: "no-cors", body: '{"count": 256}'})`` (``text/plain``, no preflight) and
    the control API added the pods; a command line (no Origin) or a same-origin page still can."""
    fleet, client = build(size=1)
    ctl = f"http://127.0.0.1:{CONTROL}"
    r = client.post(ctl + "/fleet/pods", content=b'{"count": 2}', headers=headers)
    assert r.status_code == 400 and "another site's page" in r.json()["error"]["message"], r.text
    r = client.delete(ctl + "/fleet/pods/sim-0", headers=headers)
    assert r.status_code == 400 and len(fleet.pods) == 1 and fleet.pods["sim-0"].state == "ready"
    assert client.get(ctl + "/fleet/pods", headers=headers).status_code == 200
    r = client.post(ctl + "/fleet/pods", content=b'{"count": 1}',
                    headers={"content-type": "application/x-www-form-urlencoded"})       # curl -d
    assert r.status_code == 201 and len(fleet.pods) == 2
    r = client.post(ctl + "/fleet/pods", json={"count": 1}, headers={"origin": f"http://127.0.0.1:{CONTROL}"})
    assert r.status_code == 201 and len(fleet.pods) == 3


def test_a_fleet_of_data_parallel_pods_gives_each_pod_one_endpoint_over_its_engines():
    """``--fleet-size 2 --data-parallel-size 2``: each pod is vLLM's one endpoint over its two
    engines (server.dp_api)."""
    fleet, client = build("--data-parallel-size", "2", "--mode", "echo", "--enable-kvcache",
                          "--zmq-endpoint", "tcp://127.0.0.1:0", size=2)
    try:
        pods = list(fleet.pods.values())
        assert [len(p.sims) for p in pods] == [2, 2]
        for _ in range(4):
            r = client.post(pod_url(0) + "/v1/completions", json={"prompt": "a b c", "max_tokens": 8})
            assert r.status_code == 200, r.text
        m0, m1 = scrape(pod_client(fleet, 0)), scrape(pod_client(fleet, 1))
        assert [metric(m0, "vllm:prompt_tokens_total", engine=e) for e in ("0", "1")] == [6.0, 6.0]
        assert [metric(m1, "vllm:prompt_tokens_total", engine=e) for e in ("0", "1")] == [0.0, 0.0]
        ranks = [[s.config.data_parallel_rank for s in p.sims] for p in pods]
        assert ranks == [[0, 1], [0, 1]]
        assert pods[0].describe()["running"] == 0 and pods[0].describe()["waiting"] == 0
    finally:
        for pod in fleet.pods.values():
            pod.close()
        client.close()


def test_data_parallel_pods_kv_event_ports_step_over_their_ranks():
    from generation.config.cli import load_config
    from server.fleet import Fleet
    config = load_config(["--fleet-size", "3", "--data-parallel-size", "2", "--enable-kvcache",
                          "--zmq-endpoint", "tcp://*:5557", "--port", str(PORT)], env=_clean_env({}))
    fleet = Fleet(config, None, bind=False)
    assert [fleet.pod_config(i).zmq_endpoint for i in range(3)] == ["tcp://*:5557", "tcp://*:5559", "tcp://*:5561"]
    assert fleet.pod_config(1).data_parallel_rank == 0


def test_a_data_parallel_pod_cannot_take_the_per_port_layout():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError) as e:
        load_config(["--fleet-size", "2", "--data-parallel-size", "2", "-dpe"], env={})
    assert e.value.param == "fleet-size"


def test_a_port_in_use_is_passed_over_not_refused_for_good():
    """A 409 for the taken port; the next pod takes the port after it (the index stuck on the
    taken port refused every later scale-up)."""
    import socket
    from app import create_app
    from generation.config.cli import load_config
    from server.fleet import Fleet, FleetError
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = load_config(["--fleet-size", "1", "--host", "127.0.0.1", "--port", str(port)], env=_clean_env({}))
    fleet = Fleet(config, create_app)
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(FleetError) as e:
            fleet.add()
        assert e.value.status == 409 and f":{port}:" in str(e.value)
        for _ in range(5):              # (a parallel test's server may hold port + 1 too)
            try:
                pod = fleet.add()
                break
            except FleetError:
                continue
        assert pod.index >= 1 and pod.port == port + pod.index
    finally:
        taken.close()
        for pod in list(fleet.pods.values()):
            pod.close()
            if getattr(pod, "listener", None) is not None:
                pod.listener.close()


def test_waiting_on_a_pod_already_draining_answers_when_it_is_gone():
    """A second ``DELETE ?wait=true`` waits for the removal in progress (it was a 409); without
    ``wait`` it is still the 409 of a pod already draining."""
    fleet, client = build("--inter-token-latency", "20ms", size=2)
    ctl = f"http://127.0.0.1:{CONTROL}"
    job = gevent.spawn(client.post, pod_url(1) + "/v1/completions",
                       json={"prompt": "hi", "max_tokens": 30, "ignore_eos": True})
    gevent.sleep(0.1)                   # running: the drain lasts its 0.6 s
    assert client.delete(ctl + "/fleet/pods/sim-1").status_code == 202
    assert client.delete(ctl + "/fleet/pods/sim-1").status_code == 409
    r = client.delete(ctl + "/fleet/pods/sim-1", params={"wait": "true"})
    assert r.status_code == 200 and r.json()["name"] == "sim-1" and r.json()["state"] == "removed"
    job.join(5)
    assert [p["name"] for p in client.get(ctl + "/fleet/pods").json()["pods"]] == ["sim-0"]
