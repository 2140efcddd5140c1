"""Unit tests of pure logic: tokenizer, length histogram, latency draws, configuration."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from generation.config.values import ConfigError, format_duration, parse_duration
from generation.config.cli import load_config
from generation.engine.latency import LatencyModel, normal_clamped
from generation.content.sources import SENTENCES, SentenceSource, bucket_ranges, sample_capped_length, sample_default_length
from generation.tokenization.tokenizer import SimulatedTokenizer, flatten_messages, fnv1a_32, plain_message

TOK = SimulatedTokenizer()


# ---- tokenizer (reference api.md 3.2-3.3 worked examples) ------------------------------------
def test_tokenizer_worked_examples():
    ids, pieces = TOK.encode("This is a test.")
    assert pieces == ["This ", "is ", "a ", "test", "."]
    assert ids == [3157421587, 1477013615, 186949092, 2949673445, 722245873]
    assert TOK.pieces("I hear it's very cold.") == ["I ", "hear ", "it", "'", "s ", "very ", "cold", "."]
    assert TOK.pieces('{"location":"Boston"}') == ["{", '"', "location", '"', ":", '"', "Boston", '"', "}"]
    assert TOK.encode("!") == ([604802540], ["!"])
    assert fnv1a_32(b"") == 2166136261


def test_tokenizer_drops_and_underscore_rules():
    assert TOK.pieces("héllo wörld") == ["h", "llo ", "w", "rld"]
    assert TOK.pieces("  leading") == ["leading"]
    assert TOK.pieces("a|b`c") == ["a", "b", "c"]
    assert TOK.pieces("_ab foo_bar") == ["_", "ab ", "foo_bar"]


def test_lossless_pieces_keep_dropped_characters():
    text = "  héllo | wörld ✓"
    ids, pieces = TOK.encode_lossless(text)
    assert "".join(pieces) == text
    assert len(pieces) == len(TOK.pieces(text))


def test_chat_flattening():
    assert flatten_messages([{"role": "user", "content": "This is a test."}]) == "### user: This is a test.\n"
    assert len(TOK.pieces(flatten_messages([{"role": "user", "content": "This is a test."}]))) == 10
    assert len(TOK.pieces(flatten_messages([{"role": "user", "content": "This is a test"}]))) == 9
    assert plain_message({"role": "tool", "tool_call_id": "call_abc123", "content": "sunny"}, True) == \
        "tool(call_abc123): sunny"
    msg = {"role": "assistant", "content": None,
           "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"location":"NYC"}'}}]}
    assert plain_message(msg, True) == 'assistant: [get_weather({"location":"NYC"})]'
    parts = [{"type": "text", "text": "Describe this"},
             {"type": "image_url", "image_url": {"url": "https://example.com/img.png"}},
             {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}]
    assert plain_message({"role": "user", "content": parts}, False) == \
        "Describe this\nimage: https://example.com/img.png"


def test_sentence_token_counts_and_generation():
    counts = [len(TOK.pieces(s)) for s in SENTENCES]
    assert counts == [38, 9, 9, 13, 7, 10, 8, 11, 16, 5, 25]
    src = SentenceSource(TOK)
    rng = random.Random(7)
    for n in (1, 5, 38, 100, 333):
        pieces, ids = src.generate(rng, n)
        assert len(pieces) == len(ids) == n
        assert ids == [TOK.piece_id(p) for p in pieces]


# ---- length histogram (seeds) -----------------------------------------------------------------
def test_bucket_ranges_match_seed_examples():
    assert bucket_ranges(60) == [(1, 10), (11, 20), (21, 30), (31, 40), (41, 50), (51, 60)]
    assert bucket_ranges(200) == [(1, 20), (21, 40), (41, 60), (61, 160), (161, 180), (181, 200)]
    assert bucket_ranges(120) == [(1, 20), (21, 40), (41, 60), (61, 80), (81, 100), (101, 120)]
    assert bucket_ranges(121)[3] == (61, 81)


@pytest.mark.parametrize("max_tokens", [60, 200, 1000])
def test_histogram_bucket_probabilities(max_tokens):
    rng = random.Random(1234)
    ranges = bucket_ranges(max_tokens)
    n = 40000
    hits = Counter()
    for _ in range(n):
        v = sample_capped_length(rng, max_tokens)
        assert 1 <= v <= max_tokens
        hits[next(b for b, (s, e) in enumerate(ranges) if s <= v <= e)] += 1
    for b, p in enumerate((0.20, 0.30, 0.20, 0.05, 0.10, 0.15)):
        assert abs(hits[b] / n - p) < 0.012, (b, hits[b] / n, p)


def test_histogram_small_caps():
    rng = random.Random(5)
    assert {sample_capped_length(rng, 1) for _ in range(50)} == {1}
    assert {sample_capped_length(rng, 3) for _ in range(500)} == {1, 2, 3}


def test_default_length_gaussian_and_uniform():
    rng = random.Random(99)
    vals = [sample_default_length(rng, 1000) for _ in range(20000)]
    assert all(1 <= v <= 1000 for v in vals)
    mean = sum(vals) / len(vals)
    assert 40 <= mean <= 46          # Normal(40, 20) truncated at 1 shifts the mean up a little
    small = {sample_default_length(rng, 10) for _ in range(2000)}
    assert small == set(range(1, 11))


# ---- latency ---------------------------------------------------------------------------------
def test_normal_clamped_bounds_and_exact_mean():
    rng = random.Random(3)
    assert normal_clamped(rng, 0.2, 0) == 0.2
    vals = [normal_clamped(rng, 1.0, 0.8) for _ in range(5000)]
    assert min(vals) >= 0.3 and max(vals) <= 1.7


def _model(**kw):
    cfg = load_config(["--model", "m"] + [x for k, v in kw.items() for x in (f"--{k}", str(v))], env={})
    return LatencyModel(cfg, random.Random(0))


def test_load_factor_and_calculators():
    m = _model(**{"time-to-first-token": "42ms", "time-factor-under-load": 1.5, "max-num-seqs": 70})
    assert m.ttft(10, 0, running=70) == pytest.approx(0.063)
    assert m.ttft(10, 0, running=1) == pytest.approx(0.042)
    assert 0.042 < m.ttft(10, 0, running=35) < 0.063
    m = _model(**{"prefill-overhead": "100ms", "prefill-time-per-token": "10ms"})
    assert m.ttft(20, 0, running=1) == pytest.approx(0.3)
    assert m.ttft(20, 16, running=1) == pytest.approx(0.14)        # cached tokens skip prefill
    m = _model(**{"kv-cache-transfer-latency": "200ms", "kv-cache-transfer-time-per-token": "100ms"})
    assert m.ttft(128, 0, 1, remote_prefill=True) == pytest.approx(0.2)
    m = _model(**{"kv-cache-transfer-time-per-token": "100ms"})
    assert m.ttft(128, 0, 1, remote_prefill=True) == pytest.approx(12.8)
    m = _model(**{"latency-calculator": "constant", "prefill-overhead": "500ms"})
    assert m.ttft(10, 0, 1) == 0.0
    m = _model(**{"inter-token-latency": "20ms"})
    assert m.itl(1) == pytest.approx(0.02)
    assert m.constant_itl() == pytest.approx(0.02)
    assert _model(**{"inter-token-latency": "20ms", "inter-token-latency-std-dev": "2ms"}).constant_itl() is None
    assert _model(**{"inter-token-latency": "20ms", "time-factor-under-load": 2}).constant_itl() is None


# ---- configuration ---------------------------------------------------------------------------
def test_durations():
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("2m30s") == 150
    assert parse_duration("750us") == pytest.approx(0.00075)
    assert parse_duration("0") == 0
    assert parse_duration("2000") == 2.0        # legacy: bare numbers are milliseconds
    with pytest.raises(ConfigError):
        parse_duration("1x")
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
