"""Deferred tools on /v1/messages (issue 21, found in a Claude Code 2.1.332 run): a tool sent with
``defer_loading: true`` is not called until a ``tool_reference`` block (a tool search's answer)
or a named ``tool_choice`` loads it, as Anthropic's tool search hides it; Claude Code answered
simulated calls of its ``DeferredToolPlaceholder`` with ``No such tool available``.  The prompt
still counts every tool, as vLLM's chat template gets them all."""
from __future__ import annotations

H = {"anthropic-version": "2023-06-01"}
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
READ = {"name": "Read", "description": "Read a file", "input_schema": SCHEMA}
HIDDEN = {"name": "DeferredToolPlaceholder", "description": "never call this tool",
          "input_schema": {"type": "object", "properties": {}}, "defer_loading": True}
FETCH = {"name": "WebFetch", "description": "Fetch", "input_schema": SCHEMA, "defer_loading": True}
U = [{"role": "user", "content": "go"}]


def called(api, tools, messages=U, tool_choice=None, n=12):
    names = set()
    for _ in range(n):
        body = {"model": "test-model", "max_tokens": 50, "messages": messages, "tools": tools,
                "tool_choice": tool_choice or {"type": "any"}}
        r = api.post("/v1/messages", json=body, headers=H)
        assert r.status_code == 200, r.text
        names |= {b["name"] for b in r.json()["content"] if b["type"] == "tool_use"}
    return names


def test_a_deferred_tool_is_never_called(api):
    assert called(api, [READ, HIDDEN, FETCH]) == {"Read"}


def test_only_deferred_tools_give_text(api):
    body = {"model": "test-model", "max_tokens": 5, "messages": U, "tools": [HIDDEN], "tool_choice": {"type": "any"}}
    r = api.post("/v1/messages", json=body, headers=H)
    assert r.status_code == 200 and [b["type"] for b in r.json()["content"]] == ["text"]


def test_a_tool_reference_loads_it(api):
    history = U + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                           "input": {"query": "fetch"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]}]}]
    assert called(api, [HIDDEN, FETCH], messages=history) == {"WebFetch"}


def test_a_named_tool_choice_reaches_a_deferred_tool(api):
    assert called(api, [READ, FETCH], tool_choice={"type": "tool", "name": "WebFetch"}, n=2) == {"WebFetch"}


def test_deferred_tools_still_count_in_the_prompt(api):
    def tokens(tools):
        r = api.post("/v1/messages/count_tokens", headers=H, json={"model": "test-model", "messages": U,
                                                                    "tools": tools})
        return r.json()["input_tokens"]
    assert tokens([READ, FETCH]) == tokens([READ, {k: v for k, v in FETCH.items() if k != "defer_loading"}])


# ---- vLLM 0.34's tool_addition / tool_removal blocks (anthropic/serving.py _resolve_tools) -------

def _system(*blocks):
    return {"role": "system", "content": list(blocks)}


def _add(name=None, definition=None, kind="tool_addition"):
    tool = {"type": "tool_reference", "name": name} if definition is None else \
        {"type": "tool_definition", "definition": definition}
    return {"type": kind, "tool": tool}


def test_tool_changes_resolve_the_tools(api):
    """The tools in effect at the end of the conversation: an addition by reference un-defers a
    declared tool, one by definition declares it, a removal drops it (a later addition wins)."""
    assert called(api, [READ, FETCH], [_system(_add("WebFetch")), *U]) == {"Read", "WebFetch"}
    assert called(api, [READ], [_system(_add(definition={**FETCH, "defer_loading": None})), *U]) == {"Read", "WebFetch"}
    assert called(api, [READ, FETCH], [_system(_add("WebFetch"), _add("Read", kind="tool_removal")), *U]) == \
        {"WebFetch"}
    assert called(api, [READ], [_system(_add("Read", kind="tool_removal")), _system(_add("Read")), *U]) == {"Read"}


def test_tool_change_refusals(api):
    def refused(body, message):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            b = {"model": "test-model", **body}
            if path == "/v1/messages":
                b["max_tokens"] = 5
            r = api.post(path, json=b, headers=H)
            assert r.status_code == 400, r.text
            assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    # _resolve_tools' ValueError, answered 400 by the route (anthropic/api_router.py l. 73-75)
    refused({"tools": [READ], "messages": [_system(_add("WebFetch")), *U]},
            "tool_addition references tool 'WebFetch', which is not declared in tools")
    refused({"messages": [_system(_add("Read", kind="tool_removal")), *U]},
            "tool_removal references tool 'Read', which is not declared in tools")
    # only in a system message of messages (AnthropicMessage / validate_system, anthropic/protocol.py)
    refused({"tools": [READ], "messages": [{"role": "user", "content": [_add("Read")]}]},
            'messages[0].content: tool_addition blocks are only allowed in messages with role "system"')
    refused({"tools": [READ], "system": [_add("Read")], "messages": U},
            'system: tool_addition blocks are only allowed in messages with role "system"')
    refused({"tools": [READ], "messages": [_system({"type": "tool_addition"}), *U]},
            "messages[0].content[0]: tool is required for tool_addition blocks")
    refused({"tools": [READ], "messages": [_system(_add(definition=READ, kind="tool_removal")), *U]},
            "messages[0].content[0]: tool_removal only accepts a tool_reference")
