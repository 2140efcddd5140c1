"""A request the server aborts (``/inference/v1/abort_requests``, ``/checkpoint/prepare?mode=abort``)
finishes as vLLM 0.34's: ``OutputProcessor.abort_requests`` (and ``EngineCore._send_abort_outputs``)
hands it a final output with no new tokens and ``finish_reason`` ``abort``, so a chat or
completions stream closes each unfinished choice with an ``abort`` chunk, then the usage chunk
(the tokens streamed) and ``[DONE]``; a non-streamed request answers 200 with what was made.
Default (clock) mode and step mode; abort_requests names vLLM's external id of the engine
request, ``chatcmpl-<id>`` or ``cmpl-<id>-<i>`` (``<id>`` the header's or the body's
``request_id``), not the bare id."""
from __future__ import annotations

import json

import gevent
import pytest

from support import metric, scrape, sse_events, until_streaming

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
MSG = [{"role": "user", "content": "Hello there"}]
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer")
CLOCK = ("--time-to-first-token", "100ms", "--inter-token-latency", "20ms")


def _body(api: str, **extra) -> dict:
    body = {"model": "test-model", "max_tokens": 900, "ignore_eos": True, **extra}
    if api == "chat":
        body["messages"] = MSG
    else:
        body["prompt"] = "Hello there"
    return body


PATH = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def _start(c, api: str, rid: str, **extra):
    """The request in a greenlet, once it has streamed (or made) a few tokens."""
    job = gevent.spawn(c.post, PATH[api], json=_body(api, **extra), headers={"X-Request-Id": rid})
    deadline = gevent.get_hub().loop.now() + 5
    until_streaming(c, rid, 0.3, then=0)       # its first token (0.3 s at most, as a fixed wait was)
    while c.sim.running == 0 and not (c.sim.engine and c.sim.engine.scheduler.running) \
            and gevent.get_hub().loop.now() < deadline:
        gevent.sleep(0.01)
    gevent.sleep(0.1)
    return job


def _abort_by_id(c, rid: str, api: str = "chat"):
    """Abort by vLLM's external id: ``cmpl-<id>-0`` for completions' one prompt, else ``chatcmpl-<id>``
    (chat, Messages and Cohere are served as chat completions)."""
    external = f"cmpl-{rid}-0" if api == "completions" else f"chatcmpl-{rid}"
    r = c.post("/inference/v1/abort_requests", json={"request_ids": [external]})
    assert (r.status_code, r.content) == (200, b"")


def _check_stream(api: str, r, rid: str, n: int = 1):
    """The stream's chunks: tokens, one abort chunk per choice, the usage (tokens streamed), [DONE]."""
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    *chunks, usage = events[:-1]
    assert {ch["id"] for ch in chunks + [usage]} == {("chatcmpl-" if api == "chat" else "cmpl-") + rid}
    aborts = [ch for ch in chunks if ch["choices"] and ch["choices"][0]["finish_reason"] is not None]
    assert len(aborts) == n and chunks[-n:] == aborts           # the last chunks, one per choice
    if api == "chat":
        roles = chunks[:n]
        assert [ch["choices"][0]["delta"] for ch in roles] == [{"role": "assistant", "content": ""}] * n
        tokens = chunks[n:-n]
        assert all(ch["choices"][0]["finish_reason"] is None and "content" in ch["choices"][0]["delta"]
                   for ch in tokens)
        # vLLM 0.34's abort output after tokens: ChatStreamProcessor.step("") without a parser is
        # DeltaMessage(content="") (chat_completion/stream_processor.py); a finishing choice sets
        # stop_reason, token_ids and weight_versions (chat_completion/serving.py)
        # (DeltaMessage() for a choice cut before its first token)
        made = {ch["choices"][0]["index"] for ch in tokens}
        assert sorted((ch["choices"] for ch in aborts), key=lambda cs: cs[0]["index"]) == [
            [{"index": i, "delta": {"content": ""} if i in made else {}, "logprobs": None, "finish_reason": "abort",
              "stop_reason": None, "token_ids": None, "weight_versions": None}]
            for i in range(n)]
    else:
        tokens = chunks[:-n]
        assert all(ch["choices"][0]["finish_reason"] is None for ch in tokens)
        assert sorted((ch["choices"] for ch in aborts), key=lambda cs: cs[0]["index"]) == [
            [{"index": i, "text": "", "logprobs": None, "finish_reason": "abort", "stop_reason": None,
              "prompt_token_ids": None, "token_ids": None, "weight_versions": None}]
            for i in range(n)]
    assert n <= len(tokens) < 900 * n
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(tokens)
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + len(tokens)
    return tokens


def _check_answer(api: str, r, rid: str):
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["id"] == ("chatcmpl-" if api == "chat" else "cmpl-") + rid
    (choice,) = d["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("abort", None)
    made = d["usage"]["completion_tokens"]
    assert 1 <= made < 900 and d["usage"]["total_tokens"] == d["usage"]["prompt_tokens"] + made
    text = choice["message"]["content"] if api == "chat" else choice["text"]
    assert text
    return d


@pytest.mark.parametrize("mode", ["clock", "step"])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_abort_requests_ends_a_stream_with_abort_chunks(app_client, api, mode):
    c = app_client(*(CLOCK if mode == "clock" else STEP))
    before = metric(scrape(c), "vllm:request_success_total", finished_reason="abort")
    ttft = metric(scrape(c), "vllm:time_to_first_token_seconds_count")
    rid = f"{api}-{mode}-s"
    job = _start(c, api, rid, stream=True, stream_options={"include_usage": True})
    _abort_by_id(c, rid, api)
    job.join(5)
    tokens = _check_stream(api, job.value, rid)
    if api == "chat":
        text = "".join(ch["choices"][0]["delta"]["content"] for ch in tokens)
    else:
        text = "".join(ch["choices"][0]["text"] for ch in tokens)
    assert text
    assert c.sim.running == 0
    m = scrape(c)
    assert metric(m, "vllm:request_success_total", finished_reason="abort") == before + 1
    # vLLM's abort (AsyncLLM.abort -> OutputProcessor.abort_requests) records no per-request
    # stats: no e2e, token or phase histogram; its first token's TTFT was observed in its step
    for name in ("vllm:e2e_request_latency_seconds_count", "vllm:request_generation_tokens_count",
                 "vllm:request_prompt_tokens_count", "vllm:request_decode_time_seconds_count",
                 "vllm:request_params_max_tokens_count", "vllm:request_params_n_count"):
        assert metric(m, name) == 0, name
    assert metric(m, "vllm:time_to_first_token_seconds_count") == ttft + 1


@pytest.mark.parametrize("mode", ["clock", "step"])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_abort_requests_answers_a_non_streamed_request_with_what_it_made(app_client, api, mode):
    c = app_client(*(CLOCK if mode == "clock" else STEP))
    rid = f"{api}-{mode}-n"
    job = _start(c, api, rid)
    _abort_by_id(c, rid, api)
    job.join(5)
    _check_answer(api, job.value, rid)
    assert c.sim.running == 0


def test_the_bare_request_id_aborts_nothing(app_client):
    """vLLM matches the external id its serving layer gave the engine request (``chatcmpl-<id>``:
    ``OutputProcessor.external_req_ids``); the bare ``X-Request-Id`` is not one."""
    c = app_client(*CLOCK)
    job = _start(c, "chat", "x-1", max_tokens=20)
    r = c.post("/inference/v1/abort_requests", json={"request_ids": ["x-1"]})
    assert r.status_code == 200
    job.join(5)
    r = job.value
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


def test_a_body_request_id_is_matched_too(app_client):
    c = app_client(*CLOCK)
    job = gevent.spawn(c.post, "/v1/chat/completions", json=_body("chat", request_id="body-1", stream=True))
    until_streaming(c, "body-1", 0.3)
    _abort_by_id(c, "body-1")
    job.join(5)
    events = sse_events(job.value.text)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "abort"
    assert events[-2]["id"] == "chatcmpl-body-1"


def test_each_unfinished_choice_gets_its_abort_chunk(app_client):
    c = app_client(*CLOCK)
    job = _start(c, "chat", "n2", n=2, stream=True, stream_options={"include_usage": True})
    _abort_by_id(c, "n2")
    job.join(5)
    _check_stream("chat", job.value, "n2", n=2)
    job = _start(c, "completions", "n2c", n=2, stream=True, stream_options={"include_usage": True})
    _abort_by_id(c, "n2c", "completions")
    job.join(5)
    _check_stream("completions", job.value, "n2c", n=2)


def test_an_abort_before_the_first_token(app_client):
    """vLLM's abort output is then the request's first: chat's role chunk, the abort chunk,
    usage 0 tokens."""
    c = app_client("--time-to-first-token", "2s")
    job = gevent.spawn(c.post, "/v1/chat/completions", json=_body("chat", stream=True, logprobs=True,
                                                                  stream_options={"include_usage": True}),
                       headers={"X-Request-Id": "early"})
    gevent.sleep(0.2)
    _abort_by_id(c, "early")
    job.join(5)
    events = sse_events(job.value.text)
    role, fin, usage, done = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # no output before the abort: DeltaMessage() (stream_processor.py)
    assert fin["choices"] == [{"index": 0, "delta": {}, "logprobs": {"content": []}, "finish_reason": "abort",
                               "stop_reason": None, "token_ids": None, "weight_versions": None}]
    assert usage["usage"]["completion_tokens"] == 0 and done == "[DONE]"
    job = gevent.spawn(c.post, "/v1/completions", json=_body("completions"), headers={"X-Request-Id": "early-c"})
    gevent.sleep(0.2)
    _abort_by_id(c, "early-c", "completions")
    job.join(5)
    d = job.value.json()
    assert job.value.status_code == 200 and d["choices"][0]["text"] == "" and d["choices"][0]["finish_reason"] == "abort"
    assert d["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_checkpoint_prepare_abort_ends_requests_the_same_way(app_client, mode):
    c = app_client(*(CLOCK if mode == "clock" else STEP), "--enable-sleep-mode", env=DEV)
    s = _start(c, "chat", "cp-s", stream=True, stream_options={"include_usage": True})
    n = _start(c, "completions", "cp-n")
    assert c.post("/checkpoint/prepare", params={"mode": "abort"}).json() == {"state": "prepared"}
    gevent.joinall([s, n], timeout=5)
    _check_stream("chat", s.value, "cp-s")
    _check_answer("completions", n.value, "cp-n")
    assert c.post("/checkpoint/restore").json() == {"state": "running"}


# ---- Anthropic messages (vLLM 0.34 anthropic/serving.py: _to_anthropic_stop_reason maps "abort" to none) ----

def _events(text: str) -> list:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("event: "):
            name, data = block.split("\n", 1)
            out.append((name[len("event: "):], json.loads(data[len("data: "):])))
    return out


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_ends_a_messages_stream_with_a_null_stop_reason(app_client, mode):
    c = app_client(*(CLOCK if mode == "clock" else STEP))
    body = {"model": "test-model", "max_tokens": 900, "ignore_eos": True, "messages": MSG, "stream": True}
    job = gevent.spawn(c.post, "/v1/messages", json=body, headers={"X-Request-Id": f"m-{mode}"})
    until_streaming(c, f"m-{mode}", 0.4)
    _abort_by_id(c, f"m-{mode}")
    job.join(5)
    r = job.value
    assert r.status_code == 200
    events = _events(r.text)
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]       # no ping: vLLM 0.34 sends none
    deltas = [d for n, d in events if n == "content_block_delta"]
    assert 1 <= len(deltas) < 900 and names[2:2 + len(deltas)] == ["content_block_delta"] * len(deltas)
    assert names[2 + len(deltas):] == ["content_block_stop", "message_delta", "message_stop"]
    md = events[-2][1]
    assert md["delta"] == {"stop_reason": None, "stop_sequence": None}
    assert md["usage"]["output_tokens"] == len(deltas)
    assert c.sim.running == 0


def test_abort_requests_answers_a_messages_request_with_what_it_made(app_client):
    c = app_client(*CLOCK)
    body = {"model": "test-model", "max_tokens": 900, "ignore_eos": True, "messages": MSG}
    job = gevent.spawn(c.post, "/v1/messages", json=body, headers={"X-Request-Id": "m-n"})
    until_streaming(c, "m-n", 0.4)
    _abort_by_id(c, "m-n")
    job.join(5)
    d = job.value.json()
    assert job.value.status_code == 200 and d["id"] == "msg_m-n"
    # stop_reason and stop_sequence both None: vLLM's model_dump(exclude_none=True) leaves them out
    # (anthropic/api_router.py l. 83)
    assert "stop_reason" not in d and "stop_sequence" not in d
    assert d["content"][0]["type"] == "text" and d["content"][0]["text"]
    assert 1 <= d["usage"]["output_tokens"] < 900


# ---- Cohere v2 chat (vLLM 0.34 cohere/serving.py over chat's stream: "abort" maps to COMPLETE) ----------

def test_abort_requests_ends_a_cohere_stream_with_its_message_end(app_client):
    c = app_client(*CLOCK, env={"VLLM_ENABLE_COHERE_API": "1"})
    body = {"model": "test-model", "max_tokens": 900, "ignore_eos": True, "messages": MSG, "stream": True}
    job = gevent.spawn(c.post, "/cohere/v2/chat", json=body, headers={"X-Request-Id": "co-s"})
    until_streaming(c, "co-s", 0.3)
    _abort_by_id(c, "co-s")
    job.join(5)
    events = sse_events(job.value.text)
    assert job.value.status_code == 200 and events[-1] == "[DONE]"
    *head, end_block, end, _ = events
    assert [e["type"] for e in head[:2]] == ["message-start", "content-start"]
    deltas = head[2:]
    assert 1 <= len(deltas) < 900 and {e["type"] for e in deltas} == {"content-delta"}
    assert end_block == {"index": 0, "type": "content-end"}
    assert end["type"] == "message-end" and end["delta"]["finish_reason"] == "COMPLETE"
    assert end["delta"]["usage"]["tokens"]["output_tokens"] == len(deltas)
    assert c.sim.running == 0


def test_the_abort_chunk_carries_what_the_request_asked_for(app_client):
    """vLLM's abort output has no tokens: chat logprobs ``{"content": []}``, ``token_ids: []``,
    completions' empty logprobs lists; with continuous usage the chunk's usage counts the tokens
    streamed."""
    c = app_client(*CLOCK)
    opts = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    job = _start(c, "chat", "f-chat", logprobs=True, return_token_ids=True, **opts)
    _abort_by_id(c, "f-chat")
    job.join(5)
    *chunks, fin, use, done = sse_events(job.value.text)
    tokens = chunks[1:]
    assert fin["choices"] == [{"index": 0, "delta": {"content": ""}, "logprobs": {"content": []},
                               "finish_reason": "abort", "stop_reason": None, "token_ids": [], "weight_versions": None}]
    assert fin["usage"]["completion_tokens"] == len(tokens) == use["usage"]["completion_tokens"]
    assert all(len(ch["choices"][0]["token_ids"]) == 1 for ch in tokens)
    job = _start(c, "completions", "f-cmpl", logprobs=2, return_token_ids=True, **opts)
    _abort_by_id(c, "f-cmpl", "completions")
    job.join(5)
    *tokens, fin, use, done = sse_events(job.value.text)
    (choice,) = fin["choices"]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"], choice["token_ids"]) == ("", "abort", None, [])
    assert choice["logprobs"] == {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    assert fin["usage"]["completion_tokens"] == len(tokens) == use["usage"]["completion_tokens"]


def test_a_stream_interval_counts_the_tokens_its_groups_sent(app_client):
    c = app_client(*CLOCK, "--stream-interval", "3")
    job = _start(c, "completions", "si", stream=True, stream_options={"include_usage": True}, return_token_ids=True)
    _abort_by_id(c, "si", "completions")
    job.join(5)
    *groups, fin, use, done = sse_events(job.value.text)
    assert fin["choices"][0]["finish_reason"] == "abort" and fin["choices"][0]["token_ids"] == []
    sent = sum(len(g["choices"][0]["token_ids"]) for g in groups)
    assert len(groups) < sent == use["usage"]["completion_tokens"]


def test_an_abort_after_the_last_token_was_made_finds_nothing(app_client, monkeypatch):
    """A sequence that made its last token is finished in vLLM's engine (that step's output is
    the final one, ``length`` here): abort_requests then finds nothing.  A real server's hub
    sends a stream's last chunk and ends the stream up to FINISH_WITHIN later; an abort in
    between counted the request ``abort`` in the metrics though its client read ``length``.
    Here the abort's clock is moved past the last token of a request still running."""
    import blueprints.in_flight as in_flight          # _abort's module (moved from engine_ops)
    c = app_client(*CLOCK)
    before = {r: metric(scrape(c), "vllm:request_success_total", finished_reason=r) for r in ("abort", "length")}
    job = _start(c, "chat", "made-all", max_tokens=40)
    seq = next(iter(c.sim.running_seqs))
    from time import monotonic
    assert len(seq.ids) == 40 and seq.made_tokens(0.02, monotonic()) < 40
    late = monotonic() + 10
    monkeypatch.setattr(in_flight, "monotonic", lambda: late, raising=False)
    _abort_by_id(c, "made-all")
    job.join(5)
    r = job.value
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 40 and not seq.request.aborted_by_server
    m = scrape(c)
    assert metric(m, "vllm:request_success_total", finished_reason="abort") == before["abort"]
    assert metric(m, "vllm:request_success_total", finished_reason="length") == before["length"] + 1
