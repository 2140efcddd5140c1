"""vLLM 0.34's ``--reasoning-parser`` names and how each lays out an answer (the data of
:class:`generation.content.reasoning.ReasoningSpans`; the option's choices, the start-up check and
the README's flags table read the names from here)."""
from __future__ import annotations

from typing import NamedTuple


class Parser(NamedTuple):
    """How a ``--reasoning-parser`` name lays out an answer and what vLLM 0.34 reports of it.

    ``start``: the marker strings the model emits before its reasoning (empty: the chat template
    opens the span in the prompt, as DeepSeek-R1's ``<think>\\n`` generation prompt); ``end``: the
    strings between the reasoning and the answer proper (a channel switch is several); each string
    is one token with the simulated tokenizer.  ``counted``: the parser's
    ``count_reasoning_tokens`` counts the reasoning (``usage...reasoning_tokens``); False where it
    is 0: the base ``ReasoningParser``'s default, or ``BaseThinkingReasoningParser``'s count of the
    tokens between a start and an end token *in the output*, which a template-opened span never
    has.  ``content``: the parser returns the whole output as content, no reasoning (an
    identity-like parser; vLLM's minimax_m2_append_think also prepends ``<think>`` to the content,
    which the simulator does not).  ``thinks``: the model reasons when the request names no
    thinking switch or effort (False: the parser's and the template's default is off, e.g.
    ``thinking`` for DeepSeek-V3).  ``counted_head``: how many of the last ``start`` strings the
    parser strips from the reasoning text but counts as reasoning tokens (Gemma 4's
    ``thought\\n``: its engine counts the channel's every token).  ``refused``: why the simulator
    does not start with this name (the start-up error).  ``efforts``: the markers by the
    ``reasoning_effort`` the parser is built with (the effective chat template kwargs'), as
    ``(effort, start, end)`` rows, the first the default when none is given; an effort not
    listed is the parser's error (K2 Horizon's).  ``effort_gated``: the model reasons exactly
    when that effort is given and is not ``no_think``, whatever a thinking switch says (HY V3's
    parser: the identity parser otherwise)."""
    start: tuple = ()
    end: tuple = ("</think>",)
    counted: bool = True
    counted_head: int = 0
    content: bool = False
    thinks: bool = True
    refused: str = ""
    efforts: tuple = ()
    effort_gated: bool = False


THINK = ("<think>",)
MUSE = ((" to=self", "<|message|>"), ("<|eom|>", "<|start|>", "assistant", " to=user", "<|message|>"))
_RESPONSE_TEMPLATE = ("requires `response_template` metadata in the tokenizer configuration (vLLM 0.34 "
                      "reads the reasoning markers from the checkpoint's response_template grammar, "
                      "which the simulator does not model)")

# One row per name vLLM 0.34 registers (reasoning/__init__.py _REASONING_PARSERS_TO_REGISTER), in
# its order; the comment names the class (vllm/reasoning/*, the engine parsers in vllm/parser/*).
PARSERS = {
    # DeepSeekR1ReasoningParser: the template opens <think>; BaseThinking counts 0 without it
    "deepseek_r1": Parser((), counted=False),
    # DeepSeekV3ReasoningParser: R1's parser when chat_template_kwargs thinking, identity otherwise
    "deepseek_v3": Parser((), counted=False, thinks=False),
    # DeepSeekV4ParserReasoningAdapter (parser/deepseek_v4.py): starts in REASONING when thinking (default)
    "deepseek_v4": Parser(()),
    # DeepSeekV41ParserReasoningAdapter (parser/deepseek_v41.py): V4's reasoning, spaced DSML tools
    "deepseek_v41": Parser(()),
    # PoolsideV1ReasoningParser: DeepSeekV3ReasoningParser scoped to the <assistant> turn
    "poolside_v1": Parser((), counted=False, thinks=False),
    # CohereCommand3ReasoningParser (parser/cohere_command.py, cohere_melody cmd3): Command A Reasoning
    "cohere_command3": Parser(("<|START_THINKING|>",), ("<|END_THINKING|>", "<|START_RESPONSE|>")),
    # CohereCommand4ReasoningParser (cmd4, Command A+: <|START_TEXT|> answers)
    "cohere_command4": Parser(("<|START_THINKING|>",), ("<|END_THINKING|>", "<|START_TEXT|>")),
    # Ernie45ReasoningParser (BaseThinking): "abc\n</think>\ndef", the template opens the span
    "ernie45": Parser((), counted=False),
    # Gemma4ParserReasoningAdapter (parser/gemma4.py): "<|channel>thought\n...<channel|>" (the
    # "thought\n" prefix is stripped from the text, not from the count); enable_thinking defaults to False
    "gemma4": Parser(("<|channel>", "thought", "\n"), ("<channel|>",), counted_head=2, thinks=False),
    # Glm47MoeParserReasoningAdapter (parser/glm47_moe.py): the model opens <think>
    "glm45": Parser(THINK),
    "glm47": Parser(THINK),
    # Ling3ParserReasoningAdapter (parser/ling3.py): GLM-4.7's format, thinking on by default
    "ling3": Parser(THINK),
    # GptOssReasoningParser + HarmonyParser: analysis channel, then the final channel
    "openai_gptoss": Parser(("<|channel|>", "analysis", "<|message|>"),
                            ("<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>")),
    # GraniteReasoningParser: plain-text markers; no count_reasoning_tokens (0)
    "granite": Parser(("Here is my thought process:",), ("Here is my response:",), counted=False),
    # GraniteThinkingParserReasoningAdapter (parser/granite_thinking.py): Nemotron V3's format
    "granite_thinking_parser": Parser(()),
    # ResponseTemplateReasoningParser (parser/response_template.py): markers from the checkpoint
    "hf": Parser(refused=_RESPONSE_TEMPLATE),
    # BeamReasoningParser (parser/beam.py): a response-template parser too
    "beam": Parser(refused=_RESPONSE_TEMPLATE),
    # DeepSeekV3ReasoningWithThinkingParser: DeepSeek-V3's parser with thinking on by default
    "holo2": Parser((), counted=False),
    # HunyuanA13BReasoningParser: "<think>\n...\n</think>\n<answer>\n..."; no count (0)
    "hunyuan_a13b": Parser(("<think>", "\n"), ("\n", "</think>", "\n", "<answer>", "\n"), counted=False),
    # HYV3ReasoningParser (BaseThinking): identity unless the chat template kwargs' reasoning_effort
    # is given and not no_think (chat_kwargs.get("reasoning_effort") or "no_think"); no switch counts
    "hy_v3": Parser(THINK, thinks=False, effort_gated=True),
    # HYV4ReasoningParser: the template injects <think> at the end of the prompt; counts up to </think>
    "hy_v4": Parser(()),
    # KimiK2ParserReasoningAdapter (parser/kimi_k2.py): the model opens <think>
    "kimi_k2": Parser(THINK),
    # KimiK3ReasoningParser: XTML think channel, the answer in the response channel
    "kimi_k3": Parser(("<|open|>", "think", "<|sep|>"),
                      ("<|close|>", "think", "<|sep|>", "<|open|>", "response", "<|sep|>")),
    # K2HorizonReasoningParser (DeepSeekR1's): its _EFFORT_TOKENS by reasoning_effort (default
    # high); another effort is its ValueError
    "k2_horizon": Parser(("<ifm|think>",), ("</ifm|think>",), efforts=(
        ("high", ("<ifm|think>",), ("</ifm|think>",)),
        ("medium", ("<ifm|think_fast>",), ("</ifm|think_fast>",)),
        ("low", ("<ifm|think_faster>",), ("</ifm|think_faster>",)))),
    # MiMoParserReasoningAdapter (parser/mimo.py): Qwen3's format
    "mimo": Parser(THINK),
    # MiniCPMVParserReasoningAdapter (parser/minicpmv.py): "the chat template emits <think>"
    "minicpmv": Parser(()),
    # MiniMaxM2ReasoningParser: "MiniMax M2 models don't generate <think> start token"
    "minimax_m2": Parser(()),
    # MiniMaxM2AppendThinkReasoningParser: no reasoning; content = "<think>" + the whole output
    "minimax_m2_append_think": Parser((), counted=False, content=True),
    # MiniMaxM3ReasoningParser (BaseThinking, own count): "<mm:think>reasoning</mm:think>content"
    "minimax_m3": Parser(("<mm:think>",), ("</mm:think>",)),
    # MistralParserReasoningAdapter (parser/mistral.py): [THINK] ... [/THINK] special tokens
    "mistral": Parser(("[THINK]",), ("[/THINK]",)),
    # NemotronV3ParserReasoningAdapter (parser/nemotron_v3.py): Qwen3's format, the template opens <think>
    "nemotron_v3": Parser(()),
    # Olmo3ReasoningParser: plain-text <think> ... </think>; no count_reasoning_tokens (0)
    "olmo3": Parser(THINK, counted=False),
    # Plamo3ParserReasoningAdapter (parser/plamo3.py): starts in REASONING when thinking (default)
    "plamo3": Parser((), ("<|plamo:end_think:plamo|>",)),
    # MuseReasoningParser: " to=self<|message|>" reasoning "<|eom|>", then the to=user message
    "muse": Parser(*MUSE),
    # MuseGlimmerReasoningParser: Muse's channels, the base parser's count (0)
    "muse_glimmer": Parser(*MUSE, counted=False),
    # alias of "muse" (MuseReasoningParser)
    "musespark": Parser(*MUSE),
    # Qwen3ParserReasoningAdapter (parser/qwen3.py)
    "qwen3": Parser(THINK),
    # RippleParserReasoningAdapter (parser/ripple.py): "the generation prompt does not open <think>"
    "ripple": Parser(THINK),
    # SeedOssParserReasoningAdapter (parser/seed_oss.py): Qwen3's grammar with <seed:think>
    "seed_oss": Parser(("<seed:think>",), ("</seed:think>",)),
    # Step3ReasoningParser: everything before </think> is reasoning
    "step3": Parser(()),
    # Step3p5ParserReasoningAdapter (parser/step3p5.py): "the chat template always prefills <think>"
    "step3p5": Parser(()),
    # DeepSeekR1ReasoningParser, as deepseek_r1
    "step5": Parser((), counted=False),
    # InklingParserReasoningAdapter (parser/inkling.py): typed blocks after the prompt's <|message_model|>
    "inkling": Parser(("<|content_thinking|>",), ("<|end_message|>", "<|message_model|>", "<|content_text|>")),
    # ZayaParserReasoningAdapter (parser/zaya.py): Qwen3's format
    "zaya": Parser(THINK),
}
