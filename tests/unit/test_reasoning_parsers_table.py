"""vLLM 0.34's ``--reasoning-parser`` names (generation/config/reasoning_parsers.py): one row per
name its registry holds (``vllm/reasoning/__init__.py`` ``_REASONING_PARSERS_TO_REGISTER``), the
option's choices and ``--help`` from the same rows, each row's layout with the simulated
tokenizer, and the names the simulator refuses at start-up with vLLM's own reason."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from generation.config.cli import build_parser, load_config
from generation.config.options import OPTIONS, REASONING_PARSERS
from generation.config.reasoning_parsers import PARSERS, Parser
from generation.config.values import ConfigError
from generation.content.reasoning import ReasoningSpans, reasoning_tokens, settings

# vLLM 0.34's registry, in its order
VLLM_034 = (
    "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "poolside_v1", "cohere_command3", "cohere_command4",
    "ernie45", "gemma4", "glm45", "glm47", "ling3", "openai_gptoss", "granite", "granite_thinking_parser", "hf", "beam",
    "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "kimi_k2", "kimi_k3", "k2_horizon", "mimo", "minicpmv", "minimax_m2",
    "minimax_m2_append_think", "minimax_m3", "mistral", "nemotron_v3", "olmo3", "plamo3", "muse", "muse_glimmer",
    "musespark", "qwen3", "ripple", "seed_oss", "step3", "step3p5", "step5", "inkling", "zaya")
REFUSED = ("hf", "beam")
LAID_OUT = tuple(n for n in VLLM_034 if n not in REFUSED)


def test_one_row_per_name_vllm_034_registers():
    assert len(VLLM_034) == 44 and tuple(PARSERS) == VLLM_034
    assert all(isinstance(r, Parser) for r in PARSERS.values())
    assert tuple(n for n, r in PARSERS.items() if r.refused) == REFUSED
    for name in LAID_OUT:
        row = PARSERS[name]
        assert row.end and all(isinstance(s, str) and s for s in row.start + row.end), name


def test_choices_and_help_list_every_name():
    assert REASONING_PARSERS == VLLM_034
    assert OPTIONS["reasoning-parser"].choices == ("",) + VLLM_034
    text = " ".join(build_parser("app.py").format_help().split())
    assert all(name in text for name in VLLM_034)


@pytest.mark.parametrize("name", LAID_OUT)
def test_every_laid_out_name_starts(name):
    assert load_config(["--reasoning-parser", name], env={}).reasoning_parser == name


@pytest.mark.parametrize("spelling", ["none", "None", "NONE"])
def test_none_is_unset_as_vllm_034_parses_it(spelling):
    assert load_config(["--reasoning-parser", spelling], env={}).reasoning_parser == ""


@pytest.mark.parametrize("name", REFUSED)
def test_response_template_parsers_stop_at_start_up_with_the_reason(name):
    with pytest.raises(ConfigError, match=rf"--reasoning-parser {name} requires `response_template` metadata "
                                          r"in the tokenizer configuration"):
        load_config(["--reasoning-parser", name], env={})
    with pytest.raises(ValueError, match="response_template"):
        ReasoningSpans(SimpleNamespace(reasoning_fraction=0.5), _tokenizer(), name, row=PARSERS[name])


def _tokenizer():
    from generation.tokenization.tokenizer import SimulatedTokenizer
    return SimulatedTokenizer()


def _laid_out(name, n=40, opts=None):
    from generation.engine.request import GenerationRequest, Prompt, Sequence
    tok = _tokenizer()
    spans = ReasoningSpans(SimpleNamespace(reasoning_fraction=0.5), tok, name, row=PARSERS[name])
    req = GenerationRequest(request_id="r", model="m")
    req.reasoning = opts if opts is not None else settings(True, parser=PARSERS[name])
    seq = Sequence(req, 0, 0, Prompt([1]))
    seq.pieces, seq.ids = spans.content.generate(random.Random(1), n)
    spans.apply(seq, random.Random(2), req.reasoning, cap=100, stopped=True)
    return seq


@pytest.mark.parametrize("name", [n for n in LAID_OUT if not PARSERS[n].content])
def test_each_row_lays_out_its_markers(name):
    """40 tokens at share 0.5: 20 for the span with the row's markers, the rest content."""
    row = PARSERS[name]
    seq = _laid_out(name)
    r0, r1, c0 = seq.reasoning_span
    assert seq.pieces[:r0] == list(row.start) and seq.pieces[r1:c0] == list(row.end)
    assert c0 == 20 and len(seq.pieces) == 40 and r1 - r0 == 20 - len(row.start) - len(row.end)
    assert reasoning_tokens([seq]) == (r1 - r0 + row.counted_head if row.counted else 0)


def test_exact_layouts_of_new_parsers():
    seq = _laid_out("kimi_k3")
    assert seq.reasoning_span == (3, 14, 20)
    assert "".join(seq.pieces[:3]) == "<|open|>think<|sep|>"
    assert "".join(seq.pieces[14:20]) == "<|close|>think<|sep|><|open|>response<|sep|>"
    seq = _laid_out("hunyuan_a13b")
    assert seq.reasoning_span == (2, 15, 20) and reasoning_tokens([seq]) == 0      # no count_reasoning_tokens
    assert "".join(seq.pieces[:2]) == "<think>\n" and "".join(seq.pieces[15:20]) == "\n</think>\n<answer>\n"
    seq = _laid_out("gemma4")                     # the engine counts "thought\n", the text drops it
    assert seq.reasoning_span == (3, 19, 20) and reasoning_tokens([seq]) == 18
    seq = _laid_out("seed_oss")
    assert seq.pieces[0] == "<seed:think>" and seq.pieces[19] == "</seed:think>" and reasoning_tokens([seq]) == 18


def test_append_think_is_all_content():
    """MiniMaxM2AppendThinkReasoningParser returns (None, "<think>" + output): the model still
    writes its reasoning and </think>, the parser splits nothing and counts nothing."""
    seq = _laid_out("minimax_m2_append_think")
    assert seq.reasoning_span is None and len(seq.pieces) == 40 and seq.pieces.count("</think>") == 1
    assert reasoning_tokens([seq]) == 0


def test_parsers_that_think_only_when_told():
    for name in ("deepseek_v3", "poolside_v1", "gemma4", "hy_v3"):
        row = PARSERS[name]
        assert settings(parser=row) is None and settings(effort="none", parser=row) is None
        # the adapters turn a request's effort into its switch (sampling._thinking), as vLLM's build_chat_params
        assert settings(True, parser=row) is not None and settings(True, "high", parser=row).scale == 1.5
    assert settings(parser=PARSERS["holo2"]) is not None         # DeepSeekV3ReasoningWithThinkingParser
    assert settings(True, parser=PARSERS["deepseek_r1"]).counted is False
    assert settings(parser=PARSERS["qwen3"]).counted is True
