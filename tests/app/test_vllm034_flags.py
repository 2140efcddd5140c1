"""vLLM 0.34's serve flags that take effect here, in-process: the admission limits
``--max-num-queued-reqs`` / ``--max-num-queued-tokens`` (503, ``vllm:admission_rejections``) in
both latency modes, ``--fingerprint-mode`` / ``--fingerprint-value``, several ``--api-key``\\ s and
``--log-error-stack``.  The parser: tests/unit/test_vllm_serve_flags.py; TLS and the access log:
tests/unit/test_tls_config.py, tests/unit/test_access_log_filter.py."""
from __future__ import annotations

import logging
import time

import gevent

from support import metric, scrape

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
BUSY = {"error": {"message": "The engine is currently busy and cannot accept new requests. Please try again later "
                             "or on a different instance.", "type": "Service Unavailable", "param": None, "code": 503}}
BACKLOG = {"error": {"message": "The engine has reached its prefill token backlog limit. Please try again later or "
                                "on a different instance.", "type": "Service Unavailable", "param": None,
                     "code": 503}}


def wait_until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout}s"
        gevent.sleep(0.01)


def gauges(c) -> tuple[float, float]:
    m = scrape(c)
    return metric(m, "vllm:num_requests_running"), metric(m, "vllm:num_requests_waiting")


def rejections(c, reason: str) -> float:
    return metric(scrape(c), "vllm:admission_rejections_total", reason=reason)


def chat(c, **kw):
    return c.post(CHAT, json={"model": "test-model", "messages": MSG, "max_tokens": 2, **kw}, timeout=30)


# ---- admission limits -----------------------------------------------------------------------------
def test_max_num_queued_reqs_refuses_with_503_what_would_exceed_it(app_client):
    # 0.8 s first tokens: seeing the first run and the checks made while it runs took up to
    # 0.36 s in-process beside two CPU-bound test processes (load 3)
    c = app_client("--max-num-seqs", "1", "--max-num-queued-reqs", "2", "--time-to-first-token", "800ms")
    first = gevent.spawn(chat, c)
    wait_until(lambda: gauges(c) == (1, 0), 3, "first running")
    r = chat(c, n=2)                           # 1 in flight + 2 choices > 2
    assert (r.status_code, r.json()) == (503, BUSY)
    second = gevent.spawn(chat, c)
    wait_until(lambda: gauges(c) == (1, 1), 3, "second waiting")
    r = c.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 2, "stream": True})
    assert (r.status_code, r.json()) == (503, BUSY)                       # a stream too, before its 200
    assert rejections(c, "max_num_queued_reqs") == 2
    assert [first.get().status_code, second.get().status_code] == [200, 200]
    assert chat(c, n=2).status_code == 200                               # nothing in flight any more


def test_max_num_queued_tokens_refuses_while_prefill_backlog_reaches_it(app_client):
    c = app_client("--max-num-seqs", "1", "--max-num-queued-tokens", "1", "--time-to-first-token", "800ms",
                   "--inter-token-latency", "800ms", "--response-length", "max")   # 2 tokens: 0.8 s of decode
    first = gevent.spawn(chat, c)
    wait_until(lambda: gauges(c) == (1, 0), 3, "first running")
    r = chat(c)                                # the first is still before its first token
    assert (r.status_code, r.json()) == (503, BACKLOG)
    assert rejections(c, "max_num_queued_tokens") == 1
    wait_until(lambda: c.sim.running_seqs and all(s.first_token_at for s in c.sim.running_seqs), 5,
               "first token out")
    second = gevent.spawn(chat, c)             # decoding requests hold no prefill tokens
    wait_until(lambda: gauges(c) == (1, 1), 3, "second waiting")
    assert chat(c).json() == BACKLOG           # the waiting one's prompt counts
    assert [first.get().status_code, second.get().status_code] == [200, 200]


def test_admission_limits_in_step_mode(app_client):
    def client(*flags):
        return app_client("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-num-seqs", "1",
                          *flags, model=LLAMA)

    def completion(c, tokens: int, max_tokens: int = 1):
        return c.post("/v1/completions", json={"model": LLAMA, "prompt": list(range(100, 100 + tokens)),
                                               "max_tokens": max_tokens, "ignore_eos": True}, timeout=60)

    def decoding(c):
        running = c.sim.engine.scheduler.running
        return len(running) == 1 and running[0].num_output > 0

    for flags, refusal, reason in ((("--max-num-queued-reqs", "2"), BUSY, "max_num_queued_reqs"),
                                   (("--max-num-queued-tokens", "100"), BACKLOG, "max_num_queued_tokens")):
        c = client(*flags)
        first = gevent.spawn(completion, c, 100, 200)         # ~1.4 s of decode steps
        wait_until(lambda: decoding(c), 10, "first decoding")
        second = gevent.spawn(completion, c, 100, 1)          # admitted (a decode holds no prefill), waits
        wait_until(lambda: gauges(c) == (1, 1), 10, "second waiting")
        assert completion(c, 10).json() == refusal           # 2 in flight; or 100 prompt tokens waiting
        assert rejections(c, reason) == 1
        assert [first.get().status_code, second.get().status_code] == [200, 200]


# ---- system_fingerprint --------------------------------------------------------------------------
def test_fingerprint_modes(app_client):
    def fingerprint(*flags):
        return chat(app_client(*flags)).json()["system_fingerprint"]
    full = fingerprint()
    assert full.startswith("vllm-0.34.0-") and len(full.split("-")) == 3
    assert fingerprint("--fingerprint-mode", "hash") == full                 # no parallelism to strip
    tp = fingerprint("-tp", "2", "--data-parallel-size", "2")
    assert tp.startswith("vllm-0.34.0-tp2-dp2-")                             # vLLM's order: tp, pp, dp, ep
    every = fingerprint("-tp", "2", "-pp", "2", "-dp", "4", "--data-parallel-size-local", "2", "-ep")
    assert every.startswith("vllm-0.34.0-tp2-pp2-dp4-ep-")                   # the whole DP group's size
    assert fingerprint("-tp", "2", "--data-parallel-size", "2", "--fingerprint-mode", "hash").count("-") == 2
    assert fingerprint("--fingerprint-mode", "custom", "--fingerprint-value", "fp-7") == "fp-7"
    assert fingerprint("--fingerprint-mode", "custom") is None
    assert fingerprint("--fingerprint-mode", "none") is None


# ---- --api-key K1 K2 -------------------------------------------------------------------------------
def test_any_of_several_api_keys(app_client):
    c = app_client("--api-key", "k1", "k2")
    for key, status in (("k1", 200), ("k2", 200), ("k3", 401)):
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == status


# ---- --log-error-stack ---------------------------------------------------------------------------------
def test_log_error_stack_logs_error_responses_with_their_stack(app_client, caplog):
    bad = {"model": "test-model", "messages": MSG, "max_tokens": -1}
    for flags, env, logged in (((), None, False), (("--log-error-stack",), None, True),
                               ((), {"VLLM_SERVER_DEV_MODE": "1"}, True),
                               (("--no-log-error-stack",), {"VLLM_SERVER_DEV_MODE": "1"}, False)):
        c = app_client(*flags, env=env)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="vllm_sim"):
            assert c.post(CHAT, json=bad, headers={"X-Request-Id": "rid-1"}).status_code == 400
            assert c.get("/v1/models/nope").status_code == 404
        lines = [r for r in caplog.records if "caught. Request id:" in r.getMessage()]
        assert bool(lines) is logged, flags
        if logged:
            assert lines[0].getMessage().endswith("caught. Request id: rid-1") and lines[0].exc_info
