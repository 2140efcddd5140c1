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
    r = api_lora.post("/v1/load_lora_adapter", json={**load, "load_inplace": "yes"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "load_inplace")
    r = api_lora.post("/v1/load_lora_adapter", json={"lora_name": "test-model", "lora_path": "/x", "load_inplace": True})
    assert r.json()["error"]["message"] == "The lora adapter 'test-model' conflicts with a served base model."
    assert api_lora.post("/v1/unload_lora_adapter", json={"lora_name": "inpl"}).status_code == 200
