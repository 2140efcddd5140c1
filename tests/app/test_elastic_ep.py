"""vLLM 0.34's elastic expert-parallel routes (``serve/elastic_ep/api_router.py``, registered for
every generation model) as a deployment without elastic EP answers them: the body's checks are
``HTTPException`` 400s in vLLM's envelope (``type`` the status phrase), scaling to the size it
has is a no-op 200, any other size vLLM's 500 ``Scale failed`` (``AsyncMPClient.prepare_elastic_ep``
is not implemented), and the status is always the idle phase."""
from __future__ import annotations

import httpx
import pytest

SCALE = "/scale_elastic_ep"
STATUS = "/is_scaling_elastic_ep"
IDLE = {"is_scaling_elastic_ep": False, "phase": "idle", "epoch": None, "error": None,
        "requested_data_parallel_size": None}


def http_error(r, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    assert r.json() == {"error": {"message": message, "type": httpx.codes.get_reason_phrase(status),
                                  "param": None, "code": status}}


def test_scaling_to_the_size_it_has_is_a_no_op(api, app_client):
    r = api.post(SCALE, json={"new_data_parallel_size": 1})
    assert r.status_code == 200 and r.json() == {"message": "Scaled to 1 data parallel engines"}
    assert api.post(SCALE, json={"new_data_parallel_size": 1, "drain_timeout": 5}).status_code == 200
    # vLLM's isinstance(..., int) takes a JSON true, which equals 1
    assert api.post(SCALE, json={"new_data_parallel_size": True}).json() == \
        {"message": "Scaled to True data parallel engines"}
    dp = app_client("--data-parallel-size", "2", "--data-parallel-rank", "1")
    assert dp.post(SCALE, json={"new_data_parallel_size": 2}).json() == {"message": "Scaled to 2 data parallel engines"}
    http_error(dp.post(SCALE, json={"new_data_parallel_size": 1}), 500, "Scale failed")


def test_any_other_size_fails_as_without_elastic_ep(api):
    for size in (2, 8):
        http_error(api.post(SCALE, json={"new_data_parallel_size": size}), 500, "Scale failed")
    assert api.post(STATUS).json() == IDLE                 # nothing started


@pytest.mark.parametrize("body, message", [
    ({}, "new_data_parallel_size is required"),
    ({"new_data_parallel_size": None}, "new_data_parallel_size is required"),
    ({"new_data_parallel_size": 0}, "new_data_parallel_size must be a positive integer"),
    ({"new_data_parallel_size": -2}, "new_data_parallel_size must be a positive integer"),
    ({"new_data_parallel_size": 2.0}, "new_data_parallel_size must be a positive integer"),
    ({"new_data_parallel_size": "2"}, "new_data_parallel_size must be a positive integer"),
    ({"new_data_parallel_size": False}, "new_data_parallel_size must be a positive integer"),
    ({"new_data_parallel_size": 2, "drain_timeout": 0}, "drain_timeout must be a positive integer"),
    ({"new_data_parallel_size": 2, "drain_timeout": 1.5}, "drain_timeout must be a positive integer"),
    ({"new_data_parallel_size": 2, "drain_timeout": None}, "drain_timeout must be a positive integer"),
    ({"new_data_parallel_size": 2, "drain_timeout": "60"}, "drain_timeout must be a positive integer"),
    ([1], "Request body must be a JSON object."),        # vLLM: a 500 (list.get); a client mistake here
])
def test_bad_bodies_are_http_400s(api, body, message):
    http_error(api.post(SCALE, json=body), 400, message)


def test_unreadable_bodies(api):
    for raw in (b"", b"{", b"not json", b'{"new_data_parallel_size": NaN}'):
        r = api.post(SCALE, content=raw, headers={"Content-Type": "application/json"})
        http_error(r, 400, "Invalid JSON format")
    # validate_json_request: JSON only, a body-less POST included
    for headers in ({"Content-Type": "text/plain"}, {}):
        r = api.post(SCALE, content=b"", headers=headers)
        assert r.status_code == 400
        assert r.json()["error"] == {"message": "1 validation error:\n  Unsupported Media Type: Only "
                                                "'application/json' is allowed", "type": "Bad Request",
                                     "param": None, "code": 400}


def test_status_is_idle_and_reads_no_body(api):
    for kwargs in ({}, {"json": {"x": 1}}, {"content": b"anything", "headers": {"Content-Type": "text/plain"}}):
        r = api.post(STATUS, **kwargs)
        assert r.status_code == 200 and r.json() == IDLE
        assert list(r.json()) == list(IDLE)
    assert api.get(STATUS).status_code == 405 and api.get(SCALE).json() == {"detail": "Method Not Allowed"}


def test_generation_models_only(app_client):
    pooling = app_client("--runner", "pooling", "--convert", "embed")
    for path in (SCALE, STATUS):
        r = pooling.post(path, json={"new_data_parallel_size": 1})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}


def test_openai_sdk_posts_to_the_routes(api):
    import openai
    client = api.openai()
    # outside /v1: an absolute URL, which the SDK takes as it is
    assert client.post(api.url + STATUS, cast_to=object, body={}) == IDLE
    assert client.post(api.url + SCALE, cast_to=object, body={"new_data_parallel_size": 1}) == \
        {"message": "Scaled to 1 data parallel engines"}
    with pytest.raises(openai.InternalServerError) as e:
        client.post(api.url + SCALE, cast_to=object, body={"new_data_parallel_size": 4})
    assert e.value.status_code == 500 and e.value.body["message"] == "Scale failed"
