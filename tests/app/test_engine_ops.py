"""vLLM 0.34's engine-operation routes in-process (issue 30): ``/checkpoint/*`` (with
``--enable-sleep-mode``), ``/v1/fault_tolerance/*`` (with ``--enable-fault-tolerance``),
``/inference/v1/abort_requests``, and the dev-mode sleep routes' answers, ``reset_connector``
and ``/release_kv_cache_memory``."""
from __future__ import annotations

import gevent
import pytest

from support import metric, scrape, sse_events

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
MSG = [{"role": "user", "content": "Hello there"}]
KV = ("--enable-kvcache", "--zmq-endpoint", "", "--block-size", "16")
KV_ENV = {"POD_IP": "10.0.0.1", **DEV}


def complete(c, **extra):
    return c.post("/v1/completions", json={"model": "test-model", "prompt": list(range(100, 140)), "max_tokens": 2,
                                           **extra})


# ---- sleep ---------------------------------------------------------------------------------------

def test_sleep_answers_like_vllm_and_checks_its_query(app_client):
    c = app_client("--enable-sleep-mode", env=DEV)
    r = c.post("/sleep", params={"level": "2", "mode": "wait", "reset_connector": "false"})
    assert (r.status_code, r.json()) == (200, {"status": "sleeping", "level": 2})
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    r = c.post("/wake_up", params={"tags": "weights"})
    assert (r.status_code, r.json()) == (200, {"status": "sleeping", "tags": ["weights"]})
    r = c.post("/wake_up")
    assert (r.status_code, r.json()) == (200, {"status": "awake", "tags": None})
    # FastAPI's query validation: param is the error's loc, as vLLM's test_sleep.py reads it
    for query, param in (({"level": "3"}, "query.level"), ({"level": "x"}, "query.level"),
                         ({"mode": "drop"}, "query.mode"), ({"reset_connector": "maybe"}, "query.reset_connector")):
        r = c.post("/sleep", params=query)
        assert (r.status_code, r.json()["error"]["param"]) == (400, param)
    assert c.post("/sleep", params={"level": "-1"}).json()["error"]["message"] == (
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'query.level', 'msg': 'Input should be greater "
        "than or equal to 0', 'input': '-1', 'ctx': {'ge': 0}}")
    assert c.post("/sleep", params={"mode": "drop"}).json()["error"]["message"] == (
        "1 validation error:\n  {'type': 'literal_error', 'loc': 'query.mode', 'msg': \"Input should be 'abort', "
        "'wait' or 'keep'\", 'input': 'drop', 'ctx': {'expected': \"'abort', 'wait' or 'keep'\"}}")
    assert c.get("/is_sleeping").json() == {"is_sleeping": False}
    # pydantic's int reading of a query: "0.0" and " 0 " are 0, as FastAPI takes them
    r = c.post("/sleep", params={"level": "0.0"})
    assert r.json() == {"status": "sleeping", "level": 0}
    c.post("/wake_up")
    r = c.post("/sleep", params={"level": "0"})           # level 0: scheduling paused, the cache kept
    assert r.json() == {"status": "sleeping", "level": 0}
    m = scrape(c)
    assert [metric(m, "vllm:engine_sleep_state", sleep_state=s) for s in ("awake", "weights_offloaded",
                                                                           "discard_all")] == [0, 0, 0]
    c.post("/wake_up")


def test_release_kv_cache_memory_empties_the_cache_until_woken(app_client):
    c = app_client(*KV, "--enable-sleep-mode", env=KV_ENV)
    complete(c)
    assert complete(c).json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    # vLLM 0.34's EngineCore.release_kv_cache_memory needs a completed pause (this test had
    # released without one): a RuntimeError in the utility call, vLLM's catch-all 500
    r = c.post("/release_kv_cache_memory")
    assert (r.status_code, r.json()) == (500, {"error": {
        "message": "Call to release_kv_cache_memory method failed: release_kv_cache_memory() requires a completed "
                   "pause first", "type": "InternalServerError", "param": None, "code": 500}})
    assert c.post("/pause", params={"mode": "wait", "clear_cache": "false"}).json() == {"status": "paused"}
    r = c.post("/release_kv_cache_memory", params={"reset_connector": "true"})
    assert (r.status_code, r.json()) == (200, {"status": "kv_cache_released"})
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    m = scrape(c)
    assert [metric(m, "vllm:engine_sleep_state", sleep_state=s) for s in ("awake", "weights_offloaded",
                                                                           "discard_all")] == [0, 0, 0]
    r = c.post("/release_kv_cache_memory")               # the KV cache already released
    assert (r.status_code, r.json()["error"]["message"]) == (500, (
        "Call to release_kv_cache_memory method failed: release_kv_cache_memory() requires all executor memory to "
        "be resident"))
    assert c.post("/wake_up", params={"tags": "kv_cache"}).json() == {"status": "awake", "tags": ["kv_cache"]}
    assert c.get("/is_paused").json() == {"is_paused": False}           # fully awake: resumed
    assert complete(c).json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}     # emptied


def test_sleep_routes_without_dev_mode_stay_a_no_op(app_client):
    c = app_client("--enable-sleep-mode")
    for path in ("/sleep", "/release_kv_cache_memory", "/wake_up"):
        r = c.post(path)
        assert (r.status_code, r.content) == (200, b"")
    assert c.get("/is_sleeping").json() == {"is_sleeping": False}


# ---- checkpoint -----------------------------------------------------------------------------------

def test_checkpoint_routes_need_sleep_mode(api):
    assert api.get("/checkpoint/status").status_code == 404
    assert api.post("/checkpoint/prepare").status_code == 404


def test_checkpoint_cycle(app_client):
    c = app_client("--enable-sleep-mode", env=DEV)
    r = c.get("/checkpoint/status")
    assert (r.status_code, r.json()) == (503, {"state": "running"})
    r = c.post("/checkpoint/restore")                       # nothing to restore: a no-op
    assert (r.status_code, r.json()) == (200, {"state": "running"})
    r = c.post("/checkpoint/prepare", params={"mode": "wait"})
    assert (r.status_code, r.json()) == (200, {"state": "prepared"})      # nothing in flight
    assert c.post("/checkpoint/prepare").json() == {"state": "prepared"}  # repeating is a no-op
    assert (c.get("/checkpoint/status").status_code, c.get("/is_sleeping").json()) == (200, {"is_sleeping": True})
    r = c.post("/sleep")
    assert (r.status_code, r.json()["error"]["message"]) == (500, "Call to sleep method failed: Cannot sleep while the checkpoint state is prepared")
    r = c.post("/wake_up")                                  # EngineCore.wake_up: not before the restore
    assert (r.status_code, r.json()) == (500, {"error": {
        "message": "Call to wake_up method failed: Cannot wake up while the checkpoint state is prepared",
        "type": "InternalServerError", "param": None, "code": 500}})
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    r = c.post("/checkpoint/restore")
    assert (r.status_code, r.json()) == (200, {"state": "running"})
    assert c.get("/is_sleeping").json() == {"is_sleeping": False}
    r = c.post("/checkpoint/prepare", params={"mode": "later"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "query.mode")
    c.post("/sleep")
    r = c.post("/checkpoint/prepare")
    assert (r.status_code, r.json()) == (400, {"state": "running",
                                               "error": "Preparing for a checkpoint requires an awake engine"})
    c.post("/wake_up")


def test_checkpoint_prepare_waits_for_requests_in_flight_or_aborts_them(app_client):
    c = app_client("--enable-sleep-mode", "--inter-token-latency", "50ms", env=DEV)
    job = gevent.spawn(complete, c, max_tokens=8, ignore_eos=True)
    gevent.sleep(0.1)
    assert c.post("/checkpoint/prepare", params={"mode": "wait"}).json() == {"state": "preparing"}
    assert c.get("/checkpoint/status").status_code == 503
    job.join(5)
    assert job.value.status_code == 200 and job.value.json()["usage"]["completion_tokens"] == 8
    assert c.get("/checkpoint/status").json() == {"state": "prepared"}
    c.post("/checkpoint/restore")
    job = gevent.spawn(complete, c, max_tokens=50, ignore_eos=True)
    gevent.sleep(0.1)
    assert c.post("/checkpoint/prepare", params={"mode": "abort"}).json() == {"state": "prepared"}
    job.join(5)
    # vLLM's abort output: a 200 with what it made, finish_reason "abort"
    d = job.value.json()
    assert job.value.status_code == 200 and d["choices"][0]["finish_reason"] == "abort"
    assert 1 <= d["usage"]["completion_tokens"] < 50
    assert c.post("/checkpoint/restore").json() == {"state": "running"}


PAUSED = {"message": "Generation is paused. Please retry after it resumes.", "type": "ServiceUnavailableError",
          "param": None, "code": 503}


def test_new_requests_are_refused_while_a_checkpoint_prepares_and_until_the_restore(app_client):
    """vLLM 0.34: ``/checkpoint/prepare`` with ``wait`` (or ``abort``) pauses generation and
    sets ``reject_new_requests``: a request arriving then gets ``RetryableRequestError`` (503
    ``ServiceUnavailableError``); a stream has already answered 200 and carries the error (chat
    names it ``InternalServerError``, as its stream generator does), then ``[DONE]``."""
    c = app_client("--enable-sleep-mode", "--inter-token-latency", "50ms", "--max-num-seqs", "7", env=DEV)
    job = gevent.spawn(complete, c, max_tokens=8, ignore_eos=True)
    gevent.sleep(0.1)
    assert c.post("/checkpoint/prepare", params={"mode": "wait"}).json() == {"state": "preparing"}
    r = complete(c)                                                       # while it drains
    assert (r.status_code, r.json()) == (503, {"error": PAUSED})
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": MSG, "stream": True})
    assert (r.status_code, sse_events(r.text)) == (200, [{"error": {**PAUSED, "type": "InternalServerError"}}, "[DONE]"])
    r = complete(c, stream=True)
    assert (r.status_code, sse_events(r.text)) == (200, [{"error": PAUSED}, "[DONE]"])
    job.join(5)
    assert job.value.status_code == 200 and job.value.json()["usage"]["completion_tokens"] == 8    # in flight: ran on
    assert c.get("/checkpoint/status").json() == {"state": "prepared"}
    r = c.post("/v1/chat/completions", json={"model": "test-model", "messages": MSG})
    assert (r.status_code, r.json()) == (503, {"error": PAUSED})          # prepared: still refused
    assert c.post("/checkpoint/restore").json() == {"state": "running"}
    assert complete(c).status_code == 200
    assert c.post("/checkpoint/prepare", params={"mode": "abort"}).json() == {"state": "prepared"}
    assert (complete(c).status_code, complete(c).json()) == (503, {"error": PAUSED})
    c.post("/checkpoint/restore")


def test_keep_mode_accepts_new_requests(app_client):
    """``mode=keep`` does not set vLLM's ``reject_new_requests``: new requests are accepted and
    queued (the paused scheduler, PAUSED_ALL) until the restore resumes it (the simulator had
    served them while prepared)."""
    c = app_client("--enable-sleep-mode", "--max-num-seqs", "7", env=DEV)       # an app of its own
    assert c.post("/checkpoint/prepare", params={"mode": "keep"}).json() == {"state": "prepared"}
    job = gevent.spawn(complete, c, ignore_eos=True)
    gevent.sleep(0.2)
    assert not job.ready() and len(c.sim.waiting) == 1
    assert c.post("/checkpoint/restore").json() == {"state": "running"}
    job.join(5)
    assert job.value.status_code == 200 and job.value.json()["usage"]["completion_tokens"] == 2


def test_checkpoint_prepare_on_startup_refuses_requests_until_the_restore(app_client):
    c = app_client("--enable-sleep-mode", "--checkpoint-prepare-on-startup", "--max-num-seqs", "7", env=DEV)   # own app
    assert (complete(c).status_code, complete(c).json()) == (503, {"error": PAUSED})
    assert c.post("/checkpoint/restore").json() == {"state": "running"}
    assert complete(c).status_code == 200


def test_checkpoint_prepare_on_startup(app_client):
    c = app_client("--enable-sleep-mode", "--checkpoint-prepare-on-startup", env=DEV)
    assert (c.get("/checkpoint/status").status_code, c.get("/checkpoint/status").json()) == (200, {"state": "prepared"})


# ---- fault tolerance --------------------------------------------------------------------------------

def test_fault_tolerance_moved_under_v1_and_needs_a_request_id(app_client, api):
    assert api.get("/v1/fault_tolerance/status").status_code == 404
    c = app_client("--enable-fault-tolerance")
    assert c.get("/fault_tolerance/status").status_code == 404          # vLLM 0.33's path
    assert c.get("/v1/fault_tolerance/status").json() == {"schema_version": 1, "total_engines": 1,
                                                          "engines": [{"id": 0, "status": "healthy"}]}
    r = c.post("/v1/fault_tolerance/apply", json={"instruction": "retry", "params": {}, "request_id": "round-1"})
    assert (r.status_code, r.json()) == (202, {"message": "Request accepted; poll /v1/fault_tolerance/status for "
                                                          "updates.", "request_id": "round-1"})
    for body, message in (({"params": {}, "request_id": "r"}, "'instruction' is required."),
                          ({"instruction": "reboot", "request_id": "r"}, "Invalid instruction: 'reboot'."),
                          ({"instruction": "retry", "params": [], "request_id": "r"}, "'params' must be an object."),
                          ({"instruction": "retry"}, "'request_id' must be a non-empty string."),
                          ({"instruction": "scale_down", "request_id": ""}, "'request_id' must be a non-empty string.")):
        r = c.post("/v1/fault_tolerance/apply", json=body)
        assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["type"]) == (400, message, "Bad Request")


def test_fault_tolerance_apply_reads_an_empty_or_broken_body_as_vllm(app_client):
    """vLLM's route: ``json.loads`` of the body, any JSONDecodeError (an empty body's too, which
    was read as null: "Request body must be a JSON object.") is ``Invalid JSON format``."""
    c = app_client("--enable-fault-tolerance")
    for raw in (b"", b"{bad"):
        r = c.post("/v1/fault_tolerance/apply", content=raw, headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()["error"]) == (400, {"message": "Invalid JSON format", "type": "Bad Request",
                                                            "param": None, "code": 400})


# ---- abort_requests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body,ok", [({"request_ids": "a"}, True), ({"request_ids": ["a", "b"]}, True),
                                     ({"request_ids": []}, True), ({}, False), ({"request_ids": 3}, False),
                                     ({"request_ids": ["a", 1]}, False), ([], False)])
def test_abort_requests_validates_request_ids(api, body, ok):
    r = api.post("/inference/v1/abort_requests", json=body)
    if ok:
        assert (r.status_code, r.content) == (200, b"")
    else:
        # vLLM re-raises pydantic's errors with loc ("body", ...): param "body" for a body that is
        # not an object, "body.request_ids" (its first error, the union's str branch) otherwise
        assert r.status_code == 400 and r.json()["error"]["param"] == ("body" if body == [] else "body.request_ids")


@pytest.mark.parametrize("path,flags", [("/inference/v1/abort_requests", ()), ("/abort_requests", ("--tokens-only",))])
def test_abort_requests_takes_any_content_type_but_not_from_another_site(app_client, path, flags):
    """vLLM 0.34 (``scale_out/token_in_token_out/api_router.py`` ``abort_requests``) reads the
    body itself, so a client that sends no ``Content-Type`` (or ``text/plain``) is served; a
    browser page of another origin still cannot post to it without a CORS preflight."""
    c = app_client(*flags)
    raw = b'{"request_ids": ["a"]}'
    for headers in ({}, {"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}):
        r = c.post(path, content=raw, headers=headers)
        assert (r.status_code, r.content) == (200, b""), headers
    # an empty body: Starlette's request.json() is json.loads(b""), the route's JSONDecodeError 400
    r = c.post(path, content=b"", headers={})
    assert (r.status_code, r.json()["error"]) == (400, {"message": "JSON decode error: Expecting value: line 1 "
                                                                   "column 1 (char 0)", "type": "Bad Request",
                                                        "param": None, "code": 400})
    r = c.post(path, content=raw, headers={"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert (r.status_code, r.json()["error"]) == (400, {"message": "1 validation error:\n  Unsupported Media Type: "
                                                                   "Only 'application/json' is allowed",
                                                        "type": "Bad Request", "param": None, "code": 400})


def test_abort_requests_words_a_broken_body_as_json_loads(api):
    """vLLM's ``HTTPException(400, f"JSON decode error: {e}")`` names ``json``'s error (orjson's
    words before)."""
    r = api.post("/inference/v1/abort_requests", content=b"{bad", headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["error"]) == (400, {"message": "JSON decode error: Expecting property name "
                                                                   "enclosed in double quotes: line 1 column 2 "
                                                                   "(char 1)", "type": "Bad Request", "param": None,
                                                        "code": 400})


def test_abort_requests_ends_the_request_in_flight(app_client):
    c = app_client("--inter-token-latency", "50ms")
    job = gevent.spawn(c.post, "/inference/v1/generate",
                       json={"model": "test-model", "token_ids": [1, 2, 3], "request_id": "rid-1",
                             "sampling_params": {"max_tokens": 100, "ignore_eos": True}})
    gevent.sleep(0.2)
    assert c.sim.running == 1
    assert c.post("/inference/v1/abort_requests", json={"request_ids": ["generate-tokens-rid-1"]}).status_code == 200
    job.join(2)
    # vLLM's abort output: the tokens made so far, finish_reason "abort"
    d = job.value.json()
    assert c.sim.running == 0 and job.value.status_code == 200
    assert d["choices"][0]["finish_reason"] == "abort" and 1 <= len(d["choices"][0]["token_ids"]) < 100
    assert d["usage"]["completion_tokens"] == len(d["choices"][0]["token_ids"])


def test_abort_requests_finds_a_step_request_in_its_frontend_delay(app_client):
    """A request still in the modelled frontend's delay (not yet in the scheduler's queues) is
    aborted too: it was missed, and ran to its end (a real server: every abort sent within
    ~10 ms of its request)."""
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer")
    engine = c.sim.engine
    saved = engine.fe, engine.frontend
    engine.fe, engine.frontend = None, 0.3       # a 7 ms delay is missed by a loaded machine's spin
    try:
        job = gevent.spawn(c.post, "/inference/v1/generate",
                           json={"model": "test-model", "token_ids": [1, 2, 3], "request_id": "fresh-1",
                                 "sampling_params": {"max_tokens": 900, "ignore_eos": True}})
        deadline = gevent.get_hub().loop.now() + 5
        while not engine.delayed and gevent.get_hub().loop.now() < deadline:
            gevent.sleep(0.001)
    finally:
        engine.fe, engine.frontend = saved
    assert engine.delayed and not engine.scheduler.waiting and not engine.scheduler.running
    assert c.post("/inference/v1/abort_requests", json={"request_ids": "generate-tokens-fresh-1"}).status_code == 200
    job.join(5)
    assert job.value.status_code == 200
    assert job.value.json()["choices"] == [{"index": 0, "finish_reason": "abort", "token_ids": []}]
    assert not engine.in_flight()
    deadline = gevent.get_hub().loop.now() + 2      # its delay's timer still counts it waiting until it fires
    while engine.pending and gevent.get_hub().loop.now() < deadline:
        gevent.sleep(0.01)
    assert engine.pending == 0 and not engine.scheduler.waiting


def test_abort_requests_and_checkpoint_in_step_mode(app_client):
    """The step engine's requests are found and aborted too.  A ``keep`` prepare freezes them
    (PAUSED_ALL): vLLM's ``_pause_complete`` then finds no work, so it is prepared at once (the
    simulator had waited for them, ``preparing``)."""
    c = app_client("--latency-calculator", "step", "--force-dummy-tokenizer", "--enable-sleep-mode", env=DEV)
    job = gevent.spawn(c.post, "/v1/completions", json={"model": "test-model", "prompt": "a b c", "max_tokens": 900,
                                                        "ignore_eos": True},
                       headers={"X-Request-Id": "step-1"})
    deadline = gevent.get_hub().loop.now() + 5
    while not c.sim.engine.scheduler.running and gevent.get_hub().loop.now() < deadline:
        gevent.sleep(0.01)
    assert c.post("/checkpoint/prepare", params={"mode": "keep"}).json() == {"state": "prepared"}
    gevent.sleep(0.05)                                          # the step in progress ends
    made = c.sim.engine.scheduler.running[0].num_output
    gevent.sleep(0.2)
    assert c.sim.engine.scheduler.running[0].num_output == made and not job.ready()     # frozen
    assert c.post("/inference/v1/abort_requests", json={"request_ids": "cmpl-step-1-0"}).status_code == 200
    job.join(5)
    assert job.value.status_code == 200 and job.value.json()["choices"][0]["finish_reason"] == "abort"
    assert c.get("/checkpoint/status").json() == {"state": "prepared"}
    assert c.post("/checkpoint/restore").json() == {"state": "running"}
    sched = c.sim.engine.scheduler
    assert not sched.running and not sched.waiting and sched.free_blocks == sched.num_gpu_blocks


def test_fault_tolerance_is_every_models(app_client):
    """vLLM 0.34 registers the fault-tolerance router outside its task checks: a pooling model
    with ``--enable-fault-tolerance`` serves it too (a 404 here before); GET only, no HEAD."""
    c = app_client("--runner", "pooling", "--enable-fault-tolerance")
    assert c.get("/v1/fault_tolerance/status").json()["engines"] == [{"id": 0, "status": "healthy"}]
    assert c.head("/v1/fault_tolerance/status").status_code == 405
    r = c.post("/v1/fault_tolerance/apply", json={"instruction": "retry", "request_id": "r1"})
    assert r.status_code == 202


def test_abort_requests_matches_vllms_external_ids_not_the_bare_id(app_client):
    """vLLM aborts by the id its serving layer gave ``generate`` (``OutputProcessor.abort_requests``,
    external): ``chatcmpl-<id>`` for a chat, ``cmpl-<id>-<i>`` per completion prompt; the bare
    ``X-Request-Id`` matches nothing."""
    c = app_client("--inter-token-latency", "50ms")
    msgs = [{"role": "user", "content": "hi"}]
    chat = gevent.spawn(c.post, "/v1/chat/completions", headers={"X-Request-Id": "A"},
                        json={"model": "test-model", "messages": msgs, "max_tokens": 60, "ignore_eos": True})
    cmpl = gevent.spawn(c.post, "/v1/completions", headers={"X-Request-Id": "C"},
                        json={"model": "test-model", "prompt": ["a", "b"], "max_tokens": 60, "ignore_eos": True})
    gevent.sleep(0.2)
    assert c.sim.running == 3
    for ids in (["A", "C", "cmpl-C", "chatcmpl-C"], "cmpl-C-1", ["chatcmpl-A"]):
        assert c.post("/inference/v1/abort_requests", json={"request_ids": ids}).status_code == 200
    gevent.joinall([chat, cmpl], timeout=5)
    assert chat.value.json()["choices"][0]["finish_reason"] == "abort"
    # prompt 1's engine request only: prompt 0 ran to its length
    assert [ch["finish_reason"] for ch in cmpl.value.json()["choices"]] == ["length", "abort"]


def test_rl_abort_all_counts_parallel_sampling_parents(app_client):
    """vLLM's abort-all counts its request states and its parents: ``n=2`` is 3."""
    c = app_client("--inter-token-latency", "50ms", env={"VLLM_SERVER_DEV_MODE": "1"})
    job = gevent.spawn(complete, c, max_tokens=50, ignore_eos=True, n=2)
    gevent.sleep(0.2)
    assert c.post("/abort_requests", content=b"{}").json() == {"status": "aborted", "aborted": 3}
    job.join(5)
