"""FastAPI's documentation routes, which every vLLM 0.34 server has unless told otherwise.

vLLM builds its app with ``FastAPI(lifespan=lifespan)`` (``vllm/entrypoints/launchers/app.py``
``build_app``), and FastAPI's ``setup()`` (``fastapi/applications.py``) adds four Starlette
routes, outside the schema and outside ``/v1`` (so ``--api-key`` leaves them open):

* ``GET /openapi.json``: the OpenAPI 3.1 document, ``application/json``:
  ``{"openapi": "3.1.0", "info": {"title": "FastAPI", "version": "0.1.0"}, "paths": {...}}``.
  ``paths`` holds vLLM's routes that this server serves in its configuration, in the order
  vLLM registers them (:data:`VLLM_OPERATIONS`), each method an operation as FastAPI's
  ``fastapi/openapi/utils.py`` writes it: ``summary`` (the endpoint function's name, title-cased),
  ``description`` (its docstring, where vLLM's has one), ``operationId``
  (``fastapi/utils.py`` ``generate_unique_id``: ``{name}{path}`` with non-word characters as
  ``_``, then ``_{method}``), path ``parameters``, and the 200 response (no ``content`` for
  vLLM's ``response_class=Response`` routes, ``/health`` and ``/ping``).  Left out: request
  bodies, query parameters, response models, error responses (400, 404, 422, 500) and
  ``components``, which FastAPI derives from vLLM's pydantic models.  Built on the first
  request from the app's url_map and kept as bytes.
* ``GET /docs``: Swagger UI (``fastapi/openapi/docs.py`` ``get_swagger_ui_html``, from the
  jsDelivr CDN), ``text/html; charset=utf-8``.
* ``GET /docs/oauth2-redirect``: ``get_swagger_ui_oauth2_redirect_html``.
* ``GET /redoc``: ReDoc (``get_redoc_html``).

Starlette's ``Route`` adds HEAD to GET: these answer HEAD (headers, no body).
``--disable-fastapi-docs``: none of them (404 ``{"detail": "Not Found"}``).
``--enable-offline-docs`` (``serve/instrumentator/offline_docs.py``): ``/openapi.json`` stays,
``/docs`` and ``/docs/oauth2-redirect`` become GET-only APIRoutes (HEAD 405) whose page
loads ``/static/swagger-ui-bundle.js`` and ``/static/swagger-ui.css``, and ``/redoc`` is gone.
vLLM serves those two files from its wheel; the simulator has no copy, so ``/static/...`` is a
404 and the offline page stays blank in a browser: the routes and their HTML are vLLM's.
"""
from __future__ import annotations

import json
import re

import orjson
from flask import Blueprint, Response, current_app

# FastAPI() defaults (fastapi/applications.py): title, version, openapi_url, the docs' URLs
TITLE = "FastAPI"
VERSION = "0.1.0"
OPENAPI_URL = "/openapi.json"
DOCS_URL = "/docs"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
REDOC_URL = "/redoc"
HTML_MIME = "text/html"           # Werkzeug adds "; charset=utf-8", as Starlette's HTMLResponse
JSON_MIME = "application/json"

_OPENAPI_KEY = "openapi_json"     # app.extensions: the document's bytes, once built

# vLLM 0.34's routes in the order its build_app registers them (launchers/api_server/routers.py
# register_api_routers), as (path, method, endpoint function, docstring or None, condition).
# An operation is listed when the app has a rule for the path and method and the condition (a
# config attribute; "!attr": its negation) holds: some simulator routes are always there but are vLLM's only under a
# flag (dev mode's answer 404 or a no-op without VLLM_SERVER_DEV_MODE=1).  Routes vLLM has and
# the simulator does not (/v1/realtime, the RL weight routes) never are; nor are
# the simulator's own (/health/, /health/ready, /v1/models/{model}, /v1/audio/speech, /admin/*,
# /query, /fake_metrics) or /metrics (a mount in vLLM, outside the schema).
_DEV = "vllm_dev_mode"
VLLM_OPERATIONS = (
    # serve/instrumentator/basic.py, health.py
    ("/load", "get", "get_server_load_metrics", None, None),
    ("/version", "get", "show_version", None, None),
    ("/kv_event_sources", "get", "kv_event_sources",
     "KV-event publisher config per DP rank; empty on render-only servers.", None),
    ("/health", "get", "health", "Health check.", None),
    # serve/lora/api_router.py (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING; the simulator always)
    ("/v1/load_lora_adapter", "post", "load_lora_adapter",
     "Handle POST /v1/load_lora_adapter: load a LoRA adapter into the\nserving engine.", None),
    ("/v1/unload_lora_adapter", "post", "unload_lora_adapter",
     "Handle POST /v1/unload_lora_adapter: unload a LoRA adapter from\nthe serving engine.", None),
    # serve/profile/api_router.py (--profiler-config with a profiler)
    ("/start_profile", "post", "start_profile", None, "profiler"),
    ("/stop_profile", "post", "stop_profile", None, "profiler"),
    # serve/tokenize/api_router.py
    ("/tokenize", "post", "tokenize", None, None),
    ("/detokenize", "post", "detokenize", None, None),
    ("/tokenizer_info", "get", "get_tokenizer_info", "Get comprehensive tokenizer information.",
     "enable_tokenizer_info_endpoint"),
    # openai/models/api_router.py
    ("/v1/models", "get", "show_available_models", None, None),
    # generate/structured_decisions/api_router.py, openai/decisions/api_router.py (every model)
    ("/v1/systemone", "post", "create_structured_decision", None, None),
    ("/v1/decisions", "post", "create_decision", None, None),
    # serve/sagemaker/api_router.py: @router.post over @router.get, so GET is registered first
    ("/ping", "get", "ping", "Ping check. Endpoint required for SageMaker.", None),
    ("/ping", "post", "ping", "Ping check. Endpoint required for SageMaker.", None),
    ("/invocations", "post", "invocations", "For SageMaker, routes requests based on the request type.", None),
    # VLLM_SERVER_DEV_MODE: serve/dev/cache, server_info, sleep
    ("/reset_prefix_cache", "post", "reset_prefix_cache",
     "Reset the local prefix cache.\n\nOptionally, if the query parameter `reset_external=true`\nalso resets "
     "the external (connector-managed) prefix cache.\n\nReturns `{\"success\": bool}`. The reset fails "
     "(`success=false`) while\nblocks are still held, e.g. by running requests or in-flight async KV\n"
     "offload transfers; callers may retry.\n\nExample:\n   POST /reset_prefix_cache?reset_external=true", _DEV),
    ("/reset_mm_cache", "post", "reset_mm_cache",
     "Reset the multi-modal cache. Note that we currently do not check if the\nmulti-modal cache is "
     "successfully reset in the API server.", _DEV),
    ("/reset_encoder_cache", "post", "reset_encoder_cache",
     "Reset the encoder cache. Note that we currently do not check if the\nencoder cache is successfully "
     "reset in the API server.", _DEV),
    ("/collective_rpc", "post", "collective_rpc", None, _DEV),
    ("/server_info", "get", "show_server_info", None, _DEV),
    ("/sleep", "post", "sleep", None, _DEV),
    ("/release_kv_cache_memory", "post", "release_kv_cache_memory", None, _DEV),
    ("/wake_up", "post", "wake_up", None, _DEV),
    ("/is_sleeping", "get", "is_sleeping", None, _DEV),
    # rl/factories.py (VLLM_SERVER_DEV_MODE, after the dev routers): the routes served (blueprints.rl)
    ("/pause", "post", "pause_generation",
     "Pause generation requests to allow weight updates.\n\nIn ``abort`` and ``wait`` modes new requests are "
     "rejected with HTTP 503\nuntil /resume; ``keep`` continues to accept and queue them.\n\nArgs:\n    "
     "raw_request: The incoming FastAPI request, used to reach the engine\n        client on the app state.\n"
     "    mode: How to handle in-flight requests:\n        - ``\"abort\"``: Abort all in-flight requests "
     "immediately (default).\n        - ``\"wait\"``: Wait for in-flight requests to complete.\n        - "
     "``\"keep\"``: Freeze requests in queue; they resume on /resume.\n    clear_cache: DEPRECATED. Whether to "
     "clear KV/prefix caches after\n        draining. Ignored when mode=\"keep\".", _DEV),
    ("/resume", "post", "resume_generation", "Resume generation after a pause.", _DEV),
    ("/abort_requests", "post", "abort_requests",
     "Abort in-flight requests without pausing the scheduler.\n\nEmpty/missing ``request_ids`` aborts all "
     "in-flight requests.", _DEV),
    ("/is_paused", "get", "is_paused", "Return the current pause status.", _DEV),
    *((f"/{name}", "post", name, None, _DEV) for name in (
        "init_weight_transfer_engine", "shutdown_weight_transfer_engine", "start_weight_update",
        "start_draft_weight_update", "update_weights", "finish_weight_update", "update_weight_version")),
    ("/weight_info", "get", "weight_info", None, _DEV),
    ("/get_world_size", "get", "get_world_size",
     "Get the world size from the parallel config.\n\nArgs:\n    raw_request: The incoming FastAPI request, "
     "used to reach the engine\n        client on the app state.\n    include_dp: If True (default), returns "
     "the world size including\n        data parallelism (TP * PP * DP). If False, returns the world\n        "
     "size without data parallelism (TP * PP).", _DEV),
    # generate/api_router.py: chat, responses, completion, anthropic
    ("/v1/chat/completions", "post", "create_chat_completion", None, None),
    ("/v1/chat/completions/batch", "post", "create_batch_chat_completion", None, None),
    ("/v1/responses", "post", "create_responses", None, None),
    ("/v1/responses/{response_id}", "get", "retrieve_responses", None, None),
    ("/v1/responses/{response_id}/cancel", "post", "cancel_responses", None, None),
    ("/v1/completions", "post", "create_completion", None, None),
    ("/v1/messages", "post", "create_messages", None, None),
    ("/v1/messages/count_tokens", "post", "count_tokens", None, None),
    # cohere/api_router.py (VLLM_ENABLE_COHERE_API=1; its render route: as the others below)
    ("/cohere/v2/chat", "post", "chat_v2", None, None),
    ("/cohere/v2/chat/render", "post", "chat_v2_render",
     "Tokenize a Cohere v2 chat request without running generation.\n\nThe Cohere counterpart to ``POST "
     "/v1/chat/completions/render``.\nThe v2 body goes through the same conversion\n``/cohere/v2/chat`` uses "
     "and is then handed to the shared\n:class:`ServingRender`, so the returned ``GenerateRequest``\ncarries "
     "the prompt tokens and sampling params the chat endpoint\nwould have sent to the engine.", None),
    ("/generative_scoring", "post", "create_generative_scoring", None, None),
    # serve/elastic_ep/api_router.py (every generation model)
    ("/scale_elastic_ep", "post", "scale_elastic_ep", None, None),
    ("/is_scaling_elastic_ep", "post", "is_scaling_elastic_ep", None, None),
    # serve/checkpoint/api_router.py (--enable-sleep-mode)
    ("/checkpoint/prepare", "post", "checkpoint_prepare",
     "Drain with `mode` and release what a checkpoint must not contain.\nReturns once started; poll "
     "/checkpoint/status. Repeating is a no-op.", None),
    ("/checkpoint/restore", "post", "checkpoint_restore",
     "Bring back what preparing released and serve. Orchestrators may\nredeliver, so a restore in progress "
     "or done returns 200.", None),
    ("/checkpoint/status", "get", "checkpoint_status", None, None),
    # scale_out/factories.py: render, derender, token_in_token_out (as with --enable-scale-out:
    # the simulator serves them; vLLM's default answers them 403 outside the schema)
    ("/v1/chat/completions/render", "post", "render_chat_completion", None, None),
    ("/v1/messages/render", "post", "render_messages", None, None),
    ("/v1/completions/render", "post", "render_completion", None, None),
    ("/v1/responses/render", "post", "render_responses", None, None),
    ("/v1/chat/completions/derender", "post", "derender_chat_completion",
     "Derender a generate response into a ChatCompletionResponse.\n\nAccepts both non-streaming "
     "(``stream=false``, default) and streaming\n(``stream=true``) request bodies on the same path; FastAPI "
     "validates and\nroutes on the ``stream`` discriminator.\n\nNon-streaming: body is ``DerenderChatRequest`` "
     "(``generate_response`` with\nthe complete token list). Returns a ``ChatCompletionResponse``.\n\n"
     "Streaming: body is ``DerenderChatStreamRequest`` (one ``generate_chunk``\ndelta + optional "
     "``stream_state``). Returns a ``DerenderChatStreamResponse``\n(``chunk`` + ``stream_state``). The client "
     "carries ``stream_state`` between\nsuccessive calls, one per SSE chunk from ``/inference/v1/generate``.",
     None),
    ("/v1/completions/derender", "post", "derender_completion",
     "Derender a generate response into a CompletionResponse.\n\nAccepts both non-streaming (``stream=false``, "
     "default) and streaming\n(``stream=true``) request bodies on the same path.\n\nNon-streaming: body is "
     "``DerenderCompletionRequest``. Returns a\n``CompletionResponse``.\n\nStreaming: body is "
     "``DerenderCompletionStreamRequest`` (one\n``generate_chunk`` + optional ``stream_state``). Returns a\n"
     "``DerenderCompletionStreamResponse`` (``chunk`` + ``stream_state``).", None),
    ("/inference/v1/generate", "post", "generate", None, None),
    ("/inference/v1/abort_requests", "post", "abort_requests",
     "Abort one or more requests. To be used in a\nDisaggregated Everything setup.", None),
    ("/abort_requests", "post", "abort_requests",      # --tokens-only, unless the RL one took the path
     "Abort one or more requests. To be used in a\nDisaggregated Everything setup.", "!" + _DEV),
    # speech_to_text/factories.py
    ("/v1/audio/transcriptions", "post", "create_transcriptions", None, None),
    ("/v1/audio/translations", "post", "create_translations", None, None),
    # pooling/factories.py: pooling, classify, embed, scoring
    ("/pooling", "post", "create_pooling", None, None),
    ("/classify", "post", "create_classify", None, None),
    ("/v1/embeddings", "post", "create_embedding", None, None),
    ("/v2/embed", "post", "create_cohere_embedding", None, None),
    ("/score", "post", "create_score", None, None),
    ("/v1/score", "post", "create_score_v1", None, None),
    ("/rerank", "post", "do_rerank", None, None),
    ("/v1/rerank", "post", "do_rerank_v1", None, None),
    ("/v2/rerank", "post", "do_rerank_v2", None, None),
    # serve/fault_tolerance/api_router.py (--enable-fault-tolerance)
    ("/v1/fault_tolerance/apply", "post", "process_fault_tolerance_instruction", None, None),
    ("/v1/fault_tolerance/status", "get", "get_status", None, None),
)
# vLLM's response_class=Response routes: FastAPI writes their 200 without "content"
_NO_CONTENT = frozenset({"/health", "/ping"})


def openapi_path(rule: str) -> str:
    """A Werkzeug rule as an OpenAPI path: ``/v1/responses/<response_id>`` ->
    ``/v1/responses/{response_id}`` (a converter, ``<path:model>``, dropped)."""
    return re.sub(r"<(?:[^<>:]+:)?([^<>]+)>", r"{\1}", rule)


def operation(path: str, method: str, name: str, description: str | None) -> dict:
    """One operation as FastAPI's ``get_openapi_path`` writes it for an ``APIRoute`` named
    ``name`` (no tags, request body or error responses: see the module docstring)."""
    op = {"summary": name.replace("_", " ").title()}
    if description:
        op["description"] = description
    op["operationId"] = re.sub(r"\W", "_", f"{name}{path}") + f"_{method}"
    params = re.findall(r"{([^{}]+)}", path)
    if params:
        op["parameters"] = [{"name": p, "in": "path", "required": True,
                             "schema": {"type": "string", "title": p.replace("_", " ").title()}}
                            for p in params]
    ok = {"description": "Successful Response"}
    if path not in _NO_CONTENT:
        ok["content"] = {JSON_MIME: {"schema": {}}}
    op["responses"] = {"200": ok}
    return op


def openapi_schema(url_map, config) -> dict:
    """The OpenAPI document of the vLLM routes ``url_map`` serves under ``config``."""
    served = {(openapi_path(r.rule), m.lower()) for r in url_map.iter_rules() for m in r.methods}
    paths: dict = {}
    for path, method, name, description, condition in VLLM_OPERATIONS:
        if (path, method) in served and (condition is None or (not getattr(config, condition[1:])
                                                                if condition[0] == "!" else getattr(config, condition))):
            if path == "/v1/embeddings" and config.mm_encoder_only:
                continue                     # the route answers 404 there (blueprints/embeddings.py)
            paths.setdefault(path, {})[method] = operation(path, method, name, description)
    return {"openapi": "3.1.0", "info": {"title": TITLE, "version": VERSION}, "paths": paths}


def openapi():
    app = current_app
    body = app.extensions.get(_OPENAPI_KEY)
    if body is None:                  # built once, after every blueprint is registered
        body = app.extensions[_OPENAPI_KEY] = orjson.dumps(
            openapi_schema(app.url_map, app.extensions["simulator"].config))
    return Response(body, mimetype=JSON_MIME)


# ---- the HTML pages (fastapi/openapi/docs.py; vLLM 0.34 sends FastAPI's bytes) ----------------
SWAGGER_JS_URL = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"
SWAGGER_CSS_URL = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css"
OFFLINE_JS_URL = "/static/swagger-ui-bundle.js"       # serve/instrumentator/offline_docs.py
OFFLINE_CSS_URL = "/static/swagger-ui.css"
REDOC_JS_URL = "https://cdn.jsdelivr.net/npm/redoc@2/bundles/redoc.standalone.js"
FAVICON_URL = "https://fastapi.tiangolo.com/img/favicon.png"
# fastapi.openapi.docs.swagger_ui_default_parameters
SWAGGER_UI_PARAMETERS = {"dom_id": "#swagger-ui", "layout": "BaseLayout", "deepLinking": True,
                         "showExtensions": True, "showCommonExtensions": True}


def _safe_json(value) -> str:
    """FastAPI's ``_html_safe_json``: JSON that cannot close the ``<script>`` it sits in."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def swagger_ui_html(js_url: str = SWAGGER_JS_URL, css_url: str = SWAGGER_CSS_URL) -> str:
    """``get_swagger_ui_html(openapi_url="/openapi.json", title="FastAPI - Swagger UI",
    oauth2_redirect_url="/docs/oauth2-redirect", ...)``: the page, FastAPI's indentation kept."""
    html = f"""
    <!DOCTYPE html>
    <html>
    <head>
    <meta name="viewport" content="width=device-width, initial-scale=1.0">
    <link type="text/css" rel="stylesheet" href="{css_url}">
    <link rel="shortcut icon" href="{FAVICON_URL}">
    <title>{TITLE} - Swagger UI</title>
    </head>
    <body>
    <div id="swagger-ui">
    </div>
    <script src="{js_url}"></script>
    <!-- `SwaggerUIBundle` is now available on the page -->
    <script>
    const ui = SwaggerUIBundle({{
        url: '{OPENAPI_URL}',
    """
    html += "".join(f"{_safe_json(k)}: {_safe_json(v)},\n" for k, v in SWAGGER_UI_PARAMETERS.items())
    html += f"oauth2RedirectUrl: window.location.origin + '{OAUTH2_REDIRECT_URL}',"
    html += """
    presets: [
        SwaggerUIBundle.presets.apis,
        SwaggerUIBundle.SwaggerUIStandalonePreset
        ],
    })
    </script>
    </body>
    </html>
    """
    return html


def redoc_html() -> str:
    """``get_redoc_html(openapi_url="/openapi.json", title="FastAPI - ReDoc")``, Google Fonts on."""
    return f"""
    <!DOCTYPE html>
    <html>
    <head>
    <title>{TITLE} - ReDoc</title>
    <!-- needed for adaptive design -->
    <meta charset="utf-8"/>
    <meta name="viewport" content="width=device-width, initial-scale=1">
    """ + """
    <link href="https://fonts.googleapis.com/css?family=Montserrat:300,400,700|Roboto:300,400,700" rel="stylesheet">
    """ + f"""
    <link rel="shortcut icon" href="{FAVICON_URL}">
    <!--
    ReDoc doesn't change outer page styles
    -->
    <style>
      body {{
        margin: 0;
        padding: 0;
      }}
    </style>
    </head>
    <body>
    <noscript>
        ReDoc requires Javascript to function. Please enable it to browse the documentation.
    </noscript>
    <redoc spec-url="{OPENAPI_URL}"></redoc>
    <script src="{REDOC_JS_URL}"> </script>
    </body>
    </html>
    """


def _html(text: str):
    body = text.encode()              # a view per page: built once, when the routes are registered
    return lambda: Response(body, mimetype=HTML_MIME)


def register(app, config) -> None:
    """Register the documentation routes ``config`` asks for (vLLM's ``build_app``): all four by
    default, none with ``--disable-fastapi-docs``, the offline set with ``--enable-offline-docs``."""
    if config.disable_fastapi_docs:
        return
    bp = Blueprint("docs", __name__)          # one per app: the routes depend on its flags
    bp.add_url_rule(OPENAPI_URL, "openapi", openapi)
    offline = config.enable_offline_docs
    if offline:
        bp.add_url_rule(DOCS_URL, "swagger_ui_html", _html(swagger_ui_html(OFFLINE_JS_URL, OFFLINE_CSS_URL)))
    else:
        bp.add_url_rule(DOCS_URL, "swagger_ui_html", _html(swagger_ui_html()))
        bp.add_url_rule(REDOC_URL, "redoc_html", _html(redoc_html()))
    bp.add_url_rule(OAUTH2_REDIRECT_URL, "swagger_ui_redirect", _html(OAUTH2_REDIRECT_HTML))
    app.register_blueprint(bp)
    if offline:                               # offline_docs.py's @app.get: APIRoutes, no HEAD
        for rule in app.url_map.iter_rules():
            if rule.endpoint in ("docs.swagger_ui_html", "docs.swagger_ui_redirect"):
                rule.methods.discard("HEAD")


# get_swagger_ui_oauth2_redirect_html's page: swagger-ui v4.14.0's dist/oauth2-redirect.html
# (Apache-2.0) as FastAPI embeds it, indentation included
OAUTH2_REDIRECT_HTML = """
    <!doctype html>
    <html lang="en-US">
    <head>
        <title>Swagger UI: OAuth2 Redirect</title>
    </head>
    <body>
    <script>
        'use strict';
        function run () {
            var oauth2 = window.opener.swaggerUIRedirectOauth2;
            var sentState = oauth2.state;
            var redirectUrl = oauth2.redirectUrl;
            var isValid, qp, arr;

            if (/code|token|error/.test(window.location.hash)) {
                qp = window.location.hash.substring(1).replace('?', '&');
            } else {
                qp = location.search.substring(1);
            }

            arr = qp.split("&");
            arr.forEach(function (v,i,_arr) { _arr[i] = '"' + v.replace('=', '":"') + '"';});
            qp = qp ? JSON.parse('{' + arr.join() + '}',
                    function (key, value) {
                        return key === "" ? value : decodeURIComponent(value);
                    }
            ) : {};

            isValid = qp.state === sentState;

            if ((
              oauth2.auth.schema.get("flow") === "accessCode" ||
              oauth2.auth.schema.get("flow") === "authorizationCode" ||
              oauth2.auth.schema.get("flow") === "authorization_code"
            ) && !oauth2.auth.code) {
                if (!isValid) {
                    oauth2.errCb({
                        authId: oauth2.auth.name,
                        source: "auth",
                        level: "warning",
                        message: "Authorization may be unsafe, passed state was changed in server. The passed state wasn't returned from auth server."
                    });
                }

                if (qp.code) {
                    delete oauth2.state;
                    oauth2.auth.code = qp.code;
                    oauth2.callback({auth: oauth2.auth, redirectUrl: redirectUrl});
                } else {
                    let oauthErrorMsg;
                    if (qp.error) {
                        oauthErrorMsg = "["+qp.error+"]: " +
                            (qp.error_description ? qp.error_description+ ". " : "no accessCode received from the server. ") +
                            (qp.error_uri ? "More info: "+qp.error_uri : "");
                    }

                    oauth2.errCb({
                        authId: oauth2.auth.name,
                        source: "auth",
                        level: "error",
                        message: oauthErrorMsg || "[Authorization failed]: no accessCode received from the server."
                    });
                }
            } else {
                oauth2.callback({auth: oauth2.auth, token: qp, isValid: isValid, redirectUrl: redirectUrl});
            }
            window.close();
        }

        if (document.readyState !== 'loading') {
            run();
        } else {
            document.addEventListener('DOMContentLoaded', function () {
                run();
            });
        }
    </script>
    </body>
    </html>
        """
