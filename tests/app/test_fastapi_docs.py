"""FastAPI's documentation routes as vLLM 0.34's app has them (``launchers/app.py`` build_app,
``serve/instrumentator/offline_docs.py``; :mod:`blueprints.docs`): ``/openapi.json``,
``/docs``, ``/docs/oauth2-redirect``, ``/redoc``, ``--disable-fastapi-docs`` and
``--enable-offline-docs``.

The HTML digests and lengths are those of FastAPI 0.165.0's ``get_swagger_ui_html`` /
``get_redoc_html`` / ``get_swagger_ui_oauth2_redirect_html`` responses on an app built as vLLM
builds it (``FastAPI()``, and ``FastAPI(docs_url=None, redoc_url=None)`` plus offline_docs.py's
routes), taken with Starlette's TestClient."""
from __future__ import annotations

import hashlib

import pytest

HTML = "text/html; charset=utf-8"
SWAGGER = ("4b371b4917c2044c46a0fb0df5a36061a21d9c3740d59607a3a2c356a4508230", 1006)
SWAGGER_OFFLINE = ("0c61b6a9f48b33958da44ed717f724221f14b00debe41ca45c342f49ab2d5dcd", 928)
REDOC = ("2cce82dcede2370bbdb7bae5325f74eb17ea89905027fe4010b2c48022be489d", 888)
OAUTH2_REDIRECT = ("f45d60bb9f054b1712b3f9e60547eb9e1d523afd6472a4137b89eb503b37f058", 3012)
DOC_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
NOT_FOUND = {"detail": "Not Found"}
OK_JSON = {"200": {"description": "Successful Response", "content": {"application/json": {"schema": {}}}}}
EMBED = ("--runner", "pooling", "--convert", "embed")

# a generation model's paths with the default flags, in vLLM's registration order
GENERATION_PATHS = [
    ("/load", ["get"]), ("/version", ["get"]), ("/kv_event_sources", ["get"]), ("/health", ["get"]),
    ("/v1/load_lora_adapter", ["post"]), ("/v1/unload_lora_adapter", ["post"]), ("/tokenize", ["post"]),
    ("/detokenize", ["post"]), ("/v1/models", ["get"]), ("/v1/systemone", ["post"]), ("/v1/decisions", ["post"]),
    ("/ping", ["get", "post"]), ("/invocations", ["post"]),
    ("/v1/chat/completions", ["post"]), ("/v1/chat/completions/batch", ["post"]), ("/v1/responses", ["post"]), ("/v1/responses/{response_id}", ["get"]),
    ("/v1/responses/{response_id}/cancel", ["post"]), ("/v1/completions", ["post"]), ("/v1/messages", ["post"]),
    ("/v1/messages/count_tokens", ["post"]), ("/generative_scoring", ["post"]), ("/scale_elastic_ep", ["post"]),
    ("/is_scaling_elastic_ep", ["post"]), ("/v1/chat/completions/render", ["post"]),
    ("/v1/messages/render", ["post"]), ("/v1/completions/render", ["post"]), ("/v1/responses/render", ["post"]),
    ("/v1/chat/completions/derender", ["post"]), ("/v1/completions/derender", ["post"]),
    ("/inference/v1/generate", ["post"]),
    ("/inference/v1/abort_requests", ["post"]), ("/v1/audio/transcriptions", ["post"]),
    ("/v1/audio/translations", ["post"]), ("/v1/embeddings", ["post"])]


def _digest(r) -> tuple[str, int]:
    return hashlib.sha256(r.content).hexdigest(), len(r.content)


def _paths(client) -> list:
    return [(p, list(ops)) for p, ops in client.get("/openapi.json").json()["paths"].items()]


# ---- the HTML pages ------------------------------------------------------------------------------

@pytest.mark.parametrize("path, digest", [("/docs", SWAGGER), ("/redoc", REDOC),
                                          ("/docs/oauth2-redirect", OAUTH2_REDIRECT)])
def test_pages_are_fastapis_bytes(api, path, digest):
    r = api.get(path)
    assert r.status_code == 200 and r.headers["content-type"] == HTML
    assert _digest(r) == digest and r.headers["content-length"] == str(digest[1])
    head = api.head(path)               # Starlette's Route adds HEAD to GET
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(digest[1])


def test_swagger_page_points_at_the_cdn_and_the_schema(api):
    page = api.get("/docs").text
    assert "<title>FastAPI - Swagger UI</title>" in page
    assert '<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>' in page
    assert 'href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css"' in page
    assert "url: '/openapi.json'," in page
    assert "oauth2RedirectUrl: window.location.origin + '/docs/oauth2-redirect'," in page
    redoc = api.get("/redoc").text
    assert "<title>FastAPI - ReDoc</title>" in redoc and '<redoc spec-url="/openapi.json"></redoc>' in redoc
    assert '<script src="https://cdn.jsdelivr.net/npm/redoc@2/bundles/redoc.standalone.js"> </script>' in redoc


def test_other_methods_are_routing_errors(api):
    r = api.post("/docs")
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


# ---- /openapi.json -------------------------------------------------------------------------------

def test_openapi_document_of_a_generation_model(api):
    r = api.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert list(doc) == ["openapi", "info", "paths"]
    assert doc["openapi"] == "3.1.0" and doc["info"] == {"title": "FastAPI", "version": "0.1.0"}
    assert _paths(api) == GENERATION_PATHS
    paths = doc["paths"]
    assert paths["/v1/chat/completions"] == {"post": {
        "summary": "Create Chat Completion", "operationId": "create_chat_completion_v1_chat_completions_post",
        "responses": OK_JSON}}
    # response_class=Response: FastAPI writes no content
    assert paths["/health"] == {"get": {"summary": "Health", "description": "Health check.",
                                        "operationId": "health_health_get",
                                        "responses": {"200": {"description": "Successful Response"}}}}
    ping = {"summary": "Ping", "description": "Ping check. Endpoint required for SageMaker.",
            "responses": {"200": {"description": "Successful Response"}}}
    assert paths["/ping"] == {"get": {**ping, "operationId": "ping_ping_get"},
                              "post": {**ping, "operationId": "ping_ping_post"}}
    assert paths["/v1/responses/{response_id}"] == {"get": {
        "summary": "Retrieve Responses", "operationId": "retrieve_responses_v1_responses__response_id__get",
        "parameters": [{"name": "response_id", "in": "path", "required": True,
                        "schema": {"type": "string", "title": "Response Id"}}],
        "responses": OK_JSON}}
    assert paths["/v1/load_lora_adapter"]["post"]["description"] == \
        "Handle POST /v1/load_lora_adapter: load a LoRA adapter into the\nserving engine."
    ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_openapi_leaves_out_the_simulators_own_routes_and_the_docs(api):
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/health/", "/health/ready", "/metrics", "/admin/config", "/query", "/fake_metrics",
                 "/v1/models/{model}", "/v1/audio/speech", *DOC_PATHS):
        assert path not in paths
    # served here only as the reference's no-op or vLLM's dev-mode 404: vLLM lists them in dev mode
    for path in ("/sleep", "/wake_up", "/is_sleeping", "/release_kv_cache_memory", "/reset_prefix_cache",
                 "/server_info", "/tokenizer_info"):
        assert path not in paths


def test_openapi_of_a_pooling_model(app_client):
    # no generation routes, no render routes (vLLM registers them for generate and render servers only)
    assert _paths(app_client(*EMBED)) == [
        *GENERATION_PATHS[:13],
        ("/pooling", ["post"]), ("/v1/embeddings", ["post"]), ("/v2/embed", ["post"]), ("/score", ["post"]),
        ("/v1/score", ["post"]), ("/rerank", ["post"]), ("/v1/rerank", ["post"]), ("/v2/rerank", ["post"])]
    ops = app_client(*EMBED).get("/openapi.json").json()["paths"]
    assert ops["/v1/rerank"]["post"]["summary"] == "Do Rerank V1"
    assert ops["/v1/rerank"]["post"]["operationId"] == "do_rerank_v1_v1_rerank_post"


def test_openapi_follows_the_flags(app_client):
    c = app_client("--enable-tokenizer-info-endpoint", "--enable-sleep-mode", "--enable-fault-tolerance",
                   "--tokens-only", env={"VLLM_SERVER_DEV_MODE": "1"})
    paths = [p for p, _ in _paths(c)]
    assert paths[:13] == ["/load", "/version", "/kv_event_sources", "/health", "/v1/load_lora_adapter",
                          "/v1/unload_lora_adapter", "/tokenize", "/detokenize", "/tokenizer_info", "/v1/models",
                          "/v1/systemone", "/v1/decisions", "/ping"]
    # vLLM's register_vllm_dev_api_routers (cache, rpc, server_info, sleep), then the RL router
    assert paths[14:36] == ["/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache", "/collective_rpc",
                            "/server_info", "/sleep", "/release_kv_cache_memory", "/wake_up", "/is_sleeping",
                            "/pause", "/resume", "/abort_requests", "/is_paused", "/init_weight_transfer_engine",
                            "/shutdown_weight_transfer_engine", "/start_weight_update", "/start_draft_weight_update",
                            "/update_weights", "/finish_weight_update", "/update_weight_version", "/weight_info",
                            "/get_world_size"]
    i = paths.index("/checkpoint/prepare")
    assert paths[i - 4:i + 3] == ["/v1/messages/count_tokens", "/generative_scoring", "/scale_elastic_ep",
                                  "/is_scaling_elastic_ep", "/checkpoint/prepare", "/checkpoint/restore",
                                  "/checkpoint/status"]
    # --tokens-only's legacy /abort_requests is not registered: the RL router's took the path
    i = paths.index("/inference/v1/abort_requests")
    assert paths[i + 1] == "/v1/audio/transcriptions" and paths.count("/abort_requests") == 1
    assert paths[-2:] == ["/v1/fault_tolerance/apply", "/v1/fault_tolerance/status"]
    doc = c.get("/openapi.json").json()["paths"]
    assert doc["/abort_requests"]["post"]["operationId"] == "abort_requests_abort_requests_post"
    assert doc["/abort_requests"]["post"]["description"].startswith("Abort in-flight requests without pausing")
    paths = [p for p, _ in _paths(app_client("--tokens-only"))]
    i = paths.index("/inference/v1/abort_requests")
    assert paths[i:i + 2] == ["/inference/v1/abort_requests", "/abort_requests"]
    assert "/pause" not in paths and "/reset_mm_cache" not in paths
    assert doc["/v1/fault_tolerance/apply"]["post"]["summary"] == "Process Fault Tolerance Instruction"
    assert doc["/server_info"]["get"]["operationId"] == "show_server_info_server_info_get"


def test_openapi_is_built_once(app_client):
    c = app_client("--enable-fault-tolerance")
    first = c.get("/openapi.json").content
    cached = c.app.extensions["openapi_json"]
    assert first == cached and c.get("/openapi.json").content == first
    assert c.app.extensions["openapi_json"] is cached


# ---- --disable-fastapi-docs, --enable-offline-docs, --api-key ---------------------------------------

def test_disable_fastapi_docs_removes_all_four(app_client):
    c = app_client("--disable-fastapi-docs")
    for path in DOC_PATHS:
        r = c.get(path)
        assert r.status_code == 404 and r.json() == NOT_FOUND
        assert c.head(path).status_code == 404
    assert c.get("/health").status_code == 200


def test_offline_docs(app_client):
    c = app_client("--enable-offline-docs")
    r = c.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"] == HTML and _digest(r) == SWAGGER_OFFLINE
    assert '<script src="/static/swagger-ui-bundle.js"></script>' in r.text
    assert '<link type="text/css" rel="stylesheet" href="/static/swagger-ui.css">' in r.text
    assert _digest(c.get("/docs/oauth2-redirect")) == OAUTH2_REDIRECT
    for path in ("/docs", "/docs/oauth2-redirect"):      # offline_docs.py's @app.get: an APIRoute, no HEAD
        head = c.head(path)
        assert head.status_code == 405 and head.headers["allow"] == "GET"
    assert c.get("/redoc").json() == NOT_FOUND and c.get("/redoc").status_code == 404
    assert c.get("/static/swagger-ui-bundle.js").status_code == 404     # vLLM's vendored file: not here
    assert c.get("/openapi.json").json()["paths"] == app_client().get("/openapi.json").json()["paths"]
    assert c.head("/openapi.json").status_code == 200


def test_disable_wins_over_offline(app_client):
    c = app_client("--disable-fastapi-docs", "--enable-offline-docs")
    assert [c.get(p).status_code for p in DOC_PATHS] == [404, 404, 404, 404]


def test_docs_need_no_api_key(app_client):
    c = app_client("--api-key", "sk-docs")          # vLLM's middleware guards only /v1
    assert [c.get(p).status_code for p in DOC_PATHS] == [200, 200, 200, 200]
    assert c.get("/v1/models").status_code == 401
