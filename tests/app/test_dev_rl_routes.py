"""vLLM 0.34's dev-mode routes that the simulator lacked (a 404 before): ``/reset_mm_cache``,
``/reset_encoder_cache``, ``/collective_rpc`` (``serve/dev/``) and the RL router
(``rl/online/api_router.py``: ``/pause``, ``/resume``, ``/is_paused``, ``/abort_requests``,
``/get_world_size``), all registered with ``VLLM_SERVER_DEV_MODE=1`` only."""
from __future__ import annotations

import gevent
import pytest

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
NEW_DEV_ROUTES = (("POST", "/reset_mm_cache"), ("POST", "/reset_encoder_cache"), ("POST", "/collective_rpc"),
                  ("POST", "/pause"), ("POST", "/resume"), ("GET", "/is_paused"), ("POST", "/abort_requests"),
                  ("GET", "/get_world_size"))
PAUSED = {"message": "Generation is paused. Please retry after it resumes.", "type": "ServiceUnavailableError",
          "param": None, "code": 503}


def complete(c, **extra):
    return c.post("/v1/completions", json={"model": "test-model", "prompt": "a b c", "max_tokens": 2, **extra})


def bad_request(message: str) -> dict:
    """vLLM's ``HTTPException(400, message)`` as its ``http_exception_handler`` answers it."""
    return {"error": {"message": message, "type": "Bad Request", "param": None, "code": 400}}


def test_without_dev_mode_no_method_reaches_them(api):
    """vLLM registers none of these paths without dev mode: every method is the router's 404
    (``/reset_prefix_cache`` and ``/server_info`` answered another method's 405 before)."""
    for method, path in (*NEW_DEV_ROUTES, ("POST", "/reset_prefix_cache"), ("GET", "/server_info")):
        for m in {method, "GET" if method == "POST" else "POST"}:
            r = api.request(m, path)
            assert (r.status_code, r.json()) == (404, {"detail": "Not Found"}), (m, path)


def test_reset_mm_and_encoder_cache_answer_an_empty_200(app_client):
    c = app_client(env=DEV)
    for path in ("/reset_mm_cache", "/reset_encoder_cache"):
        r = c.post(path)
        assert (r.status_code, r.content) == (200, b"")
        assert "content-type" not in r.headers            # Starlette's Response(status_code=200)
        r = c.get(path)
        assert (r.status_code, r.json()) == (405, {"detail": "Method Not Allowed"})


def test_collective_rpc_checks_its_body_as_vllm(app_client):
    c = app_client("--tensor-parallel-size", "2", env=DEV)
    for raw, message in ((b"", "JSON decode error: Expecting value: line 1 column 1 (char 0)"),
                         (b"{bad", "JSON decode error: Expecting property name enclosed in double quotes: "
                                   "line 1 column 2 (char 1)"),
                         (b"[1]", "Request body must be a JSON object"),
                         (b'{"args": []}', "Missing 'method' in request body")):
        r = c.post("/collective_rpc", content=raw, headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()) == (400, bad_request(message)), raw
    # the route reads the body itself: no Content-Type check; one result per worker (tensor parallel)
    r = c.post("/collective_rpc", content=b'{"method": "check_health", "args": ["x"]}')
    assert (r.status_code, r.json()) == (200, {"results": [None, None]})


def _rpc_failed(error: str) -> dict:
    return {"error": {"message": f"Call to collective_rpc method failed: {error}", "type": "InternalServerError",
                      "param": None, "code": 500}}


def test_collective_rpc_runs_only_the_workers_methods(app_client):
    """vLLM 0.34's workers resolve ``method`` with ``run_method`` (v1/serial_utils.py): a name the
    GPU worker lacks is its NotImplementedError, which the engine core's utility call reports
    failed (``Call to collective_rpc method failed: ...``) and the route answers as a plain
    Exception: 500 InternalServerError.  The simulator answered 200 for any name."""
    c = app_client(env=DEV)
    for method in ("reload_weights", "sleep", "update_environment_variables"):
        r = c.post("/collective_rpc", json={"method": method})
        assert (r.status_code, r.json()) == (200, {"results": [None]}), method
    r = c.post("/collective_rpc", json={"method": "echo", "args": ["x"]})
    assert (r.status_code, r.json()) == (500, _rpc_failed("Method 'echo' is not implemented."))
    r = c.post("/collective_rpc", json={"method": 5})         # partial(5, worker)
    assert (r.status_code, r.json()) == (500, _rpc_failed("the first argument must be callable"))
    # several workers: the mp executor wraps the worker's error (MultiprocExecutor.collective_rpc)
    tp = app_client("--tensor-parallel-size", "2", env=DEV)
    r = tp.post("/collective_rpc", json={"method": "echo"})
    assert (r.status_code, r.json()) == (500, _rpc_failed(
        "Worker failed with error 'Method 'echo' is not implemented.', please check the stack trace above "
        "for the root cause"))


def test_pause_refuses_new_requests_until_resume(app_client):
    c = app_client(env=DEV)
    assert c.get("/is_paused").json() == {"is_paused": False}
    r = c.post("/pause")
    assert (r.status_code, r.json()) == (200, {"status": "paused"})
    assert c.get("/is_paused").json() == {"is_paused": True}
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}      # vLLM 0.34: paused counts as asleep
    r = complete(c)
    assert (r.status_code, r.json()) == (503, {"error": PAUSED})
    r = c.post("/resume")
    assert (r.status_code, r.json()) == (200, {"status": "resumed"})
    assert c.get("/is_paused").json() == {"is_paused": False}
    assert complete(c).status_code == 200
    # keep: paused, new requests accepted and queued (vLLM's PAUSED_ALL) until /resume; the
    # simulator had served them while paused
    assert c.post("/pause", params={"mode": "keep"}).json() == {"status": "paused"}
    assert c.get("/is_paused").json() == {"is_paused": True}
    job = gevent.spawn(complete, c, ignore_eos=True)
    gevent.sleep(0.2)
    assert not job.ready() and c.sim.waiting and c.sim.running == 0
    c.post("/resume")
    job.join(5)
    assert job.value.status_code == 200 and job.value.json()["usage"]["completion_tokens"] == 2
    # wait with nothing in flight answers at once
    assert c.post("/pause", params={"mode": "wait", "clear_cache": "false"}).json() == {"status": "paused"}
    c.post("/resume")
    r = c.post("/pause", params={"mode": "later"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "query.mode")
    assert c.get("/is_paused").json() == {"is_paused": False}


def test_pause_aborts_the_requests_in_flight(app_client):
    c = app_client("--inter-token-latency", "50ms", env=DEV)
    job = gevent.spawn(complete, c, max_tokens=50, ignore_eos=True)
    gevent.sleep(0.2)
    assert c.post("/pause").json() == {"status": "paused"}
    job.join(5)
    d = job.value.json()
    assert job.value.status_code == 200 and d["choices"][0]["finish_reason"] == "abort"
    assert 1 <= d["usage"]["completion_tokens"] < 50
    c.post("/resume")


def test_resume_is_refused_while_a_checkpoint_is_prepared(app_client):
    c = app_client("--enable-sleep-mode", env=DEV)
    assert c.post("/checkpoint/prepare").json() == {"state": "prepared"}
    assert c.get("/is_paused").json() == {"is_paused": True}
    r = c.post("/resume")
    assert (r.status_code, r.json()) == (500, {"error": "Failed to resume generation: Call to resume_scheduler "
                                                        "method failed: Cannot resume scheduling while the "
                                                        "checkpoint state is prepared"})
    assert complete(c).status_code == 503
    c.post("/checkpoint/restore")
    assert c.get("/is_paused").json() == {"is_paused": False}
    assert complete(c).status_code == 200


def test_sleep_pauses_and_a_full_wake_up_resumes(app_client):
    c = app_client("--enable-sleep-mode", env=DEV)
    c.post("/pause")
    c.post("/sleep")
    assert c.get("/is_paused").json() == {"is_paused": True}
    c.post("/wake_up", params={"tags": "weights"})
    assert c.get("/is_paused").json() == {"is_paused": True}      # kv_cache still asleep
    assert complete(c).status_code == 503
    c.post("/wake_up")
    assert c.get("/is_paused").json() == {"is_paused": False}
    assert complete(c).status_code == 200


def test_rl_abort_requests_reads_its_body_and_counts(app_client):
    c = app_client(env=DEV)
    for raw in (b"", b"{bad"):
        r = c.post("/abort_requests", content=raw)
        assert (r.status_code, r.json()) == (400, bad_request("Invalid JSON format"))
    r = c.post("/abort_requests", json=[1])
    assert (r.status_code, r.json()) == (400, bad_request("Request body must be a JSON object"))
    assert c.post("/abort_requests", json={}).json() == {"status": "aborted", "aborted": 0}
    assert c.post("/abort_requests", json={"request_ids": ["a", "b"]}).json() == {"status": "aborted", "aborted": 2}
    r = c.post("/abort_requests", json={"request_ids": 3})
    assert (r.status_code, r.json()) == (400, {"error": {                # vLLM: a 500; a client's mistake is a 4xx here
        "message": "Failed to abort requests: request_ids: 'int' object is not iterable", "type": "Bad Request",
        "param": "request_ids", "code": 400}})


def test_rl_abort_requests_with_no_ids_aborts_everything_in_flight(app_client):
    c = app_client("--inter-token-latency", "50ms", env=DEV)
    jobs = [gevent.spawn(complete, c, max_tokens=50, ignore_eos=True) for _ in range(2)]
    gevent.sleep(0.2)
    assert c.post("/abort_requests", content=b"{}").json() == {"status": "aborted", "aborted": 2}
    gevent.joinall(jobs, timeout=5)
    assert [j.value.json()["choices"][0]["finish_reason"] for j in jobs] == ["abort", "abort"]
    assert complete(c).status_code == 200          # not paused


def test_dev_mode_abort_requests_takes_the_tokens_only_path(app_client):
    """vLLM registers the RL router first; ``--tokens-only`` then leaves its legacy route out."""
    c = app_client("--tokens-only", env=DEV)
    assert c.post("/abort_requests", json={"request_ids": ["x"]}).json() == {"status": "aborted", "aborted": 1}
    r = c.post("/inference/v1/abort_requests", json={"request_ids": ["x"]})
    assert (r.status_code, r.content) == (200, b"")


@pytest.mark.parametrize("query,size", [({}, 4), ({"include_dp": "true"}, 4), ({"include_dp": "false"}, 2)])
def test_get_world_size(app_client, query, size):
    c = app_client("--tensor-parallel-size", "2", "--data-parallel-size", "2", env=DEV)
    r = c.get("/get_world_size", params=query)
    assert (r.status_code, r.json()) == (200, {"world_size": size})


def test_get_world_size_counts_pipeline_stages_and_every_nodes_ranks(app_client):
    """vLLM's ``world_size_across_dp``: TP x PP x DP, the whole --data-parallel-size where this
    node runs a share of it (--data-parallel-size-local)."""
    c = app_client("-tp", "2", "-pp", "2", "-dp", "4", "-dpl", "1", env=DEV)
    assert c.get("/get_world_size").json() == {"world_size": 16}
    assert c.get("/get_world_size", params={"include_dp": "false"}).json() == {"world_size": 4}


def test_get_world_size_checks_include_dp(app_client):
    r = app_client(env=DEV).get("/get_world_size", params={"include_dp": "maybe"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "query.include_dp")



def test_resume_after_a_sleep_unpauses_but_leaves_the_weights_asleep(app_client):
    """vLLM 0.34: ``is_paused`` is the scheduler's state, ``is_sleeping`` the scheduler's or
    the executor's; a level-0 sleep is a scheduler pause only."""
    c = app_client("--enable-sleep-mode", env=DEV)
    c.post("/sleep", params={"level": "1"})
    assert (c.get("/is_paused").json(), c.get("/is_sleeping").json()) == ({"is_paused": True}, {"is_sleeping": True})
    assert c.post("/resume").json() == {"status": "resumed"}
    assert (c.get("/is_paused").json(), c.get("/is_sleeping").json()) == ({"is_paused": False},
                                                                        {"is_sleeping": True})
    c.post("/wake_up")
    c.post("/sleep", params={"level": "0"})
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    c.post("/resume")
    assert (c.get("/is_paused").json(), c.get("/is_sleeping").json()) == ({"is_paused": False},
                                                                        {"is_sleeping": False})
