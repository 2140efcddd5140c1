"""How a stream's renderer hands its waits to the server: the chunks due, then the deadline or
:class:`~generation.engine.token_schedule.TokenSchedule` that ``Simulator.stream`` yields with
``deadlines`` (the route's hub emitter drives them, :mod:`server.sse_emitter`).
"""
from __future__ import annotations

from functools import partial

from generation.engine.request import ClientDisconnected, SeqState
from generation.engine.token_schedule import TokenSchedule


def due_items(out: list, k) -> tuple:
    """What a renderer yields where its stream waits (``k``: FLUSH, a ``float`` deadline or a
    :class:`~generation.engine.token_schedule.TokenSchedule` from ``Simulator.stream``): the chunks rendered so
    far as one write, then the deadline or schedule for the server to drive.  Empties ``out``.
    A tuple, not a generator: it runs once per token of a real-time stream."""
    if out:
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return (data,) if k.__class__ is int else (data, k)
    return () if k.__class__ is int else (k,)


class Streamed:
    """How many tokens each choice of a stream has sent, for :func:`end_aborted`: those its
    renderer wrote (:attr:`counts`, by choice index, kept by the renderer's loop) and those its
    token schedules' driver sent (each schedule's ``next``).  Not the render calls: a driver
    renders a token's chunk ahead of its send (``server.sse_emitter``: the last token in an idle
    turn, step mode's next token while the engine steps)."""
    __slots__ = ("counts", "schedules")

    def __init__(self, n: int):
        self.counts = [0] * n
        self.schedules = []

    def hand(self, schedule: TokenSchedule, render, first, span=None) -> None:
        """Hand ``schedule`` to the server's hub, which emits its tokens with ``render(k)`` (token
        0's chunk ``first()``: :meth:`TokenSchedule.set_render`) and a stream interval's group
        with ``span(a, b)``; its sends count here (:meth:`sent`)."""
        schedule.set_render(render, first)
        if schedule.interval > 1 or schedule.group:     # (group: a step's accepted drafts)
            schedule.render_span = span
        self.schedules.append(schedule)

    def sent(self, index: int) -> int:
        n = self.counts[index]
        for sc in self.schedules:
            if sc.seq.index == index and sc.next > n:
                n = sc.next
        return n


def rendered_tokens(sim, seq, render, pending: list, streamed: Streamed | None = None):
    """The stream of ``seq`` (one sequence) whose tokens' bytes are ``render(k)`` (``k``: a token
    index, or a stream interval's ``slice``; called once per token, in order; ``b""`` for none):
    yields :func:`due_items`, its deadlines and token schedules for the server to drive (the hub
    emits a schedule's tokens calling ``render``, without resuming this generator: about half
    the CPU of a token, issue 32).  The last tokens' bytes are left in ``pending``; ``streamed``
    counts the tokens sent (:class:`Streamed`).

    A request the server aborted (``aborted_by_server``) ends here without raising, for the
    renderer to finish it (:func:`end_aborted`); a client that went away raises
    ClientDisconnected."""
    if streamed is None:
        streamed = Streamed(seq.index + 1)
    counts, i = streamed.counts, seq.index
    try:
        for _, k in sim.stream([seq], flush=True, deadlines=True, first_in_schedule=True):
            cls = k.__class__
            if cls is slice or (cls is int and k >= 0):
                data = render(k)
                if data:
                    pending.append(data)
                counts[i] = k.stop if cls is slice else k + 1
                continue
            if cls is TokenSchedule:
                streamed.hand(k, render, lambda: render(0), lambda a, b: render(slice(a, b)))
            yield from due_items(pending, k)
    except ClientDisconnected:
        if not seq.request.aborted_by_server:
            raise


def rendered_choices(sim, seqs, render, out: list, streamed: Streamed | None = None):
    """:func:`rendered_tokens` for one or more sequences, ``render(seq, k)``: one sequence's
    deadlines and token schedules go to the server; several sequences' tokens interleave as they
    come, per token (``Simulator.stream`` runs them in greenlets of their own), their chunks
    written at each flush.  The last tokens' bytes are left in ``out``; ``streamed`` counts the
    tokens sent (:class:`Streamed`).  A server abort ends it without raising, as there."""
    if len(seqs) == 1:
        yield from rendered_tokens(sim, seqs[0], partial(render, seqs[0]), out, streamed)
        return
    counts = streamed.counts if streamed is not None else None
    try:
        for seq, k in sim.stream(seqs, flush=True):
            cls = k.__class__
            if cls is int and k < 0:
                yield from due_items(out, k)
                continue
            data = render(seq, k)
            if data:
                out.append(data)
            if counts is not None:
                counts[seq.index] = k.stop if cls is slice else k + 1
    except ClientDisconnected:
        if not seqs[0].request.aborted_by_server:
            raise


def end_aborted(req, seqs, streamed: Streamed) -> frozenset:
    """After a stream's tokens: the indexes of the choices that the server's abort
    (``req.aborted_by_server``: abort_requests, checkpoint prepare mode=abort) cut before their
    last token went out, each now ending with the tokens it streamed (``streamed``) and
    ``finish_reason`` ``abort`` (:meth:`~generation.engine.request.Sequence.end_with_abort`), for
    the renderer to close with vLLM's abort output and count in its usage; none for any other
    request."""
    if not req.aborted_by_server:
        return frozenset()
    cut = []
    for s in seqs:
        i = s.index
        n = streamed.sent(i)
        if s.state == SeqState.ABORTED and not (n and n == len(s.ids)):
            s.end_with_abort(n)
            cut.append(i)
    return frozenset(cut)


def answer_aborted(seqs) -> None:
    """A non-streamed request the server aborted (``aborted_by_server``): each sequence it cut
    ends with the tokens it had made (``aborted_tokens``, what the metrics counted) and
    ``finish_reason`` ``abort``, vLLM's final output of an aborted request, for its route to
    render as any answer."""
    for s in seqs:
        if s.state == SeqState.ABORTED:
            s.end_with_abort(s.aborted_tokens or 0)
