"""The LoRA load route never echoes the files it is given and bounds what it stores (issue 10);
a local adapter directory's config is checked as vLLM does (issue 22, test_lora_validation)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def api_lora(app_client):
    return app_client("--max-loras", "2")


def test_load_does_not_read_or_echo_the_file(api_lora, tmp_path):
    secret = tmp_path / "adapter_config.json"
    secret.write_text("TOP-SECRET-CONTENT")
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(tmp_path)})
    assert r.status_code == 400 and "TOP-SECRET" not in r.text       # not an adapter config: refused, unquoted
    models = api_lora.get("/v1/models").text
    assert "TOP-SECRET-CONTENT" not in models and str(tmp_path) not in models
    # A path that does not exist is accepted the same way: nothing is opened.
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "a2", "lora_path": "/no/such/../etc/passwd"})
    assert r.status_code == 200 and "root:" not in api_lora.get("/v1/models").text
    for name in ("a2",):
        assert api_lora.post("/v1/unload_lora_adapter", json={"lora_name": name}).status_code == 200


@pytest.mark.parametrize("field,value,message", [
    ("lora_path", "x" * 4097, "lora_path: at most 4096 characters."),
    ("lora_name", "n" * 4097, "lora_name: at most 4096 characters."),
    ("lora_path", "/a\nb", "lora_path: must not contain control characters."),
    ("lora_name", "bad\x00name", "lora_name: must not contain control characters."),
])
def test_bounded_printable_fields(api_lora, field, value, message):
    body = {"lora_name": "ok", "lora_path": "/ok"}
    body[field] = value
    r = api_lora.post("/v1/load_lora_adapter", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["message"] == message and err["param"] == field
    assert value not in r.text


def test_load_inplace_reloads_a_loaded_adapter(api_lora):
    """vLLM: a second load of a name is a 400 unless ``load_inplace: true``, which reloads it
    (here from a new path: the card's ``root`` follows)."""
    load = {"lora_name": "inpl", "lora_path": "/adapters/v1"}
    assert api_lora.post("/v1/load_lora_adapter", json=load).status_code == 200
    r = api_lora.post("/v1/load_lora_adapter", json=load)
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, "The lora adapter 'inpl' has already been loaded. If you want to load the adapter in place, set "
             "'load_inplace' to True.")
    r = api_lora.post("/v1/load_lora_adapter", json={**load, "lora_path": "/adapters/v2", "load_inplace": True})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'inpl' added successfully.")
    card = api_lora.get("/v1/models/inpl").json()
    assert card["root"] == "/adapters/v2"
    r = api_lora.post("/v1/load_lora_adapter", json={**load, "load_inplace": "maybe"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.load_inplace")
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "test-model", "lora_path": "/x", "load_inplace": True})
    assert r.json()["error"]["message"] == "The lora adapter 'test-model' conflicts with a served base model."
    assert api_lora.post("/v1/unload_lora_adapter", json={"lora_name": "inpl"}).status_code == 200


def test_load_and_unload_read_the_body_as_vllms_request_models(api_lora):
    """vLLM 0.34's ``LoadLoRAAdapterRequest`` / ``UnloadLoRAAdapterRequest`` (pydantic, through
    its validation handler), then ``OpenAIServingModels``' own checks: ``InvalidUserInput`` with
    no ``param`` (the simulator named the field and answered ``BadRequestError``)."""
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_path": "/x", "load_inplace": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "2 validation errors:\n  {'type': 'missing', 'loc': 'body.lora_name', 'msg': 'Field required', "
        "'input': '<dict of 2 items>'}\n  {'type': 'bool_parsing', 'loc': 'body.load_inplace', 'msg': 'Input should "
        "be a valid boolean, unable to interpret input', 'input': 'maybe'}")
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": 5, "lora_path": "/x"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.lora_name")
    for body in ({"lora_name": "", "lora_path": "/x"}, {"lora_name": "n", "lora_path": ""}):
        r = api_lora.post("/v1/load_lora_adapter", json=body)
        assert (r.status_code, r.json()["error"]) == (400, {"message": "Both 'lora_name' and 'lora_path' must be "
                                                                       "provided.", "type": "InvalidUserInput",
                                                            "param": None, "code": 400})
    # pydantic's lax booleans: "yes" loads in place, as vLLM reads it
    assert api_lora.post("/v1/load_lora_adapter", json={"lora_name": "lax", "lora_path": "/x"}).status_code == 200
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "lax", "lora_path": "/y", "load_inplace": "yes"})
    assert r.status_code == 200
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "lax", "lora_path": "/y"})
    assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (400, "InvalidUserInput", None)
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "test-model", "lora_path": "/y"})
    assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (400, "InvalidUserInput", None)
    r = api_lora.post("/v1/unload_lora_adapter", json={"lora_name": ""})
    assert (r.status_code, r.json()["error"]) == (400, {"message": "'lora_name' needs to be provided to unload a "
                                                                   "LoRA adapter.", "type": "InvalidUserInput",
                                                        "param": None, "code": 400})
    r = api_lora.post("/v1/unload_lora_adapter", json={"lora_name": "lax", "lora_int_id": "x"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.lora_int_id")
    r = api_lora.post("/v1/unload_lora_adapter", json={"lora_name": "never"})
    assert (r.status_code, r.json()["error"]) == (404, {"message": "The lora adapter 'never' cannot be found.",
                                                        "type": "NotFoundError", "param": None, "code": 404})
    r = api_lora.post("/v1/unload_lora_adapter", json={"lora_name": "lax", "lora_int_id": None})
    # vLLM's Response(status_code=200, content=...): the text, no Content-Type
    assert (r.status_code, r.text, r.headers.get("content-type")) == (
        200, "Success: LoRA adapter 'lax' removed successfully.", None)
