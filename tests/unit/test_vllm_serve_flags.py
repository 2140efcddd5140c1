"""Every flag of ``vllm serve`` 0.34 is accepted with vLLM's arity: the committed list
(``generation/config/vllm_serve_flags.json``, written by ``bench/vllm_cli_flags.py`` from vLLM's
``make_arg_parser``) drives the parser, so a pasted vLLM command line starts; vLLM's other
spellings of the simulator's options set them; ``-O`` and key-by-key JSON flags as vLLM's
``FlexibleArgumentParser`` reads them.  The flags that take effect: tests/app/test_vllm034_flags.py
and tests/server/test_process_lifecycle.py (access log)."""
from __future__ import annotations

import json

import pytest

from generation.config.cli import _dialects, _normalise, _parser, build_parser, load_config
from generation.config.options import IGNORED_FLAGS, OPTIONS
from generation.config.vllm_flags import VLLM_FLAGS, VLLM_FLAGS_RELEASE
from generation.config.sim_config import ignored_flags
from generation.config.values import ConfigError
from support import ROOT

SAMPLE = {"int": "2", "float": "0.5", "json": "{}", "str": "x"}


def cfg(*argv, env=None):
    return load_config(list(argv), env=env or {})


def parse(*argv) -> dict:
    """The namespace :func:`load_config` parses ``argv`` into (flags not yet applied)."""
    out, _, _ = _dialects(list(argv[1:] if argv[:1] == ("serve",) else argv))
    return vars(_parser().parse_args(_normalise(out)))


def dest(name: str) -> str:
    """Where a vLLM flag lands: its option, or ``ignored:NAME``."""
    a = _parser()._option_string_actions[name]
    return a.dest


def command_lines(entry: dict):
    """Command lines using one flag of VLLM_FLAGS, each spelling with a valid value for its
    arity: ``(argv, expected value)`` (None: not checked)."""
    arity = entry["arity"]
    choices = [c for c in entry.get("choices") or () if c is not None]
    value = str(choices[0]) if choices else SAMPLE[entry.get("type", "str")]
    for name in [entry["flag"], *entry.get("aliases", ())]:
        if arity in ("bool", "flag"):
            yield [name], "true"
        elif arity == "value":
            yield [name, value], value
            if name.startswith("--"):
                yield [f"{name}={value}"], value
        elif arity == "optional":
            yield [name], "true"
            yield [name, value], value
        elif arity == "list":
            yield [name, value, value], None
        elif arity == "append":
            yield [name, value, name, value], None
        else:
            yield [name, *[value] * arity], None
    for neg in entry.get("negatives", ()):      # --disable-log-requests: the simulator's own switch
        yield [neg], "false" if _parser()._option_string_actions[neg].const == "false" else "true"


def test_the_list_is_vllm_034s_serve_parser():
    assert VLLM_FLAGS_RELEASE == "0.34.0" and len(VLLM_FLAGS) == 327
    doc = json.loads((ROOT / "generation/config/vllm_serve_flags.json").read_text(encoding="utf-8"))
    assert "bench/vllm_cli_flags.py" in doc["source"]
    # what vLLM 0.34's source registers (vllm/engine/arg_utils.py, vllm/entrypoints/common/cli_args.py)
    f = VLLM_FLAGS
    assert f["enable-prefix-caching"]["negatives"] == ["--disable-prefix-caching", "--no-enable-prefix-caching"]
    assert (f["api-key"]["arity"], f["served-model-name"]["arity"], f["cudagraph-capture-sizes"]["arity"]) == \
        ("list", "list", "list")
    assert (f["middleware"]["arity"], f["hf-token"]["arity"], f["headless"]["arity"]) == ("append", "optional", "flag")
    assert f["pipeline-parallel-size"]["aliases"] == ["-pp"] and f["data-parallel-rank"]["aliases"] == ["-dpn"]
    assert f["performance-mode"]["choices"] == ["balanced", "interactivity", "throughput"]
    assert f["collect-detailed-traces"]["choices"][-1] is None          # optional: None appended
    assert (f["max-num-queued-tokens"]["type"], f["allowed-origins"]["type"]) == ("int", "json")
    assert f["gpu-memory-utilization"]["aliases"] == ["--device-memory-utilization"]


def test_every_vllm_serve_flag_is_accepted_with_its_arity():
    checked = 0
    for entry in VLLM_FLAGS.values():
        for argv, expected in command_lines(entry):
            # the model after a flag of one value or none: taken as the model, not as a value
            after = entry["arity"] in ("bool", "flag", "value", "append")
            ns = parse("serve", *argv, "my-model") if after else parse("serve", "my-model", *argv)
            assert ns.get("model_tag") == "my-model", argv          # nothing swallowed, nothing left over
            key = dest(argv[0].split("=", 1)[0])
            assert key in ns, argv
            if expected is not None:
                assert ns[key] == expected, argv
            checked += 1
    assert checked > 650


def test_ignored_flags_start_and_are_listed_in_the_order_given():
    names = [n for n in IGNORED_FLAGS if n in VLLM_FLAGS]
    assert len(names) == 217 and "enable-scale-out" in names and "max-num-seqs" not in names
    assert not {"enable-expert-parallel", "decode-context-parallel-size", "pipeline-parallel-size", "all2all-backend"} & set(names)
    assert "per-request-spec-decode-metrics" not in names  # an option: metrics.speculative_decoding
    assert "anthropic-disabled-thinking-effort" not in names   # an option: the Anthropic disabled effort
    assert "reasoning-effort-map" not in names             # an option: rewrites the requests' efforts
    assert "profiler-config" not in names                  # an option: it serves /start_profile
    assert "custom-histogram-buckets" not in names and "enable-mfu-metrics" not in names   # options
    assert "kv-cache-metrics" not in names and "kv-cache-metrics-sample" not in names
    assert "disable-log-stats" not in names
    argv = [a for n in names for a in next(command_lines(VLLM_FLAGS[n]))[0]]
    c = cfg("serve", "my-model", *argv)
    assert ignored_flags(c) == [f"--{n}" for n in names]


def test_options_keep_their_names_and_take_vllms_other_spellings():
    taken = [n for n in VLLM_FLAGS if n not in IGNORED_FLAGS and n != "config"]
    assert all(n in OPTIONS or any(f"--{n}" in o.aliases for o in OPTIONS.values()) for n in taken)
    c = cfg("--device-memory-utilization", "0.5", "--disable-prefix-caching", "--disable-chunked-prefill",
            "--enable-fastapi-docs", "-dpn", "1", "--cudagraph-capture-sizes", "1", "2", "4",
            "--disable-uvicorn-access-log", "--uvicorn-log-level", "warning")
    assert (c.gpu_memory_utilization, c.enable_prefix_caching, c.enable_chunked_prefill) == (0.5, False, False)
    assert (c.disable_fastapi_docs, c.data_parallel_rank, c.cuda_graph_sizes) == (False, 1, [1, 2, 4])
    assert (c.disable_log_requests, c.log_level, c.ignored_flags) == (True, "warning", [])
    assert cfg("--disable-fastapi-docs", "--enable-fastapi-docs").disable_fastapi_docs is False
    assert cfg("--disable-uvicorn-access-log", "--enable-uvicorn-access-log").disable_log_requests is False
    # vLLM's --disable-log-requests is --enable-log-requests' negative; here the access-log switch
    assert cfg("--enable-log-requests", "--disable-log-requests").disable_log_requests is True


def test_vllm_034_spellings_of_values():
    assert cfg("--log-level", "DEBUG").log_level == "debug"            # vLLM 0.34's LoggingConfig levels
    assert cfg("--log-level", "NOTSET").log_level == "debug"
    assert cfg("my-model", "--api-key", "k1", "k2").api_key == ["k1", "k2"]      # nargs="+" as vLLM's
    assert cfg("--api-key", "k1", env={"VLLM_API_KEY": "e"}).api_key == ["k1"]
    assert cfg(env={"VLLM_API_KEY": "e"}).api_key == ["e"]
    assert cfg("--max-num-queued-tokens", "8k", "--max-num-queued-reqs", "64").max_num_queued_tokens == 8000
    assert (cfg("--max-model-len", "32k").max_model_len, cfg("--max-model-len", "1K").max_model_len) == (32000, 1024)
    assert cfg("--max-model-len", "auto").max_model_len == cfg().max_model_len == 1024    # the model's
    assert "max-model-len" not in cfg("--max-model-len", "-1").explicit


def test_choices_are_checked_as_vllm_checks_them():
    with pytest.raises(ConfigError, match=r"--performance-mode: invalid choice: 'fast'"):
        cfg("--performance-mode", "fast")
    assert cfg("--collect-detailed-traces", "model", "worker").ignored_flags == ["collect-detailed-traces"]
    assert cfg("--mamba-ssu-algorithm", "None").ignored_flags == ["mamba-ssu-algorithm"]    # optional_type: None
    with pytest.raises(ConfigError, match="unrecognized arguments: --no-headless"):
        cfg("--no-headless")                        # store_true: no negative in vLLM either


def test_optimization_level_and_older_dash_o():
    assert _dialects(["-O3", "-O=2", "-Odecode", "-O", "1"])[0] == [
        "--optimization-level", "3", "--optimization-level", "2", "--optimization-level", "decode",
        "--optimization-level", "1"]
    assert cfg("-O3").ignored_flags == ["optimization-level"]
    assert cfg("-O", '{"level": 3}').ignored_flags == ["compilation-config"]      # before vLLM 0.34


def test_json_flags_key_by_key():
    out = _dialects(["--kv_transfer_config.kv_connector", "NixlConnector", "-cc.pass_config.fuse=true",
                     "--compilation-config.cudagraph_capture_sizes+", "1,2", "--compilation-config.mode", "3",
                     "--kv-offloading-size", "8", "--chat-template", "./t.jinja", "-0.5"])[0]
    assert out == ["--kv-offloading-size", "8", "--chat-template", "./t.jinja", "-0.5",
                   "--kv-transfer-config", '{"kv_connector": "NixlConnector"}',
                   "-cc", '{"pass_config": {"fuse": true}}',
                   "--compilation-config", '{"cudagraph_capture_sizes": ["1", "2"], "mode": 3}']
    c = cfg("--kv-events-config.enable_kv_cache_events", "true", "--kv-events-config.endpoint", "tcp://*:5558")
    assert c.kv_events_config == {"enable_kv_cache_events": True, "endpoint": "tcp://*:5558"} and c.enable_kvcache


def test_yaml_keys_take_every_spelling(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("cudagraph_capture_sizes: [1, 2]\nuvicorn_log_level: warning\nenable_scale_out: true\n"
                 "device_memory_utilization: 0.5\ndisable_prefix_caching: true\nno_enable_log_deltas: true\n")
    c = cfg("--config", str(y))
    assert (c.cuda_graph_sizes, c.log_level, c.gpu_memory_utilization, c.enable_prefix_caching) == \
        ([1, 2], "warning", 0.5, False)
    assert c.ignored_flags == ["enable-scale-out", "enable-log-deltas"]


def test_help_stays_the_simulators():
    text = build_parser("app.py").format_help()
    for hidden in ("--enable-scale-out", "--device-memory-utilization", "--disable-prefix-caching", "-dpn",
                   "--no-enable-log-deltas"):
        assert hidden not in text, hidden
    assert "--max-num-queued-reqs" in text and "--fingerprint-mode" in text
    assert "--cuda-graph-sizes [CUDA-GRAPH-SIZES ...], --cudagraph-capture-sizes" in text      # 0.34's name shown


def test_pasted_vllm_034_command_line_starts():
    c = cfg("serve", "Qwen/Qwen3-8B", "--enable-scale-out", "--max-num-queued-reqs", "256",
            "--max-num-queued-tokens", "64k", "--stream-interval", "4", "--cudagraph-capture-sizes", "1", "2", "4", "8",
            "--performance-mode", "throughput", "--optimization-level", "3", "--kv-cache-metrics",
            "--log-error-stack", "--ssl-ciphers", "ECDHE-RSA-AES256-GCM-SHA384",
            "--disable-access-log-for-endpoints", "/health,/metrics", "--enable-log-deltas",
            "--sse-keep-alive-interval", "15", "--default-chat-template-kwargs", '{"enable_thinking": false}',
            "--tool-strict-level", "function", "--reasoning-config", "{}", "--spec-method", "ngram", "--spec-tokens", "3",
            "--master-addr", "10.0.0.1", "--nnodes", "1", "--numa-bind", "--no-enable-log-deltas",
            "-tp", "2", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "128", "--api-key", "k1", "k2",
            "--enable-prefix-caching", "--reasoning-parser", "qwen3", "--max-model-len", "32k")
    assert (c.model, c.tensor_parallel_size, c.max_num_seqs, c.max_model_len) == ("Qwen/Qwen3-8B", 2, 128, 32000)
    assert (c.max_num_queued_reqs, c.max_num_queued_tokens, c.cuda_graph_sizes) == (256, 64000, [1, 2, 4, 8])
    assert (c.log_error_stack, c.ssl_ciphers, c.disable_access_log_for_endpoints, c.api_key) == \
        (True, "ECDHE-RSA-AES256-GCM-SHA384", "/health,/metrics", ["k1", "k2"])
    assert c.default_chat_template_kwargs == {"enable_thinking": False} and c.sse_keep_alive_interval == 15
    assert c.stream_interval == 4 and c.kv_cache_metrics is True
    assert ignored_flags(c) == [
        "--enable-scale-out", "--performance-mode", "--optimization-level", "--enable-log-deltas",
        "--tool-strict-level", "--reasoning-config", "--master-addr", "--nnodes", "--numa-bind"]
    assert (c.spec_method, c.spec_tokens) == ("ngram", 3)       # speculative decoding: options of their own


def test_flags_of_older_releases_still_start():
    # vLLM 0.17 to 0.27 (bench/vllm_cli_flags.py on their sources) and earlier: removed by 0.34
    c = cfg("--swap-space", "4", "--override-attention-dtype", "bfloat16", "--no-use-gpu-for-pooling-score",
            "--enable-bf16x3-router-gemm", "--num-scheduler-steps", "8")
    assert c.ignored_flags == ["swap-space", "override-attention-dtype", "use-gpu-for-pooling-score",
                               "enable-bf16x3-router-gemm", "num-scheduler-steps"]
