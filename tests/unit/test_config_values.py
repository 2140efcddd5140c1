"""Configuration values: durations, precedence of YAML / environment / flags, booleans, and the
validation messages."""
from __future__ import annotations

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError, format_duration, parse_duration


# ---- configuration ---------------------------------------------------------------------------
def test_durations():
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("2m30s") == 150
    assert parse_duration("750us") == pytest.approx(0.00075)
    assert parse_duration("0") == 0
    assert parse_duration("2000") == 2.0        # legacy: bare numbers are milliseconds
    with pytest.raises(ConfigError):
        parse_duration("1x")
    for blank in ("", " ", "-", "+"):          # "" used to slip past the sign check: IndexError
        with pytest.raises(ConfigError, match="invalid duration"):
            parse_duration(blank)
    assert [format_duration(v) for v in (0, 0.25, 1.5, 90)] == ["0s", "250ms", "1.5s", "1m30s"]


def test_config_precedence_and_booleans(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("model: yaml-model\nport: 8001\nserved-model-name: [a, b]\nmax-num-seqs: 7\n")
    cfg = load_config(["--config", str(y)], env={})
    assert (cfg.model, cfg.port, cfg.served_names, cfg.max_num_seqs) == ("yaml-model", 8001, ["a", "b"], 7)
    cfg = load_config(["--config", str(y)], env={"SIM_MODEL": "env-model"})
    assert cfg.model == "env-model"
    cfg = load_config(["--config", str(y), "--model", "cli", "--port", "9"], env={"SIM_MODEL": "env-model"})
    assert (cfg.model, cfg.port) == ("cli", 9)
    assert load_config(["--omni"], env={}).omni is True
    assert load_config(["--omni=false"], env={}).omni is False
    assert load_config(["--omni", "false"], env={}).omni is False
    assert load_config([], env={}).model == "test-model"


@pytest.mark.parametrize("argv,msg", [
    (["--block-size", "35"], "token block size should be one of the following"),
    (["--max-num-seqs", "0"], "max num seqs cannot be less than 1"),
    (["--mode", "bogus"], "invalid mode 'bogus'"),
    (["--time-to-first-token", "1s", "--time-to-first-token-std-dev", "400ms"], "30% of time to first token"),
    (["--port", "abc"], "--port"),
    (["--max-waiting-queue-length", "-1"], "max waiting queue size cannot be less than 0"),
    (["--failure-types", "bogus"], "invalid failure type 'bogus'"),
])
def test_config_validation_messages(argv, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        load_config(argv, env={})
