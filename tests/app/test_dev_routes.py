"""vLLM 0.33's operations routes (issue 21): ``/reset_prefix_cache`` and ``/server_info`` behind
``VLLM_SERVER_DEV_MODE``, ``/kv_event_sources``, SageMaker's ``/invocations``, and stored
Responses behind ``VLLM_ENABLE_RESPONSES_API_STORE``; plus the newcomer fixes of the CLI."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from support import ROOT

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
KV = ("--enable-kvcache", "--zmq-endpoint", "tcp://127.0.0.1:5", "--block-size", "8")
KV_ENV = {**DEV, "POD_IP": "10.1.2.3"}
LONG = [{"role": "user", "content": " ".join(["word"] * 64)}]


def chat(api, messages=LONG):
    r = api.post("/v1/chat/completions", json={"model": "test-model", "messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text
    return r.json()


def test_dev_routes_are_not_there_without_dev_mode(api):
    assert api.post("/reset_prefix_cache").status_code == 404
    assert api.get("/server_info").status_code == 404


def test_reset_prefix_cache_clears_and_publishes_all_blocks_cleared(app_client):
    api = app_client(*KV, env=KV_ENV)
    published = []
    publisher = api.sim.kv_cache.publisher
    original = publisher.publish
    publisher.publish = lambda ev: (published.append(ev), original(ev))
    try:
        chat(api)
        assert chat(api)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        published.clear()
        r = api.post("/reset_prefix_cache")
        assert r.status_code == 200 and r.json() == {"success": True}
        assert published == [["AllBlocksCleared"]]
        assert chat(api)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        publisher.publish = original


def test_reset_prefix_cache_refuses_while_blocks_are_held(app_client):
    api = app_client(*KV, env=KV_ENV)
    cache = api.sim.kv_cache
    chat(api)
    cache.used[12345] = 1                 # a running request's block
    try:
        r = api.post("/reset_prefix_cache")          # vLLM logs the refusal and answers success false
        assert r.status_code == 200 and r.json() == {"success": False}      # an empty 200 before (issue 31 item 10)
        assert cache.unused or cache.used        # nothing was cleared
        r = api.post("/reset_prefix_cache?reset_running_requests=true")
        assert r.status_code == 200 and r.json() == {"success": True}
        assert not cache.used and not cache.unused
    finally:
        cache.used.pop(12345, None)


@pytest.mark.parametrize("query", ["reset_running_requests=maybe", "reset_running_requests=", "reset_external=zzz"])
def test_reset_prefix_cache_query_booleans_are_checked(app_client, query):
    """vLLM's query booleans (FastAPI's): anything but a boolean spelling is a 400 naming it
    (``query.<name>``: the validation handler's ``clean_loc_for_param`` of its ``loc``)."""
    r = app_client(*KV, env=KV_ENV).post(f"/reset_prefix_cache?{query}")
    name, raw = query.split("=")
    assert r.status_code == 400 and r.json()["error"] == {
        "message": f"1 validation error:\n  {{'type': 'bool_parsing', 'loc': 'query.{name}', 'msg': 'Input should be a "
                   f"valid boolean, unable to interpret input', 'input': {raw!r}}}",
        "type": "Bad Request", "param": f"query.{name}", "code": 400}, r.text


def test_server_info(app_client):
    api = app_client(env=DEV)
    text = api.get("/server_info").json()["vllm_config"]
    assert isinstance(text, str) and "max-model-len=1024" in text
    r = api.get("/server_info?config_format=yaml")      # vLLM's Literal["text", "json"] query parameter
    assert (r.status_code, r.json()["error"]["param"]) == (400, "query.config_format")
    assert r.json()["error"]["message"] == (
        "1 validation error:\n  {'type': 'literal_error', 'loc': 'query.config_format', 'msg': \"Input should be 'text' "
        "or 'json'\", 'input': 'yaml', 'ctx': {'expected': \"'text' or 'json'\"}}")
    cfg = api.get("/server_info?config_format=json").json()["vllm_config"]
    assert cfg["max-model-len"] == 1024 and cfg["model"] == "test-model"


def test_server_info_has_vllms_env_sections(app_client):
    """vLLM 0.34's ``show_server_info`` answers ``vllm_config``, ``vllm_env`` (the VLLM_*
    variables, none whose name holds KEY) and ``system_env`` (collect_env's fields)."""
    from blueprints.dev import SYSTEM_ENV_FIELDS
    api = app_client(env={**DEV, "VLLM_API_KEY": "secret"})
    auth = {"Authorization": "Bearer secret"}
    info = api.get("/server_info", headers=auth).json()
    assert list(info)[:3] == ["vllm_config", "vllm_env", "system_env"]
    assert info["vllm_env"]["VLLM_SERVER_DEV_MODE"] == "1" and "VLLM_API_KEY" not in info["vllm_env"]
    assert "secret" not in api.get("/server_info", headers=auth).text
    assert tuple(info["system_env"]) == SYSTEM_ENV_FIELDS and len(SYSTEM_ENV_FIELDS) == 41
    assert info["system_env"]["is_cuda_available"] is False and info["system_env"]["vllm_version"] == "0.34.0"


def test_kv_event_sources(api, app_client):
    assert api.get("/kv_event_sources").json() == []
    kv = app_client(*KV, "--kv-events-replay-endpoint", "tcp://*:5601", env=KV_ENV)
    assert kv.get("/kv_event_sources").json() == [{
        "data_parallel_rank": 0, "endpoint": "tcp://127.0.0.1:5", "replay_endpoint": "tcp://*:5601",
        "topic": "kv@10.1.2.3:8000@test-model"}]


def test_sagemaker_invocations_dispatch_by_body(api):
    r = api.post("/invocations", json={"model": "test-model", "messages": LONG, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"
    r = api.post("/invocations", json={"model": "test-model", "prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
    r = api.post("/invocations", json={"model": "test-model", "input": "Hi"})
    assert r.status_code == 200 and r.json()["object"] == "list"
    r = api.post("/invocations", json={"model": "test-model", "messages": LONG, "max_tokens": 2, "stream": True})
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    r = api.post("/invocations", json={"model": "test-model"})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    r = api.post("/invocations", json={"model": "test-model", "messages": "nope"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.messages"


@pytest.mark.parametrize("convert, body, shape", [
    ("embed", {"input": "Hi"}, ("object", "list", "embd-")),
    ("embed", {"messages": [{"role": "user", "content": "Hi"}]}, ("object", "list", "embd-")),
    ("embed", {"query": "a", "documents": ["b"]}, ("results", None, "score-")),
    ("embed", {"text_1": "a", "text_2": ["b"]}, ("object", "list", "score-")),
    ("classify", {"input": "Hi"}, ("object", "list", "classify-")),
    ("score", {"input": "Hi"}, ("object", "list", "classify-")),
    ("score", {"queries": "a", "items": ["b"]}, ("object", "list", "score-")),
])
def test_sagemaker_invocations_on_a_pooling_model(app_client, convert, body, shape):
    """vLLM 0.34's pooling INVOCATION_TYPES (pooling/factories.py:236-287): an embedding or
    classification request, then rerank and score where the model scores."""
    r = app_client("--runner", "pooling", "--convert", convert).post("/invocations", json=body)
    assert r.status_code == 200, r.text
    key, value, prefix = shape
    assert key in r.json() and (value is None or r.json()[key] == value) and r.json()["id"].startswith(prefix)


def test_sagemaker_invocations_no_handler_on_a_pooling_model(app_client):
    c = app_client("--runner", "pooling", "--convert", "classify")
    for body in ({"query": "a", "documents": ["b"]}, {"prompt": "a"}):
        r = c.post("/invocations", json=body)
        assert r.status_code == 400 and r.json()["error"]["message"] == \
            "Cannot find suitable handler for request. Expected one of: classification (input)."


@pytest.mark.parametrize("depth", [300, 1000])
@pytest.mark.parametrize("key", ["messages", "prompt", "input", "extra"])
def test_sagemaker_invocations_take_a_deeply_nested_body_as_any_route(api, key, depth):
    """A body nested deeper than orjson serialises (255 levels; it parses 1,024) was re-encoded
    for the handler and answered 500 ``TypeError: Recursion limit reached``: a client's input is
    never a 5xx."""
    body = b'{"model": "test-model", "%s": ' % key.encode() + b"[" * depth + b"]" * depth + b"}"
    r = api.post("/invocations", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == 400


@pytest.mark.parametrize("raw,message", [
    (b"", "JSON decode error: Expecting value: line 1 column 1 (char 0)"),
    (b"{", "JSON decode error: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b"nope", "JSON decode error: Expecting value: line 1 column 1 (char 0)"),
])
def test_sagemaker_invocations_reads_its_body_itself(api, raw, message):
    """vLLM 0.34's ``invocations`` (``serve/sagemaker/api_router.py``) takes no body model: it
    reads ``raw_request.json()`` and answers a JSONDecodeError with ``HTTPException(400,
    f"JSON decode error: {e}")``, which its http_exception_handler sends with the status phrase;
    a JSON value no request model takes is its no-handler 400."""
    r = api.post("/invocations", content=raw, headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": {"message": message, "type": "Bad Request", "param": None,
                                                         "code": 400}})
    for value in (b"[1]", b'"messages"', b"null"):
        r = api.post("/invocations", content=value, headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert r.json()["error"]["message"].startswith("Cannot find suitable handler for request.")


def test_stored_responses(app_client):
    api = app_client(env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    out = api.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 5}).json()
    assert "store" not in out           # vLLM's ResponsesResponse has no store field (responses/protocol.py l. 905-986)
    assert api.get(f"/v1/responses/{out['id']}").json() == out
    r = api.post(f"/v1/responses/{out['id']}/cancel")
    assert r.status_code == 400 and r.json()["error"]["message"] == "Cannot cancel a synchronous response."
    assert r.json()["error"]["type"] == "invalid_request_error"           # vLLM's err_type there
    assert r.json()["error"]["param"] == "response_id"     # cancel_responses (responses/serving.py:1188-1192)
    streamed = api.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 5,
                                               "stream": True})
    from support import named_events
    final = named_events(streamed.text)[-1][1]["response"]
    assert api.get(f"/v1/responses/{final['id']}").json() == final
    not_kept = api.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 5,
                                               "store": False}).json()
    assert api.get(f"/v1/responses/{not_kept['id']}").status_code == 404


STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}
ASK = {"model": "test-model", "input": "Hi", "max_output_tokens": 5}


def _settled(api, rid: str, timeout: float = 5.0) -> dict:
    """The stored response once it is no longer ``queued`` (or after ``timeout`` seconds)."""
    import gevent
    deadline = time.monotonic() + timeout
    while True:
        got = api.get(f"/v1/responses/{rid}").json()
        if got["status"] != "queued" or time.monotonic() > deadline:
            return got
        gevent.sleep(0.02)


def test_background_response_is_queued_then_completed(app_client):
    """vLLM's ``background: true``: answered at once, ``queued`` with no output or usage, and
    the stored object becomes the finished one (vLLM's test_background)."""
    api = app_client("--time-to-first-token", "200ms", env=STORE)
    t0 = time.monotonic()
    out = api.post("/v1/responses", json={**ASK, "background": True}).json()
    assert time.monotonic() - t0 < 0.2
    assert (out["status"], out["background"], out["output"], out["usage"]) == ("queued", True, [], None)
    done = _settled(api, out["id"])
    assert done["status"] in ("completed", "incomplete") and done["background"] is True
    assert done["output"][0]["content"][0]["text"] and done["usage"]["output_tokens"] >= 1
    r = api.post(f"/v1/responses/{out['id']}/cancel")
    assert r.status_code == 400 and r.json()["error"]["message"] == "Cannot cancel a synchronous response."


def test_background_response_cancelled(app_client):
    """A cancel stops a running background response: ``cancelled`` it stays, its slot is
    freed and counted as an abort (vLLM's test_background_cancel)."""
    api = app_client("--time-to-first-token", "3s", env=STORE)
    out = api.post("/v1/responses", json={**ASK, "background": True}).json()
    r = api.post(f"/v1/responses/{out['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["id"] == out["id"]
    assert api.sim.response_store.tasks == {}
    import gevent
    gevent.sleep(0.3)
    assert api.get(f"/v1/responses/{out['id']}").json()["status"] == "cancelled"
    metrics = api.get("/metrics").text
    assert 'vllm:num_requests_running{engine="0",model_name="test-model"} 0.0' in metrics
    assert 'finished_reason="abort",model_name="test-model"} 1.0' in metrics


def test_background_stream_says_so(app_client):
    """A streaming background request streams as any other, its objects saying so."""
    from support import named_events
    api = app_client(env=STORE)
    events = named_events(api.post("/v1/responses", json={**ASK, "background": True, "stream": True}).text)
    final = events[-1][1]["response"]
    assert events[0][1]["response"]["background"] is True and final["background"] is True
    assert api.get(f"/v1/responses/{final['id']}").json() == final


def test_background_stream_runs_apart_from_its_client(app_client):
    """vLLM runs a background stream as a task of its own: stored ``queued`` from the start, it
    finishes when its client leaves after the first events, and a cancel stops another."""
    import json
    api = app_client("--time-to-first-token", "100ms", "--inter-token-latency", "20ms", env=STORE)
    body = {**ASK, "max_output_tokens": 20, "ignore_eos": True, "background": True, "stream": True}
    with api.stream("POST", "/v1/responses", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and '"response.created"' in line:
                rid = json.loads(line[5:])["response"]["id"]
                break
    assert api.get(f"/v1/responses/{rid}").json()["status"] == "queued"
    done = _settled(api, rid)
    assert done["status"] == "incomplete" and done["usage"]["output_tokens"] == 20
    with api.stream("POST", "/v1/responses", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and '"response.created"' in line:
                rid = json.loads(line[5:])["response"]["id"]
                assert api.post(f"/v1/responses/{rid}/cancel").json()["status"] == "cancelled"
        assert '"response.completed"' not in line and '"response.incomplete"' not in line
    assert api.get(f"/v1/responses/{rid}").json()["status"] == "cancelled"
    assert api.sim.response_store.tasks == {}


def test_previous_response_id_continues_the_stored_conversation(app_client):
    """vLLM's ``construct_input_messages``: the stored turn's messages, then its answer as an
    assistant message, then the new input; each turn's prompt grows by the last one."""
    api = app_client(env=STORE)
    first = api.post("/v1/responses", json={**ASK, "input": "hello there my friend"}).json()
    second = api.post("/v1/responses", json={**ASK, "input": "more", "previous_response_id": first["id"]}).json()
    alone = api.post("/v1/responses", json={**ASK, "input": "more"}).json()
    grown = second["usage"]["input_tokens"] - alone["usage"]["input_tokens"]
    assert grown > first["usage"]["input_tokens"] > 0
    third = api.post("/v1/responses", json={**ASK, "input": "more", "previous_response_id": second["id"]}).json()
    assert third["usage"]["input_tokens"] > second["usage"]["input_tokens"]
    assert third["previous_response_id"] == second["id"]


@pytest.mark.parametrize("env", [STORE, {}])
def test_previous_response_id_unknown_is_404(app_client, env):
    """vLLM answers an id it has not stored (every id, without the store) with its 404."""
    r = app_client(env=env).post("/v1/responses", json={**ASK, "previous_response_id": "resp_nope"})
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "Response with id 'resp_nope' not found.", "type": "invalid_request_error",
                                 "param": "response_id", "code": 404}


def test_a_body_request_id_is_the_response_id(app_client):
    """vLLM's ResponsesRequest.request_id names the response (default ``resp_<uuid>``): GET,
    cancel and previous_response_id find it by that id."""
    api = app_client("--time-to-first-token", "2s", env=STORE)
    out = api.post("/v1/responses", json={**ASK, "background": True, "request_id": "my-own-id"}).json()
    assert out["id"] == "my-own-id" and api.get("/v1/responses/my-own-id").json()["status"] == "queued"
    assert api.post("/v1/responses/my-own-id/cancel").json()["status"] == "cancelled"
    nxt = api.post("/v1/responses", json={**ASK, "previous_response_id": "my-own-id", "background": True}).json()
    assert nxt["id"].startswith("resp_") and nxt["previous_response_id"] == "my-own-id"
    api.post(f"/v1/responses/{nxt['id']}/cancel")


def test_stored_responses_are_bounded_by_bytes_too():
    """An echoed instructions text can be megabytes: the store keeps 10,000 objects and 256 MiB
    of their JSON at most (a helper reached 1.2 GB with 10,000 responses of 115 KB)."""
    from generation.adapters.response_store import ResponseStore
    store = ResponseStore(limit=10, limit_bytes=1000)
    for i in range(5):
        store.put({"id": f"resp_{i}", "instructions": "x" * 300})
    assert list(store.items) == ["resp_2", "resp_3", "resp_4"] and store.total_bytes <= 1000
    store.put({"id": "resp_4", "instructions": ""})              # replaced: its size counted once
    assert store.total_bytes == sum(store.sizes.values()) and set(store.sizes) == set(store.items)


def test_stored_conversations_are_bounded():
    from generation.adapters.response_store import ResponseStore
    store = ResponseStore(limit=3, history_tokens=100)
    for i in range(5):
        store.remember(f"resp_{i}", [{"role": "user", "content": str(i)}], 30)
    assert list(store.history) == ["resp_2", "resp_3", "resp_4"] and store.history_total == 90
    store.remember("resp_5", [], 60)
    assert list(store.history) == ["resp_4", "resp_5"] and store.history_total == 90
    assert store.messages_of("resp_0") == []


@pytest.mark.parametrize("env, body, param, text", [
    (STORE, {**ASK, "background": True, "store": False}, "background",
     "background can only be used when `store` is true"),
    # _validate_create_responses_input names it (responses/serving.py:264-276)
    ({}, {**ASK, "background": True}, "background", "VLLM_ENABLE_RESPONSES_API_STORE=1"),
    (STORE, {**ASK, "background": "maybe"}, "body.background", "bool_parsing"),
])
def test_background_errors(app_client, env, body, param, text):
    r = app_client(env=env).post("/v1/responses", json=body)
    assert r.status_code == 400 and text in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == param


def test_responses_are_not_stored_by_default(api):
    out = api.post("/v1/responses", json={"model": "test-model", "input": "Hi", "max_output_tokens": 5}).json()
    r = api.get(f"/v1/responses/{out['id']}")
    assert r.status_code == 404 and r.json()["error"]["message"] == f"Response with id '{out['id']}' not found."
    assert api.post(f"/v1/responses/{out['id']}/cancel").status_code == 404


# ---- newcomer friction ------------------------------------------------------------------------------
def test_help_shows_boolean_switches_without_a_value():
    from generation.config.cli import build_parser
    text = build_parser("app.py").format_help()
    assert "--omni BOOL" not in text and "  --omni  " in text
    assert "--max-num-seqs INT" in text


@pytest.mark.parametrize("argv,line", [
    (["--mode", "bogus"], "error: --mode: invalid mode 'bogus', valid values are 'random' and 'echo'"),
    (["--max-num-seqs", "0"], "error: --max-num-seqs: max num seqs cannot be less than 1"),
])
def test_bad_values_name_their_flag(argv, line):
    r = subprocess.run([sys.executable, str(ROOT / "app.py"), *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == line


@pytest.mark.parametrize("query,param,kind", [({"starting_after": "x"}, "query.starting_after", "int_parsing"),
                                              ({"stream": "maybe"}, "query.stream", "bool_parsing")])
def test_retrieving_a_response_checks_the_query_first(api, query, param, kind):
    """vLLM's ``retrieve_responses(response_id, starting_after: int | None, stream: bool | None)``:
    FastAPI checks the query before the route looks the id up (the simulator's 404 before)."""
    r = api.get("/v1/responses/resp_nope", params=query)
    assert (r.status_code, r.json()["error"]["param"], r.json()["error"]["type"]) == (400, param, "Bad Request")
    assert f"'type': '{kind}'" in r.json()["error"]["message"]
    r = api.get("/v1/responses/resp_nope", params={"starting_after": "3", "stream": "false"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "response_id"
