"""Issue 31's "done when", in-process: each attack of round three is refused (a 4xx) or held to
its documented bound, and a concurrent ``/health`` answers within 0.5 s while it runs (times the
machine's oversubscription, :func:`support.hub_probe.health_bound`); memory afterwards is within
a stated bound of before.  One test per item of the issue (``test_item<N>_...``).

Bodies are serialised once, before the probe starts (``orjson``): the in-process client would
otherwise encode 2 M integers on the hub the probe measures.
"""
from __future__ import annotations

import time

import gevent
import orjson
import pytest

from support.hub_probe import HealthProbe, health_bound, rss_mb

USER = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}
IDS = [5] * 2_000_000            # 4 MB of JSON: the most token ids a 4 MiB body holds


def attack(client, requests, concurrent: bool = True) -> tuple:
    """``requests`` (``(method, path, kwargs)``) sent at once from greenlets (one after another
    if not ``concurrent``: one client's) beside a :class:`HealthProbe`; ``(responses, longest
    /health wait in seconds)``."""
    probe = HealthProbe(client)
    if not concurrent:
        return [client.request(m, p, **kw) for m, p, kw in requests], probe.stop()
    jobs = [gevent.spawn(client.request, m, p, **kw) for m, p, kw in requests]
    gevent.joinall(jobs, raise_error=True)
    return [j.value for j in jobs], probe.stop()


def post(path: str, body: dict) -> tuple:
    return ("POST", path, {"content": orjson.dumps(body), "headers": JSON})


def test_item1_token_id_bodies_are_checked_in_c_loops(app_client):
    """2 M token ids held the hub 3-6 s per request (a Python call per element; four clients
    kept ``/health`` at a median 1.9 s for 32 s): the ids are now checked in C loops (~50 ms),
    then refused by the context length as vLLM words it; ``/detokenize`` (no bound in vLLM)
    decodes in the tokenizer's worker thread."""
    c = app_client()
    reqs = [post("/inference/v1/generate", {"model": "test-model", "token_ids": IDS, "sampling_params": {"max_tokens": 1}}),
            post("/v1/completions", {"model": "test-model", "prompt": IDS, "max_tokens": 1}),
            post("/v1/completions", {"model": "test-model", "prompt": [IDS[:1000]] * 2000, "max_tokens": 1}),
            post("/v1/embeddings", {"model": "test-model", "input": IDS}),
            post("/v1/chat/completions", {"model": "test-model", "messages": USER, "stop_token_ids": IDS}),
            post("/detokenize", {"model": "test-model", "tokens": IDS})]
    before = rss_mb()
    t0 = time.monotonic()
    out, health = attack(c, reqs, concurrent=False)        # one client
    took = time.monotonic() - t0
    assert [r.status_code for r in out] == [400, 400, 400, 400, 200, 200], [r.text[:200] for r in out]
    assert out[2].json()["error"]["message"].startswith("prompt list length 2000 exceeds the maximum allowed count")
    assert out[0].json()["error"]["message"].startswith(
        "This model's maximum context length is 1024 tokens. However, your prompt contains 2000000 input tokens")
    assert out[3].json()["error"]["message"].startswith(
        "This model's maximum context length is 1024 tokens. However, you requested 2000000 tokens")
    assert out[5].json()["prompt"] == ",".join(["5"] * 2_000_000)
    assert took < 10, took
    assert health < health_bound(), (health, health_bound())
    del out
    assert rss_mb() - before < 150, (before, rss_mb())
    # four clients at once (/health answered at a median 1.9 s for 32 s): each parse (~50 ms)
    # and 65,536-id slice is a piece of its own, the four take turns
    out, health = attack(c, reqs[:1] * 4)
    assert [r.status_code for r in out] == [400] * 4
    assert health < health_bound(1.0), (health, health_bound(1.0))


@pytest.mark.parametrize("body,param", [
    ({"token_ids": [5, -1]}, "token_ids[1]"),
    ({"token_ids": [5, True]}, "token_ids[1]"),
    ({"token_ids": [5, 2 ** 32]}, "token_ids[1]"),
    ({"token_ids": [5, 5.0]}, "token_ids[1]"),
])
def test_item1_a_bad_token_id_is_named_by_its_index(app_client, body, param):
    """The C-loop check keeps the message naming the first bad element."""
    r = app_client().post("/inference/v1/generate", json={"model": "test-model", "sampling_params": {"max_tokens": 1},
                                                          **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_item1_pooling_token_ids(app_client):
    """``/pooling`` takes the embeddings' ``input``: 2 M ids are the context-length 400."""
    c = app_client("--runner", "pooling")
    out, health = attack(c, [post("/pooling", {"model": "test-model", "input": IDS})] * 2)
    assert [r.status_code for r in out] == [400, 400], out[0].text[:200]
    assert "maximum context length is 1024 tokens" in out[0].json()["error"]["message"]
    assert health < health_bound(), (health, health_bound())


@pytest.fixture(scope="module")
def tiny(app_client, hub):
    """``org/tiny``, the small byte-level BPE of :mod:`support.tokenizer_hub`, served for real."""
    import os

    from support.tokenizer_hub import MODEL
    return app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--max-model-len", "8192", model=MODEL)


def test_item2_arrays_of_texts_are_tokenized_off_the_hub_together(tiny, app_client):
    """500 texts of 8,000 characters are each under the per-text thread threshold (8,192), so
    4 MB was tokenized on the hub (``/health`` waited 4.6 s at load 3.7): texts that add up
    past the threshold are tokenized together in the tokenizer's worker thread, the same
    token counts as one at a time."""
    texts = ["a " * 4000] * 500
    reqs = [post("/v1/embeddings", {"model": "org/tiny", "input": texts}),
            post("/v1/completions", {"model": "org/tiny", "prompt": texts[:2], "max_tokens": 1})]
    before = rss_mb()
    out, health = attack(tiny, reqs)
    emb, cmp = out
    one = tiny.post("/v1/embeddings", json={"model": "org/tiny", "input": texts[0]}).json()["usage"]["prompt_tokens"]
    assert emb.status_code == 200, emb.text[:300]
    assert emb.json()["usage"]["prompt_tokens"] == 500 * one
    assert cmp.status_code == 200, cmp.text[:300]
    assert cmp.json()["usage"]["prompt_tokens"] == 2 * (one + 1)       # BOS on a completions prompt
    assert health < health_bound(), (health, health_bound())
    del out, emb, cmp
    # the bound (200 MB after a request ends): 2 M token ids came back from the worker
    # thread; 60-160 MB stays in this test process, depending on what ran before
    assert rss_mb() - before < 200, (before, rss_mb())
    # the simulated tokenizer: pure Python, 2 MB held the hub ~0.5 s; now in the worker thread
    sim = app_client()
    out, health = attack(sim, [post("/v1/embeddings", {"model": "test-model", "input": ["Hello there. " * 300] * 500})])
    assert out[0].status_code == 200 and out[0].json()["usage"]["prompt_tokens"] == 500 * 900, out[0].text[:200]
    assert health < health_bound(), (health, health_bound())


def test_item2_every_text_is_bounded_before_any_is_tokenized(tiny):
    """The character bound (``--max-model-len`` x the longest vocabulary string) holds for each
    text of an array before the first one is tokenized."""
    limit = tiny.sim.prompt_char_limit()
    texts = ["a " * 2000] * 100 + ["b" * (limit + 1)]
    for path, field, body in [("/v1/embeddings", "input", {"input": texts}),
                              ("/v1/completions", "prompt", {"prompt": texts, "max_tokens": 1})]:
        r = tiny.post(path, json={"model": "org/tiny", **body})
        assert r.status_code == 400, r.text[:300]
        assert r.json()["error"]["param"] is None            # the context-length error's, case C07
        assert f"your prompt contains {limit + 1} characters (more than {limit} characters" in r.json()["error"]["message"]
        assert r.json()["error"]["message"].endswith(f" (parameter=input_text, value={limit + 1})"), field


@pytest.fixture(scope="module")
def trusting(app_client, tmp_path_factory):
    from support.tokenizer_hub import save_sentence_bpe
    return app_client("--tokenizer", save_sentence_bpe(tmp_path_factory)[0], "--chat-template",
                      "{% for m in messages %}{{ m.content }}{% endfor %}", "--trust-request-chat-template")


KEEP = ('{% set ns = namespace(l=[], s="a" * 8000000) %}{% for i in range(1000) %}'
        '{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}{{ ns.l|length }}')


@pytest.mark.parametrize("template,message", [
    ('{% set x = namespace(s="a") %}{% for i in range(40) %}{% set x.s = x.s ~ x.s %}{% endfor %}{{ x.s|length }}',
     "would build 16777216 characters, more than 8388608"),
    ("{{ ('a' * 8000000)|tojson }}", "would build 48000000 characters"),
    ("{{ {'k': ['a'] * 100000}|tojson(indent=1000) }}", "would build"),
    (KEEP, "built more than 67108864 characters in all"),
    ("{{ (['a' * 8000000] * 1000)|join }}", "built more than 67108864 characters in all"),
    ("{{ 'a'.ljust(100000000) }}", "would build 100000000 characters"),
    ("{{ ('a' * 1000000).replace('a', 'a' * 30) }}", "would build 30000000 characters"),
    ("{{ ('a' * 1000000)|replace('a', 'a' * 30) }}", "would build 30000000 characters"),
    ("{{ '{:>100000000}'.format('a') }}", "would build 8388609 characters"),
    ("{{ '{:>{}}'.format('a', 100000000) }}", "would build 100000015 characters"),
    ("{{ ('ab' * 4000000)|list|length }}", "would build 72000000 characters"),
    ("{{ ('a b ' * 2000000).split()|length }}", "would build 72000000 characters"),
    ("{{ lipsum(20000)|length }}", "would build 32000000 characters"),                 # Jinja's global
    ("{{ lipsum(1, false, 1000000, 1000000)|length }}", "would build 16000000 characters"),
    ("{{ strftime_now('%c' * 4000000)|length }}", "would build 128000000 characters"),  # transformers'
])
def test_item3_every_way_a_template_builds_strings_is_bounded(trusting, template, message, capfd):
    """``~`` and namespace assignment were unbounded (one request took RSS from 0.7 to 2.3 GB,
    three to a MemoryError): ``~``, every filter, the ``str`` methods and a render's total are
    refused before they allocate.  Two at once; no traceback is printed for the 400s (item 13)."""
    capfd.readouterr()
    before = rss_mb()
    out, health = attack(trusting, [("POST", "/v1/chat/completions", {"json": {
        "model": "test-model", "messages": USER, "max_tokens": 2, "chat_template": template}})] * 2)
    assert [r.status_code for r in out] == [400, 400], out[0].text[:300]
    assert out[0].json()["error"]["param"] == "messages"
    assert message in out[0].json()["error"]["message"], out[0].text[:300]
    assert health < health_bound(), (health, health_bound())
    assert rss_mb() - before < 100, (before, rss_mb())
    assert "Traceback" not in capfd.readouterr().err


def test_item3_a_rendered_text_past_the_context_is_refused_before_tokenizing(trusting):
    """``('a' * 1300000)|tojson`` renders under the 8 Mi cap, then spent seconds in the
    tokenizer: a rendered text longer than ``--max-model-len`` tokens of the longest vocabulary
    string is the context-length 400 before the tokenizer runs (``/tokenize``, unbounded as
    in vLLM, still tokenizes it, off the hub)."""
    limit = trusting.sim.prompt_char_limit()
    t0 = time.monotonic()
    r = trusting.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "max_tokens": 2,
                                                    "chat_template": "{{ ('a' * 1300000)|tojson }}"})
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["message"] == (
        f"This model's maximum context length is 1024 tokens. However, your prompt contains 1300002 characters "
        f"(more than {limit} characters, which is the upper bound for 1024 input tokens). Please reduce the "
        f"length of the input prompt. (parameter=input_text, value=1300002)")
    assert time.monotonic() - t0 < 1.0


def test_item3_ordinary_templates_still_render(trusting):
    """What real templates do (``~``, ``+``, namespaces, ``tojson(indent=4)`` of tools,
    ``format``, ``replace``, ``join``, ``split``, ``center``) renders as before."""
    template = ("{% set ns = namespace(out='') %}{% for m in messages %}"
                "{% set ns.out = ns.out ~ '<|' ~ m.role ~ '|>' + m.content.replace('hi', 'hello') %}{% endfor %}"
                "{{ ns.out }}|{{ tools|tojson(indent=4)|length }}|{{ '{}-{}'.format(1, 'x') }}|"
                "{{ ['a', 'b']|join(',') }}|{{ 'a b'.split()|length }}|{{ 'x'|center(5) }}|{{ 'ab' * 3 }}|"
                "{{ 'aaa bbb'|wordwrap(4) }}|{{ lipsum(1, false, 3, 5)|length > 0 }}|{{ strftime_now('%Y')|length }}")
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {
        "type": "object", "properties": {f"p{j}": {"type": "string", "description": "d" * 50} for j in range(20)}}}}
             for i in range(50)]
    r = trusting.post("/tokenize", json={"model": "test-model", "messages": USER, "tools": tools,
                                         "chat_template": template, "return_token_strs": True})
    assert r.status_code == 200, r.text[:300]
    import json as _json
    text = "".join(r.json()["token_strs"]).replace("Ġ", " ")
    text = text.replace("Ċ", "\n")
    # wordwrap (it takes the environment first) failed with "'str' object has no attribute
    # 'newline_sequence'" behind the bounded wrapper before
    assert text == f"<|user|>hello|{len(_json.dumps(tools, indent=4))}|1-x|a,b|2|  x  |ababab|aaa\nbbb|True|4", text[:200]


@pytest.mark.parametrize("kv,param", [
    ({"do_remote_prefill": "yes"}, "kv_transfer_params.do_remote_prefill"),
    ({"do_remote_prefill": 1e308}, "kv_transfer_params.do_remote_prefill"),
    ({"do_remote_prefill": True, "remote_block_ids": "x"}, "kv_transfer_params.remote_block_ids"),
    ({"do_remote_prefill": True, "remote_block_ids": [1, -2]}, "kv_transfer_params.remote_block_ids"),
    ({"do_remote_decode": 1}, "kv_transfer_params.do_remote_decode"),
    ({"do_remote_prefill": True, "remote_port": 70000}, "kv_transfer_params.remote_port"),
    ({"do_remote_prefill": True, "remote_host": 5}, "kv_transfer_params.remote_host"),
    ({"do_remote_prefill": True, "tp_size": 0}, "kv_transfer_params.tp_size"),
])
@pytest.mark.parametrize("route", ["chat", "completions", "generate"])
def test_item9_kv_transfer_params_are_type_checked(api, kv, param, route):
    """``do_remote_prefill: "yes"``, ``1e308`` and ``remote_block_ids: "x"`` all started a remote
    prefill: each key the P/D connector reads must have its JSON type, a 400 naming it."""
    path, body = {"chat": ("/v1/chat/completions", {"messages": USER, "max_tokens": 2}),
                  "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
                  "generate": ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}})}[route]
    r = api.post(path, json={"model": "test-model", **body, "kv_transfer_params": kv})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text
    assert r.json()["error"]["message"].startswith(param + ": must be a "), r.text


def test_item9_the_simulators_own_prefill_answer_is_accepted_back(api):
    """A P/D router hands a prefill answer's ``kv_transfer_params`` to the decode request: the
    reference's dummy values (``remote_block_ids: ["DUMMY_ID"]``) pass the type checks."""
    pre = api.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 2,
                                            "kv_transfer_params": {"do_remote_decode": True}}).json()
    kv = pre["kv_transfer_params"]
    r = api.post("/v1/completions", json={"model": "test-model", "prompt": "hi", "max_tokens": 2,
                                          "kv_transfer_params": kv})
    assert r.status_code == 200, r.text


def test_item11_a_2048_document_rerank_is_served(app_client):
    """The README documents 2,048 documents as the rerank limit, but the default 1,024 seats and
    1,000 queue places made every 2,048-document rerank a 429: more inputs than the seats and
    queue hold run in waves of ``--max-num-seqs``; 2,049 is the documented 400."""
    c = app_client("--runner", "pooling", "--convert", "score")
    cfg = c.sim.config
    assert cfg.max_num_seqs + cfg.max_waiting_queue_length < 2048
    docs = [f"document number {i}" for i in range(2048)]
    out, health = attack(c, [post("/rerank", {"model": "test-model", "query": "which one", "documents": docs})])
    r = out[0]
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["results"]) == 2048
    assert sorted(x["index"] for x in r.json()["results"]) == list(range(2048))
    # 2,048 inputs in waves: the hub yields between them, but a loaded 2-core machine has seen
    # 0.71-0.78 s waits; the fault this guards against held it for seconds
    assert health < health_bound(1.0), (health, health_bound(1.0))
    assert c.sim.running == 0 and not c.sim.waiting
    r = c.post("/rerank", json={"model": "test-model", "query": "q", "documents": docs + ["one more"]})
    assert r.status_code == 400 and "at most 2048 pairs" in r.json()["error"]["message"], r.text[:300]


@pytest.mark.parametrize("headers,refused", [
    ({}, False),                                                             # curl -X POST
    ({"Origin": "https://evil.example"}, True),                              # fetch(..., {mode: "no-cors"})
    ({"Origin": "null"}, True),                                              # a sandboxed frame
    ({"Sec-Fetch-Site": "cross-site"}, True),
    ({"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:3000"}, True),  # another local port
    ({"Origin": "http://sim", "Sec-Fetch-Site": "same-origin"}, False),         # its own page
    ({"Origin": "https://evil.example", "Content-Type": "application/json"}, False),  # preflighted
])
def test_item12_a_cross_site_bodyless_post_cannot_put_the_server_to_sleep(app_client, headers, refused):
    """A body-less POST without ``Content-Type`` still put the server to sleep, and a cross-site
    ``fetch(..., {mode: "no-cors"})`` sends exactly that: one a browser marks cross-origin is a
    400 and changes nothing; command-line clients (no ``Origin``) and preflighted requests pass."""
    c = app_client("--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})
    r = c.post("/sleep?level=1", headers=headers)
    try:
        if refused:
            assert r.status_code == 400, r.text
            assert "from another site's page is refused" in r.json()["error"]["message"]
            assert c.sim.sleeping is False
        else:
            assert r.status_code == 200, r.text
            assert c.sim.sleeping is True
    finally:
        c.post("/wake_up")
        assert c.sim.sleeping is False


def test_item6_a_timed_out_tokenize_leaves_no_memory_behind(tiny, monkeypatch):
    """A timed-out 4 MB ``/tokenize`` kept ~850 MB until a later request's trim: the worker
    drops a result nobody waits for before it gives the C heap back (the 10 s limit is 0.3 s
    here, to time out at once)."""
    import gc

    from generation.tokenization import tokenizer as tk
    monkeypatch.setattr(tk, "TOKENIZE_SECONDS", 0.3)
    gc.collect()
    before = rss_mb()
    out, health = attack(tiny, [post("/tokenize", {"model": "org/tiny", "prompt": "Hello there, how are you? " * 150000})])
    assert out[0].status_code == 400, out[0].text[:200]
    assert out[0].json()["error"]["message"] == "The prompt could not be tokenized within 0.3 s."
    assert health < health_bound(1.0), (health, health_bound(1.0))
    monkeypatch.setattr(tk, "TOKENIZE_SECONDS", 30.0)
    tk.off_hub(int)              # queued behind the timed-out job: returns once it has finished
    del out
    gc.collect()
    assert rss_mb() - before < 150, (before, rss_mb())       # +520-680 MB while it ran


def test_item4_a_mid_sized_schema_does_not_wait_behind_large_ones(app_client):
    """Schemas over 16 KiB shared one lane: four distinct 1 MB ``response_format`` schemas
    made a 23 KB one from another client wait 53 s.  Schemas up to 128 KiB have a lane of their
    own (four ~140 KB ones stand in for the 1 MB ones here, to keep the test short)."""
    def schema(n_props: int, salt: int) -> dict:
        return {"type": "object", "properties": {f"p{salt}_{i}": {"type": "string", "description": "x" * 100}
                                                 for i in range(n_props)}}

    def fmt(sch: dict) -> dict:
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": sch}}
    c = app_client("--max-num-seqs", "16")
    body = {"model": "test-model", "messages": USER, "max_tokens": 2}
    mid = schema(180, 99)
    assert 16384 < len(orjson.dumps(mid)) < 131072
    probe = HealthProbe(c)
    big = [gevent.spawn(c.post, "/v1/chat/completions", json={**body, "response_format": fmt(schema(4000, s))})
           for s in range(4)]
    gevent.sleep(0.3)
    t0 = time.monotonic()
    r = c.post("/v1/chat/completions", json={**body, "response_format": fmt(mid)})
    waited = time.monotonic() - t0
    gevent.joinall(big, raise_error=True)
    health = probe.stop()
    assert r.status_code == 200, r.text[:200]
    assert [g.value.status_code for g in big] == [200] * 4
    assert waited < 2.0, waited                       # behind the four: 4-6 s
    assert health < health_bound(1.0), (health, health_bound(1.0))


def test_item4_clients_take_turns_in_a_schema_lane(app_client):
    """Within a lane, one client's queue of large schemas no longer makes another client's wait
    for all of them: the clients (peer addresses) take turns.  Client A sends four distinct
    ~140 KB schemas, client B one 0.3 s later: B's is checked second, not fifth."""
    import httpx

    def schema(n_props: int, salt: int) -> dict:
        return {"type": "object", "properties": {f"p{salt}_{i}": {"type": "string", "description": "x" * 100}
                                                 for i in range(n_props)}}

    def fmt(sch: dict) -> dict:
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": sch}}
    a = app_client("--max-num-seqs", "16")
    b = httpx.Client(transport=httpx.WSGITransport(app=a.app, remote_addr="10.0.0.2"), base_url="http://sim")
    body = {"model": "test-model", "messages": USER, "max_tokens": 2}
    done = {}

    def send(client, name, salt):
        r = client.post("/v1/chat/completions", json={**body, "response_format": fmt(schema(4000, salt))})
        done[name] = (time.monotonic(), r.status_code)
    probe = HealthProbe(a)
    jobs = [gevent.spawn(send, a, f"a{i}", 100 + i) for i in range(4)]
    gevent.sleep(0.3)
    jobs.append(gevent.spawn(send, b, "b", 200))
    gevent.joinall(jobs, raise_error=True)
    health = probe.stop()
    b.close()
    order = sorted(done, key=lambda k: done[k][0])
    assert {v[1] for v in done.values()} == {200}, done
    assert order.index("b") <= 2, order            # FIFO: last (a0 a1 a2 a3 b)
    assert health < health_bound(1.0), (health, health_bound(1.0))
