"""``use_beam_search`` (vLLM's extra field, chat and completions): the ``n`` beams of a prompt
are distinct, and beam ``i`` of the same prompt is always the same answer (vLLM's beam search
samples nothing), found by vLLM's own ``test_batch_completions`` (issue 22)."""
from __future__ import annotations

import pytest

BODY = {"model": "test-model", "max_tokens": 12, "ignore_eos": True, "n": 2, "use_beam_search": True}


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {}, {"seed": 7, "temperature": 1.0}])
def test_completion_beams_differ_and_repeat_per_prompt(api, sampling):
    r = api.post("/v1/completions", json={**BODY, **sampling, "prompt": ["Hello, my name is"] * 2})
    assert r.status_code == 200, r.text
    texts = [c["text"] for c in r.json()["choices"]]
    assert len(texts) == 4
    assert texts[0] != texts[1]
    assert texts[0] == texts[2] and texts[1] == texts[3]
    again = api.post("/v1/completions", json={**BODY, "prompt": "Hello, my name is"}).json()
    assert [c["text"] for c in again["choices"]] == texts[:2]


def test_chat_beams_differ(api):
    body = {**BODY, "messages": [{"role": "user", "content": "Hello there"}]}
    first = [c["message"]["content"] for c in api.post("/v1/chat/completions", json=body).json()["choices"]]
    second = [c["message"]["content"] for c in api.post("/v1/chat/completions", json=body).json()["choices"]]
    assert first[0] != first[1] and first == second


def test_without_beam_search_temperature_0_refuses_n_over_1(api):
    """vLLM 0.34's ``_verify_greedy_sampling``: greedy sampling has one answer to give; beam
    search (above, ``temperature: 0.0`` too) builds no SamplingParams and is exempt."""
    r = api.post("/v1/completions", json={**BODY, "use_beam_search": False, "temperature": 0.0,
                                          "prompt": "Hello, my name is"})
    assert r.status_code == 400
    assert (r.json()["error"]["message"], r.json()["error"]["param"]) == (
        "n must be 1 when using greedy sampling, got 2.", None)


def test_use_beam_search_must_be_a_boolean(api):
    r = api.post("/v1/completions", json={**BODY, "use_beam_search": "maybe", "prompt": "hi"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.use_beam_search"
