"""``POST /v1/messages/render`` answers its errors in vLLM's envelope, as vLLM 0.34's render router
does (``entrypoints/scale_out/render/api_router.py`` ``render_messages``: the request's
``RequestValidationError`` goes to the app's ``validation_exception_handler``, the handler's
``ErrorResponse`` out through ``create_json_response``, a routing error to FastAPI's
``{"detail"}``, a missing key to the auth middleware's ``{"error": "Unauthorized"}``); only the
Messages routes (``entrypoints/anthropic/api_router.py``'s ``translate_error_response``) use
Anthropic's.  The simulator answered the render's errors in Anthropic's envelope."""
from __future__ import annotations

MSGS = [{"role": "user", "content": "Hi"}]
BODY = {"model": "test-model", "max_tokens": 16, "messages": MSGS}
EFFORT = ("1 validation error:\n  {'type': 'literal_error', 'loc': 'body.output_config.effort', 'msg': \"Input "
          "should be 'low', 'medium', 'high', 'xhigh' or 'max'\", 'input': 'none', 'ctx': {'expected': \"'low', "
          "'medium', 'high', 'xhigh' or 'max'\"}}")
BLOCK = ("messages[0].content[0].type: Unsupported content block type 'bogus'; expected one of: text, image, "
         "tool_use, tool_result, thinking, redacted_thinking, document, search_result, server_tool_use, "
         "web_search_tool_result, web_fetch_tool_result, code_execution_tool_result, container_upload, "
         "tool_reference, tool_addition, tool_removal.")


def test_validation_errors_take_vllms_envelope(api):
    r = api.post("/v1/messages/render", json={**BODY, "output_config": {"effort": "none"}})
    assert (r.status_code, r.json()) == (400, {"error": {"message": EFFORT, "type": "Bad Request",
                                                         "param": "body.output_config.effort", "code": 400}})
    # the Messages route itself keeps Anthropic's envelope for the same body
    r = api.post("/v1/messages", json={**BODY, "output_config": {"effort": "none"}})
    assert (r.status_code, r.json()) == (400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                          "message": EFFORT}})


def test_handler_errors_take_vllms_envelope(api):
    body = {**BODY, "messages": [{"role": "user", "content": [{"type": "bogus"}]}]}
    r = api.post("/v1/messages/render", json=body)
    assert (r.status_code, r.json()) == (400, {"error": {"message": BLOCK, "type": "BadRequestError",
                                                         "param": "messages[0].content[0].type", "code": 400}})
    r = api.post("/v1/messages/count_tokens", json={"model": "test-model", "messages": body["messages"]})
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": BLOCK}}
    r = api.post("/v1/messages/render", json={**BODY, "top_k": -5})
    assert r.json() == {"error": {"message": "top_k must be 0 (disable), or at least 1, got -5.",
                                  "type": "BadRequestError", "param": None, "code": 400}}


def test_routing_media_type_and_auth_errors_are_vllms(app_client, api):
    r = api.get("/v1/messages/render")
    assert (r.status_code, r.json(), r.headers["allow"]) == (405, {"detail": "Method Not Allowed"}, "POST")
    r = api.post("/v1/messages/render", content=b"{}", headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()) == (400, {"error": {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": None, "code": 400}})
    keyed = app_client("--api-key", "k1")
    r = keyed.post("/v1/messages/render", json=BODY)
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
    r = keyed.post("/v1/messages/count_tokens", json={"model": "test-model", "messages": MSGS})
    assert r.status_code == 401 and r.json()["type"] == "error"
