"""Many step-mode streams on a real server: 96 streams opened at once each get every token, in
order, each token counted once in the lag and (after the first) the inter-token latency
histograms, whatever the hub's pace (when its work is slower than the steps, the steps wait for
it: generation/engine/step_pacing.py ``step_end``, tests/unit/test_step_end_rule.py)."""
from __future__ import annotations

import asyncio
import json

import httpx

from support import metric, scrape

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FLAGS = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "4096", "--mode", "echo")
STREAMS, TOKENS = 96, 40


async def one(client: httpx.AsyncClient, base: str, i: int) -> tuple:
    prompt = " ".join(f"s{i}w{k}" for k in range(TOKENS))          # echoed back, one token per word
    body = {"model": LLAMA, "prompt": prompt, "max_tokens": TOKENS, "stream": True}
    texts, done = [], False
    async with client.stream("POST", base + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: {"):
                text = json.loads(line[6:])["choices"][0]["text"]
                if text:
                    texts.append(text)
    return prompt, texts, done


async def all_streams(base: str) -> list:
    limits = httpx.Limits(max_connections=STREAMS + 8, max_keepalive_connections=STREAMS + 8)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(*(one(client, base, i) for i in range(STREAMS)))


def test_many_step_mode_streams_get_every_token_in_order(sim_server):
    base = sim_server(*FLAGS, model=LLAMA)
    before = scrape(base)
    results = asyncio.run(all_streams(base))
    after = scrape(base)

    def delta(name):
        return metric(after, name) - metric(before, name)
    for i, (prompt, texts, done) in enumerate(results):
        assert done and len(texts) == TOKENS, i
        assert [t.strip() for t in texts] == [f"s{i}w{k}" for k in range(TOKENS)]    # nothing lost or swapped
        assert "".join(texts) == prompt
    assert delta("vllm_sim:token_emission_lag_seconds_count") == STREAMS * TOKENS
    assert delta("vllm:inter_token_latency_seconds_count") == STREAMS * (TOKENS - 1)
    assert delta("vllm:generation_tokens_total") == STREAMS * TOKENS
    assert metric(after, "vllm_sim:engine_step_wait_seconds_total") >= 0
