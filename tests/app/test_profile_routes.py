"""vLLM 0.34's ``/start_profile`` and ``/stop_profile`` (``serve/profile/api_router.py``):
registered only when ``--profiler-config`` names a profiler (a 404 before, whatever the flag)."""
from __future__ import annotations

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError

PROFILED = ("--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "/tmp/traces"}')
JSON = {"Content-Type": "application/json"}


def test_without_a_profiler_they_are_not_there(app_client):
    for c in (app_client(), app_client("--profiler-config", "{}")):
        for path in ("/start_profile", "/stop_profile"):
            assert (c.post(path).status_code, c.post(path).json()) == (404, {"detail": "Not Found"})
    assert "/start_profile" not in app_client().get("/openapi.json").json()["paths"]


def test_start_and_stop_answer_empty_200s_and_guard_the_session(app_client):
    c = app_client(*PROFILED)
    r = c.post("/start_profile")
    assert (r.status_code, r.content) == (200, b"")
    r = c.post("/start_profile", json={"profile_prefix": "run-2"})
    assert (r.status_code, r.json()["error"]) == (409, {
        "message": "A profiling session is already active. Call /stop_profile before starting another session.",
        "type": "Conflict", "param": None, "code": 409})
    assert (c.post("/stop_profile").status_code, c.post("/stop_profile").content) == (200, b"")
    r = c.post("/start_profile", json={"profile_prefix": "run.2_b-c", "delay_iterations": 0, "max_iterations": 5,
                                       "profiler_kwargs": {"record_shapes": True}, "other": 1})
    assert (r.status_code, r.content) == (200, b"")
    c.post("/stop_profile")
    assert c.get("/stop_profile").status_code == 405
    doc = c.get("/openapi.json").json()["paths"]
    assert doc["/start_profile"]["post"]["operationId"] == "start_profile_start_profile_post"


def test_start_profile_checks_its_body_as_vllm(app_client):
    c = app_client("--profiler-config.profiler", "cuda")
    # StartProfileRequest is strict: no coercion
    r = c.post("/start_profile", json={"delay_iterations": "3", "max_iterations": 1.0, "profile_prefix": 7})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "3 validation errors:\n  {'type': 'string_type', 'loc': 'body.profile_prefix', 'msg': 'Input should be a "
        "valid string', 'input': '7'}\n  {'type': 'int_type', 'loc': 'body.delay_iterations', 'msg': 'Input should "
        "be a valid integer', 'input': '3'}\n  {'type': 'int_type', 'loc': 'body.max_iterations', 'msg': 'Input "
        "should be a valid integer', 'input': '1.0'}")
    assert r.json()["error"]["param"] == "body.profile_prefix"
    for body, message in (({"profile_prefix": "-x"}, "profile_prefix must be 1-128 ASCII characters, start with a "
                           "letter or number, and contain only letters, numbers, '.', '_', or '-'"),
                          ({"profile_prefix": "a/b"}, None), ({"profile_prefix": "x" * 129}, None),
                          ({"delay_iterations": -1}, "delay_iterations must be greater than or equal to 0"),
                          ({"max_iterations": -2}, "max_iterations must be greater than or equal to 0")):
        r = c.post("/start_profile", json=body)
        assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (400, "BadRequestError", None)
        if message:
            assert r.json()["error"]["message"] == message
    r = c.post("/start_profile", content=b"{bad", headers=JSON)
    assert r.status_code == 400 and "json_invalid" in r.json()["error"]["message"]
    assert c.post("/start_profile", json={"profile_prefix": None}).status_code == 200      # nullable
    c.post("/stop_profile")
    # StartProfileRequest | None = None: FastAPI reads a JSON null body as None, the default (a 400 before)
    assert c.post("/start_profile", content=b"null", headers=JSON).status_code == 200
    assert c.post("/start_profile", content=b"[]", headers=JSON).status_code == 400
    c.post("/stop_profile")


def test_an_unknown_profiler_is_a_start_up_error():
    with pytest.raises(ConfigError, match="profiler must be one of 'torch', 'cuda', 'proton' or null"):
        load_config(["--profiler-config", '{"profiler": "nsys"}'])
