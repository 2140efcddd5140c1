"""The recorded Claude Code and Codex requests (tests/fixtures) and the checks of their answers' streams, shared by tests/app/test_agentic_clients.py and tests/server/test_agentic_clients_replayed.py."""
from __future__ import annotations
import json
from pathlib import Path
import jsonschema
import pydantic
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent
from openai.types.responses.tool import Tool
from support import named_events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


LONG = ("--max-model-len", "200000")


CLAUDE_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "dummy", "x-app": "cli",
                  "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                                    "context-management-2025-06-27,effort-2025-11-24"}


CODEX_HEADERS = {"accept": "text/event-stream", "originator": "codex_exec"}


ANTHROPIC_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)


RESPONSES_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
SDK_TOOL = pydantic.TypeAdapter(Tool)
# the tool types the simulator echoes as the SDK's models dump them (vLLM's tools=request.tools,
# responses/protocol.py l. 1038); the others it echoes as sent
LAID_OUT_TOOLS = ("function", "custom", "namespace", "web_search", "web_search_2025_08_26", "web_search_preview",
                  "web_search_preview_2025_03_11")


def echoed_tool(tool: dict) -> dict:
    """A request's tool as a Responses answer echoes it: the SDK's ``Tool`` model dumped (by alias)
    for the types laid out, else as sent."""
    if tool["type"] not in LAID_OUT_TOOLS:
        return tool
    return SDK_TOOL.validate_python(tool).model_dump(mode="json", by_alias=True)


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def claude_first() -> dict:
    return fixture("claude_code_first_turn.json")


def claude_tool_turn() -> dict:
    body = claude_first()
    body["messages"] += fixture("claude_code_tool_turn.json")["messages"]
    return body


def codex_first() -> dict:
    return fixture("codex_first_turn.json")


def codex_tool_turn() -> dict:
    body = codex_first()
    body["input"] += fixture("codex_tool_turn.json")["input"]
    return body


def check_anthropic_stream(text: str, body: dict) -> dict:
    """Validate a /v1/messages SSE body event by event with the anthropic SDK's models, check
    the block structure, and return the accumulated message."""
    events = named_events(text)
    assert [n for n, _ in events][0] == "message_start" and events[-1][0] == "message_stop"
    schemas = {t["name"]: t["input_schema"] for t in body.get("tools") or ()}
    message, blocks, open_index = None, [], None
    for name, data in events:
        assert name == data["type"]
        if name == "ping":
            continue
        ANTHROPIC_EVENT.validate_python(data)
        if name == "message_start":
            message = data["message"]
        elif name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append({**data["content_block"], "_json": ""})
        elif name == "content_block_delta":
            assert data["index"] == open_index
            delta, block = data["delta"], blocks[open_index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                block["_json"] += delta["partial_json"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"] = data["usage"]
    assert open_index is None and message is not None
    for block in blocks:
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(raw or "{}")
            jsonschema.validate(block["input"], schemas[block["name"]])
    message["content"] = blocks
    kinds = {b["type"] for b in blocks}
    assert message["stop_reason"] == ("tool_use" if "tool_use" in kinds else message["stop_reason"])
    assert message["stop_reason"] in ("end_turn", "max_tokens", "tool_use")
    assert message["usage"]["output_tokens"] > 0 and message["usage"]["input_tokens"] > 1000
    return message


def function_schemas(tools) -> dict:
    """``(namespace, name) -> parameters`` of the function tools a Responses request offers."""
    out = {}
    for t in tools:
        if t["type"] == "function":
            out[(None, t["name"])] = t.get("parameters")
        elif t["type"] == "namespace":
            out.update({(t["name"], s["name"]): s.get("parameters") for s in t["tools"] if s["type"] == "function"})
    return out


def check_responses_stream(text: str, body: dict) -> dict:
    """Validate a /v1/responses SSE body with the openai SDK's event models (sequence numbers,
    created first, completed last) and return the final response object."""
    events = named_events(text)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    for name, data in events:
        assert name == data["type"]
        RESPONSES_EVENT.validate_python(data)
    final = events[-1][1]["response"]
    assert final["status"] == "completed" and final["tools"] == [echoed_tool(t) for t in body["tools"]]
    schemas = function_schemas(body["tools"])
    for item in final["output"]:
        if item["type"] == "function_call":
            params = schemas[(item.get("namespace"), item["name"])]
            jsonschema.validate(json.loads(item["arguments"]), params)
    assert final["usage"]["input_tokens"] > 1000 and final["usage"]["output_tokens"] > 0
    return final
