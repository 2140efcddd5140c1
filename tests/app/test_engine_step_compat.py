"""What keeps working under ``--latency-calculator step`` (issue 20): sleep mode, LoRA adapters
and their slots, and fake metrics, through the Flask app (the queue's 429:
test_engine_step_mode.py; data parallel: tests/server/test_data_parallel.py)."""
from __future__ import annotations

import json

import gevent

from support import metric, scrape

STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "1024")
DEV = {"VLLM_SERVER_DEV_MODE": "1"}


def complete(c, model="test-model", max_tokens=4, prompt="a b c d"):
    return c.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                           "ignore_eos": True})


def test_sleep_and_wake_in_step_mode(app_client):
    c = app_client(*STEP, "--enable-sleep-mode", env=DEV)
    assert complete(c).status_code == 200
    assert c.post("/sleep?level=1").status_code == 200
    assert c.get("/is_sleeping").json() == {"is_sleeping": True}
    assert not c.sim.kv_cache.enabled and c.sim.engine.scheduler.pool.num_cached == 0   # cache dropped
    assert c.post("/wake_up").status_code == 200
    assert c.get("/is_sleeping").json() == {"is_sleeping": False}
    r = complete(c)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    assert c.sim.engine.scheduler.free_blocks == c.sim.engine.scheduler.num_gpu_blocks


def test_lora_adapters_share_the_batch_within_max_loras(app_client):
    loras = [json.dumps({"name": n, "path": f"/adapters/{n}"}) for n in ("lora-a", "lora-b")]
    c = app_client(*STEP, "--lora-modules", *loras, "--max-loras", "1", "--max-cpu-loras", "2")
    jobs = [gevent.spawn(complete, c, model, 20) for model in ("lora-a", "lora-b", "lora-a")]
    gevent.joinall(jobs, timeout=20)
    assert [j.value.status_code for j in jobs] == [200, 200, 200]
    assert [j.value.json()["model"] for j in jobs] == ["lora-a", "lora-b", "lora-a"]
    m = scrape(c)
    assert metric(m, "vllm:generation_tokens_total") == 60
    sched = c.sim.engine.scheduler
    assert not sched.running and not sched.waiting and sched.free_blocks == sched.num_gpu_blocks


def test_fake_metrics_override_the_engines_gauges(app_client):
    fake = {"running-requests": 7, "waiting-requests": 3, "kv-cache-usage": 0.25}
    c = app_client(*STEP, "--fake-metrics", json.dumps(fake))
    assert complete(c).status_code == 200
    m = scrape(c)
    assert (metric(m, "vllm:num_requests_running"), metric(m, "vllm:num_requests_waiting"),
            metric(m, "vllm:kv_cache_usage_perc")) == (7, 3, 0.25)

