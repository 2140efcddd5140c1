"""LoRA as vLLM checks it (issue 22): a local adapter directory's ``adapter_config.json`` and
rank (``--max-lora-rank``); paths not on this machine load unread (the simulator has no
weights).  Also ``GET /v1/models/{model}`` and sleep tags (``wake_up?tags=``)."""
from __future__ import annotations

import json

import pytest

LOAD = "/v1/load_lora_adapter"
GOOD = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "peft_type": "LORA"}


@pytest.fixture(scope="module")
def lora_api(app_client):
    return app_client("--max-loras", "2", "--max-cpu-loras", "8", "--max-lora-rank", "16")


def adapter(tmp_path, config=GOOD, weights="adapter_model.safetensors", raw=None):
    if raw is not None:
        (tmp_path / "adapter_config.json").write_text(raw)
    elif config is not None:
        (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    if weights:
        (tmp_path / weights).write_bytes(b"\0" * 8)
    return str(tmp_path)


def load(api, name, path):
    return api.post(LOAD, json={"lora_name": name, "lora_path": path})


def test_a_valid_local_adapter_loads(lora_api, tmp_path):
    r = load(lora_api, "good", adapter(tmp_path))
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'good' added successfully.")
    assert lora_api.post("/v1/unload_lora_adapter", json={"lora_name": "good"}).status_code == 200


def test_a_directory_without_a_config_is_vllms_404(lora_api, tmp_path):
    r = load(lora_api, "none", str(tmp_path))
    assert r.status_code == 404
    assert r.json()["error"] == {"message": f"Loading lora none failed: No adapter found for {tmp_path}",
                                 "type": "NotFoundError", "param": None, "code": 404}


def test_a_rank_over_max_lora_rank_is_vllms_400(lora_api, tmp_path):
    r = load(lora_api, "big", adapter(tmp_path, {**GOOD, "r": 64}))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "LoRA rank 64 is greater than max_lora_rank 16."
    assert r.json()["error"]["type"] == "BadRequestError"
    assert "big" not in [m["id"] for m in lora_api.get("/v1/models").json()["data"]]


@pytest.mark.parametrize("case,kw,message", [
    ("not json", {"raw": "{r: 8"}, "Loading lora x failed: adapter_config.json is not valid JSON (line 1 column 2)"),
    ("not an object", {"raw": "[1]"}, "Loading lora x failed: adapter_config.json is not a JSON object"),
    ("no rank", {"config": {"lora_alpha": 16, "target_modules": ["q"]}}, "Missing required configuration fields: {'r'}"),
    ("nothing", {"config": {"x": 1}},
     "Missing required configuration fields: {'lora_alpha', 'r', 'target_modules'}"),
    ("DoRA", {"config": {**GOOD, "use_dora": True}}, "vLLM does not yet support DoRA."),
    ("modules_to_save", {"config": {**GOOD, "modules_to_save": ["lm_head", "score"]}},
     'vLLM only supports modules_to_save being either None or ["classifier", "score"] for classification '
     "models. Unsupported modules_to_save: ['lm_head']"),
    ("bias", {"config": {**GOOD, "bias": "all"}}, "Adapter bias is not supported."),
    ("DoRA, rank and bias", {"config": {**GOOD, "use_dora": True, "r": 64, "bias": "all"}},
     "vLLM does not yet support DoRA. LoRA rank 64 is greater than max_lora_rank 16. Adapter bias is not supported."),
    ("lora_bias", {"config": {**GOOD, "lora_bias": True}}, "vLLM does not support LoRA bias (lora_bias)."),
    ("bad rank", {"config": {**GOOD, "r": "8"}}, "LoRA rank `r` must be a positive integer."),
    ("zero rank", {"config": {**GOOD, "r": 0}}, "LoRA rank `r` must be a positive integer, got 0."),
])
def test_unsupported_configs_are_400s(lora_api, tmp_path, case, kw, message):
    r = load(lora_api, "x", adapter(tmp_path, **kw))
    assert r.status_code == 400 and r.json()["error"]["message"] == message


def test_a_directory_without_weights_is_a_400(lora_api, tmp_path):
    r = load(lora_api, "x", adapter(tmp_path, weights=None))
    assert r.status_code == 400 and r.json()["error"]["message"] == f"{tmp_path} doesn't contain tensors"


def test_a_file_is_not_an_adapter(lora_api, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = load(lora_api, "x", str(f))
    assert r.status_code == 400 and r.json()["error"]["message"] == f"Loading lora x failed: {f} is not a directory"


@pytest.mark.parametrize("path", ["/adapters/elsewhere", "org/some-hub-adapter"])
def test_paths_not_on_this_machine_load_unread(lora_api, path):
    name = path.rsplit("/", 1)[1]
    assert load(lora_api, name, path).status_code == 200
    assert lora_api.post("/v1/unload_lora_adapter", json={"lora_name": name}).status_code == 200


# ---- GET /v1/models/{model} ------------------------------------------------------------------------

def test_retrieve_a_served_model_and_a_lora(app_client):
    api = app_client("--model", "org/base-m", "--served-model-name", "base", "alias",
                     "--lora-modules", '{"name":"lora-a","path":"/adapters/lora-a"}', model=None)
    listed = {m["id"]: m for m in api.get("/v1/models").json()["data"]}
    for name in ("base", "alias", "lora-a"):
        r = api.get(f"/v1/models/{name}")
        assert r.status_code == 200
        card = r.json()
        assert card == {**listed[name], "created": card["created"], "permission": card["permission"]}
        assert card["permission"][0]["id"] != listed[name]["permission"][0]["id"]     # fresh each time, as vLLM
    assert api.get("/v1/models/lora-a").json()["parent"] == "base"
    sdk = api.openai().models.retrieve("alias")
    assert (sdk.id, sdk.owned_by) == ("alias", "vllm")


def test_retrieve_names_with_slashes_and_unknown_names(app_client):
    api = app_client("--model", "org/base-m", model=None)
    assert api.get("/v1/models/org/base-m").json()["id"] == "org/base-m"
    r = api.get("/v1/models/nope")
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "The model `nope` does not exist."
    assert r.json()["error"]["type"] == "NotFoundError"


def test_retrieve_needs_the_key(app_client):
    api = app_client("--api-key", "sk-1")
    assert api.get("/v1/models/test-model").status_code == 401
    assert api.get("/v1/models/test-model", headers={"Authorization": "Bearer sk-1"}).status_code == 200


# ---- sleep tags ----------------------------------------------------------------------------------------

SLEEP = ("--enable-sleep-mode",)
DEV = {"VLLM_SERVER_DEV_MODE": "1"}


def test_waking_the_weights_alone_keeps_the_engine_asleep(app_client):
    api = app_client(*SLEEP, env=DEV)
    assert api.post("/sleep").status_code == 200
    assert api.get("/is_sleeping").json() == {"is_sleeping": True}
    assert api.post("/wake_up", params={"tags": "weights"}).status_code == 200
    assert api.get("/is_sleeping").json() == {"is_sleeping": True}
    assert api.post("/wake_up", params={"tags": "weights"}).status_code == 200     # not asleep: no-op
    assert api.get("/is_sleeping").json() == {"is_sleeping": True}
    assert api.post("/wake_up", params={"tags": "kv_cache"}).status_code == 200
    assert api.get("/is_sleeping").json() == {"is_sleeping": False}


def test_wake_up_without_tags_or_with_both_wakes_everything(app_client):
    api = app_client(*SLEEP, env=DEV)
    api.post("/sleep")
    assert api.post("/wake_up").status_code == 200
    assert api.get("/is_sleeping").json() == {"is_sleeping": False}
    api.post("/sleep", params={"level": "2"})
    api.post("/wake_up?tags=weights&tags=kv_cache")
    assert api.get("/is_sleeping").json() == {"is_sleeping": False}


def test_an_unknown_tag_wakes_nothing(app_client):
    api = app_client(*SLEEP, env=DEV)
    api.post("/sleep")
    api.post("/wake_up?tags=weights&tags=bogus")
    assert api.get("/is_sleeping").json() == {"is_sleeping": True}
    api.post("/wake_up")
