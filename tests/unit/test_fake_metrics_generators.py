"""Fake metrics as units (reference engine.md 5.4 and 11 items 10, 33): the generator functions,
quantised gauges, cumulative buckets, ``--fake-metrics`` validation and the YAML object."""
from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.metrics.fake_metrics import (FakeMetricsCollector, Generator, materialise, parse_fake_metrics,
                                             parse_generator)
from generation.metrics.recorder import MetricsRecorder
from support.fake_metrics import get, samples_of


def test_generator_functions():
    ms = 1_000_000
    ramp = parse_generator("ramp:0:1:700ms")
    assert ramp == Generator("ramp", 0.0, 1.0, 700 * ms)
    assert [ramp.value(t * ms) for t in (0, 350, 699, 700, 5000)] == [0, 0.5, pytest.approx(699 / 700), 1, 1]
    reset = parse_generator("rampreset:1:0:550ms")
    assert [reset.value(t * ms) for t in (0, 275, 550, 600)] == [1, 0.5, 1, pytest.approx(1 - 50 / 550)]
    sq = parse_generator("squarewave:10:15:400ms")
    assert [sq.value(t * ms) for t in (0, 199, 200, 399, 400, 650)] == [10, 10, 15, 15, 10, 15]
    osc = parse_generator("oscillate:0:30:60s")
    assert [osc.value(t * 1000 * ms) for t in (0, 15, 30, 45)] == pytest.approx([15, 30, 15, 0])


def test_gauges_are_quantised_and_counts_truncated():
    clock = [0]
    cfg = load_config(["--fake-metrics", '{"running-requests": "ramp:0:10:1s", "kv-cache-usage": "ramp:0:1:1s"}',
                      "--fake-metrics-refresh-interval", "200ms"])
    fake = FakeMetricsCollector(cfg, {}, clock=lambda: clock[0])
    clock[0] = 390_000_000                    # 390 ms -> evaluated at 200 ms
    assert fake.gauge_value("kv-cache-usage") == pytest.approx(0.2)
    assert fake.gauge_value("running-requests") == 2
    clock[0] = 450_000_000                    # evaluated at 400 ms
    assert fake.gauge_value("running-requests") == 4
    fake.update(parse_fake_metrics({"running-requests": "ramp:0:10:1s"}, 1024, partial=True))
    assert fake.gauge_value("running-requests") == 0     # a new generator starts at t = 0
    fake.update({"running-requests": 7.0})
    clock[0] = 10**10
    assert fake.gauge_value("running-requests") == 7


def test_materialise_counts():
    cum, total_sum, total = materialise([10, 20, 30], [1.0, 2.0, 5.0, 10.0])
    assert cum == [("1.0", 10), ("2.0", 30), ("5.0", 60), ("10.0", 60), ("+Inf", 60)]
    assert (total_sum, total) == (200, 200)
    cum, total_sum, total = materialise([0, 0, 0, 0, 2], [1.0, 2.0, 5.0, 10.0])
    assert cum[-1] == ("+Inf", 2) and cum[-2] == ("10.0", 0)
    assert (total_sum, total) == (22, 22)                 # +Inf bucket observes last bound + 1


@pytest.mark.parametrize("args, message", [
    (['{"waiting-requests": "squarewave:0:8:0s"}'],
     "invalid fake metrics generation parameter: period must be positive"),
    (['{"running-requests": 19, "kv-cache-usage": 40}'], "fake metrics KV cache usage must be between 0 and 1"),
    (['{"kv-cache-usage": "ramp:0:-8:10s"}'],
     "invalid fake metrics generation parameter: start and end must not be negative"),
    (['{"running-requests": "ramp:x:8:1s"}'],
     'unknown format in fake metric generation function: strconv.ParseFloat: parsing "x": invalid syntax'),
    (['{"waiting-requests": -3}'], "fake metrics request counters cannot be negative"),
    (['{"tpot-buckets-values": [' + ",".join(["1"] * 21) + "]}"], "fake time-per-output-token array is too long"),
    (['{"request-prompt-tokens": [1, 1, 1, 1, 1, 1]}', "--max-model-len", "10"],     # 1, 2, 5, 10, +Inf
     "fake metrics request-prompt-tokens array is too long (at most 5 values)"),
    (['{"request-generation-tokens": [1, -1]}'],
     "fake metrics request-generation-tokens cannot contain negative values"),
    (['{"request-success-total": {"stop": -1}}'],
     "fake metrics request-success-total.stop cannot be negative, got -1"),
    (['{"request-success-total": {"eos": 1}}'],
     "invalid finish reason in request-success-total: eos (valid reasons: [stop length tool_calls remote_decode "
     "cache_threshold])"),
    (['{"prefix-cache-hits": 10, "prefix-cache-queries": 5}'],
     "fake metrics prefix-cache-hits cannot exceed prefix-cache-queries"),
    (['{"running-requests": 1}', "--fake-metrics-refresh-interval", "0"],
     "fake metrics refresh interval must be positive"),
    (['[1, 2]'], "invalid value for --fake-metrics"),
    (['{"running-requests": 1'], "invalid value for --fake-metrics"),
])
def test_config_rejects_invalid_fake_metrics(args, message):
    with pytest.raises(ConfigError) as e:
        load_config(["--fake-metrics"] + args)
    assert message in str(e.value)


def test_yaml_fake_metrics_object(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "model: yaml-model\n"
        "fake-metrics-refresh-interval: 250ms\n"
        "fake-metrics:\n"
        "  running-requests: 5\n"
        "  waiting-requests: 'squarewave:1:2:2s'\n"
        "  request-generation-tokens: [0, 3]\n"
        "  loras:\n"
        "    - '{\"running\":\"a,b\",\"waiting\":\"c\",\"timestamp\":1257894567}'\n")
    cfg = load_config(["--config", str(path)])
    assert cfg.fake_metrics_refresh_interval == 0.25
    rec = MetricsRecorder(cfg)
    rec.use_fake(FakeMetricsCollector(cfg, rec.docs()))     # as the engine wires it
    m = samples_of(generate_latest(rec.registry).decode())
    assert get(m, "vllm:num_requests_running", model_name="yaml-model") == 5
    assert get(m, "vllm:num_requests_waiting", model_name="yaml-model") == 1
    assert get(m, "vllm:generation_tokens_total", model_name="yaml-model") == 6
    assert get(m, "vllm:lora_requests_info", model_name=None, max_lora="1", running_lora_adapters="a,b",
               waiting_lora_adapters="c") == 1257894567
    # the command line replaces the whole YAML object
    cfg = load_config(["--config", str(path), "--fake-metrics", '{"running-requests": 2}'])
    assert cfg.fake_metrics == {"running-requests": 2}
