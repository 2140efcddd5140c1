"""Anthropic ``output_config.effort`` and ``thinking`` ``disabled`` / ``between_tools`` as vLLM
0.34 converts them (``AnthropicServingMessages.to_chat_completion_request``,
entrypoints/anthropic/serving.py: ``_handle_output_config`` sets the chat request's
``reasoning_effort``, ``_handle_thinking`` replaces it for a disabled thinking with the effort
``DisabledThinkingEffortResolver`` probes once: ``"none"``, or ``"low"`` when the template renders
``"none"`` like one of the Anthropic efforts), then ``build_chat_params`` lays the effort and
``enable_thinking = effort != "none"`` (unless the request's kwargs name it) over the request's
``chat_template_kwargs``.  Real tokenizer (``hub``) servers with ``--reasoning-parser qwen3``:
``switch`` whose template writes ``/no_think`` when ``enable_thinking`` is false, ``deaf`` whose
template ignores both."""
from __future__ import annotations

import os

import pytest

from support.tokenizer_hub import MODEL

SWITCH = ("{% if enable_thinking is defined and enable_thinking is false %}/no_think {% endif %}"
          "{% for m in messages %}{{ m['content'] }}{% endfor %}")
DEAF = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
MSGS = [{"role": "user", "content": "Why is the sky blue?"}]
# the converted ChatCompletionRequest's defaults, which build_chat_params lays over the kwargs
GEN = {"add_generation_prompt": True, "continue_final_message": False}


def server(app_client, hub, template):
    return app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--reasoning-parser", "qwen3",
                      "--chat-template", template, model=MODEL)


def post(api, path, **body):
    r = api.post(path, json={"model": MODEL, "messages": MSGS, **body})
    assert r.status_code == 200, r.text
    return r.json()


def count(api, **kw):
    return post(api, "/v1/messages/count_tokens", **kw)["input_tokens"]


def test_disabled_thinking_is_effort_none_where_the_template_reads_the_switch(app_client, hub):
    api = server(app_client, hub, SWITCH)
    plain = count(api)
    off = count(api, thinking={"type": "disabled"})
    assert off == count(api, chat_template_kwargs={"enable_thinking": False}) > plain
    # output_config.effort's switch is on: the template renders as without kwargs
    assert count(api, output_config={"effort": "low"}) == plain
    # disabled wins over output_config.effort (_handle_thinking runs after _handle_output_config)
    assert count(api, thinking={"type": "between_tools"}, output_config={"effort": "max"}) == off
    out = post(api, "/v1/messages", max_tokens=20, thinking={"type": "disabled"})
    assert out["usage"]["input_tokens"] == off and [b["type"] for b in out["content"]] == ["text"]


def test_disabled_thinking_is_effort_low_where_the_template_ignores_none(app_client, hub):
    """The probe renders "none" as it renders "low" (and every effort): vLLM picks "low", whose
    switch is on, so a disabled thinking still reasons."""
    api = server(app_client, hub, DEAF)
    out = post(api, "/v1/messages", max_tokens=20, ignore_eos=True, thinking={"type": "disabled"})
    assert [b["type"] for b in out["content"]] == ["thinking", "text"]
    assert api.sim._disabled_thinking_effort == "low"


def test_k2_horizon_parser_refuses_the_disabled_effort(app_client):
    """The parser is built with the effective kwargs, whose reasoning_effort the conversion set to
    "none": K2HorizonReasoningParser.__init__'s ValueError, answered 400 in Anthropic's envelope
    (the simulator had dropped the effort and answered without reasoning)."""
    api = app_client("--reasoning-parser", "k2_horizon", "--seed", "3")
    r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 20, "messages": MSGS,
                                       "thinking": {"type": "disabled"}})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "Unsupported reasoning_effort 'none'. Supported values: high, medium, low."}}


# ---- /v1/messages/render: render_chat_request's fields for the converted chat request ---------------

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_messages_render_reports_the_converted_requests_parse_fields(app_client, hub):
    """vLLM 0.34's ServingRender.render_messages_request renders to_chat_completion_request's chat
    request through render_chat_request: reasoning_ended, reasoning_parser_kwargs (the effective
    kwargs, with the converted effort) and parse_context; the simulator left them null."""
    api = server(app_client, hub, SWITCH)
    out = post(api, "/v1/messages/render", max_tokens=20, thinking={"type": "disabled"})
    kwargs = {"reasoning_effort": "none", "enable_thinking": False, **GEN}
    assert out["reasoning_ended"] is True
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": kwargs}
    assert out["parse_context"] == {"tools": None, "tool_choice": None, "parallel_tool_calls": True,
                                    "include_reasoning": True,
                                    "chat_template_kwargs": kwargs, "history_tool_call_cnt": 0}
    assert out["request_id"].startswith("chatcmpl-") and "structured_outputs" not in out["sampling_params"]
    out = post(api, "/v1/messages/render", max_tokens=20, output_config={"effort": "high"})
    assert out["reasoning_ended"] is False
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"reasoning_effort": "high",
                                                                       "enable_thinking": True, **GEN}}


def test_messages_render_converts_tools_choice_and_format(app_client):
    api = app_client("--reasoning-parser", "qwen3")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                                   "input": {"city": "Paris"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}]
    r = api.post("/v1/messages/render", json={
        "model": "test-model", "max_tokens": 20, "messages": history,
        "tools": [TOOL, {"name": "noop", "description": "does nothing", "input_schema": {}, "strict": True}],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "output_config": {"format": {"type": "json_schema", "schema": schema}}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["parse_context"] == {
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": None,
                                                    "parameters": TOOL["input_schema"]}},
                  {"type": "function", "function": {"name": "noop", "description": "does nothing",
                                                    "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"function": {"name": "get_weather"}, "type": "function"},
        "parallel_tool_calls": False, "include_reasoning": True,
        "chat_template_kwargs": GEN, "history_tool_call_cnt": 1}
    assert out["reasoning_ended"] is False
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": GEN}
    assert out["sampling_params"]["structured_outputs"] == {"json": schema}
    # tools without a tool_choice: "auto" (_convert_tools)
    out = api.post("/v1/messages/render", json={"model": "test-model", "max_tokens": 20, "messages": MSGS,
                                                 "tools": [TOOL]}).json()
    assert (out["parse_context"]["tool_choice"], out["parse_context"]["parallel_tool_calls"]) == ("auto", True)


def test_messages_render_reads_a_messages_request(api):
    """vLLM 0.34's ``/v1/messages/render`` takes an ``AnthropicMessagesRequest``
    (scale_out/render/api_router.py ``render_messages``): ``max_tokens`` is required and its
    validators run (``validate_thinking_budget``); the simulator read a count_tokens request."""
    body = {"model": "test-model", "messages": MSGS}
    r = api.post("/v1/messages/render", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("1 validation error:\n  {'type': 'missing', 'loc': 'body.max_tokens', "
                                            "'msg': 'Field required', 'input': '<dict of 2 items>'}")
    r = api.post("/v1/messages/render", json={**body, "max_tokens": 1100,
                                               "thinking": {"type": "enabled", "budget_tokens": 2000}})
    assert r.status_code == 400 and "thinking.budget_tokens must be less than max_tokens" in r.text
    assert api.post("/v1/messages/render", json={**body, "max_tokens": 4}).json()["sampling_params"]["max_tokens"] == 4


def test_disabled_thinking_is_effort_low_where_none_fails_to_render(app_client, hub):
    """The probe's render of "none" fails (the template refuses it): vLLM picks "low"."""
    template = "{% if reasoning_effort == 'none' %}{{ raise_exception('no none') }}{% endif %}" + DEAF
    api = server(app_client, hub, template)
    assert count(api, thinking={"type": "disabled"}) == count(api)
    assert api.sim._disabled_thinking_effort == "low"


def test_anthropic_disabled_thinking_effort_flag_fixes_the_effort(app_client, hub):
    """vLLM 0.34's --anthropic-disabled-thinking-effort: a value other than ``auto`` is the effort
    a disabled thinking sends, no probe (DisabledThinkingEffortResolver.__init__); the simulator
    accepted the flag and ignored it, probing as for ``auto``."""
    api = app_client("--reasoning-parser", "qwen3", "--anthropic-disabled-thinking-effort", "low")
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 20, "thinking": {"type": "disabled"}}
    out = api.post("/v1/messages/render", json=body).json()
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"reasoning_effort": "low",
                                                                       "enable_thinking": True, **GEN}}
    assert out["reasoning_ended"] is False
    out = api.post("/v1/messages", json={**body, "ignore_eos": True}).json()
    assert [b["type"] for b in out["content"]] == ["thinking", "text"]
    # a template that ignores "none" (auto would probe "low"): the flag's "none" is sent as it is
    deaf = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--reasoning-parser", "qwen3",
                      "--chat-template", DEAF, "--anthropic-disabled-thinking-effort", "none", model=MODEL)
    out = post(deaf, "/v1/messages/render", max_tokens=20, thinking={"type": "between_tools"})
    assert out["reasoning_parser_kwargs"]["chat_template_kwargs"]["reasoning_effort"] == "none"
    assert getattr(deaf.sim, "_disabled_thinking_effort", None) is None
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError, match="valid values are: auto, none, low"):      # vLLM's choices
        app_client("--anthropic-disabled-thinking-effort", "minimal")


# ---- output_config.effort: vLLM 0.34's AnthropicEffort literal --------------------------------------

def _effort_error(value) -> str:
    expected = "'low', 'medium', 'high', 'xhigh' or 'max'"
    return ("1 validation error:\n  {'type': 'literal_error', 'loc': 'body.output_config.effort', "
            f"'msg': \"Input should be {expected}\", 'input': '{value}', 'ctx': {{'expected': \"{expected}\"}}}}")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("effort", ["none", "minimal", "Low", 5])
def test_output_config_effort_takes_only_anthropics_efforts(api, path, effort):
    """vLLM 0.34's AnthropicOutputConfig.effort is AnthropicEffort | None (low, medium, high, xhigh,
    max; entrypoints/anthropic/protocol.py): chat's "none" / "minimal" are pydantic's literal_error
    (the simulator answered its own "Must be one of" words)."""
    r = api.post(path, json={"model": "test-model", "max_tokens": 8, "messages": MSGS,
                             "output_config": {"effort": effort}})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": _effort_error(effort)}}


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
def test_each_anthropic_effort_is_the_chat_requests_effort(app_client, effort):
    """_handle_output_config sets the converted chat request's reasoning_effort; build_chat_params
    lays it and enable_thinking (on: no Anthropic effort is "none") over the template kwargs."""
    api = app_client("--reasoning-parser", "qwen3")
    out = api.post("/v1/messages/render", json={"model": "test-model", "max_tokens": 8, "messages": MSGS,
                                                "output_config": {"effort": effort}}).json()
    assert out["reasoning_parser_kwargs"] == {"chat_template_kwargs": {"reasoning_effort": effort,
                                                                       "enable_thinking": True, **GEN}}
