"""Sampling semantics clients rely on (issue 21): a request ``seed`` reproduces its output,
``temperature: 0`` is greedy, ``include_stop_str_in_output``, ``stop_token_ids``, a named
``tool_choice`` finishing with ``"stop"`` and content ``""``, and per-choice continuous usage."""
from __future__ import annotations

import pytest

from support import sse_events

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Tell me something."}]


def chat(api, **kw):
    r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 30, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def texts(out):
    return [c["message"]["content"] for c in out["choices"]]


def test_request_seed_reproduces_the_output(api):
    a, b = chat(api, seed=42), chat(api, seed=42)
    assert texts(a) == texts(b) and a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
    others = {tuple(texts(chat(api, seed=s))) for s in range(43, 49)}
    assert len(others) > 1                                  # other seeds, other answers


def test_request_seed_with_n_gives_distinct_reproducible_choices(api):
    a, b = chat(api, seed=7, n=3), chat(api, seed=7, n=3)
    assert texts(a) == texts(b)
    assert len(set(texts(a))) > 1                           # choice i samples with seed + i


def test_seed_reproduces_streams_and_completions(api):
    body = {"model": "test-model", "messages": MSGS, "max_tokens": 30, "seed": 5, "stream": True}
    joined = ["".join(e["choices"][0]["delta"].get("content") or "" for e in sse_events(api.post(CHAT, json=body).text)[:-1])
              for _ in range(2)]
    assert joined[0] == joined[1] == texts(chat(api, seed=5))[0]
    c = [api.post("/v1/completions", json={"model": "test-model", "prompt": "Hi", "max_tokens": 30, "seed": 5})
         .json()["choices"][0]["text"] for _ in range(2)]
    assert c[0] == c[1]


def test_responses_seed_reproduces_the_output(api):
    """vLLM 0.34's ResponsesRequest.to_sampling_params passes ``seed`` on to SamplingParams as
    chat's does: the same seeded request gives the same answer, streamed or not, and its prompt
    is chat's (the input as one user message), so the answer is chat's with that seed."""
    body = {"model": "test-model", "input": "Tell me something.", "max_output_tokens": 30, "seed": 42}
    outs = [api.post("/v1/responses", json=body).json() for _ in range(2)]
    assert [o["output"][0]["content"][0]["text"] for o in outs] == ["Give a man a fish and you feed him for a "] * 2
    assert [o["usage"]["output_tokens"] for o in outs] == [11, 11]
    assert texts(chat(api, seed=42)) == ["Give a man a fish and you feed him for a "]
    streamed = sse_events(api.post("/v1/responses", json={**body, "stream": True}).text)
    deltas = [e["delta"] for e in streamed if isinstance(e, dict) and e.get("type") == "response.output_text.delta"]
    assert "".join(deltas) == "Give a man a fish and you feed him for a "
    other = api.post("/v1/responses", json={**body, "seed": 43}).json()["output"][0]["content"][0]["text"]
    assert other == ("The temperature here is twenty-five degrees centigrade. Testing, testing 1,2,3. "
                     "The temperature here is twenty-five ")


def test_seed_does_not_disturb_the_server_seed(app_client):
    api = app_client("--seed", "11")
    first = texts(chat(api))
    api2 = app_client("--seed", "11", "--max-num-seqs", "6")        # a fresh server, same seed
    chat(api2, seed=99)
    assert texts(chat(api2)) == first


def test_temperature_zero_is_greedy(api):
    outs = [texts(chat(api, temperature=0)) for _ in range(3)]
    assert outs[0] == outs[1] == outs[2]
    # vLLM 0.34 refuses n > 1 with greedy sampling (_verify_greedy_sampling)
    r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 30, "temperature": 0, "n": 3})
    assert r.status_code == 400 and r.json()["error"]["message"] == "n must be 1 when using greedy sampling, got 3."
    other = [{"role": "user", "content": "Something else entirely, please."}]
    r = api.post(CHAT, json={"model": "test-model", "messages": other, "max_tokens": 30, "temperature": 0}).json()
    r2 = api.post(CHAT, json={"model": "test-model", "messages": other, "max_tokens": 30, "temperature": 0}).json()
    assert texts(r) == texts(r2)


def test_anthropic_and_responses_temperature_zero(api):
    body = {"model": "test-model", "max_tokens": 30, "messages": MSGS, "temperature": 0}
    a = [api.post("/v1/messages", json=body).json()["content"] for _ in range(2)]
    assert a[0] == a[1]
    body = {"model": "test-model", "input": "Tell me", "max_output_tokens": 30, "temperature": 0}
    r = [api.post("/v1/responses", json=body).json()["output"][0]["content"][0]["text"] for _ in range(2)]
    assert r[0] == r[1]


def test_include_stop_str_in_output(api):
    base = {"max_tokens": 60, "ignore_eos": True, "seed": 1}
    full = texts(chat(api, **base))[0]
    stop = full.split()[3]                       # a word that is in the answer
    cut = chat(api, stop=[stop], **base)
    kept = chat(api, stop=[stop], include_stop_str_in_output=True, **base)
    i = full.find(stop)
    assert texts(cut)[0] == full[:i] and texts(kept)[0] == full[:i + len(stop)]
    assert cut["choices"][0]["stop_reason"] == stop == kept["choices"][0]["stop_reason"]
    assert kept["choices"][0]["finish_reason"] == "stop"


def test_a_stop_string_keeps_its_token_in_usage_and_token_ids(api):
    """vLLM 0.34's detokenizer (v1/engine/detokenizer.py l. 133-157) keeps the tokens through the
    one that completes a stop string and cuts only the text: completion_tokens and token_ids
    count that token whether or not include_stop_str_in_output keeps its text."""
    base = {"max_tokens": 60, "ignore_eos": True, "seed": 1, "return_token_ids": True, "logprobs": True}
    full = chat(api, **base)["choices"][0]
    pieces = [e["token"] for e in full["logprobs"]["content"]]
    k = 3                                        # the stop string: the 4th token's text
    stop = pieces[k]
    assert "".join(pieces[:k]).find(stop) < 0
    for include in (False, True):
        out = chat(api, stop=[stop], include_stop_str_in_output=include, **base)
        choice = out["choices"][0]
        assert choice["message"]["content"] == "".join(pieces[:k + include])
        assert choice["token_ids"] == full["token_ids"][:k + 1]
        assert out["usage"]["completion_tokens"] == k + 1 and len(choice["logprobs"]["content"]) == k + 1


def test_a_stop_keeps_each_logprobs_entry_the_whole_token(api):
    """A stop string or stop token cuts the output text only: vLLM 0.34's LogprobsProcessor
    decodes each sampled id by itself, so the logprobs entry of a token the stop cut still names
    the whole token (it named the cut text: "T" for "Testing", "" for a stop token), streamed or
    not, on chat, completions and responses."""
    base = {"max_tokens": 30, "ignore_eos": True, "seed": 1, "return_token_ids": True, "logprobs": True}
    full = chat(api, **base)["choices"][0]
    pieces = [e["token"] for e in full["logprobs"]["content"]]
    k = next(i for i in range(2, len(pieces)) if len(pieces[i]) > 1 and pieces[i][1:] not in "".join(pieces[:i + 1])[:-len(pieces[i])])
    cases = [{"stop": [pieces[k][1:]]}, {"stop": [pieces[k][1:]], "include_stop_str_in_output": True},
             {"stop_token_ids": [full["token_ids"][k]]}]
    for case in cases:
        out = chat(api, **base, **case)["choices"][0]
        assert [e["token"] for e in out["logprobs"]["content"]] == pieces[:k + 1], case
        cut = not case.get("include_stop_str_in_output")
        assert out["message"]["content"] == "".join(pieces[:k]) + (pieces[k][:1] if cut and "stop" in case else
                                                                   "" if cut else pieces[k])
        r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "stream": True, **base, **case})
        streamed = [e["token"] for ev in sse_events(r.text) if isinstance(ev, dict) and ev.get("choices")
                    for e in ((ev["choices"][0].get("logprobs") or {}).get("content") or ())]
        assert streamed == pieces[:k + 1], case
    prompt = {"model": "test-model", "prompt": "hello there", "max_tokens": 30, "ignore_eos": True, "seed": 1,
              "logprobs": 0}
    r = api.post("/v1/completions", json=prompt)
    tokens = r.json()["choices"][0]["logprobs"]["tokens"]
    k = next(i for i in range(2, len(tokens)) if len(tokens[i]) > 1 and tokens[i][1:] not in "".join(tokens[:i + 1])[:-len(tokens[i])])
    for stream in (False, True):
        r = api.post("/v1/completions", json={**prompt, "stop": [tokens[k][1:]], "stream": stream})
        if stream:
            got = [t for ev in sse_events(r.text) if isinstance(ev, dict) and ev.get("choices")
                   for t in ((ev["choices"][0].get("logprobs") or {}).get("tokens") or ())]
        else:
            got = r.json()["choices"][0]["logprobs"]["tokens"]
        assert got == tokens[:k + 1], stream
    body = {"model": "test-model", "input": "hello", "max_output_tokens": 30, "top_logprobs": 0,
            "include": ["message.output_text.logprobs"]}
    resp = api.post("/v1/responses", json=body).json()
    part = resp["output"][-1]["content"][0]
    tokens = [e["token"] for e in part["logprobs"]]
    assert part["text"] == "".join(tokens)


def test_stop_token_ids(api):
    base = {"max_tokens": 40, "ignore_eos": True, "seed": 2, "return_token_ids": True}
    full = chat(api, **base)
    ids = full["choices"][0]["token_ids"]
    target = ids[5]
    first = ids.index(target)
    out = chat(api, stop_token_ids=[target], **base)
    choice = out["choices"][0]
    assert choice["token_ids"] == ids[:first + 1]              # the stop token is part of the output
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == target
    assert out["usage"]["completion_tokens"] == first + 1
    # vLLM 0.34 does not detokenize a stop-terminated sequence's last token (detokenizer.py
    # l. 108-113) unless include_stop_str_in_output
    pieces = [e["token"] for e in chat(api, logprobs=True, **base)["choices"][0]["logprobs"]["content"]]
    assert out["choices"][0]["message"]["content"] == "".join(pieces[:first])
    kept = chat(api, stop_token_ids=[target], include_stop_str_in_output=True, **base)
    assert kept["choices"][0]["message"]["content"] == "".join(pieces[:first + 1])


def test_min_tokens_holds_off_stop_tokens_and_strings(api):
    """vLLM 0.34 stops on a stop token or string only once min_tokens are out (check_stop, the
    detokenizer's min_tokens offset): a stop in the first tokens was the end of the output."""
    base = {"max_tokens": 40, "ignore_eos": True, "seed": 2, "return_token_ids": True, "logprobs": True}
    full = chat(api, **base)["choices"][0]
    ids, pieces = full["token_ids"], [e["token"] for e in full["logprobs"]["content"]]
    out = chat(api, stop_token_ids=[ids[1]], min_tokens=len(ids), **base)
    assert out["usage"]["completion_tokens"] == len(ids)
    assert out["choices"][0]["token_ids"][:len(ids) - 1] == ids[:len(ids) - 1]
    out = chat(api, stop=[pieces[1]], min_tokens=len(ids), **base)
    assert out["usage"]["completion_tokens"] == len(ids) and out["choices"][0]["stop_reason"] is None


def test_bad_stop_token_ids_are_400(api):
    r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "stop_token_ids": [-1]})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("stop_token_ids")
    r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "stop_token_ids": ["a"]})
    assert r.status_code == 400 and "stop_token_ids" in r.json()["error"]["param"]


def test_ignore_eos_gives_exactly_max_tokens(api):
    out = chat(api, max_tokens=17, ignore_eos=True)
    assert out["usage"]["completion_tokens"] == 17 and out["choices"][0]["finish_reason"] == "length"


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_named_tool_choice_finishes_with_stop_and_empty_content(api):
    """Case C11 (corrected): a named tool_choice finishes with "stop", as vLLM and OpenAI;
    "required" with "tool_calls"."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    out = chat(api, tools=[WEATHER], tool_choice=named)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] == ""
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    events = sse_events(api.post(CHAT, json={"model": "test-model", "messages": MSGS, "tools": [WEATHER],
                                             "tool_choice": named, "stream": True}).text)
    finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]
    required = chat(api, tools=[WEATHER], tool_choice="required")
    assert required["choices"][0]["finish_reason"] == "tool_calls"
    # vLLM 0.34's assemble_chat_message_fields: a forced call (named or "required") has content "",
    # an auto one null
    assert required["choices"][0]["message"]["content"] == ""
    auto = chat(api, tools=[WEATHER], tool_choice="auto", seed=2)
    assert auto["choices"][0]["message"]["tool_calls"] and auto["choices"][0]["message"]["content"] is None


def test_chat_echo_content_is_never_null(api):
    """vLLM 0.34's chat ``echo`` sets every choice's content to the echoed last message ("" when
    its role is not the answer's) plus the answer's content or "": a tool-call answer gets ""."""
    out = chat(api, tools=[WEATHER], tool_choice="required", seed=2, echo=True)
    message = out["choices"][0]["message"]
    assert message["tool_calls"] and message["content"] == ""
    out = chat(api, tools=[WEATHER], tool_choice="required", seed=2, echo=True,
               messages=MSGS + [{"role": "assistant", "content": "Sure: "}], add_generation_prompt=False)
    message = out["choices"][0]["message"]
    assert message["tool_calls"] and message["content"] == "Sure: "


@pytest.mark.parametrize("path,key", [(CHAT, "messages"), ("/v1/completions", "prompt")])
def test_continuous_usage_is_per_choice(api, path, key):
    body = {"model": "test-model", key: MSGS if key == "messages" else "Hello", "max_tokens": 6, "ignore_eos": True,
            "n": 2, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = sse_events(api.post(path, json=body).text)
    final = events[-2]
    prompt = final["usage"]["prompt_tokens"]
    per = {0: [], 1: []}
    for e in events[:-2]:
        per[e["choices"][0]["index"]].append(e["usage"])
    for i in (0, 1):
        generated = [u["completion_tokens"] for u in per[i]]
        assert generated[-1] == 6 and generated == sorted(generated)       # this choice's own count
        assert all(u["prompt_tokens"] == prompt and u["total_tokens"] == prompt + u["completion_tokens"]
                   for u in per[i])
    assert final["usage"]["completion_tokens"] == 12                        # the request's total


# ---- chat echo (vLLM's test_chat_echo) -------------------------------------------------------------
SAYING = "Here is a common saying about apple. An apple a day, keeps"
ECHO_MSGS = [{"role": "user", "content": "tell me a common saying"}, {"role": "assistant", "content": SAYING}]


def test_chat_echo_prepends_the_last_assistant_message(api):
    body = {"model": "test-model", "messages": ECHO_MSGS, "max_tokens": 5, "ignore_eos": True,
            "continue_final_message": True, "add_generation_prompt": False}
    plain = api.post(CHAT, json=body).json()["choices"][0]["message"]["content"]
    assert SAYING not in plain
    echoed = api.post(CHAT, json={**body, "echo": True, "seed": 1}).json()
    again = api.post(CHAT, json={**body, "seed": 1}).json()
    assert echoed["choices"][0]["message"]["content"] == SAYING + again["choices"][0]["message"]["content"]
    assert echoed["usage"] == again["usage"]                    # the echo is not generated
    # the last message is the user's: nothing to echo
    r = api.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 3, "echo": True, "seed": 1})
    assert r.json()["choices"][0]["message"]["content"] == \
        api.post(CHAT, json={"model": "test-model", "messages": MSGS, "max_tokens": 3, "seed": 1}).json()[
            "choices"][0]["message"]["content"]


def test_chat_echo_streams_a_chunk_after_the_role_and_defaults_prompt_logprobs(api):
    body = {"model": "test-model", "messages": ECHO_MSGS, "max_tokens": 3, "ignore_eos": True, "echo": True,
            "continue_final_message": True, "add_generation_prompt": False, "n": 2, "stream": True}
    events = sse_events(api.post(CHAT, json=body).text)[:-1]
    for i in (0, 1):
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"][0]["index"] == i]
        assert deltas[:2] == [{"role": "assistant", "content": ""}, {"content": SAYING}] and len(deltas) == 5
    out = api.post(CHAT, json={**body, "stream": False, "n": 1, "logprobs": True, "top_logprobs": 2}).json()
    assert out["prompt_logprobs"][0] is None and len(out["prompt_logprobs"]) == out["usage"]["prompt_tokens"]
    assert all(len(entry) <= 3 for entry in out["prompt_logprobs"][1:])     # its own token and 2 alternatives
    assert api.post(CHAT, json={**body, "stream": False, "n": 1}).json()["prompt_logprobs"] is None


@pytest.mark.parametrize("field,value,message", [
    ("temperature", -1, "temperature must be non-negative, got -1"),
    ("top_p", 0, "top_p must be in (0, 1], got 0"),
    ("top_p", 5, "top_p must be in (0, 1], got 5"),
    ("top_k", -5, "top_k must be 0 (disable), or at least 1, got -5."),
    ("min_p", 7, "min_p must be in [0, 1], got 7"),
    ("presence_penalty", 100, "presence_penalty must be in [-2, 2], got 100"),
    ("frequency_penalty", -1e308, "frequency_penalty must be in [-2, 2]"),
    ("repetition_penalty", 0, "repetition_penalty must be greater than zero, got 0"),
])
def test_sampling_ranges_are_vllms_400s_on_every_route(api, field, value, message):
    """vLLM's SamplingParams._verify_args ranges (found accepted by a fuzzing helper): a 400 whose
    message names the field, in each route's envelope; the edges stay accepted.  vLLM's
    VLLMValidationError names a parameter (and so ends in its suffix) for temperature and top_p
    only."""
    routes = [(CHAT, {"messages": MSGS, "max_tokens": 3}), ("/v1/completions", {"prompt": "hi", "max_tokens": 3}),
              ("/inference/v1/generate", None)]
    for path, body in routes:
        if body is None:
            r = api.post(path, json={"model": "test-model", "token_ids": [1, 2, 3],
                                     "sampling_params": {"max_tokens": 3, field: value}})
        else:
            r = api.post(path, json={"model": "test-model", **body, field: value})
        assert r.status_code == 400, (path, r.text)
        err = r.json()["error"]
        named = field in ("temperature", "top_p")
        assert message in err["message"] and err["param"] == (field if named else None), (path, err)
        assert (f". (parameter={field}, value=" in err["message"]) == named, (path, err)
    if field in ("temperature", "top_p", "top_k"):
        r = api.post("/v1/messages", json={"model": "test-model", "max_tokens": 3, "messages": MSGS, field: value})
        assert r.status_code == 400 and r.json()["type"] == "error" and message in r.json()["error"]["message"]
    if field in ("temperature", "top_p"):
        r = api.post("/v1/responses", json={"model": "test-model", "input": "hi", "max_output_tokens": 3, field: value})
        assert r.status_code == 400 and message in r.json()["error"]["message"]


def test_sampling_range_edges_are_accepted(api):
    for kw in ({"temperature": 0}, {"top_p": 1}, {"top_k": -1}, {"top_k": 0}, {"min_p": 0}, {"min_p": 1},
               {"presence_penalty": -2}, {"frequency_penalty": 2}, {"repetition_penalty": 1e-6}):
        chat(api, **kw)


def test_schema_errors_name_the_routes_own_fields(api):
    """A bad JSON schema on /v1/responses and /v1/messages names the field as that request spells
    it (the checks are chat-completions' and named `response_format.json_schema.schema`,
    `tools[0].function.parameters`: a fuzzing helper's report)."""
    bad = {"$ref": "#/nope"}
    r = api.post("/v1/responses", json={"model": "test-model", "input": "hi",
                                        "text": {"format": {"type": "json_schema", "name": "x", "schema": bad}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format.schema"
    assert "text.format.schema is not a valid JSON Schema" in r.json()["error"]["message"]
    r = api.post("/v1/responses", json={"model": "test-model", "input": "hi",
                                        "tools": [{"type": "function", "name": "f", "parameters": bad}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].parameters"
    msgs = {"model": "test-model", "max_tokens": 5, "messages": MSGS}
    r = api.post("/v1/messages", json={**msgs, "tools": [{"name": "f", "input_schema": {"type": "object",
                                                                                        "properties": {"a": bad}}}]})
    assert r.status_code == 400 and "tools[0].input_schema is not a valid JSON Schema" in r.json()["error"]["message"]
    r = api.post("/v1/messages", json={**msgs, "output_config": {"format": {"type": "json_schema", "schema": bad}}})
    assert r.status_code == 400 and "output_config.format.schema is not" in r.json()["error"]["message"]
