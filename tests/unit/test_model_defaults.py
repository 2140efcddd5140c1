"""Model defaults like vLLM's (issue 21): when ``--model`` names a model whose ``config.json``
is at hand, the default ``--max-model-len`` is its context length; ``test-model`` keeps 1024 and
an explicit ``--max-model-len`` wins."""
from __future__ import annotations

import json
import os

import pytest

from generation.config.cli import load_config
from generation.tokenization.model_config import apply_model_defaults, context_length, model_context_length


@pytest.mark.parametrize("config,expected", [
    ({"max_position_embeddings": 40960}, 40960),
    ({"n_positions": 1024, "max_position_embeddings": 2048}, 1024),       # the smallest, as vLLM
    ({"text_config": {"max_position_embeddings": 131072}}, 131072),
    ({"seq_length": 8192}, 8192),
    ({"model_type": "gpt2"}, None),
    ({"max_position_embeddings": True}, None),
    # a RoPE factor scales the length unless the type's length is scaled already (vLLM 0.34)
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16384),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 2}}, 8192),
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
    ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}, 32768),
    ({"max_position_embeddings": 8192, "model_type": "gemma3_text",
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, 8192),
])
def test_context_length_fields(config, expected):
    assert context_length(config) == expected


def _model_dir(tmp_path, config: dict) -> str:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


def test_local_model_directory_sets_the_default(tmp_path):
    path = _model_dir(tmp_path, {"max_position_embeddings": 32768})
    assert model_context_length(path) == 32768
    cfg = load_config(["--model", path], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 32768
    cfg = load_config(["--model", path, "--max-model-len", "4096"], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 4096                  # explicit wins


@pytest.mark.parametrize("extra", [(), ("--force-dummy-tokenizer",), ("--latency-calculator", "step")])
def test_hf_config_path_sets_the_default_in_every_mode(tmp_path, extra):
    """``--hf-config-path`` (a directory or the file itself) sets the default max model len
    whatever the mode and the model name; an explicit ``--max-model-len`` still wins."""
    path = _model_dir(tmp_path, {"max_position_embeddings": 8192})
    for where in (path, os.path.join(path, "config.json")):
        cfg = load_config(["--hf-config-path", where, *extra], env={})
        apply_model_defaults(cfg)
        assert cfg.max_model_len == 8192
    cfg = load_config(["--hf-config-path", path, "--max-model-len", "2048", *extra], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 2048
    cfg = load_config(["--hf-config-path", str(tmp_path / "missing"), *extra], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 1024                  # nothing readable: the default stays


def test_test_model_keeps_1024():
    cfg = load_config([], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 1024


def test_hub_model_from_the_cache(tmp_path, monkeypatch):
    from support.tokenizer_hub import MODEL, make_hub
    snap = make_hub(str(tmp_path))
    with open(os.path.join(snap, "config.json"), "w") as fh:
        json.dump({"model_type": "qwen3", "max_position_embeddings": 40960}, fh)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = str(tmp_path / "hub")
    assert model_context_length(MODEL, cache) == 40960
    cfg = load_config(["--model", MODEL, "--tokenizers-cache-dir", cache], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 40960
    assert model_context_length("org/not-there", cache) is None


def test_the_models_vocab_size_is_read_even_with_an_explicit_max_model_len(tmp_path):
    """vLLM bounds ``stop_token_ids`` and ``logit_bias`` by the model's ``vocab_size``
    (``model_config.get_vocab_size()``), which may exceed the tokenizer's."""
    path = _model_dir(tmp_path, {"max_position_embeddings": 32768, "vocab_size": 151936})
    cfg = load_config(["--model", path, "--max-model-len", "4096"], env={})
    apply_model_defaults(cfg)
    assert (cfg.model_vocab_size, cfg.max_model_len) == (151936, 4096)
    cfg = load_config(["--hf-config-path", str(tmp_path / "model"), "--force-dummy-tokenizer"], env={})
    apply_model_defaults(cfg)
    assert (cfg.model_vocab_size, cfg.max_model_len) == (151936, 32768)
    cfg = load_config([], env={})
    apply_model_defaults(cfg)
    assert cfg.model_vocab_size is None


def test_a_known_hub_model_offline_without_its_file_takes_the_shipped_copy(tmp_path, monkeypatch):
    """``python app.py meta-llama/Llama-3.1-8B-Instruct`` offline, its config.json nowhere at hand:
    vLLM (which would have fetched the file) serves 131,072 tokens, and so does the simulator,
    from the fields it ships for the step engine; not for ``--force-dummy-tokenizer``, and an
    explicit ``--max-model-len`` wins."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = str(tmp_path / "empty")
    for name, length, vocab in (("meta-llama/Llama-3.1-8B-Instruct", 131072, 128256),
                                ("qwen/qwen3-14b", 40960, 151936),          # case-insensitive, as the presets
                                ("codellama/CodeLlama-34b-Instruct-hf", 16384, 32000)):
        cfg = load_config(["--model", name, "--tokenizers-cache-dir", cache], env={})
        apply_model_defaults(cfg)
        assert (cfg.max_model_len, cfg.model_vocab_size) == (length, vocab)
    assert cfg.model_architecture == "LlamaForCausalLM"       # the Decisions API's 501, as vLLM's
    cfg = load_config(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--tokenizers-cache-dir", cache,
                       "--max-model-len", "8192"], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 8192
    cfg = load_config(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--force-dummy-tokenizer"], env={})
    apply_model_defaults(cfg)
    assert (cfg.max_model_len, cfg.model_vocab_size) == (1024, None)
    cfg = load_config(["--model", "org/unknown", "--tokenizers-cache-dir", cache], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 1024


def test_the_models_architecture_is_read(tmp_path):
    """``architectures[0]`` of the model's ``config.json`` (vLLM serves the Decisions API for
    some model classes only), None without one."""
    path = _model_dir(tmp_path, {"architectures": ["Qwen3ForCausalLM", "Other"], "max_position_embeddings": 40960})
    cfg = load_config(["--model", path], env={})
    apply_model_defaults(cfg)
    assert cfg.model_architecture == "Qwen3ForCausalLM"
    cfg = load_config([], env={})
    apply_model_defaults(cfg)
    assert cfg.model_architecture is None
    for bad in ([], "Qwen3ForCausalLM", [5]):
        (tmp_path / "model" / "config.json").write_text(json.dumps({"architectures": bad}))
        cfg = load_config(["--model", path], env={})
        apply_model_defaults(cfg)
        assert cfg.model_architecture is None


def test_a_max_model_len_past_the_models_is_vllms_error(tmp_path, monkeypatch, caplog):
    """vLLM 0.34's ``_get_and_verify_max_len``: a --max-model-len past the derived length is refused
    (a fresh user's Llama-3.1-8B at 200,000 started), unless the config's model_max_length
    allows it or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (a warning then)."""
    from generation.config.values import ConfigError
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    path = _model_dir(tmp_path, {"max_position_embeddings": 32768})
    cfg = load_config(["--model", path, "--max-model-len", "40000"], env={})
    with pytest.raises(ConfigError) as e:
        apply_model_defaults(cfg)
    assert e.value.param == "max-model-len" and str(e.value).startswith(
        "User-specified max_model_len (40000) is greater than the derived max_model_len "
        "(max_position_embeddings=32768 or model_max_length=None in model's config.json). To allow overriding "
        "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    apply_model_defaults(load_config(["--model", path, "--max-model-len", "32768"], env={}))    # at it: fine
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    cfg = load_config(["--model", path, "--max-model-len", "40000"], env={})
    apply_model_defaults(cfg)
    assert cfg.max_model_len == 40000 and "must be used with extreme caution" in caplog.text
