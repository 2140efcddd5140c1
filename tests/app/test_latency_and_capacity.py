"""Timing, capacity, P/D and Prometheus metrics in-process (cases C22, C23): queueing, 429s,
gauges, disconnect accounting, the latency model (load factor, KV transfer) and the
histograms.  Concurrent requests are greenlets on the engine's hub; a client disconnect is a
closed socket handed to the app as gunicorn hands it (``gunicorn.socket``), which is what the
disconnect watcher reads.  Wall-clock timing through the network: tests/server/test_stream_timing.py.

Tolerances hold on a loaded 2-core machine: lower bounds sit just under the configured time,
upper bounds at least 25 ms above it.  The simulator's own accuracy is measured by
bench/timing_fidelity.py, not here.
"""
from __future__ import annotations

import socket
import time

import gevent
import pytest
from werkzeug.test import EnvironBuilder

from support import metric, scrape, value

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def gauges(client) -> tuple[float, float]:
    m = scrape(client)
    return value(m, "vllm:num_requests_running"), value(m, "vllm:num_requests_waiting")


def wait_until(cond, timeout: float, what: str = "condition"):
    """Poll ``cond()`` (yielding to other greenlets) until true; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout}s"
        gevent.sleep(0.01)


def chat(client, **kw):
    return client.post(CHAT, json={"model": "test-model", "messages": MSG, **kw}, timeout=30)


class WsgiCall:
    """One request straight into the WSGI app, with a socket pair standing in for the client
    connection: ``leave()`` closes the client's end, as a client that goes away does."""

    def __init__(self, client, path: str, body: dict):
        self.client_sock, self._server_sock = socket.socketpair()
        self.environ = EnvironBuilder(path=path, method="POST", json=body).get_environ()
        self.environ["gunicorn.socket"] = self._server_sock
        self.app = client.app
        self.status = []
        self.body = None

    def start(self):
        """Call the app: a non-streaming request runs to its end here, a stream to its first
        chunk.  Returns the response body iterable."""
        self.body = self.app(self.environ, lambda status, headers, exc_info=None: self.status.append(status))
        return self.body

    def chunks(self):
        """The non-empty body chunks (starts the call if needed)."""
        for c in self.body if self.body is not None else self.start():
            if c:
                yield c

    def leave(self):
        self.client_sock.close()

    def close(self):
        """What the WSGI server does when the response is over (or the write failed)."""
        close = getattr(self.body, "close", None)       # None before start()
        if close is not None:
            close()
        self.client_sock.close()
        self._server_sock.close()


# ---- in-process: the latency model and the histograms -----------------------------------------
def test_load_factor_slows_concurrent_requests(app_client):
    # TTFT 800 ms: each request must be seen running before the first one ends, on a loaded
    # machine too (at 200 ms it failed once with 4 CPU hogs beside the suite, at 400 ms once at
    # load 5.8: the third request not seen running within 0.4 s)
    api = app_client("--time-to-first-token", "800ms", "--time-factor-under-load", "3", "--max-num-seqs", "3")

    def one():
        t0 = time.monotonic()
        assert chat(api, max_tokens=1).status_code == 200
        return time.monotonic() - t0

    greenlets = []
    for i in range(3):      # arrive in order: running count 1, 2, 3 at their starts
        greenlets.append(gevent.spawn(one))
        wait_until(lambda: gauges(api)[0] == i + 1, 0.8, f"request {i + 1} running")
    res = [g.get() for g in greenlets]
    assert 0.7 <= res[0] <= 1.6       # factor 1: 0.8 s
    assert 1.4 <= res[1] <= 2.6       # factor 2: 1.6 s
    assert 2.1 <= res[2] <= 3.6       # factor 3: 2.4 s


def test_remote_prefill_uses_kv_transfer_time(app_client):
    api = app_client("--kv-cache-transfer-latency", "300ms")
    t0 = time.monotonic()
    chat(api, max_tokens=1)
    plain = time.monotonic() - t0
    t0 = time.monotonic()
    r = chat(api, max_tokens=1, kv_transfer_params={"do_remote_prefill": True, "remote_engine_id": "e1",
                                                     "remote_block_ids": ["1"], "some_future_key": 3})
    remote = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["kv_transfer_params"] is None
    assert plain < 0.15 and 0.27 <= remote <= 0.6


def test_metrics_measure_latency(app_client):
    # TTFT 150 ms sits mid-bucket (0.1, 0.25]; ITL 125 ms mid-bucket (0.1, 0.15].
    api = app_client("--time-to-first-token", "150ms", "--inter-token-latency", "125ms")
    chat(api, max_tokens=4, ignore_eos=True)
    m = scrape(api)
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.1") == 0
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.25") == 1
    assert value(m, "vllm:inter_token_latency_seconds_bucket", le="0.1") == 0
    assert value(m, "vllm:inter_token_latency_seconds_bucket", le="0.15") == 3
    assert 0.5 <= value(m, "vllm:e2e_request_latency_seconds_sum") <= 0.8


def test_c22_metric_names_and_deltas(api):
    r = api.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in r.text
    before = scrape(api)
    assert 0 <= value(before, "vllm:kv_cache_usage_perc") <= 1
    prompt_total = 0
    for _ in range(3):
        prompt_total += chat(api, max_tokens=5, ignore_eos=True).json()["usage"]["prompt_tokens"]
    after = scrape(api)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:time_to_first_token_seconds_count") == 3
    assert delta("vllm:e2e_request_latency_seconds_count") == 3
    assert delta("vllm:request_success_total", finished_reason="length") == 3
    assert delta("vllm:generation_tokens_total") == 15
    assert delta("vllm:prompt_tokens_total") == prompt_total
    assert delta("vllm:request_generation_tokens_count") == 3
    assert delta("vllm:request_params_max_tokens_sum") == 15
    assert delta("vllm:inter_token_latency_seconds_count") == 12
    for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_time_per_output_token_seconds", "vllm:request_prompt_tokens",
              "vllm:request_max_num_generation_tokens", "vllm_sim:token_emission_lag_seconds"):
        assert (h + "_bucket", frozenset({"le": "+Inf", "model_name": "test-model", "engine": "0"}.items())) in after, h
        assert (h + "_sum", frozenset({"model_name": "test-model", "engine": "0"}.items())) in after
    assert metric(after, "vllm:cache_config_info", block_size="16", num_gpu_blocks="1024", engine="0",
                  kv_cache_size_tokens="16384", kv_cache_max_concurrency="16.0") == 1     # and vLLM's other labels


def test_remote_decode_finish_and_params(api):
    body = chat(api, max_tokens=5, kv_transfer_params={"do_remote_decode": True}).json()
    assert body["choices"][0]["finish_reason"] == "remote_decode"
    kv = body["kv_transfer_params"]
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert kv["remote_block_ids"] and kv["remote_engine_id"] and kv["remote_host"] and kv["remote_port"] > 0
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "x", "max_tokens": 2,
                                          "kv_transfer_params": {"do_remote_decode": True}})
    assert r.json()["choices"][0]["finish_reason"] == "remote_decode"
    r = chat(api, stream=True, kv_transfer_params={"do_remote_decode": True})
    assert r.status_code == 400 and "Prefill does not support streaming" in r.json()["error"]["message"]


def test_a_prefills_cache_hits_are_what_its_decode_reports(app_client):
    """vLLM 0.34: the prefill's answer carries its prefix hits (``remote_prefill_cached_tokens``,
    ``Scheduler.update_from_output``) and the decode reports them as its ``cached_tokens``
    (``OutputProcessor``), not its own near-100% hit from the transfer."""
    c = app_client("--enable-kvcache", "--block-size", "16", "--enable-prompt-tokens-details", "--zmq-endpoint", "")
    msgs = [{"role": "user", "content": " ".join(f"w{i}" for i in range(300))}]
    chat(c, messages=msgs, max_tokens=2)                        # warms the prefill pod's cache
    pre = chat(c, messages=msgs, max_tokens=1, kv_transfer_params={"do_remote_decode": True}).json()
    hits = pre["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert hits > 0 and pre["kv_transfer_params"]["remote_prefill_cached_tokens"] == hits
    dec = chat(c, messages=msgs, max_tokens=2, kv_transfer_params={**pre["kv_transfer_params"],
                                                                   "remote_prefill_cached_tokens": 48}).json()
    assert dec["usage"]["prompt_tokens_details"]["cached_tokens"] == 48


# ---- in-process: capacity, queue and disconnects ----------------------------------------------
def test_c23_running_and_waiting_gauges(app_client):
    # T = 600 ms: TTFTs are T, T (running), 2T, 2T (waited T), 3T (waited 2T); each lands at
    # least 150 ms inside its bucket (0.75, 2.5; above 1.0), and the gauges hold 2 / 3 for T
    # (0.5 s to see them: a loaded 2-core machine may take 0.3 s to let five requests in).
    api = app_client("--max-num-seqs", "2", "--time-to-first-token", "600ms")
    before = scrape(api)
    greenlets = [gevent.spawn(lambda: chat(api, max_tokens=2).status_code) for _ in range(5)]
    wait_until(lambda: gauges(api) == (2, 3), 0.5, "2 running, 3 waiting")
    assert [g.get() for g in greenlets] == [200] * 5
    assert gauges(api) == (0, 0)
    after = scrape(api)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    # queued requests show their queue time, and TTFT includes it
    # two waited T, one 2T: 2.4 s, less what the later arrivals' lag took off their waits (at most
    # the 150 ms each the buckets below allow: 2.26 under a full suite once)
    assert 1.95 <= delta("vllm:request_queue_time_seconds_sum") <= 2.8
    assert delta("vllm:time_to_first_token_seconds_bucket", le="2.5") == 5
    assert delta("vllm:time_to_first_token_seconds_bucket", le="1.0") == 2
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.75") == 2
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.5") == 0


def test_429_when_queue_full_also_for_streams(app_client):
    api = app_client("--max-num-seqs", "1", "--max-waiting-queue-length", "1", "--time-to-first-token", "1s")

    def one(stream=False):
        r = chat(api, max_tokens=1, stream=stream)
        return r.status_code, r.headers["content-type"], r.json() if r.status_code != 200 else None

    first = gevent.spawn(one)
    wait_until(lambda: gauges(api) == (1, 0), 2.0, "first running")
    second = gevent.spawn(one)
    wait_until(lambda: gauges(api) == (1, 1), 2.0, "second waiting")
    rejected = [one(), one(stream=True)]        # the queue is full while the first runs
    assert gauges(api) == (1, 1)
    res = [first.get(), second.get()] + rejected
    assert [r[0] for r in res] == [200, 200, 429, 429]
    for status, ctype, body in rejected:
        assert ctype.startswith("application/json")
        assert body["error"]["type"] == "RateLimitError" and body["error"]["code"] == 429
        assert "waiting requests queue is full" in body["error"]["message"]


def test_zero_queue_and_prompt_array_fail_fast(app_client):
    api = app_client("--max-num-seqs", "2", "--max-waiting-queue-length", "0", "--time-to-first-token", "100ms")
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": ["a", "b", "c"]})
    assert r.status_code == 429
    assert gauges(api) == (0, 0)                      # nothing was left admitted
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": ["a", "b"]})
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


def success_total(samples: dict) -> float:
    return sum(v for (n, _), v in samples.items() if n == "vllm:request_success_total")


def test_disconnect_aborts_and_frees_the_slot(app_client):
    # A stream closed during TTFT, and a queued non-stream request whose client gives up.
    # TTFT 1.5 s: every step below takes a few ms (up to a few hundred on a loaded 2-core
    # machine, where 0.5 s was once not enough), so neither can have finished on its own.
    ttft = 1.5
    api = app_client("--max-num-seqs", "1", "--time-to-first-token", "1500ms", "--inter-token-latency", "10ms")
    before = scrape(api)
    t_start = time.monotonic()
    stream = WsgiCall(api, CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 5, "stream": True})
    stream.start()
    assert stream.status == ["200 OK"]
    reader = gevent.spawn(lambda: list(stream.chunks()))
    wait_until(lambda: gauges(api) == (1, 0), 0.5, "stream running")
    queued = WsgiCall(api, CHAT, {"model": "test-model", "messages": MSG, "max_tokens": 5})
    waiter = gevent.spawn(lambda: list(queued.chunks()))
    wait_until(lambda: gauges(api) == (1, 1), 0.5, "second request waiting")
    queued.leave()
    wait_until(lambda: gauges(api) == (1, 0), 0.5, "queued request left the queue")
    stream.leave()
    wait_until(lambda: gauges(api) == (0, 0), 5.0, "stream aborted")
    assert time.monotonic() - t_start < ttft          # before either could finish on its own
    assert b"content" not in b"".join(reader.get(timeout=5))
    waiter.get(timeout=5)
    stream.close()
    queued.close()
    t0 = time.monotonic()
    r = chat(api, max_tokens=2)
    assert r.status_code == 200 and time.monotonic() - t0 < 1.6 * ttft   # not stuck behind the aborted ones
    after = scrape(api)
    assert success_total(after) - success_total(before) == 3          # one success and two aborts
    assert by_reason(after, "abort") - by_reason(before, "abort") == 2
    # neither aborted request got past its prefill: no tokens of theirs are counted (issue 31 item 7)
    assert value(after, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total") == \
        r.json()["usage"]["completion_tokens"]
    assert value(after, "vllm:prompt_tokens_total") - value(before, "vllm:prompt_tokens_total") == \
        r.json()["usage"]["prompt_tokens"]


def by_reason(samples: dict, reason: str) -> float:
    return sum(v for (n, labels), v in samples.items()
               if n == "vllm:request_success_total" and ("finished_reason", reason) in labels)


def test_disconnect_mid_stream(app_client):
    # 50 tokens 20 ms apart; the client leaves after 3 chunks.  Both ways a WSGI server ends a
    # response free the slot long before the 1 s the stream would take: the watcher seeing the
    # closed socket, and the server closing the body after a failed write.
    api = app_client("--max-num-seqs", "1", "--inter-token-latency", "20ms")
    body = {"model": "test-model", "messages": MSG, "max_tokens": 50, "ignore_eos": True, "stream": True}
    for how in ("leave", "close"):
        call = WsgiCall(api, CHAT, body)
        t0 = time.monotonic()
        chunks = call.chunks()
        got = 0
        while got < 3:
            got += next(chunks).count(b"data: {")
        if how == "leave":
            call.leave()            # the client's socket closes; the body is left suspended
        else:
            call.body.close()       # the server stops the body; the client's socket stays open
        wait_until(lambda: gauges(api)[0] == 0, 5.0, f"slot freed ({how})")
        assert time.monotonic() - t0 < 0.6
        call.close()


@pytest.mark.parametrize("mode", [(), ("--latency-calculator", "step")])
def test_aborted_streams_are_counted_as_vllm_counts_them(app_client, mode):
    """Ten streams read for a while and then dropped had received 2,394 tokens, yet no counter
    moved (issue 31 item 7): an aborted request counts its prompt, the tokens made until the
    abort (at least those sent; vLLM counts each engine step's) and one
    ``request_success{finished_reason="abort"}``, so that successes + aborts = requests sent."""
    api = app_client("--max-num-seqs", "8", "--inter-token-latency", "20ms", *mode)
    body = {"model": "test-model", "messages": MSG, "max_tokens": 100, "ignore_eos": True, "stream": True}
    before = scrape(api)
    calls, received = [], 0
    t0 = time.monotonic()
    for _ in range(5):
        call = WsgiCall(api, CHAT, body)
        chunks = call.chunks()
        got = 0
        while got < 4:              # the role chunk, then 3 tokens
            got += next(chunks).count(b"data: {")
        received += got - 1
        calls.append(call)
    done = chat(api, max_tokens=3, ignore_eos=True).json()["usage"]
    for call in calls:
        call.leave()
    wait_until(lambda: gauges(api) == (0, 0), 5.0, "streams aborted")   # 0.5 s failed once on a loaded CI run
    # tokens the five could have made before they were aborted: at the ITL, or (step mode) at
    # the engine's steps' pace
    due = 5 * (1 + (time.monotonic() - t0) / 0.020) if not mode else 5 * 100
    for call in calls:
        call.close()
    after = scrape(api)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)
    assert by_reason(after, "abort") - by_reason(before, "abort") == 5
    assert by_reason(after, "stop") - by_reason(before, "stop") + by_reason(after, "length") - \
        by_reason(before, "length") == 1
    assert success_total(after) - success_total(before) == 6           # every request sent
    assert delta("vllm:prompt_tokens_total") == 6 * done["prompt_tokens"]
    made = delta("vllm:generation_tokens_total") - done["completion_tokens"]
    # at least what the clients received, at most what the engine could make before the abort
    # (tokens are made whether or not a client reads them, as vLLM's steps make them)
    assert received <= made <= due, (received, made, due)
    # vLLM observes a request's time to first token in the step that makes it
    # (IterationStats.update_from_output), aborted later or not: the five aborted streams too
    assert delta("vllm:time_to_first_token_seconds_count") == 6
    if not mode:
        # without the step engine, their prefill step and 1-token steps are counted as a finished
        # request's are: every computed prompt token and generated token is in some step
        assert delta("vllm:iteration_tokens_total_sum") == \
            delta("vllm:prompt_tokens_by_source_total", source="local_compute") + \
            delta("vllm:generation_tokens_total")
        assert delta("vllm:iteration_tokens_total_count") == delta("vllm:generation_tokens_total")
