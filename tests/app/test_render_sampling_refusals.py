"""The render routes refuse what vLLM 0.34's render refuses: ``/v1/chat/completions/render``
reads a ``ChatCompletionRequest`` (its request validators, e.g. ``check_tool_usage``) and
``render_chat_request`` builds its ``SamplingParams`` (``_verify_args``: ``top_k``,
``min_tokens``, ...); ``/v1/messages/render`` converts to that chat request and goes through
the same ``render_chat_request``.  Each refusal is the generating route's own 400 (its message),
in vLLM's envelope on both renders (the render router's, scale_out/render/api_router.py), where
``/v1/messages`` answers Anthropic's."""
from __future__ import annotations

import pytest

CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "Hi"}]}
MSGS = {"model": "test-model", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def _openai(message, param=None):
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def _anthropic(message):
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


CHAT_CASES = [
    ({"min_tokens": -1}, _openai("min_tokens must be greater than or equal to 0, got -1.")),
    ({"max_tokens": 8, "min_tokens": 9}, _openai("min_tokens must be less than or equal to max_tokens=8, got 9.")),
    ({"max_completion_tokens": 8, "min_tokens": 9},
     _openai("min_tokens must be less than or equal to max_tokens=8, got 9.")),
    ({"top_k": -5}, _openai("top_k must be 0 (disable), or at least 1, got -5.")),
    ({"top_p": 1.5}, _openai("top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)", "top_p")),
    ({"temperature": 3}, _openai("temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)", "temperature")),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "missing"}}},
     _openai("The tool `missing` specified in `tool_choice` does not match any of the specified `tools` "
             "(parameter=tool_choice)", "tool_choice")),
]


@pytest.mark.parametrize("extra, want", CHAT_CASES)
def test_chat_render_refuses_what_chat_completions_refuses(api, extra, want):
    body = {**CHAT, **extra}
    r = api.post("/v1/chat/completions/render", json=body)
    assert r.status_code == 400, r.text
    assert r.json() == want
    g = api.post("/v1/chat/completions", json=body)
    assert (g.status_code, g.json()) == (400, want)          # the generating route's own answer


def test_chat_render_checks_in_vllms_order(api):
    # the request validators (parsing) before the model check; SamplingParams after it
    r = api.post("/v1/chat/completions/render", json={**CHAT, "model": "nope", "tools": [TOOL],
                                                      "tool_choice": {"type": "function", "function": {"name": "x"}}})
    assert r.status_code == 400 and "`x` specified in `tool_choice`" in r.json()["error"]["message"]
    r = api.post("/v1/chat/completions/render", json={**CHAT, "model": "nope", "top_k": -5})
    assert r.status_code == 404
    # ranges before min_tokens, as _verify_args
    r = api.post("/v1/chat/completions/render", json={**CHAT, "top_k": -5, "min_tokens": -1})
    assert r.json() == _openai("top_k must be 0 (disable), or at least 1, got -5.")


def test_chat_render_min_tokens_against_the_room_left(api):
    """No max_tokens: the render's max_tokens is the room the context leaves, as vLLM's get_max_tokens."""
    d = api.post("/v1/chat/completions/render", json={**CHAT, "min_tokens": 3}).json()
    room = d["sampling_params"]["max_tokens"]
    assert d["sampling_params"]["min_tokens"] == 3 and room == 1024 - len(d["token_ids"])
    r = api.post("/v1/chat/completions/render", json={**CHAT, "min_tokens": room + 1})
    assert r.json() == _openai(f"min_tokens must be less than or equal to max_tokens={room}, got {room + 1}.")


@pytest.mark.parametrize("extra", [{"min_tokens": 0}, {"max_tokens": 8, "min_tokens": 8}, {"top_k": -1},
                                   {"top_k": 0}, {"top_k": 5}, {"tools": [TOOL], "tool_choice": {
                                       "type": "function", "function": {"name": "get_weather"}}}])
def test_chat_render_still_answers_valid_bodies(api, extra):
    r = api.post("/v1/chat/completions/render", json={**CHAT, **extra})
    assert r.status_code == 200, r.text


MSG_CASES = [
    ({"min_tokens": -1}, "min_tokens must be greater than or equal to 0, got -1.", None),
    ({"max_tokens": 8, "min_tokens": 9}, "min_tokens must be less than or equal to max_tokens=8, got 9.", None),
    ({"top_k": -5}, "top_k must be 0 (disable), or at least 1, got -5.", None),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"),
]


@pytest.mark.parametrize("extra, message, param", MSG_CASES)
def test_messages_render_refuses_what_messages_refuses(api, extra, message, param):
    body = {**MSGS, **extra}
    r = api.post("/v1/messages/render", json=body)
    assert r.status_code == 400, r.text
    assert r.json() == _openai(message, param)
    g = api.post("/v1/messages", json=body)
    assert (g.status_code, g.json()) == (400, _anthropic(message))


def test_messages_render_leaves_a_named_tool_choice_to_the_generate_step(api):
    """vLLM's converter sets the chat request's tool_choice after building it, past
    check_tool_usage: the render answers, and the named choice rides in parse_context."""
    body = {**MSGS, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "missing"}}
    r = api.post("/v1/messages/render", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["parse_context"]["tool_choice"] == {"function": {"name": "missing"}, "type": "function"}


# ---- the other SamplingParams checks, on every render ----------------------------------------------
# vLLM 0.34's renders (scale_out/render/serving.py) build each answer's SamplingParams with
# to_sampling_params after get_max_tokens (the request's max_tokens capped to the room the context
# leaves): SamplingParams.__post_init__ then refuses as on the generating routes (_verify_args: n, the
# ranges, max_tokens >= 1, min_tokens, an empty stop string; _verify_greedy_sampling)

CMPL = {"model": "test-model", "prompt": "Hi"}
RESP = {"model": "test-model", "input": "Hi"}
EMPTY_STOP = _openai("stop cannot contain an empty string.")
GREEDY = _openai("n must be 1 when using greedy sampling, got 2.")

SAME_AS_GENERATING = [
    ("/v1/chat/completions", CHAT, {"stop": [""]}, EMPTY_STOP),
    ("/v1/chat/completions", CHAT, {"stop": ""}, EMPTY_STOP),            # a string is [""] there
    ("/v1/chat/completions", CHAT, {"temperature": 0, "n": 2}, GREEDY),
    ("/v1/chat/completions", CHAT, {"n": 0}, _openai("n must be at least 1, got 0.")),
    ("/v1/completions", CMPL, {"stop": [""]}, EMPTY_STOP),
    ("/v1/completions", CMPL, {"stop": ""}, EMPTY_STOP),
    ("/v1/completions", CMPL, {"temperature": 0.0, "n": 2}, GREEDY),
    ("/v1/completions", CMPL, {"top_k": -5}, _openai("top_k must be 0 (disable), or at least 1, got -5.")),
    ("/v1/completions", CMPL, {"temperature": 3},
     _openai("temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)", "temperature")),
    ("/v1/completions", CMPL, {"presence_penalty": 5}, _openai("presence_penalty must be in [-2, 2], got 5.0.")),
    ("/v1/completions", CMPL, {"min_tokens": -1}, _openai("min_tokens must be greater than or equal to 0, got -1.")),
    ("/v1/completions", CMPL, {"max_tokens": 8, "min_tokens": 9},
     _openai("min_tokens must be less than or equal to max_tokens=8, got 9.")),
    ("/v1/responses", RESP, {"stop": [""]}, EMPTY_STOP),
    ("/v1/responses", RESP, {"top_k": -5}, _openai("top_k must be 0 (disable), or at least 1, got -5.")),
    ("/v1/responses", RESP, {"min_p": 2}, _openai("min_p must be in [0, 1], got 2.0.")),
    ("/v1/responses", RESP, {"temperature": 3},
     _openai("temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)", "temperature")),
]


@pytest.mark.parametrize("path, base, extra, want", SAME_AS_GENERATING)
def test_each_render_refuses_what_its_route_refuses(api, path, base, extra, want):
    body = {**base, **extra}
    r = api.post(path + "/render", json=body)
    assert (r.status_code, r.json()) == (400, want)
    g = api.post(path, json=body)
    assert (g.status_code, g.json()) == (400, want)


def test_messages_render_refuses_an_empty_stop_sequence(api):
    body = {**MSGS, "stop_sequences": ["END", ""]}
    r = api.post("/v1/messages/render", json=body)
    assert (r.status_code, r.json()) == (400, EMPTY_STOP)
    g = api.post("/v1/messages", json=body)
    assert (g.status_code, g.json()) == (400, _anthropic("stop cannot contain an empty string."))


def test_responses_empty_stop_string_is_no_stop(api):
    """ResponsesRequest.to_sampling_params passes ``self.stop if self.stop else []``: "" is no
    stop on /v1/responses and its render (both had refused it as chat's [""])."""
    r = api.post("/v1/responses/render", json={**RESP, "stop": ""})
    assert r.status_code == 200, r.text
    assert r.json()["sampling_params"]["stop"] == []
    assert api.post("/v1/responses", json={**RESP, "stop": "", "max_output_tokens": 4}).status_code == 200


@pytest.mark.parametrize("path, base", [("/v1/chat/completions", CHAT), ("/v1/completions", CMPL),
                                        ("/v1/messages", MSGS)])
def test_render_caps_max_tokens_to_the_room_left(api, path, base):
    """get_max_tokens: min(max_tokens, max_model_len - prompt); the renders reported the request's
    value as it came (5000 past a 1024-token context)."""
    out = api.post(path + "/render", json={**base, "max_tokens": 5000}).json()
    out = out[0] if isinstance(out, list) else out
    room = 1024 - len(out["token_ids"])
    assert out["sampling_params"]["max_tokens"] == room
    out = api.post(path + "/render", json={**base, "max_tokens": 7}).json()
    assert (out[0] if isinstance(out, list) else out)["sampling_params"]["max_tokens"] == 7
    # min_tokens is judged against the capped value, as on the generating route
    body = {**base, "max_tokens": room + 2, "min_tokens": room + 1}
    want = f"min_tokens must be less than or equal to max_tokens={room}, got {room + 1}."
    r = api.post(path + "/render", json=body)
    assert (r.status_code, r.json()) == (400, _openai(want))
    assert api.post(path, json=body).status_code == 400 and want in api.post(path, json=body).text


def test_completions_render_judges_each_prompts_max_tokens(api):
    """One SamplingParams per prompt, each with its own room: the second prompt's is the refusal."""
    body = {"model": "test-model", "prompt": [[7] * 10, [7] * 1000], "min_tokens": 100}
    r = api.post("/v1/completions/render", json=body)
    assert (r.status_code, r.json()) == (400, _openai("min_tokens must be less than or equal to max_tokens=24, got 100."))
    r = api.post("/v1/completions/render", json={**body, "min_tokens": 24})
    assert [g["sampling_params"]["max_tokens"] for g in r.json()] == [1014, 24]


def test_a_prompt_filling_the_context_leaves_max_tokens_zero(api):
    """A prompt of exactly max_model_len tokens passes the renderer's length check;
    get_max_tokens then gives 0, which SamplingParams refuses."""
    r = api.post("/v1/completions/render", json={"model": "test-model", "prompt": [7] * 1024})
    assert (r.status_code, r.json()) == (400, _openai("max_tokens must be at least 1, got 0. "
                                                      "(parameter=max_tokens, value=0)", "max_tokens"))
    assert api.post("/v1/completions/render", json={"model": "test-model", "prompt": [7] * 1023}).status_code == 200


@pytest.mark.parametrize("path, base", [("/v1/chat/completions/render", CHAT), ("/v1/completions/render", CMPL)])
def test_renders_refuse_beam_search(api, path, base):
    """render_chat_request / render_completion_request: ``Beam search is not supported by the render
    endpoint`` after the model check and before rendering (so before the greedy-n check); the
    simulator rendered it."""
    want = _openai("Beam search is not supported by the render endpoint")
    for flag in (True, "yes", 1):
        r = api.post(path, json={**base, "use_beam_search": flag, "n": 2, "temperature": 0})
        assert (r.status_code, r.json()) == (400, want), flag
    r = api.post(path, json={**base, "use_beam_search": True, "model": "nope"})
    assert r.status_code == 404
    assert api.post(path, json={**base, "use_beam_search": False}).status_code == 200
