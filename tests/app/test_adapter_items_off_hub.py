"""Large valid bodies whose items the adapters walk after validation, one Python step each: tools
checked and converted (Responses, Anthropic, Cohere), Cohere's documents and content parts, a
completions render's ``stop`` list copied into each prompt's sampling params, a chat render's
media parts hashed, and a pooling model's inputs and pairs.  Each held the hub in one piece (0.2-0.6 s per 3 MB request on a real
server, ``/health`` waiting as long); the loops now give the hub a turn every 2 ms
(:func:`generation.lanes.paced`), the render reads its lists in C loops, and a score request's
pair count is checked before its pairs are built.  Each is answered as before."""
from __future__ import annotations

import gc
import re

import orjson

from support.hub_probe import HealthProbe, health_bound

USER = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}
ON = {"VLLM_ENABLE_COHERE_API": "1"}
EMBED = ("--runner", "pooling", "--convert", "embed")
BOUND = 0.25       # s (times the machine's load): these held the hub 0.25-0.7 s in-process, now ~0.1 s


def _attack(client, requests: list) -> tuple:
    """``requests`` (``(route, body)``) one after another beside a :class:`HealthProbe`:
    ``(responses, longest /health wait in seconds)``.  Bodies are serialised before the probe
    starts (the in-process client would encode them on the hub it measures).  The test process's
    own objects are frozen meanwhile (``gc.freeze``): in a suite worker that has run hundreds of
    tests, each full collection the attack's allocations set off walked their millions of
    objects for 0.4-0.7 s, a heap the server does not have (2.5 s of /health in one run)."""
    raws = [(route, orjson.dumps(body)) for route, body in requests]
    gc.collect()
    gc.freeze()
    try:
        probe = HealthProbe(client)
        out = [client.post(route, content=raw, headers=JSON) for route, raw in raws]
        return out, probe.stop()
    finally:
        gc.unfreeze()


def test_many_tools_are_checked_and_converted_with_hub_turns(app_client):
    c = app_client()
    out, health = _attack(c, [
        ("/v1/responses", {"model": "test-model", "input": "hi", "max_output_tokens": 4,
                           "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}] * 40_000}),
        ("/v1/messages", {"model": "test-model", "max_tokens": 4, "messages": USER,
                          "tools": [{"name": "f", "input_schema": {"type": "object"}}] * 40_000}),
        ("/v1/completions/render", {"model": "test-model", "prompt": "x", "max_tokens": 1, "stop": ["ab"] * 500_000}),
        ("/v1/chat/completions/render", {"model": "test-model", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://e.x/a.png"}}] * 40_000}]}),
    ])
    assert [r.status_code for r in out] == [200, 200, 200, 400], [r.text[:200] for r in out]
    assert "maximum context length" in out[3].json()["error"]["message"]
    assert len(out[0].json()["tools"]) == 40_000
    assert out[2].json()[0]["sampling_params"]["stop"] == ["ab"] * 500_000
    assert health < health_bound(BOUND), (health, health_bound(BOUND))


def test_cohere_documents_and_parts_are_read_with_hub_turns(app_client):
    c = app_client(env=ON)
    out, health = _attack(c, [
        ("/cohere/v2/chat", {"model": "test-model", "max_tokens": 4, "messages": USER, "documents": ["ab"] * 400_000}),
        ("/cohere/v2/chat", {"model": "test-model", "max_tokens": 4,
                             "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 60_000}]}),
    ])
    assert out[0].status_code == 200, out[0].text[:200]
    assert out[1].status_code == 400 and "maximum context length" in out[1].json()["message"], out[1].text[:200]
    assert health < health_bound(BOUND), (health, health_bound(BOUND))


def test_pooling_inputs_and_pairs_are_scored_with_hub_turns(app_client):
    c = app_client(*EMBED)
    out, health = _attack(c, [
        ("/pooling", {"model": "test-model", "input": ["a " * 200] * 2048}),
        ("/rerank", {"model": "test-model", "query": "q", "documents": ["d " * 100] * 2000, "top_n": 5}),
        ("/score", {"model": "test-model", "text_1": "q", "text_2": ["ab"] * 500_000}),
    ])
    assert [r.status_code for r in out] == [200, 200, 400], [r.text[:200] for r in out]
    assert len(out[0].json()["data"]) == 2048
    assert len(out[1].json()["results"]) == 5
    assert out[2].json()["error"]["message"] == "at most 2048 pairs may be scored per request, got 500000."
    assert health < health_bound(BOUND), (health, health_bound(BOUND))


def test_a_long_grammar_compiles_off_the_hub(app_client, monkeypatch):
    """A ``structured_outputs.grammar`` over ``GRAMMAR_LANE_CHARS`` compiles in a worker thread
    (pure Python, ~1 ms per 1,000 characters: 100,000 of character classes held the hub 0.1 s);
    a short one on the hub, as before.  Both are answered from the grammar."""
    from generation.lanes import on_hub_thread
    from generation.structured import structured_outputs as so
    on_hub, real = [], so.compile_grammar
    monkeypatch.setattr(so, "compile_grammar", lambda text: (on_hub.append(on_hub_thread()), real(text))[1])
    long_grammar = "root ::= " + " | ".join("[a-z]{1,2}" for _ in range(7_500))
    assert 90_000 < len(long_grammar) < 100_000
    body = {"model": "test-model", "messages": USER, "max_tokens": 4}
    out, health = _attack(app_client(), [
        ("/v1/chat/completions", {**body, "structured_outputs": {"grammar": long_grammar}}),
        ("/v1/chat/completions", {**body, "structured_outputs": {"grammar": 'root ::= "yes" | "no"'}}),
        ("/v1/chat/completions", {**body, "structured_outputs": {"grammar": long_grammar + " | undefined"}}),
    ])
    assert [r.status_code for r in out] == [200, 200, 400], [r.text[:200] for r in out]
    assert re.fullmatch("[a-z]{1,2}", out[0].json()["choices"][0]["message"]["content"])
    assert out[1].json()["choices"][0]["message"]["content"] in ("yes", "no")
    assert out[2].json()["error"] == {"message": "structured_outputs.grammar: rule 'undefined' is not defined",
                                      "type": "BadRequestError", "param": "structured_outputs.grammar", "code": 400}
    assert on_hub == [False, True, False]
    assert health < health_bound(BOUND), (health, health_bound(BOUND))
