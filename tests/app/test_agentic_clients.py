"""Claude Code and Codex CLI behind the simulator (issue 21).

The fixtures under ``tests/fixtures/`` are requests recorded with ``--log-http`` from
Claude Code 2.1.197 (``claude -p "say hi" --model test-model``) and Codex CLI 0.171.0 (``codex
exec "say hi"`` with a ``wire_api = "responses"`` provider), trimmed of host-specific values.
The server tests replay them as the CLIs send them (streamed) against ``--max-model-len
200000`` and check that every answer is a 200 whose events the SDKs' own models accept; the
in-process tests drive each request shape the CLIs use, one at a time.
"""
from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from support import named_events
from support.agentic import (LONG, CLAUDE_HEADERS, RESPONSES_EVENT, claude_first, codex_first, codex_tool_turn, echoed_tool,
                             function_schemas)

# Claude Code's headers (the key is a placeholder; the simulator has no --api-key here).












# ---- checks of a whole answer -------------------------------------------------------------------







# ---- the recorded requests, replayed against a real server --------------------------------------









def test_default_context_refuses_claude_code(api):
    # its prompt + max_tokens 32000 need more than test-model's default 1024 (issue 21): the
    # README tells Claude Code users to start the simulator with --max-model-len 200000
    r = api.post("/v1/messages", json=claude_first(), headers=CLAUDE_HEADERS)
    anthropic_error(r, "This model's maximum context length is 1024 tokens.")


# ---- Anthropic shapes, one at a time (in-process) -----------------------------------------------

def msgs(api, body: dict, path: str = "/v1/messages"):
    full = {"model": "test-model", "max_tokens": 5, **body}
    if path.endswith("count_tokens"):
        full.pop("max_tokens")
    return api.post(path, json=full, headers={"anthropic-version": "2023-06-01"})


def count(api, **body) -> int:
    r = msgs(api, body, "/v1/messages/count_tokens")
    assert r.status_code == 200, r.text
    n = r.json()["input_tokens"]
    # vLLM's count_tokens answer carries its context-management report
    assert r.json() == {"input_tokens": n, "context_management": {"original_input_tokens": n}}
    return n


def anthropic_error(r, field: str):
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"], err


U = [{"role": "user", "content": "hi"}]


def test_inline_system_message_joins_the_system_prompt(api):
    # vLLM's _convert_system_message: top-level system, then inline system texts, joined
    top = count(api, system="Be brief.Use tools.", messages=U)
    assert count(api, system="Be brief.", messages=U + [{"role": "system", "content": "Use tools."}]) == top
    assert count(api, messages=[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}] + U +
                 [{"role": "system", "content": "Use tools."}]) == top
    assert count(api, system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
                 messages=U) == top
    r = msgs(api, {"messages": U + [{"role": "system", "content": "Use tools."}]})
    assert r.status_code == 200 and r.json()["usage"]["input_tokens"] == count(api, system="Use tools.", messages=U)


def test_billing_header_block_is_not_prompt(api):
    billing = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;"}
    assert count(api, system=[billing, {"type": "text", "text": "Be brief."}], messages=U) == \
        count(api, system="Be brief.", messages=U)


@pytest.mark.parametrize("role", ["ctx", "msg"])
def test_claude_code_roles_read_as_user(api, role):
    assert count(api, messages=[{"role": role, "content": "hi"}]) == count(api, messages=U)


@pytest.mark.parametrize("thinking", [{"type": "adaptive"}, {"type": "enabled", "budget_tokens": 1024},
                                      {"type": "disabled"}])
def test_thinking_accepted(api, thinking):
    r = msgs(api, {"messages": U, "thinking": thinking, "max_tokens": 1100})
    assert r.status_code == 200, r.text
    assert r.json()["type"] == "message"


@pytest.mark.parametrize("thinking,field", [
    ({"type": "sometimes"}, "thinking.type"), ({}, "thinking.type"),
    ({"type": "enabled", "budget_tokens": "1024"}, "thinking.budget_tokens"),
    ({"type": "enabled", "budget_tokens": 0}, "thinking.budget_tokens"), ("on", "thinking"),
    # vLLM 0.34 and Anthropic: an enabled budget of at least 1,024 tokens, given
    ({"type": "enabled", "budget_tokens": 1023}, "thinking.budget_tokens"),
    ({"type": "enabled"}, "thinking.budget_tokens"),
])
def test_thinking_validated(api, thinking, field):
    anthropic_error(msgs(api, {"messages": U, "thinking": thinking}), field)


def test_thinking_budget_below_max_tokens(api):
    """vLLM 0.34's validate_thinking_budget (anthropic/protocol.py l. 387-398): an enabled budget
    at or past max_tokens is refused, except on a P/D prefill leg (do_remote_decode)."""
    thinking = {"type": "enabled", "budget_tokens": 1024}
    r = msgs(api, {"messages": U, "thinking": thinking, "max_tokens": 1024})
    anthropic_error(r, "thinking.budget_tokens must be less than max_tokens")
    assert msgs(api, {"messages": U, "thinking": thinking, "max_tokens": 1025}).status_code == 200
    r = msgs(api, {"messages": U, "thinking": thinking, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
    assert r.status_code == 200, r.text


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize("config", [{"effort": "high"}, {"effort": "max"},
                                    {"format": {"type": "json_schema", "schema": SCHEMA}},
                                    {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}}, {}])
def test_output_config_accepted(api, config):
    r = msgs(api, {"messages": U, "output_config": config})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("config,field", [
    ({"effort": "ultra"}, "output_config.effort"),
    ({"format": {"type": "xml", "schema": SCHEMA}}, "output_config.format.type"),
    ({"format": {"type": "json_schema", "schema": "object"}}, "output_config.format.schema"),
    ("high", "output_config"),
])
def test_output_config_validated(api, config, field):
    anthropic_error(msgs(api, {"messages": U, "output_config": config}), field)


def test_context_management_accepted(api):
    cm = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"},
                    {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30000}}]}
    assert msgs(api, {"messages": U, "context_management": cm}).status_code == 200
    assert count(api, messages=U, context_management=cm) == count(api, messages=U)


@pytest.mark.parametrize("cm,field", [({"edits": "all"}, "context_management.edits"),
                                      ({"edits": [{"keep": "all"}]}, "context_management.edits[0].type"),
                                      ([], "context_management")])
def test_context_management_validated(api, cm, field):
    anthropic_error(msgs(api, {"messages": U, "context_management": cm}), field)


EPHEMERAL = {"type": "ephemeral"}
TOOL = {"name": "Read", "description": "Read a file", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}


def test_cache_control_everywhere_anthropic_puts_it(api):
    body = {"system": [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}],
            "tools": [{**TOOL, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "tool_choice": {"type": "none"},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "read it", "cache_control": EPHEMERAL}]},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                                            "input": {"file_path": "a"}, "cache_control": EPHEMERAL}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x",
                                                       "cache_control": EPHEMERAL}]}]}
    plain = json.loads(json.dumps(body).replace(', "cache_control": {"type": "ephemeral"}', "")
                       .replace(', "cache_control": {"type": "ephemeral", "ttl": "1h"}', ""))
    assert "cache_control" not in json.dumps(plain)
    r = msgs(api, body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["input_tokens"] == msgs(api, plain).json()["usage"]["input_tokens"]


def test_tool_reference_and_defer_loading(api):
    deferred = {**TOOL, "name": "WebFetch", "defer_loading": True, "strict": True}
    body = {"tools": [TOOL, deferred], "tool_choice": {"type": "none"}, "messages": [
        {"role": "user", "content": "find a tool"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                           "input": {"query": "fetch"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]}]}]}
    r = msgs(api, body)
    assert r.status_code == 200, r.text
    assert r.json()["stop_reason"] in ("end_turn", "max_tokens")


@pytest.mark.parametrize("body,field", [
    ({"tools": [{**TOOL, "defer_loading": "maybe"}]}, "body.tools.0.defer_loading"),
    ({"tools": [{**TOOL, "strict": 2}]}, "body.tools.0.strict"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                 "content": [{"type": "tool_reference"}]}]}]},
     "messages[0].content[0].content[0].tool_name"),
])
def test_tool_fields_validated(api, body, field):
    anthropic_error(msgs(api, {"messages": U, **body}), field)


def test_claude_code_body_in_process(app_client):
    api = app_client(*LONG)
    body = claude_first()
    r = api.post("/v1/messages/count_tokens?beta=true", json={k: body[k] for k in ("model", "messages", "system",
                                                                                   "tools", "thinking")})
    assert r.status_code == 200, r.text
    n = r.json()["input_tokens"]
    r = api.post("/v1/messages?beta=true", json={**body, "stream": False}, headers=CLAUDE_HEADERS)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) == n


# ---- Responses shapes, one at a time (in-process) -----------------------------------------------

def resp(api, body: dict):
    return api.post("/v1/responses", json={"model": "test-model", "max_output_tokens": 8, **body})


def openai_error(r, contains: str):
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert contains in err["message"] and err["type"] == "BadRequestError", err


FN = {"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
    {"type": "function", "name": "close_agent", "description": "Close an agent", "strict": False,
     "parameters": {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"],
                    "additionalProperties": False}},
    {"type": "custom", "name": "notes", "description": "Free-form notes"}]}
# One valid instance of each hosted tool type vLLM's request model (the SDK's Tool union) knows.
HOSTED = [
    {"type": "web_search", "external_web_access": False}, {"type": "web_search_2025_08_26"},
    {"type": "web_search_preview"}, {"type": "web_search_preview_2025_03_11"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]}, {"type": "computer"},
    {"type": "computer_use_preview", "display_height": 768, "display_width": 1024, "environment": "linux"},
    {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid/mcp"},
    {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"},
    {"type": "local_shell"}, {"type": "shell"}, {"type": "apply_patch"}, {"type": "tool_search"},
    {"type": "programmatic_tool_calling"},
    {"type": "custom", "name": "apply_patch", "description": "Patch files", "format": {"type": "text"}},
]   # a custom tool with a grammar format is vLLM 0.34's 400 (check_custom_tool_format)


@pytest.mark.parametrize("tool", HOSTED, ids=[t["type"] + ("_" + t["name"] if "name" in t else "") for t in HOSTED])
def test_tool_types_accepted_not_called(api, tool):
    r = resp(api, {"input": "hi", "tools": [tool]})
    assert r.status_code == 200, r.text
    out = r.json()
    # nothing the simulator can describe: a text answer, and the tool echoed (as the SDK's model
    # dumps it where the simulator lays the type out, else as sent)
    assert [i["type"] for i in out["output"]] == ["message"]
    assert out["tools"] == [echoed_tool(tool)] and list(out["tools"][0]) == list(echoed_tool(tool))


def test_namespaced_function_called_with_its_namespace(api):
    r = resp(api, {"input": "hi", "tools": [{"type": "web_search"}, NAMESPACE], "max_output_tokens": 200})
    assert r.status_code == 200, r.text
    out = r.json()
    (call,) = out["output"]
    assert call["type"] == "function_call" and call["name"] == "close_agent" and call["namespace"] == "multi_agent_v1"
    jsonschema.validate(json.loads(call["arguments"]), NAMESPACE["tools"][0]["parameters"])
    expected = [echoed_tool({"type": "web_search"}), echoed_tool(NAMESPACE)]
    assert out["tools"] == expected and [list(t) for t in out["tools"]] == [list(t) for t in expected]
    assert [list(t) for t in out["tools"][1]["tools"]] == [list(t) for t in expected[1]["tools"]]


def test_namespaced_call_streamed(api):
    r = resp(api, {"input": "hi", "tools": [NAMESPACE], "stream": True, "max_output_tokens": 200})
    assert r.status_code == 200
    events = named_events(r.text)
    for _, data in events:
        RESPONSES_EVENT.validate_python(data)
    items = [d["item"] for n, d in events if n in ("response.output_item.added", "response.output_item.done")]
    assert [(i["name"], i["namespace"], i["status"]) for i in items] == [
        ("close_agent", "multi_agent_v1", "in_progress"), ("close_agent", "multi_agent_v1", "completed")]
    args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert args == items[1]["arguments"]


def test_named_tool_choice_reaches_a_namespaced_tool(api):
    r = resp(api, {"input": "hi", "tools": [FN, NAMESPACE], "max_output_tokens": 200,
                   "tool_choice": {"type": "function", "name": "close_agent"}})
    assert r.status_code == 200, r.text
    assert [(i["name"], i.get("namespace")) for i in r.json()["output"]] == [("close_agent", "multi_agent_v1")]


def test_hosted_tool_choice_forces_no_call(api):
    r = resp(api, {"input": "hi", "tools": [FN, {"type": "web_search_preview"}],
                   "tool_choice": {"type": "web_search_preview"}})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]


@pytest.mark.parametrize("tool,contains", [
    ({"type": "mcp"}, "tools[0].server_label"),
    ({"type": "file_search"}, "tools[0].vector_store_ids"),
    ({"type": "custom"}, "tool name is required"),
    ({"type": "custom", "name": "x", "format": {"type": "regex"}}, "tools[0].format"),
    ({"type": "namespace", "name": "ns", "description": "d"}, "tools[0].tools"),
    ({"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "mcp"}]}, "tools[0].tools[0].type"),
    ({"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "function"}]}, "tool name is required"),
    ({"type": "namespace", "description": "d", "tools": []}, "tools[0].name"),
    ({"type": "telepathy"}, 'unsupported tool type "telepathy"'),
])
def test_tool_shapes_validated(api, tool, contains):
    openai_error(resp(api, {"input": "hi", "tools": [tool]}), contains)


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}],
             "content": [{"type": "reasoning_text", "text": "The user wants weather."}], "encrypted_content": None}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


def test_reasoning_items_accepted_and_joined_to_their_call(api):
    user = {"role": "user", "content": "weather?"}
    with_reasoning = resp(api, {"input": [user, REASONING, CALL, OUTPUT], "tools": [FN]})
    assert with_reasoning.status_code == 200, with_reasoning.text
    out = with_reasoning.json()
    assert [i["type"] for i in out["output"]] == ["message"]
    # vLLM puts the reasoning and the call in one assistant message: the prompt is the call's
    # (the simulated template renders no reasoning text)
    plain = resp(api, {"input": [user, CALL, OUTPUT], "tools": [FN]}).json()
    assert out["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    summary_only = {**REASONING, "content": None}
    assert resp(api, {"input": [user, summary_only, CALL, OUTPUT], "tools": [FN]}).status_code == 200


@pytest.mark.parametrize("item,contains", [
    ({**REASONING, "encrypted_content": "gAAAA..."}, "Encrypted content is not supported."),
    ({"type": "reasoning", "summary": "short", "content": []}, "input[0].summary"),   # a missing one defaults to []
    ({**REASONING, "summary": [{"type": "summary_text"}]}, "input[0].summary[0]"),
    ({**REASONING, "content": "thinking"}, "input[0].content"),
])
def test_reasoning_items_validated(api, item, contains):
    openai_error(resp(api, {"input": [item]}), contains)


def test_include_encrypted_reasoning_accepted(api):
    r = resp(api, {"input": "hi", "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"},
                   "store": False, "prompt_cache_key": "session-1"})
    assert r.status_code == 200, r.text
    r = resp(api, {"input": "hi", "include": ["reasoning.everything"]})     # vLLM 0.34's Literal: pydantic's
    assert (r.status_code, r.json()["error"]["param"]) == (400, "body.include.0")


def test_namespaced_call_history(api):
    call = {**CALL, "name": "close_agent", "namespace": "multi_agent_v1", "arguments": '{"target":"a"}'}
    out = {"type": "function_call_output", "call_id": "call_1", "output": "closed"}
    r = resp(api, {"input": [{"role": "user", "content": "hi"}, call, out], "tools": [NAMESPACE]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
    openai_error(resp(api, {"input": [{**call, "namespace": 3}]}), "input[0].namespace")


def test_custom_and_hosted_tool_history(api):
    history = [{"role": "user", "content": "patch it"},
               {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
               {"type": "custom_tool_call_output", "call_id": "call_2", "output": "done"},
               {"type": "web_search_call", "id": "ws_1", "status": "completed",
                "action": {"type": "search", "query": "x"}},
               {"type": "local_shell_call", "id": "ls_1", "call_id": "call_3", "status": "completed",
                "action": {"type": "exec", "command": ["ls"], "env": {}}},
               {"type": "local_shell_call_output", "id": "call_3", "output": "a.txt"}]
    r = resp(api, {"input": history, "tools": [FN, {"type": "local_shell"}]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
    openai_error(resp(api, {"input": [{"type": "custom_tool_call", "call_id": "c", "name": "x"}]}), "input[0].input")


def test_codex_body_in_process(app_client):
    api = app_client(*LONG)
    body = copy.deepcopy(codex_first())
    r = api.post("/v1/responses", json={**body, "stream": False})
    assert r.status_code == 200, r.text
    out = r.json()
    (call,) = out["output"]
    params = function_schemas(body["tools"])[(call.get("namespace"), call["name"])]
    jsonschema.validate(json.loads(call["arguments"]), params)
    r = api.post("/v1/responses", json={**codex_tool_turn(), "stream": False})
    assert r.status_code == 200 and r.json()["output"][0]["type"] == "message"


def test_codex_goal_output_without_call_id(api):
    # Codex sends its goal objective as a function_call_output named by name/namespace, with no
    # call_id (optional in the openai SDK's FunctionCallOutput)
    goal = {"type": "function_call_output", "id": "fco_1", "name": "goal_objective", "namespace": "agent",
            "output": "silence"}
    r = resp(api, {"input": [{"role": "user", "content": "hi"}, CALL, OUTPUT, goal], "tools": [FN]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
    openai_error(resp(api, {"input": [{**goal, "namespace": 1}]}), "input[0].namespace")
    openai_error(resp(api, {"input": [{"type": "custom_tool_call_output", "output": "x"}]}), "input[0].call_id")


def test_every_cli_tool_gets_schema_valid_arguments(api):
    # Claude Code's 25 and Codex's 12 function tools (draft 2020-12 schemas, enums, nested items):
    # the arguments a simulated call carries validate against each, so the CLIs run the call
    from generation.adapters.responses import to_chat_tools
    synth = api.sim.tool_synthesizer
    schemas = [(t["name"], t["input_schema"]) for t in claude_first()["tools"]]
    schemas += [(t["function"]["name"], t["function"]["parameters"]) for t in to_chat_tools(codex_first()["tools"])]
    assert len(schemas) == 37
    for name, schema in schemas:
        validator = jsonschema.validators.validator_for(schema)(schema)
        for _ in range(20):
            validator.validate(json.loads(synth.arguments(schema, name)))
