"""vLLM 0.34's RL weight routes (``entrypoints/rl/online/api_router.py``) and the weight-version
spans answers carry (``v1/engine/output_processor.py``): blueprints.rl_weights,
generation.engine.weight_versions."""
import gevent

from tests.app.test_dev_rl_routes import DEV

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}


def _failed(error: str) -> dict:
    return {"error": {"message": f"Call to collective_rpc method failed: {error}", "type": "InternalServerError",
                      "param": None, "code": 500}}


NOT_CONFIGURED = "Weight transfer not configured. Please set weight_transfer_config to enable weight transfer."


def test_without_a_weight_transfer_config_the_workers_refuse(app_client):
    c = app_client(env=DEV)
    for path, body in (("/init_weight_transfer_engine", b'{"init_info": {"master_port": 1}}'),
                       ("/start_weight_update", b""), ("/start_draft_weight_update", b""),
                       ("/update_weights", b'{"update_info": {}}'), ("/finish_weight_update", b"")):
        r = c.post(path, content=body, headers=JSON)
        assert (r.status_code, r.json()) == (500, _failed(NOT_CONFIGURED)), path
    r = c.post("/shutdown_weight_transfer_engine")           # nothing to release: no check
    assert (r.status_code, r.json()) == (200, {"message": "Weight transfer shut down"})


def test_an_update_session_runs_as_the_workers_rules_say(app_client):
    c = app_client("--weight-transfer-config", '{"backend": "nccl"}', env=DEV)
    post = lambda path, body=b"": c.post(path, content=body, headers=JSON)      # noqa: E731
    assert post("/init_weight_transfer_engine", b'{"init_info": {}}').json() == {"message": "Weight transfer initialized"}
    r = post("/update_weights", b'{"update_info": {}}')
    assert (r.status_code, r.json()) == (500, _failed("start_weight_update must be called before update_weights."))
    r = post("/finish_weight_update")
    assert r.json() == _failed("finish_weight_update called without a matching start_weight_update.")
    assert post("/start_weight_update").json() == {"message": "Weight update started"}
    r = post("/start_weight_update")
    assert r.json() == _failed("start_weight_update called while a weight update is already active. "
                               "Call finish_weight_update first.")
    r = post("/shutdown_weight_transfer_engine")
    assert r.json() == _failed("Cannot release a trainer connection during a weight update")
    assert post("/update_weights", b'{"update_info": [{"names": []}]}').json() == {"message": "Weights updated"}
    r = post("/finish_weight_update", b'{"weight_version": "step-7"}')
    assert (r.status_code, r.json()) == (200, {"message": "Weight update finished"})
    assert c.get("/weight_info").json() == {"weight_version": "step-7"}
    r = post("/start_draft_weight_update")
    assert r.json() == _failed("Draft model weight update requested, but no draft model is configured.")
    # an empty list leaves this worker without its entry: the update ends
    post("/start_weight_update")
    assert post("/update_weights", b'{"update_info": []}').json() == _failed("list index out of range")
    assert post("/finish_weight_update").json() == _failed(
        "finish_weight_update called without a matching start_weight_update.")
    m = c.get("/metrics").text
    assert 'vllm:rl_weight_update_operation_duration_seconds_count{operation="start"} 3.0' in m
    assert 'vllm:rl_weight_update_operations_in_flight{operation="update"} 0.0' in m


def test_bodies_are_read_as_fastapi_reads_embedded_fields(app_client):
    c = app_client(env=DEV)

    def error(path, body, headers=JSON):
        r = c.post(path, content=body, headers=headers)
        assert r.status_code == 400, (path, body, r.text)
        return r.json()["error"]["message"], r.json()["error"]["param"]
    missing = "1 validation error:\n  {'type': 'missing', 'loc': 'body.new_version', 'msg': 'Field required', 'input': 'None'}"
    for body in (b"", b"{}", b'"v2"'):
        assert error("/update_weight_version", body) == (missing, "body.new_version"), body
    # vLLM's FastAPI reads no field from a body of another type (Field required); the guard's
    # media-type 400 refuses it first here (a browser's form post must not act without a preflight)
    r = c.post("/update_weight_version", content=b'{"new_version": "v"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "Unsupported Media Type" in r.json()["error"]["message"]
    assert error("/update_weight_version", b'{"new_version": 3}') == (
        "1 validation error:\n  {'type': 'string_type', 'loc': 'body.new_version', 'msg': 'Input should be a "
        "valid string', 'input': '3'}", "body.new_version")
    assert error("/init_weight_transfer_engine", b'{"init_info": 3}')[1] == "body.init_info"
    assert error("/update_weights", b'{"update_info": "x"}')[1] == "body.update_info"
    msg, param = error("/finish_weight_update", b"xx")
    assert param == "body.0" and "json_invalid" in msg
    r = c.post("/update_weight_version", content=b'{"new_version": "v2"}', headers=JSON)
    assert r.json() == {"success": True, "new_version": "v2"}
    assert c.get("/weight_info").json() == {"weight_version": "v2"}
    assert c.head("/weight_info").status_code == 405


def test_the_routes_are_dev_mode_only(app_client):
    c = app_client()
    assert c.get("/weight_info").status_code == 404
    assert c.post("/update_weight_version", json={"new_version": "x"}).status_code == 404


def test_answers_carry_the_weight_versions(app_client):
    c = app_client("--seed", "7", env=DEV)          # a server of its own: the label starts "default"
    body = {"model": "test-model", "messages": MSG, "max_tokens": 3, "ignore_eos": True}
    choice = c.post(CHAT, json=body).json()["choices"][0]
    assert choice["weight_versions"] is None                   # not asked
    choice = c.post(CHAT, json={**body, "return_weight_versions": True}).json()["choices"][0]
    assert choice["weight_versions"] == [{"version": "default", "start": 0, "end": 3}]
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 2, "ignore_eos": True,
                                         "return_weight_versions": True})
    assert r.json()["choices"][0]["weight_versions"] == [{"version": "default", "start": 0, "end": 2}]
    c.post("/update_weight_version", json={"new_version": "v1"})
    gen = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2, "ignore_eos": True}}
    r = c.post("/inference/v1/generate", json={**gen, "output_mode": "text"})     # always there
    assert r.json()["choices"][0]["weight_versions"] == [{"version": "v1", "start": 0, "end": 2}]
    text = c.post("/inference/v1/generate", json={**gen, "stream": True}).text
    assert text.count('"weight_versions":null') == 1 and '"weight_versions":[{"version":"v1","start":0,"end":2}]' in text
    chunks = [ln for ln in c.post(CHAT, json={**body, "stream": True, "return_weight_versions": True}).text.split("\n\n")
              if "weight_versions" in ln]
    assert len(chunks) == 1 and '"weight_versions":[{"version":"v1","start":0,"end":3}]' in chunks[0]


def test_a_version_set_while_a_request_runs_starts_a_span(app_client):
    c = app_client("--inter-token-latency", "100ms", env=DEV)
    c.post("/update_weight_version", json={"new_version": "a"})
    job = gevent.spawn(lambda: c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 6,
                                                  "ignore_eos": True, "return_weight_versions": True}))
    gevent.sleep(0.25)                                          # tokens 1-3 made (0, 100, 200 ms)
    c.post("/update_weight_version", json={"new_version": "b"})
    spans = job.get(timeout=10).json()["choices"][0]["weight_versions"]
    assert [s["version"] for s in spans] == ["a", "b"] and spans[0]["start"] == 0 and spans[-1]["end"] == 6
    assert spans[0]["end"] == spans[1]["start"] and 2 <= spans[1]["start"] <= 4


def test_labels_set_between_two_tokens_leave_no_empty_span(app_client):
    """vLLM's track_weight_version starts a span only when a step that made tokens carries a
    label other than the last span's: labels set one after another between two tokens are
    one change (the last), and a label set back to the running one is none."""
    c = app_client("--inter-token-latency", "300ms", env=DEV)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 4, "ignore_eos": True,
            "return_weight_versions": True}
    job = gevent.spawn(lambda: c.post(CHAT, json=body))
    gevent.sleep(0.45)                                          # tokens 1-2 made (0, 300 ms)
    for v in ("x", "y", "default"):
        c.post("/update_weight_version", json={"new_version": v})
    assert job.get(timeout=10).json()["choices"][0]["weight_versions"] == [
        {"version": "default", "start": 0, "end": 4}]
    job = gevent.spawn(lambda: c.post(CHAT, json=body))
    gevent.sleep(0.45)
    for v in ("x", "y"):
        c.post("/update_weight_version", json={"new_version": v})
    spans = job.get(timeout=10).json()["choices"][0]["weight_versions"]
    assert [s["version"] for s in spans] == ["default", "y"] and spans[0]["end"] == spans[1]["start"]


def test_an_integer_past_64_bits_is_echoed_digit_for_digit(app_client):
    """FastAPI reads the embedded fields with json.loads: a wide integer is that integer in the
    400's input, as on every other route (generation.adapters.wide_ints)."""
    c = app_client(env=DEV)
    wide = "123456789012345678901234567890"
    for route, field in (("/update_weight_version", "new_version"), ("/finish_weight_update", "weight_version")):
        r = c.post(route, content=f'{{"{field}": {wide}}}'.encode(), headers=JSON)
        assert r.status_code == 400 and f"'input': '{wide}'" in r.json()["error"]["message"], r.text
