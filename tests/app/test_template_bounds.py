"""Trusted request chat templates are still bounded (issue 23 item 7), in-process.

With ``--trust-request-chat-template``, ``{{ 'ab' * 100000000 }}`` aborted the process in the
tokenizer's allocator, and a nested ``range(100000)`` loop never returned (SIGTERM could not stop
it).  Template operations that would build more than 8 Mi characters are refused, a request's
template renders in a thread that is interrupted after 2 s, and either is a 400.
"""
from __future__ import annotations

import threading
import time

import gevent
import pytest

from generation.tokenization import chat_template as ct
from support.hub_probe import rss_mb
from support.tokenizer_hub import save_sentence_bpe

USER = [{"role": "user", "content": "hello there"}]
PLAIN = "{% for m in messages %}{{ m.content }}{% endfor %}"




@pytest.fixture(scope="module")
def client(app_client, tmp_path_factory):
    path, _ = save_sentence_bpe(tmp_path_factory, vocab_size=300, repeat=3)
    return app_client("--tokenizer", path, "--chat-template", PLAIN, "--trust-request-chat-template")


def post(client, template: str, path: str = "/v1/chat/completions"):
    return client.post(path, json={"model": "test-model", "messages": USER, "max_tokens": 2,
                                   "chat_template": template})


def test_a_request_template_still_renders(client):
    r = post(client, "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}", "/tokenize")
    assert r.status_code == 200 and r.json()["count"] > 2


@pytest.mark.parametrize("template", [
    "{{ 'ab' * 100000000 }}",
    "{{ 100000000 * 'ab' }}",
    "{% set ns = namespace(s='xy') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{{ 2 ** 1000000000 }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ 'x' | center(1000000000) }}",
    "{{ 'x' | indent(1000000000, true) }}",
    "{{ ([1] * 10000000) | length }}",
])
def test_a_template_that_builds_too_much_is_a_400(client, template):
    before = rss_mb()
    t0 = time.monotonic()
    r = post(client, template)
    assert time.monotonic() - t0 < 1.0
    assert r.status_code == 400, r.text[:300]
    assert "Failed to apply chat template" in r.json()["error"]["message"]
    assert rss_mb() - before < 50


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize", "/v1/chat/completions/render"])
def test_a_template_that_never_ends_is_stopped(client, path):
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"
    threads = threading.active_count()
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)
    g = gevent.spawn(ticker)
    gevent.sleep(0.02)
    t0 = time.monotonic()
    r = post(client, template, path)
    took = time.monotonic() - t0
    g.kill()
    assert r.status_code == 400, r.text[:300]
    assert "did not render within 2 s" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "chat_template"
    assert 1.9 < took < 3.0
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 0.5
    # the render thread was interrupted: it is idle again, and the next template renders
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and ct._RENDER_POOL.size and ct._RENDER_POOL.task_queue.qsize():
        gevent.sleep(0.05)
    assert threading.active_count() <= threads + 2
    assert post(client, PLAIN).status_code == 200


def test_a_request_template_is_bounded_in_size(client):
    r = post(client, "x" * (ct.MAX_REQUEST_TEMPLATE + 1))
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template"
    assert "more than the 65536" in r.json()["error"]["message"]


# ---- the simulated tokenizer ships no template: a trusted request's template still applies ----------
@pytest.fixture(scope="module")
def simulated(app_client):
    return app_client("--trust-request-chat-template")


def test_a_request_template_applies_without_a_tokenizer_template(simulated):
    """Before, the simulated tokenizer ignored a request's template silently (and its bounds
    were never reached); now it renders it and counts the text."""
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    r = post(simulated, template, "/tokenize")
    ids = simulated.sim.tokenizer.encode("<user>hello there<a>")[0]
    assert r.status_code == 200 and r.json()["tokens"] == ids
    plain = simulated.post("/tokenize", json={"model": "test-model", "messages": USER}).json()["tokens"]
    assert plain != ids                                   # without one: the reference's flattening
    r = simulated.post("/v1/chat/completions", json={"model": "test-model", "messages": USER, "max_tokens": 1,
                                                      "chat_template": template, "add_generation_prompt": False})
    assert r.json()["usage"]["prompt_tokens"] == len(simulated.sim.tokenizer.encode("<user>hello there")[0])


def test_the_bounds_hold_without_a_tokenizer_template(simulated):
    r = post(simulated, "{{ 'ab' * 100000000 }}")
    assert r.status_code == 400 and "Failed to apply chat template" in r.json()["error"]["message"]
    r = post(simulated, "x" * (ct.MAX_REQUEST_TEMPLATE + 1))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "chat_template")
    r = post(simulated, "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x")
    assert (r.status_code, r.json()["error"]["param"]) == (400, "chat_template")


def test_without_the_flag_a_request_template_is_refused(api):
    r = post(api, PLAIN)
    assert (r.status_code, r.json()["error"]["param"]) == (400, "chat_template")
