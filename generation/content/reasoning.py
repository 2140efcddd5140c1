"""Reasoning models (vLLM's ``--reasoning-parser``): answers that start with a reasoning span.

With a parser configured, each text or tool-call answer is laid out as a reasoning model
generates it: the parser's start marker (when the model emits it), the reasoning text, the end
marker, then the answer proper::

    <think> Okay, let me think about this. ... </think> Today is a nice sunny day.

The markers are the tokens of the parser's own strings (its row of
:data:`generation.config.reasoning_parsers.PARSERS`, one per name vLLM 0.34 registers): with a
real tokenizer its ids for ``<think>`` / ``</think>`` (or gpt-oss's harmony channel tokens, Kimi
K3's XTML ones...), with the simulated tokenizer one token per marker string.  The span's share
of the answer's tokens is ``--reasoning-fraction`` (scaled by the request's effort); the draws
use the request's rng, so ``--seed`` and a request ``seed`` fix them.  A request turns reasoning off, caps it or scales
it (:class:`ReasoningSettings`, built by each API adapter from its own switches).

:meth:`ReasoningSpans.apply` records the layout on the sequence as ``reasoning_span = (r0, r1,
c0)``: ``pieces[:r0]`` start marker, ``pieces[r0:r1]`` reasoning text (``r1 - r0`` =
``reasoning_tokens``, vLLM's ``count_reasoning_tokens``: the tokens between the markers, or 0
for a parser whose count does not see them, ``Parser.counted``),
``pieces[r1:c0]`` end marker, ``pieces[c0:]`` content.  Renderers read it; the engine counts
every token of the answer (markers included) in ``completion_tokens`` and in the metrics.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .sources import SentenceSource


REASONING_SENTENCES = (
    "Okay, let me think about this. ",
    "The user is asking a simple question. ",
    "First, I should recall what I know about it. ",
    "Let me check that again. ",
    "Wait, I need to be careful here. ",
    "So the answer follows from that. ",
    "That seems right. ",
    "I will keep the answer short and clear. ",
)

# reasoning_effort (OpenAI / vLLM) and Anthropic output_config.effort -> multiplier of the share
EFFORT_SCALE = {"minimal": 0.25, "low": 0.5, "medium": 1.0, "high": 1.5, "xhigh": 1.75, "max": 2.0}


@dataclass
class ReasoningSettings:
    """What one request asks of the reasoning span.  ``scale``: multiplier of
    ``--reasoning-fraction`` (effort); ``budget``: most reasoning tokens (vLLM's
    ``thinking_token_budget``, Anthropic's ``budget_tokens``), None = no cap; ``include``:
    whether the reasoning text is returned (chat ``include_reasoning``: the tokens are generated
    and counted either way); ``markers``: ``(start strings, end strings)`` in place of the
    parser's own (K2 Horizon's by effort, ``Parser.efforts``), None: the parser's."""
    scale: float = 1.0
    budget: int | None = None
    include: bool = True
    counted: bool = True
    head: int = 0
    markers: tuple | None = None


def settings(enabled: bool | None = None, effort: str | None = None, budget: int | None = None,
             include: bool = True, parser=None) -> ReasoningSettings | None:
    """The settings of a request, or None when it turns reasoning off.

    ``enabled``: an explicit switch (``chat_template_kwargs.enable_thinking``, Anthropic
    ``thinking.type``), None when the request says nothing: then reasoning is on (a reasoning
    model thinks by default) unless ``effort`` is ``"none"`` or the ``parser``'s row says its
    model does not think by default (``Parser.thinks``).  ``effort`` (a string, or None)
    scales the share (:data:`EFFORT_SCALE`; unknown values count as ``medium``).  ``parser``:
    the server's ``Parser`` row (:mod:`generation.config.reasoning_parsers`: whether its count
    reports the reasoning tokens)."""
    if enabled is False:
        return None
    if enabled is None and (effort == "none" or (parser is not None and not parser.thinks)):
        return None
    scale = EFFORT_SCALE.get(effort, 1.0) if effort else 1.0
    if parser is None:
        return ReasoningSettings(scale=scale, budget=budget, include=include)
    return ReasoningSettings(scale=scale, budget=budget, include=include, counted=parser.counted,
                             head=parser.counted_head)


def signature(request_id: str, text: str) -> str:
    """An opaque Anthropic thinking-block ``signature`` (clients only store and send it back): 32
    hex digits, the shape of vLLM 0.34's ``uuid.uuid4().hex`` (``anthropic/serving.py``), here a
    digest of the request id and the thinking text, so that a replay gives the same bytes."""
    return hashlib.sha256(f"{request_id}\0{text}".encode()).hexdigest()[:32]


class ReasoningSpans:
    """The reasoning layout of ``--reasoning-parser NAME`` (one per simulator).  ``config``: the
    live SimConfig (``reasoning_fraction`` read per answer); ``tokenizer``: encodes the markers
    (its own ids) and the reasoning text; ``sentences``: the answer text source (a short answer
    that grows to fit its reasoning takes its extra token from there)."""

    def __init__(self, config, tokenizer, parser: str, sentences: SentenceSource | None = None, *, row):
        self.config = config
        self.parser = parser
        self.row = row
        if row.refused:
            raise ValueError(f"--reasoning-parser {parser} {row.refused}")
        self.start = self._marker(tokenizer, row.start)
        self.end = self._marker(tokenizer, row.end)
        self._by_effort = {(start, end): (self._marker(tokenizer, start), self._marker(tokenizer, end))
                           for _, start, end in row.efforts}
        self.text = SentenceSource(tokenizer, REASONING_SENTENCES)
        self.content = sentences or SentenceSource(tokenizer)

    @staticmethod
    def _marker(tokenizer, strings) -> tuple[list, list]:
        """``(ids, pieces)`` of a marker: the simulated tokenizer has no special tokens, so each
        marker string is one token there; a real tokenizer encodes the joined strings (its own
        added tokens for ``<think>``, harmony's ``<|channel|>``...)."""
        if not strings:
            return [], []
        if getattr(tokenizer, "name", None) == "simulated":
            return [tokenizer.piece_id(s) for s in strings], list(strings)
        ids, pieces = tokenizer.encode_lossless("".join(strings))
        return list(ids), list(pieces)

    def apply(self, seq, rng, opts: ReasoningSettings, cap: int, stopped: bool, keep_all: bool = False) -> None:
        """Lay out ``seq``'s answer (already decided: text, JSON or tool-call tokens in
        ``pieces``/``ids``) as reasoning then content, within ``cap`` tokens (max_tokens and the
        context room).  ``stopped``: the answer ended by itself (not by the length cap).

        A text answer keeps its drawn length ``n``: the span takes ``round(share * n)`` tokens
        (at least one reasoning token unless the share is 0, at most ``opts.budget``), the content is the start of the
        drawn text (at least one token when the answer stopped by itself; a shorter answer grows
        to fit, within ``cap``).  With ``keep_all`` (tool calls, structured output) every
        answer token is kept and the span comes before them as ``share`` of the whole,
        shortened to fit ``cap`` (left out when the markers do not fit).  When not even the
        markers fit a text answer, it is cut inside the reasoning (finish ``length``), as a
        model stopped at max_tokens while thinking.

        An identity-like parser (``Parser.content``: the whole output is content) keeps the
        layout of a text or structured answer, unsplit, but lays out no reasoning before tool
        calls: the tool-call renderers read every token before a call as a reasoning span's."""
        if self.row.content and seq.tool_calls:
            return
        share = min(1.0, max(0.0, self.config.reasoning_fraction * opts.scale))
        (s_ids, s_pcs), (e_ids, e_pcs) = (self.start, self.end) if opts.markers is None else \
            self._by_effort[opts.markers]
        marks = len(s_pcs) + len(e_pcs)
        n = len(seq.pieces)
        budget = None if opts.budget is None else max(opts.budget, 0)
        if keep_all:
            total = round(n / (1.0 - share)) if share < 1.0 else cap
            r = max(1 if share > 0 else 0, total - n - marks)
            if budget is not None:
                r = min(r, budget)
            r = min(r, cap - n - marks)
            if r < 0:
                return
            content_pcs, content_ids = list(seq.pieces), list(seq.ids)
        else:
            min_c = 1 if stopped and share < 1.0 else 0
            total = n
            if stopped and total < marks + 1 + min_c:        # too short for a span: grow within cap
                total = min(cap, marks + 1 + min_c)
            r = max(1 if share > 0 else 0, round(share * total) - marks)
            if budget is not None:
                r = min(r, budget)
            r = min(r, total - marks - min_c)
            if r < 0:                                         # cut inside the reasoning
                r = max(0, min(cap, total) - len(s_pcs))
                r_pcs, r_ids = self.text.generate(rng, r)
                pieces, ids = (list(s_pcs) + r_pcs)[:cap], (list(s_ids) + r_ids)[:cap]
                seq.pieces, seq.ids, seq.text = pieces, ids, None
                r0 = min(len(s_pcs), len(pieces))
                seq.reasoning_span = (r0, len(pieces), len(pieces)) if not self.row.content else None
                seq.finish_reason = "length"
                seq.completion_tokens = len(pieces)
                return
            c = total - marks - r
            content_pcs, content_ids = seq.pieces[:c], seq.ids[:c]
            if len(content_pcs) < c:                          # grown past the drawn text
                more_p, more_i = self.content.generate(rng, c - len(content_pcs))
                content_pcs, content_ids = list(content_pcs) + more_p, list(content_ids) + more_i
        r_pcs, r_ids = self.text.generate(rng, r)
        head = len(s_pcs) + r + len(e_pcs)
        if seq.tool_calls:
            for tc in seq.tool_calls:
                tc["start"] += head
                tc["end"] += head
        seq.pieces = list(s_pcs) + r_pcs + list(e_pcs) + list(content_pcs)
        seq.ids = list(s_ids) + r_ids + list(e_ids) + list(content_ids)
        seq.text = None
        seq.reasoning_span = (len(s_pcs), len(s_pcs) + r, head) if not self.row.content else None
        seq.completion_tokens = len(seq.pieces)

    @staticmethod
    def clamp(seq) -> None:
        """Keep ``reasoning_span`` inside ``pieces`` after the output was cut (a stop string)."""
        span = seq.reasoning_span
        if span is not None:
            n = len(seq.pieces)
            seq.reasoning_span = (min(span[0], n), min(span[1], n), min(span[2], n))


def reasoning_text(seq) -> str | None:
    """The reasoning text of a sequence (None without a span)."""
    span = seq.reasoning_span
    if span is None:
        return None
    return "".join(seq.pieces[span[0]:span[1]])


def content_text(seq) -> str:
    """The answer after the reasoning span (the whole output without one)."""
    span = seq.reasoning_span
    if span is None:
        return seq.output_text()
    return "".join(seq.pieces[span[2]:])


def counted_span(seq):
    """``seq``'s reasoning span where its parser counts it (``Parser.counted``), else None:
    what vLLM's ``count_reasoning_tokens`` sees (from ``Parser.counted_head`` start tokens
    earlier where the parser counts them too)."""
    span = seq.reasoning_span
    if span is None:
        return None
    opts = getattr(seq.request, "reasoning", None)
    if opts is None:
        return span
    if not opts.counted:
        return None
    return (max(0, span[0] - opts.head),) + tuple(span[1:]) if opts.head else span


def reasoning_tokens(seqs) -> int:
    """Reasoning tokens over ``seqs`` (vLLM's ``count_reasoning_tokens``: between the markers,
    0 for a parser that does not count them)."""
    total = 0
    for s in seqs:
        span = counted_span(s)
        if span is not None:
            total += span[1] - span[0]
    return total
