"""Options declared once (issue 11) and vLLM's command line (issue 10): the CLI, YAML, the
environment and the README table all come from ``generation.config.OPTIONS``.  ``/admin/config``
through the app: tests/app/test_admin_config.py.
"""
from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest

from generation.config.cli import build_parser, load_config, options_table
from generation.config.options import ADMIN_KEYS, IGNORED_FLAGS, OPTIONS
from generation.config.sim_config import SimConfig, ignored_flags, latency_only_flags, step_only_flags
from generation.config.values import ConfigError
from support import ROOT


def cfg(*argv, env=None):
    return load_config(list(argv), env=env or {})


def error_of(*argv, env=None) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        cfg(*argv, env=env)
    return e.value


# ---- one declaration -------------------------------------------------------------------------
def test_every_option_is_declared_once_with_type_default_help_and_group():
    for name, o in OPTIONS.items():
        assert o.name == name and o.help and o.group, name
        assert o.type in ("int", "float", "str", "bool", "duration", "list", "ints", "size", "lora", "json"), name
    c = SimConfig()
    assert (c.max_num_seqs, c.port, c.max_logprobs, c.shutdown_timeout, c.render_timeout) == (5, 8000, 20, 30.0, 30.0)
    assert (c.mm_render_timeout, c.kv_events_replay_queue_size, c.prefix_caching_hash_algo) == \
        (60.0, 1024, "fnv64a_cbor")
    assert (c.log_level, c.api_key, c.ssl_certfile, c.self_signed_certs, c.dataset_url) == ("info", [], "", False, "")
    assert set(ADMIN_KEYS) == {
        "failure-injection-rate", "failure-types", "image-emission-rate", "time-to-first-token",
        "time-to-first-token-std-dev", "inter-token-latency", "inter-token-latency-std-dev",
        "kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev", "prefill-overhead",
        "prefill-time-per-token", "prefill-time-std-dev", "kv-cache-transfer-time-per-token",
        "kv-cache-transfer-time-std-dev", "time-to-generate-image", "time-to-generate-image-std-dev",
        "time-factor-under-load", "latency-calculator", "fake-metrics"}


def test_readme_flags_table_is_the_generated_one():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- flags-table:start -->\n(.*?)\n<!-- flags-table:end -->", text, re.S)
    assert m, "README lacks the flags-table markers"
    assert m.group(1) == options_table(), \
        'regenerate: python -c "from generation.config.cli import options_table; print(options_table())"'


# ---- command line ----------------------------------------------------------------------------
def test_positional_model_and_serve_subcommand():
    assert cfg("my-model").model == "my-model"
    assert cfg("serve", "my-model", "--port", "9001").port == 9001
    assert cfg("serve", "my-model").model == "my-model"
    assert cfg("--port", "9002", "pos-model", "--mode", "echo").model == "pos-model"
    assert cfg("pos-model", "--model", "flag-model").model == "pos-model"      # as vllm serve: positional wins
    assert cfg("--enforce-eager", "after-switch").model == "after-switch"      # a switch takes only true/false
    assert cfg().model == "test-model"


def test_booleans_and_negative_values():
    assert cfg("--omni").omni is True
    assert cfg("--omni", "false").omni is False
    assert cfg("--omni=false").omni is False
    assert cfg("--omni", "--no-omni").omni is False
    assert cfg("--min-tool-call-number-param", "-5", "--min-tool-call-integer-param", "-3").min_tool_call_number_param \
        == -5.0


def test_pasted_vllm_command_line_is_accepted_and_ignored_flags_are_listed():
    c = cfg("serve", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.9", "--dtype", "auto",
            "--trust-remote-code", "--max-num-batched-tokens", "8192", "--enable-auto-tool-choice",
            "--tool-call-parser", "hermes", "--quantization", "fp8", "--enable-lora", "-tp", "2",
            "--pipeline-parallel-size", "1", "--kv-cache-dtype", "fp8", "--swap-space", "4", "--enforce-eager",
            "--enable-prefix-caching", "--no-enable-chunked-prefill", "--disable-log-stats", "--download-dir", "/d",
            "--revision", "main", "--load-format", "auto", "--max-lora-rank", "64", "--generation-config", "vllm",
            "--reasoning-parser", "deepseek_r1", "--served-model-name", "llama", "--disable-log-requests",
            "--uvicorn-log-level", "warning", "--api-key", "sk-1", "--max-model-len", "4096", "--seed", "7",
            "--max-logprobs", "5", "--enable-force-include-usage", "--chat-template", "/t.jinja")
    assert (c.model, c.served_names, c.max_model_len, c.seed) == ("meta-llama/Llama-3.1-8B-Instruct", ["llama"], 4096, 7)
    assert (c.disable_log_requests, c.log_level, c.api_key, c.max_logprobs) == (True, "warning", ["sk-1"], 5)
    assert (c.enable_force_include_usage, c.chat_template) == (True, "/t.jinja")
    assert ignored_flags(c) == [
        "--dtype", "--trust-remote-code",
        "--enable-auto-tool-choice", "--tool-call-parser", "--enable-lora", "--swap-space",
        "--download-dir", "--revision", "--load-format", "--generation-config"]
    # the engine model's flags take effect with --latency-calculator step, and are listed otherwise
    assert step_only_flags(c) == ["--gpu-memory-utilization", "--max-num-batched-tokens", "--quantization",
                                  "--tensor-parallel-size", "--kv-cache-dtype", "--enforce-eager",
                                  "--enable-chunked-prefill", "--enable-prefix-caching", "--pipeline-parallel-size"]
    assert (c.enforce_eager, c.enable_prefix_caching, c.enable_chunked_prefill) == (True, True, False)
    assert (c.tensor_parallel_size, c.quantization, c.max_num_batched_tokens) == (2, "fp8", 8192)
    assert ignored_flags(cfg("m")) == [] and step_only_flags(cfg("m")) == []
    # and the converse: the default latency model's flags do nothing in step mode
    assert latency_only_flags(c) == [] and latency_only_flags(cfg("m", "--latency-calculator", "step")) == []
    assert latency_only_flags(cfg("m", "--latency-calculator", "step", "--time-to-first-token", "2000",
                                  "--inter-token-latency", "20ms", "--max-num-seqs", "4")) == [
        "--time-to-first-token", "--inter-token-latency"]
    assert "swap-space" in IGNORED_FLAGS and "tensor-parallel-size" not in IGNORED_FLAGS



def test_start_up_log_does_not_call_flags_with_metrics_meaningless(caplog):
    # `vllm serve Qwen/Qwen3-8B --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser
    # hermes` pasted: the log said the two parser flags had "no meaning in the simulator", yet they add
    # vllm:tool_call_parser_invocations (and --enable-lora vllm:lora_requests_info), as the flags table says
    c = cfg("Qwen/Qwen3-8B", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser",
            "hermes", "--dtype", "auto", "--enable-lora", "--gpu-memory-utilization", "0.9")
    from app import log_flag_notes
    with caplog.at_level(logging.INFO, logger="vllm_sim"):
        log_flag_notes(c)
    assert [r.getMessage() for r in caplog.records] == [
        "ignored vLLM flags (no meaning in the simulator): --dtype",
        "vLLM flags taken for their metrics (tool calls and LoRA adapters are served with or without them): "
        "--enable-auto-tool-choice (vllm:tool_call_parser_invocations) "
        "--tool-call-parser (vllm:tool_call_parser_invocations) --enable-lora (vllm:lora_requests_info)",
        "vLLM flags without effect unless --latency-calculator step: --gpu-memory-utilization"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vllm_sim"):      # only those: no "ignored" line
        log_flag_notes(cfg("m", "--tool-call-parser", "hermes"))
    assert [r.getMessage() for r in caplog.records] == [
        "vLLM flags taken for their metrics (tool calls and LoRA adapters are served with or without them): "
        "--tool-call-parser (vllm:tool_call_parser_invocations)"]
    assert ignored_flags(c) == ["--enable-auto-tool-choice", "--tool-call-parser", "--dtype", "--enable-lora"]

def test_lora_modules_name_equals_path_and_json_forms():
    c = cfg("--lora-modules", "sql=/adapters/sql", '{"name": "chat", "path": "/a/chat", "base_model_name": "m"}',
            "--model", "m")
    assert [lm.to_json() for lm in c.lora_modules] == [
        {"name": "sql", "path": "/adapters/sql", "base_model_name": ""},
        {"name": "chat", "path": "/a/chat", "base_model_name": "m"}]
    assert "--lora-modules" in str(error_of("--lora-modules", "no-equals-sign"))


def test_help_shows_defaults_and_groups():
    text = " ".join(build_parser("app.py").format_help().split())      # help lines wrap anywhere
    for piece in ("(default: 8000)", "(default: 5)", "(default: 30.0 s)", "(default: 20)", "(default: 30s)",
                  "[env VLLM_API_KEY]", "Latency (simulator)", "--uvicorn-log-level", "[admin]"):
        assert piece in text, piece


# ---- YAML and environment --------------------------------------------------------------------
def test_yaml_env_and_cli_precedence(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("model: yaml-model\napi-key: yaml-key\nport: 8001\nrender-timeout: 2s\nlora-modules:\n"
                 "  - 'a=/x'\ndtype: bfloat16\n")
    c = cfg("--config", str(y))
    assert (c.model, c.api_key, c.port, c.render_timeout, c.lora_modules[0].path) == \
        ("yaml-model", ["yaml-key"], 8001, 2.0, "/x")
    assert ignored_flags(c) == ["--dtype"]
    c = cfg("--config", str(y), env={"SIM_MODEL": "env-model", "VLLM_API_KEY": "env-key", "POD_IP": "10.0.0.1",
                                     "POD_NAME": "p", "VLLM_SERVER_DEV_MODE": "1"})
    assert (c.model, c.api_key, c.pod_ip, c.pod_name, c.vllm_dev_mode) == \
        ("env-model", ["env-key"], "10.0.0.1", "p", True)
    c = cfg("--config", str(y), "cli-model", "--api-key", "cli-key", env={"SIM_MODEL": "e", "VLLM_API_KEY": "e"})
    assert (c.model, c.api_key) == ("cli-model", ["cli-key"])
    y.write_text("bogus-key: 1\n")
    assert 'unknown field "bogus-key"' in str(error_of("--config", str(y)))


# ---- validation ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["--port", "70000"], "invalid port '70000'"),
    (["--port", "0"], "invalid port '0'"),
    (["--time-to-first-token", "-1s"], "time to first token cannot be negative"),
    (["--startup-duration", "-5s"], "startup-duration cannot be negative"),
    (["--shutdown-timeout", "-1"], "shutdown-timeout cannot be negative"),
    (["--inter-token-latency", "2h"], "inter-token-latency cannot be more than 1h0m0s"),
    (["--time-factor-under-load", "inf"], "invalid value for --time-factor-under-load"),
    (["--time-factor-under-load", "nan"], "invalid value for --time-factor-under-load"),
    (["--render-timeout", "9" * 400 + "s"], "invalid value for --render-timeout"),
    (["--ssl-certfile", "c.pem"], "--ssl-keyfile is missing: both ssl-certfile and ssl-keyfile must be provided together"),
    (["--ssl-keyfile", "k.pem"], "--ssl-certfile is missing: both ssl-certfile and ssl-keyfile must be provided together"),
    (["--self-signed-certs", "--ssl-certfile", "c", "--ssl-keyfile", "k"],
     "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile"),
    (["--kv-events-replay-endpoint", "tcp://*:5600", "--kv-events-replay-queue-size", "0"],
     "kv-events-replay-queue-size cannot be less than 1"),
    (["--data-parallel-size", "3", "--zmq-endpoint", "tcp://127.0.0.1:5557", "--kv-events-replay-endpoint",
      "tcp://127.0.0.1:5558"], "zmq-endpoint (tcp://127.0.0.1:5557) and kv-events-replay-endpoint "
                               "(tcp://127.0.0.1:5558) ports collide once offset by data-parallel rank"),
    (["--dataset-url", "http://x/d.sqlite3"], "dataset-path is required when dataset-url is set"),
    (["--log-level", "loud"], "invalid log-level 'loud'"),
    (["--prefix-caching-hash-algo", "md5"], "invalid prefix-caching-hash-algo 'md5'"),
    (["--max-logprobs", "-2"], "max-logprobs cannot be less than -1"),
    (["--bogus-flag", "1"], "unrecognized arguments: --bogus-flag"),
])
def test_bad_values_name_the_flag(argv, message):
    assert message in str(error_of(*argv))


def test_good_values_of_the_new_flags():
    c = cfg("--data-parallel-size", "3", "--kv-events-replay-endpoint", "tcp://*:5600", "--self-signed-certs",
            "--prefix-caching-hash-algo", "sha256_cbor", "--log-level", "debug", "--max-logprobs", "-1",
            "--shutdown-timeout", "2.5", "--mm-render-timeout", "90s", "--tokenizers-cache-dir", "/c")
    assert (c.kv_events_replay_endpoint, c.self_signed_certs, c.prefix_caching_hash_algo, c.log_level) == \
        ("tcp://*:5600", True, "sha256_cbor", "debug")
    assert (c.max_logprobs, c.shutdown_timeout, c.mm_render_timeout, c.tokenizers_cache_dir) == (-1, 2.5, 90.0, "/c")


@pytest.mark.parametrize("argv,message", [
    (["--port", "70000"], "error: --port: invalid port '70000'"),
    (["--inter-token-latency", "-20ms"], "error: --inter-token-latency: inter token latency cannot be negative"),
    (["--nonsense"], "error: unrecognized arguments: --nonsense"),
])
def test_bad_value_is_one_line_exit_2_no_traceback(argv, message):
    r = subprocess.run([sys.executable, str(ROOT / "app.py"), *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == message
    assert "Traceback" not in r.stderr + r.stdout


def test_updated_is_a_validated_copy_and_swap_installs_it():
    live = cfg("--model", "m")
    new = live.updated({"time-to-first-token": "250ms", "failure-types": ["rate_limit"],
                        "inter-token-latency": 20_000_000})
    assert (live.time_to_first_token, live.failure_types) == (0.0, [])           # untouched
    assert (new.time_to_first_token, new.failure_types, new.inter_token_latency) == (0.25, ["rate_limit"], 0.02)
    with pytest.raises(ConfigError) as e:
        live.updated({"time-to-first-token": "1ms", "time-to-first-token-std-dev": "1ms"})
    assert e.value.param == "time-to-first-token-std-dev"
    holder = live                      # components keep a reference to the live object
    live.swap(new)
    assert holder.time_to_first_token == 0.25 and holder.failure_types == ["rate_limit"]


def test_timeout_keep_alive_defaults_to_vllms_5_seconds():
    # The real-server test (tests/server/test_process_lifecycle.py) runs with 1 s; the default is proven here.
    assert OPTIONS["timeout-keep-alive"].default == 5           # vLLM's uvicorn timeout_keep_alive
    assert load_config([]).timeout_keep_alive == 5
    assert load_config(["--timeout-keep-alive", "1"]).timeout_keep_alive == 1
    with pytest.raises(ConfigError):
        load_config(["--timeout-keep-alive", "-1"])


# ---- flag dialects (issue 30) -------------------------------------------------------------------
def test_underscores_in_flags_and_yaml_keys_as_vllm(tmp_path):
    c = cfg("--max_num_seqs", "3", "--max_model_len=2048", "--enforce_eager", "--swap_space", "4")
    assert (c.max_num_seqs, c.max_model_len, c.enforce_eager, c.ignored_flags, c.deprecations) == \
        (3, 2048, True, ["swap-space"], [])
    y = tmp_path / "c.yaml"
    y.write_text("max_num_seqs: 7\ntime_to_first_token: 20ms\ntrust_remote_code: true\n")
    c = cfg("--config", str(y))
    assert (c.max_num_seqs, c.time_to_first_token, c.ignored_flags) == (7, 0.02, ["trust-remote-code"])
    y.write_text("max_num_seqz: 7\n")
    assert str(error_of("--config", str(y))) == 'failed to unmarshal configuration: unknown field "max_num_seqz"'
    # a binary file or one nested past the interpreter's stack: one line, not a traceback
    y.write_bytes(b"\xff\xfe")
    assert str(error_of("--config", str(y))) == f"failed to read configuration file: {y} is not UTF-8 text"
    y.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert str(error_of("--config", str(y))) == "failed to unmarshal configuration: nested too deeply"


def test_reference_dialects_are_read_with_one_deprecation_line():
    """The autoscaler's ``--time-to-first-token=150`` (bare milliseconds) and the inference
    extension's ``--lora NAME`` (removed) still run, each noted once."""
    c = cfg("--time-to-first-token=150", "--inter-token-latency", "20", "--time-to-first-token-std-dev", "0",
            "--max-loras", "3", "--max-cpu-loras", "3", "--lora", "food-review-1,food-review-2", "--lora", "x")
    assert (c.time_to_first_token, c.inter_token_latency) == (0.15, 0.02)
    assert [(m.name, m.path) for m in c.lora_modules] == [("food-review-1", ""), ("food-review-2", ""), ("x", "")]
    assert c.deprecations == [
        "--lora (removed from the reference simulator) is read as --lora-modules '{\"name\": NAME}'",
        "--time-to-first-token=150: a bare number is read as milliseconds (the reference's old form); write 150ms",
        "--inter-token-latency=20: a bare number is read as milliseconds (the reference's old form); write 20ms"]
    c = cfg("--lora=a", "--lora-modules", "b=/p", "--max-loras", "2", "--max-cpu-loras", "2")
    assert [m.name for m in c.lora_modules] == ["b", "a"]
    c = cfg("--lora", "a", "my-model", "--max-loras", "2", "--max-cpu-loras", "2")    # one value, then MODEL
    assert ([m.name for m in c.lora_modules], c.model) == (["a"], "my-model")
    assert cfg("--time-to-first-token", "150ms").deprecations == []


@pytest.mark.parametrize("argv,message", [
    (("--max-num-seq=3",), "unrecognized arguments: --max-num-seq=3 (did you mean --max-num-seqs?)"),
    (("--time-to-first-tokn=3ms",), "unrecognized arguments: --time-to-first-tokn=3ms (did you mean "
                                    "--time-to-first-token?)"),
    (("--zzz",), "unrecognized arguments: --zzz"),
])
def test_a_flag_typo_gets_a_did_you_mean(argv, message):
    assert str(error_of(*argv)) == message
