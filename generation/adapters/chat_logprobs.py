"""A chat choice's logprobs over its output tokens, as vLLM 0.34 fills them.

vLLM's chat builds ``logprobs`` from the engine output's ``token_ids`` before its parser runs
(``_create_chat_logprobs``, chat_completion/serving.py l. 697-707 streamed, l. 1009-1021 not):
one entry per output token, the reasoning, its markers and a tool call's tokens included, the
entry at the token's position in the whole answer.  Only ``include_reasoning: false`` under a
parser hides them (``suppress_metadata`` l. 1032-1035, ``hide_metadata`` l. 745-747).
"""
from __future__ import annotations

from generation.content import logprobs as lp

from .base import dumps


def hides_metadata(sim, body) -> bool:
    """Whether vLLM 0.34 drops this chat answer's logprobs and token ids: ``include_reasoning:
    false`` on a server with a parser (``suppress_metadata`` / ``ChatStreamProcessor.hide_metadata``:
    ``parser is not None and not request.include_reasoning``), that is a reasoning parser, or a
    tool parser with ``--enable-auto-tool-choice`` (``ParserManager.get_tool_parser``), whether
    or not this answer reasons."""
    if body.include_reasoning is not False:
        return False
    m = sim.metrics         # (the flags as the metrics read them: generation.metrics.frontend)
    return sim.reasoning is not None or (getattr(m, "tool_parser", False) and m.auto_tool_choice)


def token_entries(seq, a: int, b: int, top: int, as_ids: bool, listed: list | None = None) -> list:
    """The ``logprobs.content`` entries of ``seq``'s tokens ``a..b-1`` (``as_ids``: named
    ``token_id:N``; ``listed``: the alternatives are exactly those names, :func:`lp.with_listed`)."""
    if as_ids:
        ids = seq.ids
        out = [lp.token_id_entry(ids[k], k, top) for k in range(a, b)]
    else:
        pieces = seq.logprob_pieces()
        out = [lp.chat_entry(pieces[k], k, top) for k in range(a, b)]
    if listed:
        out = [lp.with_listed(e, k, listed) for k, e in zip(range(a, b), out)]
    return out


def choice_logprobs(seq, top: int, as_ids: bool) -> dict:
    """A non-streamed choice's ``logprobs``: every output token's entry (l. 1009-1021)."""
    return {"content": token_entries(seq, 0, len(seq.pieces), top, as_ids)}


def token_logprobs(seq, k: int, top: int, as_ids: bool, listed: list | None) -> bytes:
    """A one-token chunk's ``logprobs``, serialised: :func:`chunk_logprobs` of ``k..k``, faster."""
    e = lp.token_id_entry(seq.ids[k], k, top) if as_ids else lp.chat_entry(seq.logprob_pieces()[k], k, top)
    if listed:
        e = lp.with_listed(e, k, listed)
    return b'{"content":[' + dumps(e) + b"]}"


def chunk_logprobs(seq, a: int, b: int, top: int, as_ids: bool, listed: list | None) -> bytes:
    """A chunk's ``logprobs`` for the tokens ``a..b-1`` it carries, serialised (l. 697-707)."""
    return b'{"content":' + dumps(token_entries(seq, a, b, top, as_ids, listed)) + b"}"
