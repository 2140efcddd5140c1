"""``python app.py --fleet-size 3`` end to end (:mod:`server.fleet`): pods on consecutive ports,
``/health`` fast on each, a scale-up whose new pod answers 503 for its start-up delay, and a
scale-down that drains: the streams in flight on the removed pod all finish, new connections
are refused at once, and the pod's metrics are gone."""
from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from support import ROOT, _clean_env, free_port, metric, scrape, sse_events

pytestmark = pytest.mark.server

SIZE = 3
TOKENS = 40                 # 1.6 s a stream: 4 of them are surely in flight together


@pytest.fixture(scope="module")
def fleet():
    port = free_port(SIZE + 2)
    control = free_port()
    while port <= control < port + SIZE + 2:
        control = free_port()
    args = [sys.executable, str(ROOT / "app.py"), "--model", "test-model", "--host", "127.0.0.1",
            "--port", str(port), "--fleet-size", str(SIZE), "--fleet-control-port", str(control),
            "--time-to-first-token", "20ms", "--inter-token-latency", "40ms", "--disable-log-requests"]
    proc = subprocess.Popen(args, cwd=ROOT, env=_clean_env({"POD_NAME": "sim"}),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctl = httpx.Client(base_url=f"http://127.0.0.1:{control}", timeout=30)
    deadline = time.time() + 30
    while time.time() < deadline:
        assert proc.poll() is None, "fleet exited at start-up"
        try:
            if ctl.get("/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield port, ctl
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stream(url: str) -> tuple[str, int]:
    """One streamed completion of :data:`TOKENS` tokens: (the pod that answered, tokens received)."""
    with httpx.Client(timeout=30) as c, c.stream(
            "POST", url + "/v1/completions",
            json={"prompt": "hello", "max_tokens": TOKENS, "ignore_eos": True, "stream": True}) as r:
        assert r.status_code == 200
        events = sse_events(r.read().decode())
    assert events[-1] == "[DONE]"
    return r.headers["x-inference-pod"], sum(1 for e in events[:-1] if e["choices"] and e["choices"][0]["text"])


def test_scale_up_delay_then_drain_on_scale_down(fleet):
    port, ctl = fleet
    pods = {p["name"]: p["url"] for p in ctl.get("/fleet/pods").json()["pods"]}
    assert pods == {f"sim-{i}": f"http://127.0.0.1:{port + i}" for i in range(SIZE)}
    for url in pods.values():                 # /health on each pod: under 100 ms (median of 3)
        with httpx.Client(base_url=url, timeout=5) as c:
            times = []
            for _ in range(3):
                t = time.perf_counter()
                assert c.get("/health").status_code == 200
                times.append(time.perf_counter() - t)
            assert sorted(times)[1] < 0.1, times

    # scale-up: 503 on /health until the start-up delay is over
    t0 = time.monotonic()
    r = ctl.post("/fleet/pods", json={"startup_delay": 1.0})
    assert r.status_code == 201
    new = r.json()["pods"][0]
    assert (new["name"], new["port"], new["state"]) == ("sim-3", port + SIZE, "starting")
    codes = []
    while True:
        code = httpx.get(new["url"] + "/health", timeout=5).status_code
        codes.append(code)
        if code == 200:
            break
        assert time.monotonic() - t0 < 10
        time.sleep(0.05)
    assert codes[0] == 503 and time.monotonic() - t0 >= 1.0

    # scale-down with 4 streams in flight on the pod removed: none lost
    victim = pods["sim-1"]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(stream, victim) for _ in range(4)]
        deadline = time.monotonic() + 10
        while next(p for p in ctl.get("/fleet/pods").json()["pods"] if p["name"] == "sim-1")["in_flight"] < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = ctl.delete("/fleet/pods/sim-1")
        assert (r.status_code, r.json()) == (202, {"name": "sim-1", "state": "draining"})
        with pytest.raises(httpx.ConnectError):          # its listener is closed at once
            httpx.get(victim + "/health", timeout=5)
        results = [f.result() for f in futures]
    assert results == [("sim-1", TOKENS)] * 4
    deadline = time.monotonic() + 10
    while "sim-1" in [p["name"] for p in ctl.get("/fleet/pods").json()["pods"]]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(httpx.ConnectError):              # its metrics are gone
        httpx.get(victim + "/metrics", timeout=5)
    s = scrape(pods["sim-0"])                            # the other pods kept their own accounts
    assert metric(s, "vllm:request_success_total", finished_reason="length") == 0
    assert ctl.get("/fleet/stats").json()["removed"] == 1
