"""``--api-key`` in-process (vLLM's AuthenticationMiddleware, plus x-api-key; issue 10
Security): probes stay open, every other route needs the key, ``/v1/messages`` answers in
Anthropic's envelope, the key may come from ``VLLM_API_KEY``, and both SDKs send it."""
from __future__ import annotations

import pytest

KEY = "sk-sim-test-key"
OPEN = ["/health", "/health/ready", "/metrics", "/ping", "/version"]
PROTECTED = [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("GET", "/v1/models"),
             ("POST", "/v1/embeddings"), ("POST", "/v1/responses"), ("POST", "/tokenize"),
             ("POST", "/detokenize"), ("POST", "/inference/v1/generate"),
             ("POST", "/v1/chat/completions/render"), ("POST", "/v1/completions/render"),
             ("POST", "/v1/chat/completions/batch"), ("POST", "/v1/responses/render"),
             ("POST", "/v1/completions/derender"), ("POST", "/scale_elastic_ep"), ("POST", "/is_scaling_elastic_ep"),
             ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"),
             ("GET", "/admin/config"), ("POST", "/admin/config"), ("POST", "/sleep"),
             ("GET", "/is_sleeping"), ("GET", "/v1/no-such-route")]
CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "extra_body": {"ignore_eos": True}}          # SDK form; RAW is the same body for httpx
RAW = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
       "ignore_eos": True}


@pytest.fixture(scope="module")
def keyed(app_client):
    return app_client("--api-key", KEY)


@pytest.mark.parametrize("path", OPEN)
def test_probes_stay_open(keyed, path):
    assert keyed.get(path).status_code == 200


@pytest.mark.parametrize("method,path", PROTECTED)
def test_protected_routes_need_the_key(keyed, method, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                    {"x-api-key": "wrong"}, {"Authorization": "Bearer"}):
        r = keyed.request(method, path, headers=headers, json={})
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"error": "Unauthorized"}       # vLLM's AuthenticationMiddleware body
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"Authorization": f"bearer {KEY}"}, {"x-api-key": KEY}):
        assert keyed.request(method, path, headers=headers, json={}).status_code != 401


def test_messages_get_anthropic_envelope(keyed):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = keyed.post(path, json={})
        assert r.status_code == 401
        assert r.json() == {"type": "error", "error": {"type": "authentication_error", "message":
                            "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."}}
    r = keyed.post("/v1/messages", headers={"x-api-key": KEY},
                   json={"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200


def test_no_key_configured_means_open(api):
    assert api.post("/v1/chat/completions", json=RAW).status_code == 200


def test_key_from_environment(app_client):
    c = app_client(env={"VLLM_API_KEY": "env-key"})
    assert c.post("/v1/chat/completions", json=RAW).status_code == 401
    assert c.post("/v1/chat/completions", json=RAW, headers={"Authorization": "Bearer env-key"}).status_code == 200


def test_sdks_with_and_without_key(keyed):
    import anthropic
    import openai
    ok = keyed.openai(api_key=KEY).chat.completions.create(**CHAT)
    assert ok.usage.completion_tokens == 3
    with pytest.raises(openai.AuthenticationError):
        keyed.openai(api_key="nope").chat.completions.create(**CHAT)
    msg = keyed.anthropic(api_key=KEY).messages.create(model="test-model", max_tokens=3,
                                                       messages=[{"role": "user", "content": "hi"}])
    assert msg.usage.output_tokens >= 1
    with pytest.raises(anthropic.AuthenticationError):
        keyed.anthropic(api_key="nope").messages.create(model="test-model", max_tokens=3,
                                                       messages=[{"role": "user", "content": "hi"}])


def test_a_path_no_route_has_outside_vllms_prefixes_is_the_routers_404(keyed):
    """vLLM guards only /v1, /v2, /inference and /cohere: elsewhere an unknown path is its
    router's 404 with or without a key; under those prefixes the 401 comes first."""
    for method in ("GET", "POST"):
        r = keyed.request(method, "/no-such-route")
        assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    assert keyed.get("/v1/no-such-route").status_code == 401
