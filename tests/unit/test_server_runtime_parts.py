"""Pieces of the server runtime (server/), one at a time: the start-up summary, --log-http
redaction, the API-key middleware, the self-signed certificate, and accept batching."""
from __future__ import annotations

import logging

import pytest


def test_startup_summary_names_model_mode_tokenizer_latency_capacity_kv_and_url():
    from server.serve import startup_summary
    from generation.config.cli import load_config
    cfg = load_config(["my-org/m", "--mode", "echo", "--time-to-first-token", "150ms", "--max-num-seqs", "8",
                       "--enable-kvcache", "--port", "9001", "--host", "127.0.0.1"], env={"POD_IP": "10.0.0.5"})
    lines = startup_summary(cfg, tls=True, api_key=True)
    text = "\n".join(lines)
    assert "model=my-org/m" in lines[0] and "mode=echo" in lines[0] and "tokenizer=" in lines[0]
    assert "ttft=150ms" in text and "max-num-seqs=8" in text
    assert "kv cache: 1024 blocks x 16 tokens, prefix caching on, events to tcp://127.0.0.1:5557" in lines
    assert "serving https://127.0.0.1:9001 (api key required" in text
    assert " runner=generate mode=echo " in lines[0]


def test_startup_summary_names_the_data_parallel_ranks_own_event_endpoint():
    """Rank 1 publishes to port 5558 (vLLM's offset_endpoint_port); its start-up line said 5557."""
    from server.serve import startup_summary
    from generation.config.cli import load_config
    cfg = load_config(["--enable-kvcache", "--data-parallel-rank", "1"], env={"POD_IP": "10.0.0.5"})
    assert "kv cache: 1024 blocks x 16 tokens, prefix caching on, events to tcp://127.0.0.1:5558" in \
        startup_summary(cfg, tls=False, api_key=False)


def test_startup_summary_says_where_the_data_parallel_ranks_are_served():
    from server.serve import startup_summary
    from generation.config.cli import load_config
    lines = startup_summary(load_config(["--data-parallel-size", "2", "--port", "9000"], env={}), tls=False,
                            api_key=False)
    assert lines[-1] == ("data parallel: 2 engines in this process behind --port, each request to the least loaded "
                         "(vLLM's API server; X-data-parallel-rank picks one; one port per rank: "
                         "--data-parallel-external-lb)")
    assert " data-parallel-size 2" in lines[0]
    lines = startup_summary(load_config(["--data-parallel-size", "2", "--port", "9000", "-dpe"], env={}), tls=False,
                            api_key=False)
    assert lines[-1] == "data parallel: ranks on ports 9000..9001, each its own endpoint (--data-parallel-external-lb)"
    rank1 = load_config(["--data-parallel-size", "2", "--data-parallel-rank", "1"], env={})
    assert not any(line.startswith("data parallel:") for line in startup_summary(rank1, tls=False, api_key=False))


@pytest.mark.parametrize("argv,kv,runner", [
    ([], "kv cache: off (no prefix caching; --enable-kvcache turns it on)", "generate"),
    (["--latency-calculator", "step", "--kv-cache-size", "500"],
     "kv cache: 500 blocks x 64 tokens, prefix caching on (step engine), no KV events (--enable-kvcache or "
     "--kv-events-config publishes them)", "generate"),
    (["--latency-calculator", "step", "--kv-cache-size", "500", "--no-enable-prefix-caching"],
     "kv cache: 500 blocks x 64 tokens, prefix caching off (--no-enable-prefix-caching) (step engine), no KV events "
     "(--enable-kvcache or --kv-events-config publishes them)", "generate"),
    (["--runner", "pooling"], "kv cache: off (no prefix caching; --enable-kvcache turns it on)", "pooling convert=embed"),
    (["--runner", "pooling", "--convert", "classify"], None, "pooling convert=classify"),
    (["--runner", "pooling", "--pooler-config.task", "token_embed"], None, "pooling convert=embed task=token_embed"),
    (["--runner", "pooling", "--convert", "score"], None, "pooling convert=score"),
])
def test_startup_summary_kv_cache_and_runner(argv, kv, runner):
    """Step mode's banner no longer says ``kv cache: off`` while its prefix cache is on, and a
    pooling model's names its runner."""
    from server.serve import startup_summary
    from generation.config.cli import load_config
    lines = startup_summary(load_config(argv, env={}), tls=False, api_key=False)
    assert f" runner={runner} mode=" in lines[0]
    if kv is not None:
        assert kv in lines


def test_log_http_redacts_keys_and_passes_the_body_on(caplog):
    import io
    from server.wsgi_layers import LogHTTP
    seen = {}

    def app(environ, start_response):
        seen["body"] = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok":true}']
    body = b'{"prompt":"hello"}'
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/completions", "REMOTE_ADDR": "10.1.2.3",
               "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body),
               "HTTP_AUTHORIZATION": "Bearer sekrit", "HTTP_X_API_KEY": "sekrit", "HTTP_USER_AGENT": "t"}
    with caplog.at_level(logging.INFO, logger="vllm_sim.http"):
        out = LogHTTP(app)(environ, lambda *a: None)
    assert out == [b'{"ok":true}'] and seen["body"] == body
    assert "sekrit" not in caplog.text and "<redacted>" in caplog.text
    assert 'body={"prompt":"hello"}' in caplog.text and 'response 200 OK body={"ok":true}' in caplog.text
    assert "'content-type': 'application/json'" in caplog.text and "'content-length': '18'" in caplog.text


def test_api_key_middleware_compares_every_key():
    from server.auth import APIKeyMiddleware
    mw = APIKeyMiddleware(lambda e, s: [b"ok"], ["k1", "k2"])
    assert mw.authorized({"HTTP_AUTHORIZATION": "Bearer k2"})
    assert mw.authorized({"HTTP_X_API_KEY": "k1"})
    assert not mw.authorized({"HTTP_AUTHORIZATION": "Bearer k3"})
    assert not mw.authorized({})
    with pytest.raises(ValueError):
        APIKeyMiddleware(lambda e, s: [], [""])


def test_self_signed_certificate(tmp_path):
    import os
    import stat
    from cryptography import x509
    from server.tls import make_self_signed_cert
    cert, key = make_self_signed_cert(str(tmp_path), "sim.example")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    c = x509.load_pem_x509_certificate(open(cert, "rb").read())
    names = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert "sim.example" in names.get_values_for_type(x509.DNSName)
    org = c.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)[0].value
    assert org == "llm-d Inference Simulator"
    assert (c.not_valid_after_utc - c.not_valid_before_utc).days >= 3650


def test_a_burst_of_new_connections_is_accepted_a_batch_per_loop_turn():
    """A turn of the event loop takes at most ACCEPT_BATCH new connections, so running streams'
    due tokens wait for one batch of arrivals, not for a burst (issue 13)."""
    from collections import Counter

    import gevent
    from gevent import socket as gsocket

    from server.listening import ACCEPT_BATCH, accept_server

    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    # every connection is in the kernel's accept queue before the server starts
    clients = [gsocket.create_connection(listener.getsockname()) for _ in range(5 * ACCEPT_BATCH)]
    loop = gevent.get_hub().loop
    turns = []

    def handle(sock, addr):
        turns.append(loop.iteration)
        sock.close()

    server = accept_server(listener, handle, 1000)
    server.start()
    try:
        with gevent.Timeout(10):
            while len(turns) < len(clients):
                gevent.sleep(0.001)
    finally:
        server.stop()
        for c in clients:
            c.close()
    per_turn = Counter(turns)
    assert max(per_turn.values()) == ACCEPT_BATCH
    assert len(per_turn) == 5


def test_while_requests_wait_their_turn_a_burst_is_accepted_faster(monkeypatch):
    """Issue 31 item 5: while requests wait their turn to be parsed (a burst is arriving), a
    turn accepts ACCEPT_BURST connections instead of ACCEPT_BATCH: accepting costs only the
    accept, a greenlet and the first read, and a liveness probe in the kernel's queue (it skips
    the turns) is reached sooner (10,000 connections: /health waited 0.87-0.93 s, now 0.30-0.52)."""
    from collections import Counter

    import gevent
    from gevent import socket as gsocket

    from server import arrivals
    from server.listening import ACCEPT_BURST, BURST_WAITING, accept_server

    monkeypatch.setattr(arrivals, "waiting_count", lambda: BURST_WAITING)
    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    clients = [gsocket.create_connection(listener.getsockname()) for _ in range(3 * ACCEPT_BURST)]
    loop = gevent.get_hub().loop
    turns = []

    def handle(sock, addr):
        turns.append(loop.iteration)
        sock.close()

    server = accept_server(listener, handle, 1000)
    assert server.max_accept == ACCEPT_BURST
    server.start()
    try:
        with gevent.Timeout(10):
            while len(turns) < len(clients):
                gevent.sleep(0.001)
    finally:
        server.stop()
        for c in clients:
            c.close()
    per_turn = Counter(turns)
    assert max(per_turn.values()) == ACCEPT_BURST
    assert len(per_turn) == 3


def test_startup_line_names_the_models_own_tokenizer(hub):
    """A model whose tokenizer loads from the cache is named on the start-up line (it said
    ``tokenizer=simulated`` while the real one tokenized; a fresh user's finding)."""
    import os

    from generation.config.cli import load_config
    from generation.tokenization.tokenizer_loading import load_tokenizer
    from server.serve import startup_summary
    from support.tokenizer_hub import MODEL
    cfg = load_config(["--model", MODEL, "--tokenizers-cache-dir", os.path.join(hub, "hub")], env={})
    load_tokenizer(cfg)
    assert f" tokenizer={MODEL}" in startup_summary(cfg, tls=False, api_key=False)[0]
    plain = load_config(["--model", "test-model"], env={})
    load_tokenizer(plain)
    assert " tokenizer=simulated" in startup_summary(plain, tls=False, api_key=False)[0]


def test_log_level_trace_is_below_debug():
    """uvicorn's ``trace`` is its most verbose level; logging has no such name, and it fell back
    to INFO (fewer lines than ``debug``; a fresh user's finding)."""
    import logging

    from generation.config.cli import load_config
    from server.logs import TRACE, log_level
    assert log_level(load_config(["--log-level", "trace"], env={})) == TRACE < logging.DEBUG
    assert log_level(load_config(["--log-level", "debug"], env={})) == logging.DEBUG
    assert logging.getLevelName(TRACE) == "TRACE"


def test_a_clients_regex_hints_do_not_reach_the_log():
    """re's FutureWarnings on a pattern (``[[:alpha:]]``: Possible nested set, a set difference)
    were printed once per distinct text: a client chose what the log said (app.py)."""
    import re
    import warnings
    from app import quiet_client_regex_warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_client_regex_warnings()
        for pattern in ("x[[:alpha:]]", "y[a&&b]", "z[a~~b]", "[a||b]"):
            re.compile(pattern)
    assert [str(w.message) for w in caught] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        re.compile("w[[:digit:]]")
    assert [str(w.message) for w in caught] == ["Possible nested set at position 2"]


def test_running_grpc_ids_take_constant_time_per_generation():
    """server.grpc_support.RunningIds: thousands of generations under one request id (vLLM 0.34
    refuses none) are added and discarded in any order, each in constant time."""
    from server.grpc_support import RunningIds
    ids = RunningIds()
    gens = [[object()] for _ in range(5000)]
    for g in gens:
        ids.add("same", g)
    assert len(ids.get("same")) == 5000 and "same" in ids
    for g in reversed(gens[::2]):
        ids.discard("same", g)
    ids.discard("same", gens[0])            # idempotent
    assert ids.get("same") == gens[1::2] and len(ids.all()) == 2500
    for g in gens[1::2]:
        ids.discard("same", g)
    assert "same" not in ids and ids.all() == []
