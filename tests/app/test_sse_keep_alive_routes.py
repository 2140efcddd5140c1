"""--sse-keep-alive-interval through the Flask app: the chat completions and completions streams
(vLLM 0.34's ``with_sse_keep_alive`` wraps those two routes' streams, and SageMaker's
``/invocations`` calls them) carry ``: keep-alive`` comments while queued, in prefill and between
tokens; no other route does; without the flag the SSE body is not wrapped.  The in-process
client has no hub emitter, so these streams are written by the request's greenlet
(:mod:`blueprints.sse_keep_alive`).  The interval is set to 0.4 s on the app's config (the flag
takes whole seconds; a real server's 1 s: tests/server/test_sse_keep_alive_server.py), with
every expected write 0.2 s away from a comment."""
from __future__ import annotations

import gevent
import pytest

from support import SimClient, INPROC_URL, make_app, sse_events

KA = ": keep-alive"
MSG = [{"role": "user", "content": "hi"}]
CHAT = {"model": "test-model", "messages": MSG, "max_tokens": 3, "ignore_eos": True, "stream": True}
COMPLETION = {"model": "test-model", "prompt": "hi", "max_tokens": 3, "ignore_eos": True, "stream": True}


def kept_alive(*flags: str, model: str = "test-model") -> SimClient:
    c = SimClient(INPROC_URL, app=make_app(*flags, "--sse-keep-alive-interval", "1", model=model))
    c.sim.config.sse_keep_alive_interval = 0.4
    return c


def events(text: str) -> list[str]:
    """The SSE body's events as ``": keep-alive"`` or ``"data"``, in order."""
    return [KA if e == KA else "data" for e in text.split("\n\n") if e]


KEPT = [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION), ("/invocations", CHAT),
        ("/invocations", COMPLETION), ("/v1/completions", {**COMPLETION, "n": 2})]
OTHERS = [
    ("/v1/messages", {"model": "test-model", "messages": MSG, "max_tokens": 3, "stream": True}),
    ("/v1/responses", {"model": "test-model", "input": "hi", "max_output_tokens": 3, "stream": True}),
    ("/inference/v1/generate", {"model": "test-model", "token_ids": [1, 2, 3], "stream": True,
                                "sampling_params": {"max_tokens": 3}}),
]


@pytest.fixture(scope="module")
def ttft():
    """Time to first token 1 s (comments at 0.4 and 0.8), then 100 ms between tokens (none): the
    streams of :data:`KEPT` and :data:`OTHERS` all at once (room for every sequence, none
    queued), so the module waits one second, not one a stream.  ``(path, index) -> response``."""
    c = kept_alive("--time-to-first-token", "1s", "--inter-token-latency", "100ms", "--max-num-seqs", "16")
    cases = [(path, i) for group in (KEPT, OTHERS) for i, (path, _) in enumerate(group)]
    bodies = [body for group in (KEPT, OTHERS) for _, body in group]
    sent = [gevent.spawn(c.post, path, json=body, timeout=30) for (path, _), body in zip(cases, bodies)]
    yield {(path, body.get("n", 1), "messages" in body): g.get() for (path, _), body, g in zip(cases, bodies, sent)}
    c.close()


def answer(ttft, path, body):
    return ttft[path, body.get("n", 1), "messages" in body]


@pytest.mark.parametrize("path, body", KEPT[:4])
def test_chat_and_completions_streams_keep_the_prefill_alive(ttft, path, body):
    r = answer(ttft, path, body)
    assert r.status_code == 200
    got = events(r.text)
    assert got[:3] == [KA, KA, "data"] and KA not in got[3:]
    assert sse_events(r.text)[-1] == "[DONE]"             # the data events are the stream's, unchanged


def test_several_choices_are_kept_alive_too(ttft):
    """``n`` > 1: the choices run in greenlets of their own and the body waits for their tokens."""
    r = answer(ttft, *KEPT[4])
    got = events(r.text)
    assert got[:3] == [KA, KA, "data"] and KA not in got[3:] and len(sse_events(r.text)) == 2 * 3 + 1


@pytest.mark.parametrize("path, body", OTHERS)
def test_no_other_route_keeps_its_stream_alive(ttft, path, body):
    r = answer(ttft, path, body)
    assert r.status_code == 200 and ": keep-alive" not in r.text


def test_the_gaps_between_tokens_are_kept_alive_when_longer_than_the_interval():
    c = kept_alive("--inter-token-latency", "1s")       # comments 0.4 and 0.8 after each token
    r = c.post("/v1/completions", json=COMPLETION, timeout=30)
    assert events(r.text) == ["data", KA, KA, "data", KA, KA, "data", "data"]       # the last token, [DONE]


def test_a_queued_request_is_kept_alive_while_it_waits():
    c = kept_alive("--max-num-seqs", "1", "--inter-token-latency", "100ms")
    first = gevent.spawn(c.post, "/v1/chat/completions", json={**CHAT, "max_tokens": 11}, timeout=30)   # 1 s
    gevent.sleep(0.01)
    queued = c.post("/v1/chat/completions", json=CHAT, timeout=30)      # waits ~0.99 s for the slot
    assert first.get().status_code == 200
    got = events(queued.text)
    assert got[:3] == [KA, KA, "data"] and KA not in got[3:]


def test_step_mode_keeps_a_remote_prefill_alive():
    # the KV of 3,000 prompt tokens (128 KiB each) at 0.4 GB/s: ~0.98 s before the first token
    c = kept_alive("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "8192",
                   "--kv-transfer-bandwidth", "0.4", model="meta-llama/Llama-3.1-8B-Instruct")
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
          "remote_host": "h", "remote_port": 1}
    body = {"prompt": list(range(100, 3100)), "max_tokens": 3, "ignore_eos": True, "stream": True,
            "kv_transfer_params": kv}
    r = c.post("/v1/completions", json=body, timeout=30)
    got = events(r.text)
    assert got[:3] == [KA, KA, "data"] and KA not in got[3:]


def test_without_the_flag_the_stream_is_not_wrapped(monkeypatch):
    import blueprints.serving

    def unexpected(*_a, **_k):
        raise AssertionError("with_sse_keep_alive called without --sse-keep-alive-interval")
    monkeypatch.setattr(blueprints.serving, "with_sse_keep_alive", unexpected)
    c = SimClient(INPROC_URL, app=make_app("--time-to-first-token", "500ms"))
    r = c.post("/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200 and ": keep-alive" not in r.text and sse_events(r.text)[-1] == "[DONE]"
