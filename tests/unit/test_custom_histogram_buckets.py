"""--custom-histogram-buckets (vLLM 0.34's ``ObservabilityConfig.custom_histogram_buckets``): the
flag read as a JSON object, checked at start-up with vLLM's messages
(``vllm/config/observability.py``), refused by releases before 0.34, and the bounds a family takes
(``vllm/v1/metrics/buckets.py``'s ``histogram_buckets``).  The bounds on /metrics:
tests/app/test_custom_buckets_on_metrics.py."""
from __future__ import annotations

import subprocess
import sys

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.metrics.buckets import REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, histogram_buckets
from support import ROOT

FLAG = "--custom-histogram-buckets"
KNOWN = ("['inter_token_latency', 'iteration_tokens', 'kv_cache_residency', 'request_latency', "
         "'request_num_preemptions', 'request_params_n', 'request_tokens', 'time_to_first_token']")


def test_off_by_default_and_taken_as_a_json_object():
    assert load_config([]).custom_histogram_buckets is None
    c = load_config([FLAG, '{"time_to_first_token": [0.1, 0.5, 1], "request_tokens": [1, 10, "100"]}'])
    assert c.custom_histogram_buckets == {"time_to_first_token": [0.1, 0.5, 1.0], "request_tokens": [1.0, 10.0, 100.0]}
    assert "custom-histogram-buckets" not in c.ignored_flags
    # vLLM's dotted form, --flag.key VALUE, is the same object
    c = load_config(["--custom_histogram_buckets.request_latency", "[0.5, 2]"])
    assert c.custom_histogram_buckets == {"request_latency": [0.5, 2.0]}
    assert load_config([FLAG, "{}"]).custom_histogram_buckets == {}


@pytest.mark.parametrize("value, message", [
    ('{"request_latency": [1, true]}',
     "custom_histogram_buckets['request_latency']: bound True must be a number, not a boolean"),
    # booleans are refused first, before any other family is looked at (vLLM's mode="before" validator)
    ('{"nope": [1], "request_tokens": [false]}',
     "custom_histogram_buckets['request_tokens']: bound False must be a number, not a boolean"),
    ('{"nope": [1]}', f"custom_histogram_buckets: unknown bucket family 'nope'; known families: {KNOWN}"),
    ('{"time_to_first_token": []}', "custom_histogram_buckets['time_to_first_token']: bucket list must not be empty"),
    ('{"request_latency": [0, 1]}',
     "custom_histogram_buckets['request_latency']: bound 0.0 must be finite and greater than 0"),
    ('{"request_latency": [-1.5]}',
     "custom_histogram_buckets['request_latency']: bound -1.5 must be finite and greater than 0"),
    ('{"request_latency": [1, Infinity]}',
     "custom_histogram_buckets['request_latency']: bound inf must be finite and greater than 0"),
    ('{"request_latency": [NaN]}',
     "custom_histogram_buckets['request_latency']: bound nan must be finite and greater than 0"),
    ('{"request_tokens": [1, 5, 5]}',
     "custom_histogram_buckets['request_tokens']: bounds [1.0, 5.0, 5.0] must be strictly increasing"),
    ('{"request_tokens": [10, 5]}',
     "custom_histogram_buckets['request_tokens']: bounds [10.0, 5.0] must be strictly increasing"),
    # pydantic's dict[str, list[float]]
    ('{"request_latency": 1}', "custom_histogram_buckets.request_latency: Input should be a valid list"),
    ('{"request_latency": [1, "x"]}',
     "custom_histogram_buckets.request_latency.1: Input should be a valid number, unable to parse string as a number"),
    ('{"request_latency": [null]}', "custom_histogram_buckets.request_latency.0: Input should be a valid number"),
    ("[1, 2]", "invalid value for --custom-histogram-buckets: '[1, 2]' (must be a JSON object)"),
    ("{bad", "invalid value for --custom-histogram-buckets: '{bad'"),
])
def test_bad_values_are_refused_with_vllms_messages(value, message):
    with pytest.raises(ConfigError) as e:
        load_config([FLAG, value])
    assert str(e.value).startswith(message) and e.value.param == "custom-histogram-buckets"
    assert str(e.value) == message or message.startswith("invalid value")


def test_a_bad_value_is_one_error_line_and_exit_2():
    p = subprocess.run([sys.executable, "app.py", FLAG, '{"request_latency": [2, 1]}'], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout
    assert p.stderr.strip() == ("error: --custom-histogram-buckets: custom_histogram_buckets['request_latency']: "
                                "bounds [2.0, 1.0] must be strictly increasing")


@pytest.mark.parametrize("version", ["0.27.0", "0.33.1", "0.17.0"])
def test_releases_before_0_34_do_not_know_the_flag(version):
    with pytest.raises(ConfigError) as e:
        load_config(["--vllm-version", version, FLAG, '{"request_latency": [1]}'])
    assert str(e.value) == ("unrecognized arguments: --custom-histogram-buckets {\"request_latency\": [1]} "
                            f"(--vllm-version {version}'s parser: --custom-histogram-buckets is new in vLLM 0.34.0)")
    assert load_config(["--vllm-version", "0.34.0", FLAG, '{"request_latency": [1]}']).custom_histogram_buckets


def test_a_family_takes_its_override_verbatim_else_its_defaults():
    over = {"time_to_first_token": [0.2, 0.4], "request_tokens": [3.0, 30.0]}
    assert histogram_buckets("time_to_first_token", 1024, over) == [0.2, 0.4]
    assert histogram_buckets("request_tokens", 1024, over) == [3.0, 30.0]       # not capped by max-model-len
    assert histogram_buckets("request_latency", 1024, over) == list(REQUEST_LATENCY_BUCKETS)
    assert histogram_buckets("time_to_first_token", 1024, None) == list(TTFT_BUCKETS)
    assert histogram_buckets("request_tokens", 100, None) == [1, 2, 5, 10, 20, 50, 100]
