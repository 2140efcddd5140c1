"""A streamed answer with stop strings (and no ``include_stop_str_in_output``) holds back the
last (longest stop string's length - 1) characters of its text until it finishes, as vLLM 0.34's
``BaseIncrementalDetokenizer.get_next_output_text`` (``v1/engine/detokenizer.py``, its
``stop_buffer_length``): a partial stop string is never streamed, the final delta carries the
rest of the cut text.  Each delta still carries its tokens' ids and logprobs (the output
processor's ``_new_completion_output``), and completions' ``text_offset`` follows the tokens
(``completion_stream_generator``: "text held back for stop strings lags the tokens").  In echo
mode the answer to "one two three four five" is the tokens "one ", "two ", "three ", "four ",
"five"."""
from __future__ import annotations

import gevent
import pytest

from support import external_ids, sse_events

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
PROMPT = "one two three four five"
MSGS = [{"role": "user", "content": PROMPT}]
CLOCK = ("--mode", "echo", "--time-to-first-token", "100ms", "--inter-token-latency", "20ms")


def events(api, path, body) -> list:
    r = api.post(path, json={"model": "test-model", "stream": True, **body})
    assert r.status_code == 200, r.text
    return [e for e in sse_events(r.text) if isinstance(e, dict)]


def by_choice(evs) -> dict:
    out: dict = {}
    for e in evs:
        for c in e.get("choices") or ():
            out.setdefault(c["index"], []).append(c)
    return out


def test_completions_deltas_hold_back_and_logprobs_follow_the_tokens(echo_api):
    evs = events(echo_api, COMPLETIONS, {"prompt": PROMPT, "stop": ["xx four"], "logprobs": 0,
                                         "return_token_ids": True})
    chunks = by_choice(evs)[0]
    # 6 characters held back ("xx four": 7): "one " -> "", "one two " -> "on", "one two three "
    # -> "e two ", ... and the last (finished) delta the rest; no stop string matched
    assert [c["text"] for c in chunks] == ["", "on", "e two ", "three", " four five"]
    assert [c["logprobs"]["tokens"] for c in chunks] == [["one "], ["two "], ["three "], ["four "], ["five"]]
    assert [c["logprobs"]["text_offset"] for c in chunks] == [[0], [4], [8], [14], [19]]
    assert [len(c["token_ids"]) for c in chunks] == [1] * 5
    assert [c["finish_reason"] for c in chunks] == [None] * 4 + ["stop"]
    assert chunks[-1]["stop_reason"] is None


def test_the_cut_text_is_flushed_with_the_stop(echo_api):
    evs = events(echo_api, COMPLETIONS, {"prompt": PROMPT, "stop": [" four", "zzzzzzz"]})
    chunks = by_choice(evs)[0]
    # the longest stop string sets the holdback (6): "one two three " -> "one two ", then the
    # token completing " four" finishes it with the rest of "one two three"
    assert [c["text"] for c in chunks] == ["", "on", "e two ", "three"]
    assert chunks[-1]["finish_reason"] == "stop" and chunks[-1]["stop_reason"] == " four"
    plain = echo_api.post(COMPLETIONS, json={"model": "test-model", "prompt": PROMPT,
                                             "stop": [" four", "zzzzzzz"]}).json()["choices"][0]
    assert plain["text"] == "one two three" and plain["stop_reason"] == " four"


@pytest.mark.parametrize("n", [1, 2])
def test_chat_deltas_hold_back_for_each_choice(echo_api, n):
    evs = events(echo_api, CHAT, {"messages": MSGS, "stop": [" three", "fi"], "n": n})
    choices = by_choice(evs)
    assert sorted(choices) == list(range(n))
    for entries in choices.values():
        assert entries[0]["delta"] == {"role": "assistant", "content": ""}
        # 5 held back: "one " -> "", "one two " -> "one", then the rest of "one two"
        assert [e["delta"] for e in entries[1:]] == [{"content": ""}, {"content": "one"}, {"content": " two"}]
        assert entries[-1]["finish_reason"] == "stop" and entries[-1]["stop_reason"] == " three"


def test_include_stop_str_in_output_holds_nothing_back(echo_api):
    evs = events(echo_api, CHAT, {"messages": MSGS, "stop": [" three"], "include_stop_str_in_output": True})
    assert [e["delta"].get("content") for e in by_choice(evs)[0][1:]] == ["one ", "two ", "three"]
    evs = events(echo_api, COMPLETIONS, {"prompt": PROMPT, "stop": ["two"], "include_stop_str_in_output": True})
    assert [c["text"] for c in by_choice(evs)[0]] == ["one ", "two"]


def test_a_one_character_stop_holds_nothing_back(echo_api):
    evs = events(echo_api, COMPLETIONS, {"prompt": PROMPT, "stop": ["h"]})
    assert [c["text"] for c in by_choice(evs)[0]] == ["one ", "two ", "t"]


def test_messages_stop_sequences_hold_back(echo_api):
    """/v1/messages streams vLLM's chat deltas as text_delta events; an empty one sends none."""
    r = echo_api.post("/v1/messages", json={"model": "test-model", "max_tokens": 50, "messages": MSGS,
                                            "stop_sequences": [" three"], "stream": True})
    evs = [e for e in sse_events(r.text) if isinstance(e, dict)]
    deltas = [e["delta"]["text"] for e in evs if e.get("type") == "content_block_delta"]
    assert deltas == ["one", " two"]
    end = next(e for e in evs if e.get("type") == "message_delta")
    assert end["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": " three"}


def test_a_stream_interval_group_holds_back_the_same(app_client):
    api = app_client("--mode", "echo", "--stream-interval", "2")
    evs = events(api, COMPLETIONS, {"prompt": PROMPT, "stop": ["xx four"]})
    # the first token alone, then two a chunk: the group's delta is the text its tokens released
    assert [c["text"] for c in by_choice(evs)[0]] == ["", "one two ", "three four five"]


ALPHAS = " ".join(["alpha"] * 200)


def _sent_text(api: str, text: str) -> tuple[str, str]:
    """(the text the stream's deltas carried, its last delta) of an aborted stream."""
    evs = [e for e in sse_events(text) if isinstance(e, dict)]
    if api == "completions":
        deltas = [c["text"] for e in evs for c in e.get("choices") or ()]
    elif api == "chat":
        deltas = [c["delta"].get("content") or "" for e in evs for c in e.get("choices") or ()]
    elif api == "messages":
        deltas = [e["delta"]["text"] for e in evs if e.get("type") == "content_block_delta"]
    elif api == "responses":
        deltas = [e["delta"] for e in evs if e.get("type") == "response.output_text.delta"]
        done = next(e for e in evs if e.get("type") == "response.output_text.done")
        assert done["text"] == "".join(deltas)
    else:
        deltas = [e["delta"]["message"]["content"]["text"] for e in evs if e.get("type") == "content-delta"]
    deltas = [d for d in deltas if d]
    return "".join(deltas), deltas[-1]


@pytest.mark.parametrize("api", ["completions", "chat", "messages", "responses", "cohere"])
def test_an_aborted_stream_flushes_the_held_back_text(app_client, api):
    """The server's abort (abort_requests) is a final output: get_next_output_text(finished=True)
    sends the text held back, on the abort's own chunk (event)."""
    c = app_client(*CLOCK, env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_ENABLE_COHERE_API": "1"})
    msgs = [{"role": "user", "content": ALPHAS}]
    path, body = {
        "completions": (COMPLETIONS, {"prompt": ALPHAS, "stop": ["zzzzz"], "max_tokens": 300}),
        "chat": (CHAT, {"messages": msgs, "stop": ["zzzzz"], "max_tokens": 300}),
        "messages": ("/v1/messages", {"messages": msgs, "stop_sequences": ["zzzzz"], "max_tokens": 300}),
        "responses": ("/v1/responses", {"input": ALPHAS, "stop": ["zzzzz"], "max_output_tokens": 300}),
        "cohere": ("/cohere/v2/chat", {"messages": msgs, "stop_sequences": ["zzzzz"], "max_tokens": 300}),
    }[api]
    rid = f"held-{api}"
    if api == "responses":          # its id is the body's request_id (vLLM's), not the header's
        body["request_id"] = f"resp_{rid}"
    job = gevent.spawn(c.post, path, json={"model": "test-model", "stream": True, **body}, headers={"X-Request-Id": rid})
    gevent.sleep(0.4)
    r = c.post("/inference/v1/abort_requests", json={"request_ids": external_ids(path, rid)})
    assert r.status_code == 200
    text, last = _sent_text(api, job.get(timeout=10).text)
    made = text.count("alpha")
    assert 1 < made < 200
    assert text == "alpha " * made
    assert last.endswith("pha ")              # 4 held back ("zzzzz": 5), of the last "alpha "


def test_responses_honours_stop_and_holds_back(echo_api):
    """vLLM's ResponsesRequest.to_sampling_params passes stop, stop_token_ids and
    include_stop_str_in_output on (the simulator checked them and then ignored them).  Its stream
    sends no output_text.delta for an output without text (resolve_target_state: empty content
    is NONE), so the held-back first token sends none."""
    body = {"model": "test-model", "input": PROMPT, "stop": [" three"]}
    r = echo_api.post("/v1/responses", json=body).json()
    assert r["status"] == "completed" and r["output"][0]["content"][0]["text"] == "one two"
    kept = echo_api.post("/v1/responses", json={**body, "include_stop_str_in_output": True}).json()
    assert kept["output"][0]["content"][0]["text"] == "one two three"
    evs = events(echo_api, "/v1/responses", {"input": PROMPT, "stop": [" three"]})
    assert [e["delta"] for e in evs if e["type"] == "response.output_text.delta"] == ["one", " two"]
    done = next(e for e in evs if e["type"] == "response.output_text.done")
    assert done["text"] == "one two"
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    ids = echo_api.post("/v1/completions", json={"model": "test-model", "prompt": PROMPT, "max_tokens": 5,
                                                 "return_token_ids": True}).json()["choices"][0]["token_ids"]
    r = echo_api.post("/v1/responses", json={"model": "test-model", "input": PROMPT,
                                             "stop_token_ids": [ids[2]]}).json()
    assert r["output"][0]["content"][0]["text"] == "one two "
    assert r["usage"]["output_tokens"] == 3


def test_cohere_sends_no_empty_content_delta(app_client):
    """vLLM's Cohere v2 stream turns chat deltas into content-delta events ``if delta.content``:
    the held-back first token sends none, and the block opens with the first text."""
    c = app_client("--mode", "echo", env={"VLLM_ENABLE_COHERE_API": "1"})
    r = c.post("/cohere/v2/chat", json={"model": "test-model", "messages": MSGS, "stop_sequences": [" three"],
                                        "stream": True})
    evs = [e for e in sse_events(r.text) if isinstance(e, dict)]
    assert [e["type"] for e in evs] == ["message-start", "content-start", "content-delta", "content-delta",
                                        "content-end", "message-end"]
    assert [e["delta"]["message"]["content"]["text"] for e in evs if e["type"] == "content-delta"] == ["one", " two"]
    assert evs[-1]["delta"]["finish_reason"] == "STOP_SEQUENCE"


def test_chat_logprobs_and_token_ids_stay_with_their_tokens(echo_api):
    evs = events(echo_api, CHAT, {"messages": MSGS, "stop": ["xx four"], "logprobs": True, "return_token_ids": True})
    chunks = by_choice(evs)[0][1:]
    assert [c["delta"]["content"] for c in chunks] == ["", "on", "e two ", "three", " four five"]
    assert [[e["token"] for e in c["logprobs"]["content"]] for c in chunks] == [
        ["one "], ["two "], ["three "], ["four "], ["five"]]
    assert [len(c["token_ids"]) for c in chunks] == [1] * 5


def test_generate_text_mode_holds_back(api):
    """/inference/v1/generate's text mode streams each output's text (vLLM's token-in/token-out
    serving: "text mode also emits text held back for stop string matching")."""
    body = {"model": "test-model", "token_ids": [1, 2, 3], "output_mode": "text",
            "sampling_params": {"max_tokens": 8, "ignore_eos": True, "seed": 1, "logprobs": 0}}
    full = api.post("/inference/v1/generate", json=body).json()["choices"][0]
    tokens = [e["token"] for e in full["logprobs"]["content"]]
    text = "".join(tokens)
    stop = text[len(tokens[0]) + 2:len(tokens[0]) + 6]      # inside the second token or after
    assert text.find(stop) == len(tokens[0]) + 2
    body["sampling_params"]["stop"] = [stop]
    r = api.post("/inference/v1/generate", json={**body, "stream": True})
    chunks = [c for e in sse_events(r.text) if isinstance(e, dict) for c in e["choices"]]
    cut = text[:text.find(stop)]
    sent, want, so_far = 0, [], ""
    for t in tokens[:len(chunks) - 1]:
        so_far += t
        upto = len(so_far) - 3                                   # "xxxx": 3 held back
        want.append(so_far[sent:upto] if upto > sent else "")
        sent = max(sent, upto)
    want.append(cut[sent:])
    assert [c["text"] for c in chunks] == want
    assert (chunks[-1]["finish_reason"], chunks[-1]["stop_reason"]) == ("stop", stop)
